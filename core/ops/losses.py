"""Loss ops: SoftmaxWithLoss, LabelCrossEntropy, AveragedLoss, SquaredL2Distance (spec §5.5).

Each op is one paragraph: forward NumPy kernel, Caffe2 gradient maker and the gradient op's
kernel, with the maths in comments. Scalar losses are 0-d arrays of the input's dtype.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from api_schemas import caffe2_pb2
from core.errors import GradientError
from core.ops._args import flatten_2d, get_bool, get_float, get_int
from core.ops._args import kernel_error as _fail
from core.ops.nn import softmax_rows
from core.registry import (
    GradientMaker,
    register_gradient,
    register_kernel,
    schema,
)
from core.template import GO, I, template

OperatorDef = caffe2_pb2.OperatorDef

#: Caffe2's floor on probabilities before taking a log (``kLOG_THRESHOLD``).
LOG_THRESHOLD = 1e-20


# ---------------------------------------------------------------------------------------------
# SoftmaxWithLoss: in [logits X, labels(, weights)], out [P, avg_loss]; args scale (1.0),
# label_prob (0), axis (1), average_by_batch_size (0). X as N×D at `axis`, P = softmax(X).
#   loss = scale · Σ_i w_i·ℓ_i / W, ℓ_i = −log P[i, label_i] (label_prob: −Σ_j label_ij log P_ij),
#   W = Σ_i w_i (N when average_by_batch_size; w_i = 1 without weights); loss = 0 when W = 0.
# Grad SoftmaxWithLossGradient([X, labels, (weights), P, d_loss] → [dX]), uses GO(1) only:
#   dX = (P − onehot(label)) · w_i · scale · d_loss / W (label_prob: P − label, as Caffe2,
#   which assumes label rows sum to 1).
# ---------------------------------------------------------------------------------------------


def _swl_parts(
    op: OperatorDef,
    inputs: Sequence[np.ndarray],
    x: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Return ``(X2, target N×D, w (N,), denominator W)``, validating shapes."""
    axis = get_int(op, "axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis < x.ndim:
        raise _fail(op, inputs, f"axis {get_int(op, 'axis', 1)} out of range")
    x2 = flatten_2d(x, axis)
    n, d = x2.shape
    if get_bool(op, "label_prob", False):
        if labels.size != n * d:
            raise _fail(op, inputs, f"label_prob labels must have {n}×{d} elements")
        target = labels.reshape(n, d).astype(x.dtype)
    else:
        if labels.size != n or not np.issubdtype(labels.dtype, np.integer):
            raise _fail(op, inputs, f"labels must be {n} integers")
        lab = labels.reshape(n).astype(np.int64)
        if n and (lab.min() < 0 or lab.max() >= d):
            raise _fail(op, inputs, f"labels must be in [0, {d})")
        target = np.zeros((n, d), dtype=x.dtype)
        target[np.arange(n), lab] = 1.0
    if weights is not None:
        if weights.size != n:
            raise _fail(op, inputs, f"weights must have {n} elements")
        w = weights.reshape(n).astype(x.dtype)
    else:
        w = np.ones(n, dtype=x.dtype)
    denom = float(n) if get_bool(op, "average_by_batch_size", False) else float(w.sum())
    return x2, target, w, denom


@register_kernel("SoftmaxWithLoss")
def softmax_with_loss(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """SoftmaxWithLoss forward → ``[P (X's shape), avg_loss (0-d)]``.

    Raises:
        ExecutionError: wrong arity, label shape/dtype/range or weight shape.
    """
    if len(inputs) not in (2, 3):
        raise _fail(op, inputs, "expects inputs [X, labels(, weights)]")
    x = inputs[0]
    x2, target, w, denom = _swl_parts(
        op, inputs, x, inputs[1], inputs[2] if len(inputs) == 3 else None
    )
    p = softmax_rows(x2)
    per_row = -(target * np.log(np.maximum(p, LOG_THRESHOLD))).sum(axis=1)
    scale = get_float(op, "scale", 1.0)
    loss = scale * float((w * per_row).sum()) / denom if denom != 0.0 else 0.0
    return [p.reshape(x.shape).astype(x.dtype), np.array(loss, dtype=x.dtype)]


@register_gradient(
    "SoftmaxWithLoss", op_schema=schema((2, 3), 2, inplace=False), doc="softmax + cross entropy"
)
def softmax_with_loss_grad(m: GradientMaker) -> list[OperatorDef]:
    """``SoftmaxWithLossGradient([X, labels, (weights), P, d_loss] → [dX])``.

    Like Caffe2's, the gradient op uses only the loss gradient. A gradient reaching the
    probabilities ``P`` would be dropped silently, so it is refused (breaker finding).

    Raises:
        GradientError: ``P`` has a gradient.
    """
    if m.has_go(0):
        raise GradientError(
            f"SoftmaxWithLoss's gradient uses only the gradient of its loss output "
            f"'{m.O(1)}'; the gradient that reaches its probabilities '{m.O(0)}' would be "
            "dropped. Compute the probabilities with a separate Softmax op for that use."
        )
    ins = [m.I(0), m.I(1), m.O(0), m.GO(1)]
    if len(m.op.input) == 3:
        ins.insert(2, m.I(2))
    return [m.make_op("SoftmaxWithLossGradient", ins, [m.GI(0)])]


@register_kernel("SoftmaxWithLossGradient", gradient_op=True)
def softmax_with_loss_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """SoftmaxWithLossGradient: ``dX = (P − target)·w·scale·d_loss / W``.

    Raises:
        ExecutionError: wrong arity or shapes.
    """
    if len(inputs) not in (4, 5):
        raise _fail(op, inputs, "expects inputs [X, labels, (weights), P, d_loss]")
    x, labels = inputs[0], inputs[1]
    weights = inputs[2] if len(inputs) == 5 else None
    p, d_loss = inputs[-2], inputs[-1]
    x2, target, w, denom = _swl_parts(op, inputs, x, labels, weights)
    if p.size != x2.size:
        raise _fail(op, inputs, "P must have X's size")
    if denom == 0.0:
        return [np.zeros_like(x)]
    coef = get_float(op, "scale", 1.0) * float(np.asarray(d_loss).reshape(-1)[0]) / denom
    dx = (p.reshape(x2.shape) - target) * w[:, None] * coef
    return [dx.reshape(x.shape).astype(x.dtype)]


# ---------------------------------------------------------------------------------------------
# LabelCrossEntropy: X (N×D probabilities, or D for N=1), label (N ints):
#   Y_i = −log(max(X[i, label_i], 1e−20)).
# Grad LabelCrossEntropyGradient([X, label, dY] → [dX]): zero except
#   dX[i, label_i] = −dY_i / max(X[i, label_i], 1e−20).
# ---------------------------------------------------------------------------------------------


def _lce_parts(op: OperatorDef, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    x, label = inputs[0], inputs[1]
    if x.ndim not in (1, 2):
        raise _fail(op, inputs, "X must be N×D or 1-D")
    x2 = x.reshape(1, -1) if x.ndim == 1 else x
    n, d = x2.shape
    if label.size != n or not np.issubdtype(label.dtype, np.integer):
        raise _fail(op, inputs, f"label must be {n} integers")
    lab = label.reshape(n).astype(np.int64)
    if n and (lab.min() < 0 or lab.max() >= d):
        raise _fail(op, inputs, f"labels must be in [0, {d})")
    return x2, lab


@register_kernel("LabelCrossEntropy")
def label_cross_entropy(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """LabelCrossEntropy forward: ``Y (N,) = −log(max(X[i, label_i], 1e−20))``."""
    if len(inputs) != 2:
        raise _fail(op, inputs, "expects inputs [X, label]")
    x2, lab = _lce_parts(op, inputs)
    picked = x2[np.arange(x2.shape[0]), lab]
    return [(-np.log(np.maximum(picked, LOG_THRESHOLD))).astype(inputs[0].dtype)]


# ``LabelCrossEntropyGradient([X, label, dY] → [dX])``.
label_cross_entropy_grad = template("LabelCrossEntropyGradient", [I(0), I(1), GO(0)], [0])
register_gradient(
    "LabelCrossEntropy", op_schema=schema(2, 1, inplace=False), doc="cross entropy vs labels"
)(label_cross_entropy_grad)


@register_kernel("LabelCrossEntropyGradient", gradient_op=True)
def label_cross_entropy_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """LabelCrossEntropyGradient: ``dX[i, label_i] = −dY_i / max(X[i, label_i], 1e−20)``."""
    if len(inputs) != 3:
        raise _fail(op, inputs, "expects inputs [X, label, dY]")
    x2, lab = _lce_parts(op, inputs)
    dy = inputs[2].reshape(-1)
    if dy.size != x2.shape[0]:
        raise _fail(op, inputs, f"dY must have {x2.shape[0]} elements")
    rows = np.arange(x2.shape[0])
    dx = np.zeros_like(x2)
    dx[rows, lab] = -dy / np.maximum(x2[rows, lab], LOG_THRESHOLD)
    return [dx.reshape(inputs[0].shape).astype(inputs[0].dtype)]


# ---------------------------------------------------------------------------------------------
# AveragedLoss: Y = mean(X) (0-d). Grad AveragedLossGradient([X, dY] → [dX]) = dY / X.size.
# ---------------------------------------------------------------------------------------------


@register_kernel("AveragedLoss")
def averaged_loss(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """AveragedLoss forward: 0-d mean of X (0 for an empty X)."""
    x = inputs[0]
    return [np.array(x.mean() if x.size else 0.0, dtype=x.dtype)]


@register_gradient("AveragedLoss", op_schema=schema(1, 1, inplace=False), doc="mean of X")
def averaged_loss_grad(m: GradientMaker) -> list[OperatorDef]:
    """``AveragedLossGradient([X, dY] → [dX])``."""
    return [m.make_op("AveragedLossGradient", [m.I_shape(0), m.GO(0)], [m.GI(0)])]


@register_kernel("AveragedLossGradient", gradient_op=True)
def averaged_loss_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """AveragedLossGradient: ``dX = dY / X.size`` everywhere."""
    if len(inputs) != 2 or inputs[1].size != 1:
        raise _fail(op, inputs, "expects inputs [X, dY] with a scalar dY")
    x, dy = inputs
    g = float(dy.reshape(-1)[0]) / max(x.size, 1)
    return [np.full(x.shape, g, dtype=x.dtype)]


# ---------------------------------------------------------------------------------------------
# SquaredL2Distance: X, Y as N×D (1-D: N×1), D_i = ½·Σ_j (X_ij − Y_ij)².
# Grad SquaredL2DistanceGradient([X, Y, dD] → [dX, dY]): dX = (X − Y)·dD[:, None], dY = −dX.
# ---------------------------------------------------------------------------------------------


def _l2_rows(op: OperatorDef, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, int]:
    x, y = inputs[0], inputs[1]
    if x.shape != y.shape:
        raise _fail(op, inputs, "X and Y must have the same shape")
    n = x.shape[0] if x.ndim > 0 else 1
    return flatten_2d(x - y, 1), n


@register_kernel("SquaredL2Distance")
def squared_l2_distance(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """SquaredL2Distance forward: ``D (N,) = ½ Σ_j (X − Y)²`` per row."""
    if len(inputs) != 2:
        raise _fail(op, inputs, "expects inputs [X, Y]")
    diff, _ = _l2_rows(op, inputs)
    return [(0.5 * (diff * diff).sum(axis=1)).astype(inputs[0].dtype)]


# ``SquaredL2DistanceGradient([X, Y, dD] → [dX, dY])``.
squared_l2_distance_grad = template("SquaredL2DistanceGradient", [I(0), I(1), GO(0)], [0, 1])
register_gradient(
    "SquaredL2Distance", op_schema=schema(2, 1, inplace=False), doc="½‖X − Y‖² per row"
)(squared_l2_distance_grad)


@register_kernel("SquaredL2DistanceGradient", gradient_op=True)
def squared_l2_distance_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """SquaredL2DistanceGradient: ``dX = (X − Y)·dD[:, None]``, ``dY = −dX``."""
    if len(inputs) != 3:
        raise _fail(op, inputs, "expects inputs [X, Y, dD]")
    diff, n = _l2_rows(op, inputs)
    dd = inputs[2].reshape(-1)
    if dd.size != n:
        raise _fail(op, inputs, f"dD must have {n} elements")
    dx = (diff * dd[:, None]).reshape(inputs[0].shape).astype(inputs[0].dtype)
    return [dx, (-dx).astype(inputs[1].dtype)]
