"""Issue 12: weights from a Caffe2 init_net (/v1/verify, /v1/run) and missing-input errors."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from api_schemas import caffe2_pb2, netgrad_pb2
from app.api import docs
from app.main import create_app
from app.settings import Settings
from app.ui.examples import SQUEEZENET_VERIFY, random_init_net, weight_shapes
from core.proto import codec
from tests.api.helpers import PB, assert_problem

PB_HEADERS = {"Content-Type": PB, "Accept": PB}
ZOO_NET = "caffe2_test_assets__squeeze_predict_net.pb"


@pytest.fixture(scope="module")
def pool_client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(workers=1, job_timeout_s=60.0)),
                    raise_server_exceptions=False) as c:
        yield c


@pytest.fixture(scope="module")
def zoo_net(shared_dir: Path) -> caffe2_pb2.NetDef:
    return codec.from_binary((shared_dir / "realnets" / ZOO_NET).read_bytes(), caffe2_pb2.NetDef)


def squeezenet_verify_request(net: caffe2_pb2.NetDef) -> netgrad_pb2.VerifyRequest:
    """The model-zoo SqueezeNet with a random init_net (GivenTensorFill, right shapes)."""
    req = netgrad_pb2.VerifyRequest(net=net, init_net=random_init_net(weight_shapes(net)))
    for y in SQUEEZENET_VERIFY["ys"]:
        req.ys.add(blob=y)
    req.verify.inputs.add(blob="data").random.shape[:] = SQUEEZENET_VERIFY["data_shape"]
    req.verify.inputs[0].random.seed = 11
    req.verify.mode = "fast"
    req.verify.check[:] = SQUEEZENET_VERIFY["check"]
    req.verify.passes = SQUEEZENET_VERIFY["passes"]
    req.verify.tolerances.atol = SQUEEZENET_VERIFY["atol"]
    req.verify.tolerances.rtol = SQUEEZENET_VERIFY["rtol"]
    return req


def test_squeezenet_with_init_net_verifies(pool_client: TestClient,
                                            zoo_net: caffe2_pb2.NetDef) -> None:
    req = squeezenet_verify_request(zoo_net)
    r = pool_client.post("/v1/verify", content=req.SerializeToString(), headers=PB_HEADERS)
    assert r.status_code == 200, r.text
    res = netgrad_pb2.VerifyResponse.FromString(r.content)
    assert [b.blob for b in res.report.blobs] == SQUEEZENET_VERIFY["check"]
    assert all(b.passed for b in res.report.blobs), res.report
    assert res.report.passed


def test_run_feeds_the_init_net_blobs_and_inputs_win() -> None:
    init = random_init_net({"fc_w": [3, 4], "fc_b": [3]}, seed=5)
    expected_w = np.asarray(init.op[0].arg[1].floats, dtype=np.float32)
    req = {
        "net": docs.MLP_NET,
        "init_net": codec.to_json_obj(init),
        "inputs": [{"blob": "data", "random": {"shape": [2, 4], "seed": 1}},
                   {"blob": "fc_b", "tensor": {"shape": [3], "data": [1.0, 2.0, 3.0]}}],
        "fetch": ["fc_w", "fc_b", "prob"],
    }
    with TestClient(create_app(Settings(workers=1)), raise_server_exceptions=False) as c:
        r = c.post("/v1/run", json=req)
    assert r.status_code == 200, r.text
    out = r.json()["outputs"]
    assert out["fc_w"]["dtype"] == "float32"
    np.testing.assert_array_equal(np.asarray(out["fc_w"]["data"], dtype=np.float32), expected_w)
    assert out["fc_b"]["data"] == [1.0, 2.0, 3.0]  # the explicit input wins
    assert out["prob"]["shape"] == [2, 3]


def test_verify_without_inputs_names_every_missing_blob(pool_client: TestClient) -> None:
    req = {"net": docs.MLP_NET, "ys": ["prob"]}
    body = assert_problem(pool_client.post("/v1/verify", json=req), 400)
    missing = [e for e in body["errors"] if e["code"] == "missing_input"]
    assert [e["blobs"] for e in missing] == [["data"], ["fc_w"], ["fc_b"]]
    for e in missing:
        assert e["op_index"] == 0 and e["op_type"] == "FC" and e["path"] == "op[0]:FC"
        assert "`inputs`" in e["message"] and "`init_net`" in e["message"]
        assert '"random"' in e["message"]
    assert "'data', 'fc_w', 'fc_b'" in body["detail"]


def test_run_missing_input_is_named_with_partial_init_net(pool_client: TestClient) -> None:
    init = random_init_net({"fc_w": [3, 4]}, seed=5)
    req = {"net": docs.MLP_NET, "init_net": codec.to_json_obj(init), "fetch": ["prob"],
           "inputs": [{"blob": "data", "random": {"shape": [2, 4]}}]}
    body = assert_problem(pool_client.post("/v1/run", json=req), 400)
    assert [e["blobs"] for e in body["errors"]] == [["fc_b"]]


def test_init_net_problems_carry_the_init_net_path(pool_client: TestClient) -> None:
    init = {"op": [{"type": "Relu", "input": ["nowhere"], "output": ["fc_w"]}]}
    req = copy.deepcopy(docs.VERIFY_REQUEST)
    req["init_net"] = init
    body = assert_problem(pool_client.post("/v1/verify", json=req), 400)
    assert body["errors"][0]["path"] == "init_net/op[0]:Relu"
    assert body["errors"][0]["blobs"] == ["nowhere"]


def test_control_flow_workspaces_are_not_reported_missing(pool_client: TestClient) -> None:
    r = pool_client.post("/v1/run", json=docs.RUN_REQUEST)
    assert r.status_code == 200, r.text
