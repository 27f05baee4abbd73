"""Vision / detection training ops: UpsampleNearest, UpsampleBilinear, ResizeNearest3D,
BatchPermutation, GroupSpatialSoftmax, SpatialNarrowAs, SampleAs, RoIPool, RoIPoolF,
PSRoIPool.

Each op is one paragraph: forward NumPy kernel, Caffe2 gradient maker (gradient-op type,
inputs, outputs as in Caffe2's ``upsample_op.cc``, ``resize_3d_op.cc``, ``roi_pool_op.cc`` and
``modules/detectron/*``) and the gradient op's kernel, with the maths in comments. Several
of these have CUDA-only kernels upstream; the NumPy kernels follow the CUDA maths. Indices,
labels, RoIs and shape references get no gradient, as in Caffe2. Layout is NCHW.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from api_schemas import caffe2_pb2
from core.errors import GradientError
from core.ops._args import check_numel, get_float, get_int
from core.ops._args import kernel_error as _fail
from core.registry import GradientMaker, register_gradient, register_kernel, schema
from core.template import GO, I, O, template

OperatorDef = caffe2_pb2.OperatorDef


def _arity(op: OperatorDef, inputs: Sequence[np.ndarray], lo: int, hi: int, what: str) -> None:
    if not lo <= len(inputs) <= hi:
        raise _fail(op, inputs, f"expects inputs [{what}]")


def _nchw(op: OperatorDef, inputs: Sequence[np.ndarray], x: np.ndarray, nd: int = 4) -> None:
    if x.ndim != nd:
        raise _fail(op, inputs, f"X must be {nd}-D (NCHW)")


def _one_hot_map(src: np.ndarray, size: int) -> np.ndarray:
    """``R[o, i] = [src[o] = i]``: the 0/1 matrix of an index map (out → in)."""
    return (src[:, None] == np.arange(size)[None, :]).astype(np.float64)


# ---------------------------------------------------------------------------------------------
# UpsampleNearest (Detectron): X (N, C, H, W), arg scale (int, 2): Y (N, C, s·H, s·W),
# Y[.., y, x] = X[.., y // s, x // s]. Grad UpsampleNearestGradient([X, dY] → [dX]): dX sums
# dY over each s×s block.
# ---------------------------------------------------------------------------------------------


def _up_scale(op: OperatorDef, inputs: Sequence[np.ndarray]) -> int:
    s = get_int(op, "scale", 2)
    if s <= 0:
        raise _fail(op, inputs, f"scale must be positive, got {s}")
    return s


@register_kernel("UpsampleNearest")
def upsample_nearest(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """UpsampleNearest forward → ``[Y (N, C, s·H, s·W)]``."""
    _arity(op, inputs, 1, 1, "X")
    _nchw(op, inputs, inputs[0])
    s = _up_scale(op, inputs)
    n, c, h, w = inputs[0].shape
    check_numel((n, c, h * s, w * s), op)  # (before the output is built)
    return [np.repeat(np.repeat(inputs[0], s, axis=2), s, axis=3)]


# ``UpsampleNearestGradient([X, dY] → [dX])``.
upsample_nearest_grad = template("UpsampleNearestGradient", [I(0), GO(0)], [0])
register_gradient(
    "UpsampleNearest", op_schema=schema(1, 1, inplace=False), doc="integer nearest upsampling"
)(upsample_nearest_grad)


@register_kernel("UpsampleNearestGradient", gradient_op=True)
def upsample_nearest_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """UpsampleNearestGradient: sum of dY over each ``scale``×``scale`` block."""
    _arity(op, inputs, 2, 2, "X, dY")
    x, dy = inputs
    _nchw(op, inputs, x)
    s = _up_scale(op, inputs)
    n, c, h, w = x.shape
    if dy.shape != (n, c, h * s, w * s):
        raise _fail(op, inputs, f"dY must have shape {(n, c, h * s, w * s)}")
    return [dy.reshape(n, c, h, s, w, s).sum(axis=(3, 5)).astype(x.dtype)]


# ---------------------------------------------------------------------------------------------
# UpsampleBilinear: X (N, C, H, W), args height_scale / width_scale, or a second input
# scales = [height_scale, width_scale]. Output Ho = int(H·hs), Wo = int(W·ws); corner-aligned
# sampling: source row r = y·(H − 1)/(Ho − 1) (0 when Ho = 1), rows ⌊r⌋ and ⌊r⌋ + 1 (clamped)
# with weights 1 − frac, frac (same for columns). Y = Ah·X·Awᵀ per channel.
# Grad UpsampleBilinearGradient([dY, X(, scales)] → [dX]) = Ahᵀ·dY·Aw (the adjoint).
# ---------------------------------------------------------------------------------------------


def _bilinear_axis(n_in: int, n_out: int) -> np.ndarray:
    """Interpolation matrix (n_out, n_in) of one axis."""
    r = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    src = r * np.arange(n_out, dtype=np.float64)
    lo = src.astype(np.int64)
    hi = np.where(lo < n_in - 1, lo + 1, lo)
    lam = src - lo
    a = np.zeros((n_out, n_in), dtype=np.float64)
    np.add.at(a, (np.arange(n_out), lo), 1.0 - lam)
    np.add.at(a, (np.arange(n_out), hi), lam)
    return a


def _bilinear_setup(
    op: OperatorDef, inputs: Sequence[np.ndarray], x: np.ndarray, scales: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    _nchw(op, inputs, x)
    if scales is not None:
        if scales.size != 2:
            raise _fail(op, inputs, "scales must hold [height_scale, width_scale]")
        hs, ws = (float(v) for v in scales.reshape(-1))
    else:
        hs, ws = get_float(op, "height_scale", 1.0), get_float(op, "width_scale", 1.0)
    if not (math.isfinite(hs) and math.isfinite(ws) and hs > 0 and ws > 0):
        raise _fail(op, inputs, f"height/width scales must be finite and > 0, got {hs}, {ws}")
    h, w = x.shape[2:]
    ho, wo = int(h * hs), int(w * ws)
    if ho <= 0 or wo <= 0:
        raise _fail(op, inputs, f"empty output {ho}×{wo}")
    return _bilinear_axis(h, ho), _bilinear_axis(w, wo)


@register_kernel("UpsampleBilinear")
def upsample_bilinear(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """UpsampleBilinear forward → ``[Y (N, C, int(H·hs), int(W·ws))]``."""
    _arity(op, inputs, 1, 2, "X(, scales)")
    ah, aw = _bilinear_setup(op, inputs, inputs[0], inputs[1] if len(inputs) == 2 else None)
    y = np.einsum("oh,nchw,pw->ncop", ah, inputs[0].astype(np.float64), aw, optimize=True)
    return [y.astype(inputs[0].dtype)]


@register_gradient(
    "UpsampleBilinear", op_schema=schema((1, 2), 1, inplace=False), doc="bilinear upsampling"
)
def upsample_bilinear_grad(m: GradientMaker) -> list[OperatorDef]:
    """``UpsampleBilinearGradient([dY, X(, scales)] → [dX])``."""
    ins = [m.GO(0), m.I(0)] + ([m.I(1)] if len(m.input_names) == 2 else [])
    return [m.make_op("UpsampleBilinearGradient", ins, [m.GI(0)])]


@register_kernel("UpsampleBilinearGradient", gradient_op=True)
def upsample_bilinear_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """UpsampleBilinearGradient: ``dX = Ahᵀ·dY·Aw`` per channel."""
    _arity(op, inputs, 2, 3, "dY, X(, scales)")
    dy, x = inputs[0], inputs[1]
    ah, aw = _bilinear_setup(op, inputs, x, inputs[2] if len(inputs) == 3 else None)
    if dy.shape != x.shape[:2] + (ah.shape[0], aw.shape[0]):
        raise _fail(op, inputs, "dY does not have the upsampled shape")
    dx = np.einsum("oh,ncop,pw->nchw", ah, dy.astype(np.float64), aw, optimize=True)
    return [dx.astype(x.dtype)]


# ---------------------------------------------------------------------------------------------
# ResizeNearest3D: X (N, C, T, H, W), args temporal_scale, height_scale, width_scale (1.0):
# output dims int(T·ts), int(H·hs), int(W·ws); source index min(int(o / scale), size − 1)
# per axis. Grad ResizeNearest3DGradient([dY, X] → [dX]): dY summed onto its source voxels.
# ---------------------------------------------------------------------------------------------


def _resize3d_maps(
    op: OperatorDef, inputs: Sequence[np.ndarray], x: np.ndarray
) -> list[np.ndarray]:
    _nchw(op, inputs, x, 5)
    maps = []
    for size, name in zip(
        x.shape[2:], ("temporal_scale", "height_scale", "width_scale"), strict=True
    ):
        s = get_float(op, name, 1.0)
        if s <= 0:
            raise _fail(op, inputs, f"{name} must be positive")
        out = int(size * s)
        if out <= 0:
            raise _fail(op, inputs, f"{name} gives an empty output")
        src = np.minimum((np.arange(out) / s).astype(np.int64), size - 1)
        maps.append(_one_hot_map(src, size))
    return maps


@register_kernel("ResizeNearest3D")
def resize_nearest_3d(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """ResizeNearest3D forward (NCTHW)."""
    _arity(op, inputs, 1, 1, "X")
    rt, rh, rw = _resize3d_maps(op, inputs, inputs[0])
    x = inputs[0].astype(np.float64)
    y = np.einsum("at,bh,cw,nkthw->nkabc", rt, rh, rw, x, optimize=True)
    return [y.astype(inputs[0].dtype)]


# ``ResizeNearest3DGradient([dY, X] → [dX])``.
resize_nearest_3d_grad = template("ResizeNearest3DGradient", [GO(0), I(0)], [0])
register_gradient(
    "ResizeNearest3D", op_schema=schema(1, 1, inplace=False), doc="nearest 3-D resize (NCTHW)"
)(resize_nearest_3d_grad)


@register_kernel("ResizeNearest3DGradient", gradient_op=True)
def resize_nearest_3d_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """ResizeNearest3DGradient: the adjoint of the one-hot index maps."""
    _arity(op, inputs, 2, 2, "dY, X")
    dy, x = inputs
    rt, rh, rw = _resize3d_maps(op, inputs, x)
    if dy.shape != x.shape[:2] + (rt.shape[0], rh.shape[0], rw.shape[0]):
        raise _fail(op, inputs, "dY does not have the resized shape")
    dx = np.einsum("nkabc,at,bh,cw->nkthw", dy.astype(np.float64), rt, rh, rw, optimize=True)
    return [dx.astype(x.dtype)]


# ---------------------------------------------------------------------------------------------
# BatchPermutation: X (N, ...), indices (N,) ints: Y[i] = X[indices[i]].
# Grad BatchPermutationGradient([indices, dY] → [dX]): dX[indices[i]] += dY[i].
# ---------------------------------------------------------------------------------------------


def _perm(op: OperatorDef, inputs: Sequence[np.ndarray], n: int, idx: np.ndarray) -> np.ndarray:
    if not np.issubdtype(idx.dtype, np.integer) or idx.ndim != 1:
        raise _fail(op, inputs, "indices must be a 1-D integer tensor")
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise _fail(op, inputs, f"indices must lie in [0, {n})")
    return idx.astype(np.int64)


@register_kernel("BatchPermutation")
def batch_permutation(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """BatchPermutation forward: ``Y[i] = X[indices[i]]``."""
    _arity(op, inputs, 2, 2, "X, indices")
    x = inputs[0]
    if x.ndim == 0:
        raise _fail(op, inputs, "X must have a batch dim")
    idx = _perm(op, inputs, x.shape[0], inputs[1])
    if idx.size != x.shape[0]:  # Caffe2 enforces one index per batch row
        raise _fail(op, inputs, f"indices must hold one index per batch row of X "
                                f"({x.shape[0]}), got {idx.size}")
    return [x[idx]]


# ``BatchPermutationGradient([indices, dY] → [dX])``.
batch_permutation_grad = template("BatchPermutationGradient", [I(1), GO(0)], [0])
register_gradient(
    "BatchPermutation", op_schema=schema(2, 1, inplace=False), doc="reorder the batch dim"
)(batch_permutation_grad)


@register_kernel("BatchPermutationGradient", gradient_op=True)
def batch_permutation_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """BatchPermutationGradient: ``dX[indices[i]] += dY[i]`` (dX has dY's shape)."""
    _arity(op, inputs, 2, 2, "indices, dY")
    dy = inputs[1]
    if dy.ndim == 0 or dy.shape[0] != inputs[0].size:
        raise _fail(op, inputs, "dY must have one row per index")
    idx = _perm(op, inputs, dy.shape[0], inputs[0].reshape(-1))
    dx = np.zeros(dy.shape, dtype=np.float64)
    np.add.at(dx, idx, dy.astype(np.float64))
    return [dx.astype(dy.dtype)]


# ---------------------------------------------------------------------------------------------
# GroupSpatialSoftmax: X (N, A·C, H, W), arg num_classes C (81): softmax over each anchor's C
# channels at each pixel. Grad GroupSpatialSoftmaxGradient([Y, dY] → [dX]):
#   dX = Y·(dY − Σ_group dY·Y).
# ---------------------------------------------------------------------------------------------


def _grouped(op: OperatorDef, inputs: Sequence[np.ndarray], x: np.ndarray) -> np.ndarray:
    _nchw(op, inputs, x)
    c = get_int(op, "num_classes", 81)
    if c <= 0 or x.shape[1] % c:
        raise _fail(op, inputs, f"channels must be a multiple of num_classes = {c}")
    return x.astype(np.float64).reshape(x.shape[0], x.shape[1] // c, c, *x.shape[2:])


@register_kernel("GroupSpatialSoftmax")
def group_spatial_softmax(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """GroupSpatialSoftmax forward (per-anchor softmax over ``num_classes`` channels)."""
    _arity(op, inputs, 1, 1, "X")
    x5 = _grouped(op, inputs, inputs[0])
    e = np.exp(x5 - x5.max(axis=2, keepdims=True))
    return [(e / e.sum(axis=2, keepdims=True)).reshape(inputs[0].shape).astype(inputs[0].dtype)]


# ``GroupSpatialSoftmaxGradient([Y, dY] → [dX])``.
group_spatial_softmax_grad = template("GroupSpatialSoftmaxGradient", [O(0), GO(0)], [0])
register_gradient(
    "GroupSpatialSoftmax",
    op_schema=schema(1, 1, inplace=False),
    doc="RetinaNet per-anchor spatial softmax",
)(group_spatial_softmax_grad)


@register_kernel("GroupSpatialSoftmaxGradient", gradient_op=True)
def group_spatial_softmax_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """GroupSpatialSoftmaxGradient: ``dX = Y·(dY − Σ_group dY·Y)``."""
    _arity(op, inputs, 2, 2, "Y, dY")
    if inputs[0].shape != inputs[1].shape:
        raise _fail(op, inputs, "Y and dY must have the same shape")
    y5, d5 = _grouped(op, inputs, inputs[0]), _grouped(op, inputs, inputs[1])
    dx = y5 * (d5 - (d5 * y5).sum(axis=2, keepdims=True))
    return [dx.reshape(inputs[0].shape).astype(inputs[0].dtype)]


# ---------------------------------------------------------------------------------------------
# SpatialNarrowAs (Detectron): in [A (N, C, H, W), B (.., .., H', W')], Y = A[:, :, :H', :W'].
# Grad SpatialNarrowAsGradient([A, B, dY] → [dA]): dY in the top-left corner, 0 elsewhere.
# SampleAs (Detectron): in [X (N, ...), L (N,) ints], Y = X[L > 0].
# Grad SampleAsGradient([X, L, dY] → [dX]): dY scattered back to the rows with L > 0.
# ---------------------------------------------------------------------------------------------


def _narrow(op: OperatorDef, inputs: Sequence[np.ndarray]) -> tuple[int, int]:
    a, b = inputs[0], inputs[1]
    if a.ndim != 4 or b.ndim != 4 or b.shape[2] > a.shape[2] or b.shape[3] > a.shape[3]:
        raise _fail(op, inputs, "A and B must be 4-D with B spatially no larger than A")
    return b.shape[2], b.shape[3]


@register_kernel("SpatialNarrowAs")
def spatial_narrow_as(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """SpatialNarrowAs forward: crop A to B's height and width."""
    _arity(op, inputs, 2, 2, "A, B")
    h, w = _narrow(op, inputs)
    return [np.ascontiguousarray(inputs[0][:, :, :h, :w])]


# ``SpatialNarrowAsGradient([A, B, dY] → [dA])``.
spatial_narrow_as_grad = template("SpatialNarrowAsGradient", [I(0), I(1), GO(0)], [0])
register_gradient(
    "SpatialNarrowAs", op_schema=schema(2, 1, inplace=False), doc="crop A to B's spatial size"
)(spatial_narrow_as_grad)


@register_kernel("SpatialNarrowAsGradient", gradient_op=True)
def spatial_narrow_as_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """SpatialNarrowAsGradient: pad dY with zeros back to A's shape."""
    _arity(op, inputs, 3, 3, "A, B, dY")
    h, w = _narrow(op, inputs)
    a, dy = inputs[0], inputs[2]
    if dy.shape != a.shape[:2] + (h, w):
        raise _fail(op, inputs, f"dY must have shape {a.shape[:2] + (h, w)}")
    da = np.zeros(a.shape, dtype=a.dtype)
    da[:, :, :h, :w] = dy
    return [da]


def _sample_mask(op: OperatorDef, inputs: Sequence[np.ndarray]) -> np.ndarray:
    x, lab = inputs[0], inputs[1]
    if x.ndim == 0 or lab.size != x.shape[0]:
        raise _fail(op, inputs, "L must have one label per row of X")
    return lab.reshape(-1) > 0


@register_kernel("SampleAs")
def sample_as(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """SampleAs forward: the rows of X whose label is positive."""
    _arity(op, inputs, 2, 2, "X, L")
    return [inputs[0][_sample_mask(op, inputs)]]


# ``SampleAsGradient([X, L, dY] → [dX])``.
sample_as_grad = template("SampleAsGradient", [I(0), I(1), GO(0)], [0])
register_gradient("SampleAs", op_schema=schema(2, 1, inplace=False), doc="rows with label > 0")(
    sample_as_grad
)


@register_kernel("SampleAsGradient", gradient_op=True)
def sample_as_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """SampleAsGradient: scatter dY back to the selected rows."""
    _arity(op, inputs, 3, 3, "X, L, dY")
    mask = _sample_mask(op, inputs)
    x, dy = inputs[0], inputs[2]
    if dy.shape != (int(mask.sum()),) + x.shape[1:]:
        raise _fail(op, inputs, "dY must have one row per selected row of X")
    dx = np.zeros(x.shape, dtype=x.dtype)
    dx[mask] = dy
    return [dx]


# ---------------------------------------------------------------------------------------------
# RoIPool / RoIPoolF: in [X (N, C, H, W), rois (R, 5) = (batch, x1, y1, x2, y2)], out
# [Y (R, C, pooled_h, pooled_w), argmax (same shape, index h·W + w or −1)]; args spatial_scale
# (1), pooled_h / pooled_w (1). Box corners round(coord·scale) (half away from zero), size
# max(end − start + 1, 1); bin (p, q) covers rows start + ⌊p·bh⌋ .. start + ⌈(p + 1)·bh⌉
# clipped to [0, H] (same for columns); Y = the bin's max (first on ties), 0 for an empty bin.
# Grad RoIPoolGradient / RoIPoolFGradient([X, rois, argmax, dY] → [dX]): dY added at argmax.
# PSRoIPool: X (N, D·G², H, W), args group_size G, output_dim D, spatial_scale: out
# [Y (R, D, G, G), mapping_channel]; bin (p, q) of output channel d averages channel
# (d·G + p)·G + q over rows ⌊p·bh + y1⌋ .. ⌈(p + 1)·bh + y1⌉ (clipped), where y1 = round(y1)·scale,
# height max((round(y2) + 1)·scale − y1, 0.1), bh = height/G (columns alike).
# Grad PSRoIPoolGradient([X, rois, mapping_channel, dY] → [dX]): dY/area spread over the bin.
# ---------------------------------------------------------------------------------------------


def _round(v: float) -> int:
    """C ``round``: half away from zero."""
    return int(math.floor(abs(v) + 0.5)) * (1 if v >= 0 else -1)


def _roi_rows(op: OperatorDef, inputs: Sequence[np.ndarray], n: int) -> np.ndarray:
    rois = inputs[1]
    if rois.ndim != 2 or rois.shape[1] != 5:
        raise _fail(op, inputs, "rois must be R×5 (batch, x1, y1, x2, y2)")
    if not np.all(np.isfinite(rois)):
        raise _fail(op, inputs, "rois must be finite (a NaN or infinite coordinate found)")
    b = rois[:, 0].astype(np.int64)
    if b.size and (b.min() < 0 or b.max() >= n):
        raise _fail(op, inputs, f"RoI batch indices must lie in [0, {n})")
    return rois.astype(np.float64)


def _roi_pool_bins(
    op: OperatorDef, inputs: Sequence[np.ndarray], x: np.ndarray
) -> list[tuple[int, list[tuple[int, int, slice, slice]]]]:
    """Per RoI: ``(batch, [(p, q, rows, cols) of every non-empty bin])``."""
    _nchw(op, inputs, x)
    h, w = x.shape[2:]
    ph, pw = get_int(op, "pooled_h", 1), get_int(op, "pooled_w", 1)
    if ph <= 0 or pw <= 0:
        raise _fail(op, inputs, "pooled_h and pooled_w must be positive")
    scale = get_float(op, "spatial_scale", 1.0)
    out = []
    for row in _roi_rows(op, inputs, x.shape[0]):
        x1, y1, x2, y2 = (_round(float(v) * scale) for v in row[1:])
        bh, bw = max(y2 - y1 + 1, 1) / ph, max(x2 - x1 + 1, 1) / pw
        bins = []
        for p in range(ph):
            hs = min(max(math.floor(p * bh) + y1, 0), h)
            he = min(max(math.ceil((p + 1) * bh) + y1, 0), h)
            for q in range(pw):
                ws = min(max(math.floor(q * bw) + x1, 0), w)
                we = min(max(math.ceil((q + 1) * bw) + x1, 0), w)
                if he > hs and we > ws:
                    bins.append((p, q, slice(hs, he), slice(ws, we)))
        out.append((int(row[0]), bins))
    return out


def _roi_pool_forward(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    _arity(op, inputs, 2, 2, "X, rois")
    x = inputs[0]
    ph, pw = get_int(op, "pooled_h", 1), get_int(op, "pooled_w", 1)
    per = _roi_pool_bins(op, inputs, x)
    c, w = x.shape[1], x.shape[3]
    y = np.zeros((len(per), c, ph, pw), dtype=x.dtype)
    arg = np.full((len(per), c, ph, pw), -1, dtype=np.int32)
    for r, (b, bins) in enumerate(per):
        for p, q, rs, cs in bins:
            win = x[b, :, rs, cs].reshape(c, -1)
            k = win.argmax(axis=1)
            y[r, :, p, q] = win[np.arange(c), k]
            kh, kw = np.divmod(k, cs.stop - cs.start)
            arg[r, :, p, q] = (rs.start + kh) * w + cs.start + kw
    return [y, arg][: max(len(op.output), 1)]


def _roi_pool_backward(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    _arity(op, inputs, 4, 4, "X, rois, argmax, dY")
    x, rois, arg, dy = inputs
    if arg.shape != dy.shape or dy.ndim != 4 or dy.shape[0] != rois.shape[0]:
        raise _fail(op, inputs, "argmax and dY must be (R, C, pooled_h, pooled_w)")
    _roi_rows(op, inputs, x.shape[0])
    n, c, h, w = x.shape
    dx = np.zeros((n, c, h * w), dtype=np.float64)
    b = rois[:, 0].astype(np.int64)
    valid = arg >= 0
    r_i, c_i, _, _ = np.nonzero(valid)
    np.add.at(dx, (b[r_i], c_i, arg[valid].astype(np.int64)), dy[valid].astype(np.float64))
    return [dx.reshape(x.shape).astype(x.dtype)]


def _roi_pool_maker(grad_type: str) -> None:
    def maker(m: GradientMaker) -> list[OperatorDef]:
        if len(m.output_names) < 2:
            raise GradientError(
                f"{m.op_type}'s gradient reads its argmax output: give the op outputs "
                "[Y, argmaxes] (is_test=0)"
            )
        return [m.make_op(grad_type, [m.I(0), m.I(1), m.O(1), m.GO(0)], [m.GI(0)])]

    maker.__doc__ = f"``{grad_type}([X, rois, argmax, dY] → [dX])``."
    fwd = grad_type.removesuffix("Gradient")
    register_gradient(fwd, op_schema=schema(2, (1, 2), inplace=False), doc="RoI max pooling")(maker)
    register_kernel(fwd)(_roi_pool_forward)
    register_kernel(grad_type, gradient_op=True)(_roi_pool_backward)


_roi_pool_maker("RoIPoolGradient")
_roi_pool_maker("RoIPoolFGradient")


def _ps_bins(
    op: OperatorDef, inputs: Sequence[np.ndarray], x: np.ndarray
) -> list[tuple[int, list[tuple[int, int, slice, slice]]]]:
    _nchw(op, inputs, x)
    g, d = get_int(op, "group_size", 1), get_int(op, "output_dim", 1)
    if g <= 0 or d <= 0 or x.shape[1] != d * g * g:
        raise _fail(op, inputs, "X must have output_dim·group_size² channels")
    h, w = x.shape[2:]
    scale = get_float(op, "spatial_scale", 1.0)
    out = []
    for row in _roi_rows(op, inputs, x.shape[0]):
        x1, y1 = _round(float(row[1])) * scale, _round(float(row[2])) * scale
        x2, y2 = (_round(float(row[3])) + 1.0) * scale, (_round(float(row[4])) + 1.0) * scale
        bh, bw = max(y2 - y1, 0.1) / g, max(x2 - x1, 0.1) / g
        bins = []
        for p in range(g):
            hs = min(max(math.floor(p * bh + y1), 0), h)
            he = min(max(math.ceil((p + 1) * bh + y1), 0), h)
            for q in range(g):
                ws = min(max(math.floor(q * bw + x1), 0), w)
                we = min(max(math.ceil((q + 1) * bw + x1), 0), w)
                if he > hs and we > ws:
                    bins.append((p, q, slice(hs, he), slice(ws, we)))
        out.append((int(row[0]), bins))
    return out


@register_kernel("PSRoIPool")
def ps_roi_pool(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """PSRoIPool forward → ``[Y (R, D, G, G), mapping_channel]`` (R-FCN)."""
    _arity(op, inputs, 2, 2, "X, rois")
    x = inputs[0]
    g, d = get_int(op, "group_size", 1), get_int(op, "output_dim", 1)
    per = _ps_bins(op, inputs, x)
    y = np.zeros((len(per), d, g, g), dtype=np.float64)
    chan = (np.arange(d)[:, None, None] * g + np.arange(g)[None, :, None]) * g + np.arange(g)
    mapping = np.broadcast_to(chan, (len(per), d, g, g)).astype(np.int32)
    for r, (b, bins) in enumerate(per):
        for p, q, rs, cs in bins:
            y[r, :, p, q] = x[b, chan[:, p, q], rs, cs].astype(np.float64).mean(axis=(1, 2))
    return [y.astype(x.dtype), mapping.copy()][: max(len(op.output), 1)]


@register_gradient(
    "PSRoIPool", op_schema=schema(2, (1, 2), inplace=False), doc="position-sensitive RoI pooling"
)
def ps_roi_pool_grad(m: GradientMaker) -> list[OperatorDef]:
    """``PSRoIPoolGradient([X, rois, mapping_channel, dY] → [dX])``."""
    if len(m.output_names) < 2:
        raise GradientError("PSRoIPool's gradient reads its mapping_channel output (output 1)")
    return [m.make_op("PSRoIPoolGradient", [m.I(0), m.I(1), m.O(1), m.GO(0)], [m.GI(0)])]


@register_kernel("PSRoIPoolGradient", gradient_op=True)
def ps_roi_pool_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """PSRoIPoolGradient: each bin's dY/area added over the bin of its mapped channel."""
    _arity(op, inputs, 4, 4, "X, rois, mapping_channel, dY")
    x, _, mapping, dy = inputs
    per = _ps_bins(op, inputs, x)
    if dy.shape != mapping.shape or dy.shape[0] != len(per):
        raise _fail(op, inputs, "mapping_channel and dY must be (R, output_dim, G, G)")
    dx = np.zeros(x.shape, dtype=np.float64)
    for r, (b, bins) in enumerate(per):
        for p, q, rs, cs in bins:
            area = (rs.stop - rs.start) * (cs.stop - cs.start)
            for k, ch in enumerate(mapping[r, :, p, q].astype(np.int64)):
                dx[b, ch, rs, cs] += float(dy[r, k, p, q]) / area
    return [dx.astype(x.dtype)]
