"""Problems found before a body is a tree still name the field (stop 21).

A key given twice names the repeated field (every one, in body order), a byte that is not
UTF-8 names the field it stands in, and a fed tensor over the element limit names its
``shape``. The look for the path is bounded: a long prefix or a deep one names the byte only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.api import bodypaths
from app.main import create_app
from app.settings import Settings
from tests.api.helpers import assert_problem

JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(workers=1)), raise_server_exceptions=False) as c:
        yield c


def test_every_key_given_twice_is_named_in_body_order(client: TestClient) -> None:
    body = (b'{"net": {"op": [{"type": "Relu", "input": ["x"], "input": ["z"], "output": ["y"]},'
            b' {"type": "Relu", "type": "Sigmoid", "input": ["y"], "output": ["w"]}]},'
            b' "ys": ["w"], "ys": ["y"]}')
    problem = assert_problem(client.post("/v1/gradients/net", content=body, headers=JSON), 400)
    paths = [e["path"] for e in problem["errors"]]
    assert paths == ["net.op[0].input", "net.op[1].type", "ys"], problem
    assert all(e["code"] == "duplicate_key" for e in problem["errors"])
    assert "'type' twice" in problem["errors"][1]["message"]
    assert problem["detail"].startswith("keys are given twice in 3 places")


def test_a_top_level_key_given_twice_is_its_own_path(client: TestClient) -> None:
    body = b'{"net": {"op": []}, "net": {"op": []}, "ys": ["y"]}'
    problem = assert_problem(client.post("/v1/gradients/net", content=body, headers=JSON), 400)
    assert [e["path"] for e in problem["errors"]] == ["net"]
    assert "'net' twice" in problem["detail"]


@pytest.mark.parametrize(("body", "path"), [
    (b'{"net": {"op": [{"type": "Relu\xff", "input": ["x"], "output": ["y"]}]}, "ys": ["y"]}',
     "net.op[0].type"),
    (b'{"net": {"op": [{"type": "Relu", "input": ["x", "\xc3("], "output": ["y"]}]}}',
     "net.op[0].input[1]"),
    (b'{"net": {"op": [{"type": "Relu"}, {"ty\xffpe": "Relu"}]}}', "net.op[1]"),
    (b'{"net": {"name": "a \\" b \xff"}}', "net.name"),
])
def test_a_byte_that_is_not_utf8_names_its_field(
    client: TestClient, body: bytes, path: str
) -> None:
    problem = assert_problem(client.post("/v1/gradients/net", content=body, headers=JSON), 400)
    err = problem["errors"][0]
    assert err["code"] == "invalid_utf8" and err["path"] == path, err
    bad = body.index(b"\xff") if b"\xff" in body else body.index(b"\xc3(")
    assert f"byte {bad} in {path}:" in err["message"]


def test_a_bad_byte_after_a_long_prefix_names_the_byte_only(client: TestClient) -> None:
    pad = " " * (bodypaths.MAX_SCAN_CHARS + 10)
    body = ('{"net": {"op": []},' + pad + '"ys": ["').encode() + b"\xff\"]}"
    problem = assert_problem(client.post("/v1/gradients/net", content=body, headers=JSON), 400)
    err = problem["errors"][0]
    assert err["code"] == "invalid_utf8" and err["path"] is None
    bad = body.index(b"\xff")
    assert f"byte {bad}:" in err["message"]


def test_a_fed_tensor_over_the_element_limit_names_its_shape(client: TestClient) -> None:
    req = {"net": {"op": [{"type": "Relu", "input": ["x"], "output": ["y"]}]}, "fetch": ["y"],
           "inputs": [{"blob": "w", "tensor": {"shape": [1], "data": [1.0]}},
                      {"blob": "x", "random": {"shape": [100000, 100000]}}]}
    problem = assert_problem(client.post("/v1/run", json=req), 422)
    err = problem["errors"][0]
    assert err["code"] == "tensor_too_large"
    assert err["path"] == "inputs[1].random.shape" and err["blobs"] == ["x"], err


@pytest.mark.parametrize(("prefix", "path"), [
    ('{"a": [[1, 2], [3, "', "a[1][1]"),
    ('{"a": {"b": 1, "c": {"d', "a.c"),
    ('{"a": {"b": 1}, "c": [{}, {"e": "', "c[1].e"),
    ('{"k\\"ey": "', 'k"ey'),
    ('{"', None),
    ("[1, ", None),
    ('{"a": ' + "[" * (bodypaths.MAX_SCAN_DEPTH + 1), None),
])
def test_json_path_at(prefix: str, path: str | None) -> None:
    assert bodypaths.json_path_at(prefix) == path


def test_the_duplicate_walk_is_bounded_and_falls_back(client: TestClient) -> None:
    data = json.dumps([0.5] * (bodypaths.MAX_VISITS + 5))
    text = '{"inputs": [{"tensor": {"data": ' + data + '}}], "ys": 1, "ys": 2}'
    assert bodypaths.duplicate_key_problems(text) == []  # budget spent before `ys`
    problem = assert_problem(
        client.post("/v1/verify", content=text.encode(), headers=JSON), 400)
    assert problem["errors"][0]["code"] == "duplicate_key"
    assert "'ys' twice" in problem["detail"]


def _binary_request(name: str) -> bytes:
    from api_schemas import caffe2_pb2, netgrad_pb2

    req = netgrad_pb2.NetGradientRequest()
    req.net.name = name
    req.net.op.append(caffe2_pb2.OperatorDef(type="Relu", input=["x"], output=["y"]))
    req.ys.add(blob="y")
    return req.SerializeToString()


@pytest.mark.parametrize("name", ["short", "n" * 300])  # valid UTF-8, and not (length 0x80+)
def test_binary_protobuf_sent_as_json_says_which_content_type(
    client: TestClient, name: str
) -> None:
    data = _binary_request(name)
    problem = assert_problem(client.post("/v1/gradients/net", content=data, headers=JSON), 400)
    assert "looks like binary protobuf (a NetGradientRequest)" in problem["detail"], problem
    assert "application/x-protobuf" in problem["detail"]
    ok = client.post("/v1/gradients/net", content=data,
                     headers={"content-type": "application/x-protobuf"})
    assert ok.status_code == 200, ok.text


@pytest.mark.parametrize("body", [b'\n{"net": oops}', b"\n\n{", b'{"net": [}'])
def test_bad_json_is_not_taken_for_binary(client: TestClient, body: bytes) -> None:
    problem = assert_problem(client.post("/v1/gradients/net", content=body, headers=JSON), 400)
    assert problem["errors"][0]["code"] == "invalid_json"
    assert "binary protobuf" not in problem["detail"]


@pytest.mark.parametrize(("body", "path"), [
    (b'{"net": {"op": [{"type": "Relu", "input": ["x\\ud800"], "output": ["y"]}]},'
     b' "ys": ["y"]}', "net.op[0].input[0]"),
    (b'{"net": {"op": [{"type": "Relu", "input": ["x"], "output": ["y"], '
     b'"arg": [{"name": "a", "s": "\\uDC00"}]}]}, "ys": ["y"]}', "net.op[0].arg[0].s"),
    (b'{"net": {"op": [{"type": "Relu", "input": ["x"], "output": ["y"]}]},'
     b' "ys": ["y\\ud800"]}', "ys[0]"),
])
def test_a_lone_surrogate_is_named_where_it_stands(
    client: TestClient, body: bytes, path: str
) -> None:
    problem = assert_problem(client.post("/v1/gradients/net", content=body, headers=JSON), 400)
    err = problem["errors"][0]
    assert err["code"] == "invalid_utf8" and err["path"] == path, err
    assert "lone UTF-16 surrogate" in err["message"]


def test_a_surrogate_pair_is_one_character(client: TestClient) -> None:
    body = (b'{"net": {"op": [{"type": "Relu", "input": ["x\\ud83d\\ude00"], "output": ["y"]}]},'
            b' "ys": ["y"]}')
    r = client.post("/v1/gradients/net", content=body, headers=JSON)
    assert r.status_code == 200, r.text
    assert r.json()["grad_map"]["x\U0001f600"] == "x\U0001f600_grad"


def _bytes_arg_request() -> bytes:
    from api_schemas import caffe2_pb2, netgrad_pb2

    req = netgrad_pb2.NetGradientRequest(return_net=True)
    op = caffe2_pb2.OperatorDef(type="Relu", input=["x"], output=["y"])
    op.arg.add(name="blob", s=b"\xff\xfe")  # Caffe2's Argument.s is bytes
    req.net.op.append(op)
    req.ys.add(blob="y")
    return req.SerializeToString()


@pytest.mark.parametrize(("accept", "answered"), [
    ("application/json, application/protobuf;q=0.5", "application/x-protobuf"),  # (as sent)
    ("application/json;q=0.9, application/x-protobuf;q=0.1", "application/x-protobuf"),
])
def test_an_answer_that_cannot_be_json_falls_back_to_accepted_protobuf(
    client: TestClient, accept: str, answered: str
) -> None:
    from api_schemas import netgrad_pb2

    headers = {"content-type": "application/x-protobuf", "accept": accept}
    r = client.post("/v1/gradients/net", content=_bytes_arg_request(), headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == answered and r.headers["vary"] == "Accept"
    resp = netgrad_pb2.NetGradientResponse.FromString(r.content)
    assert [op.type for op in resp.grad_ops] == ["ConstantFill", "ReluGradient"]
    assert resp.grad_ops[1].arg[0].s == b"\xff\xfe"  # Relu's arguments are copied
    assert resp.net.op[0].arg[0].s == b"\xff\xfe"


def test_an_answer_that_cannot_be_json_is_a_406_when_only_json_is_accepted(
    client: TestClient,
) -> None:
    r = client.post("/v1/gradients/net", content=_bytes_arg_request(),
                    headers={"content-type": "application/x-protobuf",
                             "accept": "application/json"})
    problem = assert_problem(r, 406)
    assert [e["path"] for e in problem["errors"]] == [
        "grad_ops[1].arg[0].s", "net.op[0].arg[0].s", "net.op[2].arg[0].s"]
    assert "Accept: application/x-protobuf" in problem["detail"]


@pytest.mark.parametrize("accept", [None, "*/*"])
def test_without_accept_an_answer_that_cannot_be_json_is_a_400_naming_the_fields(
    client: TestClient, accept: str | None,
) -> None:
    headers = {"content-type": "application/x-protobuf"}
    if accept is not None:
        headers["accept"] = accept
    r = client.post("/v1/gradients/net", content=_bytes_arg_request(), headers=headers)
    problem = assert_problem(r, 400)
    assert problem["errors"][0]["path"] == "grad_ops[1].arg[0].s"
    assert "application/protobuf" in problem["detail"]


@pytest.mark.parametrize("literal", [b"1e400", b"-1e400", b"NaN", b"Infinity", b"-Infinity"])
def test_a_number_json_cannot_hold_is_refused_in_tensor_data(
    client: TestClient, literal: bytes
) -> None:
    body = (b'{"net": {"op": [{"type": "Relu", "input": ["x"], "output": ["y"]}]}, "fetch": '
            b'["y"], "inputs": [{"blob": "x", "tensor": {"shape": [2], "data": [1.5, '
            + literal + b"]}}]}")
    problem = assert_problem(client.post("/v1/run", content=body, headers=JSON), 400)
    err = problem["errors"][0]
    assert err["path"] == "inputs[0].tensor.data[1]", err
    assert '"Infinity"' in err["message"]


def test_non_finite_tensor_data_as_strings_still_runs(client: TestClient) -> None:
    req = {"net": {"op": [{"type": "Relu", "input": ["x"], "output": ["y"]}]}, "fetch": ["y"],
           "inputs": [{"blob": "x", "tensor": {"shape": [3], "data": [1.5, "-Infinity", 2]}}]}
    r = client.post("/v1/run", json=req)
    assert r.status_code == 200, r.text
    assert r.json()["outputs"]["y"]["data"] == [1.5, 0.0, 2.0]
