"""Numeric gradient cases of the sparse / embedding / segment family, float64.

Ops from ``core/ops/segments.py`` and ``core/ops/sparse.py``. Indices, lengths, segment ids
and masks are ``const`` inputs (not differentiated); ``check`` leaves out inputs Caffe2
gives no gradient (``SCALARS`` without ``grad_on_weights``, ``default_value``). Sparse
gradients (``GradientSlice``) are densified by the checker (rows of duplicate indices add up).
"""

from __future__ import annotations

import numpy as np

from tests.core.ops.opcase import OpCase, OpInput, const, distinct, normal

I64 = np.int64
I32 = np.int32

IDX = OpInput("I", sampler=const([0, 2, 2, 5, 1], I64))
LEN = OpInput("L", sampler=const([2, 0, 3], I32))
SORTED = OpInput("S", sampler=const([0, 0, 1, 1, 1], I32))
UNSORTED = OpInput("S", sampler=const([2, 0, 2, 3, 0], I64))


def _d(rows: int = 6) -> OpInput:
    return OpInput("D", (rows, 3))


W = OpInput("W", (5,))


def _family() -> list[OpCase]:
    out = [
        OpCase("SparseLengthsSum", [_d(), IDX, LEN], ["Y"]),
        OpCase("SparseLengthsMean", [_d(), IDX, LEN], ["Y"]),
        OpCase("SparseLengthsWeightedSum", [_d(), W, IDX, LEN], ["Y"], check=["D"]),
        OpCase(
            "SparseLengthsWeightedSum", [_d(), W, IDX, LEN], ["Y"], {"grad_on_weights": 1},
            id="_grad_on_weights",
        ),
        OpCase("LengthsSum", [_d(5), LEN], ["Y"]),
        OpCase("LengthsMean", [_d(5), LEN], ["Y"]),
        OpCase("LengthsWeightedSum", [_d(5), W, LEN], ["Y"], check=["D"]),
        OpCase(
            "LengthsWeightedSum", [_d(5), W, LEN], ["Y"], {"grad_on_weights": 1},
            id="_grad_on_weights",
        ),
        OpCase("LengthsMax", [OpInput("D", (5, 3), distinct), LEN], ["Y"]),
        OpCase("LengthsTile", [OpInput("D", (3, 2)), LEN], ["Y"]),
    ]
    for seg, ids in (("SortedSegment", SORTED), ("UnsortedSegment", UNSORTED)):
        out += [
            OpCase(f"{seg}Sum", [_d(5), ids], ["Y"]),
            OpCase(f"{seg}Mean", [_d(5), ids], ["Y"]),
            OpCase(f"{seg}WeightedSum", [_d(5), W, ids], ["Y"], check=["D"]),
            OpCase(f"Sparse{seg}Sum", [_d(), IDX, ids], ["Y"]),
            OpCase(f"Sparse{seg}Mean", [_d(), IDX, ids], ["Y"]),
            OpCase(f"Sparse{seg}WeightedSum", [_d(), W, IDX, ids], ["Y"], check=["D"]),
        ]
    out += [
        OpCase("UnsortedSegmentSum", [_d(5), UNSORTED], ["Y"], {"num_segments": 6},
               id="_num_segments"),
        OpCase("SparseUnsortedSegmentMean", [_d(), IDX, UNSORTED], ["Y"], {"num_segments": 5},
               id="_num_segments"),
    ]
    return out


CASES: list[OpCase] = [
    *_family(),
    OpCase(
        "SparseToDense",
        [OpInput("I", sampler=const([3, 0, 3, 5], I64)), OpInput("V", (4, 2)),
         OpInput("like", sampler=const(np.zeros((7, 2))))],
        ["Y"],
    ),
    OpCase(
        "SparseToDense",
        [OpInput("I", sampler=const([3, 0, 3, 5], I32)), OpInput("V", (4,))],
        ["Y"],
        id="_no_like",
    ),
    OpCase(
        "SparseToDenseMask",
        [OpInput("I", sampler=const([5, 1, 7, 5, 3], I64)), OpInput("V", (5, 2)),
         OpInput("dflt", (2,)), OpInput("L", sampler=const([3, 2], I32))],
        ["Y"],
        {"mask": [1, 5, 3]},
        check=["V"],
    ),
    OpCase(
        "SparseToDenseMask",
        [OpInput("I", sampler=const([5, 1, 7, 5, 3], I64)), OpInput("V", (5,)),
         OpInput("dflt", ())],
        ["Y", "present"],
        {"mask": [3, 5, 2], "return_presence_mask": 1},
        check=["V"],
        id="_no_lengths_last_wins",
    ),
    OpCase(
        "BatchGather",
        [OpInput("D", (2, 5, 3)), OpInput("I", sampler=const([[0, 4], [4, 1]], I64))],
        ["Y"],
    ),
    OpCase(
        "Gather",
        [OpInput("D", (2, 3, 4)), OpInput("I", sampler=const([3, 3, 0], I64))],
        ["Y"],
        {"axis": 2},
        id="_axis2",
    ),
    OpCase(
        "Gather",
        [OpInput("D", (2, 3, 4)), OpInput("I", sampler=const([[1], [2]], I32))],
        ["Y"],
        {"axis": -1},
        id="_axis_minus1",
    ),
    OpCase("CopyGPUToCPU", [OpInput("X", (2, 3))], ["Y"]),
    OpCase("CopyCPUToGPU", [OpInput("X", (2, 3))], ["Y"]),
    OpCase("Alias", [OpInput("X", (2, 3))], ["Y"]),
    OpCase("PackSegments", [LEN, OpInput("X", (5, 2))], ["P"]),
    OpCase(
        "PackSegments", [LEN, OpInput("X", (5, 2))], ["P", "present"],
        {"max_length": 4, "return_presence_mask": 1}, id="_max_length",
    ),
    OpCase("UnpackSegments", [LEN, OpInput("P", (3, 3, 2))], ["X"]),
    OpCase(
        "ReversePackedSegs",
        [OpInput("X", (4, 3, 2)), OpInput("L", sampler=const([4, 0, 2], I64))],
        ["Y"],
    ),
    OpCase(
        "BooleanMask",
        [OpInput("X", (5, 2)), OpInput("M", sampler=const([True, False, True, True, False]))],
        ["Y", "kept"],
    ),
]

CASES += [
    OpCase("AddPadding", [OpInput("X", (5, 2))], ["Y"]),
    OpCase(
        "AddPadding",
        [OpInput("X", (5, 2)), OpInput("L", sampler=const([2, 0, 3], I32)),
         OpInput("start", (2,)), OpInput("end", (2,))],
        ["Y", "L_out"],
        {"padding_width": 2, "end_padding_width": 1},
        id="_start_end",
    ),
    OpCase(
        "AddPadding",
        [OpInput("X", (5, 2)), OpInput("L", sampler=const([2, 3], I32)), OpInput("pad", (2,))],
        ["Y", "L_out"],
        id="_one_padding_both_ends",
    ),
    OpCase(
        "RemovePadding",
        [OpInput("X", (9, 2)), OpInput("L", sampler=const([4, 2, 3], I32))],
        ["Y", "L_out"],
    ),
    OpCase("RemovePadding", [OpInput("X", (6, 2))], ["Y"], {"padding_width": 2}, id="_one_range"),
]

CASES += [
    OpCase(
        "SequenceMask",
        [OpInput("X", (3, 4)), OpInput("L", sampler=const([2, 0, 4], I32))],
        ["Y"],
        {"fill_val": -5.0},
    ),
    OpCase(
        "SequenceMask",
        [OpInput("X", (2, 3, 4)), OpInput("L", sampler=const([1, 3, 2], I32))],
        ["Y"],
        {"axis": 2, "batch": 0, "fill_val": 0.5},
        id="_batch",
    ),
    OpCase(
        "SequenceMask",
        [OpInput("X", (2, 3, 2)), OpInput("L", sampler=const([1, 3], I32))],
        ["Y"],
        {"axis": 1, "repeat_from_axis": 2, "fill_val": 0.0},
        id="_repeat",
    ),
    OpCase(
        "SequenceMask",
        [OpInput("X", (3, 5)), OpInput("C", sampler=const([0, 2, 4], I32))],
        ["Y"],
        {"mode": "window", "radius": 1, "fill_val": 0.0},
        id="_window",
    ),
    OpCase("SequenceMask", [OpInput("X", (3, 3))], ["Y"], {"mode": "upperdiag", "fill_val": 1.0},
           id="_upperdiag"),
]

CASES += [
    OpCase(f"SortedSegmentRange{r}",
           [OpInput("D", (5, 2), distinct if r == "Max" else normal), SORTED], ["Y"])
    for r in ("Sum", "Mean", "Max", "LogSumExp", "LogMeanExp")
]

_BL = OpInput("L", sampler=const([2, 0, 3], I64))
_BI = OpInput("I", sampler=const([3, 0, 1, 4, 0], I64))
CASES += [
    OpCase("BatchSparseToDense", [_BL, _BI, OpInput("V", (5,))], ["Y"],
           {"dense_last_dim": 5, "default_value": 0.5}),
    OpCase("BatchSparseToDense", [_BL, _BI, OpInput("V", (5,)),
                                  OpInput("like", sampler=const(np.zeros((3, 6))))],
           ["Y"], id="_like"),
    OpCase("BatchDenseToSparse", [_BL, _BI, OpInput("D", (3, 5))], ["V"]),
]

CASES += [
    OpCase("LengthsTopK",
           [OpInput("X", (7,), distinct), OpInput("L", sampler=const([3, 0, 4], I32))],
           ["V", "I"], {"k": 2}),
    OpCase("LengthsTopK", [OpInput("X", (3,), distinct), OpInput("L", sampler=const([1, 2], I32))],
           ["V", "I"], {"k": 3}, id="_padded"),
]
