"""Numeric gradient cases of the reduction family (core/ops/reductions.py), float64.

The max/min-type ops are checked on inputs without ties (``distinct``; for variadic Max/Min
each input is offset by a different fraction of the value spacing, so no two inputs tie at an
element). ReduceL1 and L1Distance inputs stay away from 0 / from each other; SquareRootDivide
only differentiates DATA (Caffe2 gives SCALE no gradient).
"""

from __future__ import annotations

import numpy as np

from tests.core.ops.opcase import (
    OpCase,
    OpInput,
    Sampler,
    away_from_zero,
    const,
    distinct,
    positive,
)


def shifted(k: int) -> Sampler:
    """``distinct`` values plus ``0.013·k``: spacing 0.1, so inputs k ≠ k' never tie."""

    def sample(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        return distinct(rng, shape) + 0.013 * k

    sample.__name__ = "shifted"
    return sample


def _front_back(kind: str) -> list[OpCase]:
    sampler = distinct if kind == "Max" else away_from_zero
    cases = []
    for side in ("Front", "Back"):
        t = f"Reduce{side}{kind}"
        # (a zero length gives Max the lowest float: kept out of the Max cases)
        lens = [2, 0 if kind != "Max" else 1, 3, 1] if side == "Front" else [1, 3]
        cases += [
            OpCase(t, [OpInput("X", (3, 4), sampler)], ["Y"]),
            OpCase(t, [OpInput("X", (2, 3, 2), sampler)], ["Y"], {"num_reduce_dim": 2},
                   id="_two_dims"),
            OpCase(
                t,
                [OpInput("X", (3, 4) if side == "Front" else (2, 3), sampler),
                 OpInput("lengths", (), const(lens, np.int32))],
                ["Y"],
                id="_lengths",
            ),
        ]
    return cases


CASES: list[OpCase] = [
    OpCase("SumElements", [OpInput("X", (2, 3))], ["Y"]),
    OpCase("SumElements", [OpInput("X", (2, 3))], ["Y"], {"average": 1}, id="_average"),
    OpCase(
        "WeightedSum",
        [OpInput("X0", (2, 3)), OpInput("w0", (1,), const([0.7])),
         OpInput("X1", (2, 3)), OpInput("w1", (1,), const([-1.3]))],
        ["Y"],
    ),
    OpCase(
        "WeightedSum",
        [OpInput("X0", (2, 3)), OpInput("w0", (1,)), OpInput("X1", (2, 3)), OpInput("w1", (1,))],
        ["Y"],
        {"grad_on_w": 1},
        id="_grad_on_w",
    ),
    *_front_back("Sum"),
    *_front_back("Mean"),
    *_front_back("Max"),
    OpCase("ReduceMax", [OpInput("X", (2, 3, 4), distinct)], ["Y"], {"axes": [1]}),
    OpCase("ReduceMax", [OpInput("X", (2, 3), distinct)], ["Y"], {"keepdims": 0}, id="_all"),
    OpCase("ReduceMin", [OpInput("X", (2, 3, 4), distinct)], ["Y"],
           {"axes": [0, 2], "keepdims": 0}),
    OpCase("ReduceL1", [OpInput("X", (2, 3, 4), away_from_zero)], ["Y"], {"axes": [2]}),
    OpCase("ReduceL2", [OpInput("X", (2, 3, 4))], ["Y"], {"axes": [-1, 0], "keepdims": 0}),
    OpCase("RowwiseMax", [OpInput("X", (2, 3, 4), distinct)], ["Y"]),
    OpCase("ColwiseMax", [OpInput("X", (2, 3, 4), distinct)], ["Y"]),
    OpCase("Max", [OpInput("X0", (2, 3), shifted(0)), OpInput("X1", (2, 3), shifted(1)),
                   OpInput("X2", (2, 3), shifted(2))], ["Y"]),
    OpCase("Max", [OpInput("X0", (4,))], ["Y"], id="_single"),
    OpCase("Min", [OpInput("X0", (2, 3), shifted(0)), OpInput("X1", (2, 3), shifted(1))], ["Y"]),
    OpCase("Moments", [OpInput("X", (2, 3, 4))], ["mean", "var"], {"axes": [1]},
           outputs_with_grads=(0, 1)),
    OpCase("Moments", [OpInput("X", (2, 3))], ["mean", "var"], {"keepdims": 0},
           outputs_with_grads=(1,), id="_variance_only"),
    OpCase("Moments", [OpInput("X", (2, 3))], ["mean", "var"], {"axes": [0]},
           outputs_with_grads=(0,), id="_mean_only"),
    OpCase("BatchMoments", [OpInput("X", (2, 3, 2, 2))], ["mu", "var"],
           outputs_with_grads=(0, 1)),
    OpCase("BatchMoments", [OpInput("X", (2, 2, 3))], ["mu", "var"], {"order": "NHWC"},
           outputs_with_grads=(1,), id="_nhwc_var_only"),
    OpCase("L1Distance", [OpInput("X", (3, 4), shifted(0)), OpInput("Y", (3, 4), shifted(1))],
           ["Z"]),
    OpCase("L1Distance", [OpInput("X", (5,), shifted(0)), OpInput("Y", (5,), shifted(1))],
           ["Z"], id="_1d"),
    OpCase("SquareRootDivide", [OpInput("DATA", (3, 2)), OpInput("SCALE", (3,), positive)],
           ["Y"], check=["DATA"]),
    OpCase("SquareRootDivide", [OpInput("DATA", (3, 2)),
                                OpInput("SCALE", (3,), const([4, 0, 9], np.int32))],
           ["Y"], id="_int_scale"),
]
