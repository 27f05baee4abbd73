"""Neural-network layers: FC, Conv, ConvTranspose, pooling, SpatialBN, LRN, Softmax, Dropout.

Each op is one paragraph: forward NumPy kernel, gradient maker (Caffe2 signature, spec §5.1 and
§5.4) and the gradient op's kernel, with the maths in comments. Layout ops NCHW2NHWC/NHWC2NCHW
live here too. Kernels keep the input dtype and never mutate their inputs; bad shapes or
arguments raise :class:`core.errors.ExecutionError`.

Sliding-window ops (Conv, ConvTranspose, pooling) share three N-d primitives built on
"window tensors" ``cols[n, c, k..., o...] = Xpad[n, c, o*stride + k*dilation]`` (one strided
slice per kernel offset, no loop over pixels): :func:`_conv_forward`, :func:`_conv_grad_input`
(the adjoint, scatter-add of windows) and :func:`_conv_grad_weight`.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from api_schemas import caffe2_pb2
from core.errors import ExecutionError, GradientError
from core.ops._args import (
    ConvPoolGeometry,
    check_numel,
    conv_pool_geometry,
    flatten_2d,
    get_bool,
    get_float,
    get_int,
    get_ints,
    get_order,
)
from core.ops._args import (
    kernel_error as _fail,
)
from core.registry import (
    GradientMaker,
    make_arg,
    register_gradient,
    register_identity,
    register_kernel,
    schema,
)
from core.template import GO, I, O, template

OperatorDef = caffe2_pb2.OperatorDef



def _canonical_axis(op: OperatorDef, axis: int, ndim: int) -> int:
    """Caffe2 ``canonical_axis_index``: a negative axis counts from the end."""
    a = axis + ndim if axis < 0 else axis
    if not 0 <= a < max(ndim, 1):
        raise ExecutionError(f"{op.type}: axis {axis} out of range for a {ndim}-D input")
    return a


def _to_nchw(x: np.ndarray, order: str) -> np.ndarray:
    """NHWC → NCHW (channel axis moved from last to 1); NCHW unchanged."""
    return np.moveaxis(x, -1, 1) if order == "NHWC" else x


def _from_nchw(x: np.ndarray, order: str) -> np.ndarray:
    """NCHW → the op's storage order."""
    return np.moveaxis(x, 1, -1) if order == "NHWC" else x


# ---------------------------------------------------------------------------------------------
# FC / FCTransposed (spec §5.1)
# X2 = X as M×K (split at `axis`), W2 = W as N×K (FC) or K×N (FCTransposed, split at `axis_w`).
# Y = X2·W2ᵀ + b (FC), Y = X2·W2 + b (FCTransposed); shape X.shape[:axis] + [N].
# Grad FCGradient([X, W, dY] → [dW, db, dX]) — note the output order:
#   dW2 = dY2ᵀ·X2 (FC) or X2ᵀ·dY2 (transposed), db = Σ_rows dY2, dX2 = dY2·W2 (or dY2·W2ᵀ).
# ---------------------------------------------------------------------------------------------


def _fc_operands(
    op: OperatorDef, inputs: Sequence[np.ndarray], transposed: bool
) -> tuple[np.ndarray, np.ndarray, int]:
    """Return ``(X2, W2 as K×N, axis)`` for FC-family kernels, validating shapes."""
    x, w = inputs[0], inputs[1]
    axis = _canonical_axis(op, get_int(op, "axis", 1), x.ndim)
    axis_w = _canonical_axis(op, get_int(op, "axis_w", 1), w.ndim)
    x2 = flatten_2d(x, axis)
    w2 = flatten_2d(w, axis_w)
    w_kn = w2 if transposed else w2.T
    if x2.shape[1] != w_kn.shape[0]:
        raise _fail(op, inputs, f"X has K={x2.shape[1]} columns but W has K={w_kn.shape[0]}")
    return x2, w_kn, axis


def _fc_forward(op: OperatorDef, inputs: list[np.ndarray], transposed: bool) -> list[np.ndarray]:
    if len(inputs) != 3:
        raise _fail(op, inputs, "expects inputs [X, W, b]")
    x2, w_kn, axis = _fc_operands(op, inputs, transposed)
    b = inputs[2]
    if b.size != w_kn.shape[1]:
        raise _fail(op, inputs, f"bias has {b.size} elements, expected N={w_kn.shape[1]}")
    y = x2 @ w_kn + b.reshape(1, -1).astype(x2.dtype, copy=False)
    return [y.reshape(inputs[0].shape[:axis] + (w_kn.shape[1],)).astype(inputs[0].dtype)]


def _fc_backward(op: OperatorDef, inputs: list[np.ndarray], transposed: bool) -> list[np.ndarray]:
    if len(inputs) != 3:
        raise _fail(op, inputs, "expects inputs [X, W, dY]")
    x, w, dy = inputs
    x2, w_kn, _ = _fc_operands(op, [x, w], transposed)
    dy2 = dy.reshape(x2.shape[0], w_kn.shape[1])
    dw_kn = x2.T @ dy2  # dW2 (K×N) = X2ᵀ·dY2
    dw = (dw_kn if transposed else dw_kn.T).reshape(w.shape).astype(w.dtype)
    db = dy2.sum(axis=0).astype(dy.dtype)
    outs = [dw, db]
    if len(op.output) >= 3:
        outs.append((dy2 @ w_kn.T).reshape(x.shape).astype(x.dtype))  # dX2 = dY2·W2
    return outs


@register_kernel("FC")
def fc(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """FC forward: ``Y = X2·W2ᵀ + b`` (spec §5.1). Shapes: X (..., K), W (N, K), b (N,).

    Raises:
        ExecutionError: wrong arity or mismatched K / N.
    """
    return _fc_forward(op, inputs, transposed=False)


@register_kernel("FCTransposed")
def fc_transposed(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """FCTransposed forward: ``Y = X2·W2 + b`` with W stored K×N (spec §5.1)."""
    return _fc_forward(op, inputs, transposed=True)


_fc_grad = template("{type}Gradient", [I(0), I(1), GO(0)], [1, 2, 0])


register_gradient("FC", op_schema=schema(3, 1, inplace=False), doc="fully connected layer")(
    _fc_grad
)
register_gradient(
    "FCTransposed", op_schema=schema(3, 1, inplace=False), doc="FC with W stored K×N"
)(_fc_grad)


@register_kernel("FCGradient", gradient_op=True)
def fc_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """FCGradient([X, W, dY] → [dW, db(, dX)]): ``dW = dY2ᵀ·X2``, ``db = ΣdY2``, ``dX = dY2·W2``.

    Raises:
        ExecutionError: wrong arity or shapes.
    """
    return _fc_backward(op, inputs, transposed=False)


@register_kernel("FCTransposedGradient", gradient_op=True)
def fc_transposed_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """FCTransposedGradient([X, W, dY] → [dW, db(, dX)]): ``dW = X2ᵀ·dY2``, ``dX = dY2·W2ᵀ``."""
    return _fc_backward(op, inputs, transposed=True)


# ---------------------------------------------------------------------------------------------
# Sliding-window primitives (NCHW internally, any number of spatial dims).
# ---------------------------------------------------------------------------------------------


#: Names the padded copy of a kernel's input in size refusals (the executor adds the op).
_PAD_OP = caffe2_pb2.OperatorDef(type="padded input")
#: Names the sliding-window tensor (N, C, *kernel, *output) in size refusals.
_WINDOWS_OP = caffe2_pb2.OperatorDef(type="sliding windows")


def _pad(x: np.ndarray, geo: ConvPoolGeometry, value: float) -> np.ndarray:
    """Pad the spatial dims of an (N, C, *S) array with ``geo``'s head/tail pads.

    Raises:
        LimitExceededError: the padded array would pass the element cap (checked first).
    """
    widths = [(0, 0), (0, 0)] + list(zip(geo.pad_head, geo.pad_tail, strict=True))
    check_numel([*x.shape[:2], *(n + a + b for n, (a, b) in zip(x.shape[2:], widths[2:],
                                                                    strict=True))], _PAD_OP)
    return np.pad(x, widths, mode="constant", constant_values=value)


def _window_slices(geo: ConvPoolGeometry, k: tuple[int, ...]) -> tuple[slice, ...]:
    """Index of kernel offset ``k`` for every output position: ``o*stride + k*dilation``."""
    return (slice(None), slice(None)) + tuple(
        slice(k[d] * geo.dilation[d], k[d] * geo.dilation[d] + (o - 1) * s + 1, s)
        for d, (o, s) in enumerate(zip(geo.out_size, geo.stride, strict=True))
    )


def _windows(xp: np.ndarray, geo: ConvPoolGeometry) -> np.ndarray:
    """Window tensor ``cols[n, c, k..., o...]`` of a padded (N, C, *Sp) array.

    Raises:
        LimitExceededError: the window tensor would pass the element cap (checked first).
    """
    check_numel(xp.shape[:2] + geo.kernel + geo.out_size, _WINDOWS_OP)
    cols = np.empty(xp.shape[:2] + geo.kernel + geo.out_size, dtype=xp.dtype)
    for k in np.ndindex(*geo.kernel):
        cols[(slice(None), slice(None)) + k] = xp[_window_slices(geo, k)]
    return cols


def _unwindow(cols: np.ndarray, geo: ConvPoolGeometry) -> np.ndarray:
    """Adjoint of :func:`_windows` followed by cropping the pads: scatter-add into (N, C, *S)."""
    padded = tuple(
        n + h + t for n, h, t in zip(geo.in_size, geo.pad_head, geo.pad_tail, strict=True)
    )
    check_numel(cols.shape[:2] + padded, _PAD_OP)
    xp = np.zeros(cols.shape[:2] + padded, dtype=cols.dtype)
    for k in np.ndindex(*geo.kernel):
        xp[_window_slices(geo, k)] += cols[(slice(None), slice(None)) + k]
    crop = tuple(slice(h, h + n) for h, n in zip(geo.pad_head, geo.in_size, strict=True))
    return xp[(slice(None), slice(None)) + crop]


def _conv_forward(x: np.ndarray, w: np.ndarray, geo: ConvPoolGeometry, group: int) -> np.ndarray:
    """``Y[n, g·M/G+m, o] = Σ_{c,k} W[g·M/G+m, c, k] · Xpad[n, g·C/G+c, o·s + k·d]`` (NCHW)."""
    n, c = x.shape[:2]
    mo = w.shape[0]
    kp = int(np.prod(geo.kernel))
    op_ = int(np.prod(geo.out_size))
    cols = _windows(_pad(x, geo, 0.0), geo).reshape(n, group, c // group, kp, op_)
    wg = w.reshape(group, mo // group, c // group, kp)
    y = np.einsum("ngckp,gmck->ngmp", cols, wg, optimize=True)
    return y.reshape((n, mo) + geo.out_size)


def _conv_grad_weight(
    x: np.ndarray, dy: np.ndarray, geo: ConvPoolGeometry, group: int, w_shape: tuple[int, ...]
) -> np.ndarray:
    """``dW[m, c, k] = Σ_{n,o} dY[n, m, o] · Xpad[n, c, o·s + k·d]`` (per group)."""
    n, c = x.shape[:2]
    mo = dy.shape[1]
    kp = int(np.prod(geo.kernel))
    op_ = int(np.prod(geo.out_size))
    cols = _windows(_pad(x, geo, 0.0), geo).reshape(n, group, c // group, kp, op_)
    dyg = dy.reshape(n, group, mo // group, op_)
    dw = np.einsum("ngmp,ngckp->gmck", dyg, cols, optimize=True)
    return dw.reshape(w_shape)


def _conv_grad_input(
    dy: np.ndarray, w: np.ndarray, geo: ConvPoolGeometry, group: int, c: int
) -> np.ndarray:
    """``dX = col2im(Σ_m W[m, c, k] · dY[n, m, o])``: the adjoint of :func:`_conv_forward`."""
    n, mo = dy.shape[:2]
    kp = int(np.prod(geo.kernel))
    op_ = int(np.prod(geo.out_size))
    wg = w.reshape(group, mo // group, c // group, kp)
    dyg = dy.reshape(n, group, mo // group, op_)
    dcols = np.einsum("gmck,ngmp->ngckp", wg, dyg, optimize=True)
    return _unwindow(dcols.reshape((n, c) + geo.kernel + geo.out_size), geo)


# ---------------------------------------------------------------------------------------------
# Conv (+ Conv1D/2D/3D) (spec §5.4)
# Y = conv(X, W) + b, X (N, C, *S), W (M, C/group, *K) (NHWC: X (N, *S, C), W (M, *K, C/group)).
# Grad <Type>Gradient([X, W, dY] → [dW, db, dX]); no bias: [dW, dX] + arg no_bias=1;
# no_gradient_to_input=1 drops dX. dW = Σ dY ⊗ windows(X), db = Σ_{n,o} dY, dX = col2im(Wᵀ·dY).
# ---------------------------------------------------------------------------------------------

CONV_TYPES = ("Conv", "Conv1D", "Conv2D", "Conv3D")
_CONV_ND = {"Conv1D": 1, "Conv2D": 2, "Conv3D": 3}


def _conv_setup(
    op: OperatorDef, inputs: Sequence[np.ndarray]
) -> tuple[str, np.ndarray, np.ndarray, ConvPoolGeometry, int]:
    """Validate Conv operands; return ``(order, X_nchw, W_nchw, geometry, group)``."""
    x, w = inputs[0], inputs[1]
    order = get_order(op)
    if x.ndim < 3 or w.ndim != x.ndim:
        raise _fail(op, inputs, "X and W must have the same rank ≥ 3")
    nd = _CONV_ND.get(op.type.removesuffix("Gradient"))
    if nd is not None and x.ndim != nd + 2:
        raise _fail(op, inputs, f"expects {nd} spatial dims")
    xc, wc = _to_nchw(x, order), _to_nchw(w, order)
    group = get_int(op, "group", 1)
    c, mo = xc.shape[1], wc.shape[0]
    if group <= 0 or c % group or mo % group or wc.shape[1] * group != c:
        raise _fail(
            op,
            inputs,
            f"channels C={c}, M={mo}, W.shape[C]={wc.shape[1]} and group={group} "
            "are inconsistent (need C = group·W_C and M divisible by group)",
        )
    geo = conv_pool_geometry(op, xc.shape[2:], wc.shape[2:])
    check_numel((xc.shape[0], mo, *geo.out_size), op)  # (before any window is built)
    return order, xc, wc, geo, group


def conv(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Conv forward over any number of spatial dims, with groups, stride, pads and dilation.

    Args:
        op: Conv op; args kernel(s), stride(s), pad(s)/pad_t/l/b/r, dilation(s), group, order.
        inputs: ``[X, W]`` or ``[X, W, b]``; X (N, C, *S) (NHWC: (N, *S, C)), W (M, C/g, *K).

    Returns:
        ``[Y]`` with Y (N, M, *O).

    Raises:
        ExecutionError: wrong arity, shapes or arguments.
    """
    if len(inputs) not in (2, 3):
        raise _fail(op, inputs, "expects inputs [X, W] or [X, W, b]")
    order, xc, wc, geo, group = _conv_setup(op, inputs)
    y = _conv_forward(xc, wc, geo, group)
    if len(inputs) == 3:
        b = inputs[2]
        if b.size != wc.shape[0]:
            raise _fail(op, inputs, f"bias has {b.size} elements, expected M={wc.shape[0]}")
        y = y + b.reshape((1, -1) + (1,) * len(geo.out_size)).astype(y.dtype, copy=False)
    return [np.ascontiguousarray(_from_nchw(y, order)).astype(inputs[0].dtype)]


def conv_grad(m: GradientMaker) -> list[OperatorDef]:
    """Caffe2 GetConvGradient: ``<Type>Gradient([X, W, dY] → [dW, db, dX])`` (spec §5.4)."""
    compute_dx = not m.arg_i("no_gradient_to_input", 0)
    gtype = m.op_type + "Gradient"
    ins = [m.I(0), m.I(1), m.GO(0)]
    if len(m.input_names) == 3:
        outs = [m.GI(1), m.GI(2)] + ([m.GI(0)] if compute_dx else [])
        return [m.make_op(gtype, ins, outs)]
    outs = [m.GI(1)] + ([m.GI(0)] if compute_dx else [])
    return [m.make_op(gtype, ins, outs, _NO_BIAS)]


#: The argument of a Conv gradient without a bias (made once: ``make_op`` copies it in).
_NO_BIAS = (make_arg("no_bias", 1),)


def conv_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """<Conv>Gradient([X, W, dY] → [dW, db(, dX)]), or ``[dW(, dX)]`` with ``no_bias=1``.

    Raises:
        ExecutionError: wrong arity or shapes.
    """
    if len(inputs) != 3:
        raise _fail(op, inputs, "expects inputs [X, W, dY]")
    order, xc, wc, geo, group = _conv_setup(op, inputs)
    dy = _to_nchw(inputs[2], order)
    if dy.shape != (xc.shape[0], wc.shape[0]) + geo.out_size:
        raise _fail(op, inputs, f"dY must have shape {(xc.shape[0], wc.shape[0]) + geo.out_size}")
    dw = _from_nchw(_conv_grad_weight(xc, dy, geo, group, wc.shape), order)
    outs = [np.ascontiguousarray(dw).astype(inputs[1].dtype)]
    no_bias = get_bool(op, "no_bias", False)
    if not no_bias:
        outs.append(dy.sum(axis=(0,) + tuple(range(2, dy.ndim))).astype(inputs[2].dtype))
    if len(op.output) > len(outs):
        dx = _from_nchw(_conv_grad_input(dy, wc, geo, group, xc.shape[1]), order)
        outs.append(np.ascontiguousarray(dx).astype(inputs[0].dtype))
    return outs


for _t in CONV_TYPES:
    register_gradient(
        _t, op_schema=schema((2, 3), 1, inplace=False), doc=f"{_t}: N-d grouped convolution"
    )(conv_grad)
    register_kernel(_t)(conv)
    register_kernel(_t + "Gradient", gradient_op=True)(conv_gradient)


# ---------------------------------------------------------------------------------------------
# ConvTranspose (spec §5.4): the adjoint of Conv in X.
# X (N, C_in, *S), W (C_in, C_out/group, *K), b (C_out). O = (S−1)·stride − pad_h − pad_t + K + adj.
# Y = convᵀ(X, W) + b. Grad ConvTransposeGradient([X, W, dY] → [dW, db, dX]) (no bias: [dW, dX]
# + no_bias=1): dX = conv(dY, W), dW = Σ X ⊗ windows(dY), db = Σ dY.
# ---------------------------------------------------------------------------------------------


def _convt_setup(
    op: OperatorDef, inputs: Sequence[np.ndarray]
) -> tuple[str, np.ndarray, np.ndarray, ConvPoolGeometry, int]:
    """Validate ConvTranspose operands; return ``(order, X, W, geometry of the adjoint conv, g)``.

    The geometry describes the conv that maps Y (in_size = output size) back to X.
    """
    x, w = inputs[0], inputs[1]
    order = get_order(op)
    if x.ndim < 3 or w.ndim != x.ndim:
        raise _fail(op, inputs, "X and W must have the same rank ≥ 3")
    if get_int(op, "legacy_pad", 0) != 0:
        raise _fail(op, inputs, "legacy_pad is not supported for ConvTranspose")
    xc, wc = _to_nchw(x, order), _to_nchw(w, order)
    group = get_int(op, "group", 1)
    if group <= 0 or xc.shape[1] != wc.shape[0] or wc.shape[0] % group:
        raise _fail(op, inputs, f"X has {xc.shape[1]} channels, W {wc.shape[0]} (group {group})")
    nd = x.ndim - 2
    g0 = conv_pool_geometry(op, xc.shape[2:], wc.shape[2:])
    if any(d != 1 for d in g0.dilation):
        raise _fail(op, inputs, "dilation is not supported for ConvTranspose")
    adj = get_ints(op, "adjs")
    if not adj:
        adj = [get_int(op, "adj", 0)] * nd
    if len(adj) != nd or any(a < 0 or a >= s for a, s in zip(adj, g0.stride, strict=True)):
        raise _fail(op, inputs, f"adj {adj} must have one value per dim, each in [0, stride)")
    out = tuple(
        (n - 1) * s + k - h - t + a
        for n, s, k, h, t, a in zip(
            xc.shape[2:], g0.stride, g0.kernel, g0.pad_head, g0.pad_tail, adj, strict=True
        )
    )
    if any(o <= 0 for o in out):
        raise _fail(op, inputs, f"empty output size {out}")
    geo = ConvPoolGeometry(
        g0.kernel, g0.stride, g0.dilation, g0.pad_head, g0.pad_tail, out, tuple(xc.shape[2:])
    )
    return order, xc, wc, geo, group


@register_kernel("ConvTranspose")
def conv_transpose(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """ConvTranspose forward: ``Y = convᵀ(X, W) + b`` (the data gradient of a Conv).

    Args:
        op: args kernel(s), stride(s), pad(s), adj(s), group, order (dilation must be 1).
        inputs: ``[X, W(, b)]``; X (N, C_in, *S), W (C_in, C_out/group, *K), b (C_out,).

    Returns:
        ``[Y]`` with Y (N, C_out, *O).

    Raises:
        ExecutionError: wrong arity, shapes or unsupported arguments (legacy_pad, dilation).
    """
    if len(inputs) not in (2, 3):
        raise _fail(op, inputs, "expects inputs [X, W] or [X, W, b]")
    order, xc, wc, geo, group = _convt_setup(op, inputs)
    c_out = wc.shape[1] * group
    y = _conv_grad_input(xc, wc, geo, group, c_out)
    if len(inputs) == 3:
        b = inputs[2]
        if b.size != c_out:
            raise _fail(op, inputs, f"bias has {b.size} elements, expected {c_out}")
        y = y + b.reshape((1, -1) + (1,) * len(geo.in_size)).astype(y.dtype, copy=False)
    return [np.ascontiguousarray(_from_nchw(y, order)).astype(inputs[0].dtype)]


register_gradient(
    "ConvTranspose",
    op_schema=schema((2, 3), 1, inplace=False),
    doc="transposed convolution",
)(conv_grad)


@register_kernel("ConvTransposeGradient", gradient_op=True)
def conv_transpose_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """ConvTransposeGradient([X, W, dY] → [dW, db(, dX)]) (``[dW(, dX)]`` with ``no_bias=1``).

    Raises:
        ExecutionError: wrong arity or shapes.
    """
    if len(inputs) != 3:
        raise _fail(op, inputs, "expects inputs [X, W, dY]")
    order, xc, wc, geo, group = _convt_setup(op, inputs)
    dy = _to_nchw(inputs[2], order)
    c_out = wc.shape[1] * group
    if dy.shape != (xc.shape[0], c_out) + geo.in_size:
        raise _fail(op, inputs, f"dY must have shape {(xc.shape[0], c_out) + geo.in_size}")
    # Y = A_Wᵀ X with A_W the conv of `geo`: dW[ci, co, k] = Σ X[n, ci, o] · dYpad[n, co, o·s+k].
    dw = _from_nchw(_conv_grad_weight(dy, xc, geo, group, wc.shape), order)
    outs = [np.ascontiguousarray(dw).astype(inputs[1].dtype)]
    if not get_bool(op, "no_bias", False):
        outs.append(dy.sum(axis=(0,) + tuple(range(2, dy.ndim))).astype(inputs[2].dtype))
    if len(op.output) > len(outs):
        dx = _from_nchw(_conv_forward(dy, wc, geo, group), order)  # dX = A_W dY
        outs.append(np.ascontiguousarray(dx).astype(inputs[0].dtype))
    return outs


# ---------------------------------------------------------------------------------------------
# MaxPool / AveragePool (+1D/2D/3D) (spec §5.4)
# Output size floor((S + pads − K)/stride) + 1 (legacy_pad honoured, see core.ops._args).
# Max: Y = max over the window (pads = −∞). Grad <Type>Gradient([X, Y, dY] → [dX]):
#   dX[x] = Σ_windows dY·[X[x] == Y] (ties: every max position gets dY, as Caffe2's CPU kernel).
# Average: Y = Σ window / count, count = window size (count_include_pad=1) or the number of
#   non-pad positions (default 0, Caffe2's default). Grad: dX[x] = Σ_windows dY / count.
# ---------------------------------------------------------------------------------------------


def _pool_setup(
    op: OperatorDef, inputs: Sequence[np.ndarray]
) -> tuple[str, np.ndarray, ConvPoolGeometry]:
    x = inputs[0]
    order = get_order(op)
    if x.ndim < 3:
        raise _fail(op, inputs, "X must have rank ≥ 3 (N, C, spatial...)")
    if not np.issubdtype(x.dtype, np.floating):
        raise _fail(op, inputs, "pooling needs a floating-point input")
    base = op.type.removesuffix("Gradient")
    nd = {"1D": 1, "2D": 2, "3D": 3}.get(base[-2:])
    if nd is not None and x.ndim != nd + 2:
        raise _fail(op, inputs, f"expects {nd} spatial dims")
    xc = _to_nchw(x, order)
    geo = conv_pool_geometry(op, xc.shape[2:], pooling=True)
    check_numel((*xc.shape[:2], *geo.out_size), op)  # (before any window is built)
    return order, xc, geo


def _kernel_axes(geo: ConvPoolGeometry) -> tuple[int, ...]:
    return tuple(range(2, 2 + len(geo.kernel)))


def _expand_out(a: np.ndarray, geo: ConvPoolGeometry) -> np.ndarray:
    """(N, C, *O) → (N, C, 1..., *O) to broadcast against window tensors."""
    return a.reshape(a.shape[:2] + (1,) * len(geo.kernel) + a.shape[2:])


def _avg_count(xc: np.ndarray, geo: ConvPoolGeometry, include_pad: bool) -> np.ndarray:
    """Divisor of each average window, shaped (1, 1, *O)."""
    if include_pad:
        return np.full((1, 1) + geo.out_size, float(np.prod(geo.kernel)), dtype=xc.dtype)
    ones = np.ones((1, 1) + xc.shape[2:], dtype=xc.dtype)
    count = _windows(_pad(ones, geo, 0.0), geo).sum(axis=_kernel_axes(geo))
    return np.maximum(count, 1)


def max_pool(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """MaxPool forward: window maximum. X (N, C, *S) or NHWC → Y (N, C, *O).

    Raises:
        ExecutionError: bad rank, dtype or arguments.
    """
    order, xc, geo = _pool_setup(op, inputs)
    y = _windows(_pad(xc, geo, -np.inf), geo).max(axis=_kernel_axes(geo))
    return [np.ascontiguousarray(_from_nchw(y, order))]


def max_pool_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """MaxPoolGradient([X, Y, dY] → [dX]): dY routed to every window position equal to Y."""
    if len(inputs) != 3:
        raise _fail(op, inputs, "expects inputs [X, Y, dY]")
    order, xc, geo = _pool_setup(op, inputs)
    y, dy = _to_nchw(inputs[1], order), _to_nchw(inputs[2], order)
    if y.shape != xc.shape[:2] + geo.out_size or dy.shape != y.shape:
        raise _fail(op, inputs, f"Y and dY must have shape {xc.shape[:2] + geo.out_size}")
    cols = _windows(_pad(xc, geo, -np.inf), geo)
    dcols = (cols == _expand_out(y, geo)) * _expand_out(dy, geo)
    dx = _unwindow(dcols.astype(xc.dtype), geo)
    return [np.ascontiguousarray(_from_nchw(dx, order)).astype(inputs[0].dtype)]


def avg_pool(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """AveragePool forward: window mean (``count_include_pad`` default 0, as Caffe2).

    Raises:
        ExecutionError: bad rank, dtype or arguments.
    """
    order, xc, geo = _pool_setup(op, inputs)
    total = _windows(_pad(xc, geo, 0.0), geo).sum(axis=_kernel_axes(geo))
    y = total / _avg_count(xc, geo, get_bool(op, "count_include_pad", False))
    return [np.ascontiguousarray(_from_nchw(y, order)).astype(inputs[0].dtype)]


def avg_pool_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """AveragePoolGradient([X, Y, dY] → [dX]): ``dX[x] = Σ_windows∋x dY / count``."""
    if len(inputs) != 3:
        raise _fail(op, inputs, "expects inputs [X, Y, dY]")
    order, xc, geo = _pool_setup(op, inputs)
    dy = _to_nchw(inputs[2], order)
    if dy.shape != xc.shape[:2] + geo.out_size:
        raise _fail(op, inputs, f"dY must have shape {xc.shape[:2] + geo.out_size}")
    g = dy / _avg_count(xc, geo, get_bool(op, "count_include_pad", False))
    dcols = np.broadcast_to(_expand_out(g, geo), xc.shape[:2] + geo.kernel + geo.out_size)
    dx = _unwindow(np.ascontiguousarray(dcols, dtype=xc.dtype), geo)
    return [np.ascontiguousarray(_from_nchw(dx, order)).astype(inputs[0].dtype)]


# Caffe2 GetPoolGradient: ``<Type>Gradient([X, Y, dY] → [dX])``, args copied.
pool_grad = template("{type}Gradient", [I(0), O(0), GO(0)], [0])


for _suffix in ("", "1D", "2D", "3D"):
    for _base, _fwd, _bwd in (
        ("MaxPool", max_pool, max_pool_gradient),
        ("AveragePool", avg_pool, avg_pool_gradient),
    ):
        _t = _base + _suffix
        register_gradient(_t, op_schema=schema(1, 1, inplace=False), doc=f"{_t} pooling")(pool_grad)
        register_kernel(_t)(_fwd)
        register_kernel(_t + "Gradient", gradient_op=True)(_bwd)


# ---------------------------------------------------------------------------------------------
# SpatialBN (spec §5.4). Per channel c over (N, spatial): m = N·prod(S).
# Train: μ, σ² = batch mean/biased var, inv_std = 1/√(σ²+ε), x̂ = (X−μ)·inv_std,
#   Y = scale·x̂ + bias, running r ← momentum·r + (1−momentum)·batch; outputs
#   [Y, running_mean, running_var, saved_mean = μ, saved_inv_std].
# Test (is_test=1): Y = scale·(X − est_mean)/√(est_var+ε) + bias.
# Grad SpatialBNGradient → [dX, dscale, dbias]; inputs [X, scale, dY, saved_mean, saved_inv_std]
#   (train) or [X, scale, dY, est_mean, est_var] (is_test):
#   dbias = Σ dY, dscale = Σ dY·x̂,
#   train: dX = scale·inv_std/m·(m·dY − dbias − x̂·dscale); test: dX = scale·inv_std·dY.
# Schema (2018): X == Y in place is refused; running stats in place (3→1, 4→2) are expected.
# ---------------------------------------------------------------------------------------------


def _bn_layout(op: OperatorDef, x: np.ndarray) -> tuple[int, tuple[int, ...]]:
    """Channel axis and reduction axes of a SpatialBN input."""
    if x.ndim < 2:
        raise ExecutionError(f"{op.type}: X must have rank ≥ 2, got shape {list(x.shape)}")
    ch = x.ndim - 1 if get_order(op) == "NHWC" else 1
    return ch, tuple(a for a in range(x.ndim) if a != ch)


def _per_channel(v: np.ndarray, x: np.ndarray, ch: int) -> np.ndarray:
    """Reshape a (C,) vector to broadcast along channel axis ``ch`` of ``x``."""
    shape = [1] * x.ndim
    shape[ch] = -1
    return v.reshape(shape).astype(x.dtype, copy=False)


def _check_channel_vectors(
    op: OperatorDef, inputs: Sequence[np.ndarray], idx: Sequence[int], c: int
) -> None:
    for i in idx:
        if inputs[i].size != c:
            raise _fail(op, inputs, f"input {i} must have C={c} elements")


@register_kernel("SpatialBN")
def spatial_bn(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """SpatialBN forward, training (5 outputs) or is_test (1 output), spec §5.4.

    Args:
        op: args epsilon (1e-5), momentum (0.9), order, is_test (0).
        inputs: ``[X, scale, bias, mean, var]``; X (N, C, *S) or NHWC, the rest (C,).

    Returns:
        ``[Y]`` (is_test) or ``[Y, running_mean, running_var, saved_mean, saved_inv_std]``.
        An empty batch (N = 0) leaves the running statistics unchanged and saves zeros (its
        mean and variance are undefined; NumPy's were NaN).

    Raises:
        ExecutionError: wrong arity or shapes; ``num_batches`` > 1 is not supported.
    """
    if len(inputs) != 5:
        raise _fail(op, inputs, "expects inputs [X, scale, bias, mean, var]")
    if get_int(op, "num_batches", 1) != 1:
        raise _fail(op, inputs, "num_batches > 1 is not supported by this kernel")
    x = inputs[0]
    ch, axes = _bn_layout(op, x)
    _check_channel_vectors(op, inputs, (1, 2, 3, 4), x.shape[ch])
    eps = get_float(op, "epsilon", 1e-5)
    scale, bias = (_per_channel(inputs[i], x, ch) for i in (1, 2))
    if get_bool(op, "is_test", False):
        mean, var = (_per_channel(inputs[i], x, ch) for i in (3, 4))
        y = scale * (x - mean) / np.sqrt(var + eps) + bias
        return [y.astype(x.dtype)]
    if len(op.output) != 5:
        raise _fail(op, inputs, f"training mode needs 5 outputs, got {len(op.output)}")
    momentum = get_float(op, "momentum", 0.9)
    if x.size == 0:  # an empty batch has no statistics: the running ones stay as they were
        zeros = np.zeros(x.shape[ch], dtype=x.dtype)
        return [np.array(x, copy=True), np.array(inputs[3], copy=True),
                np.array(inputs[4], copy=True), zeros, zeros.copy()]
    mu = x.mean(axis=axes)
    var_b = x.var(axis=axes)
    inv_std = 1.0 / np.sqrt(var_b + eps)
    y = scale * (x - _per_channel(mu, x, ch)) * _per_channel(inv_std, x, ch) + bias
    rm = momentum * inputs[3] + (1.0 - momentum) * mu.reshape(inputs[3].shape)
    rv = momentum * inputs[4] + (1.0 - momentum) * var_b.reshape(inputs[4].shape)
    return [
        y.astype(x.dtype),
        rm.astype(inputs[3].dtype),
        rv.astype(inputs[4].dtype),
        mu.astype(x.dtype),
        inv_std.astype(x.dtype),
    ]


@register_gradient(
    "SpatialBN",
    op_schema=schema((5, 7), (1, 5), inplace=[(3, 1), (4, 2), (5, 3), (6, 4)]),
    doc="spatial batch normalisation (training and is_test forms)",
)
def spatial_bn_grad(m: GradientMaker) -> list[OperatorDef]:
    """Caffe2 GetSpatialBNGradient: one SpatialBNGradient op → [dX, dscale, dbias].

    Raises:
        GradientError: the input/output counts do not match the op's mode; a running or
            saved statistics output has a gradient (it would be dropped).
    """
    m.refuse_output_gradients([1, 2, 3, 4], "running/saved statistics")
    n_in, n_out = len(m.input_names), len(m.output_names)
    if m.arg_i("is_test", 0):
        if n_in != 5 or n_out != 1:
            raise GradientError(
                f"SpatialBN with is_test=1 needs 5 inputs and 1 output for its gradient, "
                f"got {n_in} and {n_out}"
            )
        ins = [m.I(0), m.I(1), m.GO(0), m.I(3), m.I(4)]
    elif m.arg_i("num_batches", 1) > 1:
        if n_in != 7 or n_out != 5:
            raise GradientError(
                f"SpatialBN with num_batches>1 needs 7 inputs and 5 outputs, got {n_in}, {n_out}"
            )
        ins = [m.I(0), m.I(1), m.GO(0), m.O(3), m.O(4), m.GI(1), m.GI(2)]
    else:
        if n_in != 5 or n_out != 5:
            raise GradientError(
                f"SpatialBN in training mode needs 5 inputs and 5 outputs for its gradient, "
                f"got {n_in} and {n_out}"
            )
        ins = [m.I(0), m.I(1), m.GO(0), m.O(3), m.O(4)]
    return [m.make_op("SpatialBNGradient", ins, [m.GI(0), m.GI(1), m.GI(2)])]


@register_kernel("SpatialBNGradient", gradient_op=True)
def spatial_bn_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """SpatialBNGradient → [dX, dscale, dbias] (training or is_test form, see above).

    Raises:
        ExecutionError: wrong arity or shapes; the 7-input num_batches form is unsupported.
    """
    if len(inputs) != 5:
        raise _fail(op, inputs, "expects inputs [X, scale, dY, mean, inv_std|var]")
    x, scale_v, dy = inputs[0], inputs[1], inputs[2]
    ch, axes = _bn_layout(op, x)
    _check_channel_vectors(op, inputs, (1, 3, 4), x.shape[ch])
    if dy.shape != x.shape:
        raise _fail(op, inputs, "dY must have X's shape")
    mean = _per_channel(inputs[3], x, ch)
    if get_bool(op, "is_test", False):
        # Statistics are constants: inv_std from the running variance.
        inv_std = 1.0 / np.sqrt(_per_channel(inputs[4], x, ch) + get_float(op, "epsilon", 1e-5))
    else:
        inv_std = _per_channel(inputs[4], x, ch)
    scale = _per_channel(scale_v, x, ch)
    xhat = (x - mean) * inv_std
    dbias = dy.sum(axis=axes)
    dscale = (dy * xhat).sum(axis=axes)
    if get_bool(op, "is_test", False):
        dx = scale * inv_std * dy
    else:
        cnt = x.size // x.shape[ch]
        dx = (
            scale
            * inv_std
            / cnt
            * (cnt * dy - _per_channel(dbias, x, ch) - xhat * _per_channel(dscale, x, ch))
        )
    return [
        dx.astype(x.dtype),
        dscale.reshape(scale_v.shape).astype(scale_v.dtype),
        dbias.reshape(scale_v.shape).astype(scale_v.dtype),
    ]


# ---------------------------------------------------------------------------------------------
# LRN (spec §5.4), across channels: scale = bias + (alpha/size)·Σ_window X² (window of `size`
# channels centred on c, zero padded), Y = X·scale^(−beta); outputs [Y] or [Y, scale].
# Grad LRNGradient([X, Y, dY] → [dX]) (args copied; scale recomputed):
#   dX = dY·scale^(−beta) − (2·alpha·beta/size)·X·Σ_window(Y·dY/scale).
# ---------------------------------------------------------------------------------------------


def _lrn_params(op: OperatorDef, inputs: Sequence[np.ndarray]) -> tuple[int, float, float, float]:
    size = get_int(op, "size", 0)
    if size <= 0 or size % 2 == 0:
        raise _fail(op, inputs, f"argument 'size' must be a positive odd integer, got {size}")
    return size, get_float(op, "alpha", 0.0), get_float(op, "beta", 0.0), get_float(op, "bias", 1.0)


def _channel_window_sum(a: np.ndarray, size: int, ch: int) -> np.ndarray:
    """``out[c] = Σ_{|j−c| ≤ (size−1)/2} a[j]`` along axis ``ch`` (zero padded)."""
    pre = (size - 1) // 2
    widths = [(0, 0)] * a.ndim
    widths[ch] = (pre, size - 1 - pre)
    p = np.pad(a, widths)
    n = a.shape[ch]
    out = np.zeros_like(a)
    for j in range(size):
        out += np.take(p, np.arange(j, j + n), axis=ch)
    return out


def _lrn_scale(op: OperatorDef, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, int]:
    x = inputs[0]
    if x.ndim < 2:
        raise _fail(op, inputs, "X must have rank ≥ 2")
    size, alpha, _, bias = _lrn_params(op, inputs)
    ch = x.ndim - 1 if get_order(op) == "NHWC" else 1
    return bias + (alpha / size) * _channel_window_sum(x * x, size, ch), ch


@register_kernel("LRN")
def lrn(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """LRN forward: ``Y = X·scale^(−beta)``; returns ``[Y]`` or ``[Y, scale]``.

    Raises:
        ExecutionError: rank < 2 or an even/missing ``size``.
    """
    scale, _ = _lrn_scale(op, inputs)
    _, _, beta, _ = _lrn_params(op, inputs)
    y = (inputs[0] * scale ** (-beta)).astype(inputs[0].dtype)
    return [y, scale.astype(inputs[0].dtype)] if len(op.output) > 1 else [y]


@register_gradient("LRN", op_schema=schema(1, (1, 2), inplace=False), doc="local response norm")
def lrn_grad(m: GradientMaker) -> list[OperatorDef]:
    """Caffe2 GetLRNGradient: ``LRNGradient([X, Y, dY] → [dX])``.

    Raises:
        GradientError: the ``scale`` output has a gradient (it would be dropped).
    """
    m.refuse_output_gradients([1], "scale")
    return [m.make_op("LRNGradient", [m.I(0), m.O(0), m.GO(0)], [m.GI(0)])]


@register_kernel("LRNGradient", gradient_op=True)
def lrn_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """LRNGradient([X, Y, dY] → [dX]) with the scale recomputed from X."""
    if len(inputs) != 3:
        raise _fail(op, inputs, "expects inputs [X, Y, dY]")
    x, y, dy = inputs
    scale, ch = _lrn_scale(op, inputs)
    size, alpha, beta, _ = _lrn_params(op, inputs)
    dx = dy * scale ** (-beta) - (2.0 * alpha * beta / size) * x * _channel_window_sum(
        y * dy / scale, size, ch
    )
    return [dx.astype(x.dtype)]


# ---------------------------------------------------------------------------------------------
# Softmax (spec §5.1): X as N×D at `axis` (default 1), Y = exp(X − max)/Σ exp(X − max) row-wise.
# Grad SoftmaxGradient([Y, dY] → [dX]): dX = Y·(dY − Σ_row(dY·Y)).
# ---------------------------------------------------------------------------------------------


def softmax_rows(x2: np.ndarray) -> np.ndarray:
    """Row-wise numerically stable softmax of a 2-D array (empty rows stay empty)."""
    if x2.size == 0:
        return x2.copy()
    e = np.exp(x2 - x2.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@register_kernel("Softmax")
def softmax(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Softmax over the dims from ``axis`` on (flattened), keeping X's shape and dtype."""
    x = inputs[0]
    axis = _canonical_axis(op, get_int(op, "axis", 1), x.ndim)
    return [softmax_rows(flatten_2d(x, axis)).reshape(x.shape).astype(x.dtype)]


# ``SoftmaxGradient([Y, dY] → [dX])``.
softmax_grad = register_gradient("Softmax", op_schema=schema(1, 1, inplace=False), doc="softmax")(
    template("SoftmaxGradient", [O(0), GO(0)], [0])
)


@register_kernel("SoftmaxGradient", gradient_op=True)
def softmax_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """SoftmaxGradient([Y, dY] → [dX]): ``dX = Y·(dY − Σ_row dY·Y)``."""
    if len(inputs) != 2 or inputs[0].shape != inputs[1].shape:
        raise _fail(op, inputs, "expects inputs [Y, dY] of the same shape")
    y, dy = inputs
    axis = _canonical_axis(op, get_int(op, "axis", 1), y.ndim)
    y2, dy2 = flatten_2d(y, axis), flatten_2d(dy, axis)
    dx = y2 * (dy2 - (dy2 * y2).sum(axis=1, keepdims=True))
    return [dx.reshape(y.shape).astype(y.dtype)]


# ---------------------------------------------------------------------------------------------
# Dropout (spec §5.4): outputs [Y, mask]; args ratio (0.5), is_test (0).
# Train: keep ~ Bernoulli(1 − ratio), Y = X·keep/(1 − ratio), mask = keep (bool).
#   Determinism: the mask comes from numpy's default_rng seeded by the op's `seed` arg, else its
#   device_option.random_seed, else CRC32 of "inputs->outputs" — so re-running the same op
#   (finite differences) draws the same mask.
# Test: Y = X. Grad DropoutGrad([dY, mask] → [dX]) = dY·mask/(1 − ratio) (train) or
#   DropoutGrad([dY] → [dX]) = dY (is_test).
# ---------------------------------------------------------------------------------------------


def _dropout_ratio(op: OperatorDef) -> float:
    ratio = get_float(op, "ratio", 0.5)
    if not 0.0 <= ratio < 1.0:
        raise ExecutionError(f"{op.type}: ratio must be in [0, 1), got {ratio}")
    return ratio


def dropout_seed(op: OperatorDef) -> int:
    """Seed of a training Dropout's mask (see the paragraph comment above)."""
    seed = get_int(op, "seed", -1)
    if seed >= 0:
        return seed
    if op.HasField("device_option") and op.device_option.HasField("random_seed"):
        return int(op.device_option.random_seed)
    key = "|".join(op.input) + "->" + "|".join(op.output)
    return zlib.crc32(key.encode("utf-8"))


@register_kernel("Dropout")
def dropout(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Dropout forward: ``[Y, mask]`` (mask bool, X's shape); identity when ``is_test``.

    Raises:
        ExecutionError: ratio outside [0, 1).
    """
    x = inputs[0]
    ratio = _dropout_ratio(op)
    if get_bool(op, "is_test", False):
        return [x.copy(), np.ones(x.shape, dtype=bool)]
    keep = np.random.default_rng(dropout_seed(op)).random(x.shape) >= ratio
    y = x * keep * (1.0 / (1.0 - ratio))
    return [y.astype(x.dtype), keep]


register_identity("Dropout", lambda op: get_bool(op, "is_test", False))


@register_gradient("Dropout", op_schema=schema(1, (1, 2), inplace=[(0, 0)]), doc="dropout")
def dropout_grad(m: GradientMaker) -> list[OperatorDef]:
    """Caffe2 GetDropoutGradient: ``DropoutGrad([dY(, mask)] → [dX])``.

    Raises:
        GradientError: a training Dropout without its mask output.
    """
    if m.arg_i("is_test", 0):
        return [m.make_op("DropoutGrad", [m.GO(0)], [m.GI(0)])]
    if len(m.op.output) < 2:
        raise GradientError("Dropout in training mode needs its mask output for the gradient")
    return [m.make_op("DropoutGrad", [m.GO(0), m.O(1)], [m.GI(0)])]


@register_kernel("DropoutGrad", gradient_op=True)
def dropout_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """DropoutGrad: ``dX = dY·mask/(1 − ratio)`` (training) or ``dX = dY`` (is_test)."""
    dy = inputs[0]
    if get_bool(op, "is_test", False) or len(inputs) == 1:
        return [dy.copy()]
    mask = inputs[1]
    if mask.shape != dy.shape:
        raise _fail(op, inputs, "mask must have dY's shape")
    return [(dy * mask.astype(bool) * (1.0 / (1.0 - _dropout_ratio(op)))).astype(dy.dtype)]


# ---------------------------------------------------------------------------------------------
# NCHW2NHWC / NHWC2NCHW: layout transposes (channel axis 1 ↔ last); each is the other's
# gradient: NCHW2NHWC → NHWC2NCHW([dY] → [dX]) and vice versa.
# ---------------------------------------------------------------------------------------------


@register_kernel("NCHW2NHWC")
def nchw2nhwc(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """(N, C, *S) → (N, *S, C)."""
    if inputs[0].ndim < 3:
        raise _fail(op, inputs, "X must have rank ≥ 3")
    return [np.ascontiguousarray(np.moveaxis(inputs[0], 1, -1))]


@register_kernel("NHWC2NCHW")
def nhwc2nchw(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """(N, *S, C) → (N, C, *S)."""
    if inputs[0].ndim < 3:
        raise _fail(op, inputs, "X must have rank ≥ 3")
    return [np.ascontiguousarray(np.moveaxis(inputs[0], -1, 1))]


# ``NHWC2NCHW([dY] → [dX])``.
nchw2nhwc_grad = template("NHWC2NCHW", [GO(0)], [0])
register_gradient("NCHW2NHWC", op_schema=schema(1, 1, inplace=False), doc="layout NCHW→NHWC")(
    nchw2nhwc_grad
)


# ``NCHW2NHWC([dY] → [dX])``.
nhwc2nchw_grad = template("NCHW2NHWC", [GO(0)], [0])
register_gradient("NHWC2NCHW", op_schema=schema(1, 1, inplace=False), doc="layout NHWC→NCHW")(
    nhwc2nchw_grad
)
