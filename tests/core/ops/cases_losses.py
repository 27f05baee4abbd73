"""Numeric gradient cases of the loss ops (core/ops/losses.py)."""

from __future__ import annotations

import numpy as np

from tests.core.ops.opcase import OpCase, OpInput, const, positive

_LABELS4 = const([0, 3, 1, 4], dtype=np.int32)
# Probability labels (rows sum to 1, as Caffe2's label_prob gradient assumes).
_PROB = np.array([[0.1, 0.2, 0.3, 0.4, 0.0], [0.5, 0.5, 0.0, 0.0, 0.0], [0.2, 0.2, 0.2, 0.2, 0.2]])

CASES: list[OpCase] = [
    OpCase(
        "SoftmaxWithLoss",
        [OpInput("X", (4, 5)), OpInput("labels", (4,), _LABELS4)],
        ["P", "loss"],
        outputs_with_grads=(1,),
    ),
    OpCase(
        "SoftmaxWithLoss",
        [
            OpInput("X", (4, 5)),
            OpInput("labels", (4,), _LABELS4),
            OpInput("w", (4,), const([0.5, 2.0, 1.0, 0.25])),
        ],
        ["P", "loss"],
        args={"scale": 2.0},
        outputs_with_grads=(1,),
        id="_weights_scale",
    ),
    OpCase(
        "SoftmaxWithLoss",
        [
            OpInput("X", (4, 5)),
            OpInput("labels", (4,), _LABELS4),
            OpInput("w", (4,), const([0.5, 2.0, 1.0, 0.25])),
        ],
        ["P", "loss"],
        args={"average_by_batch_size": 1},
        outputs_with_grads=(1,),
        id="_average_by_batch_size",
    ),
    OpCase(
        "SoftmaxWithLoss",
        [OpInput("X", (3, 5)), OpInput("labels", (3, 5), const(_PROB))],
        ["P", "loss"],
        args={"label_prob": 1},
        outputs_with_grads=(1,),
        id="_label_prob",
    ),
    OpCase(
        "SoftmaxWithLoss",
        [OpInput("X", (2, 3, 4)), OpInput("labels", (6,), const([0, 1, 2, 3, 3, 0]))],
        ["P", "loss"],
        args={"axis": 2},
        outputs_with_grads=(1,),
        id="_axis2",
    ),
    OpCase(
        "LabelCrossEntropy",
        [OpInput("X", (3, 4), positive), OpInput("label", (3,), const([2, 0, 3]))],
        ["Y"],
    ),
    OpCase("AveragedLoss", [OpInput("X", (3, 4))], ["loss"]),
    OpCase("SquaredL2Distance", [OpInput("X", (3, 4)), OpInput("Y", (3, 4))], ["D"]),
    OpCase("SquaredL2Distance", [OpInput("X", (5,)), OpInput("Y", (5,))], ["D"], id="_1d"),
]
