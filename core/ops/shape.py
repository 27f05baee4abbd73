"""Shape and data-movement ops: NumPy kernels, gradient makers and gradient kernels.

One paragraph per op (spec §5.3, §2.10): Copy, StopGradient, Reshape, Transpose, Slice,
Concat, Split, Squeeze/ExpandDims, Cast, Gather, EnsureDense, SparseToDense, ZeroGradient,
Flatten/FlattenToVec and ReduceSum/ReduceMean. Kernels never mutate their inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from core.errors import ExecutionError, GradientError
from core.ops._args import (
    check_numel,
    data_type_code,
    get_bool,
    get_int,
    get_ints,
    get_str,
    numpy_dtype,
)
from core.ops.elementwise import expect_inputs, kernel_error
from core.registry import (
    GradientMaker,
    GradientStatus,
    OperatorDef,
    find_arg,
    make_arg,
    register_gradient,
    register_identity,
    register_kernel,
    register_op,
    schema,
)
from core.template import GO, I, O, template

Array = np.ndarray[Any, Any]


def _int_vector(op: OperatorDef, x: Array, what: str) -> list[int]:
    """Values of a 1-D integer tensor input (shapes, starts/ends, split sizes)."""
    a = np.asarray(x)
    if a.ndim > 1 or not (np.issubdtype(a.dtype, np.integer) or a.size == 0):
        raise kernel_error(op, f"{what} must be a 1-D integer tensor, got {a.dtype}{list(a.shape)}")
    return [int(v) for v in a.reshape(-1)]


def _canonical_axis(op: OperatorDef, axis: int, ndim: int) -> int:
    """``axis`` in ``[0, ndim)`` (negative counts from the end), else ExecutionError."""
    ax = axis + ndim if axis < 0 else axis
    if not 0 <= ax < ndim:
        raise kernel_error(op, f"axis {axis} out of range for {ndim} dimensions")
    return ax


# --- Copy ------------------------------------------------------------------------------------
# Y = X;  dX = dY (as a CopyOnDeviceLike placed like X)


@register_kernel("Copy")
def copy(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = X`` (a new array)."""
    expect_inputs(op, inputs, 1)
    return [np.array(inputs[0], copy=True)]


@register_gradient("Copy", op_schema=schema(1, 1))
def copy_grad(m: GradientMaker) -> list[OperatorDef]:
    """``CopyOnDeviceLike([dY, X] -> [dX])`` (spec §5.3)."""
    return [m.make_op("CopyOnDeviceLike", [m.GO(0), m.I_shape(0)], [m.GI(0)])]


@register_kernel("CopyOnDeviceLike", gradient_op=True)
def copy_on_device_like(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[src, like] -> [copy of src]`` (devices do not exist in the NumPy executor)."""
    expect_inputs(op, inputs, 2)
    return [np.array(inputs[0], copy=True)]


# --- StopGradient ----------------------------------------------------------------------------
# Y = X;  NO_GRADIENT (spec §2.10)

register_op(
    "StopGradient",
    schema(1, 1),
    GradientStatus.NO_GRADIENT,
    "Identity; gradients stop here (in place it erases the blob's gradient).",
)
register_identity("StopGradient", lambda op: True)
register_identity("Copy", lambda op: True)
register_identity("EnsureDense", lambda op: True)


@register_kernel("StopGradient")
def stop_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = X``."""
    expect_inputs(op, inputs, 1)
    return [np.array(inputs[0], copy=True)]


# --- Reshape ---------------------------------------------------------------------------------
# Y = X viewed with a new shape;  old_shape = X.shape;  dX = reshape(dY, old_shape)


@register_kernel("Reshape")
def reshape(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[data(, new_shape)] -> [reshaped, old_shape]``; arg ``shape`` (0 = keep dim, -1 = infer).

    ``old_shape`` is an int64 vector of the input's shape.

    Raises:
        ExecutionError: both or neither shape sources, a bad 0/-1, or a size mismatch.
    """
    expect_inputs(op, inputs, 1, 2)
    x = np.asarray(inputs[0])
    if len(inputs) == 2:
        if find_arg(op, "shape") is not None:
            raise kernel_error(op, "give the new shape as an input or an argument, not both")
        new = _int_vector(op, inputs[1], "new_shape")
    else:
        given = get_ints(op, "shape")
        if given is None:
            raise kernel_error(op, "needs argument 'shape' or a second input")
        new = given
    out: list[int] = []
    unknown = -1
    for i, d in enumerate(new):
        if d == 0:
            if i >= x.ndim:
                raise kernel_error(op, f"shape[{i}] = 0 but the input has {x.ndim} dims", inputs)
            out.append(int(x.shape[i]))
        elif d == -1:
            if unknown >= 0:
                raise kernel_error(op, "at most one dimension of 'shape' may be -1")
            unknown = i
            out.append(1)
        elif d < 0:
            raise kernel_error(op, f"invalid dimension {d} in shape {new}")
        else:
            out.append(d)
    known = int(np.prod(out, dtype=np.int64))
    if unknown >= 0:
        if known == 0 or x.size % known:
            raise kernel_error(op, f"cannot infer the -1 of {new} for {x.size} elements", inputs)
        out[unknown] = x.size // known
    if int(np.prod(out, dtype=np.int64)) != x.size:
        raise kernel_error(op, f"cannot reshape {x.size} elements to {out}", inputs)
    return [x.reshape(out).copy(), np.array(x.shape, dtype=np.int64)]


@register_gradient("Reshape", op_schema=schema((1, 2), 2, [(0, 0)]), copy_arguments=False)
def reshape_grad(m: GradientMaker) -> list[OperatorDef]:
    """``Reshape([dY, old_shape] -> [dX, "_" + dX + "_dims"])``, no arg copying."""
    dx = m.GI(0)
    return [m.make_op("Reshape", [m.GO(0), m.O(1)], [dx, "_" + dx + "_dims"])]


# --- Transpose -------------------------------------------------------------------------------
# Y = X.transpose(axes);  dX = dY.transpose(inv), inv[axes[i]] = i


@register_kernel("Transpose")
def transpose(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = X.transpose(axes)``; arg ``axes`` (default: reversed dims)."""
    expect_inputs(op, inputs, 1)
    x = np.asarray(inputs[0])
    axes = get_ints(op, "axes")
    if not axes:
        return [x.transpose().copy()]
    if sorted(axes) != list(range(x.ndim)):
        raise kernel_error(op, f"axes {axes} is not a permutation of {x.ndim} dims", inputs)
    return [x.transpose(axes).copy()]


@register_gradient("Transpose", op_schema=schema(1, 1), copy_arguments=False)
def transpose_grad(m: GradientMaker) -> list[OperatorDef]:
    """``Transpose([dY] -> [dX])``: forward args copied in order, ``axes`` inverted.

    Raises:
        GradientError: ``axes`` is not a permutation.
    """
    g = m.make_op("Transpose", [m.GO(0)], [m.GI(0)])
    for a in m.op.arg:
        if a.name == "axes":
            axes = [int(v) for v in a.ints]
            if sorted(axes) != list(range(len(axes))):
                raise GradientError(f"Transpose: axes {axes} is not a permutation")
            inv = [0] * len(axes)
            for i, ax in enumerate(axes):
                inv[ax] = i
            g.arg.append(make_arg("axes", inv))
        else:
            g.arg.append(a)
    return [g]


# --- Slice -----------------------------------------------------------------------------------
# Y = X[s_0:e_0, s_1:e_1, ...];  dX = zeros like X with dY written into the slice


def _slice_region(op: OperatorDef, data: Array, inputs: Sequence[Array]) -> tuple[slice, ...]:
    """Per-dim slices of Caffe2 Slice: negative index i means ``dim + 1 + i`` (spec §5.3)."""
    if len(inputs) == 3:
        if find_arg(op, "starts") is not None or find_arg(op, "ends") is not None:
            raise kernel_error(op, "starts/ends given both as inputs and as arguments")
        starts = _int_vector(op, inputs[1], "starts")
        ends = _int_vector(op, inputs[2], "ends")
    elif len(inputs) == 1:
        starts = get_ints(op, "starts") or []
        ends = get_ints(op, "ends") or []
    else:
        raise kernel_error(op, "takes [data] with starts/ends args or [data, starts, ends]")
    if len(starts) != len(ends) or len(starts) > data.ndim:
        raise kernel_error(
            op, f"starts {starts} / ends {ends} do not fit data of shape {list(data.shape)}"
        )
    region: list[slice] = []
    for i, dim in enumerate(data.shape):
        if i >= len(starts):
            region.append(slice(0, dim))
            continue
        s, e = starts[i], ends[i]
        s = dim + 1 + s if s < 0 else s
        e = dim + 1 + e if e < 0 else e
        s, e = min(s, dim), min(e, dim)
        if s < 0 or e < 0 or e < s:
            raise kernel_error(op, f"bad slice [{starts[i]}, {ends[i]}) for dim {i} of size {dim}")
        region.append(slice(s, e))
    return tuple(region)


@register_kernel("Slice")
def slice_(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[data(, starts, ends)] -> [data[starts:ends]]`` (one start/end per leading dim)."""
    expect_inputs(op, inputs, 1, 3)
    data = np.asarray(inputs[0])
    return [data[_slice_region(op, data, inputs)].copy()]


@register_gradient("Slice", op_schema=schema((1, 3), 1))
def slice_grad(m: GradientMaker) -> list[OperatorDef]:
    """``SliceGradient([data, (starts, ends,) dY] -> [dX])``, forward args copied.

    Raises:
        GradientError: the forward op has 2 inputs (neither form).
    """
    if len(m.op.input) == 2:
        raise GradientError("Slice takes 1 input (with starts/ends args) or 3 inputs, not 2")
    ins = list(m.op.input) + [m.GO(0)]
    return [m.make_op("SliceGradient", ins, [m.GI(0)])]


@register_kernel("SliceGradient", gradient_op=True)
def slice_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[data, (starts, ends,) dY] -> [dX]``, zeros with dY in the sliced region."""
    expect_inputs(op, inputs, 2, 4)
    if len(inputs) == 3:
        raise kernel_error(op, "takes [data, dY] or [data, starts, ends, dY]")
    data, dy = np.asarray(inputs[0]), np.asarray(inputs[-1])
    region = _slice_region(op, data, inputs[:-1])
    dx = np.zeros(data.shape, dtype=dy.dtype)
    if dx[region].shape != dy.shape:
        raise kernel_error(op, f"dY shape {list(dy.shape)} != slice shape {list(dx[region].shape)}")
    dx[region] = dy
    return [dx]


# --- Concat ----------------------------------------------------------------------------------
# Y = concat(X_i, axis);  split_info_i = X_i.shape[axis];  dX_i = Split(dY, split_info)


def _concat_axis(op: OperatorDef) -> int:
    """``axis`` if given, else 1 for order NCHW and -1 (last) for NHWC."""
    if find_arg(op, "axis") is not None:
        return get_int(op, "axis", 1)
    return -1 if get_str(op, "order", "NCHW").upper() == "NHWC" else 1


@register_kernel("Concat")
def concat(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X_0..X_{n-1}] -> [Y, split_info]``; args ``axis``/``order``, ``add_axis`` (stack).

    ``split_info`` is an int32 vector of each input's size along the axis (1 with add_axis).

    Raises:
        ExecutionError: no inputs, a bad axis, or shapes that differ off the axis.
    """
    if not inputs:
        raise kernel_error(op, "expects at least 1 input")
    xs = [np.asarray(x) for x in inputs]
    add_axis = get_bool(op, "add_axis", False)
    ndim = xs[0].ndim + (1 if add_axis else 0)
    axis = _canonical_axis(op, _concat_axis(op), ndim)
    if add_axis:
        xs = [np.expand_dims(x, axis) for x in xs]
    ref = xs[0].shape
    for x in xs[1:]:
        if x.ndim != len(ref) or any(
            d != r for k, (d, r) in enumerate(zip(x.shape, ref, strict=True)) if k != axis
        ):
            raise kernel_error(op, f"inputs differ off axis {axis}", inputs)
    y = np.concatenate(xs, axis=axis)
    return [y, np.array([x.shape[axis] for x in xs], dtype=np.int32)]


@register_gradient("Concat", op_schema=schema((1, -1), 2))
def concat_grad(m: GradientMaker) -> list[OperatorDef]:
    """``Split([dY, split_info] -> [dX_0..dX_{n-1}])``, args copied; nothing without dY."""
    if not m.has_go(0):
        return []
    outs = [m.GI(i) for i in range(len(m.op.input))]
    return [m.make_op("Split", [m.GO(0), m.O(1)], outs)]


# --- Split -----------------------------------------------------------------------------------
# Y_j = X[..., o_j : o_j + s_j, ...] along axis;  dX = concat(dY_j)


@register_kernel("Split")
def split(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X(, split)] -> [Y_0..Y_{k-1}]``; args ``axis``/``order``, ``split``, ``add_axis``.

    Without sizes the axis is split equally. ``add_axis`` removes the axis (each size 1).

    Raises:
        ExecutionError: sizes that do not add up to the axis length, or a bad axis.
    """
    expect_inputs(op, inputs, 1, 2)
    x = np.asarray(inputs[0])
    k = len(op.output)
    axis = _canonical_axis(op, _concat_axis(op), x.ndim)
    dim = int(x.shape[axis])
    if len(inputs) == 2:
        if find_arg(op, "split") is not None:
            raise kernel_error(op, "split sizes given both as an input and as an argument")
        sizes = _int_vector(op, inputs[1], "split")
    else:
        sizes = get_ints(op, "split") or []
        if not sizes:
            if k == 0 or dim % k:
                raise kernel_error(op, f"cannot split {dim} equally into {k} outputs", inputs)
            sizes = [dim // k] * k
    if len(sizes) != k or sum(sizes) != dim or any(s < 0 for s in sizes):
        raise kernel_error(op, f"split sizes {sizes} do not split {dim} into {k} outputs", inputs)
    add_axis = get_bool(op, "add_axis", False)
    if add_axis and any(s != 1 for s in sizes):
        raise kernel_error(op, f"add_axis needs sizes of 1, got {sizes}")
    outs: list[Array] = []
    start = 0
    for s in sizes:
        piece = np.take(x, np.arange(start, start + s), axis=axis)
        outs.append(np.squeeze(piece, axis=axis) if add_axis else piece)
        start += s
    return outs


@register_gradient("Split", op_schema=schema((1, 2), (1, -1)), copy_arguments=False)
def split_grad(m: GradientMaker) -> list[OperatorDef]:
    """``Concat([dY_j...] -> [dX, "_" + dX + "_dims"])`` with Split's args; nothing without dY.

    Corrected behaviour: upstream concatenated only the outputs that have a gradient, giving a
    wrongly shaped ``dX`` when some output had none. Here each missing ``dY_j`` is first
    materialised as ``ConstantFill([Y_j] -> ["_" + Y_j + "_grad_autogen_zero"], value=0.0)``
    (zeros shaped like that forward output), so ``dX`` always has X's shape. Forward args are
    copied onto the Concat only (the zero fills carry just ``value``).
    """
    if not any(m.has_go(j) for j in range(len(m.op.output))):
        return []
    ops: list[OperatorDef] = []
    parts: list[str] = []
    for j in range(len(m.op.output)):
        if m.has_go(j):
            parts.append(m.GO(j))
        else:
            zero = "_" + m.O(j) + "_grad_autogen_zero"
            ops.append(m.make_op("ConstantFill", [m.O(j)], [zero], [make_arg("value", 0.0)]))
            parts.append(zero)
    dx = m.GI(0)
    ops.append(m.make_op("Concat", parts, [dx, "_" + dx + "_dims"], list(m.op.arg)))
    return ops


# --- Squeeze / ExpandDims --------------------------------------------------------------------
# Squeeze drops the listed size-1 dims, ExpandDims inserts them; each is the other's gradient.


def _dims(op: OperatorDef) -> list[int]:
    dims = sorted(set(get_ints(op, "dims") or []))
    if not dims:
        raise kernel_error(op, "argument 'dims' is required")
    if dims[0] < 0:
        raise kernel_error(op, f"dims must be non-negative, got {dims}")
    return dims


@register_kernel("Squeeze")
def squeeze(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """Remove the size-1 dims listed in ``dims``."""
    expect_inputs(op, inputs, 1)
    x = np.asarray(inputs[0])
    dims = _dims(op)
    if dims[-1] >= x.ndim or any(x.shape[d] != 1 for d in dims):
        raise kernel_error(op, f"cannot squeeze dims {dims}", inputs)
    return [np.squeeze(x, axis=tuple(dims)).copy()]


# ``ExpandDims([dY] -> [dX])``, ``dims`` copied.
squeeze_grad = register_gradient("Squeeze", op_schema=schema(1, 1, [(0, 0)]))(
    template("ExpandDims", [GO(0)], [0])
)


@register_kernel("ExpandDims")
def expand_dims(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """Insert size-1 dims at the (output) positions listed in ``dims``, in ascending order."""
    expect_inputs(op, inputs, 1)
    x = np.asarray(inputs[0])
    dims = _dims(op)
    if dims[-1] >= x.ndim + len(dims):
        raise kernel_error(op, f"cannot expand dims {dims}", inputs)
    return [np.expand_dims(x, tuple(dims)).copy()]


# ``Squeeze([dY] -> [dX])``, ``dims`` copied.
expand_dims_grad = register_gradient("ExpandDims", op_schema=schema(1, 1, [(0, 0)]))(
    template("Squeeze", [GO(0)], [0])
)


# --- Cast ------------------------------------------------------------------------------------
# Y = X.astype(to);  dX = dY.astype(from_type)


@register_kernel("Cast")
def cast(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = X.astype(to)``; ``to`` is a DataType number or name (spec §1.1)."""
    expect_inputs(op, inputs, 1)
    code = data_type_code(op, "to")
    if code is None:
        raise kernel_error(op, "argument 'to' is required")
    return [np.asarray(inputs[0]).astype(numpy_dtype(op, code))]


@register_gradient("Cast", op_schema=schema(1, 1, [(0, 0)]), copy_arguments=False)
def cast_grad(m: GradientMaker) -> list[OperatorDef]:
    """``Cast([dY] -> [dX], to=from_type, from_type=to)``, both as numbers; nothing else copied.

    In place (``Cast(loss -> loss)``) works: the gradient op is ``Cast(loss_grad -> loss_grad)``.

    Raises:
        GradientError: ``from_type`` (or ``to``) is missing or not a known data type.
    """
    try:
        to = data_type_code(m.op, "to")
        from_type = data_type_code(m.op, "from_type")
    except ExecutionError as exc:
        raise GradientError(exc.message) from None
    if from_type is None:
        raise GradientError(
            "Argument 'from_type' of type int or string is required to get the gradient of "
            "CastOp: add the input's data type, e.g. {\"name\": \"from_type\", \"i\": 1} or "
            "{\"name\": \"from_type\", \"s\": \"FLOAT\"} (TensorProto.DataType: FLOAT 1, "
            "INT32 2, BOOL 5, INT64 10, DOUBLE 13)"
        )
    if to is None:
        raise GradientError("Cast: argument 'to' is required (the output's data type, e.g. "
                            "{\"name\": \"to\", \"i\": 1} for FLOAT)")
    args = [make_arg("to", from_type), make_arg("from_type", to)]
    return [m.make_op("Cast", [m.GO(0)], [m.GI(0)], args)]


# --- Gather ----------------------------------------------------------------------------------
# OUT = take(DATA, INDICES, axis);  axis 0: dDATA = GradientSlice(INDICES, dY) (rows add up)


def _gather_indices(op: OperatorDef, idx: Array, n: int) -> Array:
    if not np.issubdtype(np.asarray(idx).dtype, np.integer):
        raise kernel_error(op, f"indices must be integers, got {np.asarray(idx).dtype}")
    ind = np.asarray(idx).astype(np.int64)
    if get_bool(op, "wrap_indices", False):
        ind = np.where(ind < 0, ind + n, ind)
    if ind.size and (ind.min() < 0 or ind.max() >= n):
        raise kernel_error(op, f"index out of range [0, {n})")
    return ind


@register_kernel("Gather")
def gather(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[DATA, INDICES] -> [take(DATA, INDICES, axis)]`` (arg ``axis``=0)."""
    expect_inputs(op, inputs, 2)
    data = np.asarray(inputs[0])
    if data.ndim == 0:
        raise kernel_error(op, "DATA must have at least 1 dimension")
    axis = _canonical_axis(op, get_int(op, "axis", 0), data.ndim)
    ind = _gather_indices(op, inputs[1], int(data.shape[axis]))
    check_numel(data.shape[:axis] + ind.shape + data.shape[axis + 1 :], op)
    return [np.take(data, ind, axis=axis)]


@register_gradient("Gather", op_schema=schema(2, 1))
def gather_grad(m: GradientMaker) -> list[OperatorDef]:
    """Gather's gradient (spec §5.3).

    axis 0: sparse pass-through ``GradientSlice(INDICES, dY)`` (no op), or with
    ``dense_gradient`` ``SparseToDense([INDICES, dY, DATA] -> [dDATA])``. Other axes:
    ``BatchGatherGradient([DATA, INDICES, dY] -> [dDATA], axis)`` (plus the copied args).

    Raises:
        GradientError: ``axis`` != 0 with ``dense_gradient`` given as false.
    """
    axis = m.arg_i("axis", 0)
    dense = bool(m.arg_i("dense_gradient", 0))
    if m.op.output[0] in m.op.input[:]:
        # Caffe2's Gather allows no in-place use; written over DATA, the gradient of DATA
        # (its slice values) and of the gathered rows share one blob, which an earlier
        # gradient op overwrote (adversarial review, stop 23)
        raise GradientError(f"Gather writes its output over its input '{m.op.output[0]}' in "
                            "place; write the gathered rows to a new blob")
    if axis == 0 and m.arg_i("wrap_indices", 0):
        # The forward op wraps a negative index (-1: the last row); Caffe2's gradient names
        # the raw indices, which no sparse consumer (SparseToDense, the sparse optimizers)
        # takes, and Caffe2 has no op that wraps them by DATA's rows (review, stop 24).
        raise GradientError.at(
            "Gather with wrap_indices=1: its gradient (as Caffe2's) names the raw indices, "
            "so a negative index would name no row of the gradient. Give non-negative "
            "indices (add the number of rows to the negative ones) and drop wrap_indices.",
            blobs=(m.input_names[1],), code="gather_wrap_indices")
    if axis == 0:
        if dense:
            return [m.make_op("SparseToDense", [m.I(1), m.GO(0), m.I(0)], [m.GI(0)])]
        m.set_sparse(0, m.I(1), m.GO(0))
        return []
    if m.arg("dense_gradient") is not None and not dense:
        raise GradientError("Gather with axis > 0 must use dense_gradient")
    return [
        m.make_op(
            "BatchGatherGradient",
            [m.I(0), m.I(1), m.GO(0)],
            [m.GI(0)],
            [make_arg("axis", axis)],
        )
    ]


@register_kernel("BatchGatherGradient", gradient_op=True)
def batch_gather_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[DATA, INDICES, dY] -> [dDATA]``: dY scattered (added) back along ``axis`` (default
    1, Caffe2's: BatchGather's gradient carries no axis of its own)."""
    expect_inputs(op, inputs, 3)
    data, dy = np.asarray(inputs[0]), np.asarray(inputs[2])
    axis = _canonical_axis(op, get_int(op, "axis", 1), data.ndim)
    ind = _gather_indices(op, inputs[1], int(data.shape[axis]))
    want = data.shape[:axis] + ind.shape + data.shape[axis + 1 :]
    if dy.shape != want:
        raise kernel_error(op, f"dY shape {list(dy.shape)} != {list(want)}", inputs)
    flat = dy.reshape(data.shape[:axis] + (ind.size,) + data.shape[axis + 1 :])
    dx = np.zeros(data.shape, dtype=dy.dtype)
    np.add.at(np.moveaxis(dx, axis, 0), ind.reshape(-1), np.moveaxis(flat, axis, 0))
    return [dx]


# --- SparseToDense (gradient helper) ---------------------------------------------------------
# OUT[indices[k]] += values[k];  first dim from the third input, else max(indices) + 1


@register_kernel("SparseToDense", gradient_op=True)
def sparse_to_dense(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[indices, values(, like)] -> [dense]``; duplicate indices add up.

    ``indices`` is 1-D (Caffe2 enforces it) and ``values`` has one row per index; the
    output's first dim is ``like.shape[0]`` or ``max(indices) + 1``.

    Raises:
        ExecutionError: indices not 1-D, shapes disagree or an index is out of range.
        LimitExceededError: the output would be larger than the element cap.
    """
    expect_inputs(op, inputs, 2, 3)
    idx, vals = np.asarray(inputs[0]), np.asarray(inputs[1])
    if not np.issubdtype(idx.dtype, np.integer) and idx.size:
        raise kernel_error(op, "indices must be integers", inputs)
    if idx.ndim != 1:
        # Caffe2's SparseToDense enforces 1-D indices. A Gather's gradient passes its index
        # blob on as the slice's indices, so a Gather of [B, K] indices fails here in Caffe2.
        raise kernel_error(
            op, f"indices must be 1-D (as Caffe2's SparseToDense requires), got "
            f"{idx.ndim}-D; when they are a Gather's index blob, flatten it in the forward "
            "net (FlattenToVec before the Gather, Reshape of its output after it)", inputs)
    if vals.ndim < 1 or vals.shape[0] != idx.shape[0]:
        raise kernel_error(op, "values must have one row per index", inputs)
    ind = idx.astype(np.int64).reshape(-1)
    rest = vals.shape[idx.ndim :]
    if len(inputs) == 3:
        like = np.asarray(inputs[2])
        first = int(like.shape[0]) if like.ndim else 1
    else:
        first = int(ind.max()) + 1 if ind.size else 0
    if ind.size and (ind.min() < 0 or ind.max() >= first):
        raise kernel_error(op, f"index out of range [0, {first})", inputs)
    shape = (first, *rest)
    check_numel(shape, op)
    out = np.zeros(shape, dtype=vals.dtype)
    np.add.at(out, ind, vals.reshape((ind.size, *rest)))
    return [out]


# --- EnsureDense -----------------------------------------------------------------------------
# Y = X;  dense dY passes through, a sparse dY is densified


@register_kernel("EnsureDense")
def ensure_dense(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = X``."""
    expect_inputs(op, inputs, 1)
    return [np.array(inputs[0], copy=True)]


@register_gradient("EnsureDense", op_schema=schema(1, 1, [(0, 0)]))
def ensure_dense_grad(m: GradientMaker) -> list[OperatorDef]:
    """Dense ``dY``: pass-through. Sparse: ``SparseToDense([dY_i, dY_v, X] -> [dX])``.

    Raises:
        GradientError: the output has no gradient.
    """
    if not m.has_go(0):
        raise GradientError(f"Input gradient {m.O(0)} should be either sparse or dense.")
    if isinstance(m.g_output[0], str):
        m.set_dense(0, m.GO(0))
        return []
    return [m.make_op("SparseToDense", [m.GO_I(0), m.GO_V(0), m.I(0)], [m.GI(0)])]


# --- ZeroGradient ----------------------------------------------------------------------------
# no outputs;  dX = 0 (makes an explicit zero gradient for X, spec §2.10)


@register_kernel("ZeroGradient")
def zero_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """No outputs; does nothing at run time."""
    expect_inputs(op, inputs, 1)
    return []


@register_gradient("ZeroGradient", op_schema=schema(1, 0))
def zero_gradient_grad(m: GradientMaker) -> list[OperatorDef]:
    """``ConstantFill([X] -> [X + "_grad"], value=0.0)``."""
    return [m.make_op("ConstantFill", [m.I(0)], [m.GI(0)], [make_arg("value", 0.0)])]


# --- Flatten / FlattenToVec ------------------------------------------------------------------
# Y = X reshaped (2-D at axis / 1-D);  dX = dY reshaped like X (ResizeLike)


@register_kernel("Flatten")
def flatten(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = X.reshape(prod(shape[:axis]), prod(shape[axis:]))`` (arg ``axis``=1)."""
    expect_inputs(op, inputs, 1)
    x = np.asarray(inputs[0])
    axis = get_int(op, "axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis <= x.ndim:
        raise kernel_error(op, f"axis {axis} out of range", inputs)
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    return [x.reshape(rows, int(np.prod(x.shape[axis:], dtype=np.int64))).copy()]


# ``ResizeLike([dY, X] -> [dX])``.
flatten_grad = register_gradient("Flatten", op_schema=schema(1, 1))(
    template("ResizeLike", [GO(0), I(0)], [0])
)


@register_kernel("FlattenToVec")
def flatten_to_vec(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = X.reshape(-1)``."""
    expect_inputs(op, inputs, 1)
    return [np.asarray(inputs[0]).reshape(-1).copy()]


# ``ResizeLike([dY, X] -> [dX])``.
flatten_to_vec_grad = register_gradient("FlattenToVec", op_schema=schema(1, 1))(
    template("ResizeLike", [GO(0), I(0)], [0])
)


@register_kernel("ResizeLike", gradient_op=True)
def resize_like(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[A, like] -> [A reshaped to like's shape]`` (same element count)."""
    expect_inputs(op, inputs, 2)
    a, like = np.asarray(inputs[0]), np.asarray(inputs[1])
    if a.size != like.size:
        raise kernel_error(op, "inputs have different element counts", inputs)
    return [a.reshape(like.shape).copy()]


# --- ReduceSum / ReduceMean ------------------------------------------------------------------
# Y = Σ (or mean) of X over `axes`;  dX = broadcast(dY) (mean: / reduced count)


def _reduce_axes(op: OperatorDef, x: Array) -> tuple[int, ...]:
    axes = get_ints(op, "axes")
    if axes is None or not axes:
        return tuple(range(x.ndim))
    return tuple(sorted({_canonical_axis(op, a, x.ndim) for a in axes}))


def _reduce(op: OperatorDef, inputs: list[Array], mean: bool) -> list[Array]:
    expect_inputs(op, inputs, 1)
    x = np.asarray(inputs[0])
    axes = _reduce_axes(op, x)
    keep = get_bool(op, "keepdims", True)
    y = x.mean(axis=axes, keepdims=keep) if mean else x.sum(axis=axes, keepdims=keep)
    # NumPy sums small integer types in int64; Caffe2 keeps the input type.
    return [np.asarray(y) if mean else np.asarray(y).astype(x.dtype, copy=False)]


def _reduce_gradient(op: OperatorDef, inputs: list[Array], mean: bool) -> list[Array]:
    expect_inputs(op, inputs, 2, 3)
    dy, x = np.asarray(inputs[0]), np.asarray(inputs[1])
    axes = _reduce_axes(op, x)
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    if dy.size != int(np.prod(kept, dtype=np.int64)):
        raise kernel_error(op, f"dY does not match the reduced shape {list(kept)}", inputs)
    dx = np.broadcast_to(dy.reshape(kept), x.shape).copy()
    if mean:
        count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
        dx = dx / max(count, 1)
    return [dx]


@register_kernel("ReduceSum")
def reduce_sum(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """Sum over ``axes`` (default all), ``keepdims``=1."""
    return _reduce(op, inputs, mean=False)


# ``ReduceSumGradient([dY, X, Y] -> [dX])``, args copied.
reduce_sum_grad = register_gradient("ReduceSum", op_schema=schema(1, 1))(
    template("ReduceSumGradient", [GO(0), I(0), O(0)], [0])
)


@register_kernel("ReduceSumGradient", gradient_op=True)
def reduce_sum_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[dY, X, Y] -> [dY broadcast to X's shape]``."""
    return _reduce_gradient(op, inputs, mean=False)


@register_kernel("ReduceMean")
def reduce_mean(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """Mean over ``axes`` (default all), ``keepdims``=1."""
    return _reduce(op, inputs, mean=True)


# ``ReduceMeanGradient([dY, X, Y] -> [dX])``, args copied.
reduce_mean_grad = register_gradient("ReduceMean", op_schema=schema(1, 1))(
    template("ReduceMeanGradient", [GO(0), I(0), O(0)], [0])
)


@register_kernel("ReduceMeanGradient", gradient_op=True)
def reduce_mean_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[dY, X, Y] -> [dY broadcast to X's shape / reduced count]``."""
    return _reduce_gradient(op, inputs, mean=True)
