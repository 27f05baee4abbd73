"""Channel / space layout ops of vision nets: ChannelShuffle, SpaceToBatch, BatchToSpace,
Im2Col, Col2Im.

Forward NumPy kernels and Caffe2 gradient makers (``channel_shuffle_op.cc``,
``space_batch_op.cc``, ``im2col_op.cc``), with the maths in comments. SpaceToBatch /
BatchToSpace and Im2Col / Col2Im are adjoint pairs: each is the other's gradient op.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from api_schemas import caffe2_pb2
from core.ops._args import ConvPoolGeometry, check_numel, get_int, get_order
from core.ops._args import kernel_error as _fail
from core.ops.nn import _pad, _unwindow, _windows
from core.registry import GradientMaker, register_gradient, register_kernel, schema
from core.template import GO, template

OperatorDef = caffe2_pb2.OperatorDef


# ---------------------------------------------------------------------------------------------
# ChannelShuffle (ShuffleNet): X (N, C, *S) (NCHW) or (N, *S, C) (NHWC), arg group G;
# C = G·K. Channel g·K + k of X becomes channel k·G + g of Y (X viewed (G, K) → (K, G)).
# Grad ChannelShuffleGradient([dY] → [dX]): the inverse shuffle, dY viewed (K, G) → (G, K).
# ---------------------------------------------------------------------------------------------


def _shuffle(
    op: OperatorDef, inputs: Sequence[np.ndarray], a: np.ndarray, inverse: bool
) -> np.ndarray:
    if len(inputs) != 1:
        raise _fail(op, inputs, "expects one input")
    if a.ndim < 2:
        raise _fail(op, inputs, "X must be at least 2-D (N, C, ...)")
    nhwc = get_order(op) == "NHWC"
    ac = np.moveaxis(a, -1, 1) if nhwc else a
    c, g = ac.shape[1], get_int(op, "group", 1)
    if g <= 0 or c % g:
        raise _fail(op, inputs, f"C = {c} is not divisible by group = {g}")
    rows, cols = (c // g, g) if inverse else (g, c // g)
    shaped = ac.reshape((ac.shape[0], rows, cols) + ac.shape[2:])
    out = np.swapaxes(shaped, 1, 2).reshape(ac.shape)
    return np.ascontiguousarray(np.moveaxis(out, 1, -1) if nhwc else out)


@register_kernel("ChannelShuffle")
def channel_shuffle(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """ChannelShuffle forward (see the paragraph above)."""
    return [_shuffle(op, inputs, inputs[0], inverse=False)]


# ``ChannelShuffleGradient([dY] → [dX])``.
channel_shuffle_grad = template("ChannelShuffleGradient", [GO(0)], [0])
register_gradient(
    "ChannelShuffle", op_schema=schema(1, 1, inplace=False), doc="ShuffleNet channel shuffle"
)(channel_shuffle_grad)


@register_kernel("ChannelShuffleGradient", gradient_op=True)
def channel_shuffle_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """ChannelShuffleGradient: the inverse channel permutation of dY."""
    return [_shuffle(op, inputs, inputs[0], inverse=True)]


# ---------------------------------------------------------------------------------------------
# SpaceToBatch / BatchToSpace (NCHW only): args block_size B (2), pad (0), pad_t (= pad).
# Upstream reads the top pad from `pad_t` but the left, bottom and right pads from `pad`
# (kept here). SpaceToBatch: X (N, C, H, W) → Y (N·B², C, (H + pt + pb)/B, (W + pl + pr)/B),
#   Y[(oh·B + ow)·N + n, c, y, x] = X[n, c, y·B + oh − pt, x·B + ow − pl] (0 outside X).
# BatchToSpace is its inverse on the kept positions (a crop). Each is the other's adjoint, so
# Caffe2's makers emit the other op as the gradient: SpaceToBatch → BatchToSpace([dY] → [dX])
# and BatchToSpace → SpaceToBatch([dY] → [dX]), args copied.
# ---------------------------------------------------------------------------------------------


def _space_args(op: OperatorDef, inputs: Sequence[np.ndarray]) -> tuple[int, int, int, int, int]:
    """``(block, pad_t, pad_l, pad_b, pad_r)``."""
    if get_order(op) != "NCHW":
        raise _fail(op, inputs, "only order NCHW is supported (as upstream)")
    if len(inputs) != 1 or inputs[0].ndim != 4:
        raise _fail(op, inputs, "expects one 4-D NCHW input")
    blk, pad = get_int(op, "block_size", 2), get_int(op, "pad", 0)
    if blk <= 0 or pad < 0:
        raise _fail(op, inputs, "block_size must be positive and pads non-negative")
    return blk, get_int(op, "pad_t", pad), pad, pad, pad


def _space_to_batch(op: OperatorDef, inputs: Sequence[np.ndarray], x: np.ndarray) -> np.ndarray:
    blk, pt, pl, pb, pr = _space_args(op, inputs)
    n, c, h, w = x.shape
    hp, wp = h + pt + pb, w + pl + pr
    if hp % blk or wp % blk:
        raise _fail(op, inputs, f"padded size {hp}×{wp} is not a multiple of block_size {blk}")
    xp = np.zeros((n, c, hp, wp), dtype=x.dtype)
    xp[:, :, pt : pt + h, pl : pl + w] = x
    # (n, c, y, oh, x, ow) → (oh, ow, n, c, y, x)
    t = xp.reshape(n, c, hp // blk, blk, wp // blk, blk).transpose(3, 5, 0, 1, 2, 4)
    return np.ascontiguousarray(t.reshape(blk * blk * n, c, hp // blk, wp // blk))


def _batch_to_space(op: OperatorDef, inputs: Sequence[np.ndarray], y: np.ndarray) -> np.ndarray:
    blk, pt, pl, pb, pr = _space_args(op, inputs)
    nb, c, ho, wo = y.shape
    if nb % (blk * blk):
        raise _fail(op, inputs, f"batch {nb} is not a multiple of block_size² = {blk * blk}")
    n = nb // (blk * blk)
    h, w = ho * blk - pt - pb, wo * blk - pl - pr
    if h <= 0 or w <= 0:
        raise _fail(op, inputs, "the pads leave an empty output")
    t = y.reshape(blk, blk, n, c, ho, wo).transpose(2, 3, 4, 0, 5, 1)
    full = t.reshape(n, c, ho * blk, wo * blk)
    return np.ascontiguousarray(full[:, :, pt : pt + h, pl : pl + w])


@register_kernel("SpaceToBatch")
def space_to_batch(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """SpaceToBatch forward (see the paragraph above)."""
    return [_space_to_batch(op, inputs, inputs[0])]


@register_kernel("BatchToSpace")
def batch_to_space(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """BatchToSpace forward (see the paragraph above)."""
    return [_batch_to_space(op, inputs, inputs[0])]


# ``BatchToSpace([dY] → [dX])``.
space_to_batch_grad = template("BatchToSpace", [GO(0)], [0])
register_gradient(
    "SpaceToBatch", op_schema=schema(1, 1, inplace=False), doc="spatial blocks to batch"
)(space_to_batch_grad)


# ``SpaceToBatch([dY] → [dX])``.
batch_to_space_grad = template("SpaceToBatch", [GO(0)], [0])
register_gradient(
    "BatchToSpace", op_schema=schema(1, 1, inplace=False), doc="batch to spatial blocks"
)(batch_to_space_grad)


# ---------------------------------------------------------------------------------------------
# Im2Col: X (N, C, H, W) (NCHW) or (N, H, W, C) (NHWC) → the patches of a kh×kw window;
# args kernel / kernel_h / kernel_w, stride(_h/_w) (1), dilation(_h/_w) (1), pad (0, every side).
# out_h = (H + 2·pad − (dil·(kh − 1) + 1))/stride + 1 (same for w).
#   NCHW: Y (N, C·kh·kw, out_h, out_w), channel (c·kh + i)·kw + j;
#   NHWC: Y (N, out_h, out_w, kh·kw·C), channel (i·kw + j)·C + c.
# Col2Im: in [cols, Z] (Z: only its shape, the image's) → the adjoint: patches summed back.
# Grads: Im2Col → Col2Im([dY, X] → [dX]); Col2Im → Im2Col([dY] → [dcols]); args copied.
# ---------------------------------------------------------------------------------------------


def _im2col_geometry(
    op: OperatorDef, inputs: Sequence[np.ndarray], image_shape: tuple[int, ...]
) -> tuple[bool, ConvPoolGeometry]:
    """``(nhwc, geometry)`` of the image shape ``(N, C, H, W)`` / ``(N, H, W, C)``."""
    if len(image_shape) != 4:
        raise _fail(op, inputs, "the image must be 4-D")
    nhwc = get_order(op) == "NHWC"
    h, w = image_shape[1:3] if nhwc else image_shape[2:]
    k = get_int(op, "kernel", 0)
    kh, kw = get_int(op, "kernel_h", k), get_int(op, "kernel_w", k)
    d = get_int(op, "dilation", 1)
    dh, dw = get_int(op, "dilation_h", d), get_int(op, "dilation_w", d)
    st = get_int(op, "stride", 1)
    sh, sw = get_int(op, "stride_h", st), get_int(op, "stride_w", st)
    pad = get_int(op, "pad", 0)
    if min(kh, kw, dh, dw, sh, sw) <= 0 or pad < 0:
        raise _fail(op, inputs, "kernel, dilation and stride must be positive, pad ≥ 0")
    ekh, ekw = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    if h < ekh or w < ekw:
        raise _fail(op, inputs, f"the image ({h}×{w}) is smaller than the window")
    out = ((h + 2 * pad - ekh) // sh + 1, (w + 2 * pad - ekw) // sw + 1)
    geo = ConvPoolGeometry((kh, kw), (sh, sw), (dh, dw), (pad, pad), (pad, pad), (h, w), out)
    c = image_shape[3] if nhwc else image_shape[1]
    check_numel((image_shape[0], c * kh * kw, *out), op)  # (before the columns are built)
    return nhwc, geo


def _im2col(op: OperatorDef, inputs: Sequence[np.ndarray], x: np.ndarray) -> np.ndarray:
    nhwc, geo = _im2col_geometry(op, inputs, x.shape)
    xc = np.moveaxis(x, -1, 1) if nhwc else x
    cols = _windows(_pad(xc, geo, 0.0), geo)  # (N, C, kh, kw, oh, ow)
    n, c, kh, kw, oh, ow = cols.shape
    if nhwc:
        return np.ascontiguousarray(cols.transpose(0, 4, 5, 2, 3, 1).reshape(n, oh, ow, -1))
    return np.ascontiguousarray(cols.reshape(n, c * kh * kw, oh, ow))


def _col2im(
    op: OperatorDef, inputs: Sequence[np.ndarray], cols: np.ndarray, image_shape: tuple[int, ...]
) -> np.ndarray:
    nhwc, geo = _im2col_geometry(op, inputs, image_shape)
    n = image_shape[0]
    c = image_shape[3] if nhwc else image_shape[1]
    kh, kw = geo.kernel
    oh, ow = geo.out_size
    want = (n, oh, ow, kh * kw * c) if nhwc else (n, c * kh * kw, oh, ow)
    if cols.shape != want:
        # Im2Col's layout exactly: Col2Im's gradient (Im2Col) gives dcols that shape, so
        # a cols of the same size but another shape would get a mis-shaped gradient
        raise _fail(
            op,
            inputs,
            f"cols must have Im2Col's shape {list(want)} (N, C·kh·kw, out_h, out_w; NHWC: "
            f"N, out_h, out_w, kh·kw·C), got {list(cols.shape)}",
        )
    if nhwc:
        six = cols.reshape(n, oh, ow, kh, kw, c).transpose(0, 5, 3, 4, 1, 2)
    else:
        six = cols.reshape(n, c, kh, kw, oh, ow)
    img = _unwindow(np.ascontiguousarray(six, dtype=np.float64), geo)
    return np.ascontiguousarray(np.moveaxis(img, 1, -1) if nhwc else img).astype(cols.dtype)


@register_kernel("Im2Col")
def im2col(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Im2Col forward (see the paragraph above)."""
    if len(inputs) != 1:
        raise _fail(op, inputs, "expects inputs [X]")
    return [_im2col(op, inputs, inputs[0])]


@register_kernel("Col2Im")
def col2im(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Col2Im forward: patches of ``cols`` summed into an image shaped like ``Z``."""
    if len(inputs) != 2:
        raise _fail(op, inputs, "expects inputs [cols, Z]")
    return [_col2im(op, inputs, inputs[0], inputs[1].shape)]


@register_gradient("Im2Col", op_schema=schema(1, 1, inplace=False), doc="image to patch columns")
def im2col_grad(m: GradientMaker) -> list[OperatorDef]:
    """``Col2Im([dY, X] → [dX])``."""
    return [m.make_op("Col2Im", [m.GO(0), m.I_shape(0)], [m.GI(0)])]


# ``Im2Col([dY] → [dcols])`` (Z, a shape reference, gets none).
col2im_grad = template("Im2Col", [GO(0)], [0])
register_gradient("Col2Im", op_schema=schema(2, 1, inplace=False), doc="patch columns to image")(
    col2im_grad
)
