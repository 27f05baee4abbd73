"""Regression tests for ../shared/cases/bug-cases.md (one test per row kind)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from api_schemas import caffe2_pb2
from core.api import gradient_for_net, gradient_for_op
from core.control.lowering import add_while_op
from core.errors import (
    GradientError,
    GradientNotDefinedError,
    InvalidNetError,
)
from core.ops import load_all
from core.registry import REGISTRY, GradientStatus, make_arg, make_op
from core.verify import InputSpec, RandomSpec, VerifyOptions, verify_net

NetDef = caffe2_pb2.NetDef


def net_of(*ops: caffe2_pb2.OperatorDef) -> NetDef:
    n = NetDef()
    n.name = "net"
    n.op.extend(ops)
    return n


def op(t: str, ins: list[str], outs: list[str], **args: Any) -> caffe2_pb2.OperatorDef:
    return make_op(t, ins, outs, [make_arg(k, v) for k, v in args.items()])


def test_row2_dead_first_write_gets_no_gradient_and_a_warning() -> None:
    """Documented leniency: the dead FC gets no gradient op, the live one does, and a
    ``dead_write`` warning names the dead op (Caffe2 raised a version error)."""
    net = net_of(
        op("FC", ["X", "W", "B"], ["Y_pred"]),
        op("FC", ["X", "W", "B"], ["Y_pred"]),
        op("SquaredL2Distance", ["Y_noise", "Y_pred"], ["dist"]),
        op("AveragedLoss", ["dist"], ["loss"]),
    )
    res = gradient_for_net(net, ["loss"])
    assert [o.type for o in res.grad_ops].count("FCGradient") == 1
    (dead,) = [d for d in res.diagnostics if d.code == "dead_write"]
    assert (dead.op_index, dead.op_type, dead.blobs) == (0, "FC", ("Y_pred",))
    assert "op[1]:FC overwrites it" in dead.message
    assert res.grad_map["W"] == "W_grad" and res.grad_map["X"] == "X_grad"


def test_row3_dense_and_sparse_mix_is_reported() -> None:
    net = net_of(
        op("FC", ["x0", "w", "b"], ["x2"]),
        op("EnsureDense", ["x2"], ["x2"]),
        op("SoftmaxWithLoss", ["x2", "label"], ["softmax", "loss"]),
        op("Gather", ["x2", "ref_i"], ["x3"]),
        op("SoftmaxWithLoss", ["x3", "label"], ["p_softmax", "p_loss"]),
        op("Add", ["loss", "p_loss"], ["total_loss"]),
    )
    with pytest.raises(GradientError) as info:
        gradient_for_net(net, ["total_loss"])
    msg = info.value.problems[0].message
    assert "x2" in msg and "mix of sparse and dense" in msg


def test_row7_cast_in_place_has_a_gradient() -> None:
    net = net_of(
        op("SquaredL2Distance", ["label", "pred"], ["dist"]),
        op("AveragedLoss", ["dist"], ["loss"]),
        op("Cast", ["loss"], ["loss"], to=1, from_type=1),
    )
    res = gradient_for_net(net, ["loss"])
    assert res.grad_map["pred"] == "pred_grad"


def test_row8_stop_gradient_prunes_parameters() -> None:
    net = net_of(
        op("FC", ["data", "w1", "b1"], ["h"]),
        op("StopGradient", ["h"], ["h"]),
        op("FC", ["h", "w2", "b2"], ["out"]),
        op("AveragedLoss", ["out"], ["loss"]),
    )
    res = gradient_for_net(net, ["loss"])
    assert "w2" in res.grad_map and "w1" not in res.grad_map and "b1" not in res.grad_map
    assert sum(o.type == "FCGradient" for o in res.grad_ops) == 1
    orphan = net_of(op("Relu", ["x"], ["y"]), op("StopGradient", ["y"], ["x2"]),
                    op("Relu", ["y"], ["z"]))
    with pytest.raises(InvalidNetError, match="orphan"):
        gradient_for_net(orphan, ["z"])


def test_row12_mul_gradient_numbers_with_in_place_free_outputs() -> None:
    net = net_of(op("Mul", ["A", "B"], ["C"]))
    opts = VerifyOptions(
        inputs=[InputSpec("A", random=RandomSpec([3], seed=3)),
                InputSpec("B", random=RandomSpec([3], seed=4))],
        mode="full",
    )
    result = verify_net(net, ["C"], opts)
    assert result.report.passed
    mul_grad = next(o for o in result.grad_ops if o.type == "MulGradient")
    assert not set(mul_grad.input) & set(mul_grad.output)


def test_row13_copy_does_not_detach() -> None:
    net = net_of(
        op("FC", ["x", "w", "b"], ["features"]),
        op("Copy", ["features"], ["features_"]),
        op("AveragedLoss", ["features"], ["loss1"]),
        op("AveragedLoss", ["features_"], ["loss2"]),
    )
    res = gradient_for_net(net, ["loss1", "loss2"])
    sums = [o for o in res.grad_ops if o.type == "Sum"]
    assert len(sums) == 1 and "_features_grad_autosplit_0" in sums[0].input
    assert res.grad_map["w"] == "w_grad"


def test_row14_two_losses_are_both_seeded_and_summed() -> None:
    net = net_of(
        op("FC", ["x", "w", "b"], ["fc3"]),
        op("Softmax", ["fc3"], ["prob"]),
        op("LabelCrossEntropy", ["prob", "label"], ["xent"]),
        op("AveragedLoss", ["xent"], ["loss"]),
        op("SquaredL2Distance", ["fc3", "center"], ["d"]),
        op("AveragedLoss", ["d"], ["loss_reg"]),
    )
    res = gradient_for_net(net, ["loss", "loss_reg"])
    seeds = [o.output[0] for o in res.grad_ops if o.type == "ConstantFill"]
    assert seeds == ["loss_autogen_grad", "loss_reg_autogen_grad"]
    sums = [o for o in res.grad_ops if o.type == "Sum"]
    assert len(sums) == 1 and sums[0].output[0] == "fc3_grad"


def test_row17_registry_lists_python_and_cpp_style_makers() -> None:
    load_all()
    for t in ("Do", "If", "While", "FC", "SoftmaxWithLoss", "Sigmoid", "Concat", "Add"):
        assert REGISTRY[t].status == GradientStatus.GRADIENT, t


def test_row19_skip_ignores_init_ops() -> None:
    net = net_of(
        op("ConstantFill", [], ["w"], shape=[2, 2], value=1.0),
        op("ConstantFill", [], ["b"], shape=[2], value=0.0),
        op("FC", ["x", "w", "b"], ["y"]),
        op("AveragedLoss", ["y"], ["loss"]),
    )
    res = gradient_for_net(net, ["loss"], skip=2)
    assert [o.type for o in res.grad_ops] == [
        "ConstantFill", "AveragedLossGradient", "FCGradient"
    ]


def test_row20_argument_types_round_trip_into_the_maker() -> None:
    res = gradient_for_op(op("Scale", ["X"], ["Y"], scale=0.5), ["Y_grad"])
    (g,) = res.grad_ops
    scale = next(a for a in g.arg if a.name == "scale")
    assert scale.HasField("f") and scale.f == 0.5


def test_row22_op_without_gradient_has_a_clear_error() -> None:
    # Row 22 hit ReduceMin; the newest Caffe2 (and netgrad since issue 8) differentiates it,
    # so the clear error is shown on Ceil, which Caffe2 marks GRADIENT_NOT_IMPLEMENTED_YET.
    net = net_of(op("Ceil", ["x"], ["y"]), op("AveragedLoss", ["y"], ["loss"]))
    with pytest.raises(GradientNotDefinedError) as info:
        gradient_for_net(net, ["loss"])
    p = info.value.problems[0]
    assert (p.op_index, p.op_type) == (0, "Ceil")
    net = net_of(op("ReduceMin", ["x"], ["y"]), op("AveragedLoss", ["y"], ["loss"]))
    assert "ReduceMinGradient" in [g.type for g in gradient_for_net(net, ["loss"]).grad_ops]


def test_row24_dropout_gradient_mirrors_is_test() -> None:
    (test_grad,) = gradient_for_op(
        op("Dropout", ["x"], ["y", "mask"], is_test=1), ["y_grad", None]
    ).grad_ops
    (train_grad,) = gradient_for_op(
        op("Dropout", ["x"], ["y", "mask"], is_test=0), ["y_grad", None]
    ).grad_ops
    assert list(test_grad.input) == ["y_grad"]
    assert list(train_grad.input) == ["y_grad", "mask"]


def test_row29_gradient_of_a_gradient_op_is_an_explicit_error() -> None:
    with pytest.raises(GradientNotDefinedError, match="ReluGradient"):
        gradient_for_op(op("ReluGradient", ["y", "dy"], ["dx"]), ["dx_grad"])


def test_row30_compound_condition_net_does_not_affect_body_gradient() -> None:
    net = NetDef()
    net.name = "loop"
    body = net_of(op("Sum", ["counter", "ONE"], ["counter"]),
                  op("Scale", ["x"], ["x"], scale=2.0))
    cond = net_of(
        op("LT", ["counter", "THREE"], ["lt"]),
        op("GT", ["counter", "MINUS"], ["gt"]),
        op("And", ["lt", "gt"], ["cond"]),
    )
    add_while_op(net, "cond", ["x", "counter", "ONE", "THREE", "MINUS", "lt", "gt"], body, cond)
    feeds = [
        InputSpec("x", random=RandomSpec([3], seed=5)),
        InputSpec.from_array("counter", np.array(0.0)),
        InputSpec.from_array("ONE", np.array(1.0)),
        InputSpec.from_array("THREE", np.array(3.0)),
        InputSpec.from_array("MINUS", np.array(-1.0)),
    ]
    result = verify_net(net, {"x": "x_grad"}, VerifyOptions(inputs=feeds, mode="full",
                                                             check=["x"]))
    assert result.report.passed


def test_row34_onnx_while_on_the_loss_path_is_a_clear_error() -> None:
    net = net_of(op("ONNXWhile", ["n", "c", "a"], ["a_out"]), op("AveragedLoss", ["a_out"],
                                                                   ["loss"]))
    with pytest.raises(GradientNotDefinedError) as info:
        gradient_for_net(net, ["loss"])
    assert info.value.problems[0].op_type == "ONNXWhile"
