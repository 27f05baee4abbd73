"""Comparison and logical ops: ``SHOULD_NOT_DIFFERENTIATE`` with NumPy kernels (spec §2.10, §5.8).

Comparisons ``LT LE GT GE EQ NE`` broadcast exactly like ``Add`` (legacy ``broadcast=1`` +
``axis``, else NumPy rules) and output bool tensors. ``And Or Xor`` take two bool tensors with
the same broadcasting; ``Not`` takes one. A gradient reaching any of them is an error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from core.ops.elementwise import binary_kernel, expect_inputs, kernel_error
from core.registry import GradientStatus, OperatorDef, register_kernel, register_op, schema

Array = np.ndarray[Any, Any]
Kernel = Callable[[OperatorDef, list[Array]], list[Array]]


def _require_bool(op: OperatorDef, inputs: list[Array]) -> None:
    for x in inputs:
        if np.asarray(x).dtype != np.bool_:
            raise kernel_error(op, "inputs must be bool tensors", inputs)


def _comparison(fn: Callable[..., Any]) -> Kernel:
    """Kernel ``[A, B] -> [fn(A, B)]`` (bool), broadcasting like Add."""

    def kernel(op: OperatorDef, inputs: list[Array]) -> list[Array]:
        return [binary_kernel(op, inputs, fn).astype(np.bool_, copy=False)]

    return kernel


def _logical(fn: Callable[..., Any]) -> Kernel:
    """Kernel ``[A, B] -> [fn(A, B)]`` on bool tensors, broadcasting like Add."""

    def kernel(op: OperatorDef, inputs: list[Array]) -> list[Array]:
        expect_inputs(op, inputs, 2)
        _require_bool(op, inputs)
        return [binary_kernel(op, inputs, fn)]

    return kernel


# (op type, NumPy function, kernel factory, doc) — Y = A <op> B, no gradient.
_BINARY: list[tuple[str, Callable[..., Any], Callable[[Callable[..., Any]], Kernel], str]] = [
    ("LT", np.less, _comparison, "A < B elementwise (bool), broadcast like Add."),
    ("LE", np.less_equal, _comparison, "A <= B elementwise (bool), broadcast like Add."),
    ("GT", np.greater, _comparison, "A > B elementwise (bool), broadcast like Add."),
    ("GE", np.greater_equal, _comparison, "A >= B elementwise (bool), broadcast like Add."),
    ("EQ", np.equal, _comparison, "A == B elementwise (bool), broadcast like Add."),
    ("NE", np.not_equal, _comparison, "A != B elementwise (bool), broadcast like Add."),
    ("And", np.logical_and, _logical, "Logical and of bool tensors, broadcast like Add."),
    ("Or", np.logical_or, _logical, "Logical or of bool tensors, broadcast like Add."),
    ("Xor", np.logical_xor, _logical, "Logical xor of bool tensors, broadcast like Add."),
]

for _type, _fn, _factory, _doc in _BINARY:
    register_op(
        _type, schema(2, 1, [(0, 0), (1, 0)]), GradientStatus.SHOULD_NOT_DIFFERENTIATE, _doc
    )
    register_kernel(_type)(_factory(_fn))


register_op(
    "Not", schema(1, 1, [(0, 0)]), GradientStatus.SHOULD_NOT_DIFFERENTIATE, "Logical not (bool)."
)


@register_kernel("Not")
def not_(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``Y = not X`` for a bool tensor X."""
    expect_inputs(op, inputs, 1)
    _require_bool(op, inputs)
    return [np.logical_not(inputs[0])]
