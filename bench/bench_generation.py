"""Benchmark gradient generation (issue 2 and 3 targets).

Measures, best of several runs, ``core.api.gradient_for_net`` on:

* an MLP of N FC+Relu layers (N = 10, 100, 300, 1000, 3000): µs per forward op, and the
  ratio to protobuf parse+serialize of the same NetDef;
* the real nets in ``../shared/realnets`` (when present);
* nested control flow, depth 1…64 of alternating If/While/Do around ``Scale``.

Run from the repository root: ``python -m bench.bench_generation`` (``--quick`` for fewer
repeats). Prints Markdown tables; record the figures in ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from api_schemas import caffe2_pb2
from bench.nets import mlp, nested_control
from core.api import gradient_for_net
from core.errors import NetgradError
from core.ir.env import GenLimits
from core.proto import codec

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "realnets"


def best_of(fn: Callable[[], object], repeats: int) -> float:
    """Best wall-clock time of ``fn`` in seconds over ``repeats`` runs (after one warm-up)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def proto_round_trip(net: caffe2_pb2.NetDef) -> Callable[[], object]:
    data = net.SerializeToString()

    def run() -> object:
        n = caffe2_pb2.NetDef()
        n.ParseFromString(data)
        return n.SerializeToString()

    return run


def bench_mlp(repeats: int) -> None:
    print("| N layers | forward ops | µs / forward op | protobuf parse+serialize µs / op | ratio |")
    print("|---:|---:|---:|---:|---:|")
    for n in (10, 100, 300, 1000, 3000):
        net = mlp(n)
        t = best_of(lambda net=net: gradient_for_net(net, ["loss"]), repeats)
        p = best_of(proto_round_trip(net), repeats)
        ops = len(net.op)
        print(f"| {n} | {ops} | {t / ops * 1e6:.2f} | {p / ops * 1e6:.3f} | {t / p:.0f}× |")


def bench_realnets(repeats: int) -> None:
    if not SHARED.is_dir():
        print("(../shared/realnets absent: real nets skipped)")
        return
    print("| net | forward ops | ys | ms | µs / forward op | ratio to parse+serialize |")
    print("|---|---:|---|---:|---:|---:|")
    for path in sorted(SHARED.iterdir()):
        if path.suffix == ".pb":
            net = codec.from_binary(path.read_bytes(), caffe2_pb2.NetDef)
        elif path.suffix == ".pbtxt":
            net = codec.from_text(path.read_text(), caffe2_pb2.NetDef)
        else:
            continue
        ys = [net.external_output[0] if len(net.external_output) else net.op[-1].output[0]]
        try:
            gradient_for_net(net, ys, recompute=True)
        except NetgradError as exc:
            code = exc.problems[0].code
            print(f"| {path.name} | {len(net.op)} | {ys[0]} | - | - | 4xx: {code} |")
            continue
        t = best_of(lambda net=net, ys=ys: gradient_for_net(net, ys, recompute=True), repeats)
        p = best_of(proto_round_trip(net), repeats)
        print(
            f"| {path.name} | {len(net.op)} | {ys[0]} | {t * 1e3:.2f} | "
            f"{t / len(net.op) * 1e6:.2f} | {t / p:.0f}× |"
        )


def bench_nested(repeats: int) -> None:
    print("| depth | ms | ms per level |")
    print("|---:|---:|---:|")
    limits = GenLimits(max_depth=256)
    for depth in (1, 2, 4, 8, 16, 32, 64):
        net = nested_control(depth)
        t = best_of(lambda net=net: gradient_for_net(net, ["y"], limits=limits), repeats)
        print(f"| {depth} | {t * 1e3:.2f} | {t * 1e3 / depth:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    ns = parser.parse_args()
    repeats = 2 if ns.quick else 7
    print("## MLP (FC + Relu) generation\n")
    bench_mlp(repeats)
    print("\n## Real nets\n")
    bench_realnets(repeats)
    print("\n## Nested control flow\n")
    bench_nested(repeats)


if __name__ == "__main__":
    main()
