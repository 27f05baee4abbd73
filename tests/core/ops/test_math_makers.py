"""Structure of the gradient ops emitted by the elementwise / shape / fill / logic makers.

Each test states the exact Caffe2 signature from spec §5.1-§5.3/§5.6: op types, inputs,
outputs, and whether forward args are copied. A few tests also run the emitted ops to show
that netgrad's corrected behaviours (in-place Pow, Split with a missing gradient) compute the
right numbers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from api_schemas import caffe2_pb2
from core.errors import GradientError, GradientNotDefinedError, InvalidNetError
from core.ops import load_all
from core.registry import get_gradient_for_op, make_arg, make_op
from core.types import GradientSlice, GradValue
from core.verify.opcheck import run_op

load_all()


def op(t: str, ins: list[str], outs: list[str], **args: Any) -> caffe2_pb2.OperatorDef:
    return make_op(t, ins, outs, [make_arg(k, v) for k, v in args.items()])


def grad(
    fwd: caffe2_pb2.OperatorDef, g_output: list[GradValue] | None = None
) -> tuple[list[caffe2_pb2.OperatorDef], list[GradValue]]:
    if g_output is None:
        g_output = [o + "_grad" for o in fwd.output]
    return get_gradient_for_op(fwd, g_output)


def sig(g: caffe2_pb2.OperatorDef) -> tuple[str, list[str], list[str]]:
    return g.type, list(g.input), list(g.output)


def args_of(g: caffe2_pb2.OperatorDef) -> list[tuple[str, Any]]:
    """(name, value) of every arg, in order; value from whichever field is set."""
    out: list[tuple[str, Any]] = []
    for a in g.arg:
        if a.HasField("f"):
            out.append((a.name, a.f))
        elif a.HasField("i"):
            out.append((a.name, a.i))
        elif a.HasField("s"):
            out.append((a.name, a.s.decode()))
        else:
            out.append((a.name, list(a.ints) or list(a.floats)))
    return out


# --- elementwise arithmetic ------------------------------------------------------------------


@pytest.mark.parametrize("t", ["Add", "Sub", "Mul"])
def test_binary_gradient_ops_take_dc_first_and_copy_args(t: str) -> None:
    ops, g_in = grad(op(t, ["A", "B"], ["C"], broadcast=1, axis=1))
    assert [sig(g) for g in ops] == [(t + "Gradient", ["C_grad", "A", "B"], ["A_grad", "B_grad"])]
    assert args_of(ops[0]) == [("broadcast", 1), ("axis", 1)]
    assert ops[0].is_gradient_op
    assert g_in == ["A_grad", "B_grad"]


def test_div_gradient_reads_output() -> None:
    ops, g_in = grad(op("Div", ["A", "B"], ["C"]))
    assert [sig(g) for g in ops] == [
        ("DivGradient", ["C_grad", "A", "B", "C"], ["A_grad", "B_grad"])
    ]
    assert g_in == ["A_grad", "B_grad"]


def test_binary_schema_rejects_one_input() -> None:
    with pytest.raises(InvalidNetError, match="schema"):
        grad(op("Mul", ["a"], ["b"]))


def test_sum_is_pass_through_and_in_place_on_input_0() -> None:
    ops, g_in = grad(op("Sum", ["X0", "X1", "X2"], ["Y"]))
    assert ops == [] and g_in == ["Y_grad", "Y_grad", "Y_grad"]
    ops, g_in = grad(op("Sum", ["X0", "X1"], ["X0"]))
    assert ops == [] and g_in == ["X0_grad", "X0_grad"]
    with pytest.raises(InvalidNetError, match="schema"):
        grad(op("Sum", ["X0", "X1"], ["X1"]))


def test_mean_gradient_one_output_per_input() -> None:
    ops, _ = grad(op("Mean", ["X0", "X1", "X2"], ["Y"]))
    assert [sig(g) for g in ops] == [
        ("MeanGradient", ["Y_grad"], ["X0_grad", "X1_grad", "X2_grad"])
    ]


def test_scale_copies_scale_once() -> None:
    ops, _ = grad(op("Scale", ["X"], ["Y"], scale=2.5))
    assert [sig(g) for g in ops] == [("Scale", ["Y_grad"], ["X_grad"])]
    assert args_of(ops[0]) == [("scale", 2.5)]


@pytest.mark.parametrize(
    ("t", "expected"),
    [
        ("Exp", [("Mul", ["Y", "Y_grad"], ["X_grad"])]),
        ("Log", [("Div", ["Y_grad", "X"], ["X_grad"])]),
        ("Sqrt", [("Scale", ["Y_grad"], ["X_grad"]), ("Div", ["X_grad", "Y"], ["X_grad"])]),
        ("Abs", [("AbsGradient", ["X", "Y_grad"], ["X_grad"])]),
        ("Negative", [("Negative", ["Y_grad"], ["X_grad"])]),
        ("Relu", [("ReluGradient", ["Y", "Y_grad"], ["X_grad"])]),
        ("LeakyRelu", [("LeakyReluGradient", ["Y", "Y_grad"], ["X_grad"])]),
        ("Sigmoid", [("SigmoidGradient", ["Y", "Y_grad"], ["X_grad"])]),
        ("Tanh", [("TanhGradient", ["Y", "Y_grad"], ["X_grad"])]),
        ("Copy", [("CopyOnDeviceLike", ["Y_grad", "X"], ["X_grad"])]),
        ("Flatten", [("ResizeLike", ["Y_grad", "X"], ["X_grad"])]),
        ("FlattenToVec", [("ResizeLike", ["Y_grad", "X"], ["X_grad"])]),
        ("ReduceSum", [("ReduceSumGradient", ["Y_grad", "X", "Y"], ["X_grad"])]),
        ("ReduceMean", [("ReduceMeanGradient", ["Y_grad", "X", "Y"], ["X_grad"])]),
    ],
)
def test_unary_signatures(t: str, expected: list[tuple[str, list[str], list[str]]]) -> None:
    ops, g_in = grad(op(t, ["X"], ["Y"]))
    assert [sig(g) for g in ops] == expected
    assert g_in == ["X_grad"]
    assert all(g.is_gradient_op for g in ops)


def test_sqrt_scale_is_one_half() -> None:
    ops, _ = grad(op("Sqrt", ["X"], ["Y"]))
    assert args_of(ops[0]) == [("scale", 0.5)]
    assert args_of(ops[1]) == []


def test_in_place_relu_and_device_engine_copy() -> None:
    fwd = op("LeakyRelu", ["X"], ["X"], alpha=0.3)
    fwd.device_option.device_type = 1
    fwd.device_option.device_id = 2
    fwd.engine = "CUDNN"
    ops, g_in = grad(fwd)
    assert [sig(g) for g in ops] == [("LeakyReluGradient", ["X", "X_grad"], ["X_grad"])]
    assert args_of(ops[0]) == [("alpha", pytest.approx(0.3))]
    assert ops[0].device_option.device_id == 2 and ops[0].engine == "CUDNN"
    assert g_in == ["X_grad"]


def test_elementwise_linear_and_dot_product() -> None:
    ops, _ = grad(op("ElementwiseLinear", ["X", "a", "b"], ["Y"], axis=1))
    assert [sig(g) for g in ops] == [
        ("ElementwiseLinearGradient", ["Y_grad", "X", "a"], ["X_grad", "a_grad", "b_grad"])
    ]
    assert args_of(ops[0]) == [("axis", 1)]
    ops, _ = grad(op("DotProduct", ["X", "Y"], ["Z"]))
    assert [sig(g) for g in ops] == [
        ("DotProductGradient", ["X", "Y", "Z_grad"], ["X_grad", "Y_grad"])
    ]


# --- Pow -------------------------------------------------------------------------------------


def test_pow_scalar_out_of_place() -> None:
    ops, g_in = grad(op("Pow", ["X"], ["Y"], exponent=3.0))
    assert [sig(g) for g in ops] == [
        ("Pow", ["X"], ["X_grad"]),
        ("Mul", ["X_grad", "Y_grad"], ["X_grad"]),
        ("Scale", ["X_grad"], ["X_grad"]),
    ]
    assert [args_of(g) for g in ops] == [[("exponent", 2.0)], [], [("scale", 3.0)]]
    assert g_in == ["X_grad"]


def test_pow_scalar_in_place_uses_output_and_fresh_name() -> None:
    # In place the incoming gradient and dX are both X_grad (spec §3.8 #11): the first op
    # must not overwrite it, so it writes a fresh intermediate.
    ops, g_in = grad(op("Pow", ["X"], ["X"], exponent=2.5))
    assert [sig(g) for g in ops] == [
        ("Pow", ["X"], ["X_grad_autogen_pow"]),
        ("Mul", ["X_grad_autogen_pow", "X_grad"], ["X_grad"]),
        ("Scale", ["X_grad"], ["X_grad"]),
    ]
    assert args_of(ops[0]) == [("exponent", pytest.approx(0.6))]
    assert g_in == ["X_grad"]


def test_pow_scalar_in_place_with_other_gradient_name_keeps_upstream_ops() -> None:
    ops, _ = grad(op("Pow", ["X"], ["X"], exponent=2.5), ["X_inner_grad"])
    assert [sig(g) for g in ops][0] == ("Pow", ["X"], ["X_grad"])


@pytest.mark.parametrize("e", [3.0, -1.0, 5.0])
def test_pow_scalar_in_place_numbers(e: float) -> None:
    # negative X too: an odd exponent keeps the sign, and the gradient reads |Y|
    x = np.array([0.5, 1.2, 2.0, -0.7, -1.5])
    dy = np.array([0.3, -1.0, 2.0, 0.8, -0.4])
    ops, _ = grad(op("Pow", ["X"], ["X"], exponent=e))
    ws = {"X": x**e, "X_grad": dy.copy()}
    for g in ops:
        run_op(g, ws)
    np.testing.assert_allclose(ws["X_grad"], e * x ** (e - 1) * dy, rtol=1e-6)


@pytest.mark.parametrize("e", [2.0, 4.0, -2.0])
def test_pow_in_place_even_exponent_is_an_error(e: float) -> None:
    # Y = X^e loses X's sign, and e·X^(e-1) needs it (it was |X|^(e-1): sign lost)
    with pytest.raises(GradientError, match="even exponent"):
        grad(op("Pow", ["X"], ["X"], exponent=e))


def test_pow_in_place_zero_exponent_is_an_error() -> None:
    with pytest.raises(GradientError):
        grad(op("Pow", ["X"], ["X"], exponent=0.0))


def test_pow_tensor_exponent() -> None:
    ops, g_in = grad(op("Pow", ["X", "E"], ["Y"]))
    assert [sig(g) for g in ops] == [
        ("ConstantFill", ["E"], ["E_grad"]),
        ("Sub", ["E", "E_grad"], ["E_grad"]),
        ("Pow", ["X", "E_grad"], ["X_grad"]),
        ("Mul", ["X_grad", "Y_grad"], ["X_grad"]),
        ("Mul", ["X_grad", "E"], ["X_grad"]),
        ("Log", ["X"], ["E_grad_autogen_pre_red"]),
        ("Mul", ["E_grad_autogen_pre_red", "Y"], ["E_grad_autogen_pre_red"]),
        ("Mul", ["E_grad_autogen_pre_red", "Y_grad"], ["E_grad"]),
    ]
    assert args_of(ops[0]) == [("value", 1.0)]
    assert all(args_of(g) == [] for g in ops[1:])
    assert g_in == ["X_grad", "E_grad"]


def test_pow_tensor_exponent_with_broadcast_args() -> None:
    ops, _ = grad(op("Pow", ["X", "E"], ["Y"], broadcast=1, axis=1))
    full = [("broadcast", 1), ("axis", 1), ("axis_str", ""), ("order", "NCHW")]
    assert args_of(ops[2]) == full and args_of(ops[4]) == full
    assert args_of(ops[3]) == []
    assert [sig(g) for g in ops[-2:]] == [
        ("Mul", ["E_grad_autogen_pre_red", "Y_grad"], ["E_grad_autogen_pre_red"]),
        ("SumReduceLike", ["E_grad_autogen_pre_red", "E"], ["E_grad"]),
    ]
    assert args_of(ops[-1]) == full[1:]


def test_pow_tensor_exponent_in_place_is_an_error() -> None:
    with pytest.raises(GradientError, match="in-place"):
        grad(op("Pow", ["X", "E"], ["X"]))


# --- MatMul ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ta", "tb", "expected"),
    [
        (
            0,
            0,
            [
                (["Y_grad", "B", "A"], [("trans_b", 1), ("axis_b", 3)]),
                (["A", "Y_grad", "B"], [("trans_a", 1), ("axis_a", 2)]),
            ],
        ),
        (
            0,
            1,
            [
                (["Y_grad", "B", "A"], [("axis_b", 3)]),
                (["Y_grad", "A", "B"], [("trans_a", 1), ("axis_b", 2)]),
            ],
        ),
        (
            1,
            0,
            [
                (["B", "Y_grad", "A"], [("trans_b", 1), ("axis_a", 3)]),
                (["A", "Y_grad", "B"], [("axis_a", 2)]),
            ],
        ),
        (
            1,
            1,
            [
                (["B", "Y_grad", "A"], [("trans_a", 1), ("trans_b", 1), ("axis_a", 3)]),
                (["Y_grad", "A", "B"], [("trans_a", 1), ("trans_b", 1), ("axis_b", 2)]),
            ],
        ),
    ],
)
def test_matmul_table(ta: int, tb: int, expected: list[tuple[list[str], list[Any]]]) -> None:
    ops, _ = grad(op("MatMul", ["A", "B"], ["Y"], trans_a=ta, trans_b=tb, axis_a=2, axis_b=3))
    assert [(g.type, list(g.input), list(g.output)) for g in ops] == [
        ("MatMul", expected[0][0], ["A_grad"]),
        ("MatMul", expected[1][0], ["B_grad"]),
    ]
    assert [args_of(g) for g in ops] == [expected[0][1], expected[1][1]]


# --- shape ops -------------------------------------------------------------------------------


def test_reshape_gradient_no_args() -> None:
    ops, g_in = grad(op("Reshape", ["X"], ["Y", "old"], shape=[3, -1]), ["Y_grad", None])
    assert [sig(g) for g in ops] == [("Reshape", ["Y_grad", "old"], ["X_grad", "_X_grad_dims"])]
    assert args_of(ops[0]) == []
    assert g_in == ["X_grad"]


def test_transpose_inverts_axes_and_keeps_other_args() -> None:
    ops, _ = grad(op("Transpose", ["X"], ["Y"], axes=[1, 2, 0], foo=7))
    assert sig(ops[0]) == ("Transpose", ["Y_grad"], ["X_grad"])
    assert args_of(ops[0]) == [("axes", [2, 0, 1]), ("foo", 7)]
    ops, _ = grad(op("Transpose", ["X"], ["Y"]))
    assert args_of(ops[0]) == []


def test_slice_forms() -> None:
    ops, _ = grad(op("Slice", ["X"], ["Y"], starts=[0, 1], ends=[-1, 3]))
    assert [sig(g) for g in ops] == [("SliceGradient", ["X", "Y_grad"], ["X_grad"])]
    assert args_of(ops[0]) == [("starts", [0, 1]), ("ends", [-1, 3])]
    ops, g_in = grad(op("Slice", ["X", "s", "e"], ["Y"]))
    assert [sig(g) for g in ops] == [("SliceGradient", ["X", "s", "e", "Y_grad"], ["X_grad"])]
    assert g_in == ["X_grad", None, None]


def test_concat_gradient_is_split_with_args() -> None:
    fwd = op("Concat", ["X0", "X1"], ["Y", "info"], axis=2, add_axis=1)
    ops, g_in = grad(fwd, ["Y_grad", None])
    assert [sig(g) for g in ops] == [("Split", ["Y_grad", "info"], ["X0_grad", "X1_grad"])]
    assert args_of(ops[0]) == [("axis", 2), ("add_axis", 1)]
    assert grad(fwd, [None, "info_grad"]) == ([], [None, None])


def test_split_gradient_concat_and_zero_fill() -> None:
    fwd = op("Split", ["X"], ["Y0", "Y1", "Y2"], axis=1, split=[1, 2, 3])
    ops, g_in = grad(fwd)
    assert [sig(g) for g in ops] == [
        ("Concat", ["Y0_grad", "Y1_grad", "Y2_grad"], ["X_grad", "_X_grad_dims"])
    ]
    assert args_of(ops[0]) == [("axis", 1), ("split", [1, 2, 3])]
    # Missing middle gradient: zero-filled like Y1 instead of a wrongly shaped dX.
    ops, g_in = grad(fwd, ["Y0_grad", None, "Y2_grad"])
    assert [sig(g) for g in ops] == [
        ("ConstantFill", ["Y1"], ["_Y1_grad_autogen_zero"]),
        ("Concat", ["Y0_grad", "_Y1_grad_autogen_zero", "Y2_grad"], ["X_grad", "_X_grad_dims"]),
    ]
    assert args_of(ops[0]) == [("value", 0.0)]
    assert g_in == ["X_grad"]
    assert grad(fwd, [None, None, None]) == ([], [None])


def test_split_missing_gradient_gives_correct_shape() -> None:
    fwd = op("Split", ["X"], ["Y0", "Y1", "Y2"], axis=1, split=[1, 2, 3])
    ops, _ = grad(fwd, ["Y0_grad", None, "Y2_grad"])
    ws: dict[str, np.ndarray] = {"X": np.arange(12.0).reshape(2, 6)}
    run_op(fwd, ws)
    ws["Y0_grad"] = np.ones((2, 1))
    ws["Y2_grad"] = np.full((2, 3), 2.0)
    for g in ops:
        run_op(g, ws)
    expected = np.array([[1, 0, 0, 2, 2, 2]] * 2, dtype=np.float64)
    np.testing.assert_array_equal(ws["X_grad"], expected)
    assert ws["X_grad"].dtype == np.float64


def test_squeeze_expand_dims_swap() -> None:
    ops, _ = grad(op("Squeeze", ["X"], ["Y"], dims=[1]))
    assert sig(ops[0]) == ("ExpandDims", ["Y_grad"], ["X_grad"]) and args_of(ops[0]) == [
        ("dims", [1])
    ]
    ops, _ = grad(op("ExpandDims", ["X"], ["Y"], dims=[0]))
    assert sig(ops[0]) == ("Squeeze", ["Y_grad"], ["X_grad"])


def test_cast_swaps_types_and_copies_nothing_else() -> None:
    ops, _ = grad(op("Cast", ["X"], ["Y"], to="float", from_type=13, extra=1))
    assert sig(ops[0]) == ("Cast", ["Y_grad"], ["X_grad"])
    assert args_of(ops[0]) == [("to", 13), ("from_type", 1)]


def test_cast_in_place_loss() -> None:
    # bug-cases row 7: Cast(loss -> loss) on the loss path.
    ops, g_in = grad(op("Cast", ["loss"], ["loss"], to=1, from_type=1))
    assert [sig(g) for g in ops] == [("Cast", ["loss_grad"], ["loss_grad"])]
    assert g_in == ["loss_grad"]
    ws = {"loss": np.float32(2.0) * np.ones(()), "loss_grad": np.ones((), dtype=np.float32)}
    run_op(ops[0], ws)
    assert ws["loss_grad"].dtype == np.float32


def test_cast_without_from_type_is_an_error() -> None:
    with pytest.raises(GradientError, match="from_type"):
        grad(op("Cast", ["X"], ["Y"], to=1))


def test_gather_gradients() -> None:
    ops, g_in = grad(op("Gather", ["D", "I"], ["Y"]))
    assert ops == [] and g_in == [GradientSlice("I", "Y_grad"), None]
    ops, g_in = grad(op("Gather", ["D", "I"], ["Y"], dense_gradient=1))
    assert [sig(g) for g in ops] == [("SparseToDense", ["I", "Y_grad", "D"], ["D_grad"])]
    assert g_in == ["D_grad", None]
    ops, _ = grad(op("Gather", ["D", "I"], ["Y"], axis=1))
    assert [sig(g) for g in ops] == [("BatchGatherGradient", ["D", "I", "Y_grad"], ["D_grad"])]
    assert args_of(ops[0]) == [("axis", 1), ("axis", 1)]  # explicit + copied, as upstream
    with pytest.raises(GradientError, match="dense_gradient"):
        grad(op("Gather", ["D", "I"], ["Y"], axis=1, dense_gradient=0))


def test_ensure_dense() -> None:
    ops, g_in = grad(op("EnsureDense", ["X"], ["X"]))
    assert ops == [] and g_in == ["X_grad"]
    ops, g_in = grad(op("EnsureDense", ["X"], ["Y"]), [GradientSlice("gi", "gv")])
    assert [sig(g) for g in ops] == [("SparseToDense", ["gi", "gv", "X"], ["X_grad"])]
    assert g_in == ["X_grad"]


def test_zero_gradient() -> None:
    ops, g_in = grad(op("ZeroGradient", ["c"], []), [])
    assert [sig(g) for g in ops] == [("ConstantFill", ["c"], ["c_grad"])]
    assert args_of(ops[0]) == [("value", 0.0)]
    assert g_in == ["c_grad"]


def test_stop_gradient_and_fills_have_no_gradient() -> None:
    assert grad(op("StopGradient", ["X"], ["X"])) == ([], [None])
    for t in [
        "ConstantFill",
        "GivenTensorFill",
        "UniformFill",
        "GaussianFill",
        "XavierFill",
        "MSRAFill",
        "RangeFill",
        "GivenTensorIntFill",
        "GivenTensorBoolFill",
    ]:
        assert grad(op(t, [], ["Y"], shape=[2])) == ([], []), t


@pytest.mark.parametrize("t", ["LT", "LE", "GT", "GE", "EQ", "NE", "And", "Or", "Xor"])
def test_logic_ops_should_not_be_differentiated(t: str) -> None:
    with pytest.raises(GradientNotDefinedError, match="should not"):
        grad(op(t, ["A", "B"], ["C"]))


@pytest.mark.parametrize(
    ("t", "pattern"),
    [
        ("Int8Conv", "not implemented yet"),
        ("Int8Sum", "not implemented yet"),
        ("ONNXWhile", "not implemented yet"),
        ("IsEmpty", "should not"),
        ("Shape", "should not"),
        ("Python", "does not differentiate yet"),  # Caffe2: gradient (user code)
        ("Not", "should not"),
    ],
)
def test_status_only_ops(t: str, pattern: str) -> None:
    with pytest.raises(GradientNotDefinedError, match=pattern):
        grad(op(t, ["X"], ["Y"]))
