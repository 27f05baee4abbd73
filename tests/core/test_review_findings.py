"""Regression tests for defects a review found (numbers checked against finite differences)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from api_schemas import caffe2_pb2
from core.api import gradient_for_net, gradient_for_op
from core.control.lowering import add_do_op, add_if_op, add_while_op
from core.errors import InvalidRequestError
from core.registry import make_arg, make_op
from core.verify import InputSpec, RandomSpec, VerifyOptions, verify_net

NetDef = caffe2_pb2.NetDef


def net_of(name: str, *ops: caffe2_pb2.OperatorDef) -> NetDef:
    n = NetDef()
    n.name = name
    n.op.extend(ops)
    return n


def op(t: str, ins: list[str], outs: list[str], **args: Any) -> caffe2_pb2.OperatorDef:
    return make_op(t, ins, outs, [make_arg(k, v) for k, v in args.items()])


def rnd(blob: str, shape: list[int], seed: int, dist: str = "normal") -> InputSpec:
    return InputSpec(blob, random=RandomSpec(shape, distribution=dist, seed=seed))


def const(blob: str, value: Any, dtype: Any = np.float64) -> InputSpec:
    return InputSpec.from_array(blob, np.asarray(value, dtype=dtype))


def passes(net: NetDef, ys: Any, inputs: list[InputSpec], check: list[str]) -> bool:
    opts = VerifyOptions(inputs=inputs, mode="full", check=check, atol=1e-6)
    result = verify_net(net, ys, opts)
    return result.report.passed


@pytest.mark.parametrize("op_type", ["Mul", "Add", "Sub", "Div", "MatMul"])
def test_one_blob_read_twice_by_one_op(op_type: str) -> None:
    net = net_of("n", op(op_type, ["w", "w"], ["y"]))
    dist = "positive" if op_type == "Div" else "normal"
    assert passes(net, ["y"], [rnd("w", [3, 3], 1, dist)], ["w"])


def test_pass_through_inner_gradient_leaves_a_do() -> None:
    res = gradient_for_op(
        op("Do", ["X", "Y", "W"], ["Z", "W"], net=net_of("s", op("Sum", ["X", "Y"], ["Z"])),
           inner_blobs=["X", "Y", "Z"], outer_blobs_idx=[0, 1, 2]),
        ["Z_grad", None],
    )
    assert res.g_input == ["X_grad", "Y_grad", None]
    net = NetDef()
    net.name = "n"
    add_do_op(net, ["a", "b", "c"], net_of("body", op("Sum", ["a", "b"], ["c"])))
    net.op.append(op("Mul", ["c", "a"], ["z"]))
    assert passes(net, ["z"], [rnd("a", [3], 1), rnd("b", [3], 2)], ["a", "b"])


@pytest.mark.parametrize("cond", [True, False])
def test_pass_through_branch_of_an_if(cond: bool) -> None:
    net = NetDef()
    net.name = "n"
    add_if_op(net, "c", ["c", "a", "b", "y"], net_of("then", op("Sum", ["a", "b"], ["y"])),
              net_of("else", op("Mul", ["a", "b"], ["y"])))
    inputs = [rnd("a", [3], 1), rnd("b", [3], 2), const("c", cond, np.bool_)]
    assert passes(net, ["y"], inputs, ["a", "b"])


def counting_loop(body_ops: list[caffe2_pb2.OperatorDef], scope: list[str]) -> NetDef:
    net = NetDef()
    net.name = "loop"
    body = net_of("loop_body", op("Sum", ["counter", "ONE"], ["counter"]), *body_ops)
    add_while_op(net, "cond", [*scope, "counter", "ONE", "N"], body,
                 net_of("cond", op("LT", ["counter", "N"], ["cond"])))
    return net


def loop_feeds(n: int, *blobs: str) -> list[InputSpec]:
    specs = [rnd(b, [3], k + 1) for k, b in enumerate(blobs)]
    return [*specs, const("N", float(n)), const("counter", 0.0), const("ONE", 1.0)]


@pytest.mark.parametrize("n", [0, 1, 3])
def test_loop_invariant_input_also_read_after_the_loop(n: int) -> None:
    net = counting_loop(
        [op("Scale", ["x"], ["t"], scale=0.9), op("Mul", ["t", "w"], ["s"]),
         op("Tanh", ["s"], ["x"])],
        ["x", "w"],
    )
    net.op.append(op("Mul", ["x", "w"], ["z"]))
    assert passes(net, ["z"], loop_feeds(n, "x", "w"), ["x", "w"])


@pytest.mark.parametrize("n", [1, 2, 3])
def test_loop_carried_blob_without_an_incoming_gradient(n: int) -> None:
    net = counting_loop(
        [op("Scale", ["y"], ["t"], scale=0.5), op("Scale", ["x"], ["x2"], scale=0.9),
         op("Sum", ["x2", "t"], ["x"]), op("Tanh", ["y"], ["y"])],
        ["x", "y"],
    )
    assert passes(net, ["x"], loop_feeds(n, "x", "y"), ["x", "y"])


def test_in_place_scalar_pow_uses_the_output() -> None:
    net = net_of("n", op("Scale", ["a"], ["x"], scale=1.0), op("Pow", ["x"], ["x"], exponent=3.0))
    assert passes(net, ["x"], [rnd("a", [4], 1, "positive")], ["a"])


@pytest.mark.parametrize("op_type", ["Add", "Sub"])
def test_in_place_add_and_sub_need_only_shapes(op_type: str) -> None:
    net = net_of("n", op("Scale", ["a"], ["x"], scale=2.0), op(op_type, ["x", "b"], ["x"]),
                 op("Tanh", ["x"], ["y"]))
    assert passes(net, ["y"], [rnd("a", [3], 1), rnd("b", [3], 2)], ["a", "b"])


@pytest.mark.parametrize("seed", ["a_grad", "b", "w_grad"])
def test_seed_names_that_generation_would_overwrite_are_refused(seed: str) -> None:
    net = net_of("n", op("Mul", ["a", "w"], ["b"]), op("Scale", ["b"], ["c"], scale=2.0))
    with pytest.raises(InvalidRequestError) as info:
        gradient_for_net(net, {"c": seed})
    assert info.value.problems[0].code == "seed_name_collision"
