"""Numeric gradient cases of core/ops/losses_extra.py and core/ops/losses_detectron.py.

Kinks are kept away from by the inputs: SmoothL1 differences stay clear of ``beta``,
MarginRanking / CosineEmbedding hinge arguments clear of 0, probabilities inside (0, 1).
Labels, targets, weights and normalisers are constants (they get no gradient in Caffe2).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.core.ops.opcase import OpCase, OpInput, Sampler, const


def fixed(value: Any) -> Sampler:
    """A fixed input whose gradient IS checked (unlike :func:`const`)."""

    def fixed_input(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        return np.array(value, dtype=np.float64)

    return fixed_input


def probs(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Probabilities in [0.1, 0.9)."""
    return rng.uniform(0.1, 0.9, shape)


def clear_of_beta(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """|v| in [0.1, 0.7) ∪ [1.3, 2.0) with random sign: SmoothL1 (beta 1) away from its kink."""
    mag = np.where(
        rng.random(shape) < 0.5, rng.uniform(0.1, 0.7, shape), rng.uniform(1.3, 2.0, shape)
    )
    return mag * rng.choice([-1.0, 1.0], shape)


_T01 = const(np.array([[1.0, 0.0, 0.3, 1.0], [0.0, 0.7, 1.0, 0.0], [0.5, 1.0, 0.0, 0.2]]))
_ZERO34 = const(np.zeros((3, 4)))
_ONES34 = const(np.ones((3, 4)))
_PROB_LABEL = np.array([[0.2, 0.3, 0.5, 0.0], [0.0, 0.0, 1.0, 0.0], [0.25, 0.25, 0.25, 0.25]])

_SSWL_LABELS = const(np.array([[[0, 2], [1, -1]], [[2, 2], [-1, 0]]], dtype=np.int32))
# SigmoidFocalLoss / SoftmaxFocalLoss: N=1, A=2, C=3, H=2, W=2.
_FOCAL_T_SIG = const(np.array([[[[1, 0], [3, -1]], [[2, 2], [0, 1]]]], dtype=np.int32))
_FOCAL_T_SOFT = const(np.array([[[[1, 0], [2, -1]], [[2, 2], [0, 1]]]], dtype=np.int32))

CASES: list[OpCase] = [
    OpCase(
        "SigmoidCrossEntropyWithLogits", [OpInput("X", (3, 4)), OpInput("T", (3, 4), _T01)], ["Y"]
    ),
    OpCase(
        "SigmoidCrossEntropyWithLogits",
        [OpInput("X", (3, 4)), OpInput("T", (3, 4), _T01)],
        ["Y"],
        args={"log_D_trick": 1},
        id="_log_D_trick",
    ),
    OpCase(
        "SigmoidCrossEntropyWithLogits",
        [OpInput("X", (3, 4)), OpInput("T", (3, 4), _T01)],
        ["Y"],
        args={"unjoined_lr_loss": 1},
        id="_unjoined",
    ),
    OpCase(
        "SigmoidCrossEntropyWithLogits",
        [OpInput("X", (5,)), OpInput("T", (5,), const([1.0, 0.0, 1.0, 0.0, 0.5]))],
        ["Y"],
        id="_1d",
    ),
    OpCase(
        "WeightedSigmoidCrossEntropyWithLogits",
        [
            OpInput("X", (3, 4)),
            OpInput("T", (3, 4), _T01),
            OpInput("W", (3, 4), const(np.linspace(0.2, 2.0, 12).reshape(3, 4))),
        ],
        ["Y"],
    ),
    OpCase(
        "CrossEntropy",
        [OpInput("X", (3, 4), probs), OpInput("L", (3, 4), const(_PROB_LABEL))],
        ["Y"],
    ),
    OpCase("MakeTwoClass", [OpInput("X", (3, 2), probs)], ["Y"]),
    OpCase(
        "BernoulliJSD",
        [OpInput("X", (3, 4), probs), OpInput("T", (3, 4), const(np.full((3, 4), 0.3)))],
        ["L"],
    ),
    OpCase(
        "SpatialSoftmaxWithLoss",
        [OpInput("X", (2, 3, 2, 2)), OpInput("labels", (2, 2, 2), _SSWL_LABELS)],
        ["P", "loss"],
        outputs_with_grads=(1,),
    ),
    OpCase(
        "SpatialSoftmaxWithLoss",
        [
            OpInput("X", (2, 3, 2, 2)),
            OpInput("labels", (2, 2, 2), _SSWL_LABELS),
            OpInput("w", (2, 2, 2), const(np.linspace(0.5, 2.0, 8).reshape(2, 2, 2))),
        ],
        ["P", "loss"],
        args={"scale": 3.0},  # Caffe2's forward ignores scale; the gradient must too
        outputs_with_grads=(1,),
        id="_weights_scale",
    ),
    OpCase(
        "MarginRankingCriterion",
        [
            OpInput("X1", (4,), fixed([0.3, -0.2, 1.5, 0.0])),
            OpInput("X2", (4,), fixed([0.1, 0.4, -0.5, 2.0])),
            OpInput("Y", (4,), const(np.array([1, -1, 1, 1], dtype=np.int32))),
        ],
        ["L"],
        args={"margin": 0.5},
    ),
    OpCase(
        "CosineEmbeddingCriterion",
        [
            OpInput("S", (5,), fixed([0.9, 0.4, -0.3, 0.7, 0.05])),
            OpInput("Y", (5,), const(np.array([1, -1, -1, -1, 1], dtype=np.int32))),
        ],
        ["L"],
        args={"margin": 0.2},
    ),
    # Detectron losses.
    OpCase(
        "SmoothL1Loss",
        [
            OpInput("Y_hat", (3, 4), clear_of_beta),
            OpInput("Y", (3, 4), _ZERO34),
            OpInput("alpha_in", (3, 4), _ONES34),
            OpInput("alpha_out", (3, 4), const(np.linspace(0.5, 1.5, 12).reshape(3, 4))),
        ],
        ["loss"],
    ),
    OpCase(
        "SmoothL1Loss",
        [
            OpInput("Y_hat", (3, 4), clear_of_beta),
            OpInput("Y", (3, 4), _ZERO34),
            OpInput("alpha_in", (3, 4), const(np.full((3, 4), 0.5))),
            OpInput("alpha_out", (3, 4), _ONES34),
        ],
        ["loss"],
        args={"beta": 0.5, "scale": 2.0},
        id="_beta_scale",
    ),
    OpCase(
        "SelectSmoothL1Loss",
        [
            OpInput("Y_hat", (2, 8, 2, 3), clear_of_beta),
            OpInput("Y", (2, 4), const(np.zeros((2, 4)))),
            OpInput("L", (2, 4), const(np.array([[0, 4, 1, 2], [1, 0, 0, 1]], dtype=np.float32))),
            OpInput("S", (1,), const([3.0])),
        ],
        ["loss"],
        args={"scale": 0.5},
    ),
    OpCase(
        "SigmoidCrossEntropyLoss",
        [
            OpInput("X", (2, 3, 2)),
            OpInput(
                "T",
                (2, 3, 2),
                const(
                    np.array([1, 0, -1, 1, 0, 0, 1, -1, 1, 0, 1, 1], dtype=np.int32).reshape(
                        2, 3, 2
                    )
                ),
            ),
        ],
        ["loss"],
        args={"scale": 2.0},
    ),
    OpCase(
        "SigmoidCrossEntropyLoss",
        [
            OpInput("X", (2, 3)),
            OpInput("T", (2, 3), const(np.array([[1, 0, -1], [0, 1, 1]], dtype=np.int32))),
        ],
        ["loss"],
        args={"normalize": 0},
        id="_no_normalize",
    ),
    OpCase(
        "SigmoidFocalLoss",
        [
            OpInput("X", (1, 6, 2, 2)),
            OpInput("T", (1, 2, 2, 2), _FOCAL_T_SIG),
            OpInput("wp", (1,), const([3.0])),
        ],
        ["loss"],
        args={"num_classes": 3, "gamma": 2.0, "alpha": 0.25, "scale": 1.5},
    ),
    OpCase(
        "SoftmaxFocalLoss",
        [
            OpInput("X", (1, 6, 2, 2)),
            OpInput("T", (1, 2, 2, 2), _FOCAL_T_SOFT),
            OpInput("wp", (1,), const([3.0])),
        ],
        ["loss", "P"],
        args={"num_classes": 3, "gamma": 2.0, "alpha": 0.25, "scale": 1.5},
    ),
    OpCase(
        "SoftmaxFocalLoss",
        [
            OpInput("X", (1, 6, 2, 2)),
            OpInput("T", (1, 2, 2, 2), _FOCAL_T_SOFT),
            OpInput("wp", (1,), const([0.5])),
        ],
        ["loss", "P"],
        args={"num_classes": 3, "gamma": 0.5},
        id="_gamma_half",
    ),
    OpCase(
        "PairWiseLoss",
        [
            OpInput("X", (5, 1)),
            OpInput("label", (5, 1), const(np.array([[1.0], [0.0], [2.0], [0.0], [1.0]]))),
        ],
        ["Y"],
    ),
    OpCase(
        "PairWiseLoss",
        [
            OpInput("X", (6,)),
            OpInput("label", (6,), const([1.0, 0.0, 0.0, 2.0, 1.0, 1.0])),
            OpInput("lengths", (3,), const(np.array([2, 3, 1], dtype=np.int32))),
        ],
        ["Y"],
        id="_lengths",
    ),
]
