"""Structure of the NN/loss/detection gradient ops (Caffe2 signatures) and kernel semantics.

Maker tests check op types, input/output order, copied or added args and ``g_input``; kernel
tests compare against independent reference computations (naive loops, closed forms).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from api_schemas import caffe2_pb2
from core.errors import ExecutionError, GradientError, GradientNotDefinedError, InvalidNetError
from core.ops import load_all
from core.registry import (
    find_arg,
    get_gradient_for_op,
    get_kernel,
    make_arg,
    make_op,
)

load_all()


def _op(op_type: str, ins: list[str], outs: list[str], **args: Any) -> caffe2_pb2.OperatorDef:
    return make_op(op_type, ins, outs, [make_arg(k, v) for k, v in args.items()])


def _grad(
    op: caffe2_pb2.OperatorDef, with_grad: tuple[int, ...] = (0,)
) -> tuple[list[caffe2_pb2.OperatorDef], list[Any]]:
    g_out = [o + "_grad" if i in with_grad else None for i, o in enumerate(op.output)]
    return get_gradient_for_op(op, g_out)


def _arg_names(op: caffe2_pb2.OperatorDef) -> list[str]:
    return [a.name for a in op.arg]


def _run(op: caffe2_pb2.OperatorDef, *inputs: np.ndarray) -> list[np.ndarray]:
    kernel = get_kernel(op.type)
    assert kernel is not None, op.type
    return list(kernel(op, list(inputs)))


# ---- maker structure ----------------------------------------------------------------------


@pytest.mark.parametrize("op_type", ["FC", "FCTransposed"])
def test_fc_gradient_signature_and_output_order(op_type: str) -> None:
    ops, g_in = _grad(_op(op_type, ["X", "W", "b"], ["Y"], axis=1))
    assert len(ops) == 1
    g = ops[0]
    assert g.type == op_type + "Gradient"
    assert list(g.input) == ["X", "W", "Y_grad"]
    assert list(g.output) == ["W_grad", "b_grad", "X_grad"]
    assert _arg_names(g) == ["axis"]
    assert g.is_gradient_op
    assert g_in == ["X_grad", "W_grad", "b_grad"]


def test_fc_requires_three_inputs_schema() -> None:
    with pytest.raises(InvalidNetError, match="schema"):
        _grad(_op("FC", ["X", "W"], ["Y"]))


@pytest.mark.parametrize("op_type", ["Conv", "Conv2D", "ConvTranspose"])
def test_conv_gradient_with_bias(op_type: str) -> None:
    op = _op(op_type, ["X", "W", "b"], ["Y"], kernel=3, pad=1)
    op.engine = "CUDNN"
    ops, g_in = _grad(op)
    assert [g.type for g in ops] == [op_type + "Gradient"]
    g = ops[0]
    assert list(g.input) == ["X", "W", "Y_grad"]
    assert list(g.output) == ["W_grad", "b_grad", "X_grad"]
    assert _arg_names(g) == ["kernel", "pad"]
    assert g.engine == "CUDNN"
    assert g_in == ["X_grad", "W_grad", "b_grad"]


@pytest.mark.parametrize("op_type", ["Conv", "ConvTranspose"])
def test_conv_gradient_without_bias_adds_no_bias(op_type: str) -> None:
    ops, g_in = _grad(_op(op_type, ["X", "W"], ["Y"], kernel=3))
    g = ops[0]
    assert list(g.input) == ["X", "W", "Y_grad"]
    assert list(g.output) == ["W_grad", "X_grad"]
    # The maker's own arg comes first, then the appended forward args.
    assert _arg_names(g) == ["no_bias", "kernel"]
    no_bias = find_arg(g, "no_bias")
    assert no_bias is not None and no_bias.i == 1
    assert g_in == ["X_grad", "W_grad"]


def test_conv_no_gradient_to_input_drops_dx() -> None:
    ops, g_in = _grad(_op("Conv", ["X", "W", "b"], ["Y"], kernel=3, no_gradient_to_input=1))
    assert list(ops[0].output) == ["W_grad", "b_grad"]
    assert g_in == [None, "W_grad", "b_grad"]
    ops, g_in = _grad(_op("Conv", ["X", "W"], ["Y"], kernel=3, no_gradient_to_input=1))
    assert list(ops[0].output) == ["W_grad"]
    assert g_in == [None, "W_grad"]


@pytest.mark.parametrize("op_type", ["MaxPool", "AveragePool", "MaxPool2D", "AveragePool3D"])
def test_pool_gradient_signature(op_type: str) -> None:
    ops, g_in = _grad(_op(op_type, ["X"], ["Y"], kernel=2, stride=2, order="NCHW"))
    g = ops[0]
    assert g.type == op_type + "Gradient"
    assert list(g.input) == ["X", "Y", "Y_grad"]
    assert list(g.output) == ["X_grad"]
    assert _arg_names(g) == ["kernel", "stride", "order"]
    assert g_in == ["X_grad"]


def test_spatial_bn_training_gradient() -> None:
    op = _op(
        "SpatialBN",
        ["X", "scale", "bias", "rm", "rv"],
        ["Y", "rm", "rv", "sm", "siv"],
        epsilon=1e-5,
    )
    ops, g_in = _grad(op)
    g = ops[0]
    assert g.type == "SpatialBNGradient"
    assert list(g.input) == ["X", "scale", "Y_grad", "sm", "siv"]
    assert list(g.output) == ["X_grad", "scale_grad", "bias_grad"]
    assert _arg_names(g) == ["epsilon"]
    assert g_in == ["X_grad", "scale_grad", "bias_grad", None, None]


def test_spatial_bn_is_test_gradient_uses_running_stats() -> None:
    op = _op("SpatialBN", ["X", "s", "b", "mean", "var"], ["Y"], is_test=1, epsilon=0.001)
    ops, g_in = _grad(op)
    assert list(ops[0].input) == ["X", "s", "Y_grad", "mean", "var"]
    assert list(ops[0].output) == ["X_grad", "s_grad", "b_grad"]
    assert g_in == ["X_grad", "s_grad", "b_grad", None, None]


def test_spatial_bn_in_place_is_a_schema_error() -> None:
    # bug-cases.md row 5: in-place SpatialBN (X == Y) fails the gradient maker's schema check.
    op = _op(
        "SpatialBN",
        ["r", "r_scale", "r_bias", "r_mean", "r_var"],
        ["r"],
        is_test=1,
        epsilon=0.001,
        momentum=0.1,
        order="NCHW",
    )
    with pytest.raises(InvalidNetError) as info:
        _grad(op)
    msg = str(info.value)
    assert "schema" in msg
    assert "SpatialBN" in msg and "'r'" in msg


def test_spatial_bn_is_test_with_five_outputs_is_rejected() -> None:
    op = _op("SpatialBN", ["X", "s", "b", "m", "v"], ["Y", "m", "v", "sm", "siv"], is_test=1)
    with pytest.raises(GradientError, match="is_test"):
        _grad(op)


def test_lrn_gradient_signature() -> None:
    op = _op("LRN", ["X"], ["Y", "Y_scale"], size=5, alpha=1e-4, beta=0.75, bias=1.0)
    ops, g_in = _grad(op)
    g = ops[0]
    assert g.type == "LRNGradient"
    assert list(g.input) == ["X", "Y", "Y_grad"]
    assert list(g.output) == ["X_grad"]
    assert _arg_names(g) == ["size", "alpha", "beta", "bias"]
    assert g_in == ["X_grad"]


def test_softmax_gradient_signature() -> None:
    ops, g_in = _grad(_op("Softmax", ["X"], ["Y"], axis=1))
    assert (ops[0].type, list(ops[0].input), list(ops[0].output)) == (
        "SoftmaxGradient",
        ["Y", "Y_grad"],
        ["X_grad"],
    )
    assert _arg_names(ops[0]) == ["axis"]


def test_dropout_gradient_forms() -> None:
    ops, g_in = _grad(_op("Dropout", ["X"], ["X", "mask"], ratio=0.5, is_test=1))
    assert (ops[0].type, list(ops[0].input), list(ops[0].output)) == (
        "DropoutGrad",
        ["X_grad"],
        ["X_grad"],
    )
    ops, g_in = _grad(_op("Dropout", ["X"], ["Y", "mask"], ratio=0.5))
    assert list(ops[0].input) == ["Y_grad", "mask"]
    assert _arg_names(ops[0]) == ["ratio"]
    assert g_in == ["X_grad"]
    with pytest.raises(GradientError, match="mask"):
        _grad(_op("Dropout", ["X"], ["Y"], ratio=0.5))


def test_softmax_with_loss_gradient_signature() -> None:
    ops, g_in = _grad(_op("SoftmaxWithLoss", ["X", "L"], ["P", "loss"]), with_grad=(1,))
    assert (ops[0].type, list(ops[0].input), list(ops[0].output)) == (
        "SoftmaxWithLossGradient",
        ["X", "L", "P", "loss_grad"],
        ["X_grad"],
    )
    assert g_in == ["X_grad", None]
    ops, g_in = _grad(
        _op("SoftmaxWithLoss", ["X", "L", "w"], ["P", "loss"], scale=2.0), with_grad=(1,)
    )
    assert list(ops[0].input) == ["X", "L", "w", "P", "loss_grad"]
    assert _arg_names(ops[0]) == ["scale"]
    assert g_in == ["X_grad", None, None]
    with pytest.raises(GradientError, match="loss"):
        _grad(_op("SoftmaxWithLoss", ["X", "L"], ["P", "loss"]), with_grad=(0,))


@pytest.mark.parametrize(
    ("op_type", "ins", "grad_type", "grad_ins", "grad_outs"),
    [
        (
            "LabelCrossEntropy",
            ["X", "L"],
            "LabelCrossEntropyGradient",
            ["X", "L", "Y_grad"],
            ["X_grad"],
        ),
        ("AveragedLoss", ["X"], "AveragedLossGradient", ["X", "Y_grad"], ["X_grad"]),
        (
            "SquaredL2Distance",
            ["X", "T"],
            "SquaredL2DistanceGradient",
            ["X", "T", "Y_grad"],
            ["X_grad", "T_grad"],
        ),
        ("RoIAlign", ["X", "rois"], "RoIAlignGradient", ["X", "rois", "Y_grad"], ["X_grad"]),
        ("ResizeNearest", ["X"], "ResizeNearestGradient", ["Y_grad", "X"], ["X_grad"]),
        ("NCHW2NHWC", ["X"], "NHWC2NCHW", ["Y_grad"], ["X_grad"]),
        ("NHWC2NCHW", ["X"], "NCHW2NHWC", ["Y_grad"], ["X_grad"]),
    ],
)
def test_simple_gradient_signatures(
    op_type: str, ins: list[str], grad_type: str, grad_ins: list[str], grad_outs: list[str]
) -> None:
    ops, _ = _grad(_op(op_type, ins, ["Y"]))
    assert [(g.type, list(g.input), list(g.output)) for g in ops] == [
        (grad_type, grad_ins, grad_outs)
    ]


def test_roi_align_gives_no_gradient_to_rois() -> None:
    _, g_in = _grad(_op("RoIAlign", ["X", "rois"], ["Y"], pooled_h=2, pooled_w=2))
    assert g_in == ["X_grad", None]


@pytest.mark.parametrize("op_type", ["GenerateProposals", "BBoxTransform", "BoxWithNMSLimit"])
def test_detection_ops_should_not_be_differentiated(op_type: str) -> None:
    with pytest.raises(GradientNotDefinedError, match="should not"):
        _grad(_op(op_type, ["a", "b", "c"], ["y"]))


# ---- kernel semantics ---------------------------------------------------------------------


def _naive_conv(
    x: np.ndarray, w: np.ndarray, stride: int, pad: int, dil: int, group: int
) -> np.ndarray:
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x, [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    ho = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
    wo = (wd + 2 * pad - dil * (kw - 1) - 1) // stride + 1
    y = np.zeros((n, m, ho, wo))
    mg = m // group
    for b in range(n):
        for o in range(m):
            g = o // mg
            for i in range(ho):
                for j in range(wo):
                    acc = 0.0
                    for ci in range(cg):
                        for p in range(kh):
                            for q in range(kw):
                                acc += (
                                    w[o, ci, p, q]
                                    * xp[b, g * cg + ci, i * stride + p * dil, j * stride + q * dil]
                                )
                    y[b, o, i, j] = acc
    return y


def test_conv_matches_naive_loops() -> None:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 4, 7, 6))
    w = rng.standard_normal((6, 2, 3, 2))
    b = rng.standard_normal(6)
    op = _op("Conv", ["X", "W", "b"], ["Y"], kernels=[3, 2], stride=2, pad=1, dilation=2, group=2)
    (y,) = _run(op, x, w, b)
    ref = _naive_conv(x, w, 2, 1, 2, 2) + b[None, :, None, None]
    np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-12)


def test_conv_nhwc_equals_nchw() -> None:
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 5, 5))
    w = rng.standard_normal((4, 3, 3, 3))
    (y_nchw,) = _run(_op("Conv", ["X", "W"], ["Y"], kernel=3, stride=2), x, w)
    (y_nhwc,) = _run(
        _op("Conv", ["X", "W"], ["Y"], kernel=3, stride=2, order="NHWC"),
        x.transpose(0, 2, 3, 1),
        w.transpose(0, 2, 3, 1),
    )
    np.testing.assert_allclose(y_nhwc.transpose(0, 3, 1, 2), y_nchw, rtol=1e-12)


def test_conv_transpose_matches_scatter_reference() -> None:
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 2, 3, 3))
    w = rng.standard_normal((2, 3, 3, 3))
    stride, pad = 2, 1
    (y,) = _run(_op("ConvTranspose", ["X", "W"], ["Y"], kernel=3, stride=stride, pad=pad), x, w)
    full = np.zeros((1, 3, (3 - 1) * stride + 3, (3 - 1) * stride + 3))
    for ci in range(2):
        for i in range(3):
            for j in range(3):
                full[0, :, i * stride : i * stride + 3, j * stride : j * stride + 3] += (
                    x[0, ci, i, j] * w[ci]
                )
    np.testing.assert_allclose(y, full[:, :, pad:-pad, pad:-pad], rtol=1e-12, atol=1e-12)


def test_conv_channel_mismatch_raises_execution_error() -> None:
    op = _op("Conv", ["X", "W"], ["Y"], kernel=3)
    with pytest.raises(ExecutionError, match="Conv"):
        _run(op, np.zeros((1, 3, 5, 5)), np.zeros((2, 4, 3, 3)))


def test_conv_keeps_float32() -> None:
    op = _op("Conv", ["X", "W", "b"], ["Y"], kernel=3)
    (y,) = _run(
        op,
        np.ones((1, 2, 4, 4), np.float32),
        np.ones((3, 2, 3, 3), np.float32),
        np.zeros(3, np.float32),
    )
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, np.full((1, 3, 2, 2), 18.0, np.float32))


def test_pool_output_size_floor_vs_caffe_legacy_ceil() -> None:
    x = np.arange(36.0).reshape(1, 1, 6, 6)
    (y_floor,) = _run(_op("MaxPool", ["X"], ["Y"], kernel=3, stride=2), x)
    (y_ceil,) = _run(_op("MaxPool", ["X"], ["Y"], kernel=3, stride=2, legacy_pad=3), x)
    assert y_floor.shape == (1, 1, 2, 2)
    assert y_ceil.shape == (1, 1, 3, 3)
    # The extra (clipped) window in the last row/column only sees the image's edge.
    np.testing.assert_array_equal(y_ceil[0, 0], [[14, 16, 17], [26, 28, 29], [32, 34, 35]])


def test_maxpool_gradient_gives_dy_to_every_tied_max() -> None:
    x = np.array([[[[1.0, 1.0], [0.0, 1.0]]]])
    op = _op("MaxPool", ["X"], ["Y"], kernel=2)
    (y,) = _run(op, x)
    grad_op = _op("MaxPoolGradient", ["X", "Y", "dY"], ["dX"], kernel=2)
    (dx,) = _run(grad_op, x, y, np.full(y.shape, 3.0))
    np.testing.assert_array_equal(dx, [[[[3.0, 3.0], [0.0, 3.0]]]])


def test_average_pool_count_include_pad() -> None:
    x = np.ones((1, 1, 3, 3))
    (y,) = _run(_op("AveragePool", ["X"], ["Y"], kernel=3, stride=1, pad=1), x)
    np.testing.assert_allclose(y, np.ones((1, 1, 3, 3)))
    (y_inc,) = _run(
        _op("AveragePool", ["X"], ["Y"], kernel=3, stride=1, pad=1, count_include_pad=1), x
    )
    np.testing.assert_allclose(y_inc[0, 0, 0, 0], 4.0 / 9.0)
    np.testing.assert_allclose(y_inc[0, 0, 1, 1], 1.0)


def test_bad_legacy_pad_raises() -> None:
    with pytest.raises(ExecutionError, match="legacy_pad"):
        _run(_op("MaxPool", ["X"], ["Y"], kernel=2, legacy_pad=7), np.zeros((1, 1, 4, 4)))


def test_spatial_bn_training_outputs() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 2, 3, 3)) * 2.0 + 1.0
    scale, bias = np.array([1.5, -0.5]), np.array([0.1, 0.2])
    rm, rv = np.array([0.0, 1.0]), np.array([1.0, 2.0])
    op = _op(
        "SpatialBN",
        ["X", "s", "b", "rm", "rv"],
        ["Y", "rm", "rv", "sm", "siv"],
        momentum=0.8,
        epsilon=1e-5,
    )
    y, rm2, rv2, sm, siv = _run(op, x, scale, bias, rm, rv)
    per_c = x.transpose(1, 0, 2, 3).reshape(2, -1)
    mu, var = per_c.mean(axis=1), per_c.var(axis=1)
    np.testing.assert_allclose(sm, mu)
    np.testing.assert_allclose(siv, 1.0 / np.sqrt(var + 1e-5))
    np.testing.assert_allclose(rm2, 0.8 * rm + 0.2 * mu)
    np.testing.assert_allclose(rv2, 0.8 * rv + 0.2 * var)
    y_c = y.transpose(1, 0, 2, 3).reshape(2, -1)
    np.testing.assert_allclose(y_c.mean(axis=1), bias, atol=1e-12)
    np.testing.assert_allclose(y_c.std(axis=1), np.abs(scale), rtol=1e-5)


def test_spatial_bn_gradient_is_test_is_a_plain_scale() -> None:
    x = np.ones((1, 2, 1, 1))
    dy = np.array([2.0, 3.0]).reshape(1, 2, 1, 1)
    op = _op(
        "SpatialBNGradient", ["X", "s", "dY", "m", "v"], ["dX", "ds", "db"], is_test=1, epsilon=0.0
    )
    dx, ds, db = _run(op, x, np.array([2.0, 1.0]), dy, np.array([0.0, 0.0]), np.array([4.0, 1.0]))
    np.testing.assert_allclose(dx.reshape(-1), [2.0 * 2.0 / 2.0, 3.0])
    np.testing.assert_allclose(ds, [2.0 * 0.5, 3.0])
    np.testing.assert_allclose(db, [2.0, 3.0])


def test_lrn_even_size_raises() -> None:
    with pytest.raises(ExecutionError, match="size"):
        _run(_op("LRN", ["X"], ["Y"], size=4, alpha=1.0, beta=0.5), np.ones((1, 4, 2, 2)))


def test_lrn_single_channel_closed_form() -> None:
    x = np.full((1, 3, 1, 1), 2.0)
    y, scale = _run(_op("LRN", ["X"], ["Y", "S"], size=3, alpha=3.0, beta=0.5, bias=1.0), x)
    # middle channel: window sum 12, scale = 1 + (3/3)·12 = 13; edges: sum 8 → 9
    np.testing.assert_allclose(scale.reshape(-1), [9.0, 13.0, 9.0])
    np.testing.assert_allclose(y.reshape(-1), 2.0 / np.sqrt([9.0, 13.0, 9.0]))


def test_dropout_is_deterministic_and_scales() -> None:
    x = np.ones((50, 40))
    op = _op("Dropout", ["X"], ["Y", "mask"], ratio=0.25)
    y1, m1 = _run(op, x)
    y2, m2 = _run(op, x)
    np.testing.assert_array_equal(m1, m2)
    assert m1.dtype == np.bool_
    np.testing.assert_allclose(y1[m1], 1.0 / 0.75)
    assert np.all(y1[~m1] == 0.0)
    assert 0.65 < m1.mean() < 0.85
    seeded = _op("Dropout", ["X"], ["Y", "mask"], ratio=0.25, seed=1)
    _, m3 = _run(seeded, x)
    assert not np.array_equal(m1, m3)
    y_test, _ = _run(_op("Dropout", ["X"], ["Y", "mask"], is_test=1), x)
    np.testing.assert_array_equal(y_test, x)


def test_softmax_with_loss_value() -> None:
    x = np.array([[0.0, np.log(3.0)], [np.log(2.0), np.log(2.0)]])
    labels = np.array([1, 0], dtype=np.int32)
    p, loss = _run(_op("SoftmaxWithLoss", ["X", "L"], ["P", "loss"], scale=3.0), x, labels)
    np.testing.assert_allclose(p, [[0.25, 0.75], [0.5, 0.5]])
    assert loss.shape == ()
    np.testing.assert_allclose(loss, 3.0 * (-np.log(0.75) - np.log(0.5)) / 2.0)
    with pytest.raises(ExecutionError, match="labels"):
        _run(_op("SoftmaxWithLoss", ["X", "L"], ["P", "loss"]), x, np.array([0, 2]))


def test_resize_nearest_integer_scale_is_repeat() -> None:
    x = np.arange(12.0).reshape(1, 2, 2, 3)
    op = _op("ResizeNearest", ["X"], ["Y"], width_scale=2.0, height_scale=3.0)
    (y,) = _run(op, x)
    np.testing.assert_array_equal(y, np.repeat(np.repeat(x, 3, axis=2), 2, axis=3))
    (dx,) = _run(
        _op("ResizeNearestGradient", ["dY", "X"], ["dX"], width_scale=2.0, height_scale=3.0),
        np.ones_like(y),
        x,
    )
    np.testing.assert_array_equal(dx, np.full(x.shape, 6.0))


def test_roi_align_on_a_linear_ramp() -> None:
    # X[h, w] = w: bilinear sampling is exact, so each bin is the mean sample x-coordinate.
    x = np.tile(np.arange(8.0), (8, 1))[None, None]
    rois = np.array([[0.0, 1.0, 2.0, 5.0, 6.0]])
    op = _op("RoIAlign", ["X", "R"], ["Y"], pooled_h=2, pooled_w=2, sampling_ratio=2)
    (y,) = _run(op, x, rois)
    np.testing.assert_allclose(y[0, 0], [[2.0, 4.0], [2.0, 4.0]])


def test_layout_transposes_round_trip() -> None:
    x = np.arange(24.0).reshape(1, 2, 3, 4)
    (nhwc,) = _run(_op("NCHW2NHWC", ["X"], ["Y"]), x)
    assert nhwc.shape == (1, 3, 4, 2)
    (back,) = _run(_op("NHWC2NCHW", ["Y"], ["Z"]), nhwc)
    np.testing.assert_array_equal(back, x)
