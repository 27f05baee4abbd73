"""The streaming JSON scan (:mod:`core.proto.jsonscan`) counts what the decoder would find.

Random bodies (seeded) with ops, sub-nets (``n`` / ``nets``), strings that hold quotes,
braces and backslashes, keys that name ops or sub-nets in the wrong places and bodies cut
anywhere, fed in chunks of every size:

* :class:`JsonScan`'s op, sub-net and container counts equal those of a walk over the
  ``json.loads`` tree (the scan reads whole flat arrays and shallow objects as one token);
* :class:`BoundedScan` refuses exactly what :class:`JsonScan` refuses, at the same chunk and
  with the same problem (it scans only once a byte count says a limit could be crossed),
  except bracket nesting past :data:`MAX_NESTING`, which it leaves to ``json.loads``.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from core.errors import LimitExceededError
from core.proto import jsonscan
from core.proto.jsonscan import BoundedScan, JsonScan

WORDS = ["a", "n", "nets", "op", "type", "name", 'x"}', "{[", "]}", "\\", "é", "", ":", "op\\"]
KEYS = ["type", "name", "input", "output", "arg", "n", "nets", "op", "i", "ints", "s", "x"]


def _value(r: random.Random, d: int) -> Any:
    k = r.random()
    if d > 7 or k < 0.3:
        return r.choice([1, 2.5, None, True, r.choice(WORDS), -3])
    if k < 0.55:
        return [_value(r, d + 1) for _ in range(r.randint(0, 4))]
    if k < 0.7:
        return _net(r, d + 1)
    return {r.choice(KEYS): _value(r, d + 1) for _ in range(r.randint(0, 4))}


def _op(r: random.Random, d: int) -> dict[str, Any]:
    op: dict[str, Any] = {"type": r.choice(["Do", "If", "FC", 'x"}']),
                          "input": [r.choice(WORDS)], "output": ["y"]}
    args = []
    for _ in range(r.randint(0, 3)):
        a: dict[str, Any] = {"name": r.choice(["net", "then_net", "k", "n"])}
        q = r.random()
        if q < 0.35 and d < 9:
            a["n"] = _net(r, d + 1)
        elif q < 0.5 and d < 9:
            a["nets"] = [_net(r, d + 1) for _ in range(r.randint(0, 2))]
        else:
            a["ints"] = [1, 2]
        if r.random() < 0.4:  # (a string pair beside "name": a run of pairs)
            a["s"] = r.choice(WORDS)
        items = list(a.items())
        if r.random() < 0.5:
            r.shuffle(items)
        args.append(dict(items))
    if args:
        op["arg"] = args
    if r.random() < 0.1:
        op["x"] = _value(r, d + 1)
    if r.random() < 0.3:  # runs of string-valued pairs, "type" and "name" among them
        extra = [("name", r.choice(WORDS)), ("engine", "CUDNN"), ("s", r.choice(WORDS)),
                 ("type", r.choice(["Relu", "Do"]))]
        items = list(op.items()) + r.sample(extra, r.randint(1, 4))
        r.shuffle(items)
        op = dict(items)
    return op


def _net(r: random.Random, d: int) -> dict[str, Any]:
    return {"op": [_op(r, d) for _ in range(r.randint(0, 3))]}


def _body(r: random.Random) -> Any:
    q = r.random()
    if q < 0.7:
        return {"net": _net(r, 0), "ys": ["y"]}
    if q < 0.85:
        return {"op": _op(r, 0), "g_output": ["g"]}
    return _value(r, 0)


def _reference(tree: Any) -> tuple[int, int, int]:
    """(ops, sub-nets, containers) as the scan defines them, from the decoded tree."""
    ops = subnets = containers = 0
    stack: list[tuple[Any, str]] = [(tree, "")]
    while stack:
        node, key = stack.pop()
        if isinstance(node, dict):
            containers += 1
            ops += key == "op"
            subnets += key in ("n", "nets")
            stack.extend((v, k) for k, v in node.items())
        elif isinstance(node, list):
            containers += 1
            stack.extend((v, key) for v in node)  # an array's elements keep its key
    return ops, subnets, containers


class _Refused(Exception):
    pass


def _first_refusal(tree: Any, limits: tuple[int, int, int], nesting: int,
                   ascii_only: bool) -> tuple[str, str | None, int | None, str | None] | None:
    """The scan's first refusal of ``json.dumps(tree)`` worked out on the decoded tree, in
    document order: ``(code, path, op_index, op_type)``, or ``None``. An op's type and an
    object's ``name`` count only where given (as strings) before the key descended into, as
    the scan reads them as they stream by; an array's element index counts containers only;
    names are as written in the JSON text (escapes kept)."""
    max_ops, max_depth, max_containers = limits
    counts = {"ops": 0, "subnets": 0, "containers": 0}

    def text(value: str) -> str:
        return json.dumps(value, ensure_ascii=ascii_only)[1:-1]

    def visit(node: Any, key: str, parent: dict[str, Any] | None,
              stack: list[dict[str, Any]]) -> None:
        if not isinstance(node, (dict, list)):
            return
        if len(stack) >= nesting:
            raise _Refused(("nesting_too_deep", None, None, None))
        counts["containers"] += 1
        if counts["containers"] > max_containers:
            raise _Refused(("too_many_values", None, None, None))
        frame: dict[str, Any] = {"obj": isinstance(node, dict), "key": key, "op_index": -1,
                                 "op_type": "", "name": "", "children": 0,
                                 "depth": parent["depth"] if parent else 0,
                                 "path": parent["path"] if parent else ""}
        if parent is not None and not parent["obj"]:
            parent["children"] += 1
        if frame["obj"] and parent is not None and key == "op":
            frame["op_index"] = parent["children"] - 1 if not parent["obj"] else 0
            counts["ops"] += 1
            if counts["ops"] > max_ops:
                raise _Refused(("too_many_ops", None, None, None))
        elif frame["obj"] and parent is not None and key in ("n", "nets"):
            counts["subnets"] += 1
            if counts["subnets"] > max_ops:
                raise _Refused(("too_many_subnets", None, None, None))
            op = next((f for f in reversed(stack) if f["op_index"] >= 0), None)
            arg = next((f for f in reversed(stack) if f["obj"] and f["name"]), None)
            prefix = f"{op['path']}/" if op is not None and op["path"] else ""
            part = f"op[{op['op_index']}]:{op['op_type']}" if op is not None else "op[?]"
            name = arg["name"] if arg is not None else "?"
            frame["depth"] += 1
            frame["path"] = (f"{prefix}{part}/{name}[{parent['children'] - 1}]"
                             if key == "nets" else f"{prefix}{part}/{name}")
            if frame["depth"] > max_depth:
                raise _Refused(("nesting_too_deep", frame["path"],
                                op["op_index"] if op else None, op["op_type"] if op else None))
        stack.append(frame)
        if isinstance(node, dict):
            for k, v in node.items():
                visit(v, k, frame, stack)
                if k == "type" and isinstance(v, str) and frame["op_index"] >= 0:
                    frame["op_type"] = text(v)
                elif k == "name" and isinstance(v, str):
                    frame["name"] = text(v)
        else:
            for v in node:
                visit(v, key, frame, stack)
        stack.pop()

    try:
        visit(tree, "", None, [])
    except _Refused as exc:
        return exc.args[0]  # type: ignore[no-any-return]
    return None


def test_scan_refuses_as_a_walk_of_the_decoded_body_works_out(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    r = random.Random(20261228)
    refused = 0
    for _ in range(1500):
        nesting = r.choice([4, 6, 9, 5000])
        monkeypatch.setattr(jsonscan, "MAX_NESTING", nesting)
        tree = _body(r)
        ascii_only = r.random() < 0.5
        body = json.dumps(tree, separators=r.choice([(",", ":"), (", ", ": ")]),
                          ensure_ascii=ascii_only).encode()
        limits = (r.choice([1, 2, 5, 100]), r.choice([0, 1, 2, 8]), r.choice([5, 12, 1000]))
        want = _first_refusal(tree, limits, nesting, ascii_only)
        refused += want is not None
        for size in (r.choice([1, 2, 3, 7]), 64, len(body) + 1):
            got = _outcome(JsonScan(*limits), _chunks(body, size))
            assert (got[2], got[4], got[5], got[6]) == want if want else got == ("taken",), (
                body, limits, size, got, want)
    assert refused > 300


def _chunks(b: bytes, size: int) -> list[bytes]:
    return [b[k:k + size] for k in range(0, len(b), size)] or [b""]


def _outcome(scan: JsonScan | BoundedScan, chunks: list[bytes]) -> tuple[Any, ...]:
    for i, c in enumerate(chunks):
        try:
            scan.feed(c)
        except LimitExceededError as exc:
            p = exc.problems[0]
            return ("refused", i, p.code, p.message, p.path, p.op_index, p.op_type)
    return ("taken",)


def test_scan_counts_equal_a_walk_of_the_decoded_body() -> None:
    r = random.Random(20261227)
    for _ in range(500):
        tree = _body(r)
        seps = r.choice([(", ", ": "), (",", ":"), (" , ", " :\n ")])
        body = json.dumps(tree, separators=seps, ensure_ascii=r.random() < 0.5).encode()
        expected = _reference(tree)
        for size in (1 if len(body) < 800 else 3, 5, 64, len(body) + 1):
            scan = JsonScan(max_ops=10**6, max_depth=10**3, max_containers=10**6)
            for c in _chunks(body, size):
                scan.feed(c)
            assert (scan.ops, scan.subnets, scan.containers) == expected, (body, size)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_bounded_scan_refuses_what_the_full_scan_refuses(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = random.Random(20261227 + seed)
    refused = taken = 0
    for _ in range(2500):
        monkeypatch.setattr(jsonscan, "MAX_NESTING", r.choice([3, 5, 9, 5000]))
        body = json.dumps(_body(r), separators=r.choice([(",", ":"), (", ", ": ")])).encode()
        if r.random() < 0.1:  # cut, with a stray byte
            cut = r.randint(0, len(body))
            body = body[:cut] + r.choice([b"", b'"', b"\\", b"{", b"]"]) + body[cut:]
        chunks = _chunks(body, r.choice([1, 2, 3, 7, 64, len(body) + 1]))
        limits = (r.choice([1, 2, 5, 100]), r.choice([0, 1, 2, 8]), r.choice([3, 10, 1000]))
        full = _outcome(JsonScan(*limits), chunks)
        bounded = _outcome(BoundedScan(*limits), chunks)
        if full[0] == "refused" and "objects and arrays" in full[3]:
            continue  # bracket nesting: json.loads refuses it where no scan runs
        assert bounded == full, (body, limits)
        refused += full[0] == "refused"
        taken += full[0] == "taken"
    assert refused > 150 and taken > 150  # both kinds of body were tried


def test_bounded_scan_runs_no_scan_below_its_bounds() -> None:
    ops = [{"type": "Relu", "input": [f"b{k}"], "output": [f"b{k + 1}"]} for k in range(999)]
    body = json.dumps({"net": {"op": ops}, "ys": ["b999"]}).encode()
    quiet = BoundedScan(max_ops=1000, max_depth=2, max_containers=10_000)
    for c in _chunks(body, 4096):
        quiet.feed(c)
    assert quiet.scan is None  # 1,000 objects: 999 ops at most
    assert sum(map(len, quiet._kept)) == len(body)  # kept (referenced) until the body ends
    quiet.close()
    assert quiet._kept == []
    crossed = BoundedScan(max_ops=998, max_depth=2, max_containers=10_000)
    with pytest.raises(LimitExceededError) as info:
        for c in _chunks(body, 4096):
            crossed.feed(c)
    assert info.value.problems[0].code == "too_many_ops" and crossed.scan is not None


def test_a_subnet_key_cut_by_every_chunk_boundary_is_counted() -> None:
    body = json.dumps({"op": {"type": "Do", "arg": [{"name": "net", "nets": [{"op": []}]}]},
                       "g_output": []}).encode()
    for size in (1, 2, 3, 4, 5, 6, 7):
        with pytest.raises(LimitExceededError) as info:
            scan = BoundedScan(max_ops=10, max_depth=0, max_containers=100)
            for c in _chunks(body, size):
                scan.feed(c)
        assert info.value.problems[0].path == "op[0]:Do/net[0]"
