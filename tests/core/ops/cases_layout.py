"""Numeric gradient cases of the data-layout family (core/ops/layout.py), float64.

These ops only move, replicate or pad elements, so any input works; shapes and arguments
are chosen so each index path is exercised (tiles > 1, broadcasting on both sides, every
padding mode including reflect/edge where one input element feeds several outputs, both
storage orders, and a SpaceToBatch pad).
"""

from __future__ import annotations

import numpy as np

from tests.core.ops.opcase import OpCase, OpInput, const

CASES: list[OpCase] = [
    OpCase("Tile", [OpInput("X", (2, 3))], ["Y"], {"tiles": 3, "axis": 1}),
    OpCase("Tile", [OpInput("X", (2, 3))], ["Y"], {"tiles": 2}, id="_axis0"),
    OpCase(
        "Tile",
        [OpInput("X", (2, 2, 3)), OpInput("tiles", (), const([2], np.int32)),
         OpInput("axis", (), const([-1], np.int32))],
        ["Y"],
        id="_inputs",
    ),
    OpCase("Expand", [OpInput("X", (3, 1)), OpInput("shape", (), const([2, 3, 4], np.int64))],
           ["Y"]),
    OpCase("Expand", [OpInput("X", (2, 3)), OpInput("shape", (), const([-1, 1], np.int64))],
           ["Y"], id="_keep"),
    OpCase("PadImage", [OpInput("X", (1, 2, 3, 3))], ["Y"], {"pad": 1}),
    OpCase("PadImage", [OpInput("X", (1, 2, 3, 4))], ["Y"],
           {"pads": [1, 2, 0, 1], "mode": "reflect"}, id="_reflect"),
    OpCase("PadImage", [OpInput("X", (2, 3, 2, 1))], ["Y"],
           {"pad_t": 2, "pad_l": 1, "pad_b": 1, "pad_r": 3, "mode": "edge", "order": "NHWC"},
           id="_edge_nhwc"),
    OpCase("PadImage", [OpInput("X", (1, 1, 2, 2))], ["Y"], {"pad": 1, "value": 3.0},
           id="_value"),
    OpCase("PrependDim", [OpInput("X", (6, 2))], ["Y"], {"dim_size": 3}),
    OpCase("ChannelShuffle", [OpInput("X", (2, 6, 2, 1))], ["Y"], {"group": 2}),
    OpCase("ChannelShuffle", [OpInput("X", (1, 2, 2, 6))], ["Y"], {"group": 3, "order": "NHWC"},
           id="_nhwc"),
    OpCase("DepthConcat", [OpInput("A", (2, 1, 2)), OpInput("B", (2, 3, 2))],
           ["Y", "split_info"]),
    OpCase("DepthConcat", [OpInput("A", (2, 2, 1)), OpInput("B", (2, 2, 2))],
           ["Y", "split_info"], {"order": "NHWC"}, id="_nhwc"),
    OpCase("DepthSplit", [OpInput("X", (2, 4, 2))], ["Y0", "Y1"], {"split": [1, 3]},
           outputs_with_grads=(0, 1)),
    OpCase("DepthSplit", [OpInput("X", (2, 4, 2))], ["Y0", "Y1"],
           outputs_with_grads=(1,), id="_one_gradient"),
    OpCase("SpaceToBatch", [OpInput("X", (2, 1, 4, 2))], ["Y"], {"block_size": 2}),
    OpCase("SpaceToBatch", [OpInput("X", (1, 2, 4, 2))], ["Y"], {"block_size": 2, "pad": 1},
           id="_pad"),
    OpCase("BatchToSpace", [OpInput("X", (4, 2, 2, 3))], ["Y"], {"block_size": 2}),
    OpCase("BatchToSpace", [OpInput("X", (8, 1, 3, 2))], ["Y"], {"block_size": 2, "pad": 1},
           id="_crop"),
    OpCase("Im2Col", [OpInput("X", (1, 2, 3, 4))], ["Y"], {"kernel": 2}),
    OpCase("Im2Col", [OpInput("X", (2, 1, 4, 4))], ["Y"],
           {"kernel_h": 2, "kernel_w": 3, "stride": 2, "pad": 1}, id="_stride_pad"),
    OpCase("Im2Col", [OpInput("X", (1, 3, 4, 2))], ["Y"],
           {"kernel": 2, "dilation": 2, "order": "NHWC", "pad_t": 1}, id="_nhwc_dilation"),
    OpCase("Col2Im", [OpInput("X", (1, 8, 2, 3)), OpInput("Z", (1, 2, 3, 4))],
           ["Y"], {"kernel": 2}, check=["X"]),
    OpCase("Col2Im", [OpInput("X", (2, 2, 2, 12)), OpInput("Z", (2, 3, 3, 3))],
           ["Y"], {"kernel": 2, "pad": 1, "stride": 2, "order": "NHWC"}, check=["X"],
           id="_nhwc"),
]
