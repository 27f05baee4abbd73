"""Table entries for the numeric gradient test over every registered op type.

Each op family has a ``cases_<family>.py`` module exposing ``CASES: list[OpCase]``.
``test_op_gradients.py`` collects them all. Input domains are declared here, not in test
bodies (positive for Log/Sqrt, away from kinks for Relu/Abs, away from poles for Div).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from api_schemas import caffe2_pb2
from core.registry import make_arg, make_op

Sampler = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]


def normal(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Standard normal float64."""
    return rng.standard_normal(shape)


def positive(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Uniform in [0.5, 2.0): for Log, Sqrt, Pow bases, divisors."""
    return rng.uniform(0.5, 2.0, shape)


def away_from_zero(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """|x| in [0.2, 1.5) with random sign: for Relu, Abs, MaxPool-free kinks."""
    return rng.uniform(0.2, 1.5, shape) * rng.choice([-1.0, 1.0], shape)


def distinct(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """A random permutation of well-separated values: no ties (MaxPool, ReduceMax)."""
    n = int(np.prod(shape)) if shape else 1
    return (rng.permutation(n).astype(np.float64) * 0.1 - 0.05 * n).reshape(shape)


def const(value: np.ndarray | float | int | list[Any], dtype: Any = None) -> Sampler:
    """A fixed (non-differentiated) input such as labels, indices or a shape."""

    def sample(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        return np.array(value, dtype=dtype)

    return sample


@dataclass
class OpInput:
    """One input blob of a case: its name, shape and sampler."""

    name: str
    shape: tuple[int, ...] = ()
    sampler: Sampler = normal


@dataclass
class OpCase:
    """One numeric gradient test of one op type.

    Attributes:
        op_type: the forward op type.
        inputs: input blobs in op order.
        outputs: output blob names.
        args: forward arguments (Caffe2 ``MakeArgument`` typing).
        check: inputs whose gradient is checked (default: every input sampled by a
            non-``const`` sampler).
        outputs_with_grads: output indices that receive a gradient.
        atol, rtol: tolerances for analytic vs numeric.
        step: finite-difference step.
        id: pytest id suffix.
        numeric_scale: the analytic gradient must equal ``numeric_scale`` times the finite
            differences: 1 for every true gradient; -1 for ``NegateGradient``, whose
            gradient is the negated one by definition.
    """

    op_type: str
    inputs: list[OpInput]
    outputs: list[str]
    args: dict[str, Any] = field(default_factory=dict)
    check: list[str] | None = None
    outputs_with_grads: tuple[int, ...] = (0,)
    atol: float = 1e-6
    rtol: float = 1e-5
    step: float = 1e-6
    id: str = ""
    numeric_scale: float = 1.0

    def build(self) -> caffe2_pb2.OperatorDef:
        """The forward OperatorDef of this case."""
        return make_op(
            self.op_type,
            [i.name for i in self.inputs],
            self.outputs,
            [make_arg(k, v) for k, v in self.args.items()],
        )

    def feed(self, seed: int) -> dict[str, np.ndarray]:
        """Sample the input blobs with a fixed seed."""
        rng = np.random.default_rng(seed)
        return {i.name: np.asarray(i.sampler(rng, i.shape)) for i in self.inputs}

    def checked(self) -> list[str]:
        """Inputs whose gradient is compared."""
        if self.check is not None:
            return self.check
        return [i.name for i in self.inputs if getattr(i.sampler, "__name__", "") != "sample"]
