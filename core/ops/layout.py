"""Data-layout ops (issue 8b): Tile, Expand, PadImage, PrependDim, DepthConcat, DepthSplit -
kernels, makers, gradient kernels. (ChannelShuffle, SpaceToBatch/BatchToSpace and
Im2Col/Col2Im live in :mod:`core.ops.vision_layout`.)

Sources (facts only): Caffe2 ``tile_op.cc``, ``expand_op.cc``, ``pad_op.cc``,
``prepend_dim_op.cc``, ``depth_split_op.cc`` (``Get<Op>Gradient`` classes); spec §5.3.

Every op here moves or replicates elements, so each gradient is the adjoint gather/scatter:
Tile and Expand sum the copies back, PadImage sums the padded positions that came from an
input element (reflect/edge modes copy an element several times), PrependDim applies
its inverse. Dtypes are kept.

Corrected behaviour: Caffe2's DepthSplit gradient concatenates ``GO(i)`` of every output,
which is an empty name when an output has no gradient; netgrad fills that gradient with zeros
first, as its Split maker does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.ops._args import (
    check_numel,
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
from core.template import GO, I, template

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


# ``ExpandGradient([dY, X] -> [dX])``; ``shape`` gets no gradient.
expand_grad = template("ExpandGradient", [GO(0), I(0)], [0])
register_gradient("Expand", op_schema=schema(2, 1, False), doc="Broadcast X to a shape")(
    expand_grad
)


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
    out = list(x.shape)
    out[ha], out[wa] = len(rows), len(cols)
    check_numel(out, op)  # (before the output is built)
    y = np.take(np.take(x, np.maximum(rows, 0), axis=ha), np.maximum(cols, 0), axis=wa)
    shape = [1] * 4
    shape[ha], shape[wa] = len(rows), 1
    outside = (rows < 0).reshape(shape)
    shape[ha], shape[wa] = 1, len(cols)
    outside = outside | (cols < 0).reshape(shape)
    value = get_float(op, "value", 0.0)
    return [np.where(outside, np.asarray(value, dtype=x.dtype), y)]


# ``PadImageGradient([dY] -> [dX])``, args copied.
pad_image_grad = template("PadImageGradient", [GO(0)], [0])
register_gradient("PadImage", op_schema=schema(1, 1, False), doc="Pad the H and W dims of a 4-D X")(
    pad_image_grad
)


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


# ``MergeDim([dY] -> [dX])``; forward args not copied (Caffe2 ``CopyArguments`` false).
prepend_dim_grad = template("MergeDim", [GO(0)], [0])
register_gradient("PrependDim", op_schema=schema(1, 1, [(0, 0)]), copy_arguments=False,
                   doc="Split dim 0 into (dim_size, rest)")(prepend_dim_grad)


@register_kernel("MergeDim", gradient_op=True)
def merge_dim(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X (A, B, ...)] -> [Y (A·B, ...)]``: the first two dims merged."""
    expect_inputs(op, inputs, 1)
    x = np.asarray(inputs[0])
    if x.ndim < 2:
        raise kernel_error(op, "expects at least 2 dims", inputs)
    return [x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:]).copy()]


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
