"""RoIAlignRotated: RoIAlign over rotated boxes (Caffe2 ``roi_align_rotated_op.cc``).

Forward NumPy kernel, Caffe2 gradient maker and the gradient op's kernel, with the maths in
comments. The op is linear in X: each RoI is a (pooled_h·pooled_w) × (H·W) matrix of
bilinear sampling weights, so the gradient is that matrix transposed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from api_schemas import caffe2_pb2
from core.ops._args import get_bool, get_float, get_int, get_order
from core.ops._args import kernel_error as _fail
from core.registry import register_gradient, register_kernel, schema
from core.template import GO, I, template

OperatorDef = caffe2_pb2.OperatorDef


# ---------------------------------------------------------------------------------------------
# RoIAlignRotated: in [X (N, C, H, W) or NHWC, rois (R, 6) = (batch, cx, cy, w, h, angle°) or
# (R, 5) without batch], out Y (R, C, pooled_h, pooled_w) (NHWC: (R, ph, pw, C)); args
# spatial_scale (1), pooled_h / pooled_w (1), sampling_ratio (−1 = ceil(size / pooled)),
# aligned (0: boxes at least 1×1; 1: centre shifted by −0.5).
# Sample (iy, ix) of bin (p, q), in box coordinates about the centre:
#   yy = −h/2 + p·bh + (iy + ½)·bh/gh, xx = −w/2 + q·bw + (ix + ½)·bw/gw,
#   image point x = xx·cosθ + yy·sinθ + cx, y = yy·cosθ − xx·sinθ + cy (θ counter-clockwise);
# bilinear weights as RoIAlign (a point outside [−1, H] × [−1, W] contributes 0; coordinates
# clamped to ≥ 0 and to the last cell). Y = the bin's mean over its gh·gw samples.
# Grad RoIAlignRotatedGradient([X, rois, dY] → [dX]): dX[b] += Wᵀ·dY (rois get none).
# ---------------------------------------------------------------------------------------------


def _sample_weights(y: float, x: float, h: int, w: int) -> list[tuple[int, float]]:
    """Bilinear ``(flat index, weight)`` pairs of one sample point (Caffe2's edge rules)."""
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return []
    y, x = max(y, 0.0), max(x, 0.0)
    yl, xl = int(y), int(x)
    if yl >= h - 1:
        yl = yh = h - 1
        y = float(yl)
    else:
        yh = yl + 1
    if xl >= w - 1:
        xl = xh = w - 1
        x = float(xl)
    else:
        xh = xl + 1
    ly, lx = y - yl, x - xl
    hy, hx = 1.0 - ly, 1.0 - lx
    return [
        (yl * w + xl, hy * hx),
        (yl * w + xh, hy * lx),
        (yh * w + xl, ly * hx),
        (yh * w + xh, ly * lx),
    ]


def _rotated_setup(
    op: OperatorDef, inputs: Sequence[np.ndarray]
) -> tuple[str, np.ndarray, list[tuple[int, np.ndarray]], int, int]:
    """Return ``(order, X as (N, C, H·W), [(batch, W_r (ph·pw, H·W))], ph, pw)``."""
    x, rois = inputs[0], inputs[1]
    order = get_order(op)
    if x.ndim != 4:
        raise _fail(op, inputs, "X must be 4-D")
    if rois.ndim != 2 or rois.shape[1] not in (5, 6):
        raise _fail(op, inputs, "rois must be R×6 (batch, cx, cy, w, h, angle) or R×5")
    if not np.all(np.isfinite(rois)):
        raise _fail(op, inputs, "rois must be finite (a NaN or infinite coordinate found)")
    xc = np.moveaxis(x, -1, 1) if order == "NHWC" else x
    n, c, h, w = xc.shape
    ph, pw = get_int(op, "pooled_h", 1), get_int(op, "pooled_w", 1)
    if ph <= 0 or pw <= 0:
        raise _fail(op, inputs, "pooled_h and pooled_w must be positive")
    scale = get_float(op, "spatial_scale", 1.0)
    ratio = get_int(op, "sampling_ratio", -1)
    aligned = get_bool(op, "aligned", False)
    off = 0.5 if aligned else 0.0
    mats: list[tuple[int, np.ndarray]] = []
    for r in range(rois.shape[0]):
        row = [float(v) for v in rois[r]]
        b = int(row[0]) if rois.shape[1] == 6 else 0
        if not 0 <= b < n:
            raise _fail(op, inputs, f"RoI {r} has batch index {b} outside [0, {n})")
        cx, cy, rw, rh, angle = row[-5:]
        cx, cy, rw, rh = cx * scale - off, cy * scale - off, rw * scale, rh * scale
        if aligned and (rw < 0 or rh < 0):
            raise _fail(op, inputs, f"RoI {r} has a negative size")
        if not aligned:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        theta = angle * math.pi / 180.0
        cos_t, sin_t = math.cos(theta), math.sin(theta)
        bh, bw = rh / ph, rw / pw
        gh = ratio if ratio > 0 else math.ceil(rh / ph)
        gw = ratio if ratio > 0 else math.ceil(rw / pw)
        count = float(gh * gw)
        mat = np.zeros((ph * pw, h * w), dtype=np.float64)
        if count > 0:
            for p in range(ph):
                for iy in range(gh):
                    yy = -rh / 2.0 + p * bh + (iy + 0.5) * bh / gh
                    for q in range(pw):
                        for ix in range(gw):
                            xx = -rw / 2.0 + q * bw + (ix + 0.5) * bw / gw
                            px = xx * cos_t + yy * sin_t + cx
                            py = yy * cos_t - xx * sin_t + cy
                            for idx, wt in _sample_weights(py, px, h, w):
                                mat[p * pw + q, idx] += wt / count
        mats.append((b, mat))
    return order, xc.reshape(n, c, h * w).astype(np.float64), mats, ph, pw


@register_kernel("RoIAlignRotated")
def roi_align_rotated(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """RoIAlignRotated forward → ``[Y (R, C, pooled_h, pooled_w)]`` (NHWC: (R, ph, pw, C)).

    Raises:
        ExecutionError: bad shapes, batch indices or pooled sizes.
    """
    if len(inputs) != 2:
        raise _fail(op, inputs, "expects inputs [X, rois]")
    order, x3, mats, ph, pw = _rotated_setup(op, inputs)
    y = np.zeros((len(mats), x3.shape[1], ph, pw), dtype=np.float64)
    for r, (b, mat) in enumerate(mats):
        y[r] = (x3[b] @ mat.T).reshape(x3.shape[1], ph, pw)
    if order == "NHWC":
        y = np.moveaxis(y, 1, -1)
    return [np.ascontiguousarray(y).astype(inputs[0].dtype)]


# ``RoIAlignRotatedGradient([X, rois, dY] → [dX])``.
roi_align_rotated_grad = template("RoIAlignRotatedGradient", [I(0), I(1), GO(0)], [0])
register_gradient(
    "RoIAlignRotated", op_schema=schema(2, 1, inplace=False), doc="RoI align, rotated boxes"
)(roi_align_rotated_grad)


@register_kernel("RoIAlignRotatedGradient", gradient_op=True)
def roi_align_rotated_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """RoIAlignRotatedGradient: ``dX[b] += dY[r]·W_r`` (the transposed sampling matrix)."""
    if len(inputs) != 3:
        raise _fail(op, inputs, "expects inputs [X, rois, dY]")
    order, x3, mats, ph, pw = _rotated_setup(op, inputs)
    dy = np.moveaxis(inputs[2], -1, 1) if order == "NHWC" else inputs[2]
    c = x3.shape[1]
    if dy.shape != (len(mats), c, ph, pw):
        raise _fail(op, inputs, f"dY must have shape {(len(mats), c, ph, pw)}")
    dx = np.zeros_like(x3)
    for r, (b, mat) in enumerate(mats):
        dx[b] += dy[r].reshape(c, ph * pw).astype(np.float64) @ mat
    x = inputs[0]
    xc_shape = (x.shape[0], x.shape[-1]) + x.shape[1:-1] if order == "NHWC" else x.shape
    out = dx.reshape(xc_shape)
    if order == "NHWC":
        out = np.moveaxis(out, 1, -1)
    return [np.ascontiguousarray(out).astype(x.dtype)]
