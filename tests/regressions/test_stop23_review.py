"""Regressions of stop 23: what a While's cond_net counter step adds has no gradient.

A counter step ``i = i + c`` in the cond_net (control-flow-cases §10) passes the counter's
gradient through exactly, but ``c`` gets none: the gradient While, as Caffe2's, does not
differentiate the cond_net. When the loop body differentiates the counter, the loss depends
on ``c``, so the answer now says that ``c`` has no gradient through the loop.
"""

from __future__ import annotations

import numpy as np

from api_schemas import caffe2_pb2
from core.api import gradient_for_net
from core.control.lowering import add_while_op
from core.executor.executor import execute
from core.registry import make_arg, make_op

FEEDS = {"i": np.array([0.5]), "y": np.array([0.0]), "ONE": np.array([1.0]),
         "SEVEN": np.array([7.0]), "c": np.array(False)}


def _tutorial(step_ops: list[caffe2_pb2.OperatorDef], body_reads: str = "i",
              inputs: tuple[str, ...] = ("c", "i", "y", "ONE", "SEVEN")) -> caffe2_pb2.NetDef:
    net = caffe2_pb2.NetDef(name="t")
    body, cond = caffe2_pb2.NetDef(name="body"), caffe2_pb2.NetDef(name="cond")
    body.op.append(make_op("Sum", ["y", body_reads], ["y"]))
    cond.op.extend([*step_ops, make_op("LE", ["i", "SEVEN"], ["c"])])
    add_while_op(net, "c", list(inputs), body, cond)
    return net


def _y(net: caffe2_pb2.NetDef, feeds: dict[str, np.ndarray]) -> float:
    return float(execute(net, feeds)["y"][0])


def _warned(net: caffe2_pb2.NetDef) -> list[tuple[str, ...]]:
    res = gradient_for_net(net, {"y": None})
    return [d.blobs for d in res.diagnostics if d.code == "cond_net_no_gradient"]


def test_a_fed_step_is_named_and_the_loss_does_depend_on_it() -> None:
    net = _tutorial([make_op("Add", ["i", "ONE"], ["i"])])
    assert _warned(net) == [("ONE",)]
    res = gradient_for_net(net, {"y": None})
    assert "ONE" not in res.grad_map  # (as Caffe2: no gradient through the cond_net)
    eps = 1e-3  # y = sum of i over the iterations: it moves with ONE (6 iterations here)
    up = _y(net, {**FEEDS, "ONE": np.array([1.0 + eps])})
    down = _y(net, {**FEEDS, "ONE": np.array([1.0 - eps])})
    assert abs((up - down) / (2 * eps)) > 1.0


def test_a_step_the_cond_net_fills_itself_is_not_warned_about() -> None:
    # the tutorial's ops.Const(1): a ConstantFill inside the cond_net
    fill = make_op("ConstantFill", [], ["one"], [make_arg("shape", [1]), make_arg("value", 1.0)])
    net = _tutorial([fill, make_op("Add", ["i", "one"], ["i"])],
                    inputs=("c", "i", "y", "SEVEN"))
    assert _warned(net) == []


def test_a_step_computed_from_an_outer_blob_names_that_blob() -> None:
    net = _tutorial([make_op("Scale", ["ONE"], ["t"], [make_arg("scale", 2.0)]),
                     make_op("Add", ["i", "t"], ["i"])])
    assert _warned(net) == [("ONE",)]


def test_a_counter_the_body_does_not_differentiate_warns_nothing() -> None:
    # the body adds ONE, not the counter: the loss depends on the counter's steps only
    # through the trip count, which has no gradient
    net = _tutorial([make_op("Add", ["i", "ONE"], ["i"])], body_reads="SEVEN")
    assert _warned(net) == []
