"""Numeric gradient cases of core/ops/vision.py (issue 8c).

RoI max pooling uses tie-free inputs (``distinct``) so every bin has one maximum; RoIs,
indices and labels are constants (no gradient in Caffe2).
"""

from __future__ import annotations

import numpy as np

from tests.core.ops.opcase import OpCase, OpInput, away_from_zero, const, distinct

_ROIS = const(np.array([[0, 0.0, 0.0, 3.0, 2.0], [1, 1.0, 1.0, 4.0, 4.0], [0, 2.0, 0.0, 2.0, 1.0]]))

CASES: list[OpCase] = [
    OpCase("UpsampleNearest", [OpInput("X", (1, 2, 2, 3))], ["Y"], args={"scale": 2}),
    OpCase(
        "UpsampleBilinear",
        [OpInput("X", (1, 2, 3, 3))],
        ["Y"],
        args={"height_scale": 2.0, "width_scale": 1.5},
    ),
    OpCase(
        "UpsampleBilinear",
        [OpInput("X", (2, 1, 2, 4)), OpInput("scales", (2,), const([1.5, 2.0]))],
        ["Y"],
        id="_scales_input",
    ),
    OpCase(
        "ResizeNearest3D",
        [OpInput("X", (1, 2, 2, 2, 3))],
        ["Y"],
        args={"temporal_scale": 2.0, "height_scale": 1.5, "width_scale": 2.0},
    ),
    OpCase(
        "BatchPermutation",
        [OpInput("X", (4, 3)), OpInput("idx", (4,), const(np.array([2, 0, 3, 1], dtype=np.int32)))],
        ["Y"],
    ),
    OpCase(
        "GroupSpatialSoftmax",
        [OpInput("X", (2, 6, 2, 2))],
        ["Y"],
        args={"num_classes": 3},
    ),
    OpCase(
        "SpatialNarrowAs",
        [OpInput("A", (2, 3, 4, 5)), OpInput("B", (2, 1, 3, 2), const(np.zeros((2, 1, 3, 2))))],
        ["Y"],
    ),
    OpCase(
        "SampleAs",
        [
            OpInput("X", (5, 3)),
            OpInput("L", (5,), const(np.array([1, 0, 2, -1, 1], dtype=np.int32))),
        ],
        ["Y"],
    ),
    OpCase(
        "RoIPool",
        [OpInput("X", (2, 2, 5, 6), distinct), OpInput("rois", (3, 5), _ROIS)],
        ["Y", "argmax"],
        args={"pooled_h": 2, "pooled_w": 2, "spatial_scale": 1.0},
    ),
    OpCase(
        "RoIPoolF",
        [OpInput("X", (2, 2, 8, 8), distinct), OpInput("rois", (3, 5), _ROIS)],
        ["Y", "argmax"],
        args={"pooled_h": 2, "pooled_w": 3, "spatial_scale": 0.5},
    ),
    OpCase(
        "PSRoIPool",
        [OpInput("X", (2, 8, 5, 6)), OpInput("rois", (3, 5), _ROIS)],
        ["Y", "mapping"],
        args={"group_size": 2, "output_dim": 2, "spatial_scale": 1.0},
    ),
    OpCase(
        "LpPool",
        [OpInput("X", (1, 2, 4, 4), away_from_zero)],
        ["Y"],
        args={"kernel": 2, "stride": 2, "p": 2.0},
    ),
    OpCase(
        "LpPool",
        [OpInput("X", (1, 3, 3, 2), away_from_zero)],
        ["Y"],
        args={"kernel": 2, "stride": 1, "pad": 1, "p": 3.0, "order": "NHWC"},
        id="_p3_pad_nhwc",
    ),
    OpCase(
        "MaxPoolWithIndex",
        [OpInput("X", (2, 2, 5, 4), distinct)],
        ["Y", "mask"],
        args={"kernel": 2, "stride": 2, "pad": 1},
    ),
    OpCase("ChannelShuffle", [OpInput("X", (2, 6, 2, 1))], ["Y"], args={"group": 2}),
    OpCase(
        "ChannelShuffle",
        [OpInput("X", (1, 2, 2, 6))],
        ["Y"],
        args={"group": 3, "order": "NHWC"},
        id="_nhwc",
    ),
    OpCase("SpaceToBatch", [OpInput("X", (2, 2, 4, 2))], ["Y"], args={"block_size": 2}),
    OpCase(
        "SpaceToBatch",
        [OpInput("X", (1, 2, 3, 4))],
        ["Y"],
        args={"block_size": 3, "pad": 1, "pad_t": 2},
        id="_pads",
    ),
    OpCase("BatchToSpace", [OpInput("X", (8, 2, 2, 1))], ["Y"], args={"block_size": 2}),
    OpCase(
        "BatchToSpace",
        [OpInput("X", (4, 1, 3, 3))],
        ["Y"],
        args={"block_size": 2, "pad": 1},
        id="_pad",
    ),
    OpCase("Im2Col", [OpInput("X", (2, 2, 4, 3))], ["Y"], args={"kernel": 2}),
    OpCase(
        "Im2Col",
        [OpInput("X", (1, 5, 4, 2))],
        ["Y"],
        args={
            "kernel_h": 2,
            "kernel_w": 3,
            "pad": 1,
            "stride": 2,
            "dilation_h": 2,
            "order": "NHWC",
        },
        id="_nhwc_pad_stride_dilation",
    ),
    OpCase(
        "Col2Im",
        [OpInput("cols", (2, 8, 3, 2)), OpInput("Z", (2, 2, 4, 3), const(np.zeros((2, 2, 4, 3))))],
        ["Y"],
        args={"kernel": 2},
    ),
    OpCase(
        "RoIAlignRotated",
        [
            OpInput("X", (2, 2, 6, 7)),
            OpInput(
                "rois",
                (3, 6),
                const(
                    [
                        [0, 3.0, 2.5, 4.0, 2.0, 30.0],
                        [1, 2.2, 3.1, 3.0, 5.0, -60.0],
                        [0, 6.5, 0.2, 2.0, 2.0, 90.0],
                    ]
                ),
            ),
        ],
        ["Y"],
        args={"pooled_h": 2, "pooled_w": 3, "sampling_ratio": 2, "spatial_scale": 1.0},
    ),
    OpCase(
        "RoIAlignRotated",
        [
            OpInput("X", (1, 5, 6, 2)),
            OpInput("rois", (2, 5), const([[2.0, 2.5, 3.0, 2.0, 45.0], [3.0, 3.0, 4.0, 3.0, 0.0]])),
        ],
        ["Y"],
        args={"pooled_h": 2, "pooled_w": 2, "aligned": 1, "order": "NHWC", "spatial_scale": 0.8},
        id="_nhwc_aligned_adaptive",
    ),
]
