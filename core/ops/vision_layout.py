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
