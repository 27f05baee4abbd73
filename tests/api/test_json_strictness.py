"""JSON bodies that would lose or hide part of what they say are refused (review findings).

* a key given twice in one object (``json.loads`` would keep the last silently; protobuf's
  own ``json_format.Parse`` refuses it too): 400 ``duplicate_key``;
* one field given under both spellings (``g_output`` and ``gOutput``, ``external_input``
  and ``externalInput``): 400 naming the field;
* an empty body, and an integer of more than 4 300 digits: 400 ``invalid_json`` that says
  so, never a 500.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings

JSON = {"Content-Type": "application/json"}
OP = '{"type": "Relu", "input": ["x"], "output": ["y"]}'


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(workers=0)), raise_server_exceptions=False) as c:
        yield c


def _problem(client: TestClient, path: str, body: str) -> dict:
    r = client.post(path, content=body.encode(), headers=JSON)
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    doc: dict = r.json()
    return doc


def test_a_key_given_twice_is_refused(client: TestClient) -> None:
    doc = _problem(client, "/v1/gradients/op",
                   f'{{"op": {OP}, "g_output": ["a"], "g_output": ["b"]}}')
    assert doc["errors"][0]["code"] == "duplicate_key"
    assert "'g_output' twice" in doc["detail"]
    inner = '{"type": "Relu", "type": "Sigmoid", "input": ["x"], "output": ["y"]}'
    doc = _problem(client, "/v1/gradients/op", f'{{"op": {inner}, "g_output": ["y_g"]}}')
    assert "'type' twice" in doc["detail"]


@pytest.mark.parametrize("first, second", [("g_output", "gOutput"), ("gOutput", "g_output")])
def test_both_spellings_of_a_request_field_are_refused(client: TestClient, first: str,
                                                       second: str) -> None:
    doc = _problem(client, "/v1/gradients/op",
                   f'{{"op": {OP}, "{first}": ["a"], "{second}": ["b"]}}')
    assert "given twice" in doc["detail"] and first in doc["detail"]


def test_both_spellings_of_a_caffe2_field_are_refused(client: TestClient) -> None:
    net = ('{"op": [' + OP + '], "external_input": ["x"], "externalInput": ["zz"]}')
    doc = _problem(client, "/v1/gradients/net", f'{{"net": {net}, "ys": ["y"]}}')
    assert "external_input is given twice" in doc["detail"]
    net = ('{"op": [' + OP + ', {"type": "Relu", "input": ["x"], "output": ["z"], '
           '"is_gradient_op": true, "isGradientOp": false}]}')
    doc = _problem(client, "/v1/gradients/net", f'{{"net": {net}, "ys": ["z"]}}')
    assert doc["errors"][0]["path"] == "net.op[1].is_gradient_op"


def test_empty_body_and_huge_integer_say_what_is_wrong(client: TestClient) -> None:
    doc = _problem(client, "/v1/gradients/net", "  ")
    assert "the body is empty" in doc["detail"] and "a NetGradientRequest" in doc["detail"]
    doc = _problem(client, "/v1/gradients/op", "")
    assert "an OpGradientRequest" in doc["detail"]
    body = ('{"net": {"op": [{"type": "Relu", "input": ["x"], "output": ["y"], "arg": '
            '[{"name": "a", "i": ' + "1" * 5000 + '}]}]}, "ys": ["y"]}')
    doc = _problem(client, "/v1/gradients/net", body)
    assert doc["errors"][0]["code"] == "invalid_json"
    assert "4300 digits" in doc["detail"] and "sys." not in doc["detail"]


def test_one_spelling_still_works(client: TestClient) -> None:
    r = client.post("/v1/gradients/op", headers=JSON,
                    content=f'{{"op": {OP}, "gOutput": ["y_g"]}}'.encode())
    assert r.status_code == 200, r.text
    assert r.json()["g_input"] == ["x_grad"]


def test_both_spellings_with_one_value_are_accepted(client: TestClient) -> None:
    r = client.post("/v1/gradients/op", headers=JSON,
                    content=f'{{"op": {OP}, "gOutput": ["y_g"], "g_output": ["y_g"]}}'.encode())
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("body, path, near", [
    ('{"net": {"op": [{"type": "Do", "input": ["a", "W"], "output": ["b", "W"], "arg": ['
     '{"name": "net", "n": {"op": [{"type": "Relu", "input": ["x"], "output": ["y"], '
     '"tpye": 1}]}}]}]}, "ys": ["b"]}', "net.op[0].arg[0].n.op[0].tpye", "type"),
    ('{"net": {"op": [' + OP + '], "extrenal_input": ["x"]}, "ys": ["y"]}',
     "net.extrenal_input", "external_input"),
])
def test_an_unknown_key_inside_a_net_is_named_by_its_path(client: TestClient, body: str,
                                                          path: str, near: str) -> None:
    doc = _problem(client, "/v1/gradients/net", body)
    (err,) = doc["errors"]
    assert err["code"] == "unknown_field" and err["path"] == path
    assert err["message"].count("did you mean") == 1 and f"'{near}'" in err["message"]


@pytest.mark.parametrize(("body", "detail"), [
    ({"net": {"op": [{"type": "Tanh", "arg": [{"name": "k", "i": "abc"}]}]}, "ys": ["y"]},
     "net.op[0].arg[0].i: expected an integer (int64), got 'abc'"),
    ({"net": {"op": [{"type": "Tanh", "input": "x"}]}, "ys": ["y"]},
     "net.op[0].input: expected a JSON array, got x"),
    ({"net": {"op": []}, "ys": ["y"], "skip": "1"}, 'skip: must be an integer (a JSON number'
     ' such as 3), got "1"'),
    ({"net": {"op": []}, "ys": ["y"], "return_net": 1}, "return_net: must be true or false, "
     "got 1"),
    ({"net": {"op": [{"type": "Tanh", "arg": [{"name": "k", "i": [1]}]}]}, "ys": ["y"]},
     "net.op[0].arg[0].i: expected an integer (int64), got an array"),
    ({"net": {"op": [{"type": "Tanh", "input": [1]}]}, "ys": ["y"]},
     "net.op[0].input[0]: expected a string, got a number"),
])
def test_a_wrongly_typed_value_is_quoted_without_parser_internals(
        client: TestClient, body: dict[str, Any], detail: str) -> None:
    problem = client.post("/v1/gradients/net", json=body).json()
    assert detail in problem["detail"]
    for internal in ("invalid literal", "Couldn't", "bytes-like", "int()"):
        assert internal not in problem["detail"]
