"""Detectron training losses (Caffe2 ``modules/detectron``): SmoothL1Loss,
SelectSmoothL1Loss, SigmoidCrossEntropyLoss, SigmoidFocalLoss, SoftmaxFocalLoss.

Upstream these ops have CUDA kernels only; netgrad's NumPy kernels follow the CUDA maths.
Each op is one paragraph: forward kernel, Caffe2 gradient maker (gradient-op type, inputs,
outputs) and the gradient op's kernel. Every loss is a 0-d array; targets, labels, weights
and normalisers get no gradient, as in Caffe2.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from api_schemas import caffe2_pb2
from core.ops._args import get_bool, get_float, get_int
from core.ops._args import kernel_error as _fail
from core.ops.losses_extra import sigmoid, softplus
from core.registry import GradientMaker, register_gradient, register_kernel, schema
from core.template import GO, I, template

OperatorDef = caffe2_pb2.OperatorDef

#: ``FLT_MIN``: the floor of probabilities before a log in the focal-loss kernels.
FLT_MIN = float(np.finfo(np.float32).tiny)


def _arity(op: OperatorDef, inputs: Sequence[np.ndarray], lo: int, hi: int, what: str) -> None:
    if not lo <= len(inputs) <= hi:
        raise _fail(op, inputs, f"expects inputs [{what}]")


def _scalar(op: OperatorDef, inputs: Sequence[np.ndarray], a: np.ndarray, name: str) -> float:
    if a.size != 1:
        raise _fail(op, inputs, f"{name} must have one element")
    return float(a.reshape(-1)[0])


def _huber(v: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray]:
    """Smooth L1 ``(f, f')``: ``½v²/β`` for ``|v| < β``, else ``|v| − ½β``."""
    a = np.abs(v)
    inside = a < beta
    return (
        np.where(inside, 0.5 * v * v / beta, a - 0.5 * beta),
        np.where(inside, v / beta, np.sign(v)),
    )


# ---------------------------------------------------------------------------------------------
# SmoothL1Loss: in [Y_hat, Y, alpha_in, alpha_out] (same size, N = dim 0), args beta (1.0),
# scale (1.0): loss = scale/N · Σ alpha_out·huber(alpha_in·(Y_hat − Y)).
# Grad SmoothL1LossGradient([Y_hat, Y, alpha_in, alpha_out, d_loss] → [dY_hat]):
#   dY_hat = scale/N · d_loss · alpha_out·alpha_in·huber'(alpha_in·(Y_hat − Y)).
# ---------------------------------------------------------------------------------------------


def _sl1(op: OperatorDef, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, float]:
    # As upstream: equal sizes (shapes may differ) and, for Y, the same dim 0.
    yh0 = inputs[0]
    for i in (1, 2, 3):
        if inputs[i].size != yh0.size:
            raise _fail(op, inputs, "Y, alpha_in and alpha_out must have Y_hat's size")
    if yh0.ndim and (inputs[1].ndim == 0 or inputs[1].shape[0] != yh0.shape[0]):
        raise _fail(op, inputs, "Y_hat and Y must have the same dim 0")
    yh, y, ai, ao = (a.astype(np.float64).reshape(yh0.shape) for a in inputs[:4])
    beta = get_float(op, "beta", 1.0)
    if beta <= 0:
        raise _fail(op, inputs, f"beta must be positive, got {beta}")
    f, fp = _huber(ai * (yh - y), beta)
    n = int(yh0.shape[0]) if yh0.ndim else 1
    return ao * f, ao * ai * fp, get_float(op, "scale", 1.0) / max(n, 1)


@register_kernel("SmoothL1Loss")
def smooth_l1_loss(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """SmoothL1Loss forward → ``[loss (0-d)]``."""
    _arity(op, inputs, 4, 4, "Y_hat, Y, alpha_in, alpha_out")
    f, _, coef = _sl1(op, inputs)
    return [np.array(coef * float(f.sum()), dtype=inputs[0].dtype)]


# ``SmoothL1LossGradient([Y_hat, Y, alpha_in, alpha_out, d_loss] → [dY_hat])``.
smooth_l1_loss_grad = template("SmoothL1LossGradient", [I(0), I(1), I(2), I(3), GO(0)], [0])
register_gradient(
    "SmoothL1Loss", op_schema=schema(4, 1, inplace=False), doc="Detectron smooth L1 box loss"
)(smooth_l1_loss_grad)


@register_kernel("SmoothL1LossGradient", gradient_op=True)
def smooth_l1_loss_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """SmoothL1LossGradient kernel (see the paragraph above)."""
    _arity(op, inputs, 5, 5, "Y_hat, Y, alpha_in, alpha_out, d_loss")
    _, fp, coef = _sl1(op, inputs)
    d = _scalar(op, inputs, inputs[4], "d_loss")
    return [(coef * d * fp).astype(inputs[0].dtype)]


# ---------------------------------------------------------------------------------------------
# SelectSmoothL1Loss: in [Y_hat (N, D, H, W), Y (M, 4), L (M, 4) locations (n, c, y, x),
# S (count)], args beta (1.0), scale (1.0). For box i and j in 0..3 the prediction is
# Y_hat[n, c + j, y, x]: loss = scale · Σ huber(Y_hat[...] − Y[i, j]) / max(S, 1).
# Grad SelectSmoothL1LossGradient([Y_hat, Y, L, S, d_loss] → [dY_hat]): scatter of
# scale·d_loss·huber'/max(S, 1) at the selected positions, 0 elsewhere. Upstream writes one
# value per position (duplicates race), so duplicate positions are refused here.
# ---------------------------------------------------------------------------------------------


def _ssl1_index(
    op: OperatorDef, inputs: Sequence[np.ndarray]
) -> tuple[tuple[np.ndarray, ...], float]:
    yh, y, loc = inputs[0], inputs[1], inputs[2]
    if yh.ndim != 4 or y.ndim != 2 or y.shape[1] != 4 or loc.shape != y.shape:
        raise _fail(op, inputs, "Y_hat must be (N, D, H, W), Y and L (M, 4)")
    li = loc.astype(np.int64)
    n, c, yy, xx = (np.repeat(li[:, k], 4) for k in range(4))
    c = c + np.tile(np.arange(4), y.shape[0])
    bounds = yh.shape
    for arr, hi in zip((n, c, yy, xx), bounds, strict=True):
        if arr.size and (arr.min() < 0 or arr.max() >= hi):
            raise _fail(op, inputs, "a location in L lies outside Y_hat")
    flat = np.ravel_multi_index((n, c, yy, xx), bounds) if n.size else n
    if np.unique(flat).size != flat.size:
        raise _fail(op, inputs, "L selects one Y_hat position twice")
    norm = max(_scalar(op, inputs, inputs[3], "S"), 1.0)
    return (n, c, yy, xx), norm


@register_kernel("SelectSmoothL1Loss")
def select_smooth_l1_loss(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """SelectSmoothL1Loss forward → ``[loss (0-d)]``."""
    _arity(op, inputs, 4, 4, "Y_hat, Y, L, S")
    if inputs[1].size == 0:
        return [np.array(0.0, dtype=inputs[0].dtype)]
    idx, norm = _ssl1_index(op, inputs)
    v = inputs[0].astype(np.float64)[idx] - inputs[1].astype(np.float64).reshape(-1)
    f, _ = _huber(v, get_float(op, "beta", 1.0))
    return [np.array(get_float(op, "scale", 1.0) * float(f.sum()) / norm, dtype=inputs[0].dtype)]


# ``SelectSmoothL1LossGradient([Y_hat, Y, L, S, d_loss] → [dY_hat])``.
select_smooth_l1_loss_grad = template(
    "SelectSmoothL1LossGradient", [I(0), I(1), I(2), I(3), GO(0)], [0]
)
register_gradient(
    "SelectSmoothL1Loss",
    op_schema=schema(4, 1, inplace=False),
    doc="Detectron smooth L1 on selected box locations",
)(select_smooth_l1_loss_grad)


@register_kernel("SelectSmoothL1LossGradient", gradient_op=True)
def select_smooth_l1_loss_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """SelectSmoothL1LossGradient kernel (see the paragraph above)."""
    _arity(op, inputs, 5, 5, "Y_hat, Y, L, S, d_loss")
    dx = np.zeros(inputs[0].shape, dtype=np.float64)
    if inputs[1].size:
        idx, norm = _ssl1_index(op, inputs)
        v = inputs[0].astype(np.float64)[idx] - inputs[1].astype(np.float64).reshape(-1)
        _, fp = _huber(v, get_float(op, "beta", 1.0))
        d = _scalar(op, inputs, inputs[4], "d_loss")
        dx[idx] = get_float(op, "scale", 1.0) * d * fp / norm
    return [dx.astype(inputs[0].dtype)]


# ---------------------------------------------------------------------------------------------
# SigmoidCrossEntropyLoss: in [X, targets (ints, same shape; −1 = ignore)], args scale (1.0),
# normalize (1): loss = scale · Σ_{t ≠ −1} (softplus(x) − t·x) / norm, norm = the count of
# t ≠ −1 (at least 1) when normalize, else 1 (a plain sum).
# Grad SigmoidCrossEntropyLossGradient([X, targets, d_loss] → [dX]):
#   dX = scale·d_loss·(σ(x) − t)·[t ≠ −1] / norm.
# ---------------------------------------------------------------------------------------------


def _scel(
    op: OperatorDef, inputs: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    x, t = inputs[0], inputs[1]
    if t.shape != x.shape:
        raise _fail(op, inputs, "targets must have X's shape")
    care = (t != -1).astype(np.float64)
    # normalize: the count of cared-for targets (Caffe2 floors it at 1e−5; it is an integer)
    norm = max(float(care.sum()), 1.0) if get_bool(op, "normalize", True) else 1.0
    return x.astype(np.float64), t.astype(np.float64), care, get_float(op, "scale", 1.0) / norm


@register_kernel("SigmoidCrossEntropyLoss")
def sigmoid_cross_entropy_loss(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """SigmoidCrossEntropyLoss forward → ``[loss (0-d)]``."""
    _arity(op, inputs, 2, 2, "X, targets")
    x, t, care, coef = _scel(op, inputs)
    return [np.array(coef * float((care * (softplus(x) - t * x)).sum()), dtype=inputs[0].dtype)]


# ``SigmoidCrossEntropyLossGradient([X, targets, d_loss] → [dX])``.
sigmoid_cross_entropy_loss_grad = template(
    "SigmoidCrossEntropyLossGradient", [I(0), I(1), GO(0)], [0]
)
register_gradient(
    "SigmoidCrossEntropyLoss",
    op_schema=schema(2, 1, inplace=False),
    doc="Detectron RPN objectness loss",
)(sigmoid_cross_entropy_loss_grad)


@register_kernel("SigmoidCrossEntropyLossGradient", gradient_op=True)
def sigmoid_cross_entropy_loss_gradient(
    op: OperatorDef, inputs: list[np.ndarray]
) -> list[np.ndarray]:
    """SigmoidCrossEntropyLossGradient: ``scale·d_loss·(σ(x) − t)·[t ≠ −1]/norm``."""
    _arity(op, inputs, 3, 3, "X, targets, d_loss")
    x, t, care, coef = _scel(op, inputs)
    d = _scalar(op, inputs, inputs[2], "d_loss")
    return [(coef * d * care * (sigmoid(x) - t)).astype(inputs[0].dtype)]


# ---------------------------------------------------------------------------------------------
# SigmoidFocalLoss: in [X (N, A·C, H, W) logits, T (N, A, H, W) ints, wp (1)], args scale (1),
# gamma (1), alpha (0.25), num_classes (80). For channel a·C + d the class is d + 1:
#   c1 = [t = d + 1], c0 = [t ≠ −1 and t ≠ d + 1], p = σ(x), Np = max(wp, 1),
#   loss = −scale/Np · Σ (α·c1·(1 − p)^γ·log max(p, FLT_MIN) + (1 − α)·c0·p^γ·log(1 − p)).
# Grad SigmoidFocalLossGradient([X, T, wp, d_loss] → [dX]):
#   dX = −scale·d_loss/Np · (α·c1·(1 − p)^γ·(1 − p − γ·p·log p)
#                            + (1 − α)·c0·p^γ·(γ·(1 − p)·log(1 − p) − p)).
# ---------------------------------------------------------------------------------------------


def _focal_setup(
    op: OperatorDef, inputs: Sequence[np.ndarray], default_classes: int
) -> tuple[np.ndarray, np.ndarray, int, float]:
    """Return ``(X as (N, A, C, H, W), T, C, scale/Np)``."""
    x, t = inputs[0], inputs[1]
    c = get_int(op, "num_classes", default_classes)
    if x.ndim != 4 or c <= 0 or x.shape[1] % c:
        raise _fail(op, inputs, f"X must be (N, A·{c}, H, W) (num_classes = {c})")
    a = x.shape[1] // c
    if t.shape != (x.shape[0], a) + x.shape[2:]:
        raise _fail(op, inputs, f"T must have shape {(x.shape[0], a) + x.shape[2:]}")
    np_ = max(_scalar(op, inputs, inputs[2], "normalizer"), 1.0)
    x5 = x.astype(np.float64).reshape(x.shape[0], a, c, *x.shape[2:])
    return x5, t.astype(np.int64), c, get_float(op, "scale", 1.0) / np_


def _sigmoid_focal_parts(
    op: OperatorDef, inputs: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    x5, t, c, coef = _focal_setup(op, inputs, 80)
    cls = np.arange(1, c + 1).reshape(1, 1, c, 1, 1)
    tt = t[:, :, None]
    c1 = (tt == cls).astype(np.float64)
    c0 = ((tt != -1) & (tt != cls)).astype(np.float64)
    return x5, c1, c0, sigmoid(x5), coef


@register_kernel("SigmoidFocalLoss")
def sigmoid_focal_loss(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """SigmoidFocalLoss forward → ``[loss (0-d)]`` (RetinaNet)."""
    _arity(op, inputs, 3, 3, "X, T, wp")
    x5, c1, c0, p, coef = _sigmoid_focal_parts(op, inputs)
    g, al = get_float(op, "gamma", 1.0), get_float(op, "alpha", 0.25)
    term1 = (1 - p) ** g * np.log(np.maximum(p, FLT_MIN))
    term2 = p**g * -softplus(x5)  # p^γ·log(1 − p)
    total = -(al * c1 * term1 + (1 - al) * c0 * term2).sum()
    return [np.array(coef * float(total), dtype=inputs[0].dtype)]


# ``SigmoidFocalLossGradient([X, T, wp, d_loss] → [dX])``.
sigmoid_focal_loss_grad = template("SigmoidFocalLossGradient", [I(0), I(1), I(2), GO(0)], [0])
register_gradient(
    "SigmoidFocalLoss", op_schema=schema(3, 1, inplace=False), doc="RetinaNet sigmoid focal loss"
)(sigmoid_focal_loss_grad)


@register_kernel("SigmoidFocalLossGradient", gradient_op=True)
def sigmoid_focal_loss_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """SigmoidFocalLossGradient kernel (see the paragraph above)."""
    _arity(op, inputs, 4, 4, "X, T, wp, d_loss")
    x5, c1, c0, p, coef = _sigmoid_focal_parts(op, inputs)
    g, al = get_float(op, "gamma", 1.0), get_float(op, "alpha", 0.25)
    d = _scalar(op, inputs, inputs[3], "d_loss")
    t1 = (1 - p) ** g * (1 - p - g * p * np.log(np.maximum(p, FLT_MIN)))
    t2 = p**g * (g * (1 - p) * -softplus(x5) - p)
    dx = -coef * d * (al * c1 * t1 + (1 - al) * c0 * t2)
    return [dx.reshape(inputs[0].shape).astype(inputs[0].dtype)]


# ---------------------------------------------------------------------------------------------
# SoftmaxFocalLoss: in [X (N, A·C, H, W), T (N, A, H, W) ints, wp (1)], out [loss (0-d), P
# (1-D of X.size, as upstream)];
# args scale (1), gamma (1), alpha (0.25), num_classes (81). P = softmax over each anchor's C
# channels. Per (n, a, h, w) with label t ≥ 0: pt = P[t], z = (t = 0 ? 1 − α : α)/Np,
#   loss = scale · Σ −z·(1 − pt)^γ·log max(pt, FLT_MIN); Np = max(wp, 1).
# Grad SoftmaxFocalLossGradient([X, T, wp, P, d_loss] → [dX]) (uses GO(0) only):
#   with dL/dpt = −z·((1 − pt)^γ/pt − γ(1 − pt)^(γ−1)·log pt):
#   dX_j = scale·d_loss·dL/dpt·pt·(δ_jt − P_j).
# ---------------------------------------------------------------------------------------------


def _softmax_focal_parts(
    op: OperatorDef, inputs: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """Return ``(P5, onehot5, z (per label), pt, scale/Np)``."""
    x5, t, c, coef = _focal_setup(op, inputs, 81)
    if np.any(t >= c):
        raise _fail(op, inputs, f"labels must be < num_classes = {c}")
    e = np.exp(x5 - x5.max(axis=2, keepdims=True))
    p5 = e / e.sum(axis=2, keepdims=True)
    onehot = (np.arange(c).reshape(1, 1, c, 1, 1) == t[:, :, None]).astype(np.float64)
    al = get_float(op, "alpha", 0.25)
    z = np.where(t == 0, 1 - al, np.where(t >= 1, al, 0.0))
    pt = (p5 * onehot).sum(axis=2)
    return p5, onehot, z, pt, coef


@register_kernel("SoftmaxFocalLoss")
def softmax_focal_loss(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """SoftmaxFocalLoss forward → ``[loss (0-d), P (flat, X.size — as upstream)]``."""
    _arity(op, inputs, 3, 3, "X, T, wp")
    p5, _, z, pt, coef = _softmax_focal_parts(op, inputs)
    g = get_float(op, "gamma", 1.0)
    care = inputs[1] >= 0
    per = np.where(care, -z * (1 - pt) ** g * np.log(np.maximum(pt, FLT_MIN)), 0.0)
    dt = inputs[0].dtype
    return [np.array(coef * float(per.sum()), dtype=dt), p5.reshape(-1).astype(dt)]


@register_gradient(
    "SoftmaxFocalLoss",
    op_schema=schema(3, 2, inplace=False),
    doc="RetinaNet softmax focal loss",
)
def softmax_focal_loss_grad(m: GradientMaker) -> list[OperatorDef]:
    """``SoftmaxFocalLossGradient([X, T, wp, P, d_loss] → [dX])``.

    Raises:
        GradientError: the probabilities ``P`` have a gradient (it would be dropped).
    """
    m.refuse_output_gradients([1], "probabilities")
    return [
        m.make_op("SoftmaxFocalLossGradient", [m.I(0), m.I(1), m.I(2), m.O(1), m.GO(0)], [m.GI(0)])
    ]


@register_kernel("SoftmaxFocalLossGradient", gradient_op=True)
def softmax_focal_loss_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """SoftmaxFocalLossGradient kernel (see the paragraph above)."""
    _arity(op, inputs, 5, 5, "X, T, wp, P, d_loss")
    p5, onehot, z, pt, coef = _softmax_focal_parts(op, inputs[:3])
    if inputs[3].size != inputs[0].size:
        raise _fail(op, inputs, "P must have X's size")
    g = get_float(op, "gamma", 1.0)
    d = _scalar(op, inputs, inputs[4], "d_loss")
    care = inputs[1] >= 0
    ptc = np.maximum(pt, FLT_MIN)
    second = g * (1 - pt) ** (g - 1) * np.log(ptc) if g else 0.0
    dl_dpt = -z * ((1 - pt) ** g / ptc - second)
    w = np.where(care, coef * d * dl_dpt * pt, 0.0)[:, :, None]
    dx = w * (onehot - p5)
    return [dx.reshape(inputs[0].shape).astype(inputs[0].dtype)]
