"""Benchmark gradient generation (issue 2, 3 and 10 targets).

Measures ``core.api.gradient_for_net`` on:

* an MLP of N FC+Relu layers (N = 10, 100, 300, 1000, 3000): µs per forward op, beside
  the floor walk (:func:`bench.nets.floor_walk`: one protobuf op per forward op and one
  dict, no checks, the least any pass in Python does) and protobuf parse+serialize of the
  same NetDef;
* the real nets in ``../shared/realnets`` (when present), ``recompute=True``;
* nested control flow, depth 1…64 of alternating If/While/Do around ``Scale``.

Run from the repository root: ``python -m bench.bench_generation`` (``--quick`` for fewer
rounds). With ``--baseline DIR`` (a checkout of older code, e.g. ``mkdir DIR && git archive
<commit> | tar -x -C DIR``) both trees are timed in one run, side by side: each tree runs in
its own worker process (so both import their own ``core``), and the parent asks them in
turn, case by case and round by round, so both see the same machine load. In each round a
worker runs the case once to warm up, then times consecutive calls (about 50 ms, at least
3); a figure is the best call over all rounds. Prints Markdown tables; record the figures
in ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "realnets"
MLP_SIZES = (10, 100, 300, 1000, 3000)
DEPTHS = (1, 2, 4, 8, 16, 32, 64)
#: Each timing request times consecutive calls of its case for about this long...
TARGET_S = 0.05
#: ... and at least this many.
MIN_CALLS = 3


# --- worker side: runs in a process whose ``core`` is the tree under test -----------------
def _load_real(path: Path) -> Any:
    from api_schemas import caffe2_pb2
    from core.proto import codec

    if path.suffix == ".pb":
        return codec.from_binary(path.read_bytes(), caffe2_pb2.NetDef)
    return codec.from_text(path.read_text(), caffe2_pb2.NetDef)


def _case(name: str) -> tuple[Callable[[], object], int]:
    """The call a case times, and its forward op count."""
    from api_schemas import caffe2_pb2
    from bench.nets import mlp, nested_control
    from core.api import gradient_for_net
    from core.ir.env import GenLimits

    kind, _, arg = name.partition(":")
    if kind == "floor":
        from bench.nets import floor_walk

        floor_net = mlp(int(arg))
        return (lambda: floor_walk(floor_net, "loss")), len(floor_net.op)
    if kind in ("mlp", "proto"):
        net = mlp(int(arg))
        if kind == "proto":
            data = net.SerializeToString()

            def round_trip() -> object:
                n = caffe2_pb2.NetDef()
                n.ParseFromString(data)
                return n.SerializeToString()

            return round_trip, len(net.op)
        return (lambda: gradient_for_net(net, ["loss"])), len(net.op)
    if kind == "real":
        real = _load_real(SHARED / arg)
        ys = [real.external_output[0] if len(real.external_output) else real.op[-1].output[0]]
        return (lambda: gradient_for_net(real, ys, recompute=True)), len(real.op)
    if kind == "nested":
        nested = nested_control(int(arg))
        limits = GenLimits(max_depth=256)
        return (lambda: gradient_for_net(nested, ["y"], limits=limits)), len(nested.op)
    raise ValueError(name)


def worker() -> None:
    """Serve timing requests: one JSON line in (``{"case": name}``), one JSON line out.

    A request runs the case once (warm-up), then times consecutive calls for about
    :data:`TARGET_S` (at least :data:`MIN_CALLS`) and answers the best call: the old
    single-tree benchmark's "best of consecutive runs after a warm-up", per round.
    """
    import core

    print(json.dumps({"core": str(Path(core.__file__).resolve().parent)}), flush=True)
    cases: dict[str, tuple[Callable[[], object], int]] = {}
    for line in sys.stdin:
        name = json.loads(line)["case"]
        if name not in cases:
            fn, _ = cases[name] = _case(name)
            fn()
            t = time.perf_counter()
            fn()
            once = time.perf_counter() - t
            cases[name] = (fn, max(MIN_CALLS, int(TARGET_S / max(once, 1e-9))))
        fn, number = cases[name]
        fn()  # warm-up: this worker ran other cases since
        best = float("inf")
        for _ in range(number):
            t = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t)
        print(json.dumps({"s": best}), flush=True)


def probe(name: str) -> str | None:
    """``None`` when the current tree generates case ``name``, else the 4xx code."""
    from core.errors import NetgradError

    fn, _ = _case(name)
    try:
        fn()
    except NetgradError as exc:
        return exc.problems[0].code if exc.problems else type(exc).__name__
    return None


# --- parent side ---------------------------------------------------------------------------
class Worker:
    """A worker process answering timing requests (one JSON line in, one JSON line out).

    Its first line is a greeting (returned by :meth:`hello`); ``{"case": name}`` is answered
    with ``{"s": seconds}``.
    """

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str] | None = None,
                 label: str = "worker") -> None:
        self.label = label
        self.proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.hello = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{self.label}: worker died")
        return dict(json.loads(line))

    def time(self, case: str) -> float:
        """Seconds per call of ``case`` (one round)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"case": case}) + "\n")
        self.proc.stdin.flush()
        return float(self._read()["s"])

    def close(self) -> None:
        """Stop the worker."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


class Tree(Worker):
    """A worker process timing cases with the ``core`` of ``root``."""

    def __init__(self, label: str, root: Path) -> None:
        env = dict(os.environ, PYTHONPATH=str(root), PYTHONHASHSEED="0")
        # This file runs as the worker script in both trees (the baseline may predate it);
        # PYTHONPATH puts the tree's own ``core`` (and ``bench.nets``) first.
        super().__init__([sys.executable, str(Path(__file__).resolve()), "--worker"], root,
                         env, label)
        if Path(self.hello["core"]) != (root / "core").resolve():
            raise SystemExit(f"{label}: imported {self.hello['core']}, not {root / 'core'}")


#: Cases timed in the current tree only (a baseline may predate them).
CURRENT_ONLY = ("floor:",)


def measure(trees: list[Tree], cases: list[str], rounds: int) -> dict[tuple[str, str], float]:
    """Best time per (tree label, case), trees asked in turn, case by case, round by round
    (a :data:`CURRENT_ONLY` case by the last tree alone)."""
    best: dict[tuple[str, str], float] = {}
    for r in range(rounds):
        for case in cases:
            order = trees if (r + len(case)) % 2 == 0 else trees[::-1]
            if case.startswith(CURRENT_ONLY):
                order = trees[-1:]
            for tree in order:
                t = tree.time(case)
                key = (tree.label, case)
                best[key] = min(best.get(key, float("inf")), t)
    return best


def main() -> None:
    """Parse the command line, run the worker(s) and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--baseline", type=Path, help="checkout of the code to compare with")
    parser.add_argument("--only", choices=("mlp", "real", "nested"), help="one table only")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns.worker:
        worker()
        return
    rounds = 3 if ns.quick else 9
    sys.path.insert(0, str(REPO))
    from bench.nets import mlp

    trees = [Tree("netgrad", REPO)]
    if ns.baseline is not None:
        trees.insert(0, Tree("baseline", ns.baseline.resolve()))
    labels = [t.label for t in trees]
    try:
        if ns.only in (None, "mlp"):
            cases = [f"{kind}:{n}" for kind in ("mlp", "floor", "proto") for n in MLP_SIZES]
            best = measure(trees, cases, rounds)
            print("## MLP (FC + Relu) generation\n")
            head = " | ".join(f"{lb} µs / op" for lb in labels)
            print(f"| N layers | forward ops | {head} | floor walk µs / op | protobuf "
                  "parse+serialize µs / op |" + (" speed-up |" if len(trees) > 1 else ""))
            print("|---:|---:|" + "---:|" * (len(labels) + 2 + (len(trees) > 1)))
            for n in MLP_SIZES:
                ops = len(mlp(n).op)
                per = [best[(lb, f"mlp:{n}")] / ops * 1e6 for lb in labels]
                floor = best[(labels[-1], f"floor:{n}")] / ops * 1e6
                proto = best[(labels[-1], f"proto:{n}")] / ops * 1e6
                row = " | ".join(f"{p:.2f}" for p in per)
                extra = f" {per[0] / per[-1]:.2f}× |" if len(trees) > 1 else ""
                print(f"| {n} | {ops} | {row} | {floor:.2f} | {proto:.3f} |{extra}")
            for lb in labels:
                growth = best[(lb, "mlp:3000")] / best[(lb, "mlp:300")]
                print(f"\n{lb}: N = 300 → 3000 (10× the ops) took {growth:.1f}× the time.")
            floor_growth = best[(labels[-1], "floor:3000")] / best[(labels[-1], "floor:300")]
            print(f"floor walk (bench.nets.floor_walk, not a correct gradient): N = 300 → 3000 "
                  f"took {floor_growth:.1f}× the time.")
        if ns.only in (None, "real"):
            print("\n## Real nets (`recompute=True`)\n")
            if not SHARED.is_dir():
                print("(../shared/realnets absent: real nets skipped)")
            else:
                names = sorted(p.name for p in SHARED.iterdir() if p.suffix in (".pb", ".pbtxt"))
                failing = {n: probe(f"real:{n}") for n in names}
                ok = [n for n in names if failing[n] is None]
                best = measure(trees, [f"real:{n}" for n in ok], rounds)
                head = " | ".join(f"{lb} ms | {lb} µs / op" for lb in labels)
                speed = " speed-up |" if len(trees) > 1 else ""
                print(f"| net | forward ops | {head} |{speed} note |")
                rule = "---:|---:|" * len(labels) + ("---:|" if speed else "")
                print(f"|---|---:|{rule}---|")
                for net_name in names:
                    ops = len(_load_real(SHARED / net_name).op)
                    if failing[net_name] is not None:
                        cells = " | ".join("- | -" for _ in labels) + (" | -" if speed else "")
                        print(f"| {net_name} | {ops} | {cells} | 4xx: {failing[net_name]} |")
                        continue
                    t = [best[(lb, f"real:{net_name}")] for lb in labels]
                    cells = " | ".join(f"{x * 1e3:.2f} | {x / ops * 1e6:.2f}" for x in t)
                    extra = f" {t[0] / t[-1]:.2f}× |" if speed else ""
                    print(f"| {net_name} | {ops} | {cells} |{extra} |")
        if ns.only in (None, "nested"):
            print("\n## Nested control flow\n")
            best = measure(trees, [f"nested:{d}" for d in DEPTHS], rounds)
            head = " | ".join(f"{lb} ms | {lb} ms / level" for lb in labels)
            print(f"| depth | {head} |")
            print("|---:|" + "---:|---:|" * len(labels))
            for d in DEPTHS:
                t = [best[(lb, f"nested:{d}")] * 1e3 for lb in labels]
                cells = " | ".join(f"{x:.2f} | {x / d:.3f}" for x in t)
                print(f"| {d} | {cells} |")
    finally:
        for tree in trees:
            tree.close()


if __name__ == "__main__":
    main()
