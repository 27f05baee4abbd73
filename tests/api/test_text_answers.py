"""Answers in protobuf text format: ``Accept: text/x-protobuf`` (or ``text/x-pbtxt``,
``text/*``) gets the answer message as text format, the same message the binary answer
holds; ``*/*`` still means JSON, and problems stay ``application/problem+json``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from google.protobuf import text_format

from api_schemas import caffe2_pb2, netgrad_pb2
from app.main import create_app
from app.settings import Settings
from tests.api.helpers import assert_problem, do_request

TEXT = "text/x-protobuf; charset=utf-8"


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(workers=1)), raise_server_exceptions=False) as c:
        yield c


def _net_request() -> dict[str, Any]:
    return {"net": {"name": "mlp", "op": [
        {"type": "FC", "input": ["x", "w", "b"], "output": ["h"]},
        {"type": "Relu", "input": ["h"], "output": ["h"]},
        {"type": "SumElements", "input": ["h"], "output": ["loss"]}]},
        "ys": ["loss"]}


_INPUTS = [{"blob": "x", "random": {"shape": [2, 3]}}, {"blob": "w", "random": {"shape": [4, 3]}},
           {"blob": "b", "random": {"shape": [4]}}]


def _both(client: TestClient, path: str, body: dict[str, Any], cls: Any,
          accept: str = "text/x-protobuf") -> tuple[Any, Any, bytes]:
    """The answer asked for as text format and as binary, both parsed, and the text."""
    r = client.post(path, json=body, headers={"accept": accept})
    assert r.status_code == 200, r.text
    named = accept if accept in ("text/x-protobuf", "text/x-pbtxt") else "text/x-protobuf"
    assert r.headers["content-type"] == f"{named}; charset=utf-8", r.headers
    as_text = text_format.Parse(r.content.decode("utf-8"), cls())
    b = client.post(path, json=body, headers={"accept": "application/x-protobuf"})
    assert b.status_code == 200, b.text
    return as_text, cls.FromString(b.content), r.content


@pytest.mark.parametrize("accept", ["text/x-protobuf", "text/x-pbtxt", "text/*",
                                    "application/json;q=0.5, text/x-protobuf"])
def test_a_net_gradient_in_text_format_is_the_binary_answer(client: TestClient,
                                                             accept: str) -> None:
    text, binary, raw = _both(client, "/v1/gradients/net", _net_request(),
                              netgrad_pb2.NetGradientResponse, accept)
    assert text == binary
    assert [op.type for op in text.grad_ops] == ["ConstantFill", "SumElementsGradient",
                                                 "ReluGradient", "FCGradient"]
    assert b'grad_ops {\n  input: "loss"' in raw


def test_an_op_gradient_in_text_format_is_the_binary_answer(client: TestClient) -> None:
    text, binary, raw = _both(client, "/v1/gradients/op", do_request(),
                              netgrad_pb2.OpGradientResponse)
    assert text == binary and text.grad_ops[0].type == "Do"
    assert b'g_input {\n  dense: "outer_X_grad"\n}' in raw


def test_a_verify_answer_in_text_format_is_the_binary_answer(client: TestClient) -> None:
    body = {**_net_request(), "mode": "fast", "seed": 3, "inputs": _INPUTS}
    text, binary, raw = _both(client, "/v1/verify", body, netgrad_pb2.VerifyResponse)
    assert text == binary and text.report.passed
    assert b"passed: true" in raw


def test_a_job_status_in_text_format(client: TestClient) -> None:
    r = client.post("/v1/jobs", json={"verify": {**_net_request(), "inputs": _INPUTS}})
    assert r.status_code == 202, r.text
    where = r.headers["location"]
    deadline = time.monotonic() + 120
    while True:
        s = client.get(where, headers={"accept": "text/x-protobuf"})
        assert s.status_code == 200 and s.headers["content-type"] == TEXT, s.text
        status = text_format.Parse(s.text, netgrad_pb2.JobStatus())
        if status.status in ("done", "failed") or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert status.status == "done" and status.verify.report.passed, s.text


def test_the_same_request_gives_the_same_text_bytes(client: TestClient) -> None:
    answers = {client.post("/v1/gradients/net", json=_net_request(),
                           headers={"accept": "text/x-protobuf"}).content for _ in range(3)}
    assert len(answers) == 1


@pytest.mark.parametrize(("accept", "media"), [
    ("*/*", "application/json"),
    ("application/*", "application/json"),
    ("text/x-protobuf;q=0.5, application/json", "application/json"),
    ("text/x-protobuf;q=0.5, application/x-protobuf;q=0.5", "application/x-protobuf"),
    ("text/x-protobuf;q=0, text/*", "text/x-pbtxt; charset=utf-8"),
])
def test_text_format_is_chosen_only_where_accept_prefers_it(client: TestClient, accept: str,
                                                            media: str) -> None:
    r = client.post("/v1/gradients/net", json=_net_request(), headers={"accept": accept})
    assert r.status_code == 200 and r.headers["content-type"] == media, r.headers


def test_a_problem_stays_problem_json_when_text_is_asked_for(client: TestClient) -> None:
    r = client.post("/v1/gradients/net", json={"net": {"op": []}, "ys": ["nope"]},
                    headers={"accept": "text/x-protobuf"})
    problem = assert_problem(r, 400, "invalid_request")
    assert [e["code"] for e in problem["errors"]] == ["unknown_ys_blob"], problem


def test_a_406_names_text_format_among_the_types(client: TestClient) -> None:
    r = client.post("/v1/gradients/net", json=_net_request(), headers={"accept": "text/html"})
    assert "text/x-protobuf" in assert_problem(r, 406, "not_acceptable")["detail"]


def test_an_answer_that_cannot_be_json_falls_back_to_accepted_text_format(
        client: TestClient) -> None:
    req = netgrad_pb2.NetGradientRequest(return_net=True)
    op = caffe2_pb2.OperatorDef(type="Relu", input=["x"], output=["y"])
    op.arg.add(name="blob", s=b"\xff\xfe")  # (bytes JSON cannot show as text)
    req.net.op.append(op)
    req.ys.add(blob="y")
    r = client.post("/v1/gradients/net", content=req.SerializeToString(),
                    headers={"content-type": "application/x-protobuf",
                             "accept": "application/json, text/x-protobuf;q=0.1"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == TEXT and r.headers["vary"] == "Accept"
    assert b'\\377\\376' in r.content  # (escaped: the text itself is UTF-8)
    resp = text_format.Parse(r.content.decode("utf-8"), netgrad_pb2.NetGradientResponse())
    assert resp.grad_ops[1].arg[0].s == b"\xff\xfe" and resp.net.op[0].arg[0].s == b"\xff\xfe"


@pytest.mark.parametrize(("accept", "media"), [
    ("application/json, text/*;q=0.1", TEXT),
    ("application/json, text/x-pbtxt;q=0.1, application/x-protobuf;q=0.9",
     "application/x-protobuf"),
    ("application/json, application/x-protobuf;q=0.1, text/x-protobuf;q=0.9", TEXT),
])
def test_the_fallback_from_json_takes_the_highest_q(client: TestClient, accept: str,
                                                    media: str) -> None:
    """(second review) A wildcard text range counts, and q decides, not the order named."""
    req = netgrad_pb2.NetGradientRequest()
    op = caffe2_pb2.OperatorDef(type="Relu", input=["x"], output=["y"])
    op.arg.add(name="blob", s=b"\xff")
    req.net.op.append(op)
    req.ys.add(blob="y")
    r = client.post("/v1/gradients/net", content=req.SerializeToString(),
                    headers={"content-type": "application/x-protobuf", "accept": accept})
    assert r.status_code == 200 and r.headers["content-type"] == media, r.headers
