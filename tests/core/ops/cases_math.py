"""Numeric gradient cases of the unary math / activation family (core/ops/math_unary.py).

Domains keep every sample away from poles and kinks: positive inputs for Rsqrt/Reciprocal,
|x| < 0.8 for Asin/Acos, (0.1, 0.9) for Logit, and samplers that keep each element at least
0.05 from Clip's bounds, ReluN's 0 and n, ThresholdedRelu's alpha and HardSigmoid's corners.

Half precision: ``FloatToHalf`` and ``HalfToFloat`` are checked with inputs on a float16
grid (multiples of 2^-8 in [0.25, 0.75)) and a step of 2^-8, so ``x ± h`` is exactly
representable and the central difference is exact; the only error left is that the gradient
itself passes through float16 (relative 2^-11), hence ``rtol=2e-3``. Upcasting to float64 for
the check would test a different function (the cast would vanish), so the check stays in
the ops' own dtypes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.core.ops.opcase import OpCase, OpInput, Sampler, away_from_zero, normal, positive


def uniform(lo: float, hi: float) -> Sampler:
    """Uniform in [lo, hi)."""

    def sample(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        return rng.uniform(lo, hi, shape)

    sample.__name__ = "uniform"
    return sample


def avoiding(points: list[float], lo: float = -2.0, hi: float = 2.0, gap: float = 0.05) -> Sampler:
    """Uniform in [lo, hi) but at least ``gap`` away from each of ``points`` (kinks)."""

    def sample(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        x = rng.uniform(lo, hi, shape)
        for p in points:
            near = np.abs(x - p) < gap
            x = np.where(near, p + np.sign(x - p + 1e-12) * (gap + 0.01), x)
        return x

    sample.__name__ = "avoiding"
    return sample


def half_grid(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Multiples of 2^-8 in [0.25, 0.75): exact in float16, as are ±2^-8 steps."""
    return rng.integers(64, 192, shape).astype(np.float64) / 256.0


def half_grid16(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """:func:`half_grid` as float16 (HalfToFloat's input type)."""
    return half_grid(rng, shape).astype(np.float16)


def _unary(
    op_type: str, sampler: Sampler = normal, args: dict[str, Any] | None = None, id: str = "",
    **kw: Any,
) -> OpCase:
    return OpCase(op_type, [OpInput("X", (2, 3), sampler)], ["Y"], args or {}, id=id, **kw)


CASES: list[OpCase] = [
    _unary("Gelu"),
    _unary("Gelu", args={"fast_gelu": 1}, id="_fast"),
    _unary("Swish"),
    _unary("Elu", away_from_zero),
    _unary("Elu", away_from_zero, {"alpha": 0.5}, id="_alpha"),
    _unary("ELU", away_from_zero, {"alpha": 2.0}),
    _unary("Clip", avoiding([-0.5, 0.5], -1.0, 1.0), {"min": -0.5, "max": 0.5}),
    _unary("Clip", avoiding([0.0]), {"min": 0.0}, id="_min_only"),
    _unary("Sqr"),
    _unary("Rsqrt", positive),
    _unary("Reciprocal", positive),
    _unary("Reciprocal", uniform(-2.0, -0.5), id="_negative"),
    _unary("Sin"),
    _unary("Cos"),
    _unary("Tan", uniform(-1.0, 1.0)),
    _unary("Asin", uniform(-0.8, 0.8)),
    _unary("Acos", uniform(-0.8, 0.8)),
    _unary("Atan"),
    _unary("Sinh"),
    _unary("Cosh"),
    _unary("Cube"),
    _unary("Cbrt", away_from_zero),
    _unary("Erf"),
    _unary("Mish"),
    _unary("Selu", away_from_zero),
    _unary("Selu", away_from_zero, {"alpha": 1.5, "scale": 1.1}, id="_args"),
    _unary("Softplus"),
    _unary("Softsign", away_from_zero),
    _unary("HardSigmoid", avoiding([-2.5, 2.5], -4.0, 4.0)),
    _unary("HardSigmoid", avoiding([-1.0, 1.0], -2.0, 2.0), {"alpha": 0.5, "beta": 0.5},
           id="_args"),
    _unary("Logit", uniform(0.1, 0.9)),
    _unary("ThresholdedRelu", avoiding([0.5]), {"alpha": 0.5}),
    _unary("ThresholdedRelu", avoiding([1.0], -3.0, 3.0), id="_default_alpha"),
    _unary("ThresholdedRelu", avoiding([-0.5, 0.0], -2.0, 2.0), {"alpha": -0.5},
           id="_negative_alpha"),
    _unary("ReluN", avoiding([0.0, 1.0]), {"n": 1.0}),
    _unary("ReluN", avoiding([0.0], -3.0, 3.0), id="_default_n"),
    _unary("NegateGradient", numeric_scale=-1.0),
    OpCase("PRelu", [OpInput("X", (2, 3, 2), away_from_zero), OpInput("W", (3,))], ["Y"]),
    OpCase(
        "PRelu",
        [OpInput("X", (2, 2, 3), away_from_zero), OpInput("W", (3,))],
        ["Y"],
        {"order": "NHWC"},
        id="_nhwc",
    ),
    OpCase("PRelu", [OpInput("X", (2, 3), away_from_zero), OpInput("W", (1,))], ["Y"],
           id="_shared"),
    _unary("FloatToHalf", half_grid, step=2.0**-8, atol=1e-6, rtol=2e-3),
    # The Fp16 ops' kernels keep a float64 input float64 (only float16 is computed through
    # float32), so their maths is checked in float64; their float16 dtypes are pinned in
    # test_makers_8b.py.
    _unary("ReluFp16", away_from_zero),
    OpCase("SoftmaxFp16", [OpInput("X", (2, 3, 2))], ["Y"]),
    OpCase("SoftmaxFp16", [OpInput("X", (2, 3, 2))], ["Y"], {"axis": 2}, id="_axis2"),
    _unary("HalfToFloat", half_grid16, step=2.0**-8, atol=1e-6, rtol=2e-3),
]
