"""The nets of issue 7 ("never a wrong gradient"): each gave a wrong number or an unrunnable
net with a 200 answer before its fix. Shared by the in-process and the HTTP regression tests.

Every case ends in a scalar ``loss`` (``AveragedLoss``), so an all-ones seed gives dloss/dx.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from api_schemas import caffe2_pb2
from core.control.lowering import add_do_op, add_if_op, add_while_op
from core.registry import make_arg, make_op

NetDef = caffe2_pb2.NetDef


@dataclass
class Case:
    """A forward net, its fed values (float64) and the inputs whose gradient is checked."""

    name: str
    net: NetDef
    feeds: dict[str, np.ndarray]
    check: list[str]
    recompute: bool = False
    consts: dict[str, float] = field(default_factory=dict)

    def all_feeds(self) -> dict[str, np.ndarray]:
        """Checked inputs plus the constants (conditions, loop counters)."""
        out = dict(self.feeds)
        out.update({k: np.array(v, dtype=np.float64) for k, v in self.consts.items()})
        return out


def net_of(name: str, *ops: caffe2_pb2.OperatorDef) -> NetDef:
    """A NetDef named ``name`` holding ``ops``."""
    n = NetDef()
    n.name = name
    n.op.extend(ops)
    return n


def _vec(seed: int, n: int = 2, positive: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(0.5, 2.0, n) if positive else rng.standard_normal(n)


def _loss(net: NetDef, blob: str) -> NetDef:
    net.op.append(make_op("AveragedLoss", [blob], ["loss"]))
    return net


def do_writes_bound_input() -> Case:
    """A, Do: ``Do([x, a, w, W] -> [x, W])`` whose body ``Mul(a, w -> x)`` never reads x."""
    body = net_of("body", make_op("Mul", ["a", "w"], ["x"]))
    args = [
        make_arg("net", body),
        make_arg("inner_blobs", ["x", "a", "w"]),
        make_arg("outer_blobs_idx", [0, 1, 2]),
    ]
    net = net_of(
        "do_writes_x",
        make_op("CreateScope", [], ["W"]),
        make_op("Do", ["x", "a", "w", "W"], ["x", "W"], args),
    )
    return Case("A_do", _loss(net, "x"), {"x": _vec(1), "a": _vec(2), "w": _vec(3)},
                ["x", "a", "w"])


def if_taken_branch_overwrites(cond: float) -> Case:
    """A, If: then overwrites x without reading it (``Mul(a, w -> x)``), else reads it."""
    net = net_of("if_overwrites", make_op("GT", ["c", "ZERO"], ["cond"]))
    add_if_op(net, "cond", ["cond", "x", "a", "w"],
              net_of("then", make_op("Mul", ["a", "w"], ["x"])),
              net_of("else", make_op("Tanh", ["x"], ["x"])))
    return Case(f"A_if_c{cond:+g}", _loss(net, "x"),
                {"x": _vec(1), "a": _vec(2), "w": _vec(3)}, ["x", "a", "w"],
                consts={"c": cond, "ZERO": 0.0})


def if_without_else_overwrites(cond: float) -> Case:
    """A, If without else: the then branch overwrites x; not taken, x passes through."""
    net = net_of("if_then_only", make_op("GT", ["c", "ZERO"], ["cond"]))
    add_if_op(net, "cond", ["cond", "x", "a", "w"],
              net_of("then", make_op("Mul", ["a", "w"], ["x"])))
    return Case(f"A_if_then_only_c{cond:+g}", _loss(net, "x"),
                {"x": _vec(1), "a": _vec(2), "w": _vec(3)}, ["x", "a", "w"],
                consts={"c": cond, "ZERO": 0.0})


def counting_loop(name: str, body: NetDef, scope: list[str]) -> NetDef:
    """``counter <- 0 (fed); while counter < LIMIT: counter += 1; body``."""
    net = net_of(name)
    loop_body = net_of("loop_body", make_op("Sum", ["counter", "ONE"], ["counter"]))
    loop_body.op.extend(body.op)
    cond = net_of("cond", make_op("LT", ["counter", "LIMIT"], ["cond"]))
    add_while_op(net, "cond", [*scope, "counter", "ONE", "LIMIT"], loop_body, cond)
    return net


def while_body_overwrites_carried(trips: int) -> Case:
    """A, While: the body writes the loop-carried x without reading it."""
    net = counting_loop("while_overwrites",
                        net_of("b", make_op("Mul", ["a", "w"], ["x"])), ["x", "a", "w"])
    return Case(f"A_while_{trips}_trips", _loss(net, "x"),
                {"x": _vec(1), "a": _vec(2), "w": _vec(3)}, ["x", "a", "w"],
                consts={"counter": 0.0, "ONE": 1.0, "LIMIT": float(trips)})


def recurrent_while(trips: int) -> Case:
    """A, recurrent While: ``x = tanh(x)``, then ``h = tanh(x * w)`` is recomputed (not
    updated) each iteration."""
    body = net_of("b", make_op("Tanh", ["x"], ["x"]), make_op("Mul", ["x", "w"], ["h"]),
                  make_op("Tanh", ["h"], ["h"]))
    net = counting_loop("recurrent", body, ["x", "w", "h"])
    return Case(f"A_recurrent_while_{trips}_trips", _loss(net, "h"),
                {"x": _vec(1), "w": _vec(2), "h": _vec(3)}, ["x", "w", "h"],
                consts={"counter": 0.0, "ONE": 1.0, "LIMIT": float(trips)})


def recompute_through_if(cond: float) -> Case:
    """B: w is read inside an If branch, then overwritten (``Scale(w -> w)``); recompute."""
    net = net_of("recompute_if", make_op("Scale", ["w0"], ["w"], [make_arg("scale", 1.5)]),
                 make_op("GT", ["c", "ZERO"], ["cond"]))
    add_if_op(net, "cond", ["cond", "x", "w", "y"],
              net_of("then", make_op("Mul", ["x", "w"], ["y"])))
    net.op.append(make_op("Scale", ["w"], ["w"], [make_arg("scale", 10.0)]))
    net.op.append(make_op("Mul", ["y", "w"], ["z"]))
    return Case(f"B_recompute_if_c{cond:+g}", _loss(net, "z"),
                {"x": _vec(1), "w0": _vec(2), "y": _vec(3)}, ["x", "w0", "y"],
                recompute=True, consts={"c": cond, "ZERO": 0.0})


def recompute_through_do() -> Case:
    """C: the same through a Do (the inner binding of w used to be redefined)."""
    net = net_of("recompute_do", make_op("Scale", ["w0"], ["w"], [make_arg("scale", 1.5)]))
    add_do_op(net, ["x", "w", "y"], net_of("body", make_op("Mul", ["x", "w"], ["y"])))
    net.op.append(make_op("Scale", ["w"], ["w"], [make_arg("scale", 10.0)]))
    net.op.append(make_op("Mul", ["y", "w"], ["z"]))
    return Case("C_recompute_do", _loss(net, "z"), {"x": _vec(1), "w0": _vec(2)},
                ["x", "w0"], recompute=True)


def chained_maker(op_type: str) -> Case:
    """E: ``t1 = op(x)``, ``t2 = x - t1``: the gradient of x is summed over two consumers."""
    args = [make_arg("exponent", 3.0)] if op_type == "Pow" else []
    net = net_of(f"chain_{op_type}", make_op(op_type, ["x"], ["t1"], args),
                 make_op("Sub", ["x", "t1"], ["t2"]))
    return Case(f"E_{op_type}", _loss(net, "t2"), {"x": _vec(1, 3, positive=True)}, ["x"])


def all_cases() -> list[Case]:
    """Every regression case of issue 7 (A in four shapes, B, C, E)."""
    return [
        do_writes_bound_input(),
        if_taken_branch_overwrites(1.0),
        if_taken_branch_overwrites(-1.0),
        if_without_else_overwrites(1.0),
        if_without_else_overwrites(-1.0),
        while_body_overwrites_carried(0),
        while_body_overwrites_carried(1),
        while_body_overwrites_carried(3),
        recurrent_while(0),
        recurrent_while(3),
        recompute_through_if(1.0),
        recompute_through_if(-1.0),
        recompute_through_do(),
        chained_maker("Pow"),
        chained_maker("Sqrt"),
    ]
