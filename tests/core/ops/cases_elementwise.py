"""Numeric gradient cases of the elementwise family (core/ops/elementwise.py), float64.

Domains: positive bases for Log/Sqrt/Pow, divisors away from 0, kinks (Relu, Abs, LeakyRelu)
avoided. Binary ops are checked with equal shapes, NumPy-style broadcasting (one- and
two-directional) and legacy ``broadcast=1`` with ``axis`` / ``axis_str``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.core.ops.opcase import OpCase, OpInput, Sampler, away_from_zero, normal, positive


def _binary(op_type: str, bs: Sampler = normal) -> list[OpCase]:
    """Same-shape, NumPy-broadcast and legacy-broadcast cases of one binary op."""

    def case(
        a: tuple[int, ...], b: tuple[int, ...], args: dict[str, Any] | None = None, id: str = ""
    ) -> OpCase:
        return OpCase(op_type, [OpInput("A", a), OpInput("B", b, bs)], ["C"], args or {}, id=id)

    return [
        case((2, 3), (2, 3), id="_same"),
        case((2, 3, 4), (3, 1), id="_numpy_b"),
        case((2, 1, 4), (3, 1), id="_numpy_both"),
        case((4,), (2, 3, 4), id="_numpy_a"),
        case((2, 3, 4), (3,), {"broadcast": 1, "axis": 1}, id="_legacy_axis"),
        case((2, 3, 4), (3, 4), {"broadcast": 1}, id="_legacy_suffix"),
        case(
            (2, 3, 2, 2),
            (3,),
            {"broadcast": 1, "axis_str": "C", "order": "NCHW"},
            id="_legacy_axis_str",
        ),
        case((2, 3, 4), (1, 3, 1), {"broadcast": 1, "axis": 0}, id="_legacy_ones"),
    ]


def divisor(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """|x| in [0.5, 2) with random sign: divisors away from the pole at 0."""
    return positive(rng, shape) * rng.choice([-1.0, 1.0], shape)


def _unary(
    op_type: str, sampler: Sampler = normal, args: dict[str, Any] | None = None, id: str = ""
) -> OpCase:
    return OpCase(op_type, [OpInput("X", (2, 3), sampler)], ["Y"], args or {}, id=id)


CASES: list[OpCase] = [
    *_binary("Add"),
    *_binary("Sub"),
    *_binary("Mul"),
    *_binary("Div", divisor),
    OpCase("Sum", [OpInput("X0", (2, 3)), OpInput("X1", (2, 3)), OpInput("X2", (2, 3))], ["Y"]),
    OpCase("Sum", [OpInput("X0", (4,))], ["Y"], id="_single"),
    OpCase("Mean", [OpInput("X0", (2, 3)), OpInput("X1", (2, 3)), OpInput("X2", (2, 3))], ["Y"]),
    _unary("Scale", args={"scale": 1.7}),
    _unary("Pow", positive, {"exponent": 2.5}, id="_scalar"),
    _unary("Pow", positive, {"exponent": -1.5}, id="_scalar_negative"),
    OpCase("Pow", [OpInput("X", (2, 3), positive), OpInput("E", (2, 3))], ["Y"], id="_tensor"),
    OpCase(
        "Pow",
        [OpInput("X", (2, 3, 4), positive), OpInput("E", (3,))],
        ["Y"],
        {"broadcast": 1, "axis": 1},
        id="_tensor_legacy",
    ),
    _unary("Exp"),
    _unary("Log", positive),
    _unary("Sqrt", positive),
    _unary("Abs", away_from_zero),
    _unary("Negative"),
    _unary("Relu", away_from_zero),
    _unary("LeakyRelu", away_from_zero, {"alpha": 0.2}),
    _unary("LeakyRelu", away_from_zero, id="_default_alpha"),
    _unary("Sigmoid"),
    _unary("Tanh"),
    OpCase(
        "ElementwiseLinear",
        [OpInput("X", (3, 4)), OpInput("a", (4,)), OpInput("b", (4,))],
        ["Y"],
    ),
    OpCase(
        "ElementwiseLinear",
        [OpInput("X", (2, 3, 2)), OpInput("a", (2,)), OpInput("b", (2,))],
        ["Y"],
        {"axis": 2},
        id="_axis2",
    ),
    OpCase("DotProduct", [OpInput("X", (3, 4)), OpInput("Y", (3, 4))], ["Z"]),
    OpCase("DotProduct", [OpInput("X", (5,)), OpInput("Y", (5,))], ["Z"], id="_1d"),
    OpCase("MatMul", [OpInput("A", (3, 4)), OpInput("B", (4, 5))], ["Y"]),
    OpCase("MatMul", [OpInput("A", (3, 4)), OpInput("B", (5, 4))], ["Y"], {"trans_b": 1}, id="_tb"),
    OpCase("MatMul", [OpInput("A", (4, 3)), OpInput("B", (4, 5))], ["Y"], {"trans_a": 1}, id="_ta"),
    OpCase(
        "MatMul",
        [OpInput("A", (4, 3)), OpInput("B", (5, 4))],
        ["Y"],
        {"trans_a": 1, "trans_b": 1},
        id="_ta_tb",
    ),
    OpCase(
        "MatMul",
        [OpInput("A", (2, 3, 4)), OpInput("B", (2, 2, 5))],
        ["Y"],
        {"axis_a": 2, "axis_b": 2},
        id="_axes",
    ),
    OpCase(
        "MatMul",
        [OpInput("A", (4, 2, 3)), OpInput("B", (5, 2, 2))],
        ["Y"],
        {"trans_a": 1, "trans_b": 1, "axis_a": 1, "axis_b": 1},
        id="_axes_ta_tb",
    ),
]
