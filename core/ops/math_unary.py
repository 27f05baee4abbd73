"""Unary elementwise math and activations (issue 8b): kernels, gradient makers, gradient kernels.

One table row per op: the forward function, Caffe2's gradient-op type, the blobs that gradient
op reads (in Caffe2's order: ``X`` = forward input ``I(0)``, ``Y`` = forward output ``O(0)``,
``dY`` = ``GO(0)``) and the gradient function. The makers, the forward kernels and the
gradient kernels are all generated from the table, so the three cannot disagree.

Sources (facts only): Caffe2 ``caffe2/operators/<op>_op.cc`` ``Get<Op>Gradient`` classes
(newest revision) and the op docs; spec §2.3 (maker contract), §5.1 (activations). Forward
arguments are copied into the gradient op (``CopyArguments``), so e.g. ``alpha`` reaches
``EluGradient``.

Shapes and dtypes: every op maps a tensor of any shape to one of the same shape. Float32 and
float64 keep their dtype; integer inputs are computed in float64. Gradient kernels require
all their inputs to have one shape. ``FloatToHalf`` / ``HalfToFloat`` cast to float16 /
float32 as Caffe2 does.

Corrected behaviour: Caffe2's ``Sqr`` gradient scales ``dY`` *in place* before multiplying
(``Scale([dY] -> [dY])``), which corrupts ``dY`` for any other reader of that gradient blob
(e.g. the pass-through gradients of ``Sum``). netgrad writes the scaled value into ``dX``
instead: ``Scale([dY] -> [dX], scale=2)``, ``Mul([dX, X] -> [dX])``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.errors import GradientError
from core.ops._args import get_float, get_str
from core.ops.elementwise import expect_inputs, kernel_error
from core.registry import (
    GradientMaker,
    OperatorDef,
    make_arg,
    register_gradient,
    register_kernel,
    schema,
)
from core.template import GO, I, O, template

Array = np.ndarray[Any, Any]
Fwd = Callable[[OperatorDef, Array], Array]
#: ``grad(op, blobs)`` with ``blobs`` = {"X"|"Y"|"dY": array} -> dX
Grad = Callable[[OperatorDef, dict[str, Array]], Array]

_erf = np.frompyfunc(math.erf, 1, 1)


def erf(x: Array) -> Array:
    """Elementwise error function (NumPy has none; ``math.erf`` per element), x's dtype."""
    x = np.asarray(x)
    return np.asarray(_erf(x), dtype=x.dtype if x.dtype.kind == "f" else np.float64)


def _f(x: Array) -> Array:
    """``x`` as a floating array (integers become float64)."""
    x = np.asarray(x)
    return x if x.dtype.kind == "f" else x.astype(np.float64)


def _sigmoid(x: Array) -> Array:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _softplus(x: Array) -> Array:
    """``log(1 + e^x)`` without overflow."""
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


_SQRT_2_PI = math.sqrt(2.0 / math.pi)
_GELU_C = 0.044715
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _gelu(op: OperatorDef, x: Array) -> Array:
    if get_float(op, "fast_gelu", 0.0):
        return 0.5 * x * (1 + np.tanh(_SQRT_2_PI * (x + _GELU_C * x**3)))
    return 0.5 * x * (1 + erf(x / math.sqrt(2.0)))


def _gelu_grad(op: OperatorDef, b: dict[str, Array]) -> Array:
    x, dy = b["X"], b["dY"]
    if get_float(op, "fast_gelu", 0.0):
        t = np.tanh(_SQRT_2_PI * (x + _GELU_C * x**3))
        return dy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _SQRT_2_PI * (1 + 3 * _GELU_C * x * x))
    cdf = 0.5 * (1 + erf(x / math.sqrt(2.0)))
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return dy * (cdf + x * pdf)


def _clip_bounds(op: OperatorDef, dtype: np.dtype[Any]) -> tuple[float, float]:
    info = np.finfo(dtype) if dtype.kind == "f" else np.finfo(np.float64)
    return get_float(op, "min", float(info.min)), get_float(op, "max", float(info.max))


def _clip(op: OperatorDef, x: Array) -> Array:
    lo, hi = _clip_bounds(op, x.dtype)
    return np.minimum(np.maximum(x, lo), hi)


def _clip_grad(op: OperatorDef, b: dict[str, Array]) -> Array:
    y, dy = b["Y"], b["dY"]
    lo, hi = _clip_bounds(op, y.dtype)
    return np.where((y <= lo) | (y >= hi), 0, dy)


def _elu(op: OperatorDef, x: Array) -> Array:
    a = get_float(op, "alpha", 1.0)
    return np.where(x > 0, x, a * np.expm1(np.minimum(x, 0)))


def _selu(op: OperatorDef, x: Array) -> Array:
    a, s = get_float(op, "alpha", _SELU_ALPHA), get_float(op, "scale", _SELU_SCALE)
    return s * np.where(x > 0, x, a * np.expm1(np.minimum(x, 0)))


def _logit_eps(op: OperatorDef) -> float:
    return get_float(op, "eps", 1e-6)


def _logit(op: OperatorDef, x: Array) -> Array:
    eps = _logit_eps(op)
    c = np.clip(x, eps, 1 - eps)
    return np.log(c / (1 - c))


def _logit_grad(op: OperatorDef, b: dict[str, Array]) -> Array:
    x, dy = b["X"], b["dY"]
    eps = _logit_eps(op)
    with np.errstate(all="ignore"):
        return np.where((x < eps) | (x > 1 - eps), 0, dy / (x * (1 - x)))


def _mish_grad(op: OperatorDef, b: dict[str, Array]) -> Array:
    x, dy = b["X"], b["dY"]
    t = np.tanh(_softplus(x))
    return dy * (t + x * (1 - t * t) * _sigmoid(x))


def _hard_sigmoid(op: OperatorDef, x: Array) -> Array:
    a, c = get_float(op, "alpha", 0.2), get_float(op, "beta", 0.5)
    return np.clip(a * x + c, 0, 1)


def _relu_n(op: OperatorDef, x: Array) -> Array:
    return np.clip(x, 0, get_float(op, "n", 6.0))


def _thresholded_relu(op: OperatorDef, x: Array) -> Array:
    return np.where(x > get_float(op, "alpha", 1.0), x, 0)


def _prelu_order(op: OperatorDef) -> str:
    return get_str(op, "order", "NCHW")


@dataclass(frozen=True)
class UnaryOp:
    """One row of the table: forward op, Caffe2 gradient op and their maths.

    Attributes:
        op_type: forward op type.
        fwd: ``fwd(op, X) -> Y`` (X floating).
        grad_type: Caffe2's gradient-op type (``""``: a custom maker is registered instead).
        reads: the gradient op's inputs in Caffe2's order, from ``"X"``, ``"Y"``, ``"dY"``.
        grad: ``grad(op, {"X"|"Y"|"dY": array}) -> dX``.
        doc: one line for ``GET /v1/operators``.
    """

    op_type: str
    fwd: Fwd
    grad_type: str
    reads: tuple[str, ...]
    grad: Grad
    doc: str


def _u(fn: Callable[[Array], Array]) -> Fwd:
    return lambda op, x: fn(x)


UNARY_OPS: list[UnaryOp] = [
    UnaryOp("Gelu", _gelu, "GeluGradient", ("dY", "X"), _gelu_grad,
            "Y = X·Φ(X) (arg fast_gelu: tanh approximation)"),
    UnaryOp("Swish", _u(lambda x: x * _sigmoid(x)), "SwishGradient", ("X", "Y", "dY"),
            lambda op, b: b["dY"] * (b["Y"] + _sigmoid(b["X"]) * (1 - b["Y"])),
            "Y = X·sigmoid(X)"),
    UnaryOp("Elu", _elu, "EluGradient", ("Y", "dY"),
            lambda op, b: np.where(b["Y"] > 0, b["dY"],
                                   b["dY"] * (b["Y"] + get_float(op, "alpha", 1.0))),
            "Y = X if X > 0 else alpha·(e^X − 1) (alpha=1)"),
    UnaryOp("ELU", _elu, "ELUGradient", ("Y", "dY"),
            lambda op, b: np.where(b["Y"] > 0, b["dY"],
                                   b["dY"] * (b["Y"] + get_float(op, "alpha", 1.0))),
            "Alias of Elu (Caffe2 registers both names; gradient op ELUGradient)"),
    UnaryOp("Clip", _clip, "ClipGradient", ("Y", "dY"), _clip_grad,
            "Y = min(max(X, min), max); dX = 0 where Y sits on a bound"),
    UnaryOp("Rsqrt", _u(lambda x: 1 / np.sqrt(x)), "RsqrtGradient", ("dY", "Y"),
            lambda op, b: -0.5 * b["dY"] * b["Y"] ** 3, "Y = 1/√X"),
    UnaryOp("Reciprocal", _u(lambda x: 1 / x), "ReciprocalGradient", ("Y", "dY"),
            lambda op, b: -b["dY"] * b["Y"] * b["Y"], "Y = 1/X"),
    UnaryOp("Sin", _u(np.sin), "SinGradient", ("X", "dY"),
            lambda op, b: b["dY"] * np.cos(b["X"]), "Y = sin X"),
    UnaryOp("Cos", _u(np.cos), "CosGradient", ("X", "dY"),
            lambda op, b: -b["dY"] * np.sin(b["X"]), "Y = cos X"),
    UnaryOp("Tan", _u(np.tan), "TanGradient", ("X", "dY"),
            lambda op, b: b["dY"] / np.cos(b["X"]) ** 2, "Y = tan X"),
    UnaryOp("Asin", _u(np.arcsin), "AsinGradient", ("X", "dY"),
            lambda op, b: b["dY"] / np.sqrt(1 - b["X"] ** 2), "Y = arcsin X"),
    UnaryOp("Acos", _u(np.arccos), "AcosGradient", ("X", "dY"),
            lambda op, b: -b["dY"] / np.sqrt(1 - b["X"] ** 2), "Y = arccos X"),
    UnaryOp("Atan", _u(np.arctan), "AtanGradient", ("X", "dY"),
            lambda op, b: b["dY"] / (1 + b["X"] ** 2), "Y = arctan X"),
    UnaryOp("Sinh", _u(np.sinh), "SinhGradient", ("dY", "X"),
            lambda op, b: b["dY"] * np.cosh(b["X"]), "Y = sinh X"),
    UnaryOp("Cosh", _u(np.cosh), "CoshGradient", ("dY", "X"),
            lambda op, b: b["dY"] * np.sinh(b["X"]), "Y = cosh X"),
    UnaryOp("Cube", _u(lambda x: x**3), "CubeGradient", ("dY", "X"),
            lambda op, b: 3 * b["dY"] * b["X"] ** 2, "Y = X³"),
    UnaryOp("Cbrt", _u(np.cbrt), "CbrtGradient", ("dY", "Y"),
            lambda op, b: b["dY"] / (3 * b["Y"] ** 2), "Y = ∛X"),
    UnaryOp("Erf", _u(erf), "ErfGradient", ("X", "dY"),
            lambda op, b: b["dY"] * (2 / math.sqrt(math.pi)) * np.exp(-b["X"] ** 2),
            "Y = erf X"),
    UnaryOp("Mish", _u(lambda x: x * np.tanh(_softplus(x))), "MishGradient", ("X", "Y", "dY"),
            _mish_grad, "Y = X·tanh(softplus(X))"),
    UnaryOp("Selu", _selu, "SeluGradient", ("Y", "dY"),
            lambda op, b: np.where(
                b["Y"] > 0,
                get_float(op, "scale", _SELU_SCALE) * b["dY"],
                b["dY"] * (b["Y"] + get_float(op, "alpha", _SELU_ALPHA)
                           * get_float(op, "scale", _SELU_SCALE))),
            "Y = scale·(X if X > 0 else alpha·(e^X − 1))"),
    UnaryOp("Softplus", _u(_softplus), "SoftplusGradient", ("Y", "dY"),
            lambda op, b: b["dY"] * -np.expm1(-b["Y"]), "Y = ln(1 + e^X)"),
    UnaryOp("Softsign", _u(lambda x: x / (1 + np.abs(x))), "SoftsignGradient", ("X", "dY"),
            lambda op, b: b["dY"] / (1 + np.abs(b["X"])) ** 2, "Y = X / (1 + |X|)"),
    UnaryOp("HardSigmoid", _hard_sigmoid, "HardSigmoidGradient", ("Y", "dY"),
            lambda op, b: np.where((b["Y"] > 0) & (b["Y"] < 1),
                                   get_float(op, "alpha", 0.2) * b["dY"], 0),
            "Y = clip(alpha·X + beta, 0, 1) (alpha=0.2, beta=0.5)"),
    UnaryOp("Logit", _logit, "LogitGradient", ("X", "dY"), _logit_grad,
            "Y = ln(X' / (1 − X')), X' = clip(X, eps, 1 − eps) (eps=1e-6)"),
    UnaryOp("ThresholdedRelu", _thresholded_relu, "ThresholdedReluGradient", ("Y", "dY"),
            lambda op, b: b["dY"] * np.sign(b["Y"]),  # Caffe2's kernel: dY·sign(Y)
            "Y = X if X > alpha else 0 (alpha=1)"),
    UnaryOp("ReluN", _relu_n, "ReluNGradient", ("Y", "dY"),
            lambda op, b: np.where((b["Y"] > 0) & (b["Y"] < get_float(op, "n", 6.0)), b["dY"], 0),
            "Y = min(max(X, 0), n) (n=6)"),
]


def _refuse_ambiguous_y(m: GradientMaker) -> None:
    """Refuse Elu/ELU with ``alpha < 0`` and Selu with ``alpha < 0`` or ``scale <= 0``.

    Their gradient ops read only Y and take ``Y > 0`` to mean ``X > 0``; with such arguments
    a positive Y also comes from a negative X, so Caffe2's gradient would be wrong there.
    netgrad answers with an error instead of a wrong number.

    Raises:
        GradientError: the arguments above.
    """
    t = m.op_type
    if t in ("Elu", "ELU") and m.arg_f("alpha", 1.0) < 0:
        why = f"alpha={m.arg_f('alpha', 1.0):g} < 0"
    elif t == "Selu" and (m.arg_f("alpha", _SELU_ALPHA) < 0 or m.arg_f("scale", _SELU_SCALE) <= 0):
        why = "alpha < 0 or scale <= 0"
    else:
        return
    raise GradientError(
        f"{t} with {why}: its gradient op reads only Y, and a positive Y no longer implies a "
        f"positive X, so Caffe2's {t}Gradient would be wrong; use alpha >= 0 (and scale > 0)"
    )


def _register(u: UnaryOp) -> None:
    def forward(op: OperatorDef, inputs: list[Array]) -> list[Array]:
        expect_inputs(op, inputs, 1)
        x = _f(inputs[0])
        with np.errstate(all="ignore"):
            return [np.asarray(u.fwd(op, x)).astype(x.dtype, copy=False)]

    def maker(m: GradientMaker) -> list[OperatorDef]:
        _refuse_ambiguous_y(m)
        names = {"X": m.I, "Y": m.O, "dY": m.GO}
        return [m.make_op(u.grad_type, [names[r](0) for r in u.reads], [m.GI(0)])]

    def gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
        expect_inputs(op, inputs, len(u.reads))
        blobs = {r: _f(v) for r, v in zip(u.reads, inputs, strict=True)}
        if len({b.shape for b in blobs.values()}) != 1:
            raise kernel_error(op, "inputs must have the same shape", inputs)
        dy = blobs["dY"]
        with np.errstate(all="ignore"):
            return [np.asarray(u.grad(op, blobs)).astype(dy.dtype, copy=False)]

    forward.__doc__ = f"``{u.op_type}``: {u.doc}."
    maker.__doc__ = f"``{u.grad_type}([{', '.join(u.reads)}] -> [dX])``, forward args copied."
    gradient.__doc__ = f"``{u.grad_type}``: ``[{', '.join(u.reads)}] -> [dX]``."
    register_kernel(u.op_type)(forward)
    register_gradient(u.op_type, op_schema=schema(1, 1, [(0, 0)]), doc=u.doc)(maker)
    register_kernel(u.grad_type, gradient_op=True)(gradient)


for _u_op in UNARY_OPS:
    _register(_u_op)

# Softsign reads X: Caffe2 refuses an in-place Softsign outright (its maker enforces
# I(0) != O(0)); netgrad does the same. This maker replaces the table's for Softsign.


@register_gradient("Softsign", op_schema=schema(1, 1, [(0, 0)]),
                   doc="Y = X / (1 + |X|)")
def softsign_grad(m: GradientMaker) -> list[OperatorDef]:
    """``SoftsignGradient([X, dY] -> [dX])``; an in-place Softsign is refused as in Caffe2.

    Raises:
        GradientError: ``Softsign(X -> X)``.
    """
    if m.input_names[0] == m.output_names[0]:
        raise GradientError(
            "Cannot compute softsign gradient if you choose to do an in-place calculation."
        )
    return [m.make_op("SoftsignGradient", [m.I(0), m.GO(0)], [m.GI(0)])]


# ThresholdedRelu: Caffe2's ThresholdedReluGradient kernel computes dY·sign(Y), right only for
# alpha >= 0 (then Y is 0 or positive). With alpha < 0 an output in (alpha, 0) is negative and
# the kernel would flip its gradient, so netgrad emits Abs([Y] -> [t]), ReluGradient([t, dY]
# -> [dX]) instead: dY where Y != 0 (corrected behaviour; same ops run on real Caffe2).


@register_gradient("ThresholdedRelu", op_schema=schema(1, 1, [(0, 0)]),
                   doc="Y = X if X > alpha else 0 (alpha=1)")
def thresholded_relu_grad(m: GradientMaker) -> list[OperatorDef]:
    """``ThresholdedReluGradient([Y, dY] -> [dX])`` (args copied) for ``alpha >= 0``; for
    ``alpha < 0``: ``Abs([Y] -> ["_" + dX + "_abs_y"])``, ``ReluGradient([that, dY] -> [dX])``.
    """
    if m.arg_f("alpha", 1.0) >= 0:
        return [m.make_op("ThresholdedReluGradient", [m.O(0), m.GO(0)], [m.GI(0)])]
    dx = m.GI(0)
    t = "_" + dx + "_abs_y"
    return [m.make_op("Abs", [m.O(0)], [t]), m.make_op("ReluGradient", [t, m.GO(0)], [dx])]


# --- Sqr ------------------------------------------------------------------------------------
# Y = X²;  dX = 2·dY·X  (corrected: Caffe2 scales dY in place, see the module docstring)


@register_kernel("Sqr")
def sqr(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = X²`` (any shape, X's dtype)."""
    expect_inputs(op, inputs, 1)
    x = np.asarray(inputs[0])
    return [x * x]


@register_gradient("Sqr", op_schema=schema(1, 1, [(0, 0)]), doc="Y = X²")
def sqr_grad(m: GradientMaker) -> list[OperatorDef]:
    """``Scale([dY] -> [dX], scale=2.0)``, ``Mul([dX, X] -> [dX])`` (dY left untouched)."""
    dx = m.GI(0)
    return [
        m.make_op("Scale", [m.GO(0)], [dx], [make_arg("scale", 2.0)]),
        m.make_op("Mul", [dx, m.I(0)], [dx]),
    ]


# --- PRelu ----------------------------------------------------------------------------------
# Y = X if X > 0 else W_c·X (W: one slope or one per channel, channel axis by `order`)
# dX = dY if X > 0 else W_c·dY;  dW_c = Σ_{X ≤ 0, channel c} dY·X


def _prelu_slope(op: OperatorDef, x: Array, w: Array) -> Array:
    """W broadcastable to X: a scalar slope, or one per channel (dim 1 NCHW, last NHWC)."""
    if w.size == 1:
        return w.reshape(())
    order = _prelu_order(op)
    axis = 1 if order == "NCHW" else x.ndim - 1
    if x.ndim < 2 or w.ndim != 1 or x.shape[axis] != w.size:
        raise kernel_error(op, f"slope must have 1 or C={x.shape[axis] if x.ndim >= 2 else '?'} "
                               f"elements ({order})", [x, w])
    shape = [1] * x.ndim
    shape[axis] = w.size
    return w.reshape(shape)


@register_kernel("PRelu")
def prelu(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X, Slope] -> [Y]``; Slope has 1 or C elements (arg ``order``, NCHW default)."""
    expect_inputs(op, inputs, 2)
    x, w = _f(inputs[0]), _f(inputs[1])
    return [np.where(x > 0, x, x * _prelu_slope(op, x, w)).astype(x.dtype, copy=False)]


# ``PReluGradient([Y, dY, X, W] -> [dX, dW])``, forward args copied.
prelu_grad = template("PReluGradient", [O(0), GO(0), I(0), I(1)], [0, 1])
register_gradient("PRelu", op_schema=schema(2, 1, [(0, 0)]), doc="Y = X if X > 0 else W·X")(
    prelu_grad
)


@register_kernel("PReluGradient", gradient_op=True)
def prelu_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[Y, dY, X, W] -> [dX, dW]`` (dW has W's shape)."""
    expect_inputs(op, inputs, 4)
    dy, x, w = _f(inputs[1]), _f(inputs[2]), _f(inputs[3])
    if dy.shape != x.shape:
        raise kernel_error(op, "dY must have X's shape", inputs)
    slope = _prelu_slope(op, x, w)
    pos = x > 0
    dx = np.where(pos, dy, dy * slope)
    contrib = np.where(pos, 0, dy * x)
    if w.size == 1:
        dw = np.asarray(contrib.sum()).reshape(w.shape)
    else:
        axis = 1 if _prelu_order(op) == "NCHW" else x.ndim - 1
        dw = contrib.sum(axis=tuple(i for i in range(x.ndim) if i != axis)).reshape(w.shape)
    return [dx.astype(dy.dtype, copy=False), dw.astype(w.dtype, copy=False)]


# --- NegateGradient -------------------------------------------------------------------------
# Y = X;  dX = −dY


@register_kernel("NegateGradient")
def negate_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = X`` (a copy); only the gradient is negated."""
    expect_inputs(op, inputs, 1)
    return [np.array(inputs[0], copy=True)]


# ``Negative([dY] -> [dX])``.
negate_gradient_grad = template("Negative", [GO(0)], [0])
register_gradient("NegateGradient", op_schema=schema(1, 1, [(0, 0)]),
                   doc="Identity forward; the gradient is negated")(negate_gradient_grad)


# --- FloatToHalf / HalfToFloat --------------------------------------------------------------
# Casts; each one's gradient is the other cast of dY (Caffe2 half_float_ops.cc).


@register_kernel("FloatToHalf")
def float_to_half(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``X (float32; any float accepted) -> Y float16``, round to nearest."""
    expect_inputs(op, inputs, 1)
    x = np.asarray(inputs[0])
    if x.dtype.kind != "f":
        raise kernel_error(op, "expects a floating-point input", inputs)
    with np.errstate(over="ignore"):
        return [x.astype(np.float16)]


@register_kernel("HalfToFloat")
def half_to_float(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``X float16 -> Y float32`` (exact). Other float inputs are rounded through float16
    first, so the result is what a float16 blob of the same values would give."""
    expect_inputs(op, inputs, 1)
    x = np.asarray(inputs[0])
    if x.dtype.kind != "f":
        raise kernel_error(op, "expects a floating-point input", inputs)
    with np.errstate(over="ignore"):
        return [x.astype(np.float16).astype(np.float32)]


# ``HalfToFloat([dY] -> [dX])``.
float_to_half_grad = template("HalfToFloat", [GO(0)], [0])
register_gradient("FloatToHalf", op_schema=schema(1, 1), doc="Cast float32 -> float16")(
    float_to_half_grad
)


# ``FloatToHalf([dY] -> [dX])``.
half_to_float_grad = template("FloatToHalf", [GO(0)], [0])
register_gradient("HalfToFloat", op_schema=schema(1, 1), doc="Cast float16 -> float32")(
    half_to_float_grad
)


# --- ReluFp16 / SoftmaxFp16 -----------------------------------------------------------------
# Relu and Softmax registered under the Fp16 names (Caffe2 reuses GetReluGradient /
# GetSoftmaxGradient, whose gradient type is def.type() + "Gradient"). Float16 blobs are
# computed in float32 and stored back as float16; other float dtypes are kept as they are.


def _via_float32(fn: Any, op: OperatorDef, inputs: list[Array]) -> list[Array]:
    xs = [np.asarray(x) for x in inputs]
    half = any(x.dtype == np.float16 for x in xs)
    outs = fn(op, [x.astype(np.float32) if x.dtype == np.float16 else x for x in xs])
    return [np.asarray(o).astype(np.float16) if half else o for o in outs]


@register_kernel("ReluFp16")
def relu_fp16(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = max(X, 0)`` (float16 in, float16 out)."""
    expect_inputs(op, inputs, 1)
    x = np.asarray(inputs[0])
    return [np.where(x > 0, x, np.zeros((), x.dtype))]


# ``ReluFp16Gradient([Y, dY] -> [dX])``.
relu_fp16_grad = template("ReluFp16Gradient", [O(0), GO(0)], [0])
register_gradient("ReluFp16", op_schema=schema(1, 1, [(0, 0)]), doc="Relu on float16 blobs")(
    relu_fp16_grad
)


@register_kernel("ReluFp16Gradient", gradient_op=True)
def relu_fp16_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[Y, dY] -> [dY where Y > 0]``."""
    expect_inputs(op, inputs, 2)
    y, dy = np.asarray(inputs[0]), np.asarray(inputs[1])
    if y.shape != dy.shape:
        raise kernel_error(op, "inputs must have the same shape", inputs)
    return [np.where(y > 0, dy, np.zeros((), dy.dtype))]


@register_kernel("SoftmaxFp16")
def softmax_fp16(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """Softmax (arg ``axis``=1) of a float16 X, computed in float32, returned as float16."""
    from core.ops import nn  # (the Softmax kernels live there)

    return _via_float32(nn.softmax, op, inputs)


# ``SoftmaxFp16Gradient([Y, dY] -> [dX])``, args copied.
softmax_fp16_grad = template("SoftmaxFp16Gradient", [O(0), GO(0)], [0])
register_gradient("SoftmaxFp16", op_schema=schema(1, 1, inplace=False),
                   doc="Softmax on float16 blobs")(softmax_fp16_grad)


@register_kernel("SoftmaxFp16Gradient", gradient_op=True)
def softmax_fp16_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[Y, dY] -> [dX]``, ``dX = Y·(dY − Σ_row dY·Y)`` (float16 via float32)."""
    from core.ops import nn

    return _via_float32(nn.softmax_gradient, op, inputs)
