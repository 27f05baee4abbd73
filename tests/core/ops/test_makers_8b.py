"""Structure of the gradient ops emitted by the issue-8b makers (math_unary, reductions, layout).

Each row states Caffe2's signature (from the op's ``Get<Op>Gradient`` class, newest
revision): gradient-op type, inputs (which of X / Y / dY, in Caffe2's order) and outputs.
Further tests pin the corrected behaviours (Sqr leaves dY alone, zero-filled missing
gradients of Moments / DepthSplit), Caffe2's refusals (in-place Softsign) and dtypes of the
half-precision casts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from api_schemas import caffe2_pb2
from core.errors import GradientError
from core.ops import load_all
from core.ops.math_unary import UNARY_OPS
from core.registry import get_gradient_for_op, make_arg, make_op
from core.types import GradValue
from core.verify.opcheck import run_op

load_all()

Sig = tuple[str, list[str], list[str]]


def op(t: str, ins: list[str], outs: list[str], **args: Any) -> caffe2_pb2.OperatorDef:
    return make_op(t, ins, outs, [make_arg(k, v) for k, v in args.items()])


def grad(
    fwd: caffe2_pb2.OperatorDef, g_output: list[GradValue] | None = None
) -> tuple[list[caffe2_pb2.OperatorDef], list[GradValue]]:
    if g_output is None:
        g_output = [o + "_grad" for o in fwd.output]
    return get_gradient_for_op(fwd, g_output)


def sig(g: caffe2_pb2.OperatorDef) -> Sig:
    return g.type, list(g.input), list(g.output)


# Caffe2's reads of each unary gradient op, written out independently of the module's table.
_UNARY_READS = {
    "Gelu": ("GeluGradient", ["Y_grad", "X"]),
    "Swish": ("SwishGradient", ["X", "Y", "Y_grad"]),
    "Elu": ("EluGradient", ["Y", "Y_grad"]),
    "ELU": ("ELUGradient", ["Y", "Y_grad"]),
    "Clip": ("ClipGradient", ["Y", "Y_grad"]),
    "Rsqrt": ("RsqrtGradient", ["Y_grad", "Y"]),
    "Reciprocal": ("ReciprocalGradient", ["Y", "Y_grad"]),
    "Sin": ("SinGradient", ["X", "Y_grad"]),
    "Cos": ("CosGradient", ["X", "Y_grad"]),
    "Tan": ("TanGradient", ["X", "Y_grad"]),
    "Asin": ("AsinGradient", ["X", "Y_grad"]),
    "Acos": ("AcosGradient", ["X", "Y_grad"]),
    "Atan": ("AtanGradient", ["X", "Y_grad"]),
    "Sinh": ("SinhGradient", ["Y_grad", "X"]),
    "Cosh": ("CoshGradient", ["Y_grad", "X"]),
    "Cube": ("CubeGradient", ["Y_grad", "X"]),
    "Cbrt": ("CbrtGradient", ["Y_grad", "Y"]),
    "Erf": ("ErfGradient", ["X", "Y_grad"]),
    "Mish": ("MishGradient", ["X", "Y", "Y_grad"]),
    "Selu": ("SeluGradient", ["Y", "Y_grad"]),
    "Softplus": ("SoftplusGradient", ["Y", "Y_grad"]),
    "Softsign": ("SoftsignGradient", ["X", "Y_grad"]),
    "HardSigmoid": ("HardSigmoidGradient", ["Y", "Y_grad"]),
    "Logit": ("LogitGradient", ["X", "Y_grad"]),
    "ThresholdedRelu": ("ThresholdedReluGradient", ["Y", "Y_grad"]),
    "ReluN": ("ReluNGradient", ["Y", "Y_grad"]),
}


def test_the_table_covers_exactly_the_listed_unary_ops() -> None:
    assert {u.op_type for u in UNARY_OPS} == set(_UNARY_READS)


@pytest.mark.parametrize("t", sorted(_UNARY_READS))
def test_unary_gradient_signature_and_args_copied(t: str) -> None:
    ops, g_in = grad(op(t, ["X"], ["Y"], alpha=0.3))
    gtype, reads = _UNARY_READS[t]
    assert [sig(g) for g in ops] == [(gtype, reads, ["X_grad"])]
    assert g_in == ["X_grad"]
    assert [(a.name, a.f) for a in ops[0].arg] == [("alpha", pytest.approx(0.3))]
    assert ops[0].is_gradient_op


@pytest.mark.parametrize(
    ("fwd", "expected", "g_in"),
    [
        (op("PRelu", ["X", "W"], ["Y"]),
         [("PReluGradient", ["Y", "Y_grad", "X", "W"], ["X_grad", "W_grad"])],
         ["X_grad", "W_grad"]),
        (op("NegateGradient", ["X"], ["Y"]), [("Negative", ["Y_grad"], ["X_grad"])], ["X_grad"]),
        (op("FloatToHalf", ["X"], ["Y"]), [("HalfToFloat", ["Y_grad"], ["X_grad"])], ["X_grad"]),
        (op("HalfToFloat", ["X"], ["Y"]), [("FloatToHalf", ["Y_grad"], ["X_grad"])], ["X_grad"]),
        (op("SumElements", ["X"], ["Y"]),
         [("SumElementsGradient", ["X", "Y_grad"], ["X_grad"])], ["X_grad"]),
        (op("WeightedSum", ["A", "a", "B", "b"], ["Y"]),
         [("WeightedSumGradient", ["Y_grad", "A", "a", "B", "b"], ["A_grad", "B_grad"])],
         ["A_grad", None, "B_grad", None]),
        (op("WeightedSum", ["A", "a", "B", "b"], ["Y"], grad_on_w=1),
         [("WeightedSumGradient", ["Y_grad", "A", "a", "B", "b"],
           ["A_grad", "B_grad", "a_grad", "b_grad"])],
         ["A_grad", "a_grad", "B_grad", "b_grad"]),
        (op("ReduceFrontSum", ["X"], ["Y"]),
         [("ReduceFrontSumGradient", ["Y_grad", "X"], ["X_grad"])], ["X_grad"]),
        (op("ReduceBackMean", ["X", "L"], ["Y"]),
         [("ReduceBackMeanGradient", ["Y_grad", "X", "L"], ["X_grad"])], ["X_grad", None]),
        (op("ReduceFrontMax", ["X", "L"], ["Y"]),
         [("ReduceFrontMaxGradient", ["Y_grad", "X", "Y", "L"], ["X_grad"])], ["X_grad", None]),
        (op("ReduceL2", ["X"], ["Y"]),
         [("ReduceL2Gradient", ["Y_grad", "X", "Y"], ["X_grad"])], ["X_grad"]),
        (op("RowwiseMax", ["X"], ["Y"]),
         [("RowwiseMaxGradient", ["X", "Y", "Y_grad"], ["X_grad"])], ["X_grad"]),
        (op("ColwiseMax", ["X"], ["Y"]),
         [("ColwiseMaxGradient", ["X", "Y", "Y_grad"], ["X_grad"])], ["X_grad"]),
        (op("Max", ["A", "B", "C"], ["Y"]),
         [("MaxGradient", ["Y", "Y_grad", "A", "B", "C"], ["A_grad", "B_grad", "C_grad"])],
         ["A_grad", "B_grad", "C_grad"]),
        (op("Min", ["A", "B"], ["Y"]),
         [("MinGradient", ["Y", "Y_grad", "A", "B"], ["A_grad", "B_grad"])],
         ["A_grad", "B_grad"]),
        (op("Moments", ["X"], ["m", "v"]),
         [("MomentsGradient", ["m_grad", "v_grad", "X", "m"], ["X_grad"])], ["X_grad"]),
        (op("BatchMoments", ["X"], ["m", "v"]),
         [("BatchMomentsGradient", ["m_grad", "v_grad", "X"], ["X_grad"])], ["X_grad"]),
        (op("ReluFp16", ["X"], ["Y"]),
         [("ReluFp16Gradient", ["Y", "Y_grad"], ["X_grad"])], ["X_grad"]),
        (op("SoftmaxFp16", ["X"], ["Y"]),
         [("SoftmaxFp16Gradient", ["Y", "Y_grad"], ["X_grad"])], ["X_grad"]),
        (op("L1Distance", ["X", "Z"], ["D"]),
         [("L1DistanceGradient", ["X", "Z", "D_grad"], ["X_grad", "Z_grad"])],
         ["X_grad", "Z_grad"]),
        (op("SquareRootDivide", ["X", "S"], ["Y"]),
         [("SquareRootDivide", ["Y_grad", "S"], ["X_grad"])], ["X_grad", None]),
        (op("Tile", ["X", "T", "A"], ["Y"]),
         [("TileGradient", ["Y_grad", "T", "A"], ["X_grad"])], ["X_grad", None, None]),
        (op("Expand", ["X", "S"], ["Y"]),
         [("ExpandGradient", ["Y_grad", "X"], ["X_grad"])], ["X_grad", None]),
        (op("PadImage", ["X"], ["Y"], pad=1),
         [("PadImageGradient", ["Y_grad"], ["X_grad"])], ["X_grad"]),
        (op("ChannelShuffle", ["X"], ["Y"], group=2),
         [("ChannelShuffleGradient", ["Y_grad"], ["X_grad"])], ["X_grad"]),
        (op("DepthConcat", ["A", "B"], ["Y", "info"]),
         [("DepthSplit", ["Y_grad", "info"], ["A_grad", "B_grad"])], ["A_grad", "B_grad"]),
        (op("DepthSplit", ["X"], ["P", "Q"]),
         [("DepthConcat", ["P_grad", "Q_grad"], ["X_grad", "_X_grad_dims"])], ["X_grad"]),
        (op("Im2Col", ["X"], ["Y"], kernel=2), [("Col2Im", ["Y_grad", "X"], ["X_grad"])],
         ["X_grad"]),
        (op("Col2Im", ["X", "Z"], ["Y"], kernel=2), [("Im2Col", ["Y_grad"], ["X_grad"])],
         ["X_grad", None]),
        (op("SpaceToBatch", ["X"], ["Y"]), [("BatchToSpace", ["Y_grad"], ["X_grad"])],
         ["X_grad"]),
        (op("BatchToSpace", ["X"], ["Y"]), [("SpaceToBatch", ["Y_grad"], ["X_grad"])],
         ["X_grad"]),
    ],
)
def test_gradient_signatures(
    fwd: caffe2_pb2.OperatorDef, expected: list[Sig], g_in: list[GradValue]
) -> None:
    ops, got = grad(fwd, [o + "_grad" if o not in ("info",) else None for o in fwd.output])
    assert [sig(g) for g in ops] == expected
    assert got == g_in


def test_prepend_dim_does_not_copy_args_and_merges_back() -> None:
    ops, g_in = grad(op("PrependDim", ["X"], ["Y"], dim_size=2))
    assert [sig(g) for g in ops] == [("MergeDim", ["Y_grad"], ["X_grad"])]
    assert list(ops[0].arg) == []
    blobs = {"Y_grad": np.arange(12.0).reshape(2, 3, 2)}
    run_op(ops[0], blobs)
    assert blobs["X_grad"].shape == (6, 2)


def test_sqr_writes_dx_and_leaves_dy_alone() -> None:
    ops, _ = grad(op("Sqr", ["X"], ["Y"]))
    assert [sig(g) for g in ops] == [
        ("Scale", ["Y_grad"], ["X_grad"]),
        ("Mul", ["X_grad", "X"], ["X_grad"]),
    ]
    assert [(a.name, a.f) for a in ops[0].arg] == [("scale", 2.0)]
    dy = np.array([1.0, -2.0])
    blobs = {"X": np.array([3.0, 0.5]), "Y_grad": dy.copy()}
    for g in ops:
        run_op(g, blobs)
    np.testing.assert_array_equal(blobs["Y_grad"], dy)  # upstream scaled dY in place
    np.testing.assert_allclose(blobs["X_grad"], [6.0, -2.0])


def test_in_place_softsign_is_refused_as_in_caffe2() -> None:
    with pytest.raises(GradientError, match="in-place"):
        grad(op("Softsign", ["X"], ["X"]))


def test_max_tie_gives_dy_to_every_tied_input() -> None:
    ops, _ = grad(op("Max", ["A", "B"], ["Y"]))
    blobs = {"A": np.array([1.0, 2.0]), "B": np.array([1.0, 0.0])}
    run_op(op("Max", ["A", "B"], ["Y"]), blobs)
    blobs["Y_grad"] = np.array([5.0, 7.0])
    run_op(ops[0], blobs)
    np.testing.assert_array_equal(blobs["A_grad"], [5.0, 7.0])
    np.testing.assert_array_equal(blobs["B_grad"], [5.0, 0.0])


@pytest.mark.parametrize("missing", [0, 1])
def test_moments_zero_fills_a_missing_output_gradient(missing: int) -> None:
    fwd = op("Moments", ["X"], ["m", "v"], axes=[1])
    g_out: list[GradValue] = ["m_grad", "v_grad"]
    g_out[missing] = None
    ops, _ = grad(fwd, g_out)
    out = ["m", "v"][missing]
    zero = f"_{out}_grad_autogen_zero"
    assert sig(ops[0]) == ("ConstantFill", [out], [zero])
    assert ops[1].type == "MomentsGradient" and ops[1].input[missing] == zero


def test_depth_split_zero_fills_a_missing_output_gradient() -> None:
    ops, g_in = grad(op("DepthSplit", ["X"], ["P", "Q"]), [None, "Q_grad"])
    assert [sig(g) for g in ops] == [
        ("ConstantFill", ["P"], ["_P_grad_autogen_zero"]),
        ("DepthConcat", ["_P_grad_autogen_zero", "Q_grad"], ["X_grad", "_X_grad_dims"]),
    ]
    assert g_in == ["X_grad"]


def test_half_casts_produce_caffe2_dtypes() -> None:
    blobs = {"X": np.array([0.1, 70000.0], dtype=np.float32)}
    run_op(op("FloatToHalf", ["X"], ["H"]), blobs)
    assert blobs["H"].dtype == np.float16 and np.isinf(blobs["H"][1])
    run_op(op("HalfToFloat", ["H"], ["F"]), blobs)
    assert blobs["F"].dtype == np.float32
    assert blobs["F"][0] == np.float32(np.float16(0.1))


def test_sum_elements_is_a_scalar() -> None:
    blobs = {"X": np.ones((2, 3), dtype=np.float32)}
    run_op(op("SumElements", ["X"], ["Y"], average=1), blobs)
    assert blobs["Y"].shape == () and blobs["Y"] == 1.0


def test_fp16_ops_keep_float16() -> None:
    x = np.array([[0.5, -1.0, 2.0]], dtype=np.float16)
    blobs = {"X": x}
    run_op(op("SoftmaxFp16", ["X"], ["Y"]), blobs)
    run_op(op("ReluFp16", ["X"], ["R"]), blobs)
    assert blobs["Y"].dtype == np.float16 and blobs["R"].dtype == np.float16
    e = np.exp(x.astype(np.float64) - 2.0)
    np.testing.assert_allclose(blobs["Y"], e / e.sum(), rtol=1e-3)
    blobs["Y_grad"] = np.ones_like(x)
    ops, _ = grad(op("SoftmaxFp16", ["X"], ["Y"]))
    run_op(ops[0], blobs)
    assert blobs["X_grad"].dtype == np.float16
    np.testing.assert_allclose(blobs["X_grad"].astype(np.float64), 0.0, atol=1e-3)


def test_batch_moments_var_is_the_raw_second_moment() -> None:
    blobs = {"X": np.array([[[1.0], [2.0]], [[3.0], [4.0]]])}  # N=2, C=2, HxW=1
    run_op(op("BatchMoments", ["X"], ["mu", "var"]), blobs)
    np.testing.assert_allclose(blobs["mu"], [2.0, 3.0])
    np.testing.assert_allclose(blobs["var"], [5.0, 10.0])  # E[X^2], as Caffe2


def test_im2col_layout_matches_caffe2() -> None:
    # NCHW: row c·kh·kw + i·kw + j of the columns holds pixel (oh·s + i, ow·s + j) of channel c
    x = np.arange(2 * 3 * 3, dtype=np.float64).reshape(1, 2, 3, 3)
    blobs = {"X": x}
    run_op(op("Im2Col", ["X"], ["Y"], kernel=2), blobs)
    y = blobs["Y"]
    assert y.shape == (1, 8, 2, 2)
    assert y[0, 1 * 4 + 1 * 2 + 0, 1, 0] == x[0, 1, 2, 0]
    # NHWC: entry (i·kw + j)·C + c
    xh = np.transpose(x, (0, 2, 3, 1)).copy()
    blobs = {"X": xh}
    run_op(op("Im2Col", ["X"], ["Y"], kernel=2, order="NHWC"), blobs)
    assert blobs["Y"].shape == (1, 2, 2, 8)
    assert blobs["Y"][0, 1, 0, (1 * 2 + 0) * 2 + 1] == x[0, 1, 2, 0]


def test_max_passes_a_repeated_blob_once() -> None:
    ops, g_in = grad(op("Max", ["A", "B", "A"], ["Y"]))
    assert [sig(g) for g in ops] == [
        ("MaxGradient", ["Y", "Y_grad", "B", "A"], ["B_grad", "A_grad"])
    ]
    assert g_in == [None, "B_grad", "A_grad"]  # (the pass keeps a name's last position)
    blobs = {"A": np.array([1.0, -1.0]), "B": np.array([0.0, 0.0])}
    run_op(op("Max", ["A", "B", "A"], ["Y"]), blobs)
    blobs["Y_grad"] = np.array([3.0, 4.0])
    run_op(ops[0], blobs)
    np.testing.assert_array_equal(blobs["A_grad"], [3.0, 0.0])  # not 2·dY: Max(a, a) = a


def test_thresholded_relu_negative_alpha_avoids_the_sign_kernel() -> None:
    ops, _ = grad(op("ThresholdedRelu", ["X"], ["Y"], alpha=-0.5))
    assert [sig(g) for g in ops] == [
        ("Abs", ["Y"], ["_X_grad_abs_y"]),
        ("ReluGradient", ["_X_grad_abs_y", "Y_grad"], ["X_grad"]),
    ]
    blobs = {"X": np.array([-0.3, -1.0, 2.0])}
    run_op(op("ThresholdedRelu", ["X"], ["Y"], alpha=-0.5), blobs)
    blobs["Y_grad"] = np.array([1.0, 1.0, 1.0])
    for g in ops:
        run_op(g, blobs)
    np.testing.assert_array_equal(blobs["X_grad"], [1.0, 0.0, 1.0])
    # Caffe2's own kernel (emulated) would give -1 at the negative output
    run_op(op("ThresholdedReluGradient", ["Y", "Y_grad"], ["k"]), blobs)
    np.testing.assert_array_equal(blobs["k"], [-1.0, 0.0, 1.0])


@pytest.mark.parametrize(
    "fwd",
    [op("Elu", ["X"], ["Y"], alpha=-0.5), op("ELU", ["X"], ["Y"], alpha=-1.0),
     op("Selu", ["X"], ["Y"], alpha=-1.0), op("Selu", ["X"], ["Y"], scale=-1.0)],
)
def test_elu_selu_with_args_that_make_y_ambiguous_are_refused(
    fwd: caffe2_pb2.OperatorDef,
) -> None:
    with pytest.raises(GradientError, match="positive Y no longer implies a positive X"):
        grad(fwd)


@pytest.mark.parametrize(
    "fwd",
    [op("ReduceFrontSum", ["X"], ["X"]), op("Tile", ["X"], ["X"], tiles=2),
     op("SumElements", ["X"], ["X"]), op("PadImage", ["X"], ["X"], pad=1)],
)
def test_shape_changing_ops_refuse_in_place_as_caffe2_schemas_do(
    fwd: caffe2_pb2.OperatorDef,
) -> None:
    # (ReduceFront/Back Sum/Mean read X for its shape only: in place, the later version of X
    # would have the reduced shape)
    from core.errors import InvalidNetError

    with pytest.raises(InvalidNetError, match="in-place"):
        grad(fwd)
