"""Explicit gradient statuses of ops that need no maker (spec §2.3, §2.10).

* Int8 (quantized) ops: upstream registers no gradient at all -> ``NOT_IMPLEMENTED``.
* Utility ops (``IsEmpty``, ``Print``, ``Shape``, ``HasElements``, ``Unique``...):
  ``SHOULD_NOT_DIFFERENTIATE`` (an error only if a gradient reaches them). ``IsEmpty``,
  ``HasElements``, ``Print`` and ``Shape`` also get NumPy kernels here.
* ``ONNXWhile``: no gradient upstream -> ``NOT_IMPLEMENTED``.
* ``Python``/``PythonGradient``/``PythonDLPack``: user Python code; ``SHOULD_NOT_DIFFERENTIATE``
  and refused by the executor.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.ops._args import get_ints
from core.ops.elementwise import expect_inputs, kernel_error
from core.registry import GradientStatus, OperatorDef, register_kernel, register_op

Array = np.ndarray[Any, Any]

INT8_OPS = [
    "Int8Add",
    "Int8AddRelu",
    "Int8AveragePool",
    "Int8AveragePoolRelu",
    "Int8ChannelShuffle",
    "Int8Concat",
    "Int8Conv",
    "Int8ConvRelu",
    "Int8ConvTranspose",
    "Int8Dequantize",
    "Int8FC",
    "Int8Flatten",
    "Int8GivenIntTensorFill",
    "Int8GivenTensorFill",
    "Int8LeakyRelu",
    "Int8MaxPool",
    "Int8MaxPoolRelu",
    "Int8Quantize",
    "Int8Relu",
    "Int8Reshape",
    "Int8ResizeNearest",
    "Int8RoIAlign",
    "Int8Sigmoid",
    "Int8Slice",
    "Int8Softmax",
    "Int8Sum",
    "Int8SumRelu",
    "Int8Transpose",
]

for _t in INT8_OPS:
    register_op(
        _t,
        status=GradientStatus.NOT_IMPLEMENTED,
        doc="Quantized (Int8) op: upstream Caffe2 registers no gradient; inference only.",
    )

_NO_DIFF = {
    "IsEmpty": "Bool scalar: whether the input has no elements. No gradient.",
    "HasElements": "Bool scalar: whether the inputs hold any element. No gradient.",
    "Print": "Logs its input; no outputs. No gradient.",
    "Shape": "Int64 vector of the input's shape (arg axes selects dims). No gradient.",
    "Unique": "Unique values (and remapping). No gradient.",
    "LengthsToSegmentIds": "Segment ids from lengths. No gradient.",
    "SegmentIdsToLengths": "Lengths from segment ids. No gradient.",
    "ScatterAssign": "Row assignment into a tensor. No gradient.",
    "ScatterWeightedSum": "Weighted row update (optimizers). No gradient.",
}
for _t, _doc in _NO_DIFF.items():
    register_op(_t, status=GradientStatus.SHOULD_NOT_DIFFERENTIATE, doc=_doc)

register_op(
    "ONNXWhile",
    status=GradientStatus.NOT_IMPLEMENTED,
    doc="ONNX Loop lowered to Caffe2: has no gradient upstream; use While for training.",
)

for _t in ("Python", "PythonGradient", "PythonDLPack"):
    register_op(
        _t,
        status=GradientStatus.SHOULD_NOT_DIFFERENTIATE,
        doc="Runs user Python code: no gradient here, and the executor refuses to run it.",
    )


@register_kernel("IsEmpty")
def is_empty(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X] -> [bool scalar (shape [])]``: true iff X has no elements."""
    expect_inputs(op, inputs, 1)
    return [np.array(np.asarray(inputs[0]).size == 0)]


@register_kernel("HasElements")
def has_elements(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X_0..] -> [bool scalar]``: true iff the inputs hold at least one element in total."""
    if not inputs:
        raise kernel_error(op, "expects at least 1 input")
    return [np.array(sum(np.asarray(x).size for x in inputs) > 0)]


@register_kernel("Print")
def print_(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """No outputs; does nothing (the NumPy executor does not log tensors)."""
    return []


@register_kernel("Shape")
def shape(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[X] -> [int64 vector of X's dims]``, or only the dims listed in arg ``axes``."""
    expect_inputs(op, inputs, 1)
    dims = np.shape(inputs[0])
    axes = get_ints(op, "axes") or []
    if not axes:
        return [np.array(dims, dtype=np.int64)]
    n = len(dims)
    if any(not -n <= a < n for a in axes):
        raise kernel_error(op, f"axes {axes} out of range for {n} dims", inputs)
    return [np.array([dims[a] for a in axes], dtype=np.int64)]
