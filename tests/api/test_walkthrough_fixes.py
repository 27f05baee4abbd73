"""Small fixes from the new-user walkthrough: compressed bodies, text-format wording, hints
only where they apply, no ``.;`` in messages, dtype aliases listed, /v1/operators' OpenAPI."""

from __future__ import annotations

import copy
import gzip
import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api_schemas import caffe2_pb2
from app.api import docs
from app.main import create_app
from app.settings import Settings
from core.proto import codec
from tests.api.helpers import assert_problem


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(workers=1)), raise_server_exceptions=False) as c:
        yield c


def test_gzip_body_is_415_asking_for_identity(client: TestClient) -> None:
    r = client.post("/v1/gradients/net", content=gzip.compress(json.dumps(
        docs.NET_REQUEST).encode()), headers={"Content-Type": "application/json",
                                              "Content-Encoding": "gzip"})
    body = assert_problem(r, 415, "unsupported_media_type")
    assert "Content-Encoding" in body["detail"] and "identity" in body["detail"]
    assert "UTF-8" not in body["detail"]
    plain = client.post("/v1/gradients/net", json=docs.NET_REQUEST,
                        headers={"Content-Encoding": "identity"})
    assert plain.status_code == 200


def test_undecodable_text_format_body_is_not_called_json(client: TestClient) -> None:
    r = client.post("/v1/gradients/net", content=bytes(range(128, 256)),
                    headers={"Content-Type": "text/x-protobuf"})
    body = assert_problem(r, 400)
    assert "text-format" in body["detail"] and "JSON" not in body["detail"]


def test_partial_gradient_hint_only_on_net_routes(client: TestClient) -> None:
    op = {"type": "ArgMax", "input": ["x"], "output": ["m"]}
    r = client.post("/v1/gradients/op", json={"op": op, "g_output": ["m_grad"]})
    assert r.status_code in (400, 422), r.text
    assert "`skip`" not in r.text
    net = {"op": [op, {"type": "Relu", "input": ["m"], "output": ["y"]}]}
    r = client.post("/v1/gradients/net", json={"net": net, "ys": ["y"]})
    assert "`skip`" in r.text


def _bare_pbtxt(c: TestClient) -> Any:
    return c.post("/v1/gradients/net", content='op { type: "Relu" input: "x" output: "y" }',
                  headers={"Content-Type": "text/x-protobuf"})


def _bare_binary(c: TestClient) -> Any:
    net = codec.from_json_obj(docs.MLP_NET, caffe2_pb2.NetDef)
    return c.post("/v1/gradients/net", content=net.SerializeToString(),
                  headers={"Content-Type": "application/protobuf"})


@pytest.mark.parametrize("call", [
    _bare_pbtxt,
    _bare_binary,
    lambda c: c.post("/v1/verify", json={**docs.VERIFY_REQUEST, "atol": 1e-3}),
    lambda c: c.post("/v1/gradients/op", json={"op": docs.DO_OP, "gOutputs": []}),
    lambda c: c.post("/v1/gradients/net", json=docs.MLP_NET),
    lambda c: c.post("/v1/gradients/net", json={"net": docs.MLP_NET, "ys": ["nope"]}),
], ids=["bare pbtxt", "bare binary", "misplaced atol", "camel plural", "bare json",
        "unknown ys"])
def test_hints_never_double_the_punctuation(client: TestClient, call: Any) -> None:
    body = assert_problem(call(client), 400)
    assert ";" in body["detail"]  # a hint was appended
    for text in [body["detail"], *(e["message"] for e in body["errors"])]:
        assert ".;" not in text and ";;" not in text, text


def _verify_with_dtype(client: TestClient, dtype: str) -> Any:
    req = copy.deepcopy(docs.VERIFY_REQUEST)
    req["inputs"][0]["random"]["dtype"] = dtype
    req["inputs"][1]["random"]["dtype"] = dtype
    req["inputs"][2]["tensor"]["dtype"] = dtype
    req["mode"] = "fast"
    return client.post("/v1/verify", json=req)


def test_dtype_aliases_work_and_are_listed(client: TestClient) -> None:
    assert _verify_with_dtype(client, "float").status_code == 200
    assert _verify_with_dtype(client, "double").status_code == 200
    body = assert_problem(_verify_with_dtype(client, "float16"), 400)
    (first, *_) = body["errors"]
    assert first["path"] == "inputs[0].random.dtype"
    for name in ("float32", "float64", "int32", "int64", "bool", "float", "double"):
        assert name in body["detail"], name


def test_operators_openapi_documents_its_400_and_no_429(client: TestClient) -> None:
    responses = client.get("/openapi.json").json()["paths"]["/v1/operators"]["get"][
        "responses"]
    assert "400" in responses and "429" not in responses
    example = responses["400"]["content"]["application/problem+json"]["examples"]
    assert "unknown status" in next(iter(example.values()))["value"]["detail"]
    assert_problem(client.get("/v1/operators?status=differentiable"), 400)
