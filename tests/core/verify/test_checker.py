"""The net-level numeric gradient checker (spec §6), including tests of the tester."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from api_schemas import caffe2_pb2
from core.api import gradient_for_net
from core.errors import InvalidRequestError
from core.executor.executor import execute
from core.executor.limits import RunLimits
from core.executor.pool import WorkerPool
from core.registry import (
    REGISTRY,
    GradientMaker,
    make_arg,
    make_op,
    register_gradient,
    register_kernel,
    schema,
)
from core.verify import (
    InputSpec,
    RandomSpec,
    TensorSpec,
    VerifyOptions,
    materialize_inputs,
    seed_names,
    verify_net,
)
from tests.conformance.cases import Builder, add_if_op, add_while_op, if_tutorial_net

SEED = 20261129
NetDef = caffe2_pb2.NetDef


def _net(*ops: caffe2_pb2.OperatorDef) -> NetDef:
    net = NetDef(name="n")
    net.op.extend(ops)
    return net


def _rand(blob: str, shape: list[int], dist: str = "normal") -> InputSpec:
    return InputSpec(blob, random=RandomSpec(shape, distribution=dist, seed=None))


def _mlp() -> NetDef:
    return _net(
        make_op("FC", ["x", "w", "b"], ["h"]),
        make_op("Tanh", ["h"], ["t"]),
        make_op("Sigmoid", ["t"], ["y"]),
    )


MLP_INPUTS = [_rand("x", [4, 5]), _rand("w", [3, 5]), _rand("b", [3])]


# --- inputs --------------------------------------------------------------------------------
def test_materialize_inputs_is_deterministic_and_respects_domains() -> None:
    specs = [
        InputSpec("t", tensor=TensorSpec([2, 2], "float32", [1, 2, 3, 4])),
        _rand("p", [1000], "positive"),
        _rand("a", [1000], "away_from_zero"),
        InputSpec("i", random=RandomSpec([50], "int32", low=3, high=5)),
    ]
    one, two = materialize_inputs(specs, seed=1), materialize_inputs(specs, seed=1)
    other = materialize_inputs(specs, seed=2)
    assert one["t"].dtype == np.float32 and one["t"].tolist() == [[1, 2], [3, 4]]
    np.testing.assert_array_equal(one["p"], two["p"])
    assert not np.array_equal(one["p"], other["p"])
    assert one["p"].min() >= 0.5 and one["p"].max() < 2.0
    assert np.abs(one["a"]).min() >= 0.2 and (one["a"] < 0).any()
    assert one["i"].dtype == np.int32 and set(one["i"].tolist()) <= {3, 4}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (InputSpec("x", tensor=TensorSpec([2, 2], "float64", [1, 2, 3])), "needs 4 values"),
        (InputSpec("x"), "exactly one of tensor and random"),
        (InputSpec("x", random=RandomSpec([2], "complex64")), "dtype"),
        (InputSpec("x", random=RandomSpec([2], distribution="cauchy")), "distribution"),
        (InputSpec("x", random=RandomSpec([-1])), "negative dimension"),
    ],
)
def test_bad_input_specs(spec: InputSpec, message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        materialize_inputs([spec])


def test_seed_names_avoid_existing_blobs() -> None:
    net = _net(make_op("Relu", ["x"], ["y"]), make_op("Relu", ["y_grad"], ["z"]))
    assert seed_names(net, ["y", "z"], ["y_grad"]) == {"y": "y_grad_1", "z": "z_grad"}
    assert seed_names(net, {"z": "dz"}) == {"z": "dz"}


# --- passing checks ------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["fast", "full"])
def test_correct_gradients_pass(mode: str) -> None:
    res = verify_net(_mlp(), ["y"], VerifyOptions(inputs=MLP_INPUTS, mode=mode, seed=SEED))
    assert res.report.passed, res.report
    assert [b.blob for b in res.report.blobs] == ["x", "w", "b"]
    for b in res.report.blobs:
        assert b.gradient == f"{b.blob}_grad"
        assert b.checked == (3 if mode == "fast" else {"x": 20, "w": 15, "b": 3}[b.blob])
    assert res.grad_map["x"] == "x_grad"
    assert [op.type for op in res.grad_ops][-1] == "FCGradient"


def test_in_place_op_input_is_snapshotted() -> None:
    # bug-cases row 11: Relu(X -> X) must be checked against the X fed, not the Relu output
    net = _net(
        make_op("Relu", ["X"], ["X"]), make_op("Scale", ["X"], ["Y"], [make_arg("scale", 3.0)])
    )
    opts = VerifyOptions(inputs=[_rand("X", [6], "away_from_zero")], mode="full", seed=SEED)
    res = verify_net(net, ["Y"], opts)
    assert res.report.passed, res.report


def test_input_without_gradient_is_checked_as_zero() -> None:
    net = _net(make_op("Relu", ["x"], ["y"]), make_op("Relu", ["unused"], ["u"]))
    opts = VerifyOptions(
        inputs=[_rand("x", [3], "away_from_zero"), _rand("unused", [2])], seed=SEED
    )
    res = verify_net(net, ["y"], opts)
    by = {b.blob: b for b in res.report.blobs}
    assert by["unused"].passed and by["unused"].gradient is None
    assert "no gradient" in by["unused"].note


def test_float32_outputs_get_a_larger_step_and_a_warning() -> None:
    net = _net(
        make_op("ConstantFill", [], ["c"], [make_arg("shape", [3]), make_arg("value", 2.0)]),
        make_op("Mul", ["x", "c"], ["y"]),
    )
    opts = VerifyOptions(
        inputs=[InputSpec("x", random=RandomSpec([3], "float32"))],
        cast_float64=False,
        atol=1e-3,
        rtol=1e-2,
        seed=SEED,
    )
    res = verify_net(net, ["y"], opts)
    assert res.report.step == 1e-3
    assert any(d.code == "low_precision_output" for d in res.diagnostics)
    assert res.report.passed, res.report


# --- testing the tester --------------------------------------------------------------------
# A test-only op whose registered gradient is deliberately wrong: y = 3x, but dx = 2·dy.
# Registered for the duration of one test only (the registry is process-global).
def _triple(op: caffe2_pb2.OperatorDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
    return [3 * inputs[0]]


def _wrong_triple_grad(m: GradientMaker) -> list[caffe2_pb2.OperatorDef]:
    return [m.make_op("Scale", [m.GO(0)], [m.GI(0)], [make_arg("scale", 2.0)])]


@pytest.fixture
def wrong_triple() -> Iterator[str]:
    op_type = "TestOnlyWrongTriple"
    register_kernel(op_type)(_triple)
    register_gradient(op_type, op_schema=schema(1, 1), copy_arguments=False)(_wrong_triple_grad)
    yield op_type
    REGISTRY.pop(op_type, None)


@pytest.mark.parametrize("mode", ["fast", "full"])
def test_a_wrong_gradient_is_caught_and_named(mode: str, wrong_triple: str) -> None:
    net = _net(
        make_op(wrong_triple, ["a"], ["ya"]),
        make_op("Sigmoid", ["b"], ["yb"]),
        make_op("Add", ["ya", "yb"], ["y"]),
    )
    opts = VerifyOptions(inputs=[_rand("a", [4]), _rand("b", [4])], mode=mode, seed=SEED)
    res = verify_net(net, ["y"], opts)
    by = {b.blob: b for b in res.report.blobs}
    assert not res.report.passed
    assert not by["a"].passed and by["b"].passed
    assert by["a"].analytic is not None and by["a"].numeric is not None
    # the numeric directional derivative is 3/2 of the (wrong) analytic one
    np.testing.assert_allclose(by["a"].numeric, 1.5 * by["a"].analytic, rtol=1e-6)
    if mode == "full":
        assert by["a"].worst_index is not None and len(by["a"].worst_index) == 1


def test_tampered_gradient_ops_are_caught() -> None:
    net = _net(
        make_op("Scale", ["x"], ["h"], [make_arg("scale", 2.0)]), make_op("Tanh", ["h"], ["y"])
    )
    gen = gradient_for_net(net, {"y": "y_grad"})
    tampered = [caffe2_pb2.OperatorDef() for _ in gen.grad_ops]
    for t, g in zip(tampered, gen.grad_ops, strict=True):
        t.CopyFrom(g)
        for a in t.arg:
            if a.name == "scale":
                a.f = 2.5
    opts = VerifyOptions(inputs=[_rand("x", [5])], seed=SEED)
    assert verify_net(net, ["y"], opts).report.passed
    res = verify_net(net, ["y"], opts, grad_ops=tampered)
    assert not res.report.passed
    assert [b.blob for b in res.report.blobs if not b.passed] == ["x"]


# --- non-differentiable points -------------------------------------------------------------
def test_relu_at_zero_is_reported_not_silently_failed() -> None:
    net = _net(make_op("Relu", ["x"], ["y"]))
    opts = VerifyOptions(
        inputs=[InputSpec("x", tensor=TensorSpec([3], "float64", [0.0, 1.0, -1.0]))],
        mode="full",
        seed=SEED,
    )
    res = verify_net(net, ["y"], opts)
    report = res.report.blobs[0]
    assert report.nondifferentiable
    assert report.worst_index == [0]  # the mismatch sits exactly at the kink
    assert "non-differentiable" in report.note and "op[0]:Relu" in report.note
    kinks = [d for d in res.diagnostics if d.code == "nondifferentiable_point"]
    assert len(kinks) == 1 and kinks[0].path == "op[0]:Relu" and kinks[0].blobs == ("x",)


def test_maxpool_ties_are_reported() -> None:
    x = np.arange(16, dtype=np.float64).reshape(1, 1, 4, 4)
    x[0, 0, 0, 0] = x[0, 0, 1, 1] = 100.0  # a tie in the first 2x2 window
    pool = make_op("MaxPool", ["x"], ["y"], [make_arg("kernel", 2), make_arg("stride", 2)])
    res = verify_net(
        _net(pool), ["y"], VerifyOptions(inputs=[InputSpec.from_array("x", x)], seed=SEED)
    )
    kinks = [d for d in res.diagnostics if d.code == "nondifferentiable_point"]
    assert len(kinks) == 1 and "1 window ties" in kinks[0].message
    res = verify_net(
        _net(pool),
        ["y"],
        VerifyOptions(
            inputs=[InputSpec.from_array("x", np.arange(16.0).reshape(1, 1, 4, 4))], seed=SEED
        ),
    )
    assert not any(d.code == "nondifferentiable_point" for d in res.diagnostics)
    assert res.report.passed


# --- control flow --------------------------------------------------------------------------
@pytest.mark.parametrize(("x", "z", "y_grad"), [(0.5, 16.0, 8.0), (-0.5, 64.0, 48.0)])
def test_if_tutorial_gradient(x: float, z: float, y_grad: float) -> None:
    # control-flow-cases §9: z = y**2 (x > 0) or y**3, y = 4
    net = if_tutorial_net()
    gen = gradient_for_net(net, ["z"])
    full = NetDef()
    full.CopyFrom(net)
    full.op.extend(gen.grad_ops)
    out = execute(full, {"x": np.array(x, np.float32)})
    assert out["z"].tolist() == [z]
    assert out[str(gen.grad_map["y"])].tolist() == [y_grad]


def _scalar(blob: str, dtype: str, value: object) -> InputSpec:
    return InputSpec(blob, tensor=TensorSpec([], dtype, [value]))


@pytest.mark.parametrize("cond", [True, False])
def test_if_gradient_verifies(cond: bool) -> None:
    then, else_ = Builder("then"), Builder("else")
    then.op("Tanh", ["x"], ["y"])
    else_.op("Sigmoid", ["x"], ["y"])
    net = NetDef(name="if_net")
    add_if_op(net, "cond", ["cond", "x", "y"], then.net, else_.net)
    opts = VerifyOptions(
        inputs=[_scalar("cond", "bool", cond), _rand("x", [4])], mode="full", seed=SEED
    )
    res = verify_net(net, ["y"], opts)
    assert res.report.passed, res.report


def test_while_gradient_verifies() -> None:
    body = Builder("body")
    body.op("Scale", ["x"], ["x"], scale=1.5)
    body.op("Add", ["n", "one"], ["n"])
    body.op("LT", ["n", "three"], ["cond"])
    net = NetDef(name="loop")
    add_while_op(net, "cond", ["cond", "x", "n", "one", "three"], body.net)
    net.op.append(make_op("Tanh", ["x"], ["y"]))
    opts = VerifyOptions(
        inputs=[
            _scalar("cond", "bool", True),
            _scalar("n", "int64", 0),
            _scalar("one", "int64", 1),
            _scalar("three", "int64", 3),
            _rand("x", [3]),
        ],
        mode="full",
        seed=SEED,
    )
    res = verify_net(net, ["y"], opts)
    assert res.report.passed, res.report


# --- options, pool -------------------------------------------------------------------------
def test_bad_options_are_rejected() -> None:
    with pytest.raises(InvalidRequestError, match="mode"):
        verify_net(_mlp(), ["y"], VerifyOptions(inputs=MLP_INPUTS, mode="slow"))
    with pytest.raises(InvalidRequestError, match="not a fed input"):
        verify_net(_mlp(), ["y"], VerifyOptions(inputs=MLP_INPUTS, check=["h"]))


@pytest.fixture(scope="module")
def pool() -> Iterator[WorkerPool]:
    with WorkerPool(1, RunLimits(wall_clock_s=30)) as p:
        yield p


def test_pool_and_in_process_agree(pool: WorkerPool) -> None:
    opts = VerifyOptions(inputs=MLP_INPUTS, seed=SEED)
    here = verify_net(_mlp(), ["y"], opts)
    there = verify_net(_mlp(), ["y"], opts, pool=pool)
    assert here.report == there.report
    assert there.report.passed


def test_scalar_inputs_work_in_fast_mode() -> None:
    """Found by fuzzing: a 0-d input crashed the fast-mode checker."""
    net = NetDef()
    net.op.append(make_op("Tanh", ["x"], ["y"]))
    opts = VerifyOptions(inputs=[InputSpec.from_array("x", np.array(0.3))], mode="fast")
    assert verify_net(net, ["y"], opts).report.passed


@pytest.mark.parametrize(
    "spec",
    [
        InputSpec("x", tensor=TensorSpec([2], "int32", [1, 1e30])),
        InputSpec("x", random=RandomSpec([3], seed=-1)),
        InputSpec("x", random=RandomSpec([0, 2**63])),
        InputSpec("x", random=RandomSpec([3], dtype="int32", low=0, high=2**40)),
        InputSpec("x", random=RandomSpec([3], low=float("nan"))),
        InputSpec("x", random=RandomSpec([3], low=2.0, high=1.0)),
    ],
    ids=["int_overflow", "negative_seed", "huge_dim", "int_range", "nan_bound", "low_above_high"],
)
def test_bad_input_specs_are_request_errors(spec: InputSpec) -> None:
    """Found by fuzzing: these used to fail inside the worker with raw Python errors."""
    with pytest.raises(InvalidRequestError):
        materialize_inputs([spec])


def test_ops_from_gradients_net_with_auto_seeds_verify_as_they_are() -> None:
    """Found by a walkthrough: passing /v1/gradients/net's ops (all-ones seed first) back to
    verify must check them, not the seed."""
    net = NetDef()
    net.op.extend(
        [
            make_op("FC", ["x", "w1", "b1"], ["h1"]),
            make_op("Relu", ["h1"], ["h1"]),
            make_op("FC", ["h1", "w2", "b2"], ["y"]),
        ]
    )
    inputs = [
        InputSpec("x", random=RandomSpec([2, 3], seed=1)),
        InputSpec("w1", random=RandomSpec([4, 3], seed=2)),
        InputSpec("b1", random=RandomSpec([4], seed=3)),
        InputSpec("w2", random=RandomSpec([2, 4], seed=4)),
        InputSpec("b2", random=RandomSpec([2], seed=5)),
    ]
    ops = list(gradient_for_net(net, ["y"]).grad_ops)
    assert ops[0].type == "ConstantFill"
    good = verify_net(net, ["y"], VerifyOptions(inputs=inputs, mode="full"), grad_ops=ops)
    assert good.report.passed, good.report
    tampered = [caffe2_pb2.OperatorDef() for _ in ops]
    for new, old in zip(tampered, ops, strict=True):
        new.CopyFrom(old)
    relu_grad = next(o for o in tampered if o.type == "ReluGradient")
    relu_grad.output[0] = "h1_grad_tampered"
    tampered.insert(tampered.index(relu_grad) + 1,
                    make_op("Scale", ["h1_grad_tampered"], ["h1_grad"], [make_arg("scale", 1.1)]))
    bad = verify_net(net, ["y"], VerifyOptions(inputs=inputs, mode="full"), grad_ops=tampered)
    by_blob = {b.blob: b.passed for b in bad.report.blobs}
    assert by_blob["w2"] and by_blob["b2"] and not by_blob["w1"] and not by_blob["x"]
