"""Segment reductions: the Lengths*, SparseLengths* and (Sparse)(Un)SortedSegment* families.

Source: Caffe2 ``segment_reduction_op.{h,cc}`` and ``lengths_reducer_ops.cc`` (reducers in
``reducer_functors.h``; spec §5.3). Every forward op reduces rows of ``DATA`` into segments:

* rows: ``DATA[i]`` (plain) or ``DATA[INDICES[i]]`` (``Sparse*``: a fused Gather);
* segments: given by ``LENGTHS`` (``[2, 1]`` = rows 0-1, row 2), by sorted contiguous
  ``SEGMENT_IDS`` starting at 0 (``SortedSegment*``), or by any ``SEGMENT_IDS`` with
  ``K = num_segments`` or ``max + 1`` (``UnsortedSegment*``);
* reducer ``Sum``, ``Mean`` (empty segment -> 0), ``WeightedSum`` (input 1 ``SCALARS``, one
  float per row) or ``Max`` (``LengthsMax`` only).

``OUTPUT`` is ``[K] + DATA.shape[1:]`` in DATA's dtype; indices, lengths and segment ids are
int32/int64. Gradients (Caffe2 ``LengthsOpGetGradient`` / ``SegmentOpGetGradient``): one
gradient op writing one gradient row per reduced row; for the ``Sparse*`` types that is the
values of ``GradientSlice(INDICES, DATA_grad_values)``, for the others the dense ``DATA_grad``.
``WeightedSum`` with ``grad_on_weights`` also differentiates ``SCALARS`` (Lengths types only;
the Segment types raise as Caffe2 does). Forward arguments are copied into the gradient op.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from core.errors import GradientError
from core.ops._args import check_numel, get_int
from core.ops.elementwise import expect_inputs, kernel_error
from core.registry import (
    GradientMaker,
    OperatorDef,
    register_gradient,
    register_kernel,
    schema,
)
from core.template import GO, I, O, template

Array = np.ndarray[Any, Any]


def _ints(op: OperatorDef, x: Array, what: str) -> Array:
    """``x`` as a 1-D int64 array, else ExecutionError."""
    a = np.asarray(x)
    if a.ndim != 1 or not (np.issubdtype(a.dtype, np.integer) or a.size == 0):
        raise kernel_error(op, f"{what} must be a 1-D integer vector, got {a.dtype}{list(a.shape)}")
    return a.astype(np.int64)


def segments_of_lengths(op: OperatorDef, lengths: Array, n: int) -> tuple[Array, int]:
    """Segment id per row and ``K`` from ``LENGTHS`` (sum must be ``n``, none negative)."""
    ln = _ints(op, lengths, "LENGTHS")
    if ln.size and ln.min() < 0:
        raise kernel_error(op, "LENGTHS must be non-negative")
    if int(ln.sum()) != n:
        raise kernel_error(op, f"LENGTHS sum to {int(ln.sum())} but there are {n} rows")
    return np.repeat(np.arange(ln.size, dtype=np.int64), ln), int(ln.size)


def _sorted_segments(op: OperatorDef, ids: Array, n: int) -> tuple[Array, int]:
    s = _ints(op, ids, "SEGMENT_IDS")
    if s.size != n:
        raise kernel_error(op, f"SEGMENT_IDS has {s.size} entries but there are {n} rows")
    if s.size and (s[0] != 0 or np.any(np.diff(s) < 0) or np.any(np.diff(s) > 1)):
        raise kernel_error(op, "Indices must be sorted and not have gaps")
    return s, int(s[-1]) + 1 if s.size else 0


def _unsorted_segments(op: OperatorDef, ids: Array, n: int) -> tuple[Array, int]:
    s = _ints(op, ids, "SEGMENT_IDS")
    if s.size != n:
        raise kernel_error(op, f"SEGMENT_IDS has {s.size} entries but there are {n} rows")
    if s.size and s.min() < 0:
        raise kernel_error(op, "SEGMENT_IDS must be non-negative")
    k = get_int(op, "num_segments", -1)
    top = int(s.max()) + 1 if s.size else 0
    if k == -1:
        k = top
    elif top > k:
        raise kernel_error(op, f"segment id {top - 1} >= num_segments {k}")
    return s, k


_SEGMENTERS = {
    "Lengths": segments_of_lengths,
    "SortedSegment": _sorted_segments,
    "UnsortedSegment": _unsorted_segments,
}


class Family(NamedTuple):
    """Shape of one forward op type: how rows are picked and segments given."""

    segments: str  # "Lengths" | "SortedSegment" | "UnsortedSegment"
    sparse: bool  # rows are DATA[INDICES]
    reducer: str  # "Sum" | "Mean" | "WeightedSum" | "Max"

    @property
    def n_inputs(self) -> int:
        """DATA, (SCALARS), (INDICES), LENGTHS/SEGMENT_IDS."""
        return 2 + (self.reducer == "WeightedSum") + self.sparse

    @property
    def indices_pos(self) -> int:
        """Input position of INDICES (sparse types)."""
        return 1 + (self.reducer == "WeightedSum")


def _rows(op: OperatorDef, f: Family, inputs: list[Array]) -> tuple[Array, Array]:
    """``(DATA, source row per reduced row)``, validating indices."""
    data = np.asarray(inputs[0])
    if data.ndim == 0:
        raise kernel_error(op, "DATA must have at least 1 dimension", inputs)
    if not f.sparse:
        return data, np.arange(data.shape[0], dtype=np.int64)
    idx = _ints(op, inputs[f.indices_pos], "INDICES")
    if idx.size and (idx.min() < 0 or idx.max() >= data.shape[0]):
        raise kernel_error(op, f"Index out of bounds, range 0 to {data.shape[0]}", inputs)
    return data, idx


def _scalars(op: OperatorDef, x: Array, n: int) -> Array:
    w = np.asarray(x)
    if w.shape != (n,):
        raise kernel_error(op, f"SCALARS must hold one value per row ({n}), got {list(w.shape)}")
    return w


def _counts(seg: Array, k: int) -> Array:
    return np.bincount(seg, minlength=k).astype(np.float64)


def reduce_segments(op: OperatorDef, f: Family, inputs: list[Array]) -> list[Array]:
    """Forward kernel of every family type: ``OUTPUT[k] = reduce(rows of segment k)``."""
    expect_inputs(op, inputs, f.n_inputs)
    data, src = _rows(op, f, inputs)
    seg, k = _SEGMENTERS[f.segments](op, inputs[-1], src.size)
    block = data.shape[1:]
    check_numel((k, *block), op)
    rows = data[src]
    if f.reducer == "Max":
        out = np.full((k, *block), -np.inf, dtype=np.float64)
        np.maximum.at(out, seg, rows)
        out[_counts(seg, k) == 0] = 0.0  # Caffe2: an empty segment gives 0
        return [out.astype(data.dtype)]
    if f.reducer == "WeightedSum":
        w = _scalars(op, inputs[1], src.size)
        rows = rows * w.reshape((-1,) + (1,) * len(block))
    out = np.zeros((k, *block), dtype=np.result_type(data.dtype, rows.dtype))
    np.add.at(out, seg, rows)
    if f.reducer == "Mean":
        c = np.maximum(_counts(seg, k), 1.0).reshape((-1,) + (1,) * len(block))
        out = out / c
    return [out.astype(data.dtype)]


# --- gradient kernels --------------------------------------------------------------------
# dROW_i = dY[seg_i] · (w_i for WeightedSum) / (|segment| for Mean); one row per reduced row.


def _row_grads(
    op: OperatorDef, reducer: str, inputs: list[Array], segments: str, n: int | None
) -> tuple[Array, Array, int]:
    """``(dROWS, seg, k)`` from ``[(SCALARS), dY, LENGTHS|SEGMENT_IDS, ...]``."""
    off = 1 if reducer == "WeightedSum" else 0
    dy = np.asarray(inputs[off])
    if dy.ndim == 0:
        raise kernel_error(op, "the output gradient must have at least 1 dimension", inputs)
    ids = inputs[off + 1]
    if n is None:
        n = int(_ints(op, ids, "LENGTHS").sum()) if segments == "Lengths" else np.asarray(ids).size
    seg, k = _SEGMENTERS[segments](op, ids, n)
    if segments == "UnsortedSegment":
        k = max(k, dy.shape[0])
    if dy.shape[0] != k:
        raise kernel_error(op, f"the output gradient has {dy.shape[0]} rows, expected {k}", inputs)
    g = dy[seg]
    block = (1,) * (dy.ndim - 1)
    if reducer == "WeightedSum":
        g = g * _scalars(op, inputs[0], n).reshape((-1, *block))
    if reducer == "Mean":
        g = g / np.maximum(_counts(seg, k), 1.0)[seg].reshape((-1, *block))
    return g.astype(dy.dtype), seg, k


def _gradient_kernel(segments: str, reducer: str) -> Any:
    def kernel(op: OperatorDef, inputs: list[Array]) -> list[Array]:
        """``[(SCALARS), dY, LENGTHS|SEGMENT_IDS(, INDICES)] -> [dROWS]``."""
        expect_inputs(op, inputs, 2 + (reducer == "WeightedSum"), 3 + (reducer == "WeightedSum"))
        return [_row_grads(op, reducer, inputs, segments, None)[0]]

    return kernel


def _with_main_input_kernel(sparse: bool) -> Any:
    def kernel(op: OperatorDef, inputs: list[Array]) -> list[Array]:
        """``[SCALARS, dY, LENGTHS, DATA(, INDICES)] -> [dROWS, dSCALARS]``.

        ``dSCALARS_i = <dY[seg_i], DATA[row_i]>`` (WeightedSum with ``grad_on_weights``).
        """
        expect_inputs(op, inputs, 4 + sparse)
        data = np.asarray(inputs[3])
        src = _ints(op, inputs[4], "INDICES") if sparse else np.arange(data.shape[0])
        if src.size and (src.min() < 0 or src.max() >= data.shape[0]):
            raise kernel_error(op, "Index out of bounds", inputs)
        g, seg, _ = _row_grads(op, "WeightedSum", inputs, "Lengths", src.size)
        dy = np.asarray(inputs[1])
        rows = data[src].reshape(src.size, -1)
        dw = np.sum(dy[seg].reshape(src.size, -1) * rows, axis=1)
        return [g, dw.astype(np.asarray(inputs[0]).dtype)]

    return kernel


def _lengths_max_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[OUTPUT, dY, LENGTHS, DATA] -> [dDATA]``: ``dY[seg_i]`` where ``DATA_i`` is the max.

    Every row equal to its segment's max gets the gradient (ties all do, as in Caffe2).
    """
    expect_inputs(op, inputs, 4)
    out, dy, data = (np.asarray(inputs[i]) for i in (0, 1, 3))
    seg, k = segments_of_lengths(op, inputs[2], data.shape[0] if data.ndim else -1)
    if out.shape != dy.shape or out.shape[:1] != (k,) or out.shape[1:] != data.shape[1:]:
        raise kernel_error(op, "OUTPUT, dY and DATA shapes disagree", inputs)
    return [np.where(data == out[seg], dy[seg], 0).astype(dy.dtype)]


# --- registration ------------------------------------------------------------------------


def _lengths_maker(f: Family, need_indices: bool) -> Any:
    """Caffe2 ``LengthsOpGetGradient`` for ``f`` (``GradientNeedIndices`` = ``need_indices``)."""

    def maker(m: GradientMaker) -> list[OperatorDef]:
        weighted = f.reducer == "WeightedSum"
        on_weights = weighted and bool(m.arg_i("grad_on_weights", 0))
        ins = [m.I(1)] if weighted else []
        suffix = "Gradient"
        if f.reducer == "Max":
            ins.append(m.O(0))
            suffix = "AndForwardOutput" + suffix
        ins += [m.GO(0), m.I(f.n_inputs - 1)]
        pushed = False
        if on_weights or f.reducer == "Max":
            ins.append(m.I(0))
            if f.sparse:
                ins.append(m.I(f.indices_pos))
                pushed = True
            suffix = "WithMainInput" + suffix
        if need_indices and not pushed:
            ins.append(m.I(f.indices_pos) if f.sparse else m.I(0))
        base = m.input_names[0]
        outs = [base + "_grad_values" if f.sparse else m.GI(0)]
        if on_weights:
            outs.append(m.GI(1))
        elif weighted:
            m.warn_no_gradient([1], "grad_on_weights is not set (Caffe2's default); set "
                               "grad_on_weights: 1 for the weights' gradient")
        kind = ("SparseLengths" if f.sparse else "Lengths") + (
            "IndicesInGradient" if need_indices else ""
        )
        op = m.make_op(kind + f.reducer + suffix, ins, outs)
        if f.sparse:
            m.set_sparse(0, m.I(f.indices_pos), outs[0])
        return [op]

    return maker


def _segment_maker(f: Family) -> Any:
    """Caffe2 ``SegmentOpGetGradient`` (sorted / unsorted, plain / sparse)."""

    def maker(m: GradientMaker) -> list[OperatorDef]:
        if f.reducer == "WeightedSum" and m.arg_i("grad_on_weights", 0):
            raise GradientError(
                "grads on aux inputs are not yet implemented for Segment operators."
            )
        ins = [m.I(1)] if f.reducer == "WeightedSum" else []
        ins += [m.GO(0), m.I(f.n_inputs - 1)]
        out = m.input_names[0] + "_grad_values" if f.sparse else m.GI(0)
        op = m.make_op(f.segments + f.reducer + "Gradient", ins, [out])
        if f.sparse:
            m.set_sparse(0, m.I(f.indices_pos), out)
        return [op]

    return maker


def _register(name: str, f: Family, maker: Any) -> None:
    n = f.n_inputs

    def forward(op: OperatorDef, inputs: list[Array]) -> list[Array]:
        return reduce_segments(op, f, inputs)

    forward.__doc__ = f"{name}: see the module docstring ({n} inputs -> [OUTPUT])."
    register_kernel(name)(forward)
    register_gradient(name, op_schema=schema(n, 1, False))(maker)


#: Lengths types: (reducer, Caffe2 GradientNeedIndices for the plain / the sparse type).
_LENGTHS = {"Sum": (True, True), "Mean": (True, True), "WeightedSum": (False, True)}

for _red, (_plain_idx, _sparse_idx) in _LENGTHS.items():
    _register(f"Lengths{_red}", Family("Lengths", False, _red),
              _lengths_maker(Family("Lengths", False, _red), _plain_idx))
    _register(f"SparseLengths{_red}", Family("Lengths", True, _red),
              _lengths_maker(Family("Lengths", True, _red), _sparse_idx))
_register("LengthsMax", Family("Lengths", False, "Max"),
          _lengths_maker(Family("Lengths", False, "Max"), False))

for _seg in ("SortedSegment", "UnsortedSegment"):
    for _red in ("Sum", "Mean", "WeightedSum"):
        _register(f"{_seg}{_red}", Family(_seg, False, _red),
                  _segment_maker(Family(_seg, False, _red)))
        _register(f"Sparse{_seg}{_red}", Family(_seg, True, _red),
                  _segment_maker(Family(_seg, True, _red)))
        register_kernel(f"{_seg}{_red}Gradient", gradient_op=True)(_gradient_kernel(_seg, _red))

for _red in ("Sum", "Mean", "WeightedSum"):
    for _kind in ("Lengths", "LengthsIndicesInGradient", "SparseLengths",
                  "SparseLengthsIndicesInGradient"):
        register_kernel(f"{_kind}{_red}Gradient", gradient_op=True)(
            _gradient_kernel("Lengths", _red)
        )
register_kernel("LengthsWeightedSumWithMainInputGradient", gradient_op=True)(
    _with_main_input_kernel(False)
)
for _kind in ("SparseLengths", "SparseLengthsIndicesInGradient"):
    register_kernel(f"{_kind}WeightedSumWithMainInputGradient", gradient_op=True)(
        _with_main_input_kernel(True)
    )
register_kernel("LengthsMaxWithMainInputAndForwardOutputGradient", gradient_op=True)(
    _lengths_max_gradient
)


# --- LengthsTile -------------------------------------------------------------------------
# OUTPUT = DATA[i] repeated LENGTHS[i] times;  dDATA = LengthsSum([dY, LENGTHS])


@register_kernel("LengthsTile")
def lengths_tile(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[DATA (N, ...), LENGTHS (N,) int] -> [OUTPUT (sum(LENGTHS), ...)]``."""
    expect_inputs(op, inputs, 2)
    data = np.asarray(inputs[0])
    ln = _ints(op, inputs[1], "LENGTHS")
    if data.ndim == 0 or ln.size != data.shape[0] or (ln.size and ln.min() < 0):
        raise kernel_error(op, "LENGTHS must hold one non-negative count per row of DATA", inputs)
    check_numel((int(ln.sum()), *data.shape[1:]), op)
    return [np.repeat(data, ln, axis=0)]


# ``LengthsSum([dY, LENGTHS] -> [dDATA])`` (Caffe2 ``GetLengthsTileGradient``).
lengths_tile_grad = register_gradient("LengthsTile", op_schema=schema(2, 1, False))(
    template("LengthsSum", [GO(0), I(1)], [0])
)



# --- SortedSegmentRange{Sum, Mean, Max, LogSumExp, LogMeanExp} ----------------------------
# Segments as SortedSegment* (sorted, contiguous, from 0; none empty by construction);
# OUTPUT[k] = sum | mean | max | log Σ exp | log mean exp of the segment's rows.
# Grad SortedSegmentRange<R>Gradient([DATA, OUTPUT, dY, SEGMENT_IDS] -> [dDATA]), per row i
# of segment k: dY_k · (1 | 1/n_k | [x_i == y_k] (ties all get it) | exp(x_i - y_k)
# | exp(x_i - y_k) / n_k) (Caffe2 AbstractSortedSegmentRangeDef::GetGradient).

_RANGE = ("Sum", "Mean", "Max", "LogSumExp", "LogMeanExp")


def _range_forward(reducer: str) -> Any:
    def kernel(op: OperatorDef, inputs: list[Array]) -> list[Array]:
        """``[DATA (N, ...), SEGMENT_IDS (N,)] -> [OUTPUT (K, ...)]``."""
        expect_inputs(op, inputs, 2)
        data = np.asarray(inputs[0])
        if data.ndim == 0:
            raise kernel_error(op, "DATA must have at least 1 dimension", inputs)
        seg, k = _sorted_segments(op, inputs[1], data.shape[0])
        x = data.astype(np.float64)
        out = np.empty((k, *data.shape[1:]), dtype=np.float64)
        for s in range(k):
            rows = x[seg == s]
            if reducer == "Sum":
                out[s] = rows.sum(axis=0)
            elif reducer == "Mean":
                out[s] = rows.mean(axis=0)
            elif reducer == "Max":
                out[s] = rows.max(axis=0)
            else:
                top = rows.max(axis=0)
                lse = top + np.log(np.exp(rows - top).sum(axis=0))
                out[s] = lse - np.log(rows.shape[0]) if reducer == "LogMeanExp" else lse
        return [out.astype(data.dtype)]

    return kernel


def _range_gradient(reducer: str) -> Any:
    def kernel(op: OperatorDef, inputs: list[Array]) -> list[Array]:
        """``[DATA, OUTPUT, dY, SEGMENT_IDS] -> [dDATA]``."""
        expect_inputs(op, inputs, 4)
        data, out, dy = (np.asarray(inputs[i]) for i in range(3))
        seg, k = _sorted_segments(op, inputs[3], data.shape[0] if data.ndim else -1)
        if out.shape != dy.shape or dy.shape != (k, *data.shape[1:]):
            raise kernel_error(op, "DATA, OUTPUT and dY shapes disagree", inputs)
        g, y = dy[seg], out[seg]
        n = np.bincount(seg, minlength=k)[seg].reshape((-1,) + (1,) * (data.ndim - 1))
        if reducer == "Sum":
            dx = g
        elif reducer == "Mean":
            dx = g / n
        elif reducer == "Max":
            dx = np.where(data == y, g, 0)
        else:
            dx = g * np.exp(data - y) / (n if reducer == "LogMeanExp" else 1)
        return [np.asarray(dx).astype(dy.dtype)]

    return kernel


def _range_maker(m: GradientMaker) -> list[OperatorDef]:
    """``SortedSegmentRange<R>Gradient([DATA, OUTPUT, dY, SEGMENT_IDS] -> [dDATA])``."""
    name = m.op_type + "Gradient"
    return [m.make_op(name, [m.I(0), m.O(0), m.GO(0), m.I(1)], [m.GI(0)])]


for _red in _RANGE:
    register_kernel(f"SortedSegmentRange{_red}")(_range_forward(_red))
    register_gradient(f"SortedSegmentRange{_red}", op_schema=schema(2, 1, False))(_range_maker)
    register_kernel(f"SortedSegmentRange{_red}Gradient", gradient_op=True)(_range_gradient(_red))


# --- LengthsTopK -------------------------------------------------------------------------
# Per segment of DATA (1-D, cut by LENGTHS): the k largest values, largest first (ties: lower
# position first), padded with 0 and index -1. Grad LengthsTopKGradient([LENGTHS, TopKIndices,
# dTopK] -> [dDATA]): dTopK[i, j] goes to the position it came from, 0 elsewhere.


@register_kernel("LengthsTopK")
def lengths_top_k(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[DATA (L,), LENGTHS (N,) int] -> [TopKValue (N, k), TopKIndices int32 (N, k)]``."""
    expect_inputs(op, inputs, 2)
    data = np.asarray(inputs[0])
    k = get_int(op, "k", -1)
    if data.ndim != 1 or k <= 0:
        raise kernel_error(op, "DATA must be 1-D and arg k positive", inputs)
    seg, n = segments_of_lengths(op, inputs[1], data.size)
    check_numel((n, k), op)
    vals = np.zeros((n, k), dtype=data.dtype)
    idx = np.full((n, k), -1, dtype=np.int32)
    for i in range(n):
        part = data[seg == i]
        order = np.lexsort((np.arange(part.size), -part))[:k]
        vals[i, : order.size] = part[order]
        idx[i, : order.size] = order
    return [vals, idx]


# ``LengthsTopKGradient([LENGTHS, TopKIndices, dTopK] -> [dDATA])``.
lengths_top_k_grad = register_gradient("LengthsTopK", op_schema=schema(2, 2, False))(
    template("LengthsTopKGradient", [I(1), O(1), GO(0)], [0])
)


@register_kernel("LengthsTopKGradient", gradient_op=True)
def lengths_top_k_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[LENGTHS (N,), TopKIndices (N, k), dTopK (N, k)] -> [dDATA (sum LENGTHS,)]``."""
    expect_inputs(op, inputs, 3)
    ln = _ints(op, inputs[0], "LENGTHS")
    ind, dy = np.asarray(inputs[1]), np.asarray(inputs[2])
    if ind.ndim != 2 or ind.shape != dy.shape or ind.shape[0] != ln.size:
        raise kernel_error(op, "TopKIndices and dTopK must both be [len(LENGTHS), k]", inputs)
    if ln.size and ln.min() < 0:
        raise kernel_error(op, "LENGTHS must be non-negative")
    out = np.zeros(int(ln.sum()), dtype=dy.dtype)
    off = 0
    for i, n in enumerate(ln):
        for j in range(min(int(n), ind.shape[1])):
            p = int(ind[i, j])
            if not 0 <= p < n:
                raise kernel_error(op, "a top-k index is outside its segment", inputs)
            out[off + p] = dy[i, j]
        off += int(n)
    return [out]
