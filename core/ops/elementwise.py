"""Elementwise arithmetic and activations: NumPy kernels, gradient makers, gradient kernels.

One paragraph per op: the forward kernel, the gradient maker and the gradient-op kernel side by
side, each with the maths in a comment. Semantics follow the newest Caffe2 revision
(spec §5.1, §5.2, §5.6):

* Binary arithmetic (Add, Sub, Mul, Div, Pow with a tensor exponent) broadcasts in one of two
  ways. With ``broadcast=1`` the *legacy* rule applies: B's shape must equal a contiguous run of
  A's dims starting at ``axis`` (``-1`` = suffix; ``axis_str`` + ``order`` may name the axis;
  leading/trailing 1s of B are ignored) and the output has A's shape. With ``broadcast=0``
  (default) NumPy's multidirectional broadcasting applies.
* The gradient ops (``AddGradient``...) receive the forward args (copied by the registry) and
  reduce the broadcast gradient back to each input's shape with the same alignment.
* Kernels never mutate inputs; float32 and float64 keep their dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from core.errors import ExecutionError, GradientError
from core.ops._args import check_numel, get_float, get_int, get_str
from core.registry import (
    GradientMaker,
    OperatorDef,
    find_arg,
    kernel_inputs_repr,
    make_arg,
    register_gradient,
    register_kernel,
    schema,
)
from core.template import GO, I, O, template

Array = np.ndarray[Any, Any]

# In-place pairs Caffe2 allows for binary elementwise ops: C may overwrite A or B.
_BINARY_INPLACE = [(0, 0), (1, 0)]


# --- shared helpers ------------------------------------------------------------------------


def kernel_error(op: OperatorDef, message: str, inputs: Sequence[Array] = ()) -> ExecutionError:
    """An :class:`ExecutionError` naming the op type and the input shapes/dtypes."""
    where = f" (inputs: {kernel_inputs_repr(inputs)})" if inputs else ""
    return ExecutionError(f"{op.type}: {message}{where}")


def expect_inputs(op: OperatorDef, inputs: Sequence[Array], lo: int, hi: int | None = None) -> None:
    """Check that a kernel got between ``lo`` and ``hi`` (default ``lo``) inputs.

    Raises:
        ExecutionError: wrong input count.
    """
    hi = lo if hi is None else hi
    if not lo <= len(inputs) <= hi:
        want = str(lo) if lo == hi else f"{lo} to {hi}"
        raise kernel_error(op, f"expects {want} inputs, got {len(inputs)}", inputs)


def _legacy_axis(op: OperatorDef, a_ndim: int, b_ndim: int) -> int:
    """Start axis of B in A for legacy broadcasting (``axis``, or ``axis_str`` + ``order``)."""
    axis_str = get_str(op, "axis_str", "")
    if axis_str:
        if find_arg(op, "axis") is not None:
            raise kernel_error(op, "give either 'axis' or 'axis_str', not both")
        order = get_str(op, "order", "NCHW")
        if len(axis_str) != 1 or axis_str not in order:
            raise kernel_error(op, f"axis_str '{axis_str}' is not a dimension of order '{order}'")
        return order.index(axis_str)
    axis = get_int(op, "axis", -1)
    return a_ndim - b_ndim if axis == -1 else axis


def legacy_aligned_shape(
    op: OperatorDef, a_shape: tuple[int, ...], b_shape: tuple[int, ...]
) -> tuple[int, ...]:
    """B's shape padded with 1s to A's rank under Caffe2's legacy broadcast rule (spec §5.2).

    B occupies A's dims ``axis .. axis + B.ndim - 1``; leading and trailing 1s of B match any
    dim of A (Caffe2 ``ComputeLegacyBroadcastSizes``), every other dim must equal A's.

    Raises:
        ExecutionError: B does not fit into A at ``axis``.
    """
    axis = _legacy_axis(op, len(a_shape), len(b_shape))
    if len(b_shape) > len(a_shape) or axis < 0 or axis + len(b_shape) > len(a_shape):
        raise kernel_error(
            op,
            f"legacy broadcast: B{list(b_shape)} does not fit into A{list(a_shape)} at axis {axis}",
        )
    start = 0
    while start < len(b_shape) and b_shape[start] == 1:
        start += 1
    end = len(b_shape) - 1
    while end >= start and b_shape[end] == 1:
        end -= 1
    for k in range(start, end + 1):
        if a_shape[axis + k] != b_shape[k]:
            raise kernel_error(
                op,
                f"legacy broadcast: B{list(b_shape)} does not match A{list(a_shape)} "
                f"at axis {axis}",
            )
    return (1,) * axis + tuple(b_shape) + (1,) * (len(a_shape) - axis - len(b_shape))


def broadcast_shapes(
    op: OperatorDef, a_shape: tuple[int, ...], b_shape: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Aligned shapes of A and B (same rank) and the output shape of a binary op.

    ``broadcast=1``: legacy rule (output = A's shape). Otherwise NumPy broadcasting.

    Raises:
        ExecutionError: the shapes cannot be broadcast.
    """
    if get_int(op, "broadcast", 0):
        return tuple(a_shape), legacy_aligned_shape(op, a_shape, b_shape), tuple(a_shape)
    try:
        out = tuple(int(d) for d in np.broadcast_shapes(a_shape, b_shape))
    except ValueError:
        raise kernel_error(
            op, f"shapes {list(a_shape)} and {list(b_shape)} cannot be broadcast"
        ) from None
    n = len(out)
    return (1,) * (n - len(a_shape)) + a_shape, (1,) * (n - len(b_shape)) + b_shape, out


def reduce_to(g: Array, aligned: tuple[int, ...], shape: tuple[int, ...]) -> Array:
    """Sum ``g`` over the axes where ``aligned`` has a 1 but ``g`` does not; reshape to ``shape``.

    ``aligned`` is an input's shape padded to the output's rank (see :func:`broadcast_shapes`).
    """
    axes = tuple(i for i, (d, o) in enumerate(zip(aligned, g.shape, strict=True)) if d == 1 != o)
    out = g.sum(axis=axes, keepdims=True) if axes else np.array(g, copy=True)  # never a view
    return np.asarray(out).reshape(shape)


def _float_like(x: Array) -> np.dtype[Any]:
    """``x``'s dtype if floating, else float64 (for math that needs a float result)."""
    return x.dtype if np.issubdtype(x.dtype, np.floating) else np.dtype(np.float64)


def binary_kernel(op: OperatorDef, inputs: Sequence[Array], fn: Callable[..., Any]) -> Array:
    """Run ``fn(A, B)`` with the op's broadcast rule; the result has NumPy's promoted dtype.

    Raises:
        ExecutionError: not two inputs, or shapes that cannot be broadcast.
    """
    expect_inputs(op, inputs, 2)
    a, b = (np.asarray(x) for x in inputs)
    a_al, b_al, out = broadcast_shapes(op, a.shape, b.shape)
    check_numel(out, op)  # (N,1) x (1,N) broadcasts can be huge
    with np.errstate(all="ignore"):
        return np.asarray(fn(a.reshape(a_al), b.reshape(b_al)))


def _binary_grad_setup(
    op: OperatorDef, inputs: Sequence[Array], n: int
) -> tuple[Array, Array, Array, tuple[int, ...], tuple[int, ...]]:
    """Common part of Add/Sub/Mul/DivGradient: ``(dC, A, B, A_aligned, B_aligned)``."""
    expect_inputs(op, inputs, n)
    dc, a, b = (np.asarray(x) for x in inputs[:3])
    a_al, b_al, out = broadcast_shapes(op, a.shape, b.shape)
    if dc.shape != out:
        raise kernel_error(op, f"gradient shape {list(dc.shape)} != output shape {list(out)}")
    return dc, a, b, a_al, b_al


def _unary(op: OperatorDef, inputs: Sequence[Array]) -> Array:
    expect_inputs(op, inputs, 1)
    return np.asarray(inputs[0])


def _pair(op: OperatorDef, inputs: Sequence[Array]) -> tuple[Array, Array]:
    """Two same-shaped inputs (``[Y, dY]`` of activation gradients)."""
    expect_inputs(op, inputs, 2)
    y, dy = np.asarray(inputs[0]), np.asarray(inputs[1])
    if y.shape != dy.shape:
        raise kernel_error(op, "inputs must have the same shape", inputs)
    return y, dy


# --- Add -------------------------------------------------------------------------------------
# C = A + B;  dA = reduce_to(dC, A),  dB = reduce_to(dC, B)


@register_kernel("Add")
def add(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``C = A + B`` with legacy or NumPy broadcasting (spec §5.2)."""
    return [binary_kernel(op, inputs, np.add)]


@register_gradient("Add", op_schema=schema(2, 1, _BINARY_INPLACE))
def add_grad(m: GradientMaker) -> list[OperatorDef]:
    """``AddGradient([dC, A, B] -> [dA, dB])``, forward args copied."""
    # A is read for its shape only (x += b in place keeps it); B for its shape too, but an
    # in-place write into B may change that shape, so B counts as a value read.
    return [m.make_op("AddGradient", [m.GO(0), m.I_shape(0), m.I(1)], [m.GI(0), m.GI(1)])]


@register_kernel("AddGradient", gradient_op=True)
def add_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[dC, A, B] -> [dA, dB]``: dC reduced to each input's shape."""
    dc, a, b, a_al, b_al = _binary_grad_setup(op, inputs, 3)
    return [reduce_to(dc, a_al, a.shape), reduce_to(dc, b_al, b.shape)]


# --- Sub -------------------------------------------------------------------------------------
# C = A - B;  dA = reduce_to(dC, A),  dB = -reduce_to(dC, B)


@register_kernel("Sub")
def sub(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``C = A - B`` with legacy or NumPy broadcasting (spec §5.2)."""
    return [binary_kernel(op, inputs, np.subtract)]


@register_gradient("Sub", op_schema=schema(2, 1, _BINARY_INPLACE))
def sub_grad(m: GradientMaker) -> list[OperatorDef]:
    """``SubGradient([dC, A, B] -> [dA, dB])``, forward args copied."""
    # As for Add: A is read for its shape only.
    return [m.make_op("SubGradient", [m.GO(0), m.I_shape(0), m.I(1)], [m.GI(0), m.GI(1)])]


@register_kernel("SubGradient", gradient_op=True)
def sub_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[dC, A, B] -> [dA, dB]``."""
    dc, a, b, a_al, b_al = _binary_grad_setup(op, inputs, 3)
    return [reduce_to(dc, a_al, a.shape), -reduce_to(dc, b_al, b.shape)]


# --- Mul -------------------------------------------------------------------------------------
# C = A · B;  dA = reduce_to(dC · B, A),  dB = reduce_to(dC · A, B)


@register_kernel("Mul")
def mul(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``C = A * B`` with legacy or NumPy broadcasting (spec §5.2)."""
    return [binary_kernel(op, inputs, np.multiply)]


# ``MulGradient([dC, A, B] -> [dA, dB])``, forward args copied.
mul_grad = register_gradient("Mul", op_schema=schema(2, 1, _BINARY_INPLACE))(
    template("MulGradient", [GO(0), I(0), I(1)], [0, 1])
)


@register_kernel("MulGradient", gradient_op=True)
def mul_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[dC, A, B] -> [dA, dB]``."""
    dc, a, b, a_al, b_al = _binary_grad_setup(op, inputs, 3)
    da = reduce_to(dc * b.reshape(b_al), a_al, a.shape)
    db = reduce_to(dc * a.reshape(a_al), b_al, b.shape)
    return [da, db]


# --- Div -------------------------------------------------------------------------------------
# C = A / B;  dA = reduce_to(dC / B, A),  dB = reduce_to(-dC · C / B, B)


def _int_div(a: Array, b: Array) -> Array:
    """C-style integer division (truncates toward zero), like Caffe2's integer Div."""
    q = np.floor_divide(np.abs(a), np.abs(b))
    return np.asarray(np.where((a < 0) ^ (b < 0), -q, q))


@register_kernel("Div")
def div(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``C = A / B`` (integers: truncating division; a zero integer divisor is an error).

    Raises:
        ExecutionError: bad shapes, or an integer division by zero.
    """
    expect_inputs(op, inputs, 2)
    if np.issubdtype(np.result_type(inputs[0], inputs[1]), np.integer):
        if np.any(np.asarray(inputs[1]) == 0):
            raise kernel_error(op, "integer division by zero", inputs)
        return [binary_kernel(op, inputs, _int_div)]
    return [binary_kernel(op, inputs, np.true_divide)]


@register_gradient("Div", op_schema=schema(2, 1, _BINARY_INPLACE))
def div_grad(m: GradientMaker) -> list[OperatorDef]:
    """``DivGradient([dC, A, B, C] -> [dA, dB])``, forward args copied.

    ``A`` is read for its shape only (``dA = dC / B``, ``dB = -dC · C / B``), so an in-place
    ``Div(A, B -> A)`` needs no overwritten value (issue 7, fuzzer F4).
    """
    return [
        m.make_op("DivGradient", [m.GO(0), m.I_shape(0), m.I(1), m.O(0)], [m.GI(0), m.GI(1)])
    ]


@register_kernel("DivGradient", gradient_op=True)
def div_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[dC, A, B, C] -> [dA, dB]``."""
    dc, a, b, a_al, b_al = _binary_grad_setup(op, inputs, 4)
    c = np.asarray(inputs[3])
    bb = b.reshape(b_al)
    with np.errstate(all="ignore"):
        da = reduce_to(dc / bb, a_al, a.shape)
        db = reduce_to(-dc * c / bb, b_al, b.shape)
    return [da, db]


# --- Sum -------------------------------------------------------------------------------------
# Y = Σ_i X_i (same shapes);  dX_i = dY (pass-through, no op)


@register_kernel("Sum")
def sum_(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = X_0 + ... + X_{n-1}``; all inputs must have the same shape (Caffe2 Sum).

    Raises:
        ExecutionError: no input or differing shapes.
    """
    if not inputs:
        raise kernel_error(op, "expects at least 1 input")
    first = np.asarray(inputs[0])
    if any(np.shape(x) != first.shape for x in inputs[1:]):
        raise kernel_error(op, "all inputs must have the same shape", inputs)
    out = np.array(first, copy=True)
    for x in inputs[1:]:
        out = out + np.asarray(x)
    return [out]


@register_gradient("Sum", op_schema=schema((1, -1), 1, [(0, 0)]))
def sum_grad(m: GradientMaker) -> list[OperatorDef]:
    """Pass-through: every input's gradient is ``dY`` itself (no op, spec §5.2)."""
    for i in range(len(m.input_names)):
        m.set_dense(i, m.GO(0))
    return []


# --- Mean ------------------------------------------------------------------------------------
# Y = (1/n) Σ_i X_i;  dX_i = dY / n


@register_kernel("Mean")
def mean(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = mean(X_0..X_{n-1})`` elementwise; same shapes required."""
    (y,) = sum_(op, inputs)
    return [np.asarray(y / len(inputs)).astype(_float_like(y), copy=False)]


@register_gradient("Mean", op_schema=schema((1, -1), 1, [(0, 0)]))
def mean_grad(m: GradientMaker) -> list[OperatorDef]:
    """``MeanGradient([dY] -> [dX_0 .. dX_{n-1}])``."""
    outs = [m.GI(i) for i in range(len(m.op.input))]
    return [m.make_op("MeanGradient", [m.GO(0)], outs)]


@register_kernel("MeanGradient", gradient_op=True)
def mean_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[dY] -> [dY/n] * n`` where n = number of outputs."""
    dy = _unary(op, inputs)
    n = max(len(op.output), 1)
    g = np.asarray(dy / n).astype(_float_like(dy), copy=False)
    return [g.copy() for _ in range(n)]


# --- Scale -----------------------------------------------------------------------------------
# Y = s · X;  dX = s · dY


@register_kernel("Scale")
def scale(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = scale * X`` (arg ``scale``, default 1.0)."""
    x = _unary(op, inputs)
    return [np.asarray(x * get_float(op, "scale", 1.0)).astype(_float_like(x), copy=False)]


# ``Scale([dY] -> [dX])`` with ``scale`` copied from the forward op.
scale_grad = register_gradient("Scale", op_schema=schema(1, 1))(template("Scale", [GO(0)], [0]))


# --- Pow -------------------------------------------------------------------------------------
# Scalar exponent e:  Y = X^e,  dX = e · X^(e-1) · dY.
# Tensor exponent B:  dX = B · X^(B-1) · dY,  dB = reduce_to(ln X · Y · dY, B).


@register_kernel("Pow")
def pow_(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = X ** exponent`` (1 input + arg ``exponent``) or ``Y = A ** B`` (2 inputs of one
    shape, or with ``broadcast=1`` Caffe2's legacy broadcast of B into A).

    Raises:
        ExecutionError: both or neither of the exponent forms, shapes that differ without
            ``broadcast``, or bad shapes.
    """
    has_exp = find_arg(op, "exponent") is not None
    if has_exp and len(inputs) == 1:
        x = np.asarray(inputs[0])
        with np.errstate(all="ignore"):
            y = np.power(x.astype(_float_like(x), copy=False), get_float(op, "exponent", 1.0))
        return [np.asarray(y)]
    if not has_exp and len(inputs) == 2:
        a, b = np.shape(inputs[0]), np.shape(inputs[1])
        if not get_int(op, "broadcast", 0) and a != b:
            # Caffe2's PowOp broadcasts only with broadcast=1 (legacy rule, arg axis); its
            # gradient reduces to B's shape only then (review, stop 25: a [2, 3] gradient for
            # a [3] exponent, and a verify refusal naming a generated op)
            raise kernel_error(
                op, f"A{list(a)} and B{list(b)} differ in shape and broadcast is not set "
                "(Caffe2's Pow: 'did you forget to set broadcast=1?'); give "
                '{"name": "broadcast", "i": 1} (with "axis" where B does not align with '
                "A's last dims), or inputs of one shape", inputs)
        return [binary_kernel(op, inputs, np.power)]
    raise kernel_error(op, "takes either 1 input and an 'exponent' arg, or 2 inputs", inputs)


@register_gradient("Pow", op_schema=schema((1, 2), 1, _BINARY_INPLACE), copy_arguments=False)
def pow_grad(m: GradientMaker) -> list[OperatorDef]:
    """Pow's gradient (spec §5.1), forward args not copied.

    Scalar exponent ``e``: ``Pow([X] -> [t], exponent=e-1)``, ``Mul([t, dY] -> [dX])``,
    ``Scale([dX] -> [dX], scale=e)`` where ``t = dX``. In place (X is Y) the first op reads
    the output, so its exponent is ``(e-1)/e`` (``Y^((e-1)/e) = X^(e-1)``, X > 0).

    Corrected behaviour (spec §3.8 #11): when ``dX`` and ``dY`` have the same name (in-place
    Pow at top level: both ``X_grad``), upstream's first op overwrote the incoming gradient
    before the Mul read it. Here ``t`` is then the fresh name ``<dX>_autogen_pow``.

    Tensor exponent: the op list of spec §5.1 (with ``SumReduceLike`` when the forward op
    has a ``broadcast`` argument). Without a ``broadcast`` argument both inputs must have the
    same shape, as upstream (NumPy-style broadcasting between base and exponent is not reduced).

    In place with an odd integer exponent the base is ``Abs(Y)`` (``X^(e-1)`` is even in X;
    ``Y^((e-1)/e)`` was NaN for X < 0); an even integer exponent in place loses X's sign,
    which the gradient needs, and is refused (adversarial review, stop 21).

    Raises:
        GradientError: in-place tensor-exponent Pow, an in-place exponent with
            |e| <= 1e-12, or an in-place even integer exponent.
    """
    if m.arg("exponent") is not None:
        e = m.arg_f("exponent", 1.0)
        x, y = m.input_names[0], m.O(0)
        if not math.isfinite(e):  # (round(inf) raised: a 500, adversarial review)
            raise GradientError(
                f"Pow({x} -> {y}) with exponent {e}: a non-finite exponent has no usable "
                "gradient (e·x^(e-1) is infinite or NaN); use a finite exponent")
        if x == y:
            # In place: the input value is gone, so the gradient uses the output,
            # X^(e-1) = Y^((e-1)/e) (spec §2.9); it reads the output version.
            if abs(e) <= 1e-12:
                raise GradientError(
                    f"Pow({x} -> {y}): in-place Pow with exponent {e} has no gradient"
                )
            if e == round(e) and round(e) % 2 == 0:
                raise GradientError(
                    f"Pow({x} -> {y}) in place with the even exponent {e:g}: the output "
                    f"loses the sign of {x}, which the gradient needs ({e:g}·x^{e - 1:g} is "
                    f"odd in x); write the output to a new blob"
                )
            pow_e, base = (e - 1.0) / e, m.O(0)
        else:
            pow_e, base = e - 1.0, m.I(0)
        dx, dy = m.GI(0), m.GO(0)
        tmp = dx + "_autogen_pow" if dx == dy else dx
        # An odd integer exponent in place: Y < 0 for X < 0, and Y^((e-1)/e) would be NaN;
        # X^(e-1) is even in X, so it is |Y|^((e-1)/e) (adversarial review, stop 21).
        odd = x == y and e == round(e)
        return [
            *([m.make_op("Abs", [base], [tmp])] if odd else []),
            m.make_op("Pow", [tmp if odd else base], [tmp], [make_arg("exponent", pow_e)]),
            m.make_op("Mul", [tmp, dy], [dx]),
            m.make_op("Scale", [dx], [dx], [make_arg("scale", e)]),
        ]
    if len(m.op.input) != 2:
        raise GradientError(f"Pow({m.I(0)}): needs an 'exponent' argument or a second input")
    if m.O(0) in (m.I(0), m.I(1)):
        raise GradientError(
            "Gradient computation cannot be carried out if Pow uses in-place computation: "
            f"Pow([{m.I(0)}, {m.I(1)}] -> [{m.O(0)}])"
        )
    bflag = m.arg("broadcast") is not None
    defaults: list[tuple[str, int | str]] = [
        ("broadcast", 0),
        ("axis", -1),
        ("axis_str", ""),
        ("order", "NCHW"),
    ]
    bargs = []
    if bflag:  # Caffe2 passes all four legacy args, filling in the missing ones
        for name, default in defaults:
            given = m.arg(name)
            bargs.append(given if given is not None else make_arg(name, default))
    x, b, y, dy = m.I(0), m.I(1), m.O(0), m.GO(0)
    dx, db = m.GI(0), m.GI(1)
    pre = db + "_autogen_pre_red"
    # dB-blob is first used as scratch for B - 1.
    ops = [
        m.make_op("ConstantFill", [b], [db], [make_arg("value", 1.0)]),
        m.make_op("Sub", [b, db], [db]),
        m.make_op("Pow", [x, db], [dx], bargs),
        m.make_op("Mul", [dx, dy], [dx]),
        m.make_op("Mul", [dx, b], [dx], bargs),
        m.make_op("Log", [x], [pre]),
        m.make_op("Mul", [pre, y], [pre]),
    ]
    if bflag:
        ops.append(m.make_op("Mul", [pre, dy], [pre]))
        ops.append(m.make_op("SumReduceLike", [pre, b], [db], bargs[1:]))
    else:
        ops.append(m.make_op("Mul", [pre, dy], [db]))
    return ops


# --- SumReduceLike (gradient helper) ---------------------------------------------------------
# C = reduce_to(A, B.shape) with B aligned in A by the legacy rule (axis / axis_str / order).


@register_kernel("SumReduceLike", gradient_op=True)
def sum_reduce_like(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[A, B] -> [C]``: A summed over the dims B is broadcast along; C has B's shape."""
    expect_inputs(op, inputs, 2)
    a, b = np.asarray(inputs[0]), np.asarray(inputs[1])
    return [reduce_to(a, legacy_aligned_shape(op, a.shape, b.shape), b.shape)]


# --- Exp -------------------------------------------------------------------------------------
# Y = e^X;  dX = Y · dY


@register_kernel("Exp")
def exp(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = exp(X)``."""
    x = _unary(op, inputs)
    with np.errstate(over="ignore"):
        return [np.exp(x.astype(_float_like(x), copy=False))]


# ``Mul([Y, dY] -> [dX])``.
exp_grad = register_gradient("Exp", op_schema=schema(1, 1, [(0, 0)]))(
    template("Mul", [O(0), GO(0)], [0])
)


# --- Log -------------------------------------------------------------------------------------
# Y = ln X;  dX = dY / X


@register_kernel("Log")
def log(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = ln(X)`` (non-positive X gives -inf/NaN, as in Caffe2)."""
    x = _unary(op, inputs)
    with np.errstate(all="ignore"):
        return [np.log(x.astype(_float_like(x), copy=False))]


# ``Div([dY, X] -> [dX])``.
log_grad = register_gradient("Log", op_schema=schema(1, 1, [(0, 0)]))(
    template("Div", [GO(0), I(0)], [0])
)


# --- Sqrt ------------------------------------------------------------------------------------
# Y = √X;  dX = 0.5 · dY / Y


@register_kernel("Sqrt")
def sqrt(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = sqrt(X)``."""
    x = _unary(op, inputs)
    with np.errstate(invalid="ignore"):
        return [np.sqrt(x.astype(_float_like(x), copy=False))]


@register_gradient("Sqrt", op_schema=schema(1, 1, [(0, 0)]))
def sqrt_grad(m: GradientMaker) -> list[OperatorDef]:
    """``Scale([dY] -> [dX], scale=0.5)``, ``Div([dX, Y] -> [dX])``."""
    return [
        m.make_op("Scale", [m.GO(0)], [m.GI(0)], [make_arg("scale", 0.5)]),
        m.make_op("Div", [m.GI(0), m.O(0)], [m.GI(0)]),
    ]


# --- Abs -------------------------------------------------------------------------------------
# Y = |X|;  dX = sign(X) · dY


@register_kernel("Abs")
def abs_(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = |X|``."""
    return [np.abs(_unary(op, inputs))]


# ``AbsGradient([X, dY] -> [dX])``.
abs_grad = register_gradient("Abs", op_schema=schema(1, 1, [(0, 0)]))(
    template("AbsGradient", [I(0), GO(0)], [0])
)


@register_kernel("AbsGradient", gradient_op=True)
def abs_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X, dY] -> [sign(X) * dY]``."""
    x, dy = _pair(op, inputs)
    return [np.sign(x).astype(dy.dtype) * dy]


# --- Negative --------------------------------------------------------------------------------
# Y = -X;  dX = -dY


@register_kernel("Negative")
def negative(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = -X``."""
    return [np.negative(_unary(op, inputs))]


# ``Negative([dY] -> [dX])``.
negative_grad = register_gradient("Negative", op_schema=schema(1, 1, [(0, 0)]))(
    template("Negative", [GO(0)], [0])
)


# --- Relu ------------------------------------------------------------------------------------
# Y = max(X, 0);  dX = dY · [Y > 0]


@register_kernel("Relu")
def relu(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = max(X, 0)``; in place (``Relu(X -> X)``) allowed."""
    x = _unary(op, inputs)
    return [np.where(x > 0, x, np.zeros((), x.dtype))]


# ``ReluGradient([Y, dY] -> [dX])`` (reads the output, so in-place Relu works).
relu_grad = register_gradient("Relu", op_schema=schema(1, 1, [(0, 0)]))(
    template("ReluGradient", [O(0), GO(0)], [0])
)


@register_kernel("ReluGradient", gradient_op=True)
def relu_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[Y, dY] -> [dY * (Y > 0)]``."""
    y, dy = _pair(op, inputs)
    return [np.where(y > 0, dy, np.zeros((), dy.dtype))]


# --- LeakyRelu -------------------------------------------------------------------------------
# Y = X if X ≥ 0 else α·X;  dX = dY where Y > 0, else α·dY


@register_kernel("LeakyRelu")
def leaky_relu(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = X if X >= 0 else alpha * X`` (arg ``alpha``, default 0.01)."""
    x = _unary(op, inputs)
    alpha = get_float(op, "alpha", 0.01)
    return [np.where(x >= 0, x, x * alpha).astype(x.dtype, copy=False)]


@register_gradient("LeakyRelu", op_schema=schema(1, 1, [(0, 0)]))
def leaky_relu_grad(m: GradientMaker) -> list[OperatorDef]:
    """``LeakyReluGradient([Y, dY] -> [dX])``, ``alpha`` copied (Caffe2, spec §5.1).

    Corrected behaviour: the kernel takes ``Y > 0`` to mean ``X > 0``, which fails for
    ``alpha < 0`` (a negative X gives a positive Y; Caffe2's gradient was then ``dY``
    instead of ``alpha * dY``: adversarial review, stop 21). With ``alpha < 0`` the gradient
    op reads X instead (the same test on the sign); in place, X is gone, so it is refused.

    Raises:
        GradientError: in-place LeakyRelu with ``alpha < 0``.
    """
    alpha = m.arg_f("alpha", 0.01)
    if alpha >= 0:
        return [m.make_op("LeakyReluGradient", [m.O(0), m.GO(0)], [m.GI(0)])]
    if m.I(0) == m.O(0):
        raise GradientError(
            f"LeakyRelu({m.I(0)} -> {m.O(0)}) in place with alpha={alpha:g} < 0: its gradient "
            "op reads only Y, and a positive Y no longer implies a positive X, so Caffe2's "
            "LeakyReluGradient would be wrong; write the output to a new blob (or use "
            "alpha >= 0)"
        )
    return [m.make_op("LeakyReluGradient", [m.I(0), m.GO(0)], [m.GI(0)])]


@register_kernel("LeakyReluGradient", gradient_op=True)
def leaky_relu_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[Y, dY] -> [dY if Y > 0 else alpha * dY]``."""
    y, dy = _pair(op, inputs)
    alpha = get_float(op, "alpha", 0.01)
    return [np.where(y > 0, dy, dy * alpha).astype(dy.dtype, copy=False)]


# --- Sigmoid ---------------------------------------------------------------------------------
# Y = 1 / (1 + e^-X);  dX = dY · Y · (1 - Y)


@register_kernel("Sigmoid")
def sigmoid(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = 1 / (1 + exp(-X))``, computed without overflow."""
    x = _unary(op, inputs)
    x = x.astype(_float_like(x), copy=False)
    e = np.exp(-np.abs(x))
    return [np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)]


# ``SigmoidGradient([Y, dY] -> [dX])``.
sigmoid_grad = register_gradient("Sigmoid", op_schema=schema(1, 1, [(0, 0)]))(
    template("SigmoidGradient", [O(0), GO(0)], [0])
)


@register_kernel("SigmoidGradient", gradient_op=True)
def sigmoid_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[Y, dY] -> [dY * Y * (1 - Y)]``."""
    y, dy = _pair(op, inputs)
    return [dy * y * (1 - y)]


# --- Tanh ------------------------------------------------------------------------------------
# Y = tanh X;  dX = dY · (1 - Y²)


@register_kernel("Tanh")
def tanh(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = tanh(X)``."""
    x = _unary(op, inputs)
    return [np.tanh(x.astype(_float_like(x), copy=False))]


# ``TanhGradient([Y, dY] -> [dX])`` (output first, spec §5.1).
tanh_grad = register_gradient("Tanh", op_schema=schema(1, 1, [(0, 0)]))(
    template("TanhGradient", [O(0), GO(0)], [0])
)


@register_kernel("TanhGradient", gradient_op=True)
def tanh_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[Y, dY] -> [dY * (1 - Y^2)]``."""
    y, dy = _pair(op, inputs)
    return [dy * (1 - y * y)]


# --- ElementwiseLinear -----------------------------------------------------------------------
# X as N×D (split at `axis`);  Y = X·a + b;  dX = dY·a,  da = Σ_rows dY·X,  db = Σ_rows dY


def _elementwise_linear_dims(op: OperatorDef, x: Array, a: Array, b: Array) -> tuple[int, int]:
    axis = get_int(op, "axis", 1)
    if axis < 0:
        axis += x.ndim
    if not 0 <= axis <= x.ndim:
        raise kernel_error(op, f"axis {axis} out of range for X{list(x.shape)}")
    n = int(np.prod(x.shape[:axis], dtype=np.int64))
    d = int(np.prod(x.shape[axis:], dtype=np.int64))
    if a.ndim != 1 or b.ndim != 1 or a.shape[0] != d or b.shape[0] != d:
        raise kernel_error(op, f"a and b must be vectors of length {d}", [x, a, b])
    return n, d


@register_kernel("ElementwiseLinear")
def elementwise_linear(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X, a, b] -> [Y]``, ``Y = X * a + b`` row-wise over X viewed as N×D (arg ``axis``=1)."""
    expect_inputs(op, inputs, 3)
    x, a, b = (np.asarray(v) for v in inputs)
    n, d = _elementwise_linear_dims(op, x, a, b)
    return [(x.reshape(n, d) * a + b).reshape(x.shape)]


# ``ElementwiseLinearGradient([dY, X, a] -> [dX, da, db])``, args copied.
elementwise_linear_grad = register_gradient("ElementwiseLinear", op_schema=schema(3, 1))(
    template("ElementwiseLinearGradient", [GO(0), I(0), I(1)], [0, 1, 2])
)


@register_kernel("ElementwiseLinearGradient", gradient_op=True)
def elementwise_linear_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[dY, X, a] -> [dX, da, db]``."""
    expect_inputs(op, inputs, 3)
    dy, x, a = (np.asarray(v) for v in inputs)
    n, d = _elementwise_linear_dims(op, x, a, a)
    if dy.shape != x.shape:
        raise kernel_error(op, "dY must have X's shape", inputs)
    dy2, x2 = dy.reshape(n, d), x.reshape(n, d)
    return [(dy2 * a).reshape(x.shape), (dy2 * x2).sum(axis=0), dy2.sum(axis=0)]


# --- DotProduct ------------------------------------------------------------------------------
# X, Y as N×D (N = dim 0);  Z_i = Σ_j X_ij·Y_ij;  dX = Y·dZ[:,None],  dY = X·dZ[:,None]


def _rows(op: OperatorDef, x: Array, y: Array) -> tuple[int, int]:
    if x.shape != y.shape:
        raise kernel_error(op, "X and Y must have the same shape", [x, y])
    n = int(x.shape[0]) if x.ndim > 0 else 1
    return n, (x.size // n if n else 0)


@register_kernel("DotProduct")
def dot_product(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X, Y] -> [Z]``, ``Z_i = sum_j X_ij * Y_ij`` (a 1-D input gives Z = X * Y, D = 1)."""
    expect_inputs(op, inputs, 2)
    x, y = np.asarray(inputs[0]), np.asarray(inputs[1])
    n, d = _rows(op, x, y)
    return [(x.reshape(n, d) * y.reshape(n, d)).sum(axis=1)]


# ``DotProductGradient([X, Y, dZ] -> [dX, dY])``.
dot_product_grad = register_gradient("DotProduct", op_schema=schema(2, 1))(
    template("DotProductGradient", [I(0), I(1), GO(0)], [0, 1])
)


@register_kernel("DotProductGradient", gradient_op=True)
def dot_product_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X, Y, dZ] -> [dX, dY]``."""
    expect_inputs(op, inputs, 3)
    x, y, dz = (np.asarray(v) for v in inputs)
    n, d = _rows(op, x, y)
    if dz.shape != (n,):
        raise kernel_error(op, f"dZ must have shape [{n}]", inputs)
    col = dz.reshape(n, 1)
    return [(y.reshape(n, d) * col).reshape(x.shape), (x.reshape(n, d) * col).reshape(y.shape)]


# --- MatMul (newest revision, spec §5.6) -----------------------------------------------------
# A2 = A flattened to 2-D at axis_a, B2 likewise;  Y = op(A2) · op(B2)
# A·B: dA = dY·B2ᵀ, dB = A2ᵀ·dY (then each reshaped like its input; other cases by symmetry)


def _flatten_at(op: OperatorDef, x: Array, axis: int) -> Array:
    if axis < 0:
        axis += x.ndim
    if not 0 <= axis <= x.ndim:
        raise kernel_error(op, f"axis {axis} out of range for a tensor of shape {list(x.shape)}")
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    cols = int(np.prod(x.shape[axis:], dtype=np.int64))
    return x.reshape(rows, cols)


@register_kernel("MatMul")
def matmul(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[A, B(, like)] -> [Y]``; args ``trans_a``, ``trans_b``, ``axis_a``=1, ``axis_b``=1.

    A third input (used by the gradient ops) gives the shape Y is reshaped to.

    Raises:
        ExecutionError: inner dimensions differ, or Y cannot take the third input's shape.
    """
    expect_inputs(op, inputs, 2, 3)
    a = _flatten_at(op, np.asarray(inputs[0]), get_int(op, "axis_a", 1))
    b = _flatten_at(op, np.asarray(inputs[1]), get_int(op, "axis_b", 1))
    if get_int(op, "trans_a", 0):
        a = a.T
    if get_int(op, "trans_b", 0):
        b = b.T
    if a.shape[1] != b.shape[0]:
        raise kernel_error(op, f"inner dimensions differ: {a.shape} x {b.shape}", inputs)
    check_numel((a.shape[0], b.shape[1]), op)
    y = a @ b
    if len(inputs) == 3:
        like = np.shape(inputs[2])
        if y.size != int(np.prod(like, dtype=np.int64)):
            raise kernel_error(op, f"result {list(y.shape)} cannot take shape {list(like)}")
        y = y.reshape(like)
    return [y]


@register_gradient("MatMul", op_schema=schema((2, 3), 1), copy_arguments=False)
def matmul_grad(m: GradientMaker) -> list[OperatorDef]:
    """Two ``MatMul`` ops with a third (reshape-target) input; forward args not copied.

    Table of spec §5.6 (newest revision). Upstream stores the axes in a ``bool`` (so any axis
    above 1 became 1); netgrad passes the integer axis through (corrected behaviour).
    """
    ta, tb = m.arg_i("trans_a", 0), m.arg_i("trans_b", 0)
    axa, axb = m.arg_i("axis_a", 1), m.arg_i("axis_b", 1)
    a, b, dy, da, db = m.I(0), m.I(1), m.GO(0), m.GI(0), m.GI(1)
    one = 1
    if not ta and not tb:  # dA = dY·Bᵀ, dB = Aᵀ·dY
        spec = [
            ([dy, b, a], da, [("trans_b", one), ("axis_b", axb)]),
            ([a, dy, b], db, [("trans_a", one), ("axis_a", axa)]),
        ]
    elif not ta:  # A·Bᵀ: dA = dY·B, dB = dYᵀ·A
        spec = [
            ([dy, b, a], da, [("axis_b", axb)]),
            ([dy, a, b], db, [("trans_a", one), ("axis_b", axa)]),
        ]
    elif not tb:  # Aᵀ·B: dA = B·dYᵀ, dB = A·dY
        spec = [
            ([b, dy, a], da, [("trans_b", one), ("axis_a", axb)]),
            ([a, dy, b], db, [("axis_a", axa)]),
        ]
    else:  # Aᵀ·Bᵀ: dA = Bᵀ·dYᵀ, dB = dYᵀ·Aᵀ
        spec = [
            ([b, dy, a], da, [("trans_a", one), ("trans_b", one), ("axis_a", axb)]),
            ([dy, a, b], db, [("trans_a", one), ("trans_b", one), ("axis_b", axa)]),
        ]
    if da == dy:  # in place into A (MatMul(A, B -> A)): dA overwrites dY, so it goes last
        spec.reverse()
    return [
        m.make_op("MatMul", ins, [out], [make_arg(k, v) for k, v in args])
        for ins, out, args in spec
    ]
