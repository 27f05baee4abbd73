"""Control-flow conformance cases as data: NetDefs + feeds + expected blobs.

Each builder returns a NetDef lowered the way Caffe2's ``add_if_op`` / ``add_while_op``
lower ``If`` / ``While`` (spec §3.1): ``CreateScope`` ops, ``Do`` wrappers with
``inner_blobs`` / ``outer_blobs_idx`` and ``copy_external_blobs`` on loop bodies. Values come
from ``shared/spec/control-flow-cases.md`` (§2-§5, §9, §10) and spec §7.3.

The cases run on any executor (house style #13): ``tests/core/executor/test_conformance.py``
runs them in-process and through the worker pool. Set-ordered lists upstream are replaced by
first-appearance order (spec §3.8 #3).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from api_schemas import caffe2_pb2
from core.control.lowering import add_if_op, add_while_op
from core.registry import make_arg, make_op

NetDef = caffe2_pb2.NetDef
OperatorDef = caffe2_pb2.OperatorDef
TP = caffe2_pb2.TensorProto

INT32, INT64, FLOAT, BOOL = TP.INT32, TP.INT64, TP.FLOAT, TP.BOOL


# --- lowering (spec §3.1): core.control.lowering; helpers for hand-built cases ---------
def used_names(net: NetDef) -> list[str]:
    """Every blob name an op of ``net`` reads or writes, first-appearance order."""
    seen: dict[str, None] = {}
    for op in net.op:
        for name in list(op.input) + list(op.output):
            seen.setdefault(name, None)
    return list(seen)


def do_op(
    ins: Sequence[str],
    outs: Sequence[str],
    ws: str,
    body: NetDef,
    copy_external_blobs: bool = False,
    reuse_workspace: bool = False,
) -> OperatorDef:
    """A ``Do`` op with identity bindings (inner name == outer name) over ``ins + outs``."""
    names = list(ins) + list(outs)
    inner = list(dict.fromkeys(names))
    args = [
        make_arg("net", body),
        make_arg("inner_blobs", inner),
        make_arg("outer_blobs_idx", [names.index(n) for n in inner]),
    ]
    if copy_external_blobs:
        args.append(make_arg("copy_external_blobs", 1))
    if reuse_workspace:
        args.append(make_arg("reuse_workspace", 1))
    return make_op("Do", list(ins) + [ws], list(outs) + [ws], args)


# --- a tiny NetBuilder ---------------------------------------------------------------------
class Builder:
    """Collects ops into a NetDef; ``scope`` = names used so far (plus an initial scope)."""

    def __init__(self, name: str, scope: Iterable[str] = ()) -> None:
        self.net = NetDef(name=name)
        self.initial = list(scope)

    def scope(self) -> list[str]:
        return list(dict.fromkeys(self.initial + used_names(self.net)))

    def op(self, op_type: str, ins: Sequence[str], outs: Sequence[str], **args: Any) -> str:
        self.net.op.append(make_op(op_type, ins, outs, [make_arg(k, v) for k, v in args.items()]))
        return outs[0] if outs else ""

    def const(self, value: float | int | bool, out: str, dtype: int = INT32) -> str:
        """``ConstantFill([] -> out, shape=[1], value, dtype)``."""
        v: float | int = float(value) if dtype == FLOAT else int(value)
        return self.op("ConstantFill", [], [out], shape=[1], value=v, dtype=dtype)

    def if_(self, cond: str, then: Builder, else_: Builder | None = None) -> None:
        add_if_op(self.net, cond, self.scope(), then.net, else_.net if else_ else None)

    def while_(self, cond: str, body: Builder, cond_body: Builder | None = None) -> None:
        add_while_op(self.net, cond, self.scope(), body.net, cond_body.net if cond_body else None)


# --- cases ---------------------------------------------------------------------------------
@dataclass
class ConformanceCase:
    """A forward net, its feeds, the expected blobs and the blobs that must be absent."""

    name: str
    net: NetDef
    feeds: dict[str, np.ndarray]
    expected: dict[str, Any]
    absent: tuple[str, ...] = ()
    fetch: list[str] = field(default_factory=list)


def do_op_net() -> NetDef:
    """control-flow-cases §2: ``Do`` binding outer_X, outer_Y, outer_Z to X, Y, Z."""
    sub = Builder("subnet")
    sub.op("Add", ["X", "Y"], ["Z"])
    net = NetDef(name="net")
    net.op.append(make_op("CreateScope", [], ["W"]))
    net.op.append(
        make_op(
            "Do",
            ["outer_X", "outer_Y", "W"],
            ["outer_Z", "W"],
            [
                make_arg("net", sub.net),
                make_arg("inner_blobs", ["X", "Y", "Z"]),
                make_arg("outer_blobs_idx", [0, 1, 2]),
            ],
        )
    )
    return net


def reuse_workspace_net() -> NetDef:
    """control-flow-cases §3: a second ``Do`` re-uses the first one's workspace."""
    init = Builder("param_init_subnet")
    init.op("ConstantFill", [], ["X"], shape=[1], value=1.0)
    init.op("ConstantFill", [], ["Y"], shape=[1], value=2.0)
    sub = Builder("subnet")
    sub.op("Add", ["X", "Y"], ["Z"])
    net = NetDef(name="net")
    net.op.append(make_op("CreateScope", [], ["W"]))
    net.op.append(
        make_op(
            "Do",
            ["W"],
            ["W"],
            [
                make_arg("net", init.net),
                make_arg("inner_blobs", []),
                make_arg("outer_blobs_idx", []),
            ],
        )
    )
    net.op.append(
        make_op(
            "Do",
            ["W"],
            ["outer_Z", "W"],
            [
                make_arg("net", sub.net),
                make_arg("inner_blobs", ["Z"]),
                make_arg("outer_blobs_idx", [0]),
                make_arg("reuse_workspace", 1),
            ],
        )
    )
    return net


def brew_cond_net() -> NetDef:
    """control-flow-cases §4 (``brew.cond``): output_blob = then_value or else_value."""
    then = Builder("then_model")
    then.op("Copy", ["then_value"], ["output_blob"])
    else_ = Builder("else_model")
    else_.op("Copy", ["else_value"], ["output_blob"])
    net = NetDef(name="model")
    add_if_op(net, "cond", ["then_value", "else_value", "output_blob"], then.net, else_.net)
    return net


def brew_loop_net() -> NetDef:
    """control-flow-cases §5 (``brew.loop``): adds TWO while ++counter < TEN -> 18."""
    body = Builder("loop_model")
    body.op("Add", ["output_blob", "TWO"], ["output_blob"])
    cond = Builder("cond_model")
    cond.op("Add", ["counter", "ONE"], ["counter"])
    cond.op("LT", ["counter", "TEN"], ["tmp"])
    cond.op("Copy", ["tmp"], ["cond"])
    net = NetDef(name="model")
    add_while_op(
        net, "cond", ["cond", "ONE", "TWO", "TEN", "counter", "output_blob"], body.net, cond.net
    )
    return net


def _counting_while(name: str, counter: str, compare: str, limit: int) -> NetDef:
    b = Builder(name)
    b.const(0, counter)
    b.const(0, "y")
    cond = Builder(f"{name}/condition")
    cond.const(1, "one")
    cond.op("Add", [counter, "one"], [counter])
    cond.const(limit, "limit")
    cond.op(compare, [counter, "limit"], ["cond"])
    body = Builder(f"{name}/body")
    body.op("Add", [counter, "y"], ["y"])
    b.while_("cond", body, cond)
    return b.net


def while_net() -> NetDef:
    """control-flow-cases §10 ``test_while_net``: x = 0, y = 0; while ++x < 7: y += x."""
    return _counting_while("while_net", "x", "LT", 7)


def tutorial_while_net() -> NetDef:
    """control-flow-cases §10, Control_Ops tutorial: i = 0, y = 0; while ++i <= 7: y += i."""
    return _counting_while("tutorial_while", "i", "LE", 7)


def if_net() -> NetDef:
    """spec §7.3 ``net_builder_test.test_if_net``: sequential and nested If with locals."""
    b = Builder("test_if_net")
    for n, v in (("x0", 0), ("x1", 1), ("x2", 2), ("y0", 0), ("y1", 1), ("y2", 2)):
        b.const(v, n)
    b.const(0, "first_res")
    b.const(True, "cond_true", BOOL)
    t, e = Builder("then"), Builder("else")
    t.const(1, "first_res")
    e.const(2, "first_res")
    b.if_("cond_true", t, e)
    b.const(0, "second_res")
    b.const(False, "cond_false", BOOL)
    t, e = Builder("then"), Builder("else")
    t.const(1, "second_res")
    e.const(2, "second_res")
    b.if_("cond_false", t, e)
    b.op("LT", ["x0", "x1"], ["lt"])
    outer = Builder("then", b.scope())
    outer.const(900, "local_blob")
    outer.const(100, "c100")
    outer.op("Add", ["c100", "local_blob"], ["y0"])
    outer.op("GT", ["x1", "x2"], ["gt"])
    inner_else = Builder("else")
    inner_else.op("Add", ["y1", "local_blob"], ["local_blob"])
    inner_else.const(100, "c100_b")
    inner_else.op("Add", ["c100_b", "y1"], ["y1"])
    outer.if_("gt", Builder("empty_then_net"), inner_else)
    outer.const(901, "c901")
    outer.op("EQ", ["local_blob", "c901"], ["eq"])
    inner_then = Builder("then")
    inner_then.const(7, "y2")
    inner_then.op("Add", ["y1", "y2"], ["y2"])
    outer.if_("eq", inner_then)
    b.if_("lt", outer, Builder("empty_else_net"))
    return b.net


def if_tutorial_net(x: float | None = None) -> NetDef:
    """control-flow-cases §9: z = y**2 if x > 0 else y**3, y = 4.

    Without ``x`` the blob ``x`` (float32) must be fed; with ``x`` the net fills it first.
    """
    b = Builder("tutorial_if", ["x"])
    if x is not None:
        b.op("ConstantFill", [], ["x"], shape=[], value=float(x), dtype=FLOAT)
    b.const(0.0, "zero", FLOAT)
    b.const(1.0, "one", FLOAT)
    b.const(4.0, "y", FLOAT)
    b.const(0.0, "z", FLOAT)
    b.op("GT", ["x", "zero"], ["x_gt_zero"])
    t, e = Builder("then"), Builder("else")
    t.op("Pow", ["y"], ["z"], exponent=2.0)
    e.op("Pow", ["y"], ["z"], exponent=3.0)
    b.if_("x_gt_zero", t, e)
    return b.net


def _arr(v: Any, dtype: Any) -> np.ndarray:
    return np.array(v, dtype=dtype)


def forward_cases() -> list[ConformanceCase]:
    """Every forward conformance case with its expected values."""
    f32 = np.float32
    cases = [
        ConformanceCase(
            "do_op",
            do_op_net(),
            {"outer_X": _arr([1, 2], f32), "outer_Y": _arr([3, 4], f32)},
            {"outer_Z": [4, 6]},
        ),
        ConformanceCase(
            "reuse_workspace", reuse_workspace_net(), {}, {"outer_Z": [3]}, absent=("X", "Y", "Z")
        ),
    ]
    for cond, want in ((True, 1), (False, 2)):
        cases.append(
            ConformanceCase(
                f"brew_cond_{cond}",
                brew_cond_net(),
                {
                    "cond": _arr(cond, bool),
                    "then_value": _arr(1, np.int64),
                    "else_value": _arr(2, np.int64),
                },
                {"output_blob": want},
            )
        )
    cases.append(
        ConformanceCase(
            "brew_loop",
            brew_loop_net(),
            {
                "cond": _arr(True, bool),
                "ONE": _arr(1, np.int64),
                "TWO": _arr(2, np.int64),
                "TEN": _arr(10, np.int64),
                "counter": _arr(0, np.int64),
                "output_blob": _arr(0, np.int64),
            },
            {"output_blob": 18, "counter": 10},
            absent=("tmp",),
        )
    )
    cases.append(ConformanceCase("while_net", while_net(), {}, {"x": [7], "y": [21]}))
    cases.append(ConformanceCase("tutorial_while", tutorial_while_net(), {}, {"i": [8], "y": [28]}))
    cases.append(
        ConformanceCase(
            "if_net",
            if_net(),
            {},
            {"first_res": [1], "second_res": [2], "y0": [1000], "y1": [101], "y2": [108]},
            absent=("local_blob", "c100", "c100_b", "c901", "eq", "gt"),
        )
    )
    for x, z in ((0.5, 16.0), (-0.5, 64.0)):
        cases.append(
            ConformanceCase(f"if_tutorial_{x}", if_tutorial_net(), {"x": _arr(x, f32)}, {"z": [z]})
        )
    return cases


#: Builders by name, for tests that need one net.
BUILDERS: dict[str, Callable[[], NetDef]] = {
    "do_op": do_op_net,
    "reuse_workspace": reuse_workspace_net,
    "brew_cond": brew_cond_net,
    "brew_loop": brew_loop_net,
    "while_net": while_net,
    "tutorial_while": tutorial_while_net,
    "if_net": if_net,
    "if_tutorial": if_tutorial_net,
}
