"""Channel / space layout ops of vision nets: ChannelShuffle.

Forward NumPy kernel, Caffe2 gradient maker (``channel_shuffle_op.cc``) and the gradient
op's kernel, with the maths in comments.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from api_schemas import caffe2_pb2
from core.ops._args import get_int, get_order
from core.ops._args import kernel_error as _fail
from core.registry import GradientMaker, register_gradient, register_kernel, schema

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


@register_gradient(
    "ChannelShuffle", op_schema=schema(1, 1, inplace=False), doc="ShuffleNet channel shuffle"
)
def channel_shuffle_grad(m: GradientMaker) -> list[OperatorDef]:
    """``ChannelShuffleGradient([dY] → [dX])``."""
    return [m.make_op("ChannelShuffleGradient", [m.GO(0)], [m.GI(0)])]


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


@register_gradient(
    "SpaceToBatch", op_schema=schema(1, 1, inplace=False), doc="spatial blocks to batch"
)
def space_to_batch_grad(m: GradientMaker) -> list[OperatorDef]:
    """``BatchToSpace([dY] → [dX])``."""
    return [m.make_op("BatchToSpace", [m.GO(0)], [m.GI(0)])]


@register_gradient(
    "BatchToSpace", op_schema=schema(1, 1, inplace=False), doc="batch to spatial blocks"
)
def batch_to_space_grad(m: GradientMaker) -> list[OperatorDef]:
    """``SpaceToBatch([dY] → [dX])``."""
    return [m.make_op("SpaceToBatch", [m.GO(0)], [m.GI(0)])]
