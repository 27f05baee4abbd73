"""Sparse, embedding and sequence-packing ops: kernels and gradient makers.

Source: Caffe2 ``sparse_to_dense_op.cc``, ``sparse_to_dense_mask_op.{h,cc}``,
``batch_gather_ops.cc``, ``batch_sparse_to_dense_op.cc``, ``copy_op.cc``, ``utility_ops.cc``
(Alias), ``pack_segments.cc``,
``reverse_packed_segs_op.cc``, ``boolean_mask_ops.cc`` (spec §5.3). One paragraph per op:
the maths in a comment, the forward kernel, Caffe2's gradient maker, the gradient op's kernel.
Indices and lengths are int32/int64 tensors; values keep their dtype. Gradients that Caffe2
makes sparse (``GradientSlice``) are sparse here too (the device copies pass them through).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.ops._args import check_numel, get_bool, get_int, get_ints
from core.ops._args import get_float as get_float_arg
from core.ops.elementwise import expect_inputs, kernel_error
from core.registry import (
    GradientMaker,
    OperatorDef,
    register_gradient,
    register_kernel,
    schema,
)
from core.template import GO, I, template

Array = np.ndarray[Any, Any]


def _ints(op: OperatorDef, x: Array, what: str, ndim: int | None = 1) -> Array:
    a = np.asarray(x)
    if (ndim is not None and a.ndim != ndim) or not (
        np.issubdtype(a.dtype, np.integer) or a.size == 0
    ):
        raise kernel_error(op, f"{what} must be an integer tensor, got {a.dtype}{list(a.shape)}")
    return a.astype(np.int64)


def _lengths(op: OperatorDef, x: Array, total: int | None = None) -> Array:
    ln = _ints(op, x, "lengths")
    if ln.size and ln.min() < 0:
        raise kernel_error(op, "lengths must be non-negative")
    if total is not None and int(ln.sum()) != total:
        raise kernel_error(op, f"lengths sum to {int(ln.sum())}, expected {total}")
    return ln


# --- SparseToDense ---------------------------------------------------------------------------
# OUT[indices[k]] += values[k] (kernel in core.ops.shape);  dValues = Gather(dY, indices)


# ``Gather([dY, indices] -> [dValues])`` (Caffe2 ``GetSparseToDenseGradient``).
sparse_to_dense_grad = register_gradient("SparseToDense", op_schema=schema((2, 3), 1, False))(
    template("Gather", [GO(0), I(0)], [1])
)


# --- SparseToDenseMask -----------------------------------------------------------------------
# rows r (one per lengths entry, or one row without lengths); for id = indices[k] in row r with
# p = mask.index(id): OUT[r, p] = values[k] (the last such k wins), else default_value.
# Grad SparseToDenseMaskGradient([indices, dY(, lengths)] -> [dValues]): dValues[k] =
# dY[r, p] for the last k of each (r, p), 0 for the others and for ids outside the mask.


def _mask_rows(op: OperatorDef, inputs: list[Array], n: int, lengths_at: int) -> Array:
    if len(inputs) > lengths_at:
        return _lengths(op, inputs[lengths_at], n)
    return np.array([n], dtype=np.int64)


def _mask_positions(op: OperatorDef, idx: Array) -> Array:
    """Position in arg ``mask`` of each index (``-1`` when not in the mask)."""
    mask = get_ints(op, "mask") or []
    where = {v: p for p, v in enumerate(mask)}
    return np.array([where.get(int(i), -1) for i in idx], dtype=np.int64)


@register_kernel("SparseToDenseMask")
def sparse_to_dense_mask(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[indices (N,), values (N, ...), default_value (...)(, lengths (R,))] ->
    [out ([R,] len(mask), ...)(, presence_mask bool ([R,] len(mask)))]``."""
    expect_inputs(op, inputs, 3, 4)
    idx = _ints(op, inputs[0], "indices")
    vals, default = np.asarray(inputs[1]), np.asarray(inputs[2])
    if vals.shape[:1] != idx.shape or vals.shape[1:] != default.shape:
        raise kernel_error(op, "values must be [len(indices)] + default_value's shape", inputs)
    rows = _mask_rows(op, inputs, idx.size, 3)
    pos = _mask_positions(op, idx)
    cols = len(get_ints(op, "mask") or [])
    check_numel((rows.size, cols, *default.shape), op)
    out = np.broadcast_to(default, (rows.size, cols, *default.shape)).astype(vals.dtype)
    present = np.zeros((rows.size, cols), dtype=bool)
    r_of = np.repeat(np.arange(rows.size), rows)
    for k in range(idx.size):  # in order: a later value for the same id wins
        if pos[k] >= 0:
            out[r_of[k], pos[k]] = vals[k]
            present[r_of[k], pos[k]] = True
    if len(inputs) < 4:
        out, present = out[0], present[0]
    outs = [out]
    if get_bool(op, "return_presence_mask", False):
        outs.append(present)
    return outs


@register_gradient("SparseToDenseMask", op_schema=schema((3, 4), (1, 2), False))
def sparse_to_dense_mask_grad(m: GradientMaker) -> list[OperatorDef]:
    """``SparseToDenseMaskGradient([indices, dY(, lengths)] -> [dValues])``; none for the
    default value (Caffe2 ``GetSparseToDenseMaskGradient``)."""
    ins = [m.I(0), m.GO(0)]
    if len(m.input_names) == 4:
        ins.append(m.I(3))
    return [m.make_op("SparseToDenseMaskGradient", ins, [m.GI(1)])]


@register_kernel("SparseToDenseMaskGradient", gradient_op=True)
def sparse_to_dense_mask_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[indices (N,), dY ([R,] C, ...)(, lengths)] -> [dValues (N, ...)]``."""
    expect_inputs(op, inputs, 2, 3)
    idx = _ints(op, inputs[0], "indices")
    dy = np.asarray(inputs[1])
    rows = _mask_rows(op, inputs, idx.size, 2)
    if len(inputs) < 3:
        dy = dy[None]
    if dy.ndim < 2 or dy.shape[0] != rows.size:
        raise kernel_error(op, "dY must be [len(lengths), len(mask), ...]", inputs)
    pos = _mask_positions(op, idx)
    out = np.zeros((idx.size, *dy.shape[2:]), dtype=dy.dtype)
    start = 0
    for r, n in enumerate(rows):
        used: set[int] = set()
        for k in range(start + int(n) - 1, start - 1, -1):  # the last value of an id wins
            p = int(pos[k])
            if p >= 0 and p not in used:
                used.add(p)
                out[k] = dy[r, p]
        start += int(n)
    return [out]


# --- BatchGather -----------------------------------------------------------------------------
# OUT = take(DATA, INDICES, axis=1) (shape DATA[:1] + INDICES + DATA[2:]);
# dDATA = BatchGatherGradient([DATA, INDICES, dY]) (kernel in core.ops.shape; axis default 1)


@register_kernel("BatchGather")
def batch_gather(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[DATA (B, N, ...), INDICES int (...)] -> [DATA[:, INDICES]]`` (arg ``axis`` = 1)."""
    expect_inputs(op, inputs, 2)
    data = np.asarray(inputs[0])
    axis = get_int(op, "axis", 1)
    axis = axis + data.ndim if axis < 0 else axis
    if data.ndim < 2 or not 0 <= axis < data.ndim:
        raise kernel_error(op, "DATA must have at least 2 dimensions and axis in range", inputs)
    ind = _ints(op, inputs[1], "INDICES", None)
    n = data.shape[axis]
    if ind.size and (ind.min() < 0 or ind.max() >= n):
        raise kernel_error(op, f"index out of range [0, {n})", inputs)
    check_numel(data.shape[:axis] + ind.shape + data.shape[axis + 1 :], op)
    return [np.take(data, ind, axis=axis)]


# ``BatchGatherGradient([DATA, INDICES, dY] -> [dDATA])`` (Caffe2 ``GetBatchGatherGradient``;
# the forward args, ``axis`` among them, are copied).
batch_gather_grad = register_gradient("BatchGather", op_schema=schema(2, 1, False))(
    template("BatchGatherGradient", [I(0), I(1), GO(0)], [0])
)


# --- Device copies and Alias -----------------------------------------------------------------
# Y = X;  dX = dY copied back the other way; a sparse dY (GradientSlice) is copied part by
# part into GradientSlice(X_grad_indices, X_grad_values) (Caffe2 GetGPUToCPUGradient...).


def _identity(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X] -> [X]`` (NumPy has one device: a copy)."""
    expect_inputs(op, inputs, 1)
    return [np.array(inputs[0], copy=True)]


def _copy_maker(back: str) -> Any:
    def maker(m: GradientMaker) -> list[OperatorDef]:
        g = m.g_output[0]
        if isinstance(g, str):
            return [m.make_op(back, [m.GO(0)], [m.GI(0)])]
        x = m.input_names[0]
        gi, gv = x + "_grad_indices", x + "_grad_values"
        ops = [m.make_op(back, [m.GO_I(0)], [gi]), m.make_op(back, [m.GO_V(0)], [gv])]
        m.set_sparse(0, gi, gv)
        return ops

    maker.__doc__ = f"Dense: ``{back}([dY] -> [dX])``; sparse: one {back} per slice part."
    return maker


for _fwd, _back in (("CopyGPUToCPU", "CopyCPUToGPU"), ("CopyCPUToGPU", "CopyGPUToCPU")):
    register_kernel(_fwd)(_identity)
    register_gradient(_fwd, op_schema=schema(1, 1))(_copy_maker(_back))

register_kernel("Alias")(_identity)


@register_gradient("Alias", op_schema=schema(1, 1))
def alias_grad(m: GradientMaker) -> list[OperatorDef]:
    """Pass-through: ``dX = dY`` (dense only, as Caffe2's ``SetDense(0, GO(0))``)."""
    m.set_dense(0, m.GO(0))
    return []


# --- PackSegments / UnpackSegments -----------------------------------------------------------
# Pack: [LENGTHS (B,), TENSOR (sum L, ...)] -> [PACKED (B, T, ...)(, PRESENCE_MASK (B, T))],
#   T = max_length or max(L); padding 0 (-inf with pad_minf).  Unpack is the inverse.
# dTENSOR = UnpackSegments([LENGTHS, dPACKED]);  dPACKED = PackSegments([LENGTHS, dTENSOR]).


def _pack(op: OperatorDef, inputs: list[Array]) -> tuple[Array, Array]:
    ln = _lengths(op, inputs[0])
    data = np.asarray(inputs[1])
    if data.ndim == 0 or int(ln.sum()) != data.shape[0]:
        raise kernel_error(op, "LENGTHS must sum to the first dimension of TENSOR", inputs)
    t = get_int(op, "max_length", -1)
    top = int(ln.max()) if ln.size else 0
    if t == -1:
        t = top
    elif top > t:
        raise kernel_error(op, f"a segment of length {top} exceeds max_length {t}", inputs)
    check_numel((ln.size, t, *data.shape[1:]), op)
    pad = -np.inf if get_bool(op, "pad_minf", False) else 0
    out = np.full((ln.size, t, *data.shape[1:]), pad, dtype=data.dtype)
    present = np.zeros((ln.size, t), dtype=bool)
    start = 0
    for b, n in enumerate(ln):
        out[b, : int(n)] = data[start : start + int(n)]
        present[b, : int(n)] = True
        start += int(n)
    return out, present


@register_kernel("PackSegments")
def pack_segments(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[LENGTHS, TENSOR] -> [PACKED(, PRESENCE_MASK with return_presence_mask)]``."""
    expect_inputs(op, inputs, 2)
    out, present = _pack(op, inputs)
    return [out, present] if get_bool(op, "return_presence_mask", False) else [out]


# ``UnpackSegments([LENGTHS, dPACKED] -> [dTENSOR])``.
pack_segments_grad = register_gradient("PackSegments", op_schema=schema(2, (1, 2), False))(
    template("UnpackSegments", [I(0), GO(0)], [1])
)


@register_kernel("UnpackSegments")
def unpack_segments(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[LENGTHS (B,), PACKED (B, T, ...)] -> [TENSOR (sum L, ...)]``."""
    expect_inputs(op, inputs, 2)
    ln = _lengths(op, inputs[0])
    packed = np.asarray(inputs[1])
    if packed.ndim < 2 or packed.shape[0] != ln.size or (ln.size and ln.max() > packed.shape[1]):
        raise kernel_error(op, "PACKED must be [len(LENGTHS), >= max(LENGTHS), ...]", inputs)
    parts = [packed[b, : int(n)] for b, n in enumerate(ln)]
    if not parts:
        return [np.zeros((0, *packed.shape[2:]), dtype=packed.dtype)]
    return [np.concatenate(parts, axis=0)]


# ``PackSegments([LENGTHS, dTENSOR] -> [dPACKED])`` (args copied: ``max_length``).
unpack_segments_grad = register_gradient("UnpackSegments", op_schema=schema(2, 1, False))(
    template("PackSegments", [I(0), GO(0)], [1])
)


# --- ReversePackedSegs -----------------------------------------------------------------------
# data (T, B, ...): for each b, steps [0, lengths[b]) reversed, the rest kept;
# dData = ReversePackedSegs([dY, lengths]) (the map is its own inverse)


@register_kernel("ReversePackedSegs")
def reverse_packed_segs(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[data (T, B, ...), lengths (B,)] -> [reversed (T, B, ...)]``."""
    expect_inputs(op, inputs, 2)
    data = np.asarray(inputs[0])
    ln = _lengths(op, inputs[1])
    if data.ndim < 2 or data.shape[1] != ln.size or (ln.size and ln.max() > data.shape[0]):
        raise kernel_error(op, "data must be [T >= max(lengths), len(lengths), ...]", inputs)
    out = np.array(data, copy=True)
    for b, n in enumerate(ln):
        out[: int(n), b] = data[: int(n), b][::-1]
    return [out]


# ``ReversePackedSegs([dY, lengths] -> [dData])``.
reverse_packed_segs_grad = register_gradient("ReversePackedSegs", op_schema=schema(2, 1, False))(
    template("ReversePackedSegs", [GO(0), I(1)], [0])
)


# --- BooleanMask -----------------------------------------------------------------------------
# [data (N, ...), mask bool (N,)] -> [data[mask](, masked_indices int64)];
# dData = BooleanMaskGradient([mask, dY]): dY scattered back to the kept rows, 0 elsewhere


def _bool_mask(op: OperatorDef, x: Array, n: int | None) -> Array:
    mask = np.asarray(x)
    if mask.dtype != np.bool_ or mask.ndim != 1 or (n is not None and mask.size != n):
        raise kernel_error(op, f"mask must be a bool vector of {n} entries, got "
                               f"{mask.dtype}{list(mask.shape)}")
    return mask


@register_kernel("BooleanMask")
def boolean_mask(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[data (N, ...), mask bool (N,)] -> [masked (M, ...), masked_indices int64 (M,)]``."""
    expect_inputs(op, inputs, 2)
    data = np.asarray(inputs[0])
    if data.ndim == 0:
        raise kernel_error(op, "data must have at least 1 dimension", inputs)
    mask = _bool_mask(op, inputs[1], data.shape[0])
    return [data[mask], np.flatnonzero(mask).astype(np.int64)]


# ``BooleanMaskGradient([mask, dY] -> [dData])`` (Caffe2 ``GetBooleanMaskGradient``).
boolean_mask_grad = register_gradient("BooleanMask", op_schema=schema(2, (1, 2), False))(
    template("BooleanMaskGradient", [I(1), GO(0)], [0])
)


@register_kernel("BooleanMaskGradient", gradient_op=True)
def boolean_mask_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[mask (N,), dY (M, ...)] -> [dData (N, ...)]``."""
    expect_inputs(op, inputs, 2)
    mask = _bool_mask(op, inputs[0], None)
    dy = np.asarray(inputs[1])
    if dy.ndim == 0 or dy.shape[0] != int(mask.sum()):
        raise kernel_error(op, "dY must have one row per true mask entry", inputs)
    out = np.zeros((mask.size, *dy.shape[1:]), dtype=dy.dtype)
    out[mask] = dy
    return [out]


# --- BatchSparseToDense / BatchDenseToSparse -------------------------------------------------
# Row i of a [B, D] matrix holds values at columns indices[off_i : off_i + lengths[i]]:
# BatchSparseToDense([lengths, indices, values(, like)]) -> dense (default_value elsewhere;
# D = dense_last_dim or like's last dim); BatchDenseToSparse([lengths, indices, dense]) ->
# values. Each is the other's gradient (Caffe2 GetBatch{SparseToDense,DenseToSparse}Gradient:
# BatchDenseToSparse([lengths, indices, dY]) -> dValues; BatchSparseToDense([lengths,
# indices, dY, dense]) -> dDense). A column repeated within a row is refused (Caffe2 requires
# none: the forward keeps the last value while its gradient would go to every copy).


def _batch_columns(op: OperatorDef, inputs: list[Array], d: int) -> tuple[Array, Array]:
    ln = _lengths(op, inputs[0])
    idx = _ints(op, inputs[1], "indices")
    if int(ln.sum()) != idx.size:
        raise kernel_error(op, f"lengths sum to {int(ln.sum())}, indices hold {idx.size}", inputs)
    if idx.size and (idx.min() < 0 or idx.max() >= d):
        raise kernel_error(op, f"An indice is outside the last dim of dense ({d})", inputs)
    rows = np.repeat(np.arange(ln.size), ln)
    flat = rows * d + idx
    if np.unique(flat).size != flat.size:
        raise kernel_error(op, "indices must not repeat within a row", inputs)
    return rows, idx


@register_kernel("BatchSparseToDense")
def batch_sparse_to_dense(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[lengths (B,), indices (L,), values (L,)(, like (B, D))] -> [dense (B, D)]``."""
    expect_inputs(op, inputs, 3, 4)
    vals = np.asarray(inputs[2])
    if len(inputs) == 4:
        d = int(np.asarray(inputs[3]).shape[-1])
    else:
        d = get_int(op, "dense_last_dim", -1)
        if d < 0:
            raise kernel_error(op, "needs dense_last_dim or output_shape_inference", inputs)
    rows, idx = _batch_columns(op, inputs, d)
    if vals.shape != idx.shape:
        raise kernel_error(op, "values must be shaped like indices", inputs)
    b = np.asarray(inputs[0]).size
    check_numel((b, d), op)
    out = np.full((b, d), get_float_arg(op, "default_value", 0.0), dtype=vals.dtype)
    out[rows, idx] = vals
    return [out]


# ``BatchDenseToSparse([lengths, indices, dY] -> [dValues])``.
batch_sparse_to_dense_grad = template("BatchDenseToSparse", [I(0), I(1), GO(0)], [2])
register_gradient("BatchSparseToDense", op_schema=schema((3, 4), 1, False))(
    batch_sparse_to_dense_grad
)


@register_kernel("BatchDenseToSparse")
def batch_dense_to_sparse(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[lengths (B,), indices (L,), dense (B, D)] -> [values (L,)]``."""
    expect_inputs(op, inputs, 3)
    dense = np.asarray(inputs[2])
    if dense.ndim != 2 or dense.shape[0] != np.asarray(inputs[0]).size:
        raise kernel_error(op, "dense must be [len(lengths), D]", inputs)
    rows, idx = _batch_columns(op, inputs, dense.shape[1])
    return [dense[rows, idx]]


# ``BatchSparseToDense([lengths, indices, dY, dense] -> [dDense])`` (zeros elsewhere).
batch_dense_to_sparse_grad = register_gradient("BatchDenseToSparse", op_schema=schema(3, 1, False))(
    template("BatchSparseToDense", [I(0), I(1), GO(0), I(2)], [2])
)
