"""Regressions of stop 23: slices that name an overwritten index blob; cond_net steps.

A GradientSlice's indices are a forward blob, read after the forward net: when a later op
overwrote it, the gradient went to other rows (now a version error, or rebuilt with
``recompute``).

A counter step ``i = i + c`` in the cond_net (control-flow-cases §10) passes the counter's
gradient through exactly, but ``c`` got none (the gradient While, as Caffe2's, does not
differentiate the cond_net), although the loss depends on ``c`` when the loop body
differentiates the counter. ``c`` now gets its gradient; a step computed inside the cond_net
from an outer blob is warned about (``cond_net_no_gradient``).
"""

from __future__ import annotations

import numpy as np
import pytest

from api_schemas import caffe2_pb2
from core.api import gradient_for_net
from core.control.lowering import add_while_op
from core.errors import InvalidNetError, NetgradError, VersionMismatchError
from core.executor.executor import execute
from core.registry import make_arg, make_op
from core.types import GradientSlice

FEEDS = {"i": np.array([0.5]), "y": np.array([0.0]), "ONE": np.array([1.0]),
         "SEVEN": np.array([7.0]), "c": np.array(False)}


def _tutorial(step_ops: list[caffe2_pb2.OperatorDef], body_reads: str = "i",
              inputs: tuple[str, ...] = ("c", "i", "y", "ONE", "SEVEN"),
              body_sum: list[str] | None = None) -> caffe2_pb2.NetDef:
    net = caffe2_pb2.NetDef(name="t")
    body, cond = caffe2_pb2.NetDef(name="body"), caffe2_pb2.NetDef(name="cond")
    body.op.append(make_op("Sum", body_sum or ["y", body_reads], ["y"]))
    cond.op.extend([*step_ops, make_op("LE", ["i", "SEVEN"], ["c"])])
    add_while_op(net, "c", list(inputs), body, cond)
    return net


def _y(net: caffe2_pb2.NetDef, feeds: dict[str, np.ndarray]) -> float:
    return float(execute(net, feeds)["y"][0])


def _warned(net: caffe2_pb2.NetDef) -> list[tuple[str, ...]]:
    res = gradient_for_net(net, {"y": None})
    return [d.blobs for d in res.diagnostics if d.code == "cond_net_no_gradient"]


def _numeric(net: caffe2_pb2.NetDef, feeds: dict[str, np.ndarray], blob: str) -> float:
    eps = 1e-4
    up = _y(net, {**feeds, blob: feeds[blob] + eps})
    down = _y(net, {**feeds, blob: feeds[blob] - eps})
    return (up - down) / (2 * eps)


def _analytic(net: caffe2_pb2.NetDef, feeds: dict[str, np.ndarray]) -> dict[str, float]:
    res = gradient_for_net(net, {"y": None})
    full = caffe2_pb2.NetDef()
    full.CopyFrom(net)
    full.op.extend(res.grad_ops)
    out = execute(full, feeds)
    return {b: float(out[g][0]) for b, g in res.grad_map.items() if isinstance(g, str)}


@pytest.mark.parametrize(("step", "body", "feeds"), [
    ("Add", ["y", "i"], {}),  # the tutorial with ONE fed: y = 1.5 + ... + 6.5
    ("Add", ["y", "i", "ONE"], {"ONE": np.array([1.1])}),  # ONE read by the body as well
    ("Sub", ["y", "i"], {"i": np.array([9.5]), "SEVEN": np.array([3.0])}),  # zero trips
    ("Sub", ["y", "i"], {"i": np.array([9.5]), "SEVEN": np.array([-2.0])}),
    ("Sum", ["y", "i"], {"ONE": np.array([0.7])}),  # i = i + ONE + ONE
])
def test_a_fed_step_operand_gets_its_gradient_through_the_cond_net(
        step: str, body: list[str], feeds: dict[str, np.ndarray]) -> None:
    # it used to get none: dL/dONE = sum over the condition evaluations of dL/di
    ins = ["i", "ONE", "ONE"] if step == "Sum" else ["i", "ONE"]
    net = _tutorial([make_op(step, ins, ["i"])], body_sum=body)
    fed = {**FEEDS, **feeds}
    assert _warned(net) == []
    got = _analytic(net, fed)
    for blob in ("i", "ONE", "y"):
        assert got.get(blob, 0.0) == pytest.approx(_numeric(net, fed, blob), abs=1e-6), blob


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


# --- a GradientSlice names its index blob, which a later op overwrote ----------------------
# Gather's gradient is GradientSlice(indices=i, values=g_grad): no op reads i, so the version
# check never saw it, and whoever applies the slice after the forward net read the new i
# (adversarial review, stop 23: the gradient landed on rows 1 and 3 instead of 0 and 2).

def _gather_then_bump(*first: caffe2_pb2.OperatorDef, table: str = "e") -> caffe2_pb2.NetDef:
    net = caffe2_pb2.NetDef()
    net.op.extend([*first, make_op("Gather", [table, "i"], ["g"]),
                   make_op("Add", ["i", "one"], ["i"]), make_op("Mul", ["g", "g"], ["z"])])
    return net


def test_a_slice_whose_indices_are_overwritten_later_is_a_version_error() -> None:
    with pytest.raises(VersionMismatchError) as info:
        gradient_for_net(_gather_then_bump(), ["z"])
    (p,) = info.value.problems
    assert (p.code, p.op_index, p.op_type, p.blobs) == ("version_mismatch", 0, "Gather", ("i",))
    assert "GradientSlice" in p.message
    assert "write the result of op[1]:Add to a new blob" in p.message


def test_through_ensure_dense_and_with_densify_too() -> None:
    net = _gather_then_bump(make_op("EnsureDense", ["e"], ["h"]), table="h")
    with pytest.raises(VersionMismatchError):
        gradient_for_net(net, ["z"])
    net = _gather_then_bump(make_op("Tanh", ["e"], ["t"]))
    with pytest.raises(VersionMismatchError):
        gradient_for_net(net, ["z", "t"], densify=True)


def test_with_recompute_the_slice_reads_the_rebuilt_indices() -> None:
    rng = np.random.default_rng(23)
    e = rng.standard_normal((4, 2))
    feeds = {"e": e, "i0": np.array([0, 2, 2], dtype=np.int32),
             "one": np.array([1], dtype=np.int32)}
    net = _gather_then_bump(make_op("Tanh", ["e"], ["t"]), make_op("Copy", ["i0"], ["i"]))
    res = gradient_for_net(net, ["z", "t"], recompute=True, densify=True)
    full = caffe2_pb2.NetDef()
    full.CopyFrom(net)
    full.op.extend(res.grad_ops)
    got = execute(full, feeds)[str(res.grad_map["e"])]
    g = e[[0, 2, 2]]
    want = np.zeros_like(e)
    np.add.at(want, [0, 2, 2], 2 * g)  # d(sum g*g)/de through the rows gathered
    want += 1 - np.tanh(e) ** 2
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_gather_written_over_its_own_indices_is_refused() -> None:
    net = caffe2_pb2.NetDef()
    net.op.append(make_op("Gather", ["e", "i"], ["i"]))
    with pytest.raises(NetgradError) as info:
        gradient_for_net(net, ["i"])
    assert "in place" in info.value.message
    net = caffe2_pb2.NetDef()  # over DATA, with densify: the slice values were overwritten
    net.op.extend([make_op("Tanh", ["e"], ["t"]), make_op("Gather", ["e", "i"], ["e"]),
                   make_op("Mul", ["e", "e"], ["z"])])
    with pytest.raises(NetgradError, match="in place"):
        gradient_for_net(net, ["z", "t"], densify=True)


def test_a_slice_whose_indices_stay_is_still_accepted() -> None:
    net = caffe2_pb2.NetDef()
    net.op.extend([make_op("Gather", ["e", "i"], ["g"]), make_op("Mul", ["g", "g"], ["z"])])
    res = gradient_for_net(net, ["z"])
    assert res.grad_map["e"] == GradientSlice("i", "g_grad")


def test_a_version_error_inside_a_sub_net_names_ops_by_their_full_path() -> None:
    # the problem's path was right, its text named "op[1]:Mul" as if at the top level
    then = caffe2_pb2.NetDef(name="then")
    then.op.extend([make_op("Mul", ["x", "w"], ["y"]), make_op("Scale", ["x"], ["x"])])
    net = caffe2_pb2.NetDef()
    net.op.append(make_op("If", ["c", "x", "w"], ["y", "x"], [make_arg("then_net", then)]))
    with pytest.raises(VersionMismatchError) as info:
        gradient_for_net(net, ["y"])
    (p,) = info.value.problems
    assert p.path == "op[0]:If/then_net/op[0]:Mul"
    assert "op[0]:If/then_net/op[1]:Scale" in p.message


def test_a_while_whose_body_gradient_is_empty_still_ends() -> None:
    # ys = the counter: the body's Sum(y, i) gives y no gradient, so the gradient body was
    # empty, nothing popped the saved workspaces and the gradient While never ended (the
    # executor stopped it after 100 000 iterations; Caffe2 would hang). Found by the fuzzer.
    fill = make_op("ConstantFill", [], ["one"], [make_arg("shape", [1]), make_arg("value", 1.0)])
    for steps, ins, want in (
            ([fill, make_op("Add", ["i", "one"], ["i"])], ("c", "i", "y", "SEVEN"), {"i": 1.0}),
            ([make_op("Add", ["i", "ONE"], ["i"])], ("c", "i", "y", "ONE", "SEVEN"),
             {"i": 1.0, "ONE": 7.0})):  # i ends as 0.5 + 7 ONE: 7 tests, 6 trips
        net = _tutorial(steps, inputs=ins)
        res = gradient_for_net(net, ["i"])
        full = caffe2_pb2.NetDef()
        full.CopyFrom(net)
        full.op.extend(res.grad_ops)
        out = execute(full, FEEDS)
        assert {b: float(out[str(g)][0]) for b, g in res.grad_map.items()} == want


def _if_writes(sub_op: caffe2_pb2.OperatorDef, *before: caffe2_pb2.OperatorDef
               ) -> caffe2_pb2.NetDef:
    then = caffe2_pb2.NetDef(name="t")
    then.op.append(sub_op)
    net = caffe2_pb2.NetDef()
    net.op.extend([*before, make_op("If", ["c"], [], [make_arg("then_net", then)])])
    return net


def test_an_undeclared_branch_write_an_earlier_gradient_reads_is_refused() -> None:
    # MulGradient read x after an If tripled it (dy/dw was 3x); Gather's slice named indices
    # an If bumped (the gradient landed on row 1): both were 200s with a warning
    dense = _if_writes(make_op("Scale", ["x"], ["x"], [make_arg("scale", 3.0)]),
                       make_op("Mul", ["x", "w"], ["y"]))
    sparse = _if_writes(make_op("Add", ["i", "one"], ["i"]), make_op("Gather", ["e", "i"], ["g"]),
                        make_op("Mul", ["g", "g"], ["z"]))
    for net, ys in ((dense, ["y"]), (sparse, ["z"])):
        with pytest.raises(InvalidNetError) as info:
            gradient_for_net(net, ys)
        (p,) = info.value.problems
        assert (p.code, p.op_type) == ("undeclared_branch_write", "If")
    # an earlier op whose gradient does not read the blob: still a warning, as before
    ok = _if_writes(make_op("Scale", ["x"], ["x"], [make_arg("scale", 3.0)]),
                    make_op("Sum", ["x"], ["y"]))
    res = gradient_for_net(ok, ["y"])
    assert "undeclared_branch_write" in [d.code for d in res.diagnostics]
