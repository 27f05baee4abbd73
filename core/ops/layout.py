"""Data-layout ops (issue 8b): Tile, Expand, PadImage, PrependDim, ChannelShuffle,
DepthConcat, DepthSplit, SpaceToBatch, BatchToSpace, Im2Col, Col2Im - kernels, makers,
gradient kernels.

Sources (facts only): Caffe2 ``tile_op.cc``, ``expand_op.cc``, ``pad_op.cc``,
``prepend_dim_op.cc``, ``channel_shuffle_op.cc``, ``depth_split_op.cc``,
``space_batch_op.cc``, ``im2col_op.cc`` (``Get<Op>Gradient`` classes); spec §5.3 (shape ops).

Every op here moves or replicates elements, so each gradient is the adjoint gather/scatter:
Tile and Expand sum the copies back, PadImage sums the padded positions that came from an
input element (reflect/edge modes copy an element several times), the permutations
(ChannelShuffle, SpaceToBatch/BatchToSpace, PrependDim) apply their inverse. Dtypes are kept.

Corrected behaviour: Caffe2's DepthSplit gradient concatenates ``GO(i)`` of every output,
which is an empty name when an output has no gradient; netgrad fills that gradient with zeros
first, as its Split maker does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.ops._args import (
    check_numel,
    conv_pool_geometry,
    get_float,
    get_int,
    get_ints,
    get_order,
    get_str,
)
from core.ops.elementwise import expect_inputs, kernel_error, reduce_to
from core.ops.shape import concat, split
from core.registry import (
    GradientMaker,
    OperatorDef,
    make_arg,
    register_gradient,
    register_kernel,
    schema,
)

Array = np.ndarray[Any, Any]


def _scalar_int(op: OperatorDef, x: Array, what: str) -> int:
    a = np.asarray(x)
    if a.size != 1 or a.dtype.kind not in "iu":
        raise kernel_error(op, f"{what} input must be one integer", [a])
    return int(a.reshape(-1)[0])


# --- Tile -----------------------------------------------------------------------------------
# Y = concat([X] * tiles, axis);  dX = Σ_k dY[k-th copy]


def _tile_args(op: OperatorDef, inputs: list[Array], x_ndim: int) -> tuple[int, int]:
    tiles = _scalar_int(op, inputs[1], "tiles") if len(inputs) > 1 else get_int(op, "tiles", 1)
    axis = _scalar_int(op, inputs[2], "axis") if len(inputs) > 2 else get_int(op, "axis", 0)
    if tiles < 0:
        raise kernel_error(op, f"tiles must be non-negative, got {tiles}")
    if not -x_ndim <= axis < x_ndim:
        raise kernel_error(op, f"axis {axis} out of range for a {x_ndim}-D input")
    return tiles, axis % x_ndim


@register_kernel("Tile")
def tile(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X(, tiles)(, axis)] -> [Y]``: X repeated ``tiles`` times (as whole blocks) along
    ``axis`` (args ``tiles``=1, ``axis``=0; the inputs override them)."""
    expect_inputs(op, inputs, 1, 3)
    x = np.asarray(inputs[0])
    tiles, axis = _tile_args(op, inputs, x.ndim)
    reps = [1] * x.ndim
    reps[axis] = tiles
    check_numel([d * r for d, r in zip(x.shape, reps, strict=True)], op)
    return [np.tile(x, reps)]


@register_gradient("Tile", op_schema=schema((1, 3), 1, False), doc="Repeat X along an axis")
def tile_grad(m: GradientMaker) -> list[OperatorDef]:
    """``TileGradient([dY(, tiles)(, axis)] -> [dX])``, args copied."""
    ins = [m.GO(0)] + [m.I(i) for i in range(1, len(m.input_names))]
    return [m.make_op("TileGradient", ins, [m.GI(0)])]


@register_kernel("TileGradient", gradient_op=True)
def tile_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[dY(, tiles)(, axis)] -> [dX]``: the ``tiles`` blocks along ``axis`` summed."""
    expect_inputs(op, inputs, 1, 3)
    dy = np.asarray(inputs[0])
    tiles, axis = _tile_args(op, inputs, dy.ndim)
    if tiles == 0 or dy.shape[axis] % tiles:
        raise kernel_error(op, f"dim {axis} of dY is not a multiple of tiles={tiles}", inputs)
    n = dy.shape[axis] // tiles
    shape = dy.shape[:axis] + (tiles, n) + dy.shape[axis + 1:]
    return [dy.reshape(shape).sum(axis=axis)]


# --- Expand ---------------------------------------------------------------------------------
# Y = X broadcast (both ways) with `shape`;  dX = dY summed back to X's shape


def _expand_shape(op: OperatorDef, x: Array, shape: Array) -> tuple[int, ...]:
    s = np.asarray(shape).reshape(-1)
    if s.dtype.kind not in "iu":
        raise kernel_error(op, "shape must be an integer vector", [x, np.asarray(shape)])
    want = [1 if int(d) == -1 else int(d) for d in s]
    try:
        return tuple(int(d) for d in np.broadcast_shapes(x.shape, tuple(want)))
    except ValueError:
        raise kernel_error(op, f"X{list(x.shape)} cannot be expanded to {want}") from None


@register_kernel("Expand")
def expand(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X, shape] -> [Y]``: NumPy-style broadcast of X against ``shape`` (-1 keeps X's dim)."""
    expect_inputs(op, inputs, 2)
    x = np.asarray(inputs[0])
    out = _expand_shape(op, x, inputs[1])
    check_numel(out, op)
    return [np.broadcast_to(x, out).copy()]


@register_gradient("Expand", op_schema=schema(2, 1, False), doc="Broadcast X to a shape")
def expand_grad(m: GradientMaker) -> list[OperatorDef]:
    """``ExpandGradient([dY, X] -> [dX])``; ``shape`` gets no gradient."""
    return [m.make_op("ExpandGradient", [m.GO(0), m.I(0)], [m.GI(0)])]


@register_kernel("ExpandGradient", gradient_op=True)
def expand_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[dY, X] -> [dX]``: dY summed over the broadcast dims, X's shape."""
    expect_inputs(op, inputs, 2)
    dy, x = np.asarray(inputs[0]), np.asarray(inputs[1])
    if dy.ndim < x.ndim:
        raise kernel_error(op, "dY has fewer dims than X", inputs)
    aligned = (1,) * (dy.ndim - x.ndim) + x.shape
    if any(a not in (1, d) for a, d in zip(aligned, dy.shape, strict=True)):
        raise kernel_error(op, f"dY{list(dy.shape)} is not an expansion of X{list(x.shape)}")
    return [reduce_to(dy, aligned, x.shape)]


# --- PadImage -------------------------------------------------------------------------------
# 4-D X padded on H and W (pads t, l, b, r); modes constant (value), reflect, edge.
# Each output position reads one input position or the constant; dX scatters dY back.


def _pads(op: OperatorDef) -> tuple[int, int, int, int]:
    pads = get_ints(op, "pads")
    if pads:
        if len(pads) != 4:
            raise kernel_error(op, f"pads must hold 4 values (t, l, b, r), got {pads}")
        t, left, b, r = pads
    else:
        p = get_int(op, "pad", 0)
        t, left, b, r = (get_int(op, k, p) for k in ("pad_t", "pad_l", "pad_b", "pad_r"))
    if min(t, left, b, r) < 0:
        raise kernel_error(op, "pads must be non-negative")
    return t, left, b, r


def _pad_index(op: OperatorDef, n: int, before: int, after: int) -> Array:
    """Source index of every padded position along one dim (-1: the constant)."""
    mode = get_str(op, "mode", "constant")
    idx = np.arange(n)
    if mode == "constant":
        return np.pad(idx, (before, after), mode="constant", constant_values=-1)
    if mode not in ("reflect", "edge"):
        raise kernel_error(op, f"unknown mode '{mode}' (constant, reflect or edge)")
    if n == 0 or (mode == "reflect" and max(before, after) >= n):
        raise kernel_error(op, f"{mode} padding of {max(before, after)} needs a dim above it")
    return np.pad(idx, (before, after), mode="reflect" if mode == "reflect" else "edge")


def _pad_geometry(op: OperatorDef, shape: tuple[int, ...]) -> tuple[int, int, Array, Array]:
    """``(h_axis, w_axis, rows, cols)`` index maps for an input of ``shape``."""
    if len(shape) != 4:
        raise kernel_error(op, f"expects a 4-D input, got {len(shape)}-D")
    ha, wa = (2, 3) if get_order(op) == "NCHW" else (1, 2)
    t, left, b, r = _pads(op)
    return ha, wa, _pad_index(op, shape[ha], t, b), _pad_index(op, shape[wa], left, r)


@register_kernel("PadImage")
def pad_image(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X (4-D, order NCHW/NHWC)] -> [Y]`` padded on H/W; args ``pad``/``pad_t``..
    ``pad_r``/``pads``, ``mode`` (constant|reflect|edge), ``value`` (0.0)."""
    expect_inputs(op, inputs, 1)
    x = np.asarray(inputs[0])
    ha, wa, rows, cols = _pad_geometry(op, x.shape)
    y = np.take(np.take(x, np.maximum(rows, 0), axis=ha), np.maximum(cols, 0), axis=wa)
    shape = [1] * 4
    shape[ha], shape[wa] = len(rows), 1
    outside = (rows < 0).reshape(shape)
    shape[ha], shape[wa] = 1, len(cols)
    outside = outside | (cols < 0).reshape(shape)
    value = get_float(op, "value", 0.0)
    return [np.where(outside, np.asarray(value, dtype=x.dtype), y)]


@register_gradient("PadImage", op_schema=schema(1, 1, False), doc="Pad the H and W dims of a 4-D X")
def pad_image_grad(m: GradientMaker) -> list[OperatorDef]:
    """``PadImageGradient([dY] -> [dX])``, args copied."""
    return [m.make_op("PadImageGradient", [m.GO(0)], [m.GI(0)])]


@register_kernel("PadImageGradient", gradient_op=True)
def pad_image_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[dY] -> [dX]``: each padded position's dY added to the input element it copied."""
    expect_inputs(op, inputs, 1)
    dy = np.asarray(inputs[0])
    if dy.ndim != 4:
        raise kernel_error(op, "expects a 4-D dY", inputs)
    ha, wa = (2, 3) if get_order(op) == "NCHW" else (1, 2)
    t, left, b, r = _pads(op)
    h, w = dy.shape[ha] - t - b, dy.shape[wa] - left - r
    if h < 0 or w < 0:
        raise kernel_error(op, "dY is smaller than the pads", inputs)
    rows, cols = _pad_index(op, h, t, b), _pad_index(op, w, left, r)
    # move H, then W, to the front and scatter-add along it
    g = np.moveaxis(dy, ha, 0)
    keep = rows >= 0
    acc_r = np.zeros((h,) + g.shape[1:], dtype=dy.dtype)
    np.add.at(acc_r, rows[keep], g[keep])
    g = np.moveaxis(np.moveaxis(acc_r, 0, ha), wa, 0)
    keep = cols >= 0
    acc = np.zeros((w,) + g.shape[1:], dtype=dy.dtype)
    np.add.at(acc, cols[keep], g[keep])
    return [np.moveaxis(acc, 0, wa)]


# --- PrependDim / MergeDim ------------------------------------------------------------------
# PrependDim: (N, ...) -> (dim_size, N / dim_size, ...);  gradient MergeDim (inverse reshape)


@register_kernel("PrependDim")
def prepend_dim(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X (N, ...)] -> [Y (dim_size, N/dim_size, ...)]`` (arg ``dim_size``, required)."""
    expect_inputs(op, inputs, 1)
    x = np.asarray(inputs[0])
    k = get_int(op, "dim_size", 0)
    if k <= 0 or x.ndim < 1 or x.shape[0] % k:
        raise kernel_error(op, f"dim 0 must be a multiple of dim_size={k}", inputs)
    return [x.reshape((k, x.shape[0] // k) + x.shape[1:]).copy()]


@register_gradient("PrependDim", op_schema=schema(1, 1, [(0, 0)]), copy_arguments=False,
                   doc="Split dim 0 into (dim_size, rest)")
def prepend_dim_grad(m: GradientMaker) -> list[OperatorDef]:
    """``MergeDim([dY] -> [dX])``; forward args not copied (Caffe2 ``CopyArguments`` false)."""
    return [m.make_op("MergeDim", [m.GO(0)], [m.GI(0)])]


@register_kernel("MergeDim", gradient_op=True)
def merge_dim(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X (A, B, ...)] -> [Y (A·B, ...)]``: the first two dims merged."""
    expect_inputs(op, inputs, 1)
    x = np.asarray(inputs[0])
    if x.ndim < 2:
        raise kernel_error(op, "expects at least 2 dims", inputs)
    return [x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:]).copy()]


# --- ChannelShuffle -------------------------------------------------------------------------
# channels C = G·K viewed as (G, K) -> transposed to (K, G);  gradient: the inverse


def _shuffle(op: OperatorDef, x: Array, inverse: bool) -> Array:
    if x.ndim < 2:
        raise kernel_error(op, "expects at least 2 dims", [x])
    axis = 1 if get_order(op) == "NCHW" else x.ndim - 1
    g = get_int(op, "group", 1)
    c = x.shape[axis]
    if g <= 0 or c % g:
        raise kernel_error(op, f"channels {c} are not a multiple of group={g}", [x])
    first, second = (c // g, g) if inverse else (g, c // g)
    y = x.reshape(x.shape[:axis] + (first, second) + x.shape[axis + 1:])
    return np.swapaxes(y, axis, axis + 1).reshape(x.shape).copy()


@register_kernel("ChannelShuffle")
def channel_shuffle(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X] -> [Y]``: channel ``g·K + k`` goes to ``k·G + g`` (args ``group``, ``order``)."""
    expect_inputs(op, inputs, 1)
    return [_shuffle(op, np.asarray(inputs[0]), inverse=False)]


@register_gradient("ChannelShuffle", op_schema=schema(1, 1), doc="Shuffle channel groups")
def channel_shuffle_grad(m: GradientMaker) -> list[OperatorDef]:
    """``ChannelShuffleGradient([dY] -> [dX])``, args copied."""
    return [m.make_op("ChannelShuffleGradient", [m.GO(0)], [m.GI(0)])]


@register_kernel("ChannelShuffleGradient", gradient_op=True)
def channel_shuffle_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[dY] -> [dX]``: the inverse channel permutation."""
    expect_inputs(op, inputs, 1)
    return [_shuffle(op, np.asarray(inputs[0]), inverse=True)]


# --- DepthConcat / DepthSplit ---------------------------------------------------------------
# Concat / Split along the channel axis of ``order`` (the pre-``axis`` Caffe2 ops)


@register_kernel("DepthConcat")
def depth_concat(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X_0..] -> [Y, split_info]``: Concat on the channel axis of ``order`` (NCHW: 1)."""
    return concat(op, inputs)


@register_kernel("DepthSplit")
def depth_split(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X(, split)] -> [Y_0..]``: Split on the channel axis of ``order`` (NCHW: 1)."""
    return split(op, inputs)


@register_gradient("DepthConcat", op_schema=schema((1, -1), 2, False), doc="Concat on channels")
def depth_concat_grad(m: GradientMaker) -> list[OperatorDef]:
    """``DepthSplit([dY, split_info] -> [dX_0..])``, args copied."""
    return [m.make_op("DepthSplit", [m.GO(0), m.O(1)],
                      [m.GI(i) for i in range(len(m.input_names))])]


@register_gradient("DepthSplit", op_schema=schema((1, 2), (1, -1), False), doc="Split on channels")
def depth_split_grad(m: GradientMaker) -> list[OperatorDef]:
    """``DepthConcat([dY_0..] -> [dX, "_" + dX + "_dims"])``, args copied; a missing dY_j is
    zero-filled first (``ConstantFill([Y_j] -> ["_" + Y_j + "_grad_autogen_zero"])``)."""
    if not any(m.has_go(j) for j in range(len(m.output_names))):
        return []
    ops: list[OperatorDef] = []
    parts: list[str] = []
    for j in range(len(m.output_names)):
        if m.has_go(j):
            parts.append(m.GO(j))
        else:
            zero = "_" + m.O(j) + "_grad_autogen_zero"
            ops.append(m.make_op("ConstantFill", [m.O(j)], [zero], [make_arg("value", 0.0)]))
            parts.append(zero)
    dx = m.GI(0)
    ops.append(m.make_op("DepthConcat", parts, [dx, "_" + dx + "_dims"]))
    return ops


# --- SpaceToBatch / BatchToSpace (NCHW) -----------------------------------------------------
# SpaceToBatch: pad H, W by `pad`, move each block_size×block_size offset (h0, w0) to batch
# entry (h0·b + w0)·N + n.  BatchToSpace is its inverse with cropping; each is the other's
# gradient (Caffe2 space_batch_op.cc).


def _space_batch_args(op: OperatorDef) -> tuple[int, int]:
    if get_str(op, "order", "NCHW") != "NCHW":
        raise kernel_error(op, "only order NCHW is supported (as in Caffe2)")
    b, pad = get_int(op, "block_size", 2), get_int(op, "pad", 0)
    if b < 1 or pad < 0:
        raise kernel_error(op, f"block_size must be >= 1 and pad >= 0 (got {b}, {pad})")
    return b, pad


def _space_to_batch(op: OperatorDef, x: Array) -> Array:
    b, pad = _space_batch_args(op)
    if x.ndim != 4:
        raise kernel_error(op, "expects a 4-D NCHW input", [x])
    n, c, h, w = x.shape
    hp, wp = h + 2 * pad, w + 2 * pad
    if hp % b or wp % b:
        raise kernel_error(op, f"padded H, W ({hp}, {wp}) must be multiples of {b}", [x])
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    y = xp.reshape(n, c, hp // b, b, wp // b, b)  # n, c, oh, h0, ow, w0
    y = y.transpose(3, 5, 0, 1, 2, 4)  # h0, w0, n, c, oh, ow
    return y.reshape(b * b * n, c, hp // b, wp // b).copy()


def _batch_to_space(op: OperatorDef, x: Array) -> Array:
    b, pad = _space_batch_args(op)
    if x.ndim != 4 or x.shape[0] % (b * b):
        raise kernel_error(op, f"expects a 4-D NCHW input with batch a multiple of {b * b}", [x])
    nb, c, oh, ow = x.shape
    n = nb // (b * b)
    if oh * b - 2 * pad < 0 or ow * b - 2 * pad < 0:
        raise kernel_error(op, "the crop is larger than the output", [x])
    y = x.reshape(b, b, n, c, oh, ow).transpose(2, 3, 4, 0, 5, 1)  # n, c, oh, h0, ow, w0
    y = y.reshape(n, c, oh * b, ow * b)
    return y[:, :, pad:oh * b - pad, pad:ow * b - pad].copy()


@register_kernel("SpaceToBatch")
def space_to_batch(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X (N, C, H, W)] -> [Y (N·b², C, (H+2p)/b, (W+2p)/b)]``; args ``block_size``=2,
    ``pad``=0."""
    expect_inputs(op, inputs, 1)
    return [_space_to_batch(op, np.asarray(inputs[0]))]


@register_kernel("BatchToSpace")
def batch_to_space(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X (N·b², C, H, W)] -> [Y (N, C, H·b−2p, W·b−2p)]``; args ``block_size``=2,
    ``pad``=0."""
    expect_inputs(op, inputs, 1)
    return [_batch_to_space(op, np.asarray(inputs[0]))]


@register_gradient("SpaceToBatch", op_schema=schema(1, 1, False), doc="Spatial blocks into batch")
def space_to_batch_grad(m: GradientMaker) -> list[OperatorDef]:
    """``BatchToSpace([dY] -> [dX])``, args copied."""
    return [m.make_op("BatchToSpace", [m.GO(0)], [m.GI(0)])]


@register_gradient("BatchToSpace", op_schema=schema(1, 1, False), doc="Batch into spatial blocks")
def batch_to_space_grad(m: GradientMaker) -> list[OperatorDef]:
    """``SpaceToBatch([dY] -> [dX])``, args copied."""
    return [m.make_op("SpaceToBatch", [m.GO(0)], [m.GI(0)])]


# --- Im2Col / Col2Im ------------------------------------------------------------------------
# Im2Col: every kernel window of a 4-D image as a column (NCHW: (N, C·kh·kw, oh, ow), channel
# major; NHWC: (N, oh, ow, kh·kw·C)), zeros where the window reaches into the padding.
# Col2Im([cols, like]) scatters-adds the columns back into an image shaped like `like`; each
# is the other's gradient (Caffe2 im2col_op.cc).


def _im2col_index(
    op: OperatorDef, image_shape: tuple[int, ...]
) -> tuple[bool, Array, Array, Array, tuple[int, int]]:
    """``(nchw, rows, cols, inside, (kh, kw))``: source H index per (oh, i), W index per
    (ow, j) (clipped into range) and the in-range mask of shape (oh, kh, ow, kw)."""
    if len(image_shape) != 4:
        raise kernel_error(op, f"expects a 4-D image, got {len(image_shape)}-D")
    nchw = get_order(op) == "NCHW"
    hw = image_shape[2:] if nchw else image_shape[1:3]
    geo = conv_pool_geometry(op, hw)
    (kh, kw), (sh, sw), (dh, dw) = geo.kernel, geo.stride, geo.dilation
    (oh, ow), (pt, pl) = geo.out_size, geo.pad_head
    if min(kh, kw) < 1:
        raise kernel_error(op, "needs a kernel (kernel or kernel_h/kernel_w)")
    hi = np.arange(oh)[:, None] * sh - pt + np.arange(kh)[None, :] * dh
    wi = np.arange(ow)[:, None] * sw - pl + np.arange(kw)[None, :] * dw
    inside = ((hi >= 0) & (hi < hw[0]))[:, :, None, None] & ((wi >= 0) & (wi < hw[1]))[None, None]
    return nchw, np.clip(hi, 0, hw[0] - 1), np.clip(wi, 0, hw[1] - 1), inside, (kh, kw)


def _image_last(x: Array, nchw: bool) -> Array:
    """The image as (H, W, N, C)."""
    return np.moveaxis(x, (2, 3), (0, 1)) if nchw else np.moveaxis(x, (1, 2), (0, 1))


@register_kernel("Im2Col")
def im2col(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X (4-D)] -> [Y]``; args ``kernel``/``kernel_h``+``kernel_w``, ``stride``, ``pad``,
    ``dilation``, ``order`` (see the section comment for Y's layout)."""
    expect_inputs(op, inputs, 1)
    x = np.asarray(inputs[0])
    nchw, rows, cols, inside, (kh, kw) = _im2col_index(op, x.shape)
    img = _image_last(x, nchw)  # H, W, N, C
    g = img[rows[:, :, None, None], cols[None, None, :, :]]  # oh, kh, ow, kw, N, C
    g = np.where(inside[..., None, None], g, np.zeros((), x.dtype))
    oh, ow = rows.shape[0], cols.shape[0]
    n, c = g.shape[4], g.shape[5]
    if nchw:  # N, C, kh, kw, oh, ow
        return [g.transpose(4, 5, 1, 3, 0, 2).reshape(n, c * kh * kw, oh, ow).copy()]
    return [g.transpose(4, 0, 2, 1, 3, 5).reshape(n, oh, ow, kh * kw * c).copy()]


@register_kernel("Col2Im")
def col2im(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X (columns), Z (4-D image)] -> [Y]`` with Z's shape: Im2Col's adjoint (each column
    entry added to the pixel it was taken from); same args as Im2Col."""
    expect_inputs(op, inputs, 2)
    x, z = np.asarray(inputs[0]), np.asarray(inputs[1])
    nchw, rows, cols, inside, (kh, kw) = _im2col_index(op, z.shape)
    oh, ow = rows.shape[0], cols.shape[0]
    n, c = (z.shape[0], z.shape[1]) if nchw else (z.shape[0], z.shape[3])
    want = (n, c * kh * kw, oh, ow) if nchw else (n, oh, ow, kh * kw * c)
    if x.shape != want:
        raise kernel_error(op, f"columns must have shape {list(want)}", inputs)
    if nchw:
        g = x.reshape(n, c, kh, kw, oh, ow).transpose(4, 2, 5, 3, 0, 1)
    else:
        g = x.reshape(n, oh, ow, kh, kw, c).transpose(1, 3, 2, 4, 0, 5)
    g = np.where(inside[..., None, None], g, 0)  # oh, kh, ow, kw, N, C
    img = np.zeros(_image_last(z, nchw).shape, dtype=x.dtype)
    idx = (np.broadcast_to(rows[:, :, None, None], inside.shape),
           np.broadcast_to(cols[None, None, :, :], inside.shape))
    np.add.at(img, idx, g)
    back = np.moveaxis(img, (0, 1), (2, 3)) if nchw else np.moveaxis(img, (0, 1), (1, 2))
    return [back]


@register_gradient("Im2Col", op_schema=schema(1, 1, False),
                   doc="Kernel windows of an image as columns")
def im2col_grad(m: GradientMaker) -> list[OperatorDef]:
    """``Col2Im([dY, X] -> [dX])``, args copied."""
    return [m.make_op("Col2Im", [m.GO(0), m.I(0)], [m.GI(0)])]


@register_gradient("Col2Im", op_schema=schema(2, 1, False), doc="Columns added back into an image")
def col2im_grad(m: GradientMaker) -> list[OperatorDef]:
    """``Im2Col([dY] -> [dX])``, args copied; the shape-giving Z gets no gradient."""
    return [m.make_op("Im2Col", [m.GO(0)], [m.GI(0)])]
