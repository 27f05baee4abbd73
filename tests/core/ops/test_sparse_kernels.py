"""Forward facts of the sparse / segment kernels (Caffe2's documented examples) and errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from core.errors import ExecutionError, GradientError
from core.ops import load_all
from core.registry import get_gradient_for_op, get_kernel, make_arg, make_op

load_all()

DATA = np.array([2, 4, 3, 1, 2, 10], dtype=np.float32)
LENGTHS = np.array([2, 3, 1], dtype=np.int32)


def run(op_type: str, inputs: list[Any], n_out: int = 1, **args: Any) -> list[np.ndarray]:
    op = make_op(op_type, [f"i{k}" for k in range(len(inputs))], [f"o{k}" for k in range(n_out)],
                 [make_arg(k, v) for k, v in args.items()])
    kernel = get_kernel(op_type)
    assert kernel is not None
    return [np.asarray(x) for x in kernel(op, [np.asarray(x) for x in inputs])]


def test_lengths_reducers_match_caffe2_docs() -> None:
    np.testing.assert_allclose(run("LengthsSum", [DATA, LENGTHS])[0], [6, 6, 10])
    np.testing.assert_allclose(run("LengthsMean", [DATA, LENGTHS])[0], [3, 2, 10])
    np.testing.assert_allclose(run("LengthsMax", [DATA, LENGTHS])[0], [4, 3, 10])
    w = np.array([8, 2, 1, 4, 1, 0.6], dtype=np.float32)
    np.testing.assert_allclose(run("LengthsWeightedSum", [DATA, w, LENGTHS])[0], [24, 9, 6],
                               rtol=1e-6)
    assert run("LengthsSum", [DATA, LENGTHS])[0].dtype == np.float32


def test_sparse_lengths_sum_gathers_rows() -> None:
    table = np.arange(12.0).reshape(4, 3)
    out = run("SparseLengthsSum", [table, np.array([3, 0, 3]), np.array([1, 0, 2])])[0]
    np.testing.assert_allclose(out, [table[3], np.zeros(3), table[0] + table[3]])


def test_segment_ids_rules() -> None:
    with pytest.raises(ExecutionError, match="sorted and not have gaps"):
        run("SortedSegmentSum", [DATA, np.array([0, 0, 2, 2, 2, 3])])
    out = run("UnsortedSegmentMean", [DATA, np.array([1, 1, 3, 3, 3, 1])], num_segments=5)[0]
    np.testing.assert_allclose(out, [0, 16 / 3, 0, 2, 0], rtol=1e-6)


def test_lengths_must_cover_the_rows() -> None:
    with pytest.raises(ExecutionError, match="LENGTHS sum to 5"):
        run("LengthsSum", [DATA, np.array([2, 3], np.int32)])
    with pytest.raises(ExecutionError, match="out of bounds"):
        run("SparseLengthsSum", [DATA, np.array([6]), np.array([1])])


def test_sparse_to_dense_mask_last_value_wins() -> None:
    out, present = run(
        "SparseToDenseMask",
        [np.array([2, 7, 2, 4]), np.array([1.0, 2.0, 3.0, 4.0]), np.array(-1.0),
         np.array([3, 1], np.int32)],
        n_out=2, mask=[2, 4, 5], return_presence_mask=1,
    )
    np.testing.assert_allclose(out, [[3, -1, -1], [-1, 4, -1]])
    assert present.tolist() == [[True, False, False], [False, True, False]]
    (grad,) = run("SparseToDenseMaskGradient",
                  [np.array([2, 7, 2, 4]), np.arange(6.0).reshape(2, 3), np.array([3, 1])],
                  mask=[2, 4, 5])
    np.testing.assert_allclose(grad, [0, 0, 0, 4])


def test_pack_unpack_reverse_and_boolean_mask() -> None:
    x = np.arange(5.0)
    packed = run("PackSegments", [np.array([2, 0, 3]), x], pad_minf=1)[0]
    assert packed.shape == (3, 3) and np.isneginf(packed[1]).all()
    np.testing.assert_allclose(run("UnpackSegments", [np.array([2, 0, 3]), packed])[0], x)
    rev = run("ReversePackedSegs", [np.arange(6.0).reshape(3, 2), np.array([3, 1])])[0]
    np.testing.assert_allclose(rev, [[4, 1], [2, 3], [0, 5]])
    masked, idx = run("BooleanMask", [x, np.array([True, False, False, True, True])], n_out=2)
    np.testing.assert_allclose(masked, [0, 3, 4])
    assert idx.tolist() == [0, 3, 4]


def test_accuracy_top_k() -> None:
    pred = np.array([[0.1, 0.7, 0.2], [0.5, 0.3, 0.2], [0.2, 0.3, 0.5]])
    label = np.array([1, 1, 0], dtype=np.int32)
    assert float(run("Accuracy", [pred, label])[0]) == pytest.approx(1 / 3)
    assert float(run("Accuracy", [pred, label], top_k=2)[0]) == pytest.approx(2 / 3)


def test_segment_weighted_sum_refuses_grad_on_weights() -> None:
    op = make_op("SortedSegmentWeightedSum", ["D", "W", "S"], ["Y"],
                 [make_arg("grad_on_weights", 1)])
    with pytest.raises(GradientError, match="not yet implemented for Segment operators"):
        get_gradient_for_op(op, ["Y_grad"])


def test_device_copy_of_dense_gradient_is_one_copy_back() -> None:
    ops, g = get_gradient_for_op(make_op("CopyGPUToCPU", ["X"], ["Y"]), ["Y_grad"])
    assert [(o.type, list(o.input), list(o.output)) for o in ops] == [
        ("CopyCPUToGPU", ["Y_grad"], ["X_grad"])
    ]
    assert g == ["X_grad"]


def test_sequence_mask_modes() -> None:
    x = np.arange(6.0).reshape(2, 3)
    out = run("SequenceMask", [x, np.array([1, 3], np.int32)])[0]
    assert np.isneginf(out[0, 1:]).all() and out[0, 0] == 0 and (out[1] == x[1]).all()
    grad = run("SequenceMask", [x, np.array([1, 3], np.int32)], grad=1)[0]
    np.testing.assert_allclose(grad, [[0, 0, 0], [3, 4, 5]])
    lower = run("SequenceMask", [np.ones((3, 3))], mode="lower", fill_val=0.0)[0]
    np.testing.assert_allclose(lower, np.triu(np.ones((3, 3))))
