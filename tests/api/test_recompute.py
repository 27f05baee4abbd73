"""``recompute``: bug-cases row 1 is a 4xx by default and numerically right when opted in."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from api_schemas import caffe2_pb2
from core.proto import codec
from core.registry import make_arg, make_op
from core.verify import InputSpec, RandomSpec, VerifyOptions, verify_net


def bug_case_1() -> caffe2_pb2.NetDef:
    net = caffe2_pb2.NetDef()
    net.name = "bug1"
    net.op.extend(
        [
            make_op("FC", ["x", "w", "b"], ["y"]),
            make_op("Relu", ["y"], ["y"]),
            make_op("Dropout", ["y"], ["y", "mask"], [make_arg("is_test", 0)]),
            make_op("AveragedLoss", ["y"], ["loss"]),
        ]
    )
    return net


def body(**extra: Any) -> dict[str, Any]:
    return {"net": codec.to_json_obj(bug_case_1()), "ys": ["loss"], **extra}


def test_default_is_caffe2s_version_error(client: TestClient) -> None:
    r = client.post("/v1/gradients/net", json=body())
    assert r.status_code == 422
    assert r.headers["content-type"].startswith("application/problem+json")
    (err,) = r.json()["errors"]
    assert err["code"] == "version_mismatch"
    assert (err["op_index"], err["op_type"], err["path"]) == (1, "Relu", "op[1]:Relu")
    assert "recompute" in err["message"]


def test_opt_in_recompute_answers_200(client: TestClient) -> None:
    r = client.post("/v1/gradients/net", json=body(recompute=True))
    assert r.status_code == 200, r.text
    out = r.json()
    assert any(d["code"] == "recomputed_forward_value" for d in out["diagnostics"])
    assert out["grad_map"]["w"] == "w_grad"


def test_recomputed_gradient_matches_finite_differences() -> None:
    opts = VerifyOptions(
        inputs=[
            InputSpec("x", random=RandomSpec([4, 3], seed=1)),
            InputSpec("w", random=RandomSpec([5, 3], seed=2)),
            InputSpec("b", random=RandomSpec([5], seed=3)),
        ],
        mode="full",
    )
    result = verify_net(bug_case_1(), ["loss"], opts, recompute=True)
    assert result.report.passed, result.report
