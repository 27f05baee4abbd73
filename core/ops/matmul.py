"""Batched matrix products and vector similarities: BatchMatMul, CosineSimilarity,
DotProductWithPadding, Normalize, LpNorm.

Each op is one paragraph: forward NumPy kernel, Caffe2 gradient maker (gradient-op type,
inputs, outputs, arguments as in Caffe2's ``batch_matmul_op.cc``,
``distance_op.cc``, ``normalize_op.cc`` and ``lpnorm_op.cc``) and the gradient op's kernel,
with the maths in comments. Kernels keep the input dtype (computing in float64 where it
matters) and raise :class:`core.errors.ExecutionError` on bad shapes or arguments.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from api_schemas import caffe2_pb2
from core.errors import GradientError
from core.ops._args import flatten_2d, get_bool, get_float, get_int
from core.ops._args import kernel_error as _fail
from core.registry import GradientMaker, make_arg, register_gradient, register_kernel, schema
from core.template import GO, I, template

OperatorDef = caffe2_pb2.OperatorDef

#: Caffe2's ``kEps`` in the normalisation and distance kernels.
K_EPS = 1e-12


def _arity(op: OperatorDef, inputs: Sequence[np.ndarray], lo: int, hi: int, what: str) -> None:
    if not lo <= len(inputs) <= hi:
        raise _fail(op, inputs, f"expects inputs [{what}]")


# ---------------------------------------------------------------------------------------------
# BatchMatMul: in [A (..., M, K), B (..., K, N)], out Y (..., M, N); args trans_a, trans_b
# (transpose the last two dims), broadcast (numpy.matmul semantics, 1-D operands allowed).
# Without broadcast, A and B have the same rank ≥ 2 and the same batch dims.
# Grad (Caffe2 GetBatchMatMulGradient, forward args NOT copied; `use_scratch` passed on):
#   AB:    dA = BatchMatMul(dY, B, trans_b)     dB = BatchMatMul(A, dY, trans_a)
#   ABᵀ:   dA = BatchMatMul(dY, B)              dB = BatchMatMul(dY, A, trans_a)
#   AᵀB:   dA = BatchMatMul(B, dY, trans_b)     dB = BatchMatMul(A, dY)
#   AᵀBᵀ:  dA = BatchMatMul(B, dY, both)        dB = BatchMatMul(dY, A, both)
# broadcast=1 has no gradient in Caffe2 (CAFFE_ENFORCE): a GradientError here.
# ---------------------------------------------------------------------------------------------


def _t(x: np.ndarray, flag: bool) -> np.ndarray:
    return np.swapaxes(x, -1, -2) if flag and x.ndim >= 2 else x


@register_kernel("BatchMatMul")
def batch_matmul(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """BatchMatMul forward: ``Y = op(A) @ op(B)`` per batch entry.

    Shapes: A (..., M, K), B (..., K, N) → Y (..., M, N); dtype of A.

    Raises:
        ExecutionError: wrong arity, rank < 2 or batch dims differing without broadcast,
            inner dimensions differing.
    """
    _arity(op, inputs, 2, 2, "A, B")
    a, b = inputs
    broadcast = get_bool(op, "broadcast", False)
    if not broadcast:
        if a.ndim < 2 or a.ndim != b.ndim:
            raise _fail(op, inputs, "A and B must have the same rank ≥ 2 (or set broadcast=1)")
        if a.shape[:-2] != b.shape[:-2]:
            raise _fail(op, inputs, "A and B must have the same batch dims (or broadcast=1)")
    a2 = _t(a, get_bool(op, "trans_a", False))
    b2 = _t(b, get_bool(op, "trans_b", False))
    k_a = a2.shape[-1]
    k_b = b2.shape[-2] if b2.ndim >= 2 else b2.shape[0]
    if k_a != k_b:
        raise _fail(op, inputs, f"inner dimensions differ ({k_a} vs {k_b})")
    try:
        y = np.matmul(a2, b2)
    except ValueError as exc:
        raise _fail(op, inputs, f"batch dims do not broadcast: {exc}") from None
    return [np.asarray(y).astype(a.dtype)]


@register_gradient(
    "BatchMatMul",
    op_schema=schema(2, 1, inplace=False),
    copy_arguments=False,
    doc="batched matrix product (trans_a, trans_b; no gradient with broadcast=1)",
)
def batch_matmul_grad(m: GradientMaker) -> list[OperatorDef]:
    """Two ``BatchMatMul`` gradient ops (table above); forward args are not copied.

    Raises:
        GradientError: ``broadcast=1`` (Caffe2 has no gradient for it).
    """
    if m.arg_i("broadcast", 0):
        raise GradientError(
            "Gradient is currently not supported with broadcast=1 for BatchMatMul "
            "(as in Caffe2): give A and B equal batch dims, or expand them first."
        )
    ta, tb = bool(m.arg_i("trans_a", 0)), bool(m.arg_i("trans_b", 0))
    a, b, dy, da, db = m.I(0), m.I(1), m.GO(0), m.GI(0), m.GI(1)
    if ta and tb:
        spec = [([b, dy], da, (1, 1)), ([dy, a], db, (1, 1))]
    elif ta:
        spec = [([b, dy], da, (0, 1)), ([a, dy], db, (0, 0))]
    elif tb:
        spec = [([dy, b], da, (0, 0)), ([dy, a], db, (1, 0))]
    else:
        spec = [([dy, b], da, (0, 1)), ([a, dy], db, (1, 0))]
    scratch = m.arg("use_scratch") is not None
    ops = []
    for ins, out, (fa, fb) in spec:
        args = []
        if fa:
            args.append(make_arg("trans_a", 1))
        if fb:
            args.append(make_arg("trans_b", 1))
        if scratch:
            args.append(make_arg("use_scratch", 1))
        ops.append(m.make_op("BatchMatMul", ins, [out], args))
    return ops


# ---------------------------------------------------------------------------------------------
# CosineSimilarity: in [X, Y] (N×D, or 1-D = one row), out C (N,):
#   C_i = X_i·Y_i / √(max(|X_i|², kEps)·max(|Y_i|², kEps)).
# Grad CosineSimilarityGradient([X, Y, dC] → [dX, dY]):
#   dX_i = dC_i·(Y_i/(|X_i||Y_i|) − C_i·X_i/|X_i|²) (the second term only where |X_i|² > kEps,
#   where the denominator depends on X), dY symmetric.
# ---------------------------------------------------------------------------------------------


def _rows2(op: OperatorDef, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, int]:
    x, y = inputs[0], inputs[1]
    if x.shape != y.shape:
        raise _fail(op, inputs, "X and Y must have the same shape")
    n = x.shape[0] if x.ndim > 0 else 1
    d = int(np.prod(x.shape[1:], dtype=np.int64)) if x.ndim > 0 else 1  # (N may be 0)
    return x.reshape(n, d).astype(np.float64), y.reshape(n, d).astype(np.float64), n


@register_kernel("CosineSimilarity")
def cosine_similarity(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """CosineSimilarity forward → ``[C (N,)]`` (Caffe2 ``distance_op.cc``)."""
    _arity(op, inputs, 2, 2, "X, Y")
    x, y, _ = _rows2(op, inputs)
    xx, yy, xy = (x * x).sum(1), (y * y).sum(1), (x * y).sum(1)
    den = np.sqrt(np.maximum(xx, K_EPS) * np.maximum(yy, K_EPS))
    return [(xy / den).astype(inputs[0].dtype)]


# ``CosineSimilarityGradient([X, Y, dC] → [dX, dY])``.
cosine_similarity_grad = template("CosineSimilarityGradient", [I(0), I(1), GO(0)], [0, 1])
register_gradient(
    "CosineSimilarity", op_schema=schema(2, 1, inplace=False), doc="row-wise cosine similarity"
)(cosine_similarity_grad)


@register_kernel("CosineSimilarityGradient", gradient_op=True)
def cosine_similarity_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """CosineSimilarityGradient: derivative of ``X·Y/√max(|X|²|Y|², kEps)``."""
    _arity(op, inputs, 3, 3, "X, Y, dC")
    x, y, n = _rows2(op, inputs)
    dc = inputs[2].reshape(-1).astype(np.float64)
    if dc.size != n:
        raise _fail(op, inputs, f"dC must have {n} elements")
    xx, yy, xy = (x * x).sum(1), (y * y).sum(1), (x * y).sum(1)
    nx, ny = np.maximum(xx, K_EPS), np.maximum(yy, K_EPS)
    inv = 1.0 / np.sqrt(nx * ny)
    cos = xy * inv
    # below the floor a norm is a constant: its term of the derivative vanishes
    live_x, live_y = (xx > K_EPS)[:, None], (yy > K_EPS)[:, None]
    dx = dc[:, None] * (y * inv[:, None] - live_x * cos[:, None] * x / nx[:, None])
    dy = dc[:, None] * (x * inv[:, None] - live_y * cos[:, None] * y / ny[:, None])
    shape = inputs[0].shape
    return [dx.reshape(shape).astype(inputs[0].dtype), dy.reshape(shape).astype(inputs[1].dtype)]


# ---------------------------------------------------------------------------------------------
# DotProductWithPadding: in [X (N×Dx), Y (N×Dy)], out (N,); args pad_value (0), replicate (0).
#   Dx = Dy: plain row dot. replicate: the shorter row repeats (Dlong % Dshort = 0):
#   Σ_j long_j·short_{j mod Ds}. Otherwise the shorter row is padded with pad_value:
#   Σ_{j<Ds} x_j y_j + pad_value·Σ_{j≥Ds} long_j.
# Grad DotProductWithPaddingGradient([X, Y, dO] → [dX, dY]) (forward args copied).
# ---------------------------------------------------------------------------------------------


def _dpwp_parts(
    op: OperatorDef, inputs: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return ``(X2, Y2, Ex, Ey)``: the output is ``Σ_j (X2·Ex)_j (Y2·Ey)_j`` + padding."""
    x, y = inputs[0], inputs[1]
    if x.ndim == 0 or y.ndim == 0 or x.shape[0] != y.shape[0]:
        raise _fail(op, inputs, "X and Y must have the same first dim N")
    x2, y2 = flatten_2d(x, 1).astype(np.float64), flatten_2d(y, 1).astype(np.float64)
    dx_, dy_ = x2.shape[1], y2.shape[1]
    d = max(dx_, dy_)
    if get_bool(op, "replicate", False):
        if d % max(min(dx_, dy_), 1):
            raise _fail(op, inputs, "replicate needs one row length to divide the other")
        ex = (np.arange(d)[None, :] % dx_ == np.arange(dx_)[:, None]).astype(np.float64)
        ey = (np.arange(d)[None, :] % dy_ == np.arange(dy_)[:, None]).astype(np.float64)
    else:
        ex, ey = np.eye(dx_, d), np.eye(dy_, d)
    return x2, y2, ex, ey


def _dpwp_pad(op: OperatorDef, x2: np.ndarray, y2: np.ndarray) -> tuple[float, int]:
    if get_bool(op, "replicate", False):
        return 0.0, 0
    return get_float(op, "pad_value", 0.0), min(x2.shape[1], y2.shape[1])


@register_kernel("DotProductWithPadding")
def dot_product_with_padding(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """DotProductWithPadding forward → ``[(N,)]`` (Caffe2 ``distance_op.cc``)."""
    _arity(op, inputs, 2, 2, "X, Y")
    x2, y2, ex, ey = _dpwp_parts(op, inputs)
    out = ((x2 @ ex) * (y2 @ ey)).sum(1)
    pad, ds = _dpwp_pad(op, x2, y2)
    if pad:
        long = x2 if x2.shape[1] > y2.shape[1] else y2
        out = out + pad * long[:, ds:].sum(1)
    return [out.astype(inputs[0].dtype)]


# ``DotProductWithPaddingGradient([X, Y, dO] → [dX, dY])``.
dot_product_with_padding_grad = template(
    "DotProductWithPaddingGradient", [I(0), I(1), GO(0)], [0, 1]
)
register_gradient(
    "DotProductWithPadding",
    op_schema=schema(2, 1, inplace=False),
    doc="row dot product with padding / replication",
)(dot_product_with_padding_grad)


@register_kernel("DotProductWithPaddingGradient", gradient_op=True)
def dot_product_with_padding_gradient(
    op: OperatorDef, inputs: list[np.ndarray]
) -> list[np.ndarray]:
    """DotProductWithPaddingGradient: ``dX = dO·(Y·Ey)·Exᵀ`` (+ pad_value·dO on the tail)."""
    _arity(op, inputs, 3, 3, "X, Y, dO")
    x2, y2, ex, ey = _dpwp_parts(op, inputs)
    do = inputs[2].reshape(-1).astype(np.float64)
    if do.size != x2.shape[0]:
        raise _fail(op, inputs, f"dO must have {x2.shape[0]} elements")
    dx = (do[:, None] * (y2 @ ey)) @ ex.T
    dy = (do[:, None] * (x2 @ ex)) @ ey.T
    pad, ds = _dpwp_pad(op, x2, y2)
    if pad:
        if x2.shape[1] > y2.shape[1]:
            dx[:, ds:] += pad * do[:, None]
        elif y2.shape[1] > x2.shape[1]:
            dy[:, ds:] += pad * do[:, None]
    return [
        dx.reshape(inputs[0].shape).astype(inputs[0].dtype),
        dy.reshape(inputs[1].shape).astype(inputs[1].dtype),
    ]


# ---------------------------------------------------------------------------------------------
# Normalize: Y = X / max(‖X‖₂ along `axis` (−1), kEps). Grad NormalizeGradient([X, dY] → [dX]):
#   n = ‖X‖ (> kEps): dX = dY/n − X·(X·dY)/n³ along the axis (below kEps: dY/kEps).
# ---------------------------------------------------------------------------------------------


def _norm_axis(op: OperatorDef, inputs: Sequence[np.ndarray], x: np.ndarray) -> int:
    axis = get_int(op, "axis", -1)
    a = axis + x.ndim if axis < 0 else axis
    if not 0 <= a < max(x.ndim, 1):
        raise _fail(op, inputs, f"axis {axis} out of range")
    return a


@register_kernel("Normalize")
def normalize(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Normalize forward: L2-normalise X along ``axis`` (Caffe2 ``normalize_op.cc``)."""
    _arity(op, inputs, 1, 1, "X")
    x = inputs[0].astype(np.float64)
    a = _norm_axis(op, inputs, x)
    n = np.sqrt((x * x).sum(axis=a, keepdims=True))
    return [(x / np.maximum(n, K_EPS)).astype(inputs[0].dtype)]


# ``NormalizeGradient([X, dY] → [dX])``.
normalize_grad = template("NormalizeGradient", [I(0), GO(0)], [0])
register_gradient("Normalize", op_schema=schema(1, 1, inplace=False), doc="L2 normalisation")(
    normalize_grad
)


@register_kernel("NormalizeGradient", gradient_op=True)
def normalize_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """NormalizeGradient: ``dX = dY/n − X·(X·dY)/n³`` along ``axis``."""
    _arity(op, inputs, 2, 2, "X, dY")
    x, dy = inputs[0].astype(np.float64), inputs[1].astype(np.float64)
    if x.shape != dy.shape:
        raise _fail(op, inputs, "dY must have X's shape")
    a = _norm_axis(op, inputs, x)
    n = np.sqrt((x * x).sum(axis=a, keepdims=True))
    live = n > K_EPS
    nn_ = np.maximum(n, K_EPS)
    dx = dy / nn_ - live * x * (x * dy).sum(axis=a, keepdims=True) / nn_**3
    return [dx.astype(inputs[0].dtype)]


# ---------------------------------------------------------------------------------------------
# LpNorm: Y (shape (1,)) = Σ|x| (p=1) or Σx² (p=2, no root), divided by X.size when `average`.
# Grad LpNormGradient([X, dY] → [dX]): p=1: sign(x)·dY (0 within kEps of 0); p=2: 2x·dY;
# both /X.size when `average`.
# ---------------------------------------------------------------------------------------------


def _lp_p(op: OperatorDef, inputs: Sequence[np.ndarray]) -> int:
    p = get_int(op, "p", 2)
    if p not in (1, 2):
        raise _fail(op, inputs, f"p must be 1 or 2, got {p}")
    return p


@register_kernel("LpNorm")
def lp_norm(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """LpNorm forward → ``[Y (1,)]`` (Caffe2 ``lpnorm_op.cc``)."""
    _arity(op, inputs, 1, 1, "X")
    x = inputs[0].astype(np.float64)
    p = _lp_p(op, inputs)
    v = float(np.abs(x).sum() if p == 1 else (x * x).sum())
    if get_bool(op, "average", False):
        v /= max(x.size, 1)
    return [np.array([v], dtype=inputs[0].dtype)]


# ``LpNormGradient([X, dY] → [dX])``.
lp_norm_grad = template("LpNormGradient", [I(0), GO(0)], [0])
register_gradient("LpNorm", op_schema=schema(1, 1, inplace=False), doc="Σ|x|^p (p = 1, 2)")(
    lp_norm_grad
)


@register_kernel("LpNormGradient", gradient_op=True)
def lp_norm_gradient(op: OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """LpNormGradient: ``sign(x)·dY`` (p=1) or ``2x·dY`` (p=2), ``/size`` when averaged."""
    _arity(op, inputs, 2, 2, "X, dY")
    x = inputs[0].astype(np.float64)
    if inputs[1].size != 1:
        raise _fail(op, inputs, "dY must have one element")
    dy = float(inputs[1].reshape(-1)[0])
    p = _lp_p(op, inputs)
    if p == 1:
        g = np.where(x > K_EPS, 1.0, np.where(x < -K_EPS, -1.0, 0.0))
    else:
        g = 2.0 * x
    if get_bool(op, "average", False):
        g = g / max(x.size, 1)
    return [(g * dy).astype(inputs[0].dtype)]
