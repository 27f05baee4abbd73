"""Moments and distances (issue 8b): Moments, BatchMoments, L1Distance, SquareRootDivide.

Kernels, gradient makers and gradient kernels side by side. Sources (facts only): Caffe2
``moments_op.cc``, ``batch_moments_op.cc``, ``distance_op.cc`` (L1Distance),
``square_root_divide_op.cc`` (``Get<Op>Gradient`` classes); spec §2.3.

Corrected behaviour: Caffe2's Moments/BatchMoments makers read ``GO(0)`` and ``GO(1)``
unconditionally (an empty blob name when one output has no gradient); netgrad zero-fills the
missing one first, as its Split maker does.

Dtypes: float32/float64 keep their dtype; gradient kernels return the incoming gradient's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.ops._args import get_bool, get_order
from core.ops.elementwise import expect_inputs, kernel_error
from core.ops.reductions import reduce_axes
from core.registry import (
    GradientMaker,
    OperatorDef,
    make_arg,
    register_gradient,
    register_kernel,
    schema,
)
from core.template import GO, I, template

Array = np.ndarray[Any, Any]


# --- Moments --------------------------------------------------------------------------------
# mean = E[X], variance = E[(X − mean)²] over `axes` (population);
# dX = dmean / n + dvariance · 2(X − mean) / n


@register_kernel("Moments")
def moments(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X] -> [mean, variance]`` over ``axes`` (default all), ``keepdims``=1."""
    expect_inputs(op, inputs, 1)
    x = np.asarray(inputs[0])
    ax = reduce_axes(op, x.ndim)
    mean = x.mean(axis=ax, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=ax, keepdims=True)
    if not get_bool(op, "keepdims", True):
        shape = [d for i, d in enumerate(x.shape) if i not in ax]
        mean, var = mean.reshape(shape), var.reshape(shape)
    dt = x.dtype if x.dtype.kind == "f" else np.float32
    return [np.asarray(mean).astype(dt), np.asarray(var).astype(dt)]


@register_gradient("Moments", op_schema=schema(1, 2, False), doc="Mean and variance over axes")
def moments_grad(m: GradientMaker) -> list[OperatorDef]:
    """``MomentsGradient([dmean, dvariance, X, mean] -> [dX])``, args copied.

    Corrected behaviour: Caffe2 passes an empty blob name for a missing output gradient; netgrad
    first fills that gradient with zeros (``ConstantFill([<out>] ->
    ["_" + <out> + "_grad_autogen_zero"], value=0.0)``, shaped like the output, as netgrad's
    Split maker does), so a loss on only the mean or only the variance works.
    """
    ops: list[OperatorDef] = []
    gos: list[str] = []
    for k in range(2):
        if m.has_go(k):
            gos.append(m.GO(k))
        else:
            zero = "_" + m.O(k) + "_grad_autogen_zero"
            ops.append(m.make_op("ConstantFill", [m.O(k)], [zero], [make_arg("value", 0.0)]))
            gos.append(zero)
    ops.append(m.make_op("MomentsGradient", [gos[0], gos[1], m.I(0), m.O(0)], [m.GI(0)]))
    return ops


@register_kernel("MomentsGradient", gradient_op=True)
def moments_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[dmean, dvariance, X, mean] -> [dX]``."""
    expect_inputs(op, inputs, 4)
    dmean, dvar, x, mean = (np.asarray(v) for v in inputs)
    ax = reduce_axes(op, x.ndim)
    kept = tuple(1 if i in ax else d for i, d in enumerate(x.shape))
    k = int(np.prod(kept, dtype=np.int64))
    if dmean.size != k or dvar.size != k or mean.size != k:
        raise kernel_error(op, f"dmean, dvariance and mean must match {list(kept)}", inputs)
    n = max(int(np.prod([x.shape[a] for a in ax], dtype=np.int64)), 1)
    dx = (dmean.reshape(kept) + 2 * dvar.reshape(kept) * (x - mean.reshape(kept))) / n
    return [dx.astype(dmean.dtype, copy=False)]


# --- L1Distance -----------------------------------------------------------------------------
# X, Y: N×D (N = dim 0; 1-D: D = 1);  Z_i = Σ_j |X_ij − Y_ij|;  dX = dZ·sign(X − Y) = −dY


def _l1_rows(op: OperatorDef, x: Array, y: Array) -> tuple[int, int]:
    if x.shape != y.shape:
        raise kernel_error(op, "X and Y must have the same shape", [x, y])
    n = int(x.shape[0]) if x.ndim > 0 else 1
    return n, (x.size // n if n else 0)


@register_kernel("L1Distance")
def l1_distance(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X, Y] -> [Z]``, ``Z_i = Σ_j |X_ij − Y_ij|`` (Z has N elements)."""
    expect_inputs(op, inputs, 2)
    x, y = np.asarray(inputs[0]), np.asarray(inputs[1])
    n, d = _l1_rows(op, x, y)
    return [np.abs(x.reshape(n, d) - y.reshape(n, d)).sum(axis=1)]


# ``L1DistanceGradient([X, Y, dZ] -> [dX, dY])``.
l1_distance_grad = template("L1DistanceGradient", [I(0), I(1), GO(0)], [0, 1])
register_gradient("L1Distance", op_schema=schema(2, 1, False), doc="Row-wise L1 distance")(
    l1_distance_grad
)


@register_kernel("L1DistanceGradient", gradient_op=True)
def l1_distance_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X, Y, dZ] -> [dX, dY]``."""
    expect_inputs(op, inputs, 3)
    x, y, dz = (np.asarray(v) for v in inputs)
    n, d = _l1_rows(op, x, y)
    if dz.size != n:
        raise kernel_error(op, f"dZ must have {n} elements", inputs)
    g = (np.sign(x.reshape(n, d) - y.reshape(n, d)) * dz.reshape(n, 1)).astype(dz.dtype)
    return [g.reshape(x.shape), (-g).reshape(y.shape)]


# --- SquareRootDivide -----------------------------------------------------------------------
# Y_i = DATA_i / √SCALE_i (row i of DATA; SCALE_i = 0 leaves the row unchanged);
# dDATA = SquareRootDivide(dY, SCALE); SCALE gets no gradient (Caffe2)


@register_kernel("SquareRootDivide")
def square_root_divide(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[DATA (N×...), SCALE (N)] -> [Y]``; SCALE int or float; 0 means no scaling."""
    expect_inputs(op, inputs, 2)
    data, scale = np.asarray(inputs[0]), np.asarray(inputs[1])
    if data.ndim < 1 or scale.size != data.shape[0]:
        raise kernel_error(op, "SCALE must have one element per row of DATA", inputs)
    s = scale.reshape((-1,) + (1,) * (data.ndim - 1)).astype(np.float64)
    with np.errstate(all="ignore"):
        div = np.where(s == 0, 1.0, np.sqrt(s))
    return [(data / div).astype(data.dtype, copy=False)]


# ``SquareRootDivide([dY, SCALE] -> [dDATA])``; SCALE gets no gradient.
square_root_divide_grad = template("SquareRootDivide", [GO(0), I(1)], [0])
register_gradient("SquareRootDivide", op_schema=schema(2, 1),
                   doc="Row i of DATA divided by √SCALE[i]")(square_root_divide_grad)


# --- BatchMoments ---------------------------------------------------------------------------
# Per channel c over N and the spatial dims: mu_c = E[X], var_c = E[X²] (Caffe2's "var" is
# the raw second moment, not the variance);  dX = (dmu_c + 2·X·dvar_c) / (N·HxW)


def _batch_axes(op: OperatorDef, x: Array) -> tuple[tuple[int, ...], int]:
    """The reduced axes and the channel axis of a BatchMoments input (arg ``order``)."""
    if x.ndim < 2:
        raise kernel_error(op, "expects at least 2 dims (N, C, ...)", [x])
    order = get_order(op)
    c = 1 if order == "NCHW" else x.ndim - 1
    return tuple(i for i in range(x.ndim) if i != c), c


@register_kernel("BatchMoments")
def batch_moments(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X (N, C, ...) or (N, ..., C)] -> [mu (C), var (C)]``, var = E[X²] (arg ``order``)."""
    expect_inputs(op, inputs, 1)
    x = np.asarray(inputs[0])
    axes, _c = _batch_axes(op, x)
    return [x.mean(axis=axes), (x * x).mean(axis=axes)]


@register_gradient("BatchMoments", op_schema=schema(1, 2, False), doc="Per-channel E[X] and E[X²]")
def batch_moments_grad(m: GradientMaker) -> list[OperatorDef]:
    """``BatchMomentsGradient([dmu, dvar, X] -> [dX])``, args copied; a missing output
    gradient is zero-filled first (corrected behaviour, as for Moments)."""
    ops: list[OperatorDef] = []
    gos: list[str] = []
    for k in range(2):
        if m.has_go(k):
            gos.append(m.GO(k))
        else:
            zero = "_" + m.O(k) + "_grad_autogen_zero"
            ops.append(m.make_op("ConstantFill", [m.O(k)], [zero], [make_arg("value", 0.0)]))
            gos.append(zero)
    ops.append(m.make_op("BatchMomentsGradient", [gos[0], gos[1], m.I(0)], [m.GI(0)]))
    return ops


@register_kernel("BatchMomentsGradient", gradient_op=True)
def batch_moments_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[dmu, dvar, X] -> [dX]``."""
    expect_inputs(op, inputs, 3)
    dmu, dvar, x = (np.asarray(v) for v in inputs)
    axes, c = _batch_axes(op, x)
    if dmu.shape != (x.shape[c],) or dvar.shape != (x.shape[c],):
        raise kernel_error(op, f"dmu and dvar must have shape [{x.shape[c]}]", inputs)
    shape = [1] * x.ndim
    shape[c] = x.shape[c]
    n = max(int(np.prod([x.shape[a] for a in axes], dtype=np.int64)), 1)
    dx = (dmu.reshape(shape) + 2 * x * dvar.reshape(shape)) / n
    return [dx.astype(dmu.dtype, copy=False)]
