"""Benchmark: executor overhead and fast vs full numeric verification.

Run from the repository root::

    python bench/bench_executor.py            # full run (~3-4 min: full mode at 10^5)
    python bench/bench_executor.py --quick    # fewer repeats, no 10^5 full-mode run

(a) A small conv net (Conv 3x3 -> Relu -> MaxPool 2x2 -> FC) run three ways: by the
    executor (``core.executor.executor.execute``), by calling the registry's kernels directly
    in sequence (the executor's pure dispatch overhead), and by a hand-written NumPy forward
    with the same maths (``sliding_window_view`` + ``einsum``). Target: executor / hand-written
    <= 1.3x.
(b) ``verify_net`` in fast mode (3 passes) and full mode on one input of 10^3, 10^4 and
    10^5 elements (net: ``y = Tanh(Scale(x))``). Fast-mode cost should not grow with the input
    size beyond the kernels' own O(n) work; full mode grows with n (2 forward runs per
    element).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from api_schemas import caffe2_pb2  # noqa: E402
from core.executor.executor import _ensure_loaded, execute  # noqa: E402
from core.executor.limits import RunLimits  # noqa: E402
from core.registry import get_kernel, make_arg, make_op  # noqa: E402
from core.verify import InputSpec, RandomSpec, VerifyOptions, verify_net  # noqa: E402


def _time(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``fn`` in milliseconds (after one warm-up call)."""
    fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def conv_net() -> tuple[caffe2_pb2.NetDef, dict[str, np.ndarray]]:
    """Conv(3->16, 3x3, pad 1) -> Relu -> MaxPool(2x2, stride 2) -> FC(16*16*16 -> 10)."""
    rng = np.random.default_rng(0)
    feeds = {
        "data": rng.standard_normal((8, 3, 32, 32)).astype(np.float32),
        "conv_w": (rng.standard_normal((16, 3, 3, 3)) * 0.1).astype(np.float32),
        "conv_b": np.zeros(16, np.float32),
        "fc_w": (rng.standard_normal((10, 16 * 16 * 16)) * 0.01).astype(np.float32),
        "fc_b": np.zeros(10, np.float32),
    }
    net = caffe2_pb2.NetDef(name="small_conv")
    net.op.extend([
        make_op("Conv", ["data", "conv_w", "conv_b"], ["conv"],
                [make_arg("kernel", 3), make_arg("pad", 1)]),
        make_op("Relu", ["conv"], ["relu"]),
        make_op("MaxPool", ["relu"], ["pool"], [make_arg("kernel", 2), make_arg("stride", 2)]),
        make_op("FC", ["pool", "fc_w", "fc_b"], ["out"]),
    ])
    return net, feeds


def numpy_forward(f: dict[str, np.ndarray]) -> np.ndarray:
    """The same net written by hand in NumPy."""
    x = np.pad(f["data"], ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = sliding_window_view(x, (3, 3), axis=(2, 3))  # N, C, H, W, kh, kw
    conv = np.einsum("nchwij,ocij->nohw", win, f["conv_w"], optimize=True)
    conv += f["conv_b"][None, :, None, None]
    relu = np.maximum(conv, 0)
    n, c, h, w = relu.shape
    pool = relu.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))
    return pool.reshape(n, -1) @ f["fc_w"].T + f["fc_b"]


def direct_kernels(net: caffe2_pb2.NetDef, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """The registry kernels called in sequence, without the executor."""
    blobs = dict(feeds)
    for op in net.op:
        kernel = get_kernel(op.type)
        assert kernel is not None
        outs = kernel(op, [blobs[n] for n in op.input])
        blobs[op.output[0]] = outs[0]
    return blobs["out"]


def bench_executor(repeats: int) -> None:
    _ensure_loaded()
    net, feeds = conv_net()
    ref = numpy_forward(feeds)
    got = execute(net, feeds, fetch=["out"])["out"]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    t_np = _time(lambda: numpy_forward(feeds), repeats)
    t_k = _time(lambda: direct_kernels(net, feeds), repeats)
    t_ex = _time(lambda: execute(net, feeds, fetch=["out"]), repeats)
    print("(a) small conv net, batch 8x3x32x32, float32 (median of", repeats, "runs)")
    print(f"{'variant':<28}{'ms':>10}{'vs NumPy':>10}")
    for name, t in (("hand-written NumPy", t_np), ("registry kernels, direct", t_k),
                    ("executor (execute)", t_ex)):
        print(f"{name:<28}{t:>10.2f}{t / t_np:>9.2f}x")
    print(f"executor dispatch overhead vs direct kernels: {t_ex / t_k:.3f}x")
    print()


def bench_verify(quick: bool) -> None:
    print("(b) verify_net, y = Tanh(Scale(x, 0.5)), float64")
    print("net runs per check: fast = 2 + 2*passes (constant), full = 2 + 2*n")
    print(f"{'elements':>10}{'fast runs':>11}{'fast ms':>10}{'full runs':>11}{'full ms':>12}"
          f"{'full/fast':>11}")
    for n in (10**3, 10**4, 10**5):
        net = caffe2_pb2.NetDef(name="ew")
        net.op.extend([make_op("Scale", ["x"], ["h"], [make_arg("scale", 0.5)]),
                       make_op("Tanh", ["h"], ["y"])])
        opts = VerifyOptions(inputs=[InputSpec("x", random=RandomSpec([n], seed=1))])
        t_fast = _time(lambda o=opts, nt=net: verify_net(nt, ["y"], o), 3)
        if quick and n == 10**5:
            print(f"{n:>10}{8:>11}{t_fast:>10.1f}{2 + 2 * n:>11}{'skipped':>12}")
            continue
        full = VerifyOptions(inputs=opts.inputs, mode="full")
        t0 = time.perf_counter()
        res = verify_net(net, ["y"], full, limits=RunLimits(wall_clock_s=3600))
        t_full = (time.perf_counter() - t0) * 1e3
        assert res.report.passed
        print(f"{n:>10}{8:>11}{t_fast:>10.1f}{2 + 2 * n:>11}{t_full:>12.1f}"
              f"{t_full / t_fast:>10.0f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, skip 10^5 full")
    args = parser.parse_args()
    bench_executor(10 if args.quick else 50)
    bench_verify(args.quick)


if __name__ == "__main__":
    main()
