"""Numeric gradient cases of the shape / data-movement family (core/ops/shape.py), float64.

Index, shape and split-size inputs use ``const`` samplers, so they are not differentiated.
``Split`` with a missing middle gradient checks netgrad's corrected maker (zero fill instead
of upstream's wrongly shaped ``dX``).
"""

from __future__ import annotations

import numpy as np

from tests.core.ops.opcase import OpCase, OpInput, const

I64 = np.int64
I32 = np.int32

CASES: list[OpCase] = [
    OpCase("Copy", [OpInput("X", (2, 3))], ["Y"]),
    OpCase("Reshape", [OpInput("X", (2, 3))], ["Y", "old"], {"shape": [3, -1]}),
    OpCase("Reshape", [OpInput("X", (2, 3, 4))], ["Y", "old"], {"shape": [0, -1]}, id="_zero"),
    OpCase(
        "Reshape",
        [OpInput("X", (2, 3, 4)), OpInput("S", sampler=const([4, 6], I64))],
        ["Y", "old"],
        id="_input",
    ),
    OpCase("Transpose", [OpInput("X", (2, 3, 4))], ["Y"], {"axes": [1, 2, 0]}),
    OpCase("Transpose", [OpInput("X", (2, 3, 4))], ["Y"], id="_default"),
    OpCase("Slice", [OpInput("X", (3, 4))], ["Y"], {"starts": [0, 1], "ends": [-1, 3]}),
    OpCase(
        "Slice",
        [OpInput("X", (3, 4))],
        ["Y"],
        {"starts": [1, -4], "ends": [-1, -2]},
        id="_negative",
    ),
    OpCase(
        "Slice",
        [
            OpInput("X", (3, 4, 2)),
            OpInput("s", sampler=const([1, 0], I64)),
            OpInput("e", sampler=const([3, -2], I64)),
        ],
        ["Y"],
        id="_inputs",
    ),
    OpCase(
        "Concat",
        [OpInput("X0", (2, 3)), OpInput("X1", (2, 2)), OpInput("X2", (2, 1))],
        ["Y", "split_info"],
        {"axis": 1},
    ),
    OpCase(
        "Concat",
        [OpInput("X0", (2, 3)), OpInput("X1", (2, 3))],
        ["Y", "split_info"],
        {"axis": 0, "add_axis": 1},
        id="_add_axis",
    ),
    OpCase(
        "Concat",
        [OpInput("X0", (1, 2, 2, 3)), OpInput("X1", (1, 2, 2, 1))],
        ["Y", "split_info"],
        {"order": "NHWC"},
        id="_nhwc",
    ),
    OpCase(
        "Split",
        [OpInput("X", (2, 3))],
        ["Y0", "Y1"],
        {"axis": 1, "split": [1, 2]},
        outputs_with_grads=(0, 1),
    ),
    OpCase(
        "Split",
        [OpInput("X", (6, 2))],
        ["Y0", "Y1", "Y2"],
        {"axis": 0},
        outputs_with_grads=(0, 1, 2),
        id="_equal",
    ),
    OpCase(
        "Split",
        [OpInput("X", (2, 6))],
        ["Y0", "Y1", "Y2"],
        {"split": [1, 2, 3]},
        outputs_with_grads=(0, 2),
        id="_missing_middle",
    ),
    OpCase(
        "Split",
        [OpInput("X", (2, 6))],
        ["Y0", "Y1", "Y2"],
        {"split": [1, 2, 3]},
        outputs_with_grads=(1,),
        id="_only_middle",
    ),
    OpCase(
        "Split",
        [OpInput("X", (5, 2)), OpInput("sizes", sampler=const([2, 3], I32))],
        ["Y0", "Y1"],
        {"axis": 0},
        outputs_with_grads=(0, 1),
        id="_input",
    ),
    OpCase("Squeeze", [OpInput("X", (2, 1, 3, 1))], ["Y"], {"dims": [1, 3]}),
    OpCase("ExpandDims", [OpInput("X", (2, 3))], ["Y"], {"dims": [0, 2]}),
    OpCase("Cast", [OpInput("X", (2, 3))], ["Y"], {"to": 13, "from_type": 13}),
    OpCase(
        "Cast", [OpInput("X", (2, 3))], ["Y"], {"to": "double", "from_type": "DOUBLE"}, id="_names"
    ),
    OpCase(
        "Gather",
        [OpInput("D", (5, 3)), OpInput("I", sampler=const([0, 2, 2, 4], I64))],
        ["Y"],
        id="_sparse",
    ),
    OpCase(
        "Gather",
        [OpInput("D", (5, 3)), OpInput("I", sampler=const([[0, 1], [4, 4]], I64))],
        ["Y"],
        id="_sparse_2d_indices",
    ),
    OpCase(
        "Gather",
        [OpInput("D", (5, 3)), OpInput("I", sampler=const([3, 3, 1], I32))],
        ["Y"],
        {"dense_gradient": 1},
        id="_dense",
    ),
    OpCase(
        "Gather",
        [OpInput("D", (3, 4, 2)), OpInput("I", sampler=const([3, 0, 3], I64))],
        ["Y"],
        {"axis": 1},
        id="_axis1",
    ),
    OpCase("EnsureDense", [OpInput("X", (2, 3))], ["Y"]),
    OpCase("ZeroGradient", [OpInput("X", (2, 3))], [], outputs_with_grads=()),
    OpCase("Flatten", [OpInput("X", (2, 3, 4))], ["Y"], {"axis": 2}),
    OpCase("FlattenToVec", [OpInput("X", (2, 3, 4))], ["Y"]),
    OpCase("ReduceSum", [OpInput("X", (2, 3, 4))], ["Y"], {"axes": [1], "keepdims": 0}),
    OpCase("ReduceSum", [OpInput("X", (2, 3))], ["Y"], id="_all"),
    OpCase("ReduceMean", [OpInput("X", (2, 3, 4))], ["Y"], {"axes": [0, -1]}),
    OpCase("ReduceMean", [OpInput("X", (2, 3))], ["Y"], {"keepdims": 0}, id="_all"),
]
