"""Sequence ops: AddPadding, RemovePadding (gradient op GatherPadding) and SequenceMask.

Source: Caffe2 ``sequence_ops.cc`` and ``boolean_mask_ops.cc`` (spec §5.3). SequenceMask: see
:func:`sequence_mask`. A tensor ``(N, ...)`` is cut into ranges
along its first dimension by ``lengths`` (one range of ``N`` rows without it):

* ``AddPadding([data, (lengths, start_padding, end_padding)] -> [out, (lengths_out)])``: each
  range gets ``padding_width`` rows of ``start_padding`` before it and ``end_padding_width``
  (default ``padding_width``) rows of ``end_padding`` (default ``start_padding``) after it;
  paddings are shaped like one row (zeros when not given); ``lengths_out = lengths + pw + epw``.
* ``RemovePadding([data, (lengths)] -> [out, (lengths_out)])``: the inverse (drops those rows).

Gradients (Caffe2 ``GetAddPaddingGradient`` / ``GetRemovePaddingGradient``):
``RemovePadding([dY, (lengths_out)]) -> [d_data]`` plus, with paddings given,
``GatherPadding([dY, lengths_out]) -> [d_start(, d_end)]`` (the sums of the padding rows'
gradients; with one output both sums go to ``d_start``, which then pads both ends); and
``AddPadding([dY, (lengths_out)]) -> [d_data]`` (zero padding), the forward args copied.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.errors import GradientError
from core.ops._args import check_numel, get_float, get_int, get_str
from core.ops.elementwise import expect_inputs, kernel_error
from core.registry import (
    GradientMaker,
    OperatorDef,
    make_arg,
    register_gradient,
    register_kernel,
    schema,
)

Array = np.ndarray[Any, Any]


def _widths(op: OperatorDef) -> tuple[int, int]:
    pw = get_int(op, "padding_width", 1)
    epw = get_int(op, "end_padding_width", -1)
    epw = pw if epw < 0 else epw
    if pw < 0:
        raise kernel_error(op, "padding_width must be non-negative")
    return pw, epw


def _ranges(op: OperatorDef, inputs: list[Array], n: int) -> Array:
    if len(inputs) < 2:
        return np.array([n], dtype=np.int64)
    ln = np.asarray(inputs[1])
    if ln.ndim != 1 or not (np.issubdtype(ln.dtype, np.integer) or ln.size == 0):
        raise kernel_error(op, "lengths must be a 1-D integer vector", inputs)
    ln = ln.astype(np.int64)
    if (ln.size and ln.min() < 0) or int(ln.sum()) != n:
        raise kernel_error(op, f"lengths must be non-negative and sum to {n}", inputs)
    return ln


def _pad_row(op: OperatorDef, x: Array | None, row: tuple[int, ...], dtype: Any) -> Array:
    if x is None:
        return np.zeros(row, dtype=dtype)
    p = np.asarray(x)
    if p.size != int(np.prod(row, dtype=np.int64)):
        raise kernel_error(op, f"a padding must hold one row of shape {list(row)}")
    return p.reshape(row).astype(dtype)


@register_kernel("AddPadding")
def add_padding(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[data (N, ...)(, lengths (R,), start (...), end (...))] -> [out, lengths_out]``."""
    expect_inputs(op, inputs, 1, 4)
    data = np.asarray(inputs[0])
    if data.ndim == 0:
        raise kernel_error(op, "data must have at least 1 dimension", inputs)
    pw, epw = _widths(op)
    ln = _ranges(op, inputs, data.shape[0])
    row = data.shape[1:]
    start = _pad_row(op, inputs[2] if len(inputs) > 2 else None, row, data.dtype)
    end = _pad_row(op, inputs[3], row, data.dtype) if len(inputs) > 3 else start
    check_numel((data.shape[0] + ln.size * (pw + epw), *row), op)
    parts: list[Array] = []
    off = 0
    for n in ln:
        parts += [np.broadcast_to(start, (pw, *row)), data[off : off + int(n)],
                  np.broadcast_to(end, (epw, *row))]
        off += int(n)
    out = np.concatenate(parts, axis=0) if parts else np.zeros((0, *row), data.dtype)
    return [out.astype(data.dtype), (ln + pw + epw).astype(np.int32)]


@register_gradient("AddPadding", op_schema=schema((1, 4), (1, 2), False))
def add_padding_grad(m: GradientMaker) -> list[OperatorDef]:
    """``RemovePadding([dY(, lengths_out)])``, and ``GatherPadding`` for given paddings.

    Raises:
        GradientError: lengths given but ``lengths_out`` not output (Caffe2 enforces it).
    """
    ins = [m.GO(0)]
    if len(m.input_names) > 1:
        if len(m.output_names) < 2:
            raise GradientError("AddPadding with lengths needs its lengths_out output")
        ins.append(m.O(1))
    ops = [m.make_op("RemovePadding", ins, [m.GI(0)])]
    if len(m.input_names) >= 3:
        pads = [m.GI(2)] + ([m.GI(3)] if len(m.input_names) == 4 else [])
        ops.append(m.make_op("GatherPadding", list(ins), pads))
    return ops


@register_kernel("RemovePadding")
def remove_padding(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[data (N, ...)(, lengths (R,))] -> [out (N - R·(pw+epw), ...), lengths_out]``."""
    expect_inputs(op, inputs, 1, 2)
    data = np.asarray(inputs[0])
    if data.ndim == 0:
        raise kernel_error(op, "data must have at least 1 dimension", inputs)
    pw, epw = _widths(op)
    ln = _ranges(op, inputs, data.shape[0])
    if ln.size and ln.min() < pw + epw:
        raise kernel_error(op, f"every range must hold its {pw + epw} padding rows", inputs)
    parts = []
    off = 0
    for n in ln:
        parts.append(data[off + pw : off + int(n) - epw])
        off += int(n)
    out = np.concatenate(parts, axis=0) if parts else np.zeros((0, *data.shape[1:]), data.dtype)
    return [out, (ln - pw - epw).astype(np.int32)]


@register_gradient("RemovePadding", op_schema=schema((1, 2), (1, 2), False))
def remove_padding_grad(m: GradientMaker) -> list[OperatorDef]:
    """``AddPadding([dY(, lengths_out)] -> [d_data])`` (zero paddings, args copied)."""
    ins = [m.GO(0)]
    if len(m.input_names) > 1:
        if len(m.output_names) < 2:
            raise GradientError("RemovePadding with lengths needs its lengths_out output")
        ins.append(m.O(1))
    return [m.make_op("AddPadding", ins, [m.GI(0)])]


@register_kernel("GatherPadding", gradient_op=True)
def gather_padding(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[dY (N, ...)(, lengths)] -> [d_start (...)(, d_end (...))]``: padding rows summed."""
    expect_inputs(op, inputs, 1, 2)
    dy = np.asarray(inputs[0])
    pw, epw = _widths(op)
    ln = _ranges(op, inputs, dy.shape[0])
    row = dy.shape[1:]
    start = np.zeros(row, dtype=dy.dtype)
    end = np.zeros(row, dtype=dy.dtype)
    off = 0
    for n in ln:
        if int(n) < pw + epw:
            raise kernel_error(op, "a range is shorter than its padding", inputs)
        start += dy[off : off + pw].sum(axis=0)
        end += dy[off + int(n) - epw : off + int(n)].sum(axis=0)
        off += int(n)
    return [start, end] if len(op.output) > 1 else [start + end]


# --- SequenceMask ----------------------------------------------------------------------------
# X viewed as [N, M] (N = dims before ``axis``, M = dims from it) or, with ``batch``, as
# [B, N, M] masked per batch; entry (i, j) becomes fill_val (0 with ``grad``) where the mode
# says: sequence j >= lengths[i]; window |j - centers[i]| > radius; upper j > i; lower j < i;
# upperdiag j >= i; lowerdiag j <= i. ``repeat_from_axis`` repeats the sequence mask over the
# trailing dims. Grad: SequenceMask([dY(, lengths)] -> [dX]) with the forward args plus
# grad=1 (Caffe2 GetSequenceMaskGradient, which copies no other args).


def _seq_mask(op: OperatorDef, inputs: list[Array], n: int, m: int) -> Array:
    """Boolean [n, m]: where to fill."""
    mode = get_str(op, "mode", "sequence")
    i = np.arange(n)[:, None]
    j = np.arange(m)[None, :]
    if mode in ("sequence", "window"):
        if len(inputs) < 2:
            raise kernel_error(op, f"mode '{mode}' needs a second input", inputs)
        v = np.asarray(inputs[1]).reshape(-1).astype(np.int64)
        if v.size < n:
            raise kernel_error(op, "Out of bound.", inputs)
        if mode == "sequence":
            return np.asarray(j >= v[:n, None])
        r = get_int(op, "radius", 10)
        return np.asarray((j > v[:n, None] + r) | (j < v[:n, None] - r))
    tri = {"upper": j > i, "lower": j < i, "upperdiag": j >= i, "lowerdiag": j <= i}
    if mode not in tri:
        raise kernel_error(op, f"Unsupported mode for SequenceMaskOp: {mode}")
    return np.asarray(tri[mode])


def _axis(op: OperatorDef, name: str, default: int, ndim: int) -> int:
    a = get_int(op, name, default)
    a = a + ndim if a < 0 else a
    if not 0 <= a < ndim:
        raise kernel_error(op, f"{name} {get_int(op, name, default)} out of range")
    return a


@register_kernel("SequenceMask")
def sequence_mask(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X (float)(, lengths | centers (int))] -> [X masked]``; args ``mode`` ('sequence'),
    ``axis`` (1), ``batch``, ``repeat_from_axis``, ``radius`` (10), ``fill_val`` (-inf),
    ``grad`` (fill with 0)."""
    expect_inputs(op, inputs, 1, 2)
    x = np.asarray(inputs[0])
    if x.ndim == 0:
        raise kernel_error(op, "input must have at least 1 dimension", inputs)
    ca = _axis(op, "axis", 1, x.ndim)
    fill = 0.0 if get_int(op, "grad", 0) else get_float(op, "fill_val", -np.inf)
    shape = x.shape
    if any(a.name == "batch" for a in op.arg):
        cb = _axis(op, "batch", 0, x.ndim)
        if cb >= ca:
            raise kernel_error(op, "batch must come before axis", inputs)
        b = int(np.prod(shape[: cb + 1], dtype=np.int64))
        n = int(np.prod(shape[cb + 1 : ca], dtype=np.int64))
        m = int(np.prod(shape[ca:], dtype=np.int64))
        mask = np.broadcast_to(_seq_mask(op, inputs, n, m), (b, n, m))
    elif any(a.name == "repeat_from_axis" for a in op.arg):
        rf = _axis(op, "repeat_from_axis", 0, x.ndim)
        n = int(np.prod(shape[:ca], dtype=np.int64))
        d = int(np.prod(shape[rf:], dtype=np.int64))
        m = int(np.prod(shape[ca:], dtype=np.int64)) // max(d, 1)
        mask = np.repeat(_seq_mask(op, inputs, n, m)[:, :, None], d, axis=2)
    else:
        n = int(np.prod(shape[:ca], dtype=np.int64))
        mask = _seq_mask(op, inputs, n, int(np.prod(shape[ca:], dtype=np.int64)))
    return [np.where(mask.reshape(shape), np.asarray(fill, dtype=x.dtype), x)]


@register_gradient("SequenceMask", op_schema=schema((1, 2), 1, False), copy_arguments=False)
def sequence_mask_grad(m: GradientMaker) -> list[OperatorDef]:
    """``SequenceMask([dY(, lengths)] -> [dX])``, forward args + ``grad=1`` (zeros masked)."""
    ins = [m.GO(0)] + ([m.I(1)] if len(m.input_names) > 1 else [])
    return [m.make_op("SequenceMask", ins, [m.GI(0)], [*m.op.arg, make_arg("grad", 1)])]
