"""More pooling: LpPool and MaxPoolWithIndex, on the sliding-window primitives of
:mod:`core.ops.nn` (window tensors ``cols[n, c, k..., o...]`` and their adjoint).

Each op is one paragraph: forward NumPy kernel, Caffe2 gradient maker (``lp_pool_op.cc``,
``max_pool_with_index.cu``) and the gradient op's kernel. Window geometry (kernel, stride,
pads, ``legacy_pad``, ``global_pooling``) is resolved as for MaxPool (spec §5.4).
"""

from __future__ import annotations

import numpy as np

from api_schemas import caffe2_pb2
from core.ops._args import get_float
from core.ops._args import kernel_error as _fail
from core.ops.nn import (
    _expand_out,
    _from_nchw,
    _kernel_axes,
    _pad,
    _pool_setup,
    _to_nchw,
    _unwindow,
    _windows,
)
from core.registry import register_gradient, register_kernel, schema
from core.template import GO, I, O, template

OperatorDef = caffe2_pb2.OperatorDef


# ---------------------------------------------------------------------------------------------
# LpPool: Y = (Σ_window |x|^p)^(1/p), pads count as 0; arg p (2.0). Grad LpPoolGradient
# ([X, Y, dY] → [dX], Caffe2's GetPoolGradient): dX[x] = Σ_windows∋x dY·x·|x|^(p−2)/Y^(p−1)
# (0 where Y = 0).
# ---------------------------------------------------------------------------------------------


def _lp_p(op: OperatorDef, inputs: list[np.ndarray]) -> float:
    p = get_float(op, "p", 2.0)
    if p <= 0:
        raise _fail(op, inputs, f"p must be positive, got {p}")
    return p


@register_kernel("LpPool")
def lp_pool(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """LpPool forward: the p-norm of each window. X (N, C, *S) or NHWC → Y (N, C, *O)."""
    order, xc, geo = _pool_setup(op, inputs)
    p = _lp_p(op, inputs)
    cols = _windows(_pad(xc.astype(np.float64), geo, 0.0), geo)
    y = (np.abs(cols) ** p).sum(axis=_kernel_axes(geo)) ** (1.0 / p)
    return [np.ascontiguousarray(_from_nchw(y, order)).astype(inputs[0].dtype)]


# Caffe2 GetPoolGradient: ``LpPoolGradient([X, Y, dY] → [dX])``, args copied.
lp_pool_grad = template("LpPoolGradient", [I(0), O(0), GO(0)], [0])
register_gradient("LpPool", op_schema=schema(1, 1, inplace=False), doc="Lp-norm pooling")(
    lp_pool_grad
)


@register_kernel("LpPoolGradient", gradient_op=True)
def lp_pool_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """LpPoolGradient: ``dX = Σ_windows dY·x·|x|^(p−2)/Y^(p−1)``."""
    if len(inputs) != 3:
        raise _fail(op, inputs, "expects inputs [X, Y, dY]")
    order, xc, geo = _pool_setup(op, inputs)
    p = _lp_p(op, inputs)
    y, dy = _to_nchw(inputs[1], order), _to_nchw(inputs[2], order)
    if y.shape != xc.shape[:2] + geo.out_size or dy.shape != y.shape:
        raise _fail(op, inputs, f"Y and dY must have shape {xc.shape[:2] + geo.out_size}")
    cols = _windows(_pad(xc.astype(np.float64), geo, 0.0), geo)
    y64 = y.astype(np.float64)
    scale = np.where(y64 > 0, dy / np.where(y64 > 0, y64, 1.0) ** (p - 1), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        local = np.where(cols != 0, cols * np.abs(cols) ** (p - 2), 0.0)
    dx = _unwindow(local * _expand_out(scale, geo), geo)
    return [np.ascontiguousarray(_from_nchw(dx, order)).astype(inputs[0].dtype)]


# ---------------------------------------------------------------------------------------------
# MaxPoolWithIndex (2-D, NCHW; CUDA-only upstream): out [Y, mask], mask (flat, Y.size int32)
# = index h·W + w of each window's first maximum (pads never win).
# Grad MaxPoolWithIndexGradient([X, dY, mask] → [dX]): dY added at each window's mask index.
# ---------------------------------------------------------------------------------------------


def _mpwi_setup(op: OperatorDef, inputs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(Y, mask shaped like Y)`` of the forward op."""
    if inputs[0].ndim != 4:
        raise _fail(op, inputs, "MaxPoolWithIndex supports 4-D NCHW tensors only")
    _, xc, geo = _pool_setup(op, [inputs[0]])
    h, w = xc.shape[2:]
    pos = np.arange(h * w, dtype=np.int64).reshape(1, 1, h, w).astype(np.float64)
    vals = _windows(_pad(xc.astype(np.float64), geo, -np.inf), geo)
    where = _windows(_pad(pos, geo, -1.0), geo)
    k = len(geo.kernel)
    flat = vals.reshape(vals.shape[:2] + (-1,) + vals.shape[2 + k :])
    first = flat.argmax(axis=2)  # argmax returns the first maximum in window order
    y = np.take_along_axis(flat, first[:, :, None], axis=2)[:, :, 0]
    wflat = np.broadcast_to(where, vals.shape[:2] + where.shape[2:]).reshape(flat.shape)
    mask = np.take_along_axis(wflat, first[:, :, None], axis=2)[:, :, 0]
    return y, mask.astype(np.int32)


@register_kernel("MaxPoolWithIndex")
def max_pool_with_index(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """MaxPoolWithIndex forward → ``[Y (N, C, Ho, Wo), mask (Y.size,) int32]``."""
    if len(inputs) != 1:
        raise _fail(op, inputs, "expects inputs [X]")
    y, mask = _mpwi_setup(op, inputs)
    return [y.astype(inputs[0].dtype), mask.reshape(-1)]


# ``MaxPoolWithIndexGradient([X, dY, mask] → [dX])``.
max_pool_with_index_grad = template("MaxPoolWithIndexGradient", [I(0), GO(0), O(1)], [0])
register_gradient(
    "MaxPoolWithIndex",
    op_schema=schema(1, 2, inplace=False),
    doc="max pooling that outputs its argmax mask",
)(max_pool_with_index_grad)


@register_kernel("MaxPoolWithIndexGradient", gradient_op=True)
def max_pool_with_index_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """MaxPoolWithIndexGradient: ``dX.flat[n, c, mask] += dY``."""
    if len(inputs) != 3:
        raise _fail(op, inputs, "expects inputs [X, dY, mask]")
    x, dy, mask = inputs
    if x.ndim != 4 or dy.ndim != 4 or dy.shape[:2] != x.shape[:2] or mask.size != dy.size:
        raise _fail(op, inputs, "X and dY must be 4-D NCHW and mask have dY's size")
    n, c, h, w = x.shape
    m = mask.reshape(dy.shape).astype(np.int64)
    if m.size and (m.min() < 0 or m.max() >= h * w):
        raise _fail(op, inputs, "mask indices must lie in the H·W plane")
    dx = np.zeros((n, c, h * w), dtype=np.float64)
    ni, ci = np.meshgrid(np.arange(n), np.arange(c), indexing="ij")
    ni = np.broadcast_to(ni[:, :, None, None], dy.shape)
    ci = np.broadcast_to(ci[:, :, None, None], dy.shape)
    np.add.at(dx, (ni, ci, m), dy.astype(np.float64))
    return [dx.reshape(x.shape).astype(x.dtype)]
