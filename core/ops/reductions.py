"""Reductions and variadic elementwise extrema (issue 8b): kernels, makers, gradient kernels.

Ops: SumElements, WeightedSum, ReduceFront/Back Sum/Mean/Max (with optional ``lengths``),
ReduceMax/Min/L1/L2 (``axes``, ``keepdims``), RowwiseMax, ColwiseMax, Max, Min. Moments,
BatchMoments, L1Distance and SquareRootDivide live in :mod:`core.ops.moments`.

Sources (facts only): Caffe2 ``reduction_ops.cc`` (SumElements, RowwiseMax, ColwiseMax),
``reduce_front_back_{sum,mean,max}_ops.cc``, ``reduce_ops.cc`` (``Get ReduceGradient``:
``<Type>Gradient([dY, X, Y] -> [dX])``), ``minmax_ops.cc``, ``utility_ops.cc``
(WeightedSum); spec §5.3.

Non-differentiable points: the max/min-type ops (Max, Min, ReduceMax, ReduceMin,
ReduceFront/BackMax, RowwiseMax, ColwiseMax) give the full ``dY`` to *every* input element
equal to the result, as Caffe2 does; at a tie the op is not differentiable, and
:mod:`core.verify.kinks` reports such ties in ``/v1/verify``.

Dtypes: float32/float64 keep their dtype; gradient kernels return dY's dtype.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from core.errors import InvalidNetError
from core.ops._args import get_bool, get_int, get_ints
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


def _same_shape(op: OperatorDef, arrays: Sequence[Array], what: str = "inputs") -> None:
    if len({np.shape(a) for a in arrays}) > 1:
        raise kernel_error(op, f"{what} must have the same shape", list(arrays))


# --- SumElements ----------------------------------------------------------------------------
# Y = Σ X (÷ X.size if average);  dX = dY (÷ X.size) everywhere


def _count(x: Array) -> int:
    return max(int(x.size), 1)


@register_kernel("SumElements")
def sum_elements(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X] -> [Y]``: scalar (0-d) sum of all elements, or mean with ``average=1``."""
    expect_inputs(op, inputs, 1)
    x = np.asarray(inputs[0])
    s = x.sum(dtype=x.dtype if x.dtype.kind == "f" else np.float64)
    if get_bool(op, "average", False):
        s = s / _count(x)
    return [np.asarray(s, dtype=x.dtype if x.dtype.kind == "f" else np.float32)]


# ``SumElementsGradient([X, dY] -> [dX])``, args (``average``) copied.
sum_elements_grad = template("SumElementsGradient", [I(0), GO(0)], [0])
register_gradient("SumElements", op_schema=schema(1, 1, False), doc="Scalar sum (or mean) of X")(
    sum_elements_grad
)


@register_kernel("SumElementsGradient", gradient_op=True)
def sum_elements_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X, dY (one element)] -> [dX]``, dX has X's shape."""
    expect_inputs(op, inputs, 2)
    x, dy = np.asarray(inputs[0]), np.asarray(inputs[1])
    if dy.size != 1:
        raise kernel_error(op, "dY must hold one element", inputs)
    g = dy.reshape(()) / (_count(x) if get_bool(op, "average", False) else 1)
    return [np.full(x.shape, g, dtype=dy.dtype)]


# --- WeightedSum ----------------------------------------------------------------------------
# Y = Σ_i w_i·X_i (w_i one element);  dX_i = w_i·dY;  dw_i = Σ dY·X_i (grad_on_w=1)


def _weighted_pairs(op: OperatorDef, inputs: Sequence[Array]) -> list[tuple[Array, Array]]:
    if not inputs or len(inputs) % 2:
        raise kernel_error(op, "expects an even number of inputs X0, w0, X1, w1, ...", inputs)
    pairs = [(np.asarray(inputs[i]), np.asarray(inputs[i + 1])) for i in range(0, len(inputs), 2)]
    _same_shape(op, [x for x, _ in pairs], "the X inputs")
    if any(w.size != 1 for _, w in pairs):
        raise kernel_error(op, "every weight must hold one element", inputs)
    return pairs


@register_kernel("WeightedSum")
def weighted_sum(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X0, w0, X1, w1, ...] -> [Y]``, ``Y = Σ w_i·X_i``; X_i one shape, w_i one element."""
    pairs = _weighted_pairs(op, inputs)
    x0 = pairs[0][0]
    out = np.zeros(x0.shape, dtype=x0.dtype)
    for x, w in pairs:
        out = out + x * w.reshape(()).astype(x0.dtype)
    return [out.astype(x0.dtype, copy=False)]


@register_gradient("WeightedSum", op_schema=schema((2, -1), 1, [(0, 0)]),
                   doc="Y = Σ w_i·X_i (grad_on_w=1: weights get gradients too)")
def weighted_sum_grad(m: GradientMaker) -> list[OperatorDef]:
    """``WeightedSumGradient([dY, X0, w0, X1, w1, ...] -> [dX0, dX1, ...(, dw0, dw1, ...)])``.

    The weights' gradients are produced only with ``grad_on_w=1`` (Caffe2); args copied.
    """
    n = len(m.input_names)
    if n % 2:  # Caffe2's schema: X/weight pairs (NumInputs: n > 0 and even)
        raise InvalidNetError(
            "(GradientMaker) Operator def did not pass schema checking: WeightedSum takes "
            f"X/weight pairs, an even number of inputs, got {n}"
        )
    ins = [m.GO(0)]
    for i in range(0, n, 2):
        ins += [m.I(i), m.I(i + 1)]
    outs = [m.GI(i) for i in range(0, n, 2)]
    if m.arg_i("grad_on_w", 0):
        outs += [m.GI(i + 1) for i in range(0, n, 2)]
    else:
        m.warn_no_gradient(list(range(1, n, 2)), "grad_on_w is not set (Caffe2's default); "
                           "set grad_on_w: 1 for the weights' gradients")
    return [m.make_op("WeightedSumGradient", ins, outs)]


@register_kernel("WeightedSumGradient", gradient_op=True)
def weighted_sum_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[dY, X0, w0, ...] -> [dX0, ...(, dw0, ...)]`` (dw_i shaped like w_i)."""
    if not inputs:
        raise kernel_error(op, "expects dY and X/w pairs")
    dy = np.asarray(inputs[0])
    pairs = _weighted_pairs(op, inputs[1:])
    if dy.shape != pairs[0][0].shape:
        raise kernel_error(op, "dY must have the X inputs' shape", inputs)
    dxs = [(dy * w.reshape(())).astype(dy.dtype, copy=False) for _, w in pairs]
    if not get_int(op, "grad_on_w", 0):
        return dxs
    dws = [np.asarray((dy * x).sum()).reshape(w.shape).astype(w.dtype) for x, w in pairs]
    return dxs + dws


# --- ReduceFront / ReduceBack Sum, Mean, Max ------------------------------------------------
# X viewed as rows×cols. Front: reduce the first `num_reduce_dim` dims (rows), Y[j] over
# rows i < lengths[j]. Back: reduce the last `num_reduce_dim` dims (cols), Y[i] over cols
# j < lengths[i]. Sum: dX = dY inside the lengths; Mean: ÷ count; Max: dY where X == Y.


def _front_back_geometry(
    op: OperatorDef, x_shape: tuple[int, ...], front: bool
) -> tuple[int, int, tuple[int, ...]]:
    """``(rows, cols, Y shape)`` of a ReduceFront*/ReduceBack* op on X's shape."""
    k = get_int(op, "num_reduce_dim", 1)
    nd = len(x_shape)
    if not 0 <= k <= nd:
        raise kernel_error(op, f"num_reduce_dim {k} out of range for a {nd}-D input")
    split = k if front else nd - k
    rows = int(np.prod(x_shape[:split], dtype=np.int64))
    cols = int(np.prod(x_shape[split:], dtype=np.int64))
    return rows, cols, tuple(x_shape[split:] if front else x_shape[:split])


def _front_back_mask(
    op: OperatorDef, rows: int, cols: int, front: bool, lengths: Array | None
) -> Array | None:
    """Boolean rows×cols mask of the elements inside ``lengths`` (``None``: all)."""
    if lengths is None:
        return None
    n = cols if front else rows
    lens = np.asarray(lengths).reshape(-1)
    if lens.dtype.kind not in "iu" or lens.size != n:
        raise kernel_error(op, f"lengths must be {n} integers", [lengths])
    limit = rows if front else cols
    if np.any(lens < 0) or np.any(lens > limit):
        raise kernel_error(op, f"lengths must lie in [0, {limit}]", [lengths])
    if front:
        return np.arange(rows)[:, None] < lens[None, :]
    return np.arange(cols)[None, :] < lens[:, None]


def _front_back(op: OperatorDef, inputs: list[Array], front: bool, kind: str) -> list[Array]:
    expect_inputs(op, inputs, 1, 2)
    x = np.asarray(inputs[0])
    rows, cols, yshape = _front_back_geometry(op, x.shape, front)
    mask = _front_back_mask(op, rows, cols, front, inputs[1] if len(inputs) > 1 else None)
    x2 = x.reshape(rows, cols)
    axis = 0 if front else 1
    if kind == "max":
        low = np.finfo(x.dtype).min if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        vals = x2 if mask is None else np.where(mask, x2, low)
        y = vals.max(axis=axis, initial=low)
    else:
        y = (x2 if mask is None else np.where(mask, x2, 0)).sum(axis=axis)
        if kind == "mean":
            n = np.full(y.shape, rows if front else cols) if mask is None else mask.sum(axis=axis)
            y = y / np.maximum(n, 1)
    return [np.asarray(y).astype(x.dtype, copy=False).reshape(yshape)]


def _front_back_gradient(
    op: OperatorDef, inputs: list[Array], front: bool, kind: str
) -> list[Array]:
    """``[dY, X(, Y)(, lengths)] -> [dX]`` of the ReduceFront/Back gradient ops."""
    n_fixed = 3 if kind == "max" else 2
    expect_inputs(op, inputs, n_fixed, n_fixed + 1)
    dy, x = np.asarray(inputs[0]), np.asarray(inputs[1])
    rows, cols, yshape = _front_back_geometry(op, x.shape, front)
    if dy.size != int(np.prod(yshape, dtype=np.int64)):
        raise kernel_error(op, f"dY must have shape {list(yshape)}", inputs)
    mask = _front_back_mask(op, rows, cols, front, inputs[n_fixed] if len(inputs) > n_fixed
                            else None)
    shape = (1, cols) if front else (rows, 1)
    g = np.broadcast_to(dy.reshape(shape), (rows, cols))
    if kind == "mean":
        axis = 0 if front else 1
        n = np.full(shape, rows if front else cols) if mask is None else (
            mask.sum(axis=axis).reshape(shape))
        g = g / np.maximum(n, 1)
    if kind == "max":
        y = np.asarray(inputs[2]).reshape(shape)
        g = np.where(x.reshape(rows, cols) == y, g, 0)
    if mask is not None:
        g = np.where(mask, g, 0)
    return [np.asarray(g).astype(dy.dtype, copy=False).reshape(x.shape)]


def _register_front_back(name: str, front: bool, kind: str) -> None:
    grad_type = name + "Gradient"
    side = "first" if front else "last"

    def forward(op: OperatorDef, inputs: list[Array]) -> list[Array]:
        return _front_back(op, inputs, front, kind)

    def maker(m: GradientMaker) -> list[OperatorDef]:
        # X is read for its shape only by Sum/Mean, for its values by Max.
        ins = [m.GO(0), m.I(0) if kind == "max" else m.I_shape(0)]
        if kind == "max":
            ins.append(m.O(0))
        if len(m.input_names) == 2:
            ins.append(m.I(1))
        return [m.make_op(grad_type, ins, [m.GI(0)])]

    def gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
        return _front_back_gradient(op, inputs, front, kind)

    doc = f"{kind} over the {side} num_reduce_dim (=1) dims; optional lengths input"
    forward.__doc__ = f"``[X(, lengths)] -> [Y]``: {doc}."
    reads = "dY, X, Y" if kind == "max" else "dY, X"
    maker.__doc__ = f"``{grad_type}([{reads}(, lengths)] -> [dX])``, args copied."
    gradient.__doc__ = f"``[{reads}(, lengths)] -> [dX]``."
    register_kernel(name)(forward)
    register_gradient(name, op_schema=schema((1, 2), 1, False), doc=doc)(maker)
    register_kernel(grad_type, gradient_op=True)(gradient)


for _name, _front, _kind in [
    ("ReduceFrontSum", True, "sum"), ("ReduceBackSum", False, "sum"),
    ("ReduceFrontMean", True, "mean"), ("ReduceBackMean", False, "mean"),
    ("ReduceFrontMax", True, "max"), ("ReduceBackMax", False, "max"),
]:
    _register_front_back(_name, _front, _kind)


# --- ReduceMax / ReduceMin / ReduceL1 / ReduceL2 --------------------------------------------
# over `axes` (default all), keepdims=1.  Max/Min: dX = dY·[X == Y];  L1: dY·sign X;
# L2: dY·X / Y (0 where Y = 0)


def reduce_axes(op: OperatorDef, ndim: int) -> tuple[int, ...]:
    """Canonical, sorted ``axes`` of a Reduce*/Moments op (default: all ``ndim`` dims).

    Raises:
        ExecutionError: an axis out of range.
    """
    axes = get_ints(op, "axes")
    if not axes:
        return tuple(range(ndim))
    out = set()
    for a in axes:
        if not -ndim <= a < ndim:
            raise kernel_error(op, f"axis {a} out of range for a {ndim}-D input")
        out.add(a % ndim)
    return tuple(sorted(out))


_REDUCERS = {
    "ReduceMax": lambda x, ax: x.max(axis=ax, keepdims=True),
    "ReduceMin": lambda x, ax: x.min(axis=ax, keepdims=True),
    "ReduceL1": lambda x, ax: np.abs(x).sum(axis=ax, keepdims=True),
    "ReduceL2": lambda x, ax: np.sqrt((x * x).sum(axis=ax, keepdims=True)),
}


def _register_reduce(name: str) -> None:
    grad_type = name + "Gradient"

    def forward(op: OperatorDef, inputs: list[Array]) -> list[Array]:
        expect_inputs(op, inputs, 1)
        x = np.asarray(inputs[0])
        ax = reduce_axes(op, x.ndim)
        if x.size == 0 and name in ("ReduceMax", "ReduceMin"):
            raise kernel_error(op, "cannot reduce an empty tensor", inputs)
        y = _REDUCERS[name](x, ax)
        if not get_bool(op, "keepdims", True):
            y = y.reshape([d for i, d in enumerate(x.shape) if i not in ax])
        return [np.asarray(y).astype(x.dtype, copy=False)]

    def maker(m: GradientMaker) -> list[OperatorDef]:
        return [m.make_op(grad_type, [m.GO(0), m.I(0), m.O(0)], [m.GI(0)])]

    def gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
        expect_inputs(op, inputs, 3)
        dy, x, y = (np.asarray(v) for v in inputs)
        ax = reduce_axes(op, x.ndim)
        kept = tuple(1 if i in ax else d for i, d in enumerate(x.shape))
        n = int(np.prod(kept, dtype=np.int64))
        if dy.size != n or y.size != n:
            raise kernel_error(op, f"dY and Y must match the reduced shape {list(kept)}", inputs)
        dyk, yk = dy.reshape(kept), y.reshape(kept)
        with np.errstate(all="ignore"):
            if name in ("ReduceMax", "ReduceMin"):
                g = np.where(x == yk, dyk, 0)
            elif name == "ReduceL1":
                g = dyk * np.sign(x)
            else:
                g = np.where(yk != 0, dyk * x / yk, 0)
        return [np.asarray(g).astype(dy.dtype, copy=False)]

    doc = {"ReduceMax": "max", "ReduceMin": "min", "ReduceL1": "Σ|X|", "ReduceL2": "√ΣX²"}[name]
    forward.__doc__ = f"``[X] -> [Y]``: {doc} over ``axes`` (default all), ``keepdims``=1."
    maker.__doc__ = f"``{grad_type}([dY, X, Y] -> [dX])``, args copied."
    gradient.__doc__ = "``[dY, X, Y] -> [dX]``."
    register_kernel(name)(forward)
    register_gradient(name, op_schema=schema(1, 1, False), doc=f"{doc} over axes")(maker)
    register_kernel(grad_type, gradient_op=True)(gradient)


for _name in _REDUCERS:
    _register_reduce(_name)


# --- RowwiseMax / ColwiseMax ----------------------------------------------------------------
# X: B×M×N.  RowwiseMax: Y = max over N (B×M);  ColwiseMax: Y = max over M (B×N).
# dX = dY broadcast back where X equals its row's (column's) max.


def _wise(op: OperatorDef, x: Array) -> int:
    if x.ndim != 3:
        raise kernel_error(op, "X must be 3-D (B×M×N)", [x])
    return 2 if op.type.startswith("Rowwise") else 1


def _register_wise(name: str) -> None:
    grad_type = name + "Gradient"

    def forward(op: OperatorDef, inputs: list[Array]) -> list[Array]:
        expect_inputs(op, inputs, 1)
        x = np.asarray(inputs[0])
        axis = _wise(op, x)
        if x.shape[axis] == 0:
            raise kernel_error(op, "cannot take the max of an empty dimension", inputs)
        return [x.max(axis=axis)]

    def maker(m: GradientMaker) -> list[OperatorDef]:
        return [m.make_op(grad_type, [m.I(0), m.O(0), m.GO(0)], [m.GI(0)])]

    def gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
        expect_inputs(op, inputs, 3)
        x, y, dy = (np.asarray(v) for v in inputs)
        axis = 2 if op.type.startswith("Rowwise") else 1
        if x.ndim != 3:
            raise kernel_error(op, "X must be 3-D (B×M×N)", inputs)
        want = tuple(d for i, d in enumerate(x.shape) if i != axis)
        if y.shape != want or dy.shape != want:
            raise kernel_error(op, f"Y and dY must have shape {list(want)}", inputs)
        ye, dye = np.expand_dims(y, axis), np.expand_dims(dy, axis)
        return [np.where(x == ye, dye, 0).astype(dy.dtype, copy=False)]

    what = "each row (over N)" if name == "RowwiseMax" else "each column (over M)"
    forward.__doc__ = f"``[X (B×M×N)] -> [Y]``: max of {what}."
    maker.__doc__ = f"``{grad_type}([X, Y, dY] -> [dX])``."
    gradient.__doc__ = "``[X, Y, dY] -> [dX]``: dY where X equals the max."
    register_kernel(name)(forward)
    register_gradient(name, op_schema=schema(1, 1, False), doc=f"Max of {what} of a B×M×N X")(maker)
    register_kernel(grad_type, gradient_op=True)(gradient)


_register_wise("RowwiseMax")
_register_wise("ColwiseMax")


# --- Max / Min (variadic) -------------------------------------------------------------------
# Y = elementwise max (min) of X_0..X_{n-1} (one shape);  dX_i = dY·[X_i == Y] (ties: every
# tied input gets dY, as in Caffe2's kernel). Corrected behaviour: a blob given at several
# positions is passed to the gradient op once (its later positions get no gradient), so
# Max(x, x) = x gets dX = dY, not Caffe2's 2·dY.


def _register_extremum(name: str, fn: Any) -> None:
    grad_type = name + "Gradient"

    def forward(op: OperatorDef, inputs: list[Array]) -> list[Array]:
        if not inputs:
            raise kernel_error(op, "expects at least 1 input")
        xs = [np.asarray(x) for x in inputs]
        _same_shape(op, xs)
        out = np.array(xs[0], copy=True)
        for x in xs[1:]:
            out = fn(out, x)
        return [out]

    def maker(m: GradientMaker) -> list[OperatorDef]:
        # One position per distinct blob: a blob read twice (Max(x, x)) always ties with
        # itself, and Caffe2's kernel would hand dY to both positions (2·dY in total for an
        # identity); passing it once gives dY (corrected behaviour, see the section comment).
        # The gradient goes to the blob's *last* position: the backward pass (like Caffe2's)
        # keeps, per blob name, the last position's value unless it is None.
        names = list(m.input_names)
        last = [i for i, name in enumerate(names) if name not in names[i + 1:]]
        ins = [m.O(0), m.GO(0)] + [m.I(i) for i in last]
        outs = []
        for i in last:
            m.set_dense(i, names[i] + "_grad")
            outs.append(names[i] + "_grad")
        return [m.make_op(grad_type, ins, outs)]

    def gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
        if len(inputs) < 3:
            raise kernel_error(op, "expects Y, dY and at least one X", inputs)
        y, dy, *xs = (np.asarray(v) for v in inputs)
        _same_shape(op, [y, dy, *xs])
        return [np.where(x == y, dy, 0).astype(dy.dtype, copy=False) for x in xs]

    forward.__doc__ = f"``[X0, X1, ...] -> [Y]``: elementwise {name.lower()} (one shape)."
    maker.__doc__ = (f"``{grad_type}([Y, dY, X0, X1, ...] -> [dX0, dX1, ...])``, each distinct "
                     "input blob once.")
    gradient.__doc__ = "``[Y, dY, X0, ...] -> [dX0, ...]``: dY where X_i equals Y."
    register_kernel(name)(forward)
    register_gradient(name, op_schema=schema((1, -1), 1, [(0, 0)]),
                      doc=f"Elementwise {name.lower()} of its inputs")(maker)
    register_kernel(grad_type, gradient_op=True)(gradient)


_register_extremum("Max", np.maximum)
_register_extremum("Min", np.minimum)
