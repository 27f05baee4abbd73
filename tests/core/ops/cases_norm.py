"""Numeric gradient cases of core/ops/matmul.py and core/ops/norms.py (issue 8c).

Statistics outputs (mean, std, rstd, rrms) get no gradient in Caffe2, so only output 0 is
weighted. Inputs of Normalize/CosineSimilarity stay away from the kEps floor, LpNorm p=1
away from 0 (its kink).
"""

from __future__ import annotations

import numpy as np

from tests.core.ops.opcase import OpCase, OpInput, away_from_zero, const, positive

_X = OpInput("X", (2, 3, 4))

CASES: list[OpCase] = [
    # BatchMatMul: all four transpose combinations, a 2-D and a 4-D batch.
    OpCase("BatchMatMul", [OpInput("A", (2, 3, 4)), OpInput("B", (2, 4, 5))], ["Y"]),
    OpCase(
        "BatchMatMul",
        [OpInput("A", (2, 4, 3)), OpInput("B", (2, 4, 5))],
        ["Y"],
        args={"trans_a": 1},
        id="_trans_a",
    ),
    OpCase(
        "BatchMatMul",
        [OpInput("A", (2, 3, 4)), OpInput("B", (2, 5, 4))],
        ["Y"],
        args={"trans_b": 1},
        id="_trans_b",
    ),
    OpCase(
        "BatchMatMul",
        [OpInput("A", (2, 4, 3)), OpInput("B", (2, 5, 4))],
        ["Y"],
        args={"trans_a": 1, "trans_b": 1},
        id="_trans_ab",
    ),
    OpCase("BatchMatMul", [OpInput("A", (3, 4)), OpInput("B", (4, 2))], ["Y"], id="_2d"),
    OpCase(
        "BatchMatMul",
        [OpInput("A", (2, 2, 3, 4)), OpInput("B", (2, 2, 4, 3))],
        ["Y"],
        id="_4d",
    ),
    OpCase("CosineSimilarity", [OpInput("X", (3, 4)), OpInput("Y", (3, 4))], ["C"]),
    OpCase("DotProductWithPadding", [OpInput("X", (3, 4)), OpInput("Y", (3, 4))], ["D"]),
    OpCase(
        "DotProductWithPadding",
        [OpInput("X", (3, 5)), OpInput("Y", (3, 3))],
        ["D"],
        args={"pad_value": 0.5},
        id="_pad",
    ),
    OpCase(
        "DotProductWithPadding",
        [OpInput("X", (3, 2)), OpInput("Y", (3, 6))],
        ["D"],
        args={"replicate": 1},
        id="_replicate",
    ),
    OpCase("Normalize", [OpInput("X", (3, 4))], ["Y"]),
    OpCase("Normalize", [_X], ["Y"], args={"axis": 1}, id="_axis1"),
    OpCase("LpNorm", [OpInput("X", (3, 4), away_from_zero)], ["Y"], args={"p": 1}, id="_p1"),
    OpCase("LpNorm", [OpInput("X", (3, 4))], ["Y"], args={"p": 2, "average": 1}, id="_p2_avg"),
    # Normalisation layers.
    OpCase("LayerNorm", [_X], ["Y", "mean", "std"]),
    OpCase("LayerNorm", [_X], ["Y", "mean", "std"], args={"axis": 2, "epsilon": 1e-3}, id="_axis2"),
    OpCase(
        "LayerNorm",
        [_X, OpInput("gamma", (3, 4)), OpInput("beta", (3, 4))],
        ["Y", "mean", "std"],
        args={"elementwise_affine": 1},
        id="_affine",
    ),
    OpCase(
        "LayerNorm",
        [_X, OpInput("gamma", (4,)), OpInput("beta", (4,))],
        ["Y", "mean", "std"],
        args={"elementwise_affine": 1, "axis": -1},
        id="_affine_last",
    ),
    OpCase(
        "GroupNorm",
        [OpInput("X", (2, 4, 3, 2)), OpInput("gamma", (4,)), OpInput("beta", (4,))],
        ["Y", "mean", "rstd"],
        args={"group": 2},
    ),
    OpCase(
        "GroupNorm",
        [OpInput("X", (2, 3, 2, 4)), OpInput("gamma", (4,)), OpInput("beta", (4,))],
        ["Y", "mean", "rstd"],
        args={"group": 2, "order": "NHWC"},
        id="_nhwc",
    ),
    OpCase(
        "InstanceNorm",
        [OpInput("X", (2, 3, 2, 3)), OpInput("scale", (3,)), OpInput("bias", (3,))],
        ["Y", "mean", "inv_std"],
    ),
    OpCase(
        "InstanceNorm",
        [OpInput("X", (2, 3, 4)), OpInput("scale", (4,)), OpInput("bias", (4,))],
        ["Y"],
        args={"order": "NHWC"},
        id="_nhwc_one_output",
    ),
    OpCase(
        "RMSNorm",
        [_X, OpInput("gamma", (3, 4)), OpInput("beta", (3, 4))],
        ["Y", "rrms"],
    ),
    OpCase(
        "RMSNorm",
        [_X, OpInput("gamma", (4,)), OpInput("beta", (4,))],
        ["Y", "rrms"],
        args={"axis": 2, "eps": 1e-3},
        id="_axis2",
    ),
    OpCase(
        "AffineChannel",
        [OpInput("X", (2, 3, 2, 2)), OpInput("scale", (3,), positive), OpInput("bias", (3,))],
        ["Y"],
        check=["X"],
        id="_frozen",
    ),
    OpCase(
        "AffineChannel",
        [OpInput("X", (2, 3, 2, 2)), OpInput("scale", (3,)), OpInput("bias", (3,))],
        ["Y"],
        args={"is_learnable": 1},
        id="_learnable",
    ),
    OpCase(
        "AffineChannel",
        [OpInput("X", (2, 2, 3)), OpInput("scale", (3,)), OpInput("bias", (3,))],
        ["Y"],
        args={"is_learnable": 1, "order": "NHWC"},
        id="_learnable_nhwc",
    ),
    OpCase(
        "L1Distance",
        [OpInput("X", (3, 4), away_from_zero), OpInput("Y", (3, 4), const(np.zeros((3, 4))))],
        ["Z"],
        check=["X"],
    ),
    OpCase(
        "L1Distance",
        [OpInput("X", (4,), const(np.zeros(4))), OpInput("Y", (4,), away_from_zero)],
        ["Z"],
        check=["Y"],
        id="_1d_dY",
    ),
]
