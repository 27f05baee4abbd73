"""POST /v1/verify and ``verify`` on /v1/gradients/net: numeric checks run in worker processes."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from api_schemas import caffe2_pb2, netgrad_pb2
from app.api import docs
from app.main import create_app
from app.settings import Settings
from core.control.lowering import add_while_op
from core.proto import codec
from core.registry import make_arg, make_op
from tests.api.helpers import PB, assert_problem, still_serving
from tests.api.live_server import live_server


@pytest.fixture(scope="module")
def pool_client() -> Iterator[TestClient]:
    settings = Settings(workers=1, job_timeout_s=20.0)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def _verify_request() -> dict[str, Any]:
    return copy.deepcopy(docs.VERIFY_REQUEST)


def test_mlp_passes_in_full_mode(pool_client: TestClient) -> None:
    r = pool_client.post("/v1/verify", json=_verify_request())
    assert r.status_code == 200, r.text
    body = r.json()
    report = body["report"]
    assert report["passed"] is True and report["mode"] == "full"
    assert [b["blob"] for b in report["blobs"]] == ["data", "fc_w", "fc_b"]
    for b in report["blobs"]:
        assert b["passed"] and b["gradient"] == f"{b['blob']}_grad"
        assert b["max_abs_error"] <= 1e-6
    assert {"FCGradient", "ReluGradient", "SoftmaxGradient"} <= {
        op["type"] for op in body["grad_ops"]
    }
    assert body["diagnostics"][-1]["code"] == "verify_passed"


def test_tampered_gradient_is_caught_and_named(pool_client: TestClient) -> None:
    good = pool_client.post("/v1/verify", json=_verify_request()).json()
    tampered = good["grad_ops"] + [
        {
            "type": "Scale",
            "input": ["fc_w_grad"],
            "output": ["fc_w_grad"],
            "arg": [{"name": "scale", "f": 2.0}],
        }
    ]
    r = pool_client.post("/v1/verify", json={**_verify_request(), "grad_ops": tampered})
    assert r.status_code == 200, r.text
    body = r.json()
    verdict = {b["blob"]: b["passed"] for b in body["report"]["blobs"]}
    assert verdict == {"data": True, "fc_w": False, "fc_b": True}
    assert body["report"]["passed"] is False
    assert body["diagnostics"][-1]["code"] == "verify_failed"
    assert body["diagnostics"][-1]["blobs"] == ["fc_w"]
    assert body["grad_ops"] == tampered


def test_binary_verify_matches_json(pool_client: TestClient) -> None:
    j = pool_client.post("/v1/verify", json=_verify_request()).json()
    req = netgrad_pb2.VerifyRequest()
    req.net.CopyFrom(codec.from_json_obj(docs.MLP_NET, caffe2_pb2.NetDef))
    req.ys.add(blob="prob")
    v = req.verify
    v.mode = "full"
    v.tolerances.step, v.tolerances.atol, v.tolerances.rtol = 1e-6, 1e-6, 1e-4
    for spec in docs.VERIFY_REQUEST["inputs"]:
        i = v.inputs.add(blob=spec["blob"])
        if "random" in spec:
            rs = spec["random"]
            i.random.shape.extend(rs["shape"])
            i.random.dtype = rs["dtype"]
            i.random.distribution = rs.get("distribution", "normal")
            i.random.seed = rs["seed"]
        else:
            i.tensor.shape.extend(spec["tensor"]["shape"])
            i.tensor.dtype = spec["tensor"]["dtype"]
            i.tensor.data.extend(spec["tensor"]["data"])
    r = pool_client.post(
        "/v1/verify", content=req.SerializeToString(), headers={"Content-Type": PB, "Accept": PB}
    )
    assert r.status_code == 200, r.text
    msg = codec.from_binary(r.content, netgrad_pb2.VerifyResponse)
    assert msg.report.passed
    assert [b.blob for b in msg.report.blobs] == [b["blob"] for b in j["report"]["blobs"]]
    assert [b.max_abs_error for b in msg.report.blobs] == [
        b["max_abs_error"] for b in j["report"]["blobs"]
    ]
    assert [codec.to_json_obj(op) for op in msg.grad_ops] == j["grad_ops"]


def test_net_gradient_with_verify_attaches_the_report(pool_client: TestClient) -> None:
    vr = _verify_request()
    verify = {k: vr[k] for k in ("inputs", "mode", "tolerances")}
    r = pool_client.post("/v1/gradients/net", json={**docs.NET_REQUEST, "verify": verify})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["verify_report"]["passed"] is True
    assert body["diagnostics"][-1]["code"] == "verify_passed"
    plain = pool_client.post("/v1/gradients/net", json=docs.NET_REQUEST).json()
    assert body["grad_ops"] == plain["grad_ops"] and body["grad_map"] == plain["grad_map"]


def test_bad_inputs_are_4xx_and_the_pool_keeps_serving(pool_client: TestClient) -> None:
    req = _verify_request()
    req["inputs"][2]["tensor"]["data"] = [1.0]  # shape [3] needs 3 values
    assert_problem(pool_client.post("/v1/verify", json=req), 400)
    req = _verify_request()
    req["inputs"][0]["random"]["shape"] = [2, 5]  # FC expects 4 features
    r = pool_client.post("/v1/verify", json=req)
    assert 400 <= r.status_code < 500, r.text
    assert_problem(r, r.status_code)
    req = _verify_request()
    req["mode"] = "thorough"
    assert_problem(pool_client.post("/v1/verify", json=req), 400)
    still_serving(pool_client)
    assert pool_client.post("/v1/verify", json=_verify_request()).status_code == 200


def test_openapi_verify_example_runs(pool_client: TestClient) -> None:
    spec = pool_client.get("/openapi.json").json()
    content = spec["paths"]["/v1/verify"]["post"]["requestBody"]["content"]
    for ex in content["application/json"]["examples"].values():
        r = pool_client.post("/v1/verify", json=ex["value"])
        assert r.status_code == 200 and r.json()["report"]["passed"], r.text


def test_verify_without_workers_is_refused(client: TestClient) -> None:
    assert_problem(client.post("/v1/verify", json=_verify_request()), 503, "verify_unavailable")


def _infinite_while_request() -> dict[str, Any]:
    # cond is fed true and never written: the loop only ends by a job limit.
    body = caffe2_pb2.NetDef(name="body")
    body.op.append(make_op("Scale", ["x"], ["x"], [make_arg("scale", 1.0)]))
    net = caffe2_pb2.NetDef(name="forever")
    add_while_op(net, "cond", ["cond", "x"], body)
    return {
        "net": codec.to_json_obj(net),
        "ys": ["x"],
        "inputs": [
            {"blob": "cond", "tensor": {"shape": [], "dtype": "bool", "data": [1]}},
            {"blob": "x", "tensor": {"shape": [1], "dtype": "float64", "data": [0.5]}},
        ],
        "check": ["x"],
        "mode": "fast",
    }


def test_infinite_while_is_stopped_and_other_requests_succeed() -> None:
    limit = 2.0
    env = {
        "NETGRAD_WORKERS": "2",
        "NETGRAD_JOB_TIMEOUT_S": str(limit),
        "NETGRAD_JOB_MAX_ITERATIONS": str(10**12),
    }
    others: list[int] = []
    with live_server(env, timeout=60.0) as url:

        def other_requests() -> None:
            time.sleep(0.3)
            with httpx.Client(base_url=url, timeout=30.0) as c:
                others.append(c.post("/v1/verify", json=_verify_request()).status_code)
                others.append(c.post("/v1/gradients/op", json=docs.DO_REQUEST).status_code)

        t = threading.Thread(target=other_requests)
        t.start()
        r = httpx.post(url + "/v1/verify", json=_infinite_while_request(), timeout=60.0)
        t.join(timeout=60.0)
        body = assert_problem(r, 422)
        # Stopped by the wall-clock limit (not by the iteration cap, set out of reach).
        assert "wall-clock limit of 2.0 s" in body["detail"]
        assert others == [200, 200]
        assert httpx.get(url + "/healthz", timeout=5.0).status_code == 200
