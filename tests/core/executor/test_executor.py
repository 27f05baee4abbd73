"""The executor: op dispatch, refused and unknown ops, limits, located errors, snapshots."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from api_schemas import caffe2_pb2
from core.errors import ExecutionError, InvalidRequestError, LimitExceededError
from core.executor.executor import REFUSED_OP_TYPES, execute
from core.executor.limits import RunLimits
from core.registry import REGISTRY, make_arg, make_op, register_kernel
from tests.conformance.cases import Builder, add_if_op, add_while_op

NetDef = caffe2_pb2.NetDef


def _net(*ops: caffe2_pb2.OperatorDef) -> NetDef:
    net = NetDef(name="n")
    net.op.extend(ops)
    return net


def test_runs_ops_in_order_and_returns_tensors() -> None:
    net = _net(
        make_op("Relu", ["x"], ["r"]), make_op("Scale", ["r"], ["y"], [make_arg("scale", 3.0)])
    )
    x = np.array([-1.0, 2.0])
    out = execute(net, {"x": x})
    np.testing.assert_allclose(out["y"], [0.0, 6.0])
    assert out["x"] is not x  # feeds are copied, never aliased
    assert execute(net, {"x": x}, fetch=["y"]).keys() == {"y"}


@pytest.mark.parametrize("op_type", REFUSED_OP_TYPES)
def test_python_ops_are_refused_even_in_an_untaken_branch(op_type: str) -> None:
    then = Builder("then")
    then.op(op_type, ["x"], ["y"])
    net = NetDef(name="n")
    net.op.append(make_op("Relu", ["x"], ["x"]))
    add_if_op(net, "cond", ["x", "y"], then.net)
    with pytest.raises(ExecutionError) as info:
        execute(net, {"cond": np.array(False), "x": np.array([1.0])})
    problem = info.value.problems[0]
    assert problem.code == "op_refused"
    assert problem.op_type == op_type
    assert problem.path == f"op[2]:If/then_net/op[0]:Do/net/op[0]:{op_type}"


def test_unknown_op_type_names_index_and_type() -> None:
    net = _net(make_op("Relu", ["x"], ["y"]), make_op("NoSuchOp", ["y"], ["z"]))
    with pytest.raises(ExecutionError, match="NoSuchOp") as info:
        execute(net, {"x": np.array([1.0])})
    problem = info.value.problems[0]
    assert (problem.op_index, problem.op_type, problem.code) == (1, "NoSuchOp", "unknown_op_type")


def test_huge_constant_fill_fails_fast_with_a_clear_error() -> None:
    net = _net(
        make_op("ConstantFill", [], ["big"], [make_arg("shape", [10**12]), make_arg("value", 1.0)])
    )
    with pytest.raises(LimitExceededError, match="1000000000000 elements") as info:
        execute(net, {})
    assert info.value.problems[0].op_type == "ConstantFill"


def _grow(op: caffe2_pb2.OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    return [np.zeros(inputs[0].size * 10)]


@pytest.fixture
def grow_op() -> Iterator[str]:
    register_kernel("TestOnlyGrow")(_grow)  # test-only; removed again below
    yield "TestOnlyGrow"
    REGISTRY.pop("TestOnlyGrow", None)


def test_output_element_cap_applies_to_every_kernel(grow_op: str) -> None:
    net = _net(make_op(grow_op, ["x"], ["y"]))
    assert execute(net, {"x": np.zeros(5)}, RunLimits(max_elements=50))["y"].size == 50
    with pytest.raises(LimitExceededError, match="output 'y' of TestOnlyGrow") as info:
        execute(net, {"x": np.zeros(6)}, RunLimits(max_elements=50))
    assert info.value.problems[0].code == "tensor_too_large"
    # a fed tensor above the cap is refused before anything runs
    with pytest.raises(LimitExceededError, match="input blob 'x'"):
        execute(net, {"x": np.zeros(11)}, RunLimits(max_elements=10))


def test_inputs_whose_shapes_do_not_match_the_net() -> None:
    net = _net(make_op("FC", ["x", "w", "b"], ["y"]))
    feeds = {"x": np.ones((2, 3)), "w": np.ones((4, 5)), "b": np.ones(4)}
    with pytest.raises(ExecutionError) as info:
        execute(net, feeds)
    problem = info.value.problems[0]
    assert (problem.op_index, problem.op_type) == (0, "FC")
    assert "FC" in info.value.message


def test_missing_input_blob_is_located() -> None:
    net = _net(make_op("Relu", ["x"], ["y"]), make_op("Add", ["y", "nope"], ["z"]))
    with pytest.raises(ExecutionError, match="'nope' does not exist") as info:
        execute(net, {"x": np.array([1.0])})
    assert info.value.problems[0].op_index == 1


def test_non_numeric_feeds_are_refused() -> None:
    with pytest.raises(InvalidRequestError, match="dtype"):
        execute(_net(), {"s": np.array(["a"])})


def test_observer_sees_inputs_before_an_in_place_op() -> None:
    seen: list[tuple[str, np.ndarray]] = []
    net = _net(
        make_op("Relu", ["x"], ["x"]), make_op("Scale", ["x"], ["x"], [make_arg("scale", 2.0)])
    )
    out = execute(
        net,
        {"x": np.array([-1.0, 3.0])},
        observer=lambda op, ins, path: seen.append((path, ins[0].copy())),
    )
    assert [p for p, _ in seen] == ["op[0]:Relu", "op[1]:Scale"]
    np.testing.assert_allclose(seen[0][1], [-1.0, 3.0])  # snapshot before Relu(x -> x)
    np.testing.assert_allclose(out["x"], [0.0, 6.0])


def test_in_process_deadline_stops_a_long_loop() -> None:
    body = Builder("body")
    body.op("Add", ["n", "one"], ["n"])
    net = NetDef(name="forever")
    add_while_op(net, "cond", ["cond", "n", "one"], body.net)
    limits = RunLimits(wall_clock_s=0.2, max_loop_iterations=10**12)
    with pytest.raises(LimitExceededError) as info:
        execute(net, {"cond": np.array(True), "n": np.array(0), "one": np.array(1)}, limits)
    assert info.value.problems[0].code == "wall_clock_exceeded"
