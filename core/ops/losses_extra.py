"""More loss ops: sigmoid / soft-label cross entropies, MakeTwoClass, BernoulliJSD,
SpatialSoftmaxWithLoss, MarginRankingCriterion, CosineEmbeddingCriterion (spec §5.5).

Each op is one paragraph: forward NumPy kernel, Caffe2 gradient maker (gradient-op type,
inputs, outputs as in Caffe2's ``cross_entropy_op.cc``, ``jsd_op.cc``,
``spatial_softmax_with_loss_op.cc``, ``margin_ranking_criterion_op.cc`` and
``cosine_embedding_criterion_op.cc``) and the gradient op's kernel, with the maths in
comments. Labels and targets get no gradient, as in Caffe2.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from api_schemas import caffe2_pb2
from core.errors import GradientError
from core.ops._args import get_bool, get_float
from core.ops._args import kernel_error as _fail
from core.registry import GradientMaker, register_gradient, register_kernel, schema
from core.template import GO, I, template

OperatorDef = caffe2_pb2.OperatorDef

#: Caffe2's floor on probabilities before a log (``kLOG_THRESHOLD``).
LOG_THRESHOLD = 1e-20


def _arity(op: OperatorDef, inputs: Sequence[np.ndarray], lo: int, hi: int, what: str) -> None:
    if not lo <= len(inputs) <= hi:
        raise _fail(op, inputs, f"expects inputs [{what}]")


def _same_shape(op: OperatorDef, inputs: Sequence[np.ndarray], *idx: int) -> None:
    for i in idx:
        if inputs[i].shape != inputs[0].shape:
            raise _fail(op, inputs, f"input {i} must have the shape of input 0")


def _scalar(op: OperatorDef, inputs: Sequence[np.ndarray], a: np.ndarray, name: str) -> float:
    if a.size != 1:
        raise _fail(op, inputs, f"{name} must have one element")
    return float(a.reshape(-1)[0])


def softplus(x: np.ndarray) -> np.ndarray:
    """``log(1 + exp(x))`` without overflow (float64)."""
    return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic sigmoid without overflow (float64)."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


# ---------------------------------------------------------------------------------------------
# SigmoidCrossEntropyWithLogits: in [logits, targets] (same shape), out (logits dims[:-1]):
#   out = −mean over the last dim of f(x, t), with (per Caffe2's three modes)
#   default f = t·x − softplus(x); log_D_trick f = (2t − 1)·(x − softplus(x));
#   unjoined_lr_loss f = t·x − (1 − t)·softplus(x).
# Grad SigmoidCrossEntropyWithLogitsGradient([dY, logits, targets] → [dlogits]):
#   dx = −f'(x)·dY/D with f' = t − σ(x); (2t − 1)(1 − σ(x)); t − (1 − t)σ(x).
# WeightedSigmoidCrossEntropyWithLogits: in [logits, targets, weights], out = −mean(w·f)
# (default mode); grad WeightedSigmoidCrossEntropyWithLogitsGradient([dY, logits, targets,
# weights] → [dlogits]) = −w·f'·dY/D.
# ---------------------------------------------------------------------------------------------


def _sce_f(
    op: OperatorDef, inputs: Sequence[np.ndarray], x: np.ndarray, t: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(f, f')`` of the op's mode, elementwise (float64)."""
    log_d = get_bool(op, "log_D_trick", False)
    unjoined = get_bool(op, "unjoined_lr_loss", False)
    if log_d and unjoined:
        raise _fail(op, inputs, "log_D_trick and unjoined_lr_loss cannot both be set")
    sp, sg = softplus(x), sigmoid(x)
    if log_d:
        return (2 * t - 1) * (x - sp), (2 * t - 1) * (1 - sg)
    if unjoined:
        return t * x - (1 - t) * sp, t - (1 - t) * sg
    return t * x - sp, t - sg


def _sce_rows(x: np.ndarray) -> tuple[tuple[int, ...], int]:
    """Output shape and inner size D (the last dim; 1 for a 0-d X)."""
    return (x.shape[:-1], x.shape[-1]) if x.ndim else ((), 1)


@register_kernel("SigmoidCrossEntropyWithLogits")
def sigmoid_cross_entropy_with_logits(
    op: OperatorDef, inputs: list[np.ndarray]
) -> list[np.ndarray]:
    """SigmoidCrossEntropyWithLogits forward → ``[loss (logits dims[:-1])]``."""
    _arity(op, inputs, 2, 2, "logits, targets")
    _same_shape(op, inputs, 1)
    x, t = inputs[0].astype(np.float64), inputs[1].astype(np.float64)
    shape, d = _sce_rows(x)
    f, _ = _sce_f(op, inputs, x, t)
    return [(-f.reshape(shape + (d,)).sum(-1) / max(d, 1)).astype(inputs[0].dtype)]


# ``SigmoidCrossEntropyWithLogitsGradient([dY, logits, targets] → [dlogits])``.
sigmoid_cross_entropy_with_logits_grad = template(
    "SigmoidCrossEntropyWithLogitsGradient", [GO(0), I(0), I(1)], [0]
)
register_gradient(
    "SigmoidCrossEntropyWithLogits",
    op_schema=schema(2, 1, inplace=False),
    doc="sigmoid cross entropy on logits (log_D_trick, unjoined_lr_loss)",
)(sigmoid_cross_entropy_with_logits_grad)


def _sce_backward(
    op: OperatorDef, inputs: Sequence[np.ndarray], w: np.ndarray | None
) -> list[np.ndarray]:
    dy, x, t = inputs[0], inputs[1].astype(np.float64), inputs[2].astype(np.float64)
    if t.shape != x.shape or (w is not None and w.shape != x.shape):
        raise _fail(op, inputs, "targets (and weights) must have the shape of logits")
    shape, d = _sce_rows(x)
    if dy.size != int(np.prod(shape, dtype=np.int64)):
        raise _fail(op, inputs, f"dY must have shape {shape}")
    _, fp = _sce_f(op, inputs, x, t)
    if w is not None:
        fp = fp * w.astype(np.float64)
    dx = -fp.reshape(shape + (d,)) * dy.astype(np.float64).reshape(shape + (1,)) / max(d, 1)
    return [dx.reshape(x.shape).astype(inputs[1].dtype)]


@register_kernel("SigmoidCrossEntropyWithLogitsGradient", gradient_op=True)
def sigmoid_cross_entropy_with_logits_gradient(
    op: OperatorDef, inputs: list[np.ndarray]
) -> list[np.ndarray]:
    """SigmoidCrossEntropyWithLogitsGradient: ``dx = −f'(x, t)·dY / D``."""
    _arity(op, inputs, 3, 3, "dY, logits, targets")
    return _sce_backward(op, inputs, None)


@register_kernel("WeightedSigmoidCrossEntropyWithLogits")
def weighted_sigmoid_cross_entropy_with_logits(
    op: OperatorDef, inputs: list[np.ndarray]
) -> list[np.ndarray]:
    """WeightedSigmoidCrossEntropyWithLogits forward: ``−mean_last(w·(t·x − softplus(x)))``."""
    _arity(op, inputs, 3, 3, "logits, targets, weights")
    _same_shape(op, inputs, 1, 2)
    x, t, w = (a.astype(np.float64) for a in inputs)
    shape, d = _sce_rows(x)
    f = w * (t * x - softplus(x))
    return [(-f.reshape(shape + (d,)).sum(-1) / max(d, 1)).astype(inputs[0].dtype)]


# ``WeightedSigmoidCrossEntropyWithLogitsGradient([dY, logits, targets, weights] → [dX])``.
weighted_sigmoid_cross_entropy_with_logits_grad = template(
    "WeightedSigmoidCrossEntropyWithLogitsGradient", [GO(0), I(0), I(1), I(2)], [0]
)
register_gradient(
    "WeightedSigmoidCrossEntropyWithLogits",
    op_schema=schema(3, 1, inplace=False),
    doc="weighted sigmoid cross entropy on logits",
)(weighted_sigmoid_cross_entropy_with_logits_grad)


@register_kernel("WeightedSigmoidCrossEntropyWithLogitsGradient", gradient_op=True)
def weighted_sigmoid_cross_entropy_with_logits_gradient(
    op: OperatorDef, inputs: list[np.ndarray]
) -> list[np.ndarray]:
    """WeightedSigmoidCrossEntropyWithLogitsGradient: ``dx = −w·(t − σ(x))·dY / D``."""
    _arity(op, inputs, 4, 4, "dY, logits, targets, weights")
    if get_bool(op, "log_D_trick", False) or get_bool(op, "unjoined_lr_loss", False):
        raise _fail(op, inputs, "the weighted op has no log_D_trick / unjoined_lr_loss mode")
    return _sce_backward(op, inputs[:3], inputs[3])


# ---------------------------------------------------------------------------------------------
# CrossEntropy: in [X (N×D probabilities, or D), label (same shape, soft labels)], out Y (N,):
#   Y_i = −Σ_j label_ij·log(max(X_ij, 1e−20)).
# Grad CrossEntropyGradient([X, label, dY] → [dX]): dX = −label·dY_i / max(X, 1e−20).
# ---------------------------------------------------------------------------------------------


def _ce_rows(op: OperatorDef, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    x, lab = inputs[0], inputs[1]
    if x.ndim not in (1, 2) or lab.shape != x.shape:
        raise _fail(op, inputs, "X must be N×D (or D) and label of the same shape")
    x2 = x.reshape(1, -1) if x.ndim == 1 else x
    return x2.astype(np.float64), lab.reshape(x2.shape).astype(np.float64)


@register_kernel("CrossEntropy")
def cross_entropy(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """CrossEntropy forward → ``[Y (N,)]``."""
    _arity(op, inputs, 2, 2, "X, label")
    x2, lab = _ce_rows(op, inputs)
    return [(-(lab * np.log(np.maximum(x2, LOG_THRESHOLD))).sum(1)).astype(inputs[0].dtype)]


# ``CrossEntropyGradient([X, label, dY] → [dX])``.
cross_entropy_grad = template("CrossEntropyGradient", [I(0), I(1), GO(0)], [0])
register_gradient(
    "CrossEntropy", op_schema=schema(2, 1, inplace=False), doc="cross entropy vs soft labels"
)(cross_entropy_grad)


@register_kernel("CrossEntropyGradient", gradient_op=True)
def cross_entropy_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """CrossEntropyGradient: ``dX = −label·dY / max(X, 1e−20)``."""
    _arity(op, inputs, 3, 3, "X, label, dY")
    x2, lab = _ce_rows(op, inputs)
    dy = inputs[2].astype(np.float64).reshape(-1)
    if dy.size != x2.shape[0]:
        raise _fail(op, inputs, f"dY must have {x2.shape[0]} elements")
    dx = -lab * dy[:, None] / np.maximum(x2, LOG_THRESHOLD)
    return [dx.reshape(inputs[0].shape).astype(inputs[0].dtype)]


# ---------------------------------------------------------------------------------------------
# MakeTwoClass: X (any shape, probabilities) → Y (X dims + [2]) = [1 − x, x].
# Grad MakeTwoClassGradient([dY] → [dX]): dX = dY[..., 1] − dY[..., 0].
# ---------------------------------------------------------------------------------------------


@register_kernel("MakeTwoClass")
def make_two_class(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """MakeTwoClass forward → ``[Y (X dims + [2])]``."""
    _arity(op, inputs, 1, 1, "X")
    x = inputs[0]
    return [np.stack([1 - x, x], axis=-1).astype(x.dtype)]


# ``MakeTwoClassGradient([dY] → [dX])``.
make_two_class_grad = template("MakeTwoClassGradient", [GO(0)], [0])
register_gradient("MakeTwoClass", op_schema=schema(1, 1, inplace=False), doc="[1 − p, p] columns")(
    make_two_class_grad
)


@register_kernel("MakeTwoClassGradient", gradient_op=True)
def make_two_class_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """MakeTwoClassGradient: ``dX = dY[..., 1] − dY[..., 0]``."""
    _arity(op, inputs, 1, 1, "dY")
    dy = inputs[0]
    if dy.ndim == 0 or dy.shape[-1] != 2:
        raise _fail(op, inputs, "dY must end in a dimension of 2")
    return [(dy[..., 1] - dy[..., 0]).astype(dy.dtype)]


# ---------------------------------------------------------------------------------------------
# BernoulliJSD: in [X, T] (probabilities, same size), out L (X's shape):
#   L = H((x + t)/2) − (H(x) + H(t))/2, H(p) = −p log p − (1 − p) log(1 − p) (0 within 1e−20
#   of 0 or 1). Grad BernoulliJSDGradient([dL, X, T] → [dX]):
#   dX = dL·(logit(x) − logit((x + t)/2))/2, logit clamped to [1e−20, 1 − 1e−20].
# ---------------------------------------------------------------------------------------------


def _entropy(p: np.ndarray) -> np.ndarray:
    inside = (p >= LOG_THRESHOLD) & (1 - p >= LOG_THRESHOLD)
    q = np.clip(p, LOG_THRESHOLD, 1 - LOG_THRESHOLD)
    return np.where(inside, -q * np.log(q) - (1 - q) * np.log(1 - q), 0.0)


def _logit(p: np.ndarray) -> np.ndarray:
    q = np.clip(p, LOG_THRESHOLD, 1 - LOG_THRESHOLD)
    return np.log(q / (1 - q))


@register_kernel("BernoulliJSD")
def bernoulli_jsd(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """BernoulliJSD forward → ``[L (X's shape)]`` (Caffe2 ``jsd_op.cc``)."""
    _arity(op, inputs, 2, 2, "X, T")
    x, t = inputs[0].astype(np.float64), inputs[1].astype(np.float64)
    if x.size != t.size:
        raise _fail(op, inputs, "X and T must have the same size")
    t = t.reshape(x.shape)
    jsd = _entropy((x + t) / 2) - (_entropy(x) + _entropy(t)) / 2
    return [jsd.astype(inputs[0].dtype)]


# ``BernoulliJSDGradient([dL, X, T] → [dX])``.
bernoulli_jsd_grad = template("BernoulliJSDGradient", [GO(0), I(0), I(1)], [0])
register_gradient(
    "BernoulliJSD", op_schema=schema(2, 1, inplace=False), doc="Bernoulli Jensen-Shannon"
)(bernoulli_jsd_grad)


@register_kernel("BernoulliJSDGradient", gradient_op=True)
def bernoulli_jsd_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """BernoulliJSDGradient: ``dX = dL·(logit(x) − logit((x + t)/2))/2``."""
    _arity(op, inputs, 3, 3, "dL, X, T")
    dl, x, t = (a.astype(np.float64) for a in inputs)
    if x.size != t.size or dl.size != x.size:
        raise _fail(op, inputs, "dL, X and T must have the same size")
    t = t.reshape(x.shape)
    g = dl.reshape(x.shape) * (_logit(x) - _logit((x + t) / 2)) / 2
    return [g.astype(inputs[1].dtype)]


# ---------------------------------------------------------------------------------------------
# SpatialSoftmaxWithLoss: in [X (N, D, H, W), labels (N, H, W) ints (−1 = don't care)
# (, weights (N, H, W))], out [P (softmax over D per pixel), loss (0-d)]:
#   loss = Σ_{pixels, label ≠ −1} w·(−log max(P[label], 1e−20)) / W, W = Σ w (loss 0 if W = 0).
# Grad SpatialSoftmaxWithLossGradient([X, labels, (weights), P, d_loss] → [dX]), GO(1) only:
#   dX = (P − onehot)·w·d_loss / W at cared-for pixels, 0 elsewhere.
# Caffe2's forward ignores the `scale` argument but its gradient op multiplies by it (an
# upstream defect: the gradient would be `scale` times too large). netgrad emits the gradient
# op without `scale`, so it matches the loss the forward op computes.
# ---------------------------------------------------------------------------------------------


def _sswl_parts(
    op: OperatorDef,
    inputs: Sequence[np.ndarray],
    x: np.ndarray,
    lab: np.ndarray,
    w: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Return ``(onehot (N, D, H, W), care·w (N, H, W), P, W)``."""
    if x.ndim != 4 or lab.shape != (x.shape[0],) + x.shape[2:]:
        raise _fail(op, inputs, "X must be (N, D, H, W) and labels (N, H, W)")
    if not np.issubdtype(lab.dtype, np.integer):
        raise _fail(op, inputs, "labels must be integers")
    d = x.shape[1]
    care = lab != -1
    if np.any(care & ((lab < 0) | (lab >= d))):
        raise _fail(op, inputs, f"labels must be −1 or in [0, {d})")
    onehot = (np.arange(d).reshape(1, d, 1, 1) == lab[:, None]).astype(np.float64)
    if w is not None and w.shape != lab.shape:
        raise _fail(op, inputs, "weights must have the labels' shape")
    cw = care * (w.astype(np.float64) if w is not None else 1.0)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    return onehot, cw, p, float(cw.sum())


@register_kernel("SpatialSoftmaxWithLoss")
def spatial_softmax_with_loss(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """SpatialSoftmaxWithLoss forward → ``[P (X's shape), loss (0-d)]``."""
    _arity(op, inputs, 2, 3, "X, labels(, weights)")
    x = inputs[0].astype(np.float64)
    onehot, cw, p, total = _sswl_parts(
        op, inputs, x, inputs[1], inputs[2] if len(inputs) == 3 else None
    )
    nll = -(onehot * np.log(np.maximum(p, LOG_THRESHOLD))).sum(1)
    loss = float((cw * nll).sum()) / total if total != 0.0 else 0.0
    dt = inputs[0].dtype
    return [p.astype(dt), np.array(loss, dtype=dt)]


@register_gradient(
    "SpatialSoftmaxWithLoss",
    op_schema=schema((2, 3), 2, inplace=False),
    copy_arguments=False,
    doc="per-pixel softmax + cross entropy",
)
def spatial_softmax_with_loss_grad(m: GradientMaker) -> list[OperatorDef]:
    """``SpatialSoftmaxWithLossGradient([X, labels, (weights), P, d_loss] → [dX])``.

    Forward arguments other than ``scale`` are copied (see the defect note above).

    Raises:
        GradientError: the probabilities ``P`` have a gradient (it would be dropped).
    """
    if m.has_go(0):
        raise GradientError(
            f"SpatialSoftmaxWithLoss's gradient uses only the gradient of its loss output "
            f"'{m.O(1)}'; the gradient reaching its probabilities '{m.O(0)}' would be dropped. "
            "Compute the probabilities with a separate op for that use."
        )
    ins = [m.I(0), m.I(1), m.O(0), m.GO(1)]
    if len(m.input_names) == 3:
        ins.insert(2, m.I(2))
    g = m.make_op("SpatialSoftmaxWithLossGradient", ins, [m.GI(0)])
    g.arg.extend(a for a in m.op.arg if a.name != "scale")
    return [g]


@register_kernel("SpatialSoftmaxWithLossGradient", gradient_op=True)
def spatial_softmax_with_loss_gradient(
    op: OperatorDef, inputs: list[np.ndarray]
) -> list[np.ndarray]:
    """SpatialSoftmaxWithLossGradient: ``dX = (P − onehot)·w·scale·d_loss / W``."""
    _arity(op, inputs, 4, 5, "X, labels, (weights), P, d_loss")
    x = inputs[0].astype(np.float64)
    w = inputs[2] if len(inputs) == 5 else None
    onehot, cw, _, total = _sswl_parts(op, inputs, x, inputs[1], w)
    p = inputs[-2].astype(np.float64)
    if p.shape != x.shape:
        raise _fail(op, inputs, "P must have X's shape")
    d_loss = _scalar(op, inputs, inputs[-1], "d_loss")
    if total <= 0.0:
        return [np.zeros_like(inputs[0])]
    coef = get_float(op, "scale", 1.0) * d_loss / total
    dx = (p - onehot) * cw[:, None] * coef
    return [dx.astype(inputs[0].dtype)]


# ---------------------------------------------------------------------------------------------
# MarginRankingCriterion: in [X1, X2, Y (±1)] (same shape), arg margin (1.0):
#   out = max(0, −Y·(X1 − X2) + margin).
# Grad MarginRankingCriterionGradient([X1, X2, Y, dOut] → [dX1, dX2]):
#   active = (−Y·(X1 − X2) + margin > 0); dX1 = −Y·dOut·active, dX2 = −dX1.
# ---------------------------------------------------------------------------------------------


def _mrc(op: OperatorDef, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    _same_shape(op, inputs, 1, 2)
    x1, x2, y = (a.astype(np.float64) for a in inputs[:3])
    return -y * (x1 - x2) + get_float(op, "margin", 1.0), y


@register_kernel("MarginRankingCriterion")
def margin_ranking_criterion(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """MarginRankingCriterion forward: ``max(0, −Y·(X1 − X2) + margin)`` elementwise."""
    _arity(op, inputs, 3, 3, "X1, X2, Y")
    v, _ = _mrc(op, inputs)
    return [np.maximum(v, 0.0).astype(inputs[0].dtype)]


# ``MarginRankingCriterionGradient([X1, X2, Y, dOut] → [dX1, dX2])``.
margin_ranking_criterion_grad = template(
    "MarginRankingCriterionGradient", [I(0), I(1), I(2), GO(0)], [0, 1]
)
register_gradient(
    "MarginRankingCriterion", op_schema=schema(3, 1, inplace=False), doc="margin ranking loss"
)(margin_ranking_criterion_grad)


@register_kernel("MarginRankingCriterionGradient", gradient_op=True)
def margin_ranking_criterion_gradient(
    op: OperatorDef, inputs: list[np.ndarray]
) -> list[np.ndarray]:
    """MarginRankingCriterionGradient: ``dX1 = −Y·dOut·[loss > 0]``, ``dX2 = −dX1``."""
    _arity(op, inputs, 4, 4, "X1, X2, Y, dOut")
    _same_shape(op, inputs, 3)
    v, y = _mrc(op, inputs)
    d1 = -y * inputs[3].astype(np.float64) * (v > 0)
    return [d1.astype(inputs[0].dtype), (-d1).astype(inputs[1].dtype)]


# ---------------------------------------------------------------------------------------------
# CosineEmbeddingCriterion: in [S (cosines), Y (±1)], arg margin (0.0):
#   out = 1 − S where Y = 1, else max(0, S − margin).
# Grad CosineEmbeddingCriterionGradient([S, Y, dOut] → [dS]):
#   dS = −dOut where Y = 1, else dOut·[S ≥ margin].
# ---------------------------------------------------------------------------------------------


@register_kernel("CosineEmbeddingCriterion")
def cosine_embedding_criterion(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """CosineEmbeddingCriterion forward (see the paragraph above)."""
    _arity(op, inputs, 2, 2, "S, Y")
    _same_shape(op, inputs, 1)
    s, y = inputs[0].astype(np.float64), inputs[1]
    out = np.where(y == 1, 1.0 - s, np.maximum(s - get_float(op, "margin", 0.0), 0.0))
    return [out.astype(inputs[0].dtype)]


# ``CosineEmbeddingCriterionGradient([S, Y, dOut] → [dS])``.
cosine_embedding_criterion_grad = template(
    "CosineEmbeddingCriterionGradient", [I(0), I(1), GO(0)], [0]
)
register_gradient(
    "CosineEmbeddingCriterion",
    op_schema=schema(2, 1, inplace=False),
    doc="cosine embedding loss",
)(cosine_embedding_criterion_grad)


@register_kernel("CosineEmbeddingCriterionGradient", gradient_op=True)
def cosine_embedding_criterion_gradient(
    op: OperatorDef, inputs: list[np.ndarray]
) -> list[np.ndarray]:
    """CosineEmbeddingCriterionGradient: ``−dOut`` (Y = 1) or ``dOut·[S ≥ margin]``."""
    _arity(op, inputs, 3, 3, "S, Y, dOut")
    _same_shape(op, inputs, 1, 2)
    s, y, do = inputs[0].astype(np.float64), inputs[1], inputs[2].astype(np.float64)
    ds = do * np.where(y == 1, -1.0, (s >= get_float(op, "margin", 0.0)).astype(np.float64))
    return [ds.astype(inputs[0].dtype)]


# ---------------------------------------------------------------------------------------------
# PairWiseLoss: in [X (N, or N×1 scores), label (N, or N×1; floats)(, lengths (S,) int32)],
# out Y (S,) (S = 1 without lengths): per session, over the pairs j < i with different labels,
#   Y_s = mean over pairs of softplus(sign·(x_j − x_i)), sign = +1 if label_i > label_j else −1.
# Grad PairWiseLossGradient([X, label, dY(, lengths)] → [dX]): per pair
#   g = sign·dY_s·σ(sign·(x_j − x_i)); dX_i −= g, dX_j += g; then /pairs.
# (Caffe2 clips softplus to 0 / z beyond |z| > −log(FLT_EPSILON) ≈ 15.9, an error below 1.2e−7
# that its gradient ignores too; netgrad computes softplus exactly.)
# ---------------------------------------------------------------------------------------------


def _pairwise_setup(
    op: OperatorDef, inputs: Sequence[np.ndarray], lengths: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
    x, lab = inputs[0], inputs[1]
    n = x.shape[0] if x.ndim else 0
    if x.size != n or lab.shape[:1] != (n,) or lab.size != n:
        raise _fail(op, inputs, "X and label must be N or N×1")
    if lengths is not None:
        if lengths.ndim != 1 or int(lengths.sum()) != n or np.any(lengths < 0):
            raise _fail(op, inputs, f"lengths must be ≥ 0 and sum to N = {n}")
        lens = [int(v) for v in lengths]
    else:
        lens = [n]
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(int)
    return (
        x.reshape(n).astype(np.float64),
        lab.reshape(n).astype(np.float64),
        list(zip(starts.tolist(), lens, strict=True)),
    )


def _pairs(lab: np.ndarray, start: int, length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(i, j, sign)`` of the pairs j < i of one session whose labels differ."""
    i, j = np.tril_indices(length, -1)
    i, j = i + start, j + start
    keep = np.abs(lab[i] - lab[j]) >= np.finfo(np.float32).eps
    i, j = i[keep], j[keep]
    return i, j, np.where(lab[i] > lab[j], 1.0, -1.0)


@register_kernel("PairWiseLoss")
def pair_wise_loss(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """PairWiseLoss forward → ``[Y (sessions,)]`` (Caffe2 ``rank_loss_op.cc``)."""
    _arity(op, inputs, 2, 3, "X, label(, lengths)")
    x, lab, sessions = _pairwise_setup(op, inputs, inputs[2] if len(inputs) == 3 else None)
    y = np.zeros(len(sessions), dtype=np.float64)
    for s, (start, length) in enumerate(sessions):
        i, j, sign = _pairs(lab, start, length)
        if i.size:
            y[s] = softplus(sign * (x[j] - x[i])).mean()
    return [y.astype(inputs[0].dtype)]


@register_gradient(
    "PairWiseLoss", op_schema=schema((2, 3), 1, inplace=False), doc="pairwise ranking loss"
)
def pair_wise_loss_grad(m: GradientMaker) -> list[OperatorDef]:
    """``PairWiseLossGradient([X, label, dY(, lengths)] → [dX])``."""
    ins = [m.I(0), m.I(1), m.GO(0)] + ([m.I(2)] if len(m.input_names) == 3 else [])
    return [m.make_op("PairWiseLossGradient", ins, [m.GI(0)])]


@register_kernel("PairWiseLossGradient", gradient_op=True)
def pair_wise_loss_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """PairWiseLossGradient kernel (see the paragraph above)."""
    _arity(op, inputs, 3, 4, "X, label, dY(, lengths)")
    x, lab, sessions = _pairwise_setup(op, inputs, inputs[3] if len(inputs) == 4 else None)
    dy = inputs[2].reshape(-1).astype(np.float64)
    if dy.size != len(sessions):
        raise _fail(op, inputs, f"dY must have {len(sessions)} elements")
    dx = np.zeros_like(x)
    for s, (start, length) in enumerate(sessions):
        i, j, sign = _pairs(lab, start, length)
        if not i.size:
            continue
        g = sign * dy[s] * sigmoid(sign * (x[j] - x[i])) / i.size
        np.add.at(dx, i, -g)
        np.add.at(dx, j, g)
    return [dx.reshape(inputs[0].shape).astype(inputs[0].dtype)]
