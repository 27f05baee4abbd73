"""Forward-kernel semantics of the elementwise, shape, fill, logic and status ops.

Expected values are computed independently with plain NumPy indexing, not with the kernels'
own helpers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from api_schemas import caffe2_pb2
from core.errors import ExecutionError, LimitExceededError
from core.ops import _args, load_all
from core.registry import get_kernel, make_arg, make_op

load_all()

RNG_SEED = 1234


def run(t: str, inputs: list[Any], n_out: int = 1, **args: Any) -> list[np.ndarray]:
    o = make_op(
        t,
        [f"i{k}" for k in range(len(inputs))],
        [f"o{k}" for k in range(n_out)],
        [make_arg(k, v) for k, v in args.items()],
    )
    kernel = get_kernel(t)
    assert kernel is not None, t
    return list(kernel(o, [np.asarray(x) for x in inputs]))


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(RNG_SEED)


# --- broadcasting ----------------------------------------------------------------------------


def test_legacy_broadcast_with_axis(rng: np.random.Generator) -> None:
    a = rng.standard_normal((2, 3, 4, 5))
    b = rng.standard_normal((3, 4))
    (c,) = run("Add", [a, b], broadcast=1, axis=1)
    expected = np.empty_like(a)
    for i, j, k, m in np.ndindex(a.shape):
        expected[i, j, k, m] = a[i, j, k, m] + b[j, k]
    np.testing.assert_allclose(c, expected)


def test_legacy_broadcast_suffix_and_axis_str(rng: np.random.Generator) -> None:
    a = rng.standard_normal((2, 3, 4))
    b = rng.standard_normal((3, 4))
    (c,) = run("Mul", [a, b], broadcast=1)
    np.testing.assert_allclose(c, a * b[None])
    b1 = rng.standard_normal(3)
    (c,) = run("Sub", [a, b1], broadcast=1, axis_str="C", order="NCHW")
    np.testing.assert_allclose(c, a - b1[None, :, None])


def test_legacy_broadcast_ignores_outer_ones(rng: np.random.Generator) -> None:
    a = rng.standard_normal((2, 3, 4, 5))
    b = rng.standard_normal((1, 4, 1))
    (c,) = run("Add", [a, b], broadcast=1, axis=1)
    np.testing.assert_allclose(c, a + b[0, :, 0][None, None, :, None])


def test_legacy_broadcast_mismatch_is_an_execution_error(rng: np.random.Generator) -> None:
    with pytest.raises(ExecutionError, match="Add"):
        run("Add", [rng.standard_normal((2, 3)), rng.standard_normal((2,))], broadcast=1)
    # legacy mode never broadcasts A
    with pytest.raises(ExecutionError):
        run("Add", [rng.standard_normal((3,)), rng.standard_normal((2, 3))], broadcast=1)


def test_numpy_broadcast_both_ways(rng: np.random.Generator) -> None:
    a = rng.standard_normal((2, 1, 4))
    b = rng.standard_normal((3, 1))
    (c,) = run("Div", [a, b])
    assert c.shape == (2, 3, 4)
    assert c[1, 2, 3] == pytest.approx(a[1, 0, 3] / b[2, 0])
    with pytest.raises(ExecutionError, match="cannot be broadcast"):
        run("Add", [np.zeros((2, 3)), np.zeros((4,))])


def test_binary_ops_keep_float32() -> None:
    a = np.ones((2, 3), np.float32)
    for t in ["Add", "Sub", "Mul", "Div"]:
        (c,) = run(t, [a, a])
        assert c.dtype == np.float32, t
    (y,) = run("Scale", [a], scale=0.5)
    assert y.dtype == np.float32
    (y,) = run("Pow", [a], exponent=2.0)
    assert y.dtype == np.float32
    for t in ["Exp", "Log", "Sqrt", "Sigmoid", "Tanh", "Relu", "LeakyRelu", "Abs", "Negative"]:
        assert run(t, [a])[0].dtype == np.float32, t


def test_integer_ops_for_counters() -> None:
    (c,) = run("Add", [np.array(3, np.int32), np.array(1, np.int32)])
    assert c.dtype == np.int32 and c.shape == () and int(c) == 4
    (q,) = run("Div", [np.array([-7, 7, 6]), np.array([2, -2, 3])])
    assert q.tolist() == [-3, -3, 2]
    with pytest.raises(ExecutionError, match="division by zero"):
        run("Div", [np.array([1]), np.array([0])])


def test_gradient_kernels_reduce_legacy_broadcast() -> None:
    a = np.zeros((2, 3, 4, 5))
    b = np.zeros((3, 4))
    dc = np.ones_like(a)
    da, db = run("AddGradient", [dc, a, b], 2, broadcast=1, axis=1)
    assert da.shape == a.shape and db.shape == (3, 4)
    np.testing.assert_array_equal(db, np.full((3, 4), 10.0))
    _, db = run("SubGradient", [dc, a, b], 2, broadcast=1, axis=1)
    np.testing.assert_array_equal(db, np.full((3, 4), -10.0))


def test_gradient_kernels_reduce_numpy_broadcast() -> None:
    a = np.full((4,), 2.0)
    b = np.full((2, 3, 1), 3.0)
    dc = np.ones((2, 3, 4))
    da, db = run("MulGradient", [dc, a, b], 2)
    np.testing.assert_array_equal(da, np.full((4,), 18.0))  # Σ over 2·3 of b = 3
    np.testing.assert_array_equal(db, np.full((2, 3, 1), 8.0))  # Σ over 4 of a = 2


def test_sum_reduce_like() -> None:
    a = np.arange(24.0).reshape(2, 3, 4)
    (c,) = run("SumReduceLike", [a, np.zeros(3)], axis=1)
    np.testing.assert_array_equal(c, a.sum(axis=(0, 2)))
    (c,) = run("SumReduceLike", [a, np.zeros((3, 4))])
    np.testing.assert_array_equal(c, a.sum(axis=0))


def test_sum_requires_same_shapes() -> None:
    (y,) = run("Sum", [np.ones(3), np.ones(3), np.ones(3)])
    np.testing.assert_array_equal(y, [3, 3, 3])
    with pytest.raises(ExecutionError, match="same shape"):
        run("Sum", [np.ones(3), np.ones((1, 3))])


def test_matmul_third_input_reshapes() -> None:
    a = np.arange(6.0).reshape(2, 3)
    b = np.arange(12.0).reshape(3, 4)
    (y,) = run("MatMul", [a, b, np.zeros((4, 2))])
    np.testing.assert_array_equal(y, (a @ b).reshape(4, 2))
    with pytest.raises(ExecutionError, match="inner dimensions"):
        run("MatMul", [a, a])


# --- comparisons and logic -------------------------------------------------------------------


def test_comparisons_broadcast_and_return_bool() -> None:
    a = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    b = np.array([2.0, 5.0])
    (lt,) = run("LT", [a, b], broadcast=1, axis=0)
    assert lt.dtype == np.bool_
    assert lt.tolist() == [[True, False, False], [True, False, False]]
    (eq,) = run("EQ", [a, np.array([[2.0], [5.0]])])
    assert eq.tolist() == [[False, True, False], [False, True, False]]
    (ge,) = run("GE", [np.array(7), np.array(7)])
    assert ge.shape == () and bool(ge)
    (ne,) = run("NE", [a, np.array(3.0)])
    assert ne.sum() == 5


def test_logic_needs_bool() -> None:
    t, f = np.array([True, True, False]), np.array([True, False, False])
    assert run("And", [t, f])[0].tolist() == [True, False, False]
    assert run("Or", [t, f])[0].tolist() == [True, True, False]
    assert run("Xor", [t, f])[0].tolist() == [False, True, False]
    assert run("Not", [t])[0].tolist() == [False, False, True]
    with pytest.raises(ExecutionError, match="bool"):
        run("And", [np.ones(3), t])


# --- fills -----------------------------------------------------------------------------------


def test_constant_fill_shapes_and_dtypes() -> None:
    (y,) = run("ConstantFill", [], shape=[2, 3], value=1.5)
    assert y.shape == (2, 3) and y.dtype == np.float32 and np.all(y == 1.5)
    (y,) = run("ConstantFill", [], shape=[2], value=4)
    assert y.dtype == np.int64 and y.tolist() == [4, 4]
    (y,) = run("ConstantFill", [], shape=[2], value=1.0, dtype=2)
    assert y.dtype == np.int32
    (y,) = run("ConstantFill", [], shape=[1], dtype=5)
    assert y.dtype == np.bool_ and not y[0]
    (y,) = run("ConstantFill", [np.zeros((2, 1))], extra_shape=[3], value=2.0)
    assert y.shape == (2, 1, 3)
    (y,) = run("ConstantFill", [np.array([3, 2], np.int64)], input_as_shape=1)
    assert y.shape == (3, 2) and y.dtype == np.float32 and not y.any()


def test_constant_fill_follows_float_input_dtype_without_dtype_arg() -> None:
    (y,) = run("ConstantFill", [np.zeros((2,), np.float64)], value=1.0)
    assert y.dtype == np.float64
    (y,) = run("ConstantFill", [np.zeros((2,), np.float64)], value=1.0, dtype=1)
    assert y.dtype == np.float32


def test_constant_fill_argument_errors() -> None:
    with pytest.raises(ExecutionError, match="shape"):
        run("ConstantFill", [np.zeros(2)], shape=[2])
    with pytest.raises(ExecutionError, match="extra_shape"):
        run("ConstantFill", [], extra_shape=[2])
    with pytest.raises(ExecutionError, match="input_as_shape"):
        run("ConstantFill", [], input_as_shape=1)


def test_fill_too_large_fails_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(LimitExceededError):
        run("ConstantFill", [], shape=[10**12], value=0.0)
    with pytest.raises(LimitExceededError):
        run("UniformFill", [], shape=[10**6, 10**6])
    monkeypatch.setattr(_args, "MAX_ELEMENTS", 10)
    with pytest.raises(LimitExceededError):
        run("GaussianFill", [], shape=[11])
    assert run("GaussianFill", [], shape=[10])[0].shape == (10,)


def test_huge_broadcast_and_matmul_results_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_args, "MAX_ELEMENTS", 100)
    col, row = np.zeros((11, 1)), np.zeros((1, 10))
    with pytest.raises(LimitExceededError):
        run("Add", [col, row])
    with pytest.raises(LimitExceededError):
        run("MatMul", [col, row])
    with pytest.raises(LimitExceededError):
        run("Gather", [np.zeros((2, 10)), np.zeros(11, np.int64)])
    assert run("Mul", [col[:10], row])[0].shape == (10, 10)


def test_given_tensor_fills() -> None:
    (y,) = run("GivenTensorFill", [], shape=[2, 2], values=[1.0, 2.0, 3.0, 4.0])
    assert y.dtype == np.float32 and y.tolist() == [[1, 2], [3, 4]]
    (y,) = run("GivenTensorDoubleFill", [], shape=[2], values=[0.5, 0.25])
    assert y.dtype == np.float64 and y.tolist() == [0.5, 0.25]
    (y,) = run("GivenTensorIntFill", [], shape=[3], values=[1, 2, 3])
    assert y.dtype == np.int32
    (y,) = run("GivenTensorInt64Fill", [], shape=[1], values=[2**40])
    assert y.dtype == np.int64 and int(y[0]) == 2**40
    (y,) = run("GivenTensorBoolFill", [], shape=[2], values=[1, 0])
    assert y.tolist() == [True, False]
    with pytest.raises(ExecutionError, match="values"):
        run("GivenTensorFill", [], shape=[3], values=[1.0])


def test_random_fills_are_seeded() -> None:
    (a,) = run("UniformFill", [], shape=[50], min=-2.0, max=3.0)
    (b,) = run("UniformFill", [], shape=[50], min=-2.0, max=3.0)
    (c,) = run("UniformFill", [], shape=[50], min=-2.0, max=3.0, seed=7)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert a.min() >= -2.0 and a.max() <= 3.0 and a.dtype == np.float32
    o = make_op("GaussianFill", [], ["y"], [make_arg("shape", [20])])
    o.device_option.CopyFrom(caffe2_pb2.DeviceOption(random_seed=7))
    kernel = get_kernel("GaussianFill")
    assert kernel is not None
    (g1,) = kernel(o, [])
    (g2,) = run("GaussianFill", [], shape=[20], seed=7)
    np.testing.assert_array_equal(g1, g2)


def test_xavier_and_msra_scales() -> None:
    (x,) = run("XavierFill", [], shape=[400, 12])
    bound = np.sqrt(3.0 / 12)
    assert np.abs(x).max() <= bound and np.abs(x).max() > 0.9 * bound
    (m,) = run("MSRAFill", [], shape=[4, 8, 50, 50])
    expected_std = np.sqrt(2.0 / (4 * 50 * 50))
    assert abs(float(m.std()) - expected_std) < 0.05 * expected_std


def test_range_fills() -> None:
    (y,) = run("RangeFill", [], shape=[2, 3])
    assert y.tolist() == [[0, 1, 2], [3, 4, 5]]
    (y,) = run("LengthsRangeFill", [np.array([2, 0, 3], np.int32)])
    assert y.tolist() == [0, 1, 0, 1, 2]


# --- shape ops -------------------------------------------------------------------------------


def test_reshape_zero_and_minus_one() -> None:
    x = np.arange(24.0).reshape(2, 3, 4)
    y, old = run("Reshape", [x], 2, shape=[0, -1])
    assert y.shape == (2, 12) and old.dtype == np.int64 and old.tolist() == [2, 3, 4]
    y, _ = run("Reshape", [x, np.array([4, -1], np.int64)], 2)
    assert y.shape == (4, 6)
    with pytest.raises(ExecutionError, match="-1"):
        run("Reshape", [x], 2, shape=[-1, -1])
    with pytest.raises(ExecutionError):
        run("Reshape", [x], 2, shape=[5, -1])
    with pytest.raises(ExecutionError, match="not both"):
        run("Reshape", [x, np.array([24], np.int64)], 2, shape=[24])


def test_slice_negative_indices() -> None:
    x = np.arange(12).reshape(3, 4)
    (y,) = run("Slice", [x], starts=[0, 1], ends=[-1, -1])
    np.testing.assert_array_equal(y, x[0:3, 1:4])  # -1 = through the last element
    (y,) = run("Slice", [x], starts=[-2, 0], ends=[-1, -2])
    np.testing.assert_array_equal(y, x[2:3, 0:3])
    (y,) = run("Slice", [x, np.array([1]), np.array([2])])
    np.testing.assert_array_equal(y, x[1:2, :])
    with pytest.raises(ExecutionError, match="bad slice"):
        run("Slice", [x], starts=[2], ends=[1])


def test_slice_gradient_places_dy() -> None:
    x = np.zeros((3, 4))
    (dx,) = run("SliceGradient", [x, np.ones((2, 2))], starts=[1, 1], ends=[3, 3])
    expected = np.zeros((3, 4))
    expected[1:3, 1:3] = 1
    np.testing.assert_array_equal(dx, expected)


def test_concat_split_round_trip() -> None:
    a, b = np.zeros((2, 3)), np.ones((2, 2))
    y, info = run("Concat", [a, b], 2, axis=1)
    assert y.shape == (2, 5) and info.dtype == np.int32 and info.tolist() == [3, 2]
    p, q = run("Split", [y, info], 2, axis=1)
    np.testing.assert_array_equal(p, a)
    np.testing.assert_array_equal(q, b)
    y, info = run("Concat", [a, a + 1], 2, axis=0, add_axis=1)
    assert y.shape == (2, 2, 3) and info.tolist() == [1, 1]
    p, q = run("Split", [y, info], 2, axis=0, add_axis=1)
    assert p.shape == (2, 3) and np.all(q == 1)
    y, _ = run("Concat", [np.zeros((1, 2, 2, 3)), np.zeros((1, 2, 2, 1))], 2, order="NHWC")
    assert y.shape == (1, 2, 2, 4)
    with pytest.raises(ExecutionError, match="split"):
        run("Split", [np.zeros((2, 5))], 2, split=[1, 2])


def test_gather_and_sparse_to_dense() -> None:
    d = np.arange(10.0).reshape(5, 2)
    (y,) = run("Gather", [d, np.array([4, 0, 4])])
    np.testing.assert_array_equal(y, d[[4, 0, 4]])
    with pytest.raises(ExecutionError, match="out of range"):
        run("Gather", [d, np.array([5])])
    (dense,) = run("SparseToDense", [np.array([1, 1, 3]), np.ones((3, 2)), d])
    assert dense.shape == (5, 2) and dense[:, 0].tolist() == [0, 2, 0, 1, 0]
    (b,) = run("BatchGatherGradient", [np.zeros((2, 3)), np.array([2, 2]), np.ones((2, 2))], axis=1)
    assert b.tolist() == [[0, 0, 2], [0, 0, 2]]


def test_cast_by_name_and_number() -> None:
    x = np.array([1.7, -1.7])
    assert run("Cast", [x], to="int32")[0].tolist() == [1, -1]
    assert run("Cast", [x], to=5)[0].dtype == np.bool_
    with pytest.raises(ExecutionError):
        run("Cast", [x], to=4)


def test_transpose_squeeze_expand_reduce() -> None:
    x = np.arange(24.0).reshape(2, 3, 4)
    assert run("Transpose", [x])[0].shape == (4, 3, 2)
    assert run("Transpose", [x], axes=[1, 2, 0])[0].shape == (3, 4, 2)
    assert run("Squeeze", [np.zeros((2, 1, 3))], dims=[1])[0].shape == (2, 3)
    assert run("ExpandDims", [np.zeros((2, 3))], dims=[0, 3])[0].shape == (1, 2, 3, 1)
    with pytest.raises(ExecutionError, match="squeeze"):
        run("Squeeze", [np.zeros((2, 3))], dims=[0])
    (s,) = run("ReduceSum", [x], axes=[1], keepdims=0)
    np.testing.assert_array_equal(s, x.sum(axis=1))
    (m,) = run("ReduceMean", [x])
    assert m.shape == (1, 1, 1) and m.item() == pytest.approx(11.5)


# --- status-op kernels -----------------------------------------------------------------------


def test_is_empty_shape_print() -> None:
    (e,) = run("IsEmpty", [np.zeros((0, 3))])
    assert e.shape == () and e.dtype == np.bool_ and bool(e)
    assert not bool(run("IsEmpty", [np.zeros(1)])[0])
    assert bool(run("HasElements", [np.zeros(0), np.zeros(2)])[0])
    (s,) = run("Shape", [np.zeros((2, 5, 3))])
    assert s.dtype == np.int64 and s.tolist() == [2, 5, 3]
    assert run("Shape", [np.zeros((2, 5, 3))], axes=[-1, 0])[0].tolist() == [3, 2]
    assert run("Print", [np.zeros(2)], 0) == []


# --- no kernel mutates its inputs ------------------------------------------------------------


@pytest.mark.parametrize(
    ("t", "inputs", "n_out", "args"),
    [
        ("Relu", [np.array([-1.0, 2.0])], 1, {}),
        ("ReluGradient", [np.array([0.0, 2.0]), np.array([1.0, 1.0])], 1, {}),
        ("Add", [np.ones((2, 3)), np.ones(3)], 1, {}),
        ("MulGradient", [np.ones((2, 3)), np.ones((2, 3)), np.ones(3)], 2, {}),
        ("AddGradient", [np.ones((2, 3)), np.ones((2, 3)), np.ones((2, 3))], 2, {}),
        ("SumReduceLike", [np.ones((2, 3)), np.ones((2, 3))], 1, {}),
        ("Sum", [np.ones(2)], 1, {}),
        ("EnsureDense", [np.ones(2)], 1, {}),
        ("Reshape", [np.ones((2, 3))], 2, {"shape": [-1]}),
        ("Concat", [np.ones((2, 3)), np.ones((2, 3))], 2, {}),
        ("Split", [np.ones((2, 4))], 2, {}),
        ("SliceGradient", [np.ones((3,)), np.ones((2,))], 1, {"starts": [0], "ends": [2]}),
        ("Cast", [np.ones(2)], 1, {"to": 13}),
        ("StopGradient", [np.ones(2)], 1, {}),
        ("Copy", [np.ones(2)], 1, {}),
        ("SparseToDense", [np.array([0, 0]), np.ones((2, 2))], 1, {}),
    ],
)
def test_kernels_do_not_mutate_inputs(
    t: str, inputs: list[np.ndarray], n_out: int, args: dict[str, Any]
) -> None:
    before = [x.copy() for x in inputs]
    outs = run(t, inputs, n_out, **args)
    for out in outs:
        out[...] = 42  # outputs must not alias inputs either
    for x, b in zip(inputs, before, strict=True):
        np.testing.assert_array_equal(x, b)
