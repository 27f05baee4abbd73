"""Detection ops: RoIAlign, ResizeNearest and the non-differentiable proposal/NMS ops.

``GenerateProposals``, ``BBoxTransform`` and ``BoxWithNMSLimit`` are SHOULD_NOT_DO_GRADIENT in
Caffe2 (realnets README): reaching them with a gradient is an error. RoIAlign and
ResizeNearest have gradient makers and NumPy kernels (forward and gradient op), each written
as one paragraph with its maths (spec §5.4-style conventions; args are copied to the
gradient ops).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from api_schemas import caffe2_pb2
from core.ops._args import check_numel, get_bool, get_float, get_int, get_order
from core.ops._args import kernel_error as _fail
from core.registry import (
    GradientMaker,
    GradientStatus,
    register_gradient,
    register_kernel,
    register_op,
    schema,
)
from core.template import GO, I, template

OperatorDef = caffe2_pb2.OperatorDef



register_op(
    "GenerateProposals",
    status=GradientStatus.SHOULD_NOT_DIFFERENTIATE,
    doc="RPN proposal generation (no gradient: SHOULD_NOT_DO_GRADIENT)",
)
register_op(
    "BBoxTransform",
    status=GradientStatus.SHOULD_NOT_DIFFERENTIATE,
    doc="box regression decoding (no gradient: SHOULD_NOT_DO_GRADIENT)",
)
register_op(
    "BoxWithNMSLimit",
    status=GradientStatus.SHOULD_NOT_DIFFERENTIATE,
    doc="per-class NMS + detections limit (no gradient: SHOULD_NOT_DO_GRADIENT)",
)


# ---------------------------------------------------------------------------------------------
# RoIAlign: in [X (N, C, H, W), rois (R, 5) = (batch, x1, y1, x2, y2) or (R, 4)], out
# Y (R, C, pooled_h, pooled_w); args spatial_scale (1), pooled_h/pooled_w (1),
# sampling_ratio (−1 = adaptive ceil(roi_size / pooled)), aligned (0), order.
# Each bin averages g_h×g_w bilinear samples; bilinear weights are separable, so per RoI
#   Y[r] = Σ_{h,w} X[b, :, h, w] · Ay[p, h] · Ax[q, w] / count,
# with Ay/Ax the per-axis sampling weights summed over the bin's sample points (Caffe2 rules:
# a sample outside [−1, size] contributes 0, coordinates are clamped to ≥ 0 and the last cell).
# Y is linear in X. Grad RoIAlignGradient([X, rois, dY] → [dX]):
#   dX[b] += Σ_r dY[r, :, p, q] · Ay[p, h] · Ax[q, w] / count (rois get no gradient).
# ---------------------------------------------------------------------------------------------


def _axis_weights(start: float, bin_size: float, pooled: int, grid: int, size: int) -> np.ndarray:
    """Sampling weights (pooled, size) along one axis, summed over the ``grid`` points per bin."""
    pos = (
        start
        + np.arange(pooled, dtype=np.float64)[:, None] * bin_size
        + (np.arange(grid, dtype=np.float64)[None, :] + 0.5) * bin_size / grid
    ).reshape(-1)
    valid = (pos >= -1.0) & (pos <= size)
    pos = np.maximum(pos, 0.0)
    low = np.floor(pos).astype(np.int64)
    edge = low >= size - 1
    low = np.where(edge, size - 1, low)
    high = np.where(edge, size - 1, low + 1)
    pos = np.where(edge, low.astype(np.float64), pos)
    frac = pos - low
    rows = np.repeat(np.arange(pooled), grid)
    w = np.zeros((pooled, size), dtype=np.float64)
    np.add.at(w, (rows, low), (1.0 - frac) * valid)
    np.add.at(w, (rows, high), frac * valid)
    return w


def _roi_align_setup(
    op: OperatorDef, inputs: Sequence[np.ndarray]
) -> tuple[str, np.ndarray, list[tuple[int, np.ndarray, np.ndarray, float]], int, int]:
    """Return ``(order, X_nchw, [(batch, Ay, Ax, count) per RoI], pooled_h, pooled_w)``."""
    x, rois = inputs[0], inputs[1]
    order = get_order(op)
    if x.ndim != 4:
        raise _fail(op, inputs, "X must be 4-D")
    if rois.ndim != 2 or rois.shape[1] not in (4, 5):
        raise _fail(op, inputs, "rois must be R×5 (batch, x1, y1, x2, y2) or R×4")
    xc = np.moveaxis(x, -1, 1) if order == "NHWC" else x
    n, _, h, w = xc.shape
    scale = get_float(op, "spatial_scale", 1.0)
    ph, pw = get_int(op, "pooled_h", 1), get_int(op, "pooled_w", 1)
    ratio = get_int(op, "sampling_ratio", -1)
    aligned = get_bool(op, "aligned", False)
    if ph <= 0 or pw <= 0:
        raise _fail(op, inputs, "pooled_h and pooled_w must be positive")
    # (before the per-RoI interpolation matrices and the output are built)
    check_numel((rois.shape[0], xc.shape[1], ph, pw), op)
    check_numel((rois.shape[0], ph * h + pw * w), op)
    offset = 0.5 if aligned else 0.0
    per_roi: list[tuple[int, np.ndarray, np.ndarray, float]] = []
    for r in range(rois.shape[0]):
        row = rois[r].astype(np.float64)
        b = int(row[0]) if rois.shape[1] == 5 else 0
        if not 0 <= b < n:
            raise _fail(op, inputs, f"RoI {r} has batch index {b} outside [0, {n})")
        x1, y1, x2, y2 = (float(v) * scale - offset for v in row[-4:])
        rw, rh = x2 - x1, y2 - y1
        if not aligned:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        gh = ratio if ratio > 0 else math.ceil(rh / ph)
        gw = ratio if ratio > 0 else math.ceil(rw / pw)
        gh, gw = max(gh, 1), max(gw, 1)
        ay = _axis_weights(y1, rh / ph, ph, gh, h)
        ax = _axis_weights(x1, rw / pw, pw, gw, w)
        per_roi.append((b, ay, ax, float(max(gh * gw, 1))))
    return order, xc, per_roi, ph, pw


@register_kernel("RoIAlign")
def roi_align(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """RoIAlign forward → ``[Y (R, C, pooled_h, pooled_w)]`` (NHWC: (R, ph, pw, C)).

    Raises:
        ExecutionError: bad shapes, batch indices or pooled sizes.
    """
    if len(inputs) != 2:
        raise _fail(op, inputs, "expects inputs [X, rois]")
    order, xc, per_roi, ph, pw = _roi_align_setup(op, inputs)
    y = np.zeros((len(per_roi), xc.shape[1], ph, pw), dtype=np.float64)
    for r, (b, ay, ax, count) in enumerate(per_roi):
        y[r] = np.einsum("chw,ph,qw->cpq", xc[b], ay, ax, optimize=True) / count
    if order == "NHWC":
        y = np.moveaxis(y, 1, -1)
    return [np.ascontiguousarray(y).astype(inputs[0].dtype)]


# Caffe2 GetRoIAlignGradient: ``RoIAlignGradient([X, rois, dY] → [dX])``.
roi_align_grad = template("RoIAlignGradient", [I(0), I(1), GO(0)], [0])
register_gradient("RoIAlign", op_schema=schema(2, 1, inplace=False), doc="RoI align pooling")(
    roi_align_grad
)


@register_kernel("RoIAlignGradient", gradient_op=True)
def roi_align_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """RoIAlignGradient([X, rois, dY] → [dX]): scatter of dY with the bilinear weights."""
    if len(inputs) != 3:
        raise _fail(op, inputs, "expects inputs [X, rois, dY]")
    order, xc, per_roi, ph, pw = _roi_align_setup(op, inputs)
    dy = np.moveaxis(inputs[2], -1, 1) if order == "NHWC" else inputs[2]
    if dy.shape != (len(per_roi), xc.shape[1], ph, pw):
        raise _fail(op, inputs, f"dY must have shape {(len(per_roi), xc.shape[1], ph, pw)}")
    dx = np.zeros(xc.shape, dtype=np.float64)
    for r, (b, ay, ax, count) in enumerate(per_roi):
        dx[b] += np.einsum("cpq,ph,qw->chw", dy[r], ay, ax, optimize=True) / count
    if order == "NHWC":
        dx = np.moveaxis(dx, 1, -1)
    return [np.ascontiguousarray(dx).astype(inputs[0].dtype)]


# ---------------------------------------------------------------------------------------------
# ResizeNearest: X (N, C, H, W) (or NHWC), args width_scale/height_scale (1.0), or a second
# input scales = [height_scale, width_scale]. Output H' = int(H·hs), W' = int(W·ws);
#   Y[.., y, x] = X[.., iy(y), ix(x)], iy(y) = min(int(y / hs), H − 1) (same for x).
# Grad ResizeNearestGradient([dY, X(, scales)] → [dX]): dX[.., i, j] = Σ_{iy(y)=i, ix(x)=j} dY.
# ---------------------------------------------------------------------------------------------


def _resize_setup(
    op: OperatorDef, inputs: Sequence[np.ndarray], x: np.ndarray, scales: np.ndarray | None
) -> tuple[str, np.ndarray, np.ndarray, np.ndarray]:
    """Return ``(order, X_nchw, iy, ix)``."""
    order = get_order(op)
    if x.ndim != 4:
        raise _fail(op, inputs, "X must be 4-D")
    if scales is not None:
        if scales.size != 2:
            raise _fail(op, inputs, "scales must hold [height_scale, width_scale]")
        hs, ws = float(scales.reshape(-1)[0]), float(scales.reshape(-1)[1])
    else:
        hs, ws = get_float(op, "height_scale", 1.0), get_float(op, "width_scale", 1.0)
    if hs <= 0 or ws <= 0:
        raise _fail(op, inputs, f"scales must be positive, got {hs}, {ws}")
    xc = np.moveaxis(x, -1, 1) if order == "NHWC" else x
    h, w = xc.shape[2:]
    ho, wo = int(h * hs), int(w * ws)
    if ho <= 0 or wo <= 0:
        raise _fail(op, inputs, f"empty output {ho}×{wo}")
    iy = np.minimum((np.arange(ho) / hs).astype(np.int64), h - 1)
    ix = np.minimum((np.arange(wo) / ws).astype(np.int64), w - 1)
    return order, xc, iy, ix


@register_kernel("ResizeNearest")
def resize_nearest(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """ResizeNearest forward: nearest-neighbour upsampling by height/width scales.

    Raises:
        ExecutionError: non-4-D X, non-positive scales or an empty output.
    """
    scales = inputs[1] if len(inputs) > 1 else None
    order, xc, iy, ix = _resize_setup(op, inputs, inputs[0], scales)
    check_numel((*xc.shape[:2], len(iy), len(ix)), op)  # (before the output is built)
    y = xc[:, :, iy[:, None], ix[None, :]]
    if order == "NHWC":
        y = np.moveaxis(y, 1, -1)
    return [np.ascontiguousarray(y)]


@register_gradient(
    "ResizeNearest", op_schema=schema((1, 2), 1, inplace=False), doc="nearest upsampling"
)
def resize_nearest_grad(m: GradientMaker) -> list[OperatorDef]:
    """``ResizeNearestGradient([dY, X(, scales)] → [dX])``."""
    ins = [m.GO(0), m.I(0)] + ([m.I(1)] if len(m.op.input) == 2 else [])
    return [m.make_op("ResizeNearestGradient", ins, [m.GI(0)])]


@register_kernel("ResizeNearestGradient", gradient_op=True)
def resize_nearest_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """ResizeNearestGradient([dY, X(, scales)] → [dX]): sum dY over each source pixel."""
    if len(inputs) not in (2, 3):
        raise _fail(op, inputs, "expects inputs [dY, X(, scales)]")
    scales = inputs[2] if len(inputs) == 3 else None
    order, xc, iy, ix = _resize_setup(op, inputs, inputs[1], scales)
    dy = np.moveaxis(inputs[0], -1, 1) if order == "NHWC" else inputs[0]
    if dy.shape != xc.shape[:2] + (iy.size, ix.size):
        raise _fail(op, inputs, f"dY must have shape {xc.shape[:2] + (iy.size, ix.size)}")
    # One-hot source maps Ry[y, i] = [iy(y) = i], Rx[x, j] = [ix(x) = j]: dX = Ryᵀ·dY·Rx.
    ry = (iy[:, None] == np.arange(xc.shape[2])[None, :]).astype(np.float64)
    rx = (ix[:, None] == np.arange(xc.shape[3])[None, :]).astype(np.float64)
    dx = np.einsum("ncyx,yh,xw->nchw", dy, ry, rx, optimize=True)
    if order == "NHWC":
        dx = np.moveaxis(dx, 1, -1)
    return [np.ascontiguousarray(dx).astype(inputs[1].dtype)]
