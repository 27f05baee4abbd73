"""Test the test: the property check catches planted wrong gradients in a control-flow net.

The net is the shape of defect A: ``Do(inputs [x, a, w, W] -> outputs [x, W])`` whose body
``Mul(a, w -> x)`` writes ``x`` without reading it (``x`` is bound as input and output), then
``AveragedLoss(x -> loss)``; ``ys = ["loss"]``. The right gradients: ``a_grad = w / 2``,
``w_grad = a / 2`` (times the loss weight) and **zero** for ``x``. Wrong gradients are planted
in the gradient ops (``grad_ops=``, as ``verify_net`` allows) or in the gradient map, and
:func:`check_outcome` must name the blob that is wrong, and only that blob.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from api_schemas import caffe2_pb2
from core import api
from core.errors import GradientError
from core.registry import make_arg, make_op
from core.verify import InputSpec
from tests.conformance.cases import do_op
from tests.fuzz.property import (
    CLEAN_4XX,
    RIGHT_200,
    OutcomeFailure,
    case_from_request,
    check_outcome,
    cross_check,
)

NetDef = caffe2_pb2.NetDef
OperatorDef = caffe2_pb2.OperatorDef
SEED = 3


def _net() -> NetDef:
    body = NetDef(name="body")
    body.op.append(make_op("Mul", ["a", "w"], ["x"]))
    net = NetDef(name="planted")
    net.op.append(make_op("CreateScope", [], ["W"]))
    net.op.append(do_op(["x", "a", "w"], ["x"], "W", body))
    net.op.append(make_op("AveragedLoss", ["x"], ["loss"]))
    return net


INPUTS = [
    InputSpec.from_array("x", np.array([0.3, -0.8])),
    InputSpec.from_array("a", np.array([1.2, -0.5])),
    InputSpec.from_array("w", np.array([0.7, 0.9])),
]


def _check(**kwargs: Any) -> str:
    return check_outcome(_net(), ["loss"], INPUTS, seed=SEED, **kwargs)


def _generated() -> api.NetGradientResult:
    return api.gradient_for_net(_net(), {"loss": "loss_grad"})


def _failure(**kwargs: Any) -> OutcomeFailure:
    with pytest.raises(OutcomeFailure) as info:
        _check(**kwargs)
    return info.value


def _patch_generation(monkeypatch: pytest.MonkeyPatch,
                      edit: Callable[[api.NetGradientResult], None]) -> None:
    """Make every gradient generation go through ``edit`` (the checker's included).

    ``core.api.gradient_for_net`` is replaced in every loaded module that imported it, so the
    plant reaches the checker however it imports the function.
    """
    real = api.gradient_for_net

    def planted(*args: Any, **kwargs: Any) -> api.NetGradientResult:
        result = real(*args, **kwargs)
        edit(result)
        return result

    holders = [m for name, m in list(sys.modules.items())
               if name.split(".")[0] in ("core", "tests") and m is not None
               and getattr(m, "gradient_for_net", None) is real]
    assert api in holders
    for module in holders:
        monkeypatch.setattr(module, "gradient_for_net", planted)


def test_the_untampered_gradient_verifies() -> None:
    """Control: the generated gradient is right, so the failures below come from the plants."""
    assert _check() == RIGHT_200


def test_a_gradient_scaled_inside_the_do_subnet_is_caught() -> None:
    """Planted: ``Scale(a_grad -> a_grad, 3)`` right after the inner ``MulGradient``."""
    ops = list(_generated().grad_ops)
    (grad_do,) = [op for op in ops if op.type == "Do"]
    (subnet,) = [arg.n for arg in grad_do.arg if arg.name == "net"]
    k, mul_grad = next((k, op) for k, op in enumerate(subnet.op) if op.type == "MulGradient")
    a_grad = mul_grad.output[0]  # gradient of input 0, `a`
    subnet.op.insert(k + 1, make_op("Scale", [a_grad], [a_grad], [make_arg("scale", 3.0)]))

    failure = _failure(grad_ops=ops)

    assert failure.kind == "wrong gradient"
    assert failure.blobs == ["a"]  # w and x are untouched and still verify
    (report,) = failure.reports
    assert report.numeric is not None and abs(report.numeric) > 1e-3
    assert report.analytic == pytest.approx(3 * report.numeric, rel=1e-4)
    assert "grad_ops" in failure.request


def test_a_nonzero_gradient_where_the_numeric_one_is_zero_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Planted: ``x`` (overwritten by the Do, numeric gradient 0) gets ``a``'s gradient."""
    plant = "x_grad_planted"

    def edit(result: api.NetGradientResult) -> None:
        result.grad_ops.append(make_op("Copy", [str(result.grad_map["a"])], [plant]))
        result.grad_map["x"] = plant

    _patch_generation(monkeypatch, edit)

    failure = _failure()

    assert failure.kind == "wrong gradient"
    assert failure.blobs == ["x"]
    (report,) = failure.reports
    assert report.numeric == 0.0
    assert abs(report.analytic or 0.0) > 1e-3
    assert report.gradient == plant


def test_an_absent_gradient_counts_as_zero_and_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: generation forgets ``w``'s gradient (``None`` in the map)."""
    def edit(result: api.NetGradientResult) -> None:
        del result.grad_map["w"]

    _patch_generation(monkeypatch, edit)

    failure = _failure()

    assert failure.kind == "wrong gradient"
    assert failure.blobs == ["w"]
    (report,) = failure.reports
    assert report.gradient is None and report.analytic == 0.0
    assert abs(report.numeric or 0.0) > 1e-3


def test_gradient_ops_that_do_not_run_are_an_unrunnable_200() -> None:
    """Planted: the last gradient op reads a blob that nothing writes."""
    ops = list(_generated().grad_ops)
    ops.append(make_op("Copy", ["no_such_blob"], ["w_grad"]))

    failure = _failure(grad_ops=ops)

    assert failure.kind == "unrunnable 200"
    assert "no_such_blob" in str(failure)


def test_generation_errors_are_classified(monkeypatch: pytest.MonkeyPatch) -> None:
    """A located NetgradError is a clean 4xx; unlocated is a failure; anything else a 500."""
    import tests.fuzz.property as prop

    def located(*args: Any, **kwargs: Any) -> Any:
        raise GradientError.at("planted", op_index=1, op_type="Do", path="op[1]:Do")

    def unlocated(*args: Any, **kwargs: Any) -> Any:
        raise GradientError("planted without a location")

    def internal(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("planted internal error")

    monkeypatch.setattr(prop, "gradient_for_net", located)
    assert _check() == CLEAN_4XX
    monkeypatch.setattr(prop, "gradient_for_net", unlocated)
    assert _failure().kind == "unlocated 4xx"
    monkeypatch.setattr(prop, "gradient_for_net", internal)
    failure = _failure()
    assert failure.kind == "500" and "KeyError" in str(failure)


def test_the_cross_check_alone_catches_a_planted_gradient() -> None:
    """The independent cross-check (other weights, directional derivatives) sees the plant."""
    result = _generated()
    feeds = {s.blob: np.asarray(s.tensor.data, dtype=np.float64)
             for s in INPUTS if s.tensor is not None}
    base = {"loss": np.asarray(float(np.mean(feeds["a"] * feeds["w"])))}
    ops = [*result.grad_ops, make_op("Scale", ["w_grad"], ["w_grad"], [make_arg("scale", -1.0)])]

    good, _ = cross_check(_net(), ["loss"], feeds, base, result.grad_ops, result.grad_map,
                          ["x", "a", "w"], SEED)
    problems, blobs = cross_check(_net(), ["loss"], feeds, base, ops, result.grad_map,
                                  ["x", "a", "w"], SEED)

    assert good == []
    assert blobs == ["w"] and len(problems) == 1


def _verify_request_fields() -> set[str]:
    """The body fields of ``POST /v1/verify`` in the README's endpoint table."""
    readme = Path(__file__).resolve().parents[2] / "README.md"
    row = next(line for line in readme.read_text().splitlines()
               if line.startswith("| `POST /v1/verify`"))
    inside = re.search(r"`\{([^}]*)\}`", row)
    assert inside, row
    return {name.strip().rstrip("?") for name in inside.group(1).split(",")}


def test_the_failure_message_is_a_curl_ready_verify_request() -> None:
    """The JSON after ``--data @-`` is a valid ``/v1/verify`` body that reproduces the case."""
    ops = list(_generated().grad_ops)
    ops.append(make_op("Scale", ["a_grad"], ["a_grad"], [make_arg("scale", 2.0)]))
    failure = _failure(grad_ops=ops)
    text = str(failure)
    assert "curl -s -X POST http://127.0.0.1:8000/v1/verify" in text
    body = json.loads(text.split("<<'JSON'\n", 1)[1].split("\nJSON", 1)[0])

    assert set(body) <= _verify_request_fields()  # only fields the endpoint documents
    assert body["net"]["op"][1]["type"] == "Do" and body["grad_ops"]
    for spec in body["inputs"]:
        assert set(spec) == {"blob", "tensor"}
        assert set(spec["tensor"]) == {"shape", "dtype", "data"}
        assert spec["tensor"]["dtype"] == "float64"
    assert body["mode"] == "full" and body["ys"] == ["loss"] and body["recompute"] is False
    assert body["check"] == ["x", "a", "w"]
    with pytest.raises(OutcomeFailure) as again:
        check_outcome(**case_from_request(body))
    assert again.value.kind == failure.kind and again.value.blobs == failure.blobs
