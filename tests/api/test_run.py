"""POST /v1/run: run a net (and its generated gradient) in a worker process, fetch blobs."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api_schemas import caffe2_pb2, netgrad_pb2
from app.api import docs
from app.main import create_app
from app.settings import Settings, get_settings
from core.proto import codec
from tests.api.helpers import PB, assert_problem, still_serving
from tests.conformance.cases import if_tutorial_net

PB_HEADERS = {"Content-Type": PB, "Accept": PB}


@pytest.fixture(scope="module")
def pool_client() -> Iterator[TestClient]:
    settings = Settings(workers=1, job_timeout_s=20.0)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def _if_request(x: float) -> dict[str, Any]:
    req = copy.deepcopy(docs.RUN_REQUEST)
    req["inputs"][0]["tensor"]["data"] = [x]
    return req


def _if_request_pb(x: float) -> netgrad_pb2.RunRequest:
    msg = netgrad_pb2.RunRequest()
    msg.net.CopyFrom(codec.from_json_obj(docs.IF_TUTORIAL_NET, caffe2_pb2.NetDef))
    i = msg.inputs.add(blob="x")
    i.tensor.dtype = "float32"
    i.tensor.data.append(x)
    msg.fetch.extend(["z", "y_grad"])
    msg.ys.add(blob="z")
    return msg


def _values(body: dict[str, Any], blob: str) -> list[Any]:
    return list(body["outputs"][blob]["data"])


def _without_empty_op_names(net: caffe2_pb2.NetDef) -> caffe2_pb2.NetDef:
    """The net with every explicitly empty ``OperatorDef.name`` unset (sub-nets included)."""
    for op in net.op:
        if op.HasField("name") and not op.name:
            op.ClearField("name")
        for arg in op.arg:
            if arg.HasField("n"):
                _without_empty_op_names(arg.n)
    return net


def test_openapi_example_is_the_if_tutorial_of_the_conformance_cases() -> None:
    net = codec.from_json_obj(docs.RUN_REQUEST["net"], caffe2_pb2.NetDef)
    assert net == _without_empty_op_names(if_tutorial_net())
    assert docs.RUN_REQUEST["ys"] == ["z"] and docs.RUN_REQUEST["fetch"] == ["z", "y_grad"]


def test_openapi_example_runs(pool_client: TestClient) -> None:
    spec = pool_client.get("/openapi.json").json()
    content = spec["paths"]["/v1/run"]["post"]["requestBody"]["content"]
    assert set(content) == {"application/json"}  # binary: described, not offered to Swagger
    for ex in content["application/json"]["examples"].values():
        r = pool_client.post("/v1/run", json=ex["value"])
        assert r.status_code == 200, r.text
        assert _values(r.json(), "y_grad") == [8.0]
    schemas = spec["components"]["schemas"]
    assert {"RunRequest", "RunResponse", "Tensor"} <= set(schemas)


@pytest.mark.parametrize(("x", "z", "y_grad"), [(0.5, 16.0, 8.0), (-0.5, 64.0, 48.0)])
def test_if_tutorial_gradient_values_json(
    pool_client: TestClient, x: float, z: float, y_grad: float
) -> None:
    """control-flow-cases §9: z = y**2 (x > 0) or y**3, y = 4: dz/dy = 2·4 or 3·4²."""
    r = pool_client.post("/v1/run", json=_if_request(x))
    assert r.status_code == 200, r.text
    body = r.json()
    assert list(body) == ["outputs", "grad_ops", "grad_map", "diagnostics"]
    assert list(body["outputs"]) == ["z", "y_grad"]
    assert body["outputs"]["z"] == {"shape": [1], "dtype": "float32", "data": [z]}
    assert body["outputs"]["y_grad"] == {"shape": [1], "dtype": "float32", "data": [y_grad]}
    assert body["grad_map"] == {"y": "y_grad", "z": "z_autogen_grad"}
    seed = body["grad_ops"][0]
    assert seed["type"] == "ConstantFill" and seed["output"] == ["z_autogen_grad"]
    assert seed["arg"] == [{"name": "value", "f": 1.0}]
    assert [op["type"] for op in body["grad_ops"]] == ["ConstantFill", "If"]
    # The same ops as /v1/gradients/net generates for the net.
    gen = pool_client.post(
        "/v1/gradients/net", json={"net": docs.IF_TUTORIAL_NET, "ys": ["z"]}
    ).json()
    assert body["grad_ops"] == gen["grad_ops"] and body["grad_map"] == gen["grad_map"]


@pytest.mark.parametrize(("x", "z", "y_grad"), [(0.5, 16.0, 8.0), (-0.5, 64.0, 48.0)])
def test_if_tutorial_gradient_values_binary(
    pool_client: TestClient, x: float, z: float, y_grad: float
) -> None:
    msg = _if_request_pb(x)
    r = pool_client.post("/v1/run", content=msg.SerializeToString(), headers=PB_HEADERS)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == PB
    out = codec.from_binary(r.content, netgrad_pb2.RunResponse)
    got = {v.blob: (list(v.tensor.shape), v.tensor.dtype, list(v.tensor.data)) for v in out.outputs}
    assert list(got) == ["z", "y_grad"]
    assert got == {"z": ([1], "float32", [z]), "y_grad": ([1], "float32", [y_grad])}
    as_json = pool_client.post("/v1/run", json=_if_request(x)).json()
    assert [codec.to_json_obj(op) for op in out.grad_ops] == as_json["grad_ops"]
    assert [(e.blob, e.gradient.dense) for e in out.grad_map] == list(
        as_json["grad_map"].items()
    )


def test_forward_only_run_fetches_forward_blobs(pool_client: TestClient) -> None:
    req = _if_request(0.5)
    del req["ys"]
    req["fetch"] = ["x_gt_zero", "z", "x", "one"]
    r = pool_client.post("/v1/run", json=req)
    assert r.status_code == 200, r.text
    body = r.json()
    assert list(body) == ["outputs", "diagnostics"]  # no grad_ops / grad_map without ys
    assert body["outputs"] == {
        "x_gt_zero": {"shape": [1], "dtype": "bool", "data": [1]},
        "z": {"shape": [1], "dtype": "float32", "data": [16.0]},
        "x": {"shape": [], "dtype": "float32", "data": [0.5]},
        "one": {"shape": [1], "dtype": "float32", "data": [1.0]},
    }
    # Without ys no gradient op runs, so there is no y_grad to fetch.
    req["fetch"] = ["y_grad"]
    body = assert_problem(pool_client.post("/v1/run", json=req), 422)
    assert body["errors"][0]["code"] == "fetch_not_produced"
    assert body["errors"][0]["blobs"] == ["y_grad"]


def test_forward_only_binary_has_no_gradient_fields(pool_client: TestClient) -> None:
    msg = _if_request_pb(-0.5)
    del msg.ys[:]
    del msg.fetch[:]
    msg.fetch.append("z")
    r = pool_client.post("/v1/run", content=msg.SerializeToString(), headers=PB_HEADERS)
    assert r.status_code == 200, r.text
    out = codec.from_binary(r.content, netgrad_pb2.RunResponse)
    assert [(v.blob, list(v.tensor.data)) for v in out.outputs] == [("z", [64.0])]
    assert not out.grad_ops and not out.grad_map


def test_unknown_fetch_names_are_4xx_naming_each_blob(pool_client: TestClient) -> None:
    req = _if_request(0.5)
    req["fetch"] = ["z", "no_such_blob", "tutorial_if/workspace_if_then"]
    r = pool_client.post("/v1/run", json=req)
    body = assert_problem(r, 422)
    assert [(e["code"], e["blobs"], e["path"]) for e in body["errors"]] == [
        ("fetch_not_produced", ["no_such_blob"], "fetch[1]"),
        ("fetch_not_produced", ["tutorial_if/workspace_if_then"], "fetch[2]"),
    ]
    assert "no_such_blob" in body["detail"]
    req["fetch"] = ["z", "z"]
    body = assert_problem(pool_client.post("/v1/run", json=req), 400)
    assert body["errors"][0]["blobs"] == ["z"]
    still_serving(pool_client)


def test_run_without_workers_is_refused(client: TestClient) -> None:
    assert_problem(client.post("/v1/run", json=_if_request(0.5)), 503, "run_unavailable")
    r = client.post("/v1/run", content=_if_request_pb(0.5).SerializeToString(), headers=PB_HEADERS)
    assert_problem(r, 503, "run_unavailable")


def _fill_request(n: int, m: int) -> dict[str, Any]:
    fill = {
        "type": "ConstantFill",
        "output": ["big"],
        "arg": [{"name": "shape", "ints": [n, m]}, {"name": "value", "f": 2.0}],
    }
    return {"net": {"op": [fill]}, "fetch": ["big"]}


def test_fetch_cap_default_is_a_million_elements(pool_client: TestClient) -> None:
    r = pool_client.post("/v1/run", json=_fill_request(1000, 1001))
    body = assert_problem(r, 422)
    assert body["errors"][0]["code"] == "fetch_too_large"
    assert body["errors"][0]["blobs"] == ["big"]
    assert "1001000" in body["detail"] and "1000000" in body["detail"]


def test_fetch_cap_counts_all_fetched_blobs(pool_client: TestClient) -> None:
    app: Any = pool_client.app
    small = Settings(workers=1, job_timeout_s=20.0, max_fetch_elements=3)
    before = app.dependency_overrides[get_settings]
    app.dependency_overrides[get_settings] = lambda: small
    try:
        r = pool_client.post("/v1/run", json=_fill_request(1, 3))
        assert r.status_code == 200, r.text
        assert r.json()["outputs"]["big"] == {
            "shape": [1, 3], "dtype": "float32", "data": [2.0, 2.0, 2.0]
        }
        req = _if_request(0.5)
        req["fetch"] = ["z", "y_grad", "x", "one"]  # 1 + 1 + 1 + 1 elements
        body = assert_problem(pool_client.post("/v1/run", json=req), 422)
        assert body["errors"][0]["code"] == "fetch_too_large"
        assert body["errors"][0]["blobs"] == ["z", "y_grad", "x", "one"]
    finally:
        app.dependency_overrides[get_settings] = before
    assert pool_client.post("/v1/run", json=req).status_code == 200


def test_bad_feeds_and_refused_ops_are_4xx(pool_client: TestClient) -> None:
    req = _if_request(0.5)
    req["inputs"][0]["tensor"] = {"shape": [2], "dtype": "float32", "data": [0.5]}
    assert_problem(pool_client.post("/v1/run", json=req), 400)
    req = _if_request(0.5)
    req["inputs"][0]["tensor"]["dtype"] = "complex64"
    assert_problem(pool_client.post("/v1/run", json=req), 400)
    msg = _if_request_pb(0.5)
    msg.inputs[0].tensor.dtype = "float16"  # the binary path reaches the shared validation
    r = pool_client.post("/v1/run", content=msg.SerializeToString(), headers=PB_HEADERS)
    body = assert_problem(r, 400)
    assert "float16" in body["detail"]
    req = _if_request(0.5)
    del req["ys"]
    req["skip"] = 1
    assert_problem(pool_client.post("/v1/run", json=req), 400)
    python_net = {"op": [{"type": "Python", "input": ["x"], "output": ["y"]}]}
    python_req = {"net": python_net, "inputs": _if_request(0.5)["inputs"], "fetch": ["y"]}
    r = pool_client.post("/v1/run", json=python_req)
    body = assert_problem(r, 422)
    assert body["errors"][0]["code"] == "op_refused"
    still_serving(pool_client)


def test_non_finite_values_are_spelled_as_strings(pool_client: TestClient) -> None:
    net = {"op": [{"type": "Log", "input": ["a"], "output": ["b"]}]}
    a = {"blob": "a", "tensor": {"shape": [4], "dtype": "float64", "data": [0, -1, 1, 2]}}
    req = {"net": net, "inputs": [a], "fetch": ["b"]}
    r = pool_client.post("/v1/run", json=req)
    assert r.status_code == 200, r.text
    assert r.json()["outputs"]["b"]["data"] == ["-Infinity", "NaN", 0.0, math.log(2.0)]
    r = pool_client.post(
        "/v1/run",
        content=_pb_of(req).SerializeToString(),
        headers=PB_HEADERS,
    )
    data = list(codec.from_binary(r.content, netgrad_pb2.RunResponse).outputs[0].tensor.data)
    assert data[0] == -math.inf and math.isnan(data[1]) and data[2:] == [0.0, math.log(2.0)]


def _pb_of(req: dict[str, Any]) -> netgrad_pb2.RunRequest:
    msg = netgrad_pb2.RunRequest()
    msg.net.CopyFrom(codec.from_json_obj(req["net"], caffe2_pb2.NetDef))
    for spec in req.get("inputs", []):
        i = msg.inputs.add(blob=spec["blob"])
        if "tensor" in spec:
            i.tensor.shape.extend(spec["tensor"]["shape"])
            i.tensor.dtype = spec["tensor"]["dtype"]
            i.tensor.data.extend(spec["tensor"]["data"])
        else:
            i.random.shape.extend(spec["random"]["shape"])
            i.random.dtype = spec["random"]["dtype"]
            i.random.seed = spec["random"]["seed"]
    msg.fetch.extend(req["fetch"])
    for y in req.get("ys", []):
        msg.ys.add(blob=y)
    return msg


def test_same_request_gives_the_same_bytes(pool_client: TestClient) -> None:
    net = {
        "op": [
            {"type": "Tanh", "input": ["w"], "output": ["t"]},
            {"type": "Mul", "input": ["t", "w"], "output": ["y"]},
        ]
    }
    w = {"blob": "w", "random": {"shape": [3, 5], "dtype": "float64", "seed": 7}}
    req = {"net": net, "inputs": [w], "fetch": ["y", "w_grad", "t"], "ys": ["y"]}
    first = pool_client.post("/v1/run", json=req)
    assert first.status_code == 200, first.text
    assert pool_client.post("/v1/run", json=req).content == first.content
    pb = _pb_of(req).SerializeToString()
    b1 = pool_client.post("/v1/run", content=pb, headers=PB_HEADERS).content
    assert pool_client.post("/v1/run", content=pb, headers=PB_HEADERS).content == b1
    # JSON and binary carry the same numbers; w_grad = tanh(w) + w·(1 − tanh(w)²).
    body = first.json()
    out = codec.from_binary(b1, netgrad_pb2.RunResponse)
    assert [list(v.tensor.data) for v in out.outputs] == [
        body["outputs"][k]["data"] for k in ("y", "w_grad", "t")
    ]
    t = body["outputs"]["t"]["data"]
    w_vals = [math.atanh(v) for v in t]
    expected = [math.tanh(x) + x * (1 - math.tanh(x) ** 2) for x in w_vals]
    assert body["outputs"]["w_grad"]["data"] == pytest.approx(expected, rel=1e-9)
