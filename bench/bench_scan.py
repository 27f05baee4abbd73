"""The streaming JSON scan of large bodies (``core.proto.jsonscan``), in process.

Times feeding a body in 64 KiB chunks (as uvicorn hands them over) to :class:`JsonScan`
and :class:`BoundedScan` with the service's default limits, beside ``json.loads`` of the
same bytes, on a valid chain of 20,000 Relu / Tanh ops (1.2 MB), the hostile 200,000 FC ops
of ``bench_http`` (21 MB, 400,000 objects: past the bounded scan's bound of 200,000 ops, so
it scans) and five hostile bodies of 16 MiB of one tiny token (past the depth bound).
``--baseline DIR`` times that checkout's ``JsonScan`` (and its ``BoundedScan``, where it
has one) in the same rounds. Best of ``--rounds`` rounds, ms.

Run from the repository root: ``python -m bench.bench_scan [--baseline DIR]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.bench_http import chain_json, many_ops_json
from core.proto import jsonscan

CHUNK = 64 * 1024
LIMITS = (200_000, 128, 2_000_000)  # max_ops, max_depth, max_json_containers (defaults)


def _module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("baseline_jsonscan", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # (its dataclasses look their module up)
    spec.loader.exec_module(mod)
    return mod


def _time(cls: Any, chunks: list[bytes]) -> float:
    t = time.perf_counter()
    scan = cls(*LIMITS)
    for c in chunks:
        scan.feed(c)
    return (time.perf_counter() - t) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--baseline", type=Path, help="a second netgrad checkout")
    parser.add_argument("--rounds", type=int, default=3)
    ns = parser.parse_args()
    scanners: list[tuple[str, Any]] = []
    if ns.baseline is not None:
        base = _module(ns.baseline / "core" / "proto" / "jsonscan.py")
        scanners.append(("baseline JsonScan", base.JsonScan))
        if hasattr(base, "BoundedScan"):
            scanners.append(("baseline BoundedScan", base.BoundedScan))
    scanners += [("JsonScan", jsonscan.JsonScan), ("BoundedScan", jsonscan.BoundedScan)]
    # (hostile bodies of tiny tokens: 130 "n" in a string cross the depth bound, so the
    # bounded scan scans them; then 16 MiB of one token repeated)
    trigger = b'{"z": "' + b'"n"' * 130 + b'", "a": ['
    mib16 = 16 * 1024 * 1024
    bodies = [("20,000 Relu/Tanh ops, valid", chain_json(20_000)),
              ("200,000 FC ops, the last output a number", many_ops_json(200_000)),
              ('16 MiB of `"",` in an array', trigger + b'"",' * (mib16 // 3)),
              ("16 MiB of `:`", trigger + b":" * mib16),
              ("16 MiB of `]`", trigger + b"]" * mib16),
              ('16 MiB of `"x":` in an array', trigger + b'"x":' * (mib16 // 4)),
              ('16 MiB of `"a":"b",` in an object', trigger[:-1] + b'{' + b'"a":"b",' * (
                  mib16 // 8))]
    print("| body | bytes | " + " | ".join(n for n, _ in scanners) + " | json.loads |")
    print("|---|---:|" + "---:|" * (len(scanners) + 1))
    for name, body in bodies:
        chunks = [body[k:k + CHUNK] for k in range(0, len(body), CHUNK)]
        best: dict[str, float] = {}
        for _ in range(ns.rounds):  # interleaved, round by round
            for label, cls in scanners:
                best[label] = min(best.get(label, float("inf")), _time(cls, chunks))
            t = time.perf_counter()
            try:
                json.loads(body)
            except ValueError:  # (the hostile bodies are no JSON: the time to refuse them)
                pass
            best["json.loads"] = min(best.get("json.loads", float("inf")),
                                     (time.perf_counter() - t) * 1e3)
        cells = " | ".join(f"{best[n]:.1f}" for n, _ in scanners)
        print(f"| {name} | {len(body)} | {cells} | {best['json.loads']:.1f} |")


if __name__ == "__main__":
    main()
