"""Typed readers of ``OperatorDef.arg`` for kernels, and Conv/Pool geometry resolution.

Caffe2 reads arguments with ``ArgumentHelper::GetSingleArgument`` / ``GetRepeatedArgument``
(spec §1.4); the readers below follow the same rules: the first argument with the name wins,
a missing argument gives the default, an integer must be in field ``i`` (a float, even an
integral one, is refused as Caffe2 refuses it), and an int argument is accepted where a
float is expected. Gradient makers read with the same rules (:class:`core.maker.GradientMaker`),
so a forward run and its gradient never read one argument two ways.
:func:`conv_pool_geometry` mirrors ``ConvPoolOpBase`` (kernel/stride/pad/dilation arguments,
``legacy_pad`` and the output-size rule of ``ComputeSizeAndPad``), spec §5.4.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from api_schemas import caffe2_pb2
from core.errors import ExecutionError, LimitExceededError
from core.maker import field_kind
from core.registry import find_arg, kernel_inputs_repr

OperatorDef = caffe2_pb2.OperatorDef


def get_int(op: OperatorDef, name: str, default: int) -> int:
    """Integer argument ``name`` of ``op`` (field ``i``), or ``default``.

    Raises:
        ExecutionError: the argument exists but holds no integer.
    """
    a = find_arg(op, name)
    if a is None:
        return default
    if a.HasField("i"):
        return int(a.i)
    raise ExecutionError(f"{op.type}: argument '{name}' must be an integer (field i), "
                         f"not {field_kind(a)}; Caffe2 refuses it too (\"Argument {name} does "
                         "not have the right field: expected field i\")")


def get_bool(op: OperatorDef, name: str, default: bool) -> bool:
    """Boolean argument (an integer, non-zero = true), or ``default``."""
    return bool(get_int(op, name, int(default)))


def get_float(op: OperatorDef, name: str, default: float) -> float:
    """Float argument ``name`` (field ``f``, or ``i`` converted), or ``default``.

    Raises:
        ExecutionError: the argument exists but holds no number.
    """
    a = find_arg(op, name)
    if a is None:
        return default
    if a.HasField("f"):
        return float(a.f)
    if a.HasField("i"):
        return float(a.i)
    raise ExecutionError(f"{op.type}: argument '{name}' must be a number (field f), not "
                         f"{field_kind(a)}")


def get_str(op: OperatorDef, name: str, default: str) -> str:
    """String argument ``name`` (field ``s``, UTF-8 decoded), or ``default``."""
    a = find_arg(op, name)
    if a is None or not a.HasField("s"):
        return default
    return a.s.decode("utf-8", "replace")


def get_ints(op: OperatorDef, name: str, default: Sequence[int] | None = None) -> list[int] | None:
    """Repeated integer argument ``name`` (field ``ints``), or ``default`` (copied)."""
    a = find_arg(op, name)
    if a is None:
        return list(default) if default is not None else None
    return [int(v) for v in a.ints]


def get_floats(
    op: OperatorDef, name: str, default: Sequence[float] | None = None
) -> list[float] | None:
    """Repeated float argument ``name`` (field ``floats``), or ``default`` (copied)."""
    a = find_arg(op, name)
    if a is None:
        return list(default) if default is not None else None
    return [float(v) for v in a.floats]


def get_order(op: OperatorDef) -> str:
    """Storage order argument ``order``: ``"NCHW"`` (default) or ``"NHWC"``.

    Raises:
        ExecutionError: any other value.
    """
    order = get_str(op, "order", "NCHW").upper()
    if order not in ("NCHW", "NHWC"):
        raise ExecutionError(f"{op.type}: unsupported order '{order}' (NCHW or NHWC)")
    return order


# Caffe2 ``LegacyPadding`` enum (caffe2_legacy.proto).
LEGACY_NOTSET = 0
LEGACY_VALID = 1
LEGACY_SAME = 2
LEGACY_CAFFE_POOLING = 3


@dataclass(frozen=True)
class ConvPoolGeometry:
    """Resolved sliding-window geometry of a Conv/Pool op over ``nd`` spatial dims.

    Attributes:
        kernel, stride, dilation: per spatial dim.
        pad_head, pad_tail: padding before/after each spatial dim (after ``legacy_pad``).
        in_size, out_size: spatial input and output sizes.
    """

    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    pad_head: tuple[int, ...]
    pad_tail: tuple[int, ...]
    in_size: tuple[int, ...]
    out_size: tuple[int, ...]


def _per_dim(
    op: OperatorDef,
    nd: int,
    plural: str,
    single: str,
    names_2d: tuple[str, str],
    default: int,
) -> list[int]:
    """Resolve ``<plural>`` (ints), ``<single>`` (int) or the 2-D ``_h``/``_w`` spellings."""
    vals = get_ints(op, plural)
    if vals is not None and len(vals) > 0:
        if len(vals) != nd:
            raise ExecutionError(
                f"{op.type}: argument '{plural}' has {len(vals)} values for {nd} spatial dims"
            )
        return vals
    if find_arg(op, single) is not None:
        return [get_int(op, single, default)] * nd
    h, w = names_2d
    if find_arg(op, h) is not None or find_arg(op, w) is not None:
        if nd != 2:
            raise ExecutionError(f"{op.type}: '{h}'/'{w}' need 2 spatial dims, got {nd}")
        return [get_int(op, h, default), get_int(op, w, default)]
    return [default] * nd


def conv_pool_geometry(
    op: OperatorDef,
    in_size: Sequence[int],
    kernel_hint: Sequence[int] | None = None,
    *,
    pooling: bool = False,
) -> ConvPoolGeometry:
    """Resolve kernel, stride, pads and dilation of a Conv/Pool op (Caffe2 ``ConvPoolOpBase``).

    Arguments read: ``kernels``/``kernel``/``kernel_h``+``kernel_w``, ``strides``/``stride``/
    ``stride_h``+``stride_w``, ``pads`` (all heads, then all tails)/``pad``/``pad_t``,
    ``pad_l``, ``pad_b``, ``pad_r``, ``dilations``/``dilation``/``dilation_h``+``dilation_w``,
    ``global_pooling`` (pooling only) and ``legacy_pad``. The output size is Caffe2's
    ``floor((in + pad_head + pad_tail - dkernel) / stride) + 1``; ``legacy_pad`` VALID/SAME and
    CAFFE_LEGACY_POOLING (ceil rule with an extended tail pad) are honoured as in
    ``ComputeSizeAndPad``.

    Args:
        op: the Conv/Pool op.
        in_size: spatial input sizes (e.g. ``(H, W)``).
        kernel_hint: kernel taken from the filter's shape (Conv) when no kernel arg is given.
        pooling: read ``global_pooling`` (pool ops).

    Returns:
        The resolved :class:`ConvPoolGeometry`.

    Raises:
        ExecutionError: inconsistent or unsupported arguments, or an empty output.
    """
    nd = len(in_size)
    if pooling and get_bool(op, "global_pooling", False):
        kernel = list(in_size)
        stride = [1] * nd
        dilation = [1] * nd
        head = [0] * nd
        tail = [0] * nd
    else:
        kernel = _per_dim(op, nd, "kernels", "kernel", ("kernel_h", "kernel_w"), 0)
        if all(k == 0 for k in kernel) and kernel_hint is not None:
            kernel = list(kernel_hint)
        if kernel_hint is not None and list(kernel) != list(kernel_hint):
            raise ExecutionError(
                f"{op.type}: kernel {kernel} does not match the filter's spatial shape "
                f"{list(kernel_hint)}"
            )
        stride = _per_dim(op, nd, "strides", "stride", ("stride_h", "stride_w"), 1)
        dilation = _per_dim(op, nd, "dilations", "dilation", ("dilation_h", "dilation_w"), 1)
        pads = get_ints(op, "pads")
        if pads is not None and len(pads) > 0:
            if len(pads) != 2 * nd:
                raise ExecutionError(
                    f"{op.type}: argument 'pads' has {len(pads)} values, expected {2 * nd}"
                )
            head, tail = list(pads[:nd]), list(pads[nd:])
        elif find_arg(op, "pad") is not None:
            head = [get_int(op, "pad", 0)] * nd
            tail = list(head)
        elif any(find_arg(op, n) is not None for n in ("pad_t", "pad_l", "pad_b", "pad_r")):
            if nd != 2:
                raise ExecutionError(f"{op.type}: pad_t/pad_l/pad_b/pad_r need 2 spatial dims")
            head = [get_int(op, "pad_t", 0), get_int(op, "pad_l", 0)]
            tail = [get_int(op, "pad_b", 0), get_int(op, "pad_r", 0)]
        else:
            head, tail = [0] * nd, [0] * nd
    if any(k <= 0 for k in kernel):
        raise ExecutionError(f"{op.type}: kernel must be positive, got {kernel}")
    if any(s <= 0 for s in stride) or any(d <= 0 for d in dilation):
        raise ExecutionError(f"{op.type}: stride/dilation must be positive")
    if any(p < 0 for p in head + tail):
        raise ExecutionError(f"{op.type}: pads must be non-negative, got {head + tail}")
    legacy = get_int(op, "legacy_pad", LEGACY_NOTSET)
    out: list[int] = []
    for d in range(nd):
        dk = dilation[d] * (kernel[d] - 1) + 1
        n = int(in_size[d])
        if legacy == LEGACY_NOTSET:
            o = (n + head[d] + tail[d] - dk) // stride[d] + 1
        elif legacy == LEGACY_VALID:
            head[d] = tail[d] = 0
            o = (n - dk) // stride[d] + 1
        elif legacy == LEGACY_SAME:
            o = (n + stride[d] - 1) // stride[d]
            need = max(0, (o - 1) * stride[d] + dk - n)
            head[d] = need // 2
            tail[d] = need - head[d]
        elif legacy == LEGACY_CAFFE_POOLING:
            # Caffe rounds the output size up, keeps the last window starting inside the
            # image, and grows the tail pad to cover the extra window.
            o = int(math.ceil((n + 2 * head[d] - dk) / stride[d])) + 1
            if head[d] > 0 and (o - 1) * stride[d] >= n + head[d]:
                o -= 1
            standard = (n + 2 * head[d] - dk) // stride[d] + 1
            tail[d] = head[d] + stride[d] * (o - standard)
        else:
            raise ExecutionError(f"{op.type}: unsupported legacy_pad value {legacy}")
        if o <= 0:
            raise ExecutionError(
                f"{op.type}: empty output along spatial dim {d} (input {n}, kernel {kernel[d]}, "
                f"dilation {dilation[d]}, pads {head[d]}/{tail[d]}, stride {stride[d]})"
            )
        out.append(o)
    return ConvPoolGeometry(
        tuple(kernel),
        tuple(stride),
        tuple(dilation),
        tuple(head),
        tuple(tail),
        tuple(int(v) for v in in_size),
        tuple(out),
    )


# --- sub-nets, data types and tensor-size limits (added by the elementwise/shape ops) --------



#: Caffe2 ``TensorProto.DataType`` numbers (spec §1.1) -> NumPy dtypes. STRING (4),
#: ZERO_COLLISION_HASH (14) and REBATCHING_BUFFER (15) have no NumPy kernel type.
DATA_TYPES: dict[int, np.dtype[Any]] = {
    1: np.dtype(np.float32),  # FLOAT
    2: np.dtype(np.int32),  # INT32
    3: np.dtype(np.uint8),  # BYTE
    5: np.dtype(np.bool_),  # BOOL
    6: np.dtype(np.uint8),  # UINT8
    7: np.dtype(np.int8),  # INT8
    8: np.dtype(np.uint16),  # UINT16
    9: np.dtype(np.int16),  # INT16
    10: np.dtype(np.int64),  # INT64
    12: np.dtype(np.float16),  # FLOAT16
    13: np.dtype(np.float64),  # DOUBLE
}

#: Caffe2 ``TensorProto.DataType`` names -> numbers (spec §1.1).
DATA_TYPE_NAMES: dict[str, int] = {
    "UNDEFINED": 0,
    "FLOAT": 1,
    "INT32": 2,
    "BYTE": 3,
    "STRING": 4,
    "BOOL": 5,
    "UINT8": 6,
    "INT8": 7,
    "UINT16": 8,
    "INT16": 9,
    "INT64": 10,
    "FLOAT16": 12,
    "DOUBLE": 13,
    "ZERO_COLLISION_HASH": 14,
    "REBATCHING_BUFFER": 15,
}


def data_type_code(op: OperatorDef, name: str) -> int | None:
    """A DataType argument given as an enum number (``i``) or a name (``s``, any case).

    Caffe2 ``cast::GetCastDataType``: ``"float"`` and ``1`` both mean FLOAT.

    Returns:
        The enum number, or ``None`` when the argument is absent.

    Raises:
        ExecutionError: the argument holds an unknown name or neither ``i`` nor ``s``.
    """
    a = find_arg(op, name)
    if a is None:
        return None
    if a.HasField("i"):
        return int(a.i)
    if a.HasField("s"):
        key = a.s.decode("utf-8", "replace").upper()
        if key not in DATA_TYPE_NAMES:
            raise ExecutionError(f"{op.type}: argument '{name}' names unknown data type '{key}'")
        return DATA_TYPE_NAMES[key]
    raise ExecutionError(f"{op.type}: argument '{name}' must be a DataType number or name")


def numpy_dtype(op: OperatorDef, code: int) -> np.dtype[Any]:
    """NumPy dtype of Caffe2 DataType ``code`` (spec §1.1).

    Raises:
        ExecutionError: the type has no NumPy kernel representation (STRING, UNDEFINED...).
    """
    dt = DATA_TYPES.get(code)
    if dt is None:
        raise ExecutionError(f"{op.type}: data type {code} is not supported by the NumPy kernels")
    return dt


#: Largest element count a kernel may allocate; the executor may lower or raise it per job.
MAX_ELEMENTS: int = 10**8


def flatten_2d(x: np.ndarray, axis: int) -> np.ndarray:
    """View ``x`` as ``prod(shape[:axis]) × prod(shape[axis:])`` (Caffe2 ``FlattenToMatrix``).

    Either side may be 0: an empty batch keeps its row width (``reshape(0, -1)`` raised).
    """
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    return x.reshape(rows, int(np.prod(x.shape[axis:], dtype=np.int64)))


def check_numel(shape: Sequence[int], op: OperatorDef) -> None:
    """Refuse to allocate a tensor of ``shape`` when it is invalid or too large.

    Called by kernels *before* allocating (fills, SparseToDense...), so a
    ``ConstantFill(shape=[10**12])`` fails fast.

    Raises:
        ExecutionError: a negative dimension.
        LimitExceededError: ``prod(shape)`` exceeds :data:`MAX_ELEMENTS`.
    """
    n = 1
    for d in shape:
        if int(d) < 0:
            raise ExecutionError(f"{op.type}: negative dimension in shape {list(shape)}")
        n *= int(d)
    if n > MAX_ELEMENTS:
        raise LimitExceededError(
            f"{op.type}: a tensor of shape {list(shape)} has {n} elements, more than the "
            f"limit of {MAX_ELEMENTS}"
        )


def kernel_error(op: OperatorDef, inputs: Sequence[np.ndarray], why: str) -> ExecutionError:
    """An ExecutionError naming the op type, its inputs' dtypes and shapes, and the reason."""
    return ExecutionError(f"{op.type}: {why} (inputs: {kernel_inputs_repr(inputs)})")
