"""Fill ops: constant, given-tensor and random fillers. All ``NO_GRADIENT`` (spec §2.10, §5.3).

Output shape (Caffe2 ``FillerOp``): with no input, arg ``shape``; with one input, that input's
shape (or, with ``input_as_shape=1``, its *values*) followed by ``extra_shape``. Giving both an
input and ``shape`` is an error, as is ``extra_shape`` or ``input_as_shape`` without an input.
Every kernel calls :func:`core.ops._args.check_numel` before allocating, so a huge shape fails
fast with :class:`~core.errors.LimitExceededError`.

Random fills are deterministic: the generator is ``numpy.random.default_rng(seed)`` where
``seed`` is the op's integer ``seed`` argument if present, else its
``device_option.random_seed`` if set, else 0. The same op therefore always fills the same
values (Caffe2 draws from a per-device engine; exact values are not reproduced).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from core.ops._args import (
    DATA_TYPE_NAMES,
    check_numel,
    data_type_code,
    get_bool,
    get_float,
    get_floats,
    get_int,
    get_ints,
    numpy_dtype,
)
from core.ops.elementwise import expect_inputs, kernel_error
from core.registry import (
    GradientStatus,
    OperatorDef,
    find_arg,
    register_kernel,
    register_op,
    schema,
)

Array = np.ndarray[Any, Any]

_FLOAT = DATA_TYPE_NAMES["FLOAT"]
_INT64 = DATA_TYPE_NAMES["INT64"]


def _filler(op_type: str, doc: str, max_inputs: int = 1) -> None:
    register_op(op_type, schema((0, max_inputs), 1), GradientStatus.NO_GRADIENT, doc)


def fill_shape(op: OperatorDef, inputs: list[Array]) -> list[int]:
    """Output shape of a filler (see the module docstring), already checked against the cap.

    Raises:
        ExecutionError: inconsistent shape arguments/inputs.
        LimitExceededError: the shape has more elements than allowed.
    """
    expect_inputs(op, inputs, 0, 1)
    extra = get_ints(op, "extra_shape") or []
    as_shape = get_bool(op, "input_as_shape", False)
    if inputs:
        if find_arg(op, "shape") is not None:
            raise kernel_error(op, "cannot set the shape argument and pass in an input too")
        src = np.asarray(inputs[0])
        if as_shape:
            if src.ndim != 1 or not np.issubdtype(src.dtype, np.integer):
                raise kernel_error(op, "with input_as_shape the input must be a 1-D int tensor")
            shape = [int(v) for v in src] + extra
        else:
            shape = [int(d) for d in src.shape] + extra
    else:
        if extra:
            raise kernel_error(op, "cannot set extra_shape when there is no input")
        if as_shape:
            raise kernel_error(op, "input_as_shape needs an input")
        shape = get_ints(op, "shape") or []
    check_numel(shape, op)
    return shape


def _float_dtype(op: OperatorDef) -> np.dtype[Any]:
    """Dtype from arg ``dtype`` (default FLOAT); random fills need a floating type."""
    code = data_type_code(op, "dtype")
    dt = numpy_dtype(op, _FLOAT if code is None else code)
    if not np.issubdtype(dt, np.floating):
        raise kernel_error(op, f"dtype must be a floating type, got {dt}")
    return dt


def random_seed(op: OperatorDef) -> int:
    """Seed of a random fill: arg ``seed``, else ``device_option.random_seed``, else 0."""
    if find_arg(op, "seed") is not None:
        return get_int(op, "seed", 0)
    if op.HasField("device_option") and op.device_option.HasField("random_seed"):
        return int(op.device_option.random_seed)
    return 0


# --- ConstantFill ----------------------------------------------------------------------------
# Y = full(shape, value)

_filler("ConstantFill", "Fill with a constant `value` (dtype, shape/extra_shape/input_as_shape).")


@register_kernel("ConstantFill")
def constant_fill(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[] or [like] -> [Y]`` filled with ``value`` (default 0.0).

    dtype: arg ``dtype`` (a DataType number or name); without it Caffe2 infers FLOAT from a
    float ``value`` and INT64 from an int ``value``. netgrad deviation: when the op has a
    shape-giving input of floating dtype and no ``dtype`` arg, a float ``value`` fills in the
    input's dtype (float64 gradient seeds/zeros stay float64 in the NumPy executor; Caffe2
    would produce float32).

    Raises:
        ExecutionError: bad shape arguments, a string value or an unsupported dtype.
        LimitExceededError: the shape has more elements than allowed.
    """
    shape = fill_shape(op, inputs)
    a = find_arg(op, "value")
    code = data_type_code(op, "dtype")
    if a is not None and a.HasField("s"):
        raise kernel_error(op, "string values are not supported")
    int_value = a is not None and a.HasField("i") and not a.HasField("f")
    value: float | int = (int(a.i) if int_value else float(a.f)) if a is not None else 0.0
    if code is not None:
        dtype = numpy_dtype(op, code)
    elif int_value:
        dtype = numpy_dtype(op, _INT64)
    elif (
        inputs
        and not get_bool(op, "input_as_shape", False)
        and np.issubdtype(np.asarray(inputs[0]).dtype, np.floating)
    ):
        dtype = np.asarray(inputs[0]).dtype
    else:
        dtype = numpy_dtype(op, _FLOAT)
    return [np.full(shape, value, dtype=dtype)]


# --- GivenTensor*Fill ------------------------------------------------------------------------
# Y = reshape(values, shape)


def _given(op: OperatorDef, inputs: list[Array], values: list[Any], dtype: Any) -> list[Array]:
    shape = fill_shape(op, inputs)
    n = math.prod(shape)
    if len(values) != n:
        raise kernel_error(op, f"{len(values)} values for shape {shape} ({n} elements)")
    return [np.array(values, dtype=dtype).reshape(shape)]


_filler("GivenTensorFill", "Fill with the float `values` (arg dtype honoured, default FLOAT).")


@register_kernel("GivenTensorFill")
def given_tensor_fill(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = values`` (floats) reshaped to the fill shape; float32 unless ``dtype`` is given."""
    code = data_type_code(op, "dtype")
    dtype = numpy_dtype(op, _FLOAT if code is None else code)
    return _given(op, inputs, get_floats(op, "values") or [], dtype)


_filler("GivenTensorDoubleFill", "Fill with the given `values` as float64.")


@register_kernel("GivenTensorDoubleFill")
def given_tensor_double_fill(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = values`` as float64 (the wire holds them as float32 ``floats``)."""
    return _given(op, inputs, get_floats(op, "values") or [], np.float64)


_filler("GivenTensorIntFill", "Fill with the given int `values` as int32.")


@register_kernel("GivenTensorIntFill")
def given_tensor_int_fill(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = values`` (``ints``) as int32."""
    return _given(op, inputs, get_ints(op, "values") or [], np.int32)


_filler("GivenTensorInt64Fill", "Fill with the given int `values` as int64.")


@register_kernel("GivenTensorInt64Fill")
def given_tensor_int64_fill(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = values`` (``ints``) as int64."""
    return _given(op, inputs, get_ints(op, "values") or [], np.int64)


_filler("GivenTensorBoolFill", "Fill with the given `values` (ints 0/1) as bool.")


@register_kernel("GivenTensorBoolFill")
def given_tensor_bool_fill(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = values`` (``ints``, non-zero = true) as bool."""
    return _given(op, inputs, [bool(v) for v in get_ints(op, "values") or []], np.bool_)


# --- Random fills ----------------------------------------------------------------------------

_filler("UniformFill", "Uniform random fill in [min, max] (seeded: arg seed / device random_seed).")


@register_kernel("UniformFill")
def uniform_fill(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y ~ U[min, max)`` (args ``min``=0, ``max``=1)."""
    shape = fill_shape(op, inputs)
    lo, hi = get_float(op, "min", 0.0), get_float(op, "max", 1.0)
    if lo > hi:
        raise kernel_error(op, f"min {lo} > max {hi}")
    rng = np.random.default_rng(random_seed(op))
    return [rng.uniform(lo, hi, shape).astype(_float_dtype(op))]


_filler("GaussianFill", "Normal random fill (mean, std; seeded: arg seed / device random_seed).")


@register_kernel("GaussianFill")
def gaussian_fill(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y ~ N(mean, std^2)`` (args ``mean``=0, ``std``=1)."""
    shape = fill_shape(op, inputs)
    std = get_float(op, "std", 1.0)
    if std < 0:
        raise kernel_error(op, f"std must be non-negative, got {std}")
    rng = np.random.default_rng(random_seed(op))
    return [rng.normal(get_float(op, "mean", 0.0), std, shape).astype(_float_dtype(op))]


_filler("XavierFill", "Uniform in ±sqrt(3/fan_in), fan_in = numel / shape[0] (seeded).")


@register_kernel("XavierFill")
def xavier_fill(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y ~ U[-s, s]``, ``s = sqrt(3 / fan_in)``, ``fan_in = numel / shape[0]``."""
    shape = fill_shape(op, inputs)
    if not shape or math.prod(shape) == 0:
        raise kernel_error(op, f"needs a non-empty shape with at least 1 dim, got {shape}")
    s = math.sqrt(3.0 / (math.prod(shape) / shape[0]))
    rng = np.random.default_rng(random_seed(op))
    return [rng.uniform(-s, s, shape).astype(_float_dtype(op))]


_filler("MSRAFill", "Normal with std sqrt(2/fan_out), fan_out = numel / shape[1] (seeded).")


@register_kernel("MSRAFill")
def msra_fill(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y ~ N(0, 2 / fan_out)``, ``fan_out = numel / shape[1]``."""
    shape = fill_shape(op, inputs)
    if len(shape) < 2 or math.prod(shape) == 0:
        raise kernel_error(op, f"needs a non-empty shape with at least 2 dims, got {shape}")
    std = math.sqrt(2.0 / (math.prod(shape) / shape[1]))
    rng = np.random.default_rng(random_seed(op))
    return [rng.normal(0.0, std, shape).astype(_float_dtype(op))]


# --- RangeFill / LengthsRangeFill ------------------------------------------------------------

_filler("RangeFill", "Fill with 0, 1, 2, ... in row-major order (float).")


@register_kernel("RangeFill")
def range_fill(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = arange(numel).reshape(shape)`` as float32 (or arg ``dtype``)."""
    shape = fill_shape(op, inputs)
    return [np.arange(math.prod(shape), dtype=_float_dtype(op)).reshape(shape)]


_filler("LengthsRangeFill", "[lengths] -> concatenation of range(l) for each length (int32).")


@register_kernel("LengthsRangeFill")
def lengths_range_fill(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[lengths] -> [0..l_0-1, 0..l_1-1, ...]`` as int32."""
    expect_inputs(op, inputs, 1)
    lengths = np.asarray(inputs[0])
    if lengths.ndim != 1 or not np.issubdtype(lengths.dtype, np.integer) or np.any(lengths < 0):
        raise kernel_error(op, "lengths must be a 1-D non-negative int tensor", inputs)
    total = int(lengths.sum())
    check_numel([total], op)
    parts = [np.arange(int(n), dtype=np.int32) for n in lengths]
    return [np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)]
