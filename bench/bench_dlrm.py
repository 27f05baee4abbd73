"""Benchmark gradient generation on the DLRM-style training net (issue 8 target).

Times ``core.api.gradient_for_net(net, ["loss"])`` on ``tests/data/dlrm_train_net.pbtxt``
(3 embedding tables, 18 forward ops) and on the same layout with 26 tables (Criteo's 26
sparse features; built by ``tests.data.make_training_nets.dlrm_net``). Reports µs per
forward op (target: <= 15 µs) and, side by side in the same run, the same figure for the
MLP of ``bench.nets.mlp`` with a similar op count, so the ratio is free of machine load.

Each figure is the best of ``--rounds`` rounds, the DLRM and MLP rounds interleaved; a
round warms up once, then times consecutive calls for about 50 ms. The DLRM net needs
gradient makers for ``BatchMatMul`` and ``SigmoidCrossEntropyWithLogits``; without them
the script says so and exits 2.

Run from the repository root: ``python -m bench.bench_dlrm [--rounds N]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

TARGET_S = 0.05


def _round_us(fn: Callable[[], object]) -> float:
    """One round: a warm-up call, then µs per call over about ``TARGET_S`` (>= 3 calls)."""
    fn()
    n, start = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= TARGET_S and n >= 3:
            return elapsed / n * 1e6


def _best_pair_us(
    a: Callable[[], object], b: Callable[[], object], rounds: int
) -> tuple[float, float]:
    """Best µs per call of ``a`` and of ``b``, their rounds interleaved (same machine load)."""
    best_a = best_b = float("inf")
    for _ in range(rounds):
        best_a = min(best_a, _round_us(a))
        best_b = min(best_b, _round_us(b))
    return best_a, best_b


def main(argv: list[str] | None = None) -> int:
    """Print a Markdown table of µs per forward op; exit 2 when the net cannot be made."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ns = ap.parse_args(argv)

    from bench.nets import mlp
    from core.api import gradient_for_net
    from core.errors import NetgradError
    from core.ops import load_all
    from tests.data import make_training_nets as nets

    load_all()
    cases = [
        ("DLRM (tests/data, 3 tables)", nets.load(nets.DLRM_FILE)),
        ("DLRM, 26 tables", nets.dlrm_net(n_tables=26, top_hidden=64)),
    ]
    try:
        for _, net in cases:
            gradient_for_net(net, ["loss"])
    except NetgradError as exc:
        print(f"cannot generate the DLRM gradient here: {exc.message}", file=sys.stderr)
        return 2
    print("| net | forward ops | µs / forward op | MLP of as many ops, µs / op | ratio |")
    print("|---|---:|---:|---:|---:|")
    for label, net in cases:
        n_ops = len(net.op)
        ref = mlp(max(1, (n_ops - 2) // 2))
        us, ref_us = _best_pair_us(
            lambda net=net: gradient_for_net(net, ["loss"]),
            lambda ref=ref: gradient_for_net(ref, ["loss"]),
            ns.rounds,
        )
        us, ref_us = us / n_ops, ref_us / len(ref.op)
        print(f"| {label} | {n_ops} | {us:.2f} | {ref_us:.2f} | {us / ref_us:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
