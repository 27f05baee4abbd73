"""Gradient generation against ONNX Runtime's ``GradientGraphBuilder`` (issue 10, optional).

What: netgrad's ``gradient_for_net`` on the MLP of :mod:`bench.nets` (N ``FC`` + in-place
``Relu`` layers, then ``Softmax`` and ``AveragedLoss``) against ONNX Runtime's C++
``GradientGraphBuilder`` (``build()``) on the equivalent ONNX MLP (N ``MatMul`` + ``Add`` +
``Relu`` layers, then ``Softmax`` and ``ReduceMean``), gradients asked for the input and every
weight and bias in both. Both run in worker processes asked in turn, case by case and round
by round (see :mod:`bench.bench_generation`); a figure is the best call.

ONNX Runtime needs its own virtual environment (onnxruntime-training pins its own NumPy and
protobuf), for example::

    python3 -m venv /tmp/ortvenv
    /tmp/ortvenv/bin/pip install onnxruntime-training==1.19.2 onnx
    .venv/bin/python -m bench.bench_ort --ort-python /tmp/ortvenv/bin/python

Run from the repository root (``--quick`` for fewer rounds). The worker that runs in the
ONNX Runtime environment is this file itself, started with ``--ort-worker``; it imports
nothing from netgrad.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SIZES = (10, 100, 300, 1000, 3000)
#: Each timing request times consecutive calls for about this long, and at least 3.
TARGET_S = 0.05


def _onnx_mlp(n_layers: int, width: int = 8) -> tuple[bytes, set[str]]:
    """The ONNX MLP of ``n_layers`` and the names to differentiate (input, weights, biases)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, xs = [], [], {"data"}
    x = "data"
    for i in range(n_layers):
        w, b = f"fc{i}_w", f"fc{i}_b"
        weights = rng.standard_normal((width, width)).astype(np.float32)
        inits.append(numpy_helper.from_array(weights, w))
        inits.append(numpy_helper.from_array(np.zeros(width, np.float32), b))
        xs.update((w, b))
        nodes.append(helper.make_node("MatMul", [x, w], [f"mm{i}"]))
        nodes.append(helper.make_node("Add", [f"mm{i}", b], [f"fc{i}"]))
        nodes.append(helper.make_node("Relu", [f"fc{i}"], [f"relu{i}"]))
        x = f"relu{i}"
    nodes.append(helper.make_node("Softmax", [x], ["prob"], axis=1))
    nodes.append(helper.make_node("ReduceMean", ["prob"], ["loss"], keepdims=0))
    graph = helper.make_graph(
        nodes,
        f"mlp{n_layers}",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, [2, width])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString(), xs


def ort_worker() -> None:
    """Serve ``{"case": "ort:N"}`` requests in the ONNX Runtime environment."""
    from onnxruntime.capi import _pybind_state as ort

    ort.set_default_logger_severity(3)
    options = ort.SessionOptions()
    options.log_severity_level = 3  # no per-build info lines from the graph transformers
    print(json.dumps({"ready": True}), flush=True)
    cases: dict[str, tuple[Any, int]] = {}
    for line in sys.stdin:
        name = json.loads(line)["case"]
        n = int(name.partition(":")[2])
        if name not in cases:
            model, xs = _onnx_mlp(n)

            def build(model: bytes = model, xs: set[str] = xs) -> None:
                builder = ort.GradientGraphBuilder(model, {"loss"}, xs, "loss", options)
                builder.build()

            build()
            t = time.perf_counter()
            build()
            once = time.perf_counter() - t
            cases[name] = (build, max(3, int(TARGET_S / max(once, 1e-9))))
        fn, number = cases[name]
        fn()
        best = float("inf")
        for _ in range(number):
            t = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t)
        print(json.dumps({"s": best}), flush=True)


def main() -> None:
    """Parse the command line, run both workers and print the table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ort-python", type=Path, help="python of the ONNX Runtime venv")
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--ort-worker", action="store_true", help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns.ort_worker:
        ort_worker()
        return
    if ns.ort_python is None:
        parser.error("--ort-python is required (see the module docstring)")
    rounds = 3 if ns.quick else 9
    sys.path.insert(0, str(REPO))
    import os

    from bench.bench_generation import Worker  # not at top: the ORT worker runs this file
    from bench.nets import mlp

    netgrad = Worker(
        [sys.executable, str(REPO / "bench" / "bench_generation.py"), "--worker"],
        REPO,
        dict(os.environ, PYTHONPATH=str(REPO)),
    )
    ort = Worker([str(ns.ort_python), str(Path(__file__).resolve()), "--ort-worker"], REPO)
    best: dict[tuple[str, int], float] = {}
    try:
        for r in range(rounds):
            for n in SIZES:
                pair = [("netgrad", f"mlp:{n}", netgrad), ("ort", f"ort:{n}", ort)]
                for label, case, worker in pair if r % 2 == 0 else pair[::-1]:
                    t = worker.time(case)
                    best[(label, n)] = min(best.get((label, n), float("inf")), t)
    finally:
        netgrad.close()
        ort.close()
    print("| N layers | netgrad ops | netgrad ms | netgrad µs / op | ORT ops | ORT ms | "
          "ORT µs / op | ORT ÷ netgrad (same MLP) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in SIZES:
        ng_ops, ort_ops = len(mlp(n).op), 3 * n + 2
        ng, ot = best[("netgrad", n)], best[("ort", n)]
        print(f"| {n} | {ng_ops} | {ng * 1e3:.2f} | {ng / ng_ops * 1e6:.2f} | {ort_ops} | "
              f"{ot * 1e3:.2f} | {ot / ort_ops * 1e6:.2f} | {ot / ng:.1f}× |")


if __name__ == "__main__":
    main()
