"""Runtime of Do / If / While / CreateScope / HasScope and the workspace machinery (spec §4)."""

from __future__ import annotations

import numpy as np
import pytest

from api_schemas import caffe2_pb2
from core.control.runtime import do_bindings
from core.errors import ExecutionError, InvalidNetError, LimitExceededError
from core.executor.executor import execute, feed_blobs, run
from core.executor.limits import RunLimits
from core.executor.workspace import Workspace, WorkspaceStack
from core.registry import GradientStatus, get_entry, make_arg, make_op
from tests.conformance.cases import Builder, add_if_op, add_while_op, do_op

NetDef = caffe2_pb2.NetDef


# --- Workspace forwarding (§4.1) ------------------------------------------------------------
def test_forwarded_names_are_looked_up_lazily_and_write_through() -> None:
    parent = Workspace()
    parent.set("A", np.array([1.0]))
    child = Workspace(parent, {"a": "A"})
    parent.set("A", np.array([5.0]))  # a later parent change is visible
    assert child.get("a")[0] == 5.0
    child.set("a", np.array([7.0]))  # a write lands in the parent
    assert parent.get("A")[0] == 7.0
    assert child.local_names() == []


def test_add_blob_mapping_rules() -> None:
    parent = Workspace()
    parent.set("A", np.array([1.0]))
    parent.set("B", np.array([2.0]))
    child = Workspace(parent, {"a": "A"})
    child.add_blob_mapping(parent, {"a": "A"})  # same binding again: fine
    with pytest.raises(ExecutionError, match="Redefinition of blob a"):
        child.add_blob_mapping(parent, {"a": "B"})
    child.set("local", np.array([3.0]))
    with pytest.raises(ExecutionError, match="Redefinition of blob local"):
        child.add_blob_mapping(parent, {"local": "B"})
    child.add_blob_mapping(parent, {"local": "B"}, skip_defined=True)
    assert child.get("local")[0] == 3.0  # the local blob wins
    with pytest.raises(ExecutionError, match="Invalid parent workspace blob: C"):
        child.add_blob_mapping(parent, {"c": "C"})


def test_copy_forwarded_tensors_snapshots_the_parent_value() -> None:
    parent = Workspace()
    parent.set("A", np.array([1.0]))
    child = Workspace(parent, {"a": "A"})
    child.copy_forwarded_tensors(["a", "not_forwarded"])
    parent.set("A", np.array([9.0]))
    assert child.get("a")[0] == 1.0
    assert not child.is_forwarded("a")


# --- WorkspaceStack (§4.2) ------------------------------------------------------------------
def test_stack_is_lifo_and_reuses_popped_workspaces() -> None:
    parent = Workspace()
    parent.set("A", np.array([1.0]))
    stack = WorkspaceStack()
    assert stack.pop_gradient_workspace(parent, {}) is None
    assert stack.reuse_last_forward_workspace(parent, {}) is None
    w1 = stack.push_forward_workspace(parent, {"a": "A"})
    w2 = stack.push_forward_workspace(parent, {"a": "A"})
    assert w1 is not w2
    assert stack.pop_gradient_workspace(parent, {}) is w2
    assert stack.pop_gradient_workspace(parent, {}) is w1
    assert stack.empty()
    stack.clear()
    assert stack.push_forward_workspace(parent, {"a": "A"}) is w1  # children are kept
    assert stack.reuse_last_forward_workspace(parent, {}) is w1
    assert len(stack.workspaces) == 2


def test_push_reuse_drops_local_snapshots_and_rebinds() -> None:
    parent = Workspace()
    parent.set("A", np.array([1.0]))
    stack = WorkspaceStack()
    w = stack.push_forward_workspace(parent, {"a": "A"})
    w.copy_forwarded_tensors(["a"])  # what copy_external_blobs leaves behind
    stack.clear()
    parent.set("A", np.array([2.0]))
    assert stack.push_forward_workspace(parent, {"a": "A"}) is w
    assert w.is_forwarded("a") and w.get("a")[0] == 2.0


def test_gradient_bindings_skip_forward_snapshots() -> None:
    parent = Workspace()
    parent.set("A", np.array([1.0]))
    parent.set("G", np.array([0.5]))
    stack = WorkspaceStack()
    w = stack.push_forward_workspace(parent, {"a": "A"})
    w.copy_forwarded_tensors(["a"])
    parent.set("A", np.array([4.0]))  # a later iteration overwrote the outer blob
    popped = stack.pop_gradient_workspace(parent, {"a": "A", "g": "G"})
    assert popped is w
    assert w.get("a")[0] == 1.0  # the snapshot wins over re-binding
    assert w.get("g")[0] == 0.5


# --- CreateScope / HasScope -----------------------------------------------------------------
def test_scope_ops_are_registered_as_not_differentiable() -> None:
    for op_type in ("CreateScope", "HasScope"):
        entry = get_entry(op_type)
        assert entry is not None and entry.kernel is None
        assert entry.status == GradientStatus.SHOULD_NOT_DIFFERENTIATE


def test_has_scope_reports_pushed_workspaces() -> None:
    net = NetDef(name="n")
    net.op.append(make_op("CreateScope", [], ["W"]))
    net.op.append(make_op("HasScope", ["W"], ["empty_before"]))
    net.op.append(do_op([], [], "W", Builder("b").net))
    net.op.append(make_op("HasScope", ["W"], ["after"]))
    out = execute(net, {})
    assert out["empty_before"].tolist() == [False]
    assert out["after"].tolist() == [True]
    assert out["after"].dtype == np.bool_


# --- Do -------------------------------------------------------------------------------------
def _do(
    ins: list[str], outs: list[str], inner: list[str], idx: list[int]
) -> caffe2_pb2.OperatorDef:
    return make_op(
        "Do",
        ins,
        outs,
        [
            make_arg("net", NetDef(name="s")),
            make_arg("inner_blobs", inner),
            make_arg("outer_blobs_idx", idx),
        ],
    )


@pytest.mark.parametrize(
    ("op", "message"),
    [
        (_do(["a", "W"], ["b", "V"], ["a", "b"], [0, 1]), "same input/output workspace blob"),
        (_do(["a", "a", "W"], ["W"], ["a"], [0]), "Duplicate input blobs"),
        (_do(["a", "W"], ["b", "W"], ["a"], [0, 1]), "different inner/outer blobs lengths"),
        (_do(["a", "W"], ["b", "W"], ["a", "a"], [0, 1]), "redefinition of inner blob a"),
        (_do(["a", "W"], ["b", "W"], ["a", "b"], [0, 2]), r"out of bounds \[0, 1\]"),
        (_do(["a", "W"], ["b", "W"], ["a", "b"], [0, 0]), "Reusage of outer name: a"),
        (_do(["a", "W"], ["b", "W"], ["a"], [0]), "Not all outer names are used"),
    ],
)
def test_do_binding_validation(op: caffe2_pb2.OperatorDef, message: str) -> None:
    with pytest.raises(InvalidNetError, match=message):
        do_bindings(op)


def test_do_binding_allows_a_name_that_is_input_and_output() -> None:
    op = _do(["y", "W"], ["y", "W"], ["y"], [0])
    assert do_bindings(op) == {"y": "y"}


def test_do_locals_stay_in_the_child_workspace() -> None:
    body = Builder("body")
    body.op("Scale", ["x"], ["tmp"], scale=2.0)
    body.op("Add", ["tmp", "x"], ["y"])
    net = NetDef(name="n")
    net.op.append(make_op("CreateScope", [], ["W"]))
    net.op.append(do_op(["x"], ["y"], "W", body.net))
    out = execute(net, {"x": np.array([1.0, 2.0])})
    np.testing.assert_allclose(out["y"], [3.0, 6.0])
    assert "tmp" not in out


def test_do_without_a_workspace_stack_fails_clearly() -> None:
    net = NetDef(name="n")
    net.op.append(do_op(["x"], ["y"], "W", Builder("b").net))
    with pytest.raises(ExecutionError) as info:
        execute(net, {"x": np.array([1.0]), "W": np.array([0.0])})
    assert "workspace stack" in info.value.message
    assert info.value.problems[0].op_index == 0
    assert info.value.problems[0].op_type == "Do"


def test_gradient_do_with_reuse_workspace_is_rejected() -> None:
    op = do_op(["x"], ["y"], "W", Builder("b").net, reuse_workspace=True)
    op.is_gradient_op = True
    net = NetDef(name="n")
    net.op.append(make_op("CreateScope", [], ["W"]))
    net.op.append(op)
    with pytest.raises(InvalidNetError, match="requires use of stacked workspaces"):
        execute(net, {"x": np.array([1.0])})


# --- the worked If example of spec §3.7, gradient written by hand ---------------------------
def _scale_branch(scale: float) -> NetDef:
    b = Builder("branch")
    b.op("Scale", ["x"], ["y"], scale=scale)
    return b.net


def _grad_branch(ws: str, scale: float) -> NetDef:
    inner = Builder("inner_grad")
    inner.op("Scale", ["y/_DO_OPERATOR_INNER_GRAD_"], ["x_grad"], scale=scale)
    inner.op("Copy", ["x_grad"], ["x/_DO_OPERATOR_INNER_GRAD_COPY_"])
    do = make_op(
        "Do",
        ["y_grad", ws],
        ["x_grad", ws],
        [
            make_arg("net", inner.net),
            make_arg(
                "inner_blobs", ["x/_DO_OPERATOR_INNER_GRAD_COPY_", "y/_DO_OPERATOR_INNER_GRAD_"]
            ),
            make_arg("outer_blobs_idx", [1, 0]),
            make_arg("saved_fwd_blobs", []),
        ],
    )
    do.is_gradient_op = True
    net = NetDef(name="grad_branch")
    net.op.append(do)
    return net


def _if_with_gradient() -> NetDef:
    net = NetDef(name="if_net")
    add_if_op(net, "cond", ["cond", "x", "y"], _scale_branch(2.0), _scale_branch(3.0))
    wt, we = net.op[0].output[0], net.op[1].output[0]
    grad_if = make_op(
        "If",
        ["cond", "y_grad", wt, we],
        ["x_grad", wt, we],
        [
            make_arg("then_net", _grad_branch(wt, 2.0)),
            make_arg("else_net", _grad_branch(we, 3.0)),
        ],
    )
    grad_if.is_gradient_op = True
    net.op.append(grad_if)
    return net


@pytest.mark.parametrize(("cond", "factor"), [(True, 2.0), (False, 3.0)])
def test_gradient_if_pops_the_branch_workspace(cond: bool, factor: float) -> None:
    feeds = {"cond": np.array(cond), "x": np.array([1.0, -2.0]), "y_grad": np.array([0.5, 4.0])}
    out = execute(_if_with_gradient(), feeds)
    np.testing.assert_allclose(out["y"], factor * feeds["x"])
    np.testing.assert_allclose(out["x_grad"], factor * feeds["y_grad"])
    assert not any("_DO_OPERATOR_" in name for name in out)


def test_second_gradient_pop_finds_an_empty_stack() -> None:
    net = _if_with_gradient()
    net.op.append(net.op[-1])  # the gradient If again: nothing left to pop
    feeds = {"cond": np.array(True), "x": np.array([1.0]), "y_grad": np.array([1.0])}
    with pytest.raises(ExecutionError, match="Failed to initialize Do op workspace") as info:
        execute(net, feeds)
    assert info.value.problems[0].path == "op[4]:If/then_net/op[0]:Do"


# --- If / While -----------------------------------------------------------------------------
def test_if_condition_must_be_a_single_value() -> None:
    net = NetDef(name="n")
    add_if_op(net, "cond", ["x", "y"], _scale_branch(2.0))
    with pytest.raises(ExecutionError, match="single value expected"):
        execute(net, {"cond": np.array([True, False]), "x": np.array([1.0])})


def test_if_without_else_and_false_condition_does_nothing() -> None:
    net = NetDef(name="n")
    add_if_op(net, "cond", ["x", "y"], _scale_branch(2.0))
    out = execute(net, {"cond": np.array(False), "x": np.array([1.0]), "y": np.array([5.0])})
    assert out["y"].tolist() == [5.0]


def _infinite_while() -> NetDef:
    body = Builder("body")
    body.op("Add", ["n", "one"], ["n"])
    net = NetDef(name="forever")
    add_while_op(net, "cond", ["cond", "n", "one"], body.net)
    return net


def test_while_stops_at_the_iteration_cap() -> None:
    feeds = {"cond": np.array(True), "n": np.array(0), "one": np.array(1)}
    with pytest.raises(LimitExceededError, match="50 iterations") as info:
        execute(_infinite_while(), feeds, RunLimits(max_loop_iterations=50))
    problem = info.value.problems[0]
    assert problem.code == "loop_limit_exceeded"
    assert problem.op_type == "While"


def test_while_saves_one_workspace_per_iteration() -> None:
    feeds = {"cond": np.array(True), "n": np.array(0), "one": np.array(1)}
    body = Builder("body")
    body.op("Add", ["n", "one"], ["n"])
    body.op("LT", ["n", "three"], ["cond"])
    net = NetDef(name="three_times")
    add_while_op(net, "cond", ["cond", "n", "one", "three"], body.net)
    ws = Workspace()
    feed_blobs(ws, {**feeds, "three": np.array(3)}, RunLimits())
    run(net, ws)
    assert ws.get("n").tolist() == 3
    stack = ws.get(net.op[0].output[0])
    assert isinstance(stack, WorkspaceStack)
    assert stack.top == 2  # three pushes, one per iteration
    snapshots = [w.get("n").tolist() for w in stack.workspaces]
    assert snapshots == [1, 2, 3]  # copy_external_blobs: each iteration's own value
