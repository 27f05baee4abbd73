"""Normalisation layers: LayerNorm, GroupNorm, InstanceNorm, RMSNorm, AffineChannel.

Each op is one paragraph: forward NumPy kernel, Caffe2 gradient maker (gradient-op type,
inputs and outputs as in Caffe2's ``layer_norm_op.cc``, ``group_norm_op.cc``,
``instance_norm_gradient_op.cc``, ``rms_norm_op.cc`` and ``affine_channel_op.cc``; spec
§5.4) and the gradient op's kernel, with the maths in comments. Forward arguments are copied
to the gradient ops, so gradient kernels read ``axis``/``epsilon``/``order`` themselves.
Statistics outputs (mean, std, rstd) get no gradient in Caffe2: their makers read ``GO(0)``
only, and a gradient reaching them is reported as a ``dropped_output_gradient`` warning.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from api_schemas import caffe2_pb2
from core.errors import GradientError
from core.ops._args import get_bool, get_float, get_int, get_order
from core.ops._args import kernel_error as _fail
from core.registry import GradientMaker, register_gradient, register_kernel, schema

OperatorDef = caffe2_pb2.OperatorDef


def _arity(op: OperatorDef, inputs: Sequence[np.ndarray], lo: int, hi: int, what: str) -> None:
    if not lo <= len(inputs) <= hi:
        raise _fail(op, inputs, f"expects inputs [{what}]")


def _rows(op: OperatorDef, inputs: Sequence[np.ndarray], x: np.ndarray) -> tuple[int, int, int]:
    """``(axis, M rows, N cols)`` of X split at the canonical ``axis`` (default 1)."""
    axis = get_int(op, "axis", 1)
    a = axis + x.ndim if axis < 0 else axis
    if not 0 <= a < max(x.ndim, 1):
        raise _fail(op, inputs, f"axis {axis} out of range for a {x.ndim}-D X")
    m = int(np.prod(x.shape[:a], dtype=np.int64))
    return a, m, int(np.prod(x.shape[a:], dtype=np.int64))  # (not size // m: m may be 0)


def _norm_backward(dy_g: np.ndarray, xhat: np.ndarray, rstd: np.ndarray) -> np.ndarray:
    """dX of ``x̂ = (x − μ)·rstd`` per row, given ``dL/dx̂`` (rows are the normalised groups):
    ``dX = rstd·(g − mean(g) − x̂·mean(g·x̂))``."""
    return rstd * (dy_g - dy_g.mean(1, keepdims=True) - xhat * (dy_g * xhat).mean(1, keepdims=True))


# ---------------------------------------------------------------------------------------------
# LayerNorm: in [X] or [X, gamma, beta] (elementwise_affine), out [Y, mean, std]; args axis (1),
# epsilon (1e-5), elementwise_affine (0). Rows = prod(dims[:axis]); mean and std have shape
# dims[:axis] + [1]; std = √(var + ε); Y = (X − mean)/std (· gamma + beta, gamma of shape
# dims[axis:]).
# Grad LayerNormGradient([dY, Y, mean, std, X(, gamma)] → [dX(, dgamma, dbeta)]):
#   g = dY·gamma, x̂ = (X − mean)/std: dX = (g − mean(g) − x̂·mean(g·x̂))/std,
#   dgamma = Σ_rows dY·x̂, dbeta = Σ_rows dY.
# ---------------------------------------------------------------------------------------------


@register_kernel("LayerNorm")
def layer_norm(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """LayerNorm forward → ``[Y (X's shape), mean, std (dims[:axis] + [1])]``.

    Raises:
        ExecutionError: wrong arity, axis out of range, gamma/beta of the wrong size.
    """
    _arity(op, inputs, 1, 3, "X(, gamma, beta)")
    x = inputs[0]
    if x.ndim < 2:
        raise _fail(op, inputs, "LayerNorm requires X of rank ≥ 2")
    a, m, n = _rows(op, inputs, x)
    x2 = x.reshape(m, n).astype(np.float64)
    eps = get_float(op, "epsilon", 1e-5)
    mean = x2.mean(1, keepdims=True)
    std = np.sqrt(x2.var(1, keepdims=True) + eps)
    y = (x2 - mean) / std
    if len(inputs) == 2:
        raise _fail(op, inputs, "expects inputs [X] or [X, gamma, beta]")
    # (Caffe2 reads gamma and beta only with elementwise_affine set, and ignores them
    # otherwise; the gradient maker decides by the same argument: review, stop 34)
    if get_bool(op, "elementwise_affine", False):
        if len(inputs) != 3:
            raise _fail(op, inputs, "elementwise_affine=1 needs inputs [X, gamma, beta]")
        g, b = inputs[1], inputs[2]
        if g.size != n or b.size != n:
            raise _fail(op, inputs, f"gamma and beta must have {n} elements")
        y = y * g.reshape(1, n) + b.reshape(1, n)
    stat_shape = x.shape[:a] + (1,)
    return [
        y.reshape(x.shape).astype(x.dtype),
        mean.reshape(stat_shape).astype(x.dtype),
        std.reshape(stat_shape).astype(x.dtype),
    ]


@register_gradient(
    "LayerNorm", op_schema=schema((1, 3), 3, inplace=False), doc="layer normalisation"
)
def layer_norm_grad(m: GradientMaker) -> list[OperatorDef]:
    """``LayerNormGradient([dY, Y, mean, std, X(, gamma)] → [dX(, dgamma, dbeta)])``.

    The affine form is chosen by the ``elementwise_affine`` argument, as in Caffe2.

    Raises:
        GradientError: ``elementwise_affine`` set but gamma/beta not given; the mean or std
            output has a gradient (it would be dropped).
    """
    m.refuse_output_gradients([1, 2], "mean/std")
    ins = [m.GO(0), m.O(0), m.O(1), m.O(2), m.I(0)]
    if m.arg_i("elementwise_affine", 0):
        if len(m.input_names) != 3:
            raise GradientError("LayerNorm with elementwise_affine=1 needs inputs [X, gamma, beta]")
        return [m.make_op("LayerNormGradient", ins + [m.I(1)], [m.GI(0), m.GI(1), m.GI(2)])]
    if len(m.input_names) == 3:
        m.warn_no_gradient([1, 2], "elementwise_affine is not set, so LayerNorm ignores gamma "
                           "and beta (as Caffe2 does); set elementwise_affine: 1 to apply them",
                           severity="warning")
    return [m.make_op("LayerNormGradient", ins, [m.GI(0)])]


@register_kernel("LayerNormGradient", gradient_op=True)
def layer_norm_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """LayerNormGradient kernel (see the paragraph above)."""
    _arity(op, inputs, 5, 6, "dY, Y, mean, std, X(, gamma)")
    dy, _, mean, std, x = inputs[:5]
    a, m, n = _rows(op, inputs, x)
    if dy.shape != x.shape or mean.size != m or std.size != m:
        raise _fail(op, inputs, "dY must have X's shape and mean/std one value per row")
    x2, dy2 = x.reshape(m, n).astype(np.float64), dy.reshape(m, n).astype(np.float64)
    mu, sd = mean.reshape(m, 1).astype(np.float64), std.reshape(m, 1).astype(np.float64)
    xhat = (x2 - mu) / sd
    if len(inputs) == 6:
        gamma = inputs[5].reshape(1, n).astype(np.float64)
        dx = _norm_backward(dy2 * gamma, xhat, 1.0 / sd)
        dgamma = (dy2 * xhat).sum(0).reshape(inputs[5].shape)
        dbeta = dy2.sum(0).reshape(inputs[5].shape)
        return [
            dx.reshape(x.shape).astype(x.dtype),
            dgamma.astype(inputs[5].dtype),
            dbeta.astype(inputs[5].dtype),
        ]
    return [_norm_backward(dy2, xhat, 1.0 / sd).reshape(x.shape).astype(x.dtype)]


# ---------------------------------------------------------------------------------------------
# GroupNorm: in [X (N, C, *S) (NCHW) or (N, *S, C) (NHWC), gamma (C), beta (C)], out
# [Y, mean (N, G), rstd (N, G)]; args group (32; Caffe2 reads `group`), epsilon (1e-5), order.
# Channels are split into G groups of D = C/G; per (n, g): rstd = 1/√(var + ε),
#   Y = gamma_c·(X − mean)·rstd + beta_c.
# Grad GroupNormGradient([dY, X, gamma, beta, mean, rstd] → [dX, dgamma, dbeta]), the same
# per-group formula as LayerNorm with g = dY·gamma_c. InstanceNorm is GroupNorm with G = C.
# ---------------------------------------------------------------------------------------------


def _groups(
    op: OperatorDef, inputs: Sequence[np.ndarray], x: np.ndarray, g: int
) -> tuple[np.ndarray, int, int]:
    """X as ``(N, G, D·HW)`` (channel-major within a group) plus ``(C, HW)``."""
    if x.ndim < 2:
        raise _fail(op, inputs, "X must be at least 2-D (N, C, ...)")
    xc = np.moveaxis(x, -1, 1) if get_order(op) == "NHWC" else x
    n, c = xc.shape[0], xc.shape[1]
    if g <= 0 or c % g:
        raise _fail(op, inputs, f"C = {c} is not divisible by the group count {g}")
    hw = int(np.prod(xc.shape[2:], dtype=np.int64))
    return xc.reshape(n, g, (c // g) * hw).astype(np.float64), c, hw


def _ungroup(op: OperatorDef, a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Inverse of :func:`_groups`: back to X's shape and storage order."""
    if get_order(op) == "NHWC":
        xc_shape = (x.shape[0], x.shape[-1]) + x.shape[1:-1]
        return np.moveaxis(a.reshape(xc_shape), 1, -1)
    return a.reshape(x.shape)


def _per_channel(v: np.ndarray, n: int, g: int, c: int, hw: int) -> np.ndarray:
    """A (C,) vector broadcast to the grouped layout ``(N, G, D·HW)``."""
    return np.broadcast_to(
        np.repeat(v.reshape(c).astype(np.float64), hw).reshape(1, g, -1), (n, g, (c // g) * hw)
    )


def _gn_forward(
    op: OperatorDef, inputs: list[np.ndarray], g: int, eps: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x, gamma, beta = inputs[0], inputs[1], inputs[2]
    xg, c, hw = _groups(op, inputs, x, g)
    if gamma.size != c or beta.size != c:
        raise _fail(op, inputs, f"scale and bias must have C = {c} elements")
    n = xg.shape[0]
    mean = xg.mean(2)
    rstd = 1.0 / np.sqrt(xg.var(2) + eps)
    xhat = (xg - mean[..., None]) * rstd[..., None]
    y = xhat * _per_channel(gamma, n, g, c, hw) + _per_channel(beta, n, g, c, hw)
    return _ungroup(op, y, x).astype(x.dtype), mean, rstd


def _gn_backward(
    op: OperatorDef,
    inputs: Sequence[np.ndarray],
    dy: np.ndarray,
    x: np.ndarray,
    gamma: np.ndarray,
    mean: np.ndarray,
    rstd: np.ndarray,
    g: int,
) -> list[np.ndarray]:
    xg, c, hw = _groups(op, inputs, x, g)
    n = xg.shape[0]
    if dy.shape != x.shape:
        raise _fail(op, inputs, "dY must have X's shape")
    if mean.size != n * g or rstd.size != n * g or gamma.size != c:
        raise _fail(op, inputs, f"mean/rstd must have {n}×{g} elements and gamma {c}")
    dyg, _, _ = _groups(op, inputs, dy, g)
    mu, rs = mean.reshape(n, g, 1).astype(np.float64), rstd.reshape(n, g, 1).astype(np.float64)
    xhat = (xg - mu) * rs
    gam = _per_channel(gamma, n, g, c, hw)
    row = xg.shape[2]  # (not -1: N may be 0)
    dx = _norm_backward((dyg * gam).reshape(n * g, row), xhat.reshape(n * g, row),
                        rs.reshape(n * g, 1))
    per_c = (dyg * xhat).reshape(n, c, hw).sum((0, 2))
    dbeta = dyg.reshape(n, c, hw).sum((0, 2))
    return [
        _ungroup(op, dx.reshape(xg.shape), x).astype(x.dtype),
        per_c.reshape(gamma.shape).astype(gamma.dtype),
        dbeta.reshape(gamma.shape).astype(gamma.dtype),
    ]


@register_kernel("GroupNorm")
def group_norm(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """GroupNorm forward → ``[Y, mean (N, G), rstd (N, G)]`` (only Y with one output).

    Raises:
        ExecutionError: wrong arity, C not divisible by ``group``, bad gamma/beta size.
    """
    _arity(op, inputs, 3, 3, "X, gamma, beta")
    g = get_int(op, "group", 32)
    y, mean, rstd = _gn_forward(op, inputs, g, get_float(op, "epsilon", 1e-5))
    dt = inputs[0].dtype
    return [y, mean.astype(dt), rstd.astype(dt)][: max(len(op.output), 1)]


@register_gradient(
    "GroupNorm", op_schema=schema(3, (1, 3), inplace=False), doc="group normalisation"
)
def group_norm_grad(m: GradientMaker) -> list[OperatorDef]:
    """``GroupNormGradient([dY, X, gamma, beta, mean, rstd] → [dX, dgamma, dbeta])``.

    Raises:
        GradientError: the forward op has only output Y (its statistics are needed); the
            mean or rstd output has a gradient (it would be dropped).
    """
    m.refuse_output_gradients([1, 2], "mean/rstd")
    if len(m.output_names) != 3:
        raise GradientError(
            "GroupNorm's gradient reads its mean and rstd outputs: give the op outputs "
            "[Y, mean, rstd]"
        )
    return [
        m.make_op(
            "GroupNormGradient",
            [m.GO(0), m.I(0), m.I(1), m.I(2), m.O(1), m.O(2)],
            [m.GI(0), m.GI(1), m.GI(2)],
        )
    ]


@register_kernel("GroupNormGradient", gradient_op=True)
def group_norm_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """GroupNormGradient kernel (see the paragraph above)."""
    _arity(op, inputs, 6, 6, "dY, X, gamma, beta, mean, rstd")
    dy, x, gamma, _, mean, rstd = inputs
    return _gn_backward(op, inputs, dy, x, gamma, mean, rstd, get_int(op, "group", 32))


# ---------------------------------------------------------------------------------------------
# InstanceNorm: in [X, scale (C), bias (C)], out [Y(, mean (N, C), inv_std (N, C))]; args
# epsilon (1e-5), order. GroupNorm with one channel per group.
# Grad InstanceNormGradient([X, scale, bias, dY(, mean(, inv_std))] → [dX, dscale, dbias]);
# the statistics the forward op did not output are recomputed by the gradient kernel.
# ---------------------------------------------------------------------------------------------


def _channels(op: OperatorDef, x: np.ndarray) -> int:
    return int(x.shape[-1] if get_order(op) == "NHWC" else x.shape[1]) if x.ndim >= 2 else 0


@register_kernel("InstanceNorm")
def instance_norm(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """InstanceNorm forward → ``[Y(, mean (N, C), inv_std (N, C))]``."""
    _arity(op, inputs, 3, 3, "X, scale, bias")
    c = _channels(op, inputs[0])
    y, mean, rstd = _gn_forward(op, inputs, c, get_float(op, "epsilon", 1e-5))
    dt = inputs[0].dtype
    return [y, mean.astype(dt), rstd.astype(dt)][: max(len(op.output), 1)]


@register_gradient(
    "InstanceNorm", op_schema=schema(3, (1, 3), inplace=False), doc="instance normalisation"
)
def instance_norm_grad(m: GradientMaker) -> list[OperatorDef]:
    """``InstanceNormGradient([X, scale, bias, dY(, mean(, inv_std))] → [dX, dscale, dbias])``.

    Raises:
        GradientError: the mean or inv_std output has a gradient (it would be dropped).
    """
    m.refuse_output_gradients([1, 2], "mean/inv_std")
    ins = [m.I(0), m.I(1), m.I(2), m.GO(0)]
    if len(m.output_names) >= 2:
        ins.append(m.O(1))
    if len(m.output_names) >= 3:
        ins.append(m.O(2))
    return [m.make_op("InstanceNormGradient", ins, [m.GI(0), m.GI(1), m.GI(2)])]


@register_kernel("InstanceNormGradient", gradient_op=True)
def instance_norm_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """InstanceNormGradient kernel; recomputes mean / inv_std when not given."""
    _arity(op, inputs, 4, 6, "X, scale, bias, dY(, mean(, inv_std))")
    x, scale, bias, dy = inputs[:4]
    c = _channels(op, x)
    eps = get_float(op, "epsilon", 1e-5)
    _, mean, rstd = _gn_forward(op, [x, scale, bias], c, eps)
    if len(inputs) >= 5:
        mean = inputs[4]
    if len(inputs) == 6:
        rstd = inputs[5]
    return _gn_backward(op, inputs, dy, x, scale, mean, rstd, c)


# ---------------------------------------------------------------------------------------------
# RMSNorm: in [X, gamma, beta] (gamma, beta of dims[axis:]), out [Y, rrms (dims[:axis])]; args
# axis (1), eps (0). Per row: rrms = 1/√(mean(X²) + eps), Y = X·rrms·gamma + beta.
# Grad RMSNormGradient([dY, X, gamma, rrms] → [dX, dgamma, dbeta]):
#   dX = rrms·dY·gamma − X·rrms³·Σ(dY·X·gamma)/N, dgamma = Σ_rows dY·X·rrms, dbeta = Σ_rows dY.
# ---------------------------------------------------------------------------------------------


@register_kernel("RMSNorm")
def rms_norm(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """RMSNorm forward → ``[Y, rrms]`` (Caffe2 ``rms_norm_op.cc``)."""
    _arity(op, inputs, 3, 3, "X, gamma, beta")
    x = inputs[0]
    if x.ndim < 2:
        raise _fail(op, inputs, "RMSNorm requires X of rank ≥ 2")
    a, m, n = _rows(op, inputs, x)
    if inputs[1].size != n or inputs[2].size != n:
        raise _fail(op, inputs, f"gamma and beta must have {n} elements")
    x2 = x.reshape(m, n).astype(np.float64)
    rrms = 1.0 / np.sqrt((x2 * x2).mean(1) + get_float(op, "eps", 0.0))
    y = x2 * rrms[:, None] * inputs[1].reshape(1, n) + inputs[2].reshape(1, n)
    return [y.reshape(x.shape).astype(x.dtype), rrms.reshape(x.shape[:a]).astype(x.dtype)]


@register_gradient("RMSNorm", op_schema=schema(3, 2, inplace=False), doc="RMS normalisation")
def rms_norm_grad(m: GradientMaker) -> list[OperatorDef]:
    """``RMSNormGradient([dY, X, gamma, rrms] → [dX, dgamma, dbeta])``.

    Raises:
        GradientError: the rrms output has a gradient (it would be dropped).
    """
    m.refuse_output_gradients([1], "rrms")
    return [
        m.make_op("RMSNormGradient", [m.GO(0), m.I(0), m.I(1), m.O(1)], [m.GI(0), m.GI(1), m.GI(2)])
    ]


@register_kernel("RMSNormGradient", gradient_op=True)
def rms_norm_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """RMSNormGradient kernel (see the paragraph above)."""
    _arity(op, inputs, 4, 4, "dY, X, gamma, rrms")
    dy, x, gamma, rrms = inputs
    _, m, n = _rows(op, inputs, x)
    if dy.shape != x.shape or gamma.size != n or rrms.size != m:
        raise _fail(op, inputs, "dY must have X's shape, gamma N and rrms M elements")
    x2, dy2 = x.reshape(m, n).astype(np.float64), dy.reshape(m, n).astype(np.float64)
    g = gamma.reshape(1, n).astype(np.float64)
    r = rrms.reshape(m, 1).astype(np.float64)
    ds = (dy2 * x2 * g).sum(1, keepdims=True)
    dx = r * dy2 * g - x2 * r**3 * ds / n
    return [
        dx.reshape(x.shape).astype(x.dtype),
        (dy2 * x2 * r).sum(0).reshape(gamma.shape).astype(gamma.dtype),
        dy2.sum(0).reshape(gamma.shape).astype(gamma.dtype),
    ]


# ---------------------------------------------------------------------------------------------
# AffineChannel: in [X (N, C, ...) or NHWC (..., C), scale (C), bias (C)], out Y; args order,
# is_learnable (0). Y = X·scale_c + bias_c; may run in place (X → Y).
# Grad AffineChannelGradient: is_learnable: [dY, X, scale] → [dX, dscale, dbias]
#   (dscale = Σ dY·X, dbias = Σ dY over all but C); otherwise [dY, scale] → [dX] (dX = dY·scale_c).
# ---------------------------------------------------------------------------------------------


def _chan_view(op: OperatorDef, v: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """A (C,) vector shaped to broadcast against ``ref`` along its channel axis."""
    if get_order(op) == "NHWC":
        return v.reshape(-1)
    return v.reshape((1, -1) + (1,) * (ref.ndim - 2))


def _check_c(op: OperatorDef, inputs: Sequence[np.ndarray], ref: np.ndarray, v: np.ndarray) -> None:
    if ref.ndim < 2 or _channels(op, ref) != v.size:
        raise _fail(op, inputs, "scale/bias must have one value per channel of X (≥ 2-D)")


@register_kernel("AffineChannel")
def affine_channel(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """AffineChannel forward: ``Y = X·scale_c + bias_c``."""
    _arity(op, inputs, 3, 3, "X, scale, bias")
    x, s, b = inputs
    _check_c(op, inputs, x, s)
    _check_c(op, inputs, x, b)
    y = x * _chan_view(op, s, x) + _chan_view(op, b, x)
    return [y.astype(x.dtype)]


@register_gradient(
    "AffineChannel",
    op_schema=schema(3, 1, inplace=[(0, 0)]),
    doc="per-channel affine transform (Detectron frozen BN)",
)
def affine_channel_grad(m: GradientMaker) -> list[OperatorDef]:
    """Caffe2 GetAffineChannelGradient (learnable or not, see the paragraph above)."""
    if m.arg_i("is_learnable", 0):
        return [
            m.make_op(
                "AffineChannelGradient", [m.GO(0), m.I(0), m.I(1)], [m.GI(0), m.GI(1), m.GI(2)]
            )
        ]
    m.warn_no_gradient([1, 2], "is_learnable is not set (a frozen affine transform, as "
                       "Caffe2 defines it); set is_learnable: 1 to train scale and bias")
    return [m.make_op("AffineChannelGradient", [m.GO(0), m.I(1)], [m.GI(0)])]


@register_kernel("AffineChannelGradient", gradient_op=True)
def affine_channel_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """AffineChannelGradient: ``dX = dY·scale_c`` (+ ``dscale``, ``dbias`` when learnable)."""
    learnable = get_bool(op, "is_learnable", False)
    if learnable:
        _arity(op, inputs, 3, 3, "dY, X, scale")
        dy, x, s = inputs
    else:
        _arity(op, inputs, 2, 2, "dY, scale")
        dy, s = inputs
        x = dy
    _check_c(op, inputs, dy, s)
    dx = (dy * _chan_view(op, s, dy)).astype(dy.dtype)
    if not learnable:
        return [dx]
    if x.shape != dy.shape:
        raise _fail(op, inputs, "X must have dY's shape")
    caxis = dy.ndim - 1 if get_order(op) == "NHWC" else 1
    axes = tuple(i for i in range(dy.ndim) if i != caxis)
    d64, x64 = dy.astype(np.float64), x.astype(np.float64)
    return [
        dx,
        (d64 * x64).sum(axes).reshape(s.shape).astype(s.dtype),
        d64.sum(axes).reshape(s.shape).astype(s.dtype),
    ]
