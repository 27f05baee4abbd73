"""core.executor.jobs: run a net (plus its generated gradient) and fetch blobs, in-process."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from core.errors import ExecutionError, InvalidRequestError, LimitExceededError
from core.executor.jobs import run_job, run_net
from core.verify import InputSpec, RandomSpec, TensorSpec
from tests.conformance.cases import if_tutorial_net


def _x(value: float) -> list[InputSpec]:
    return [InputSpec("x", TensorSpec([], "float32", [value]))]


@pytest.mark.parametrize(("x", "z", "y_grad"), [(0.5, 16.0, 8.0), (-0.5, 64.0, 48.0)])
def test_if_tutorial_values(x: float, z: float, y_grad: float) -> None:
    """control-flow-cases §9 after AddGradientOperators(["z"])."""
    res = run_net(if_tutorial_net(), _x(x), ["y_grad", "z"], ys=["z"])
    assert list(res.outputs) == ["y_grad", "z"]
    assert res.outputs["z"].dtype == np.float32
    assert res.outputs["z"].tolist() == [z] and res.outputs["y_grad"].tolist() == [y_grad]
    assert res.grad_map == {"y": "y_grad", "z": "z_autogen_grad"}
    assert res.grad_ops is not None and res.grad_ops[0].type == "ConstantFill"


def test_forward_only_keeps_dtypes_and_leaves_gradient_fields_unset() -> None:
    inputs = [*_x(-0.5), InputSpec("n", random=RandomSpec([2], "int32", "uniform", 3, 0, 5))]
    res = run_net(if_tutorial_net(), inputs, ["x_gt_zero", "n", "z"])
    assert res.grad_ops is None and res.grad_map is None and res.diagnostics == []
    assert res.outputs["x_gt_zero"].dtype == np.bool_
    assert res.outputs["x_gt_zero"].tolist() == [False]
    assert res.outputs["n"].dtype == np.int32
    assert res.outputs["z"].tolist() == [64.0]


def test_missing_fetches_are_all_named() -> None:
    with pytest.raises(ExecutionError) as info:
        run_net(if_tutorial_net(), _x(0.5), ["a", "z", "y_grad"])
    assert [(p.code, p.blobs) for p in info.value.problems] == [
        ("fetch_not_produced", ("a",)),
        ("fetch_not_produced", ("y_grad",)),
    ]


def test_fetch_cap_is_checked_over_all_blobs() -> None:
    net_bytes = if_tutorial_net().SerializeToString()
    assert len(run_job(net_bytes, _x(0.5), ["z", "y", "x"], 3)) == 3
    with pytest.raises(LimitExceededError) as info:
        run_job(net_bytes, _x(0.5), ["z", "y", "x", "one"], 3)
    assert info.value.problems[0].code == "fetch_too_large"


def test_bad_requests_are_refused() -> None:
    with pytest.raises(InvalidRequestError):
        run_net(if_tutorial_net(), _x(0.5), ["z"], skip=1)
    with pytest.raises(InvalidRequestError):
        run_net(if_tutorial_net(), _x(0.5), ["z", "z"])
    with pytest.raises(InvalidRequestError):
        run_net(if_tutorial_net(), [InputSpec("x", TensorSpec([2], "float32", [1.0]))], ["z"])


def test_job_is_picklable_by_reference() -> None:
    assert pickle.loads(pickle.dumps(run_job)) is run_job
