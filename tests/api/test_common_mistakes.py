"""Issue 12: each of ten common mistakes is refused with an error that names the fix."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from httpx import Response

from api_schemas import caffe2_pb2, netgrad_pb2
from app.api import docs
from app.main import create_app
from app.settings import Settings
from core.proto import codec
from tests.api.helpers import assert_problem


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(workers=1)), raise_server_exceptions=False) as c:
        yield c


def _net_pb() -> caffe2_pb2.NetDef:
    return codec.from_json_obj(docs.MLP_NET, caffe2_pb2.NetDef)


def _with(base: dict[str, Any], edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    req = copy.deepcopy(base)
    edit(req)
    return req


def _typo(req: dict[str, Any]) -> None:
    req["net"]["op"][1]["type"] = "Reluu"


def _inputs_dict(req: dict[str, Any]) -> None:
    req["inputs"] = {"data": {"shape": [2, 4]}}


def _camel_plural(req: dict[str, Any]) -> None:
    req["gOutputs"] = req.pop("g_output")


def _singular_inputs(req: dict[str, Any]) -> None:
    req["input"] = req.pop("inputs")


def _nan_input(req: dict[str, Any]) -> None:
    req["inputs"][2]["tensor"]["data"] = [0.1, "NaN", 0.3]  # fc_b, named in `check`
    req["check"] = ["fc_w", "fc_b"]


Call = Callable[[TestClient], Response]

#: (mistake, request, status, problem code, words the fix must contain)
MISTAKES: list[tuple[str, Call, int, str, list[str]]] = [
    ("wrong content type",
     lambda c: c.post("/v1/gradients/net", content=json.dumps(docs.NET_REQUEST),
                      headers={"Content-Type": "text/plain"}),
     415, "unsupported_media_type", ["application/json", "text/x-protobuf"]),
    ("bare NetDef",
     lambda c: c.post("/v1/gradients/net", content=_net_pb().SerializeToString(),
                      headers={"Content-Type": "application/protobuf"}),
     400, "bare_netdef", ["NetGradientRequest", "`net`"]),
    ("bare NetDef in text format",
     lambda c: c.post("/v1/gradients/net", content='op { type: "Relu" input: "x" output: "y" }',
                      headers={"Content-Type": "text/x-protobuf"}),
     400, "bare_netdef", ["NetGradientRequest", "`net`", 'net { <your NetDef> } ys {']),
    ("pbtxt body sent as JSON",
     lambda c: c.post("/v1/gradients/net", content=codec.to_text(_net_pb()),
                      headers={"Content-Type": "application/json"}),
     400, "invalid_json", ["text/x-protobuf"]),
    ("typo in op type",
     lambda c: c.post("/v1/gradients/net", json=_with(docs.NET_REQUEST, _typo)),
     422, "unknown_operator", ["Did you mean Relu", "GET /v1/operators"]),
    ("missing inputs",
     lambda c: c.post("/v1/verify", json={"net": docs.MLP_NET, "ys": ["prob"]}),
     400, "missing_input", ["`inputs`", "`init_net`", "'data'"]),
    ("missing ys",
     lambda c: c.post("/v1/gradients/net", json={"net": docs.MLP_NET}),
     400, "invalid_field", ['"ys": ["prob"]']),
    ("ys that no op writes",
     lambda c: c.post("/v1/gradients/net", json={"net": docs.MLP_NET, "ys": ["nope"]}),
     400, "unknown_ys_blob", ["external_output"]),
    ("inputs as a dict",
     lambda c: c.post("/v1/verify", json=_with(docs.VERIFY_REQUEST, _inputs_dict)),
     400, "invalid_field", ["list with one entry per fed blob", '"random"']),
    ("camelCase gOutputs",
     lambda c: c.post("/v1/gradients/op", json=_with(docs.DO_REQUEST, _camel_plural)),
     400, "unknown_field", ["did you mean `g_output`"]),
    ("tolerance at the top level",
     lambda c: c.post("/v1/verify", json={**docs.VERIFY_REQUEST, "atol": 1e-3}),
     400, "unknown_field", ["did you mean `tolerances.atol`?"]),
    ("JSON body sent as binary protobuf",
     lambda c: c.post("/v1/gradients/net", content=json.dumps(docs.NET_REQUEST),
                      headers={"Content-Type": "application/protobuf"}),
     400, "decode_error", ["looks like JSON", "application/json"]),
    ("text-format body sent as binary protobuf",
     lambda c: c.post("/v1/gradients/net", content='net { op { type: "Relu" } } ys { blob: "y" }',
                      headers={"Content-Type": "application/protobuf"}),
     400, "decode_error", ["looks like protobuf text format", "text/x-protobuf"]),
    ("a dense g_output given as {\"dense\": name}",
     lambda c: c.post("/v1/gradients/op", json={
         "op": {"type": "Relu", "input": ["x"], "output": ["y"]},
         "g_output": [{"dense": "y_grad"}]}),
     400, "invalid_field", ['written bare: "y_grad"', 'not {"dense": ...}']),
    ("a NaN in a checked input",
     lambda c: c.post("/v1/verify", json=_with(docs.VERIFY_REQUEST, _nan_input)),
     400, "invalid_request", ["holds NaN at element 1", "leave the blob out of `check`"]),
    ("input instead of inputs",
     lambda c: c.post("/v1/verify", json=_with(docs.VERIFY_REQUEST, _singular_inputs)),
     400, "unknown_field", ["did you mean `inputs`?"]),
    ("a fraction in an int32 input",
     lambda c: c.post("/v1/run", json={"net": {"op": [
         {"type": "Cast", "input": ["x"], "output": ["y"], "arg": [{"name": "to", "i": 1}]}]},
         "fetch": ["y"], "inputs": [{"blob": "x", "tensor": {"shape": [2], "dtype": "int32",
                                                             "data": [1, 1.5]}}]}),
     400, "invalid_request", ["value 1.5 at element 1", "whole number that fits int32"]),
    ("Cast without from_type",
     lambda c: c.post("/v1/gradients/net", json={"net": {"op": [
         {"type": "Cast", "input": ["x"], "output": ["y"], "arg": [{"name": "to", "i": 1}]}]},
         "ys": ["y"]}),
     422, "gradient_error", ['{"name": "from_type", "i": 1}', "DOUBLE 13"]),
    ("misspelt route",
     lambda c: c.post("/v1/gradient/op", json=docs.DO_REQUEST),
     404, "not_found", ["did you mean POST /v1/gradients/op?"]),
    ("a route's parent",
     lambda c: c.post("/v1/gradients", json=docs.DO_REQUEST),
     404, "not_found", ["POST /v1/gradients/net or POST /v1/gradients/op"]),
    ("an op without a type",
     lambda c: c.post("/v1/gradients/net", json={
         "net": {"op": [{"input": ["x"], "output": ["y"]}]}, "ys": ["y"]}),
     422, "unknown_operator", ["the op has no type", "GET /v1/operators"]),
    ("verify options nested on /v1/verify",
     lambda c: c.post("/v1/verify", json={
         "net": docs.MLP_NET, "ys": ["prob"],
         "verify": {"inputs": docs.VERIFY_REQUEST["inputs"]}}),
     400, "unknown_field", ["sit at the top level", "move them out of `verify`"]),
    ("trailing slash",
     lambda c: c.post("/v1/gradients/net/", json=docs.NET_REQUEST),
     404, "not_found", ["drop the trailing slash", "POST /v1/gradients/net"]),
]


@pytest.mark.parametrize(("mistake", "call", "status", "code", "fix"), MISTAKES,
                         ids=[m[0] for m in MISTAKES])
def test_mistake_names_the_fix(client: TestClient, mistake: str, call: Call, status: int,
                               code: str, fix: list[str]) -> None:
    body = assert_problem(call(client), status)
    hits = [e for e in body["errors"] if e["code"] == code]
    assert hits, body
    for words in fix:
        assert words in hits[0]["message"], (mistake, words, hits[0]["message"])
        assert words in body["detail"], (mistake, words, body["detail"])


def test_bare_netdef_as_json_names_the_wrapper(client: TestClient) -> None:
    body = assert_problem(client.post("/v1/gradients/net", json=docs.MLP_NET), 400)
    assert "NetGradientRequest that wraps it" in body["errors"][0]["message"]


def test_bare_operatordef_names_the_wrapper(client: TestClient) -> None:
    op = codec.from_json_obj(docs.DO_OP, caffe2_pb2.OperatorDef)
    body = assert_problem(client.post("/v1/gradients/op", content=op.SerializeToString(),
                                      headers={"Content-Type": "application/protobuf"}), 400)
    assert body["errors"][0]["code"] == "bare_operatordef"
    assert "OpGradientRequest" in body["errors"][0]["message"]


@pytest.mark.parametrize(("route", "wrapper", "text"), [
    ("/v1/gradients/op", "OpGradientRequest", 'type: "Relu" input: "x" output: "y"'),
    ("/v1/verify", "VerifyRequest", 'op { type: "Relu" input: "x" output: "y" }'),
    ("/v1/run", "RunRequest", 'op { type: "Relu" input: "x" output: "y" }'),
])
def test_bare_message_in_text_format_names_the_wrapper(client: TestClient, route: str,
                                                       wrapper: str, text: str) -> None:
    r = client.post(route, content=text, headers={"Content-Type": "text/x-protobuf"})
    body = assert_problem(r, 400)
    assert body["errors"][0]["code"] in ("bare_netdef", "bare_operatordef")
    assert wrapper in body["errors"][0]["message"] and "text/x-protobuf" in body["detail"]


@pytest.mark.parametrize(("route", "body", "path", "want"), [
    ("/v1/gradients/net", {**docs.NET_REQUEST, "atol": 1e-3}, "atol", "`verify.tolerances.atol`"),
    ("/v1/verify", {**docs.VERIFY_REQUEST, "stepp": 1e-3}, "stepp", "`tolerances.step`"),
    ("/v1/verify", {**docs.VERIFY_REQUEST, "tolerances": {"atoll": 1e-3}}, "tolerances.atoll",
     "did you mean `atol`?"),
    ("/v1/verify", {**docs.VERIFY_REQUEST, "Mode": "fast"}, "Mode", "did you mean `mode`?"),
])
def test_misplaced_nested_field_names_its_place(client: TestClient, route: str,
                                                body: dict[str, Any], path: str,
                                                want: str) -> None:
    problem = assert_problem(client.post(route, json=body), 400)
    (hit,) = [e for e in problem["errors"] if e["code"] == "unknown_field"]
    assert hit["path"] == path and want in hit["message"], hit


def test_lower_camel_case_field_is_accepted(client: TestClient) -> None:
    req = copy.deepcopy(docs.DO_REQUEST)
    req["gOutput"] = req.pop("g_output")
    assert client.post("/v1/gradients/op", json=req).json() == \
        client.post("/v1/gradients/op", json=docs.DO_REQUEST).json()


def test_pbtxt_body_is_accepted_as_text_x_protobuf(client: TestClient) -> None:
    req = netgrad_pb2.NetGradientRequest(net=_net_pb())
    req.ys.add(blob="prob")
    r = client.post("/v1/gradients/net", content=codec.to_text(req),
                    headers={"Content-Type": "text/x-protobuf"})
    assert r.status_code == 200, r.text
    assert r.json() == client.post("/v1/gradients/net", json=docs.NET_REQUEST).json()


def test_bad_pbtxt_body_is_a_400(client: TestClient) -> None:
    r = client.post("/v1/gradients/net", content="net { op { typ: 1 } }",
                    headers={"Content-Type": "text/x-protobuf"})
    assert_problem(r, 400)


def test_op_without_gradient_points_to_ys_and_skip(client: TestClient) -> None:
    net = {"op": [{"type": "ConstantFill", "output": ["c"], "arg": [{"name": "shape",
                                                                     "ints": [1]}]},
                  {"type": "ArgMax", "input": ["x"], "output": ["m"]},
                  {"type": "Add", "input": ["m", "c"], "output": ["y"]}]}
    r = client.post("/v1/gradients/net", json={"net": net, "ys": ["y"]})
    body = assert_problem(r, 422)
    assert "`skip`" in body["errors"][0]["message"] and "`ys`" in body["errors"][0]["message"]


def test_wrong_method_names_the_method(client: TestClient) -> None:
    body = assert_problem(client.get("/v1/verify"), 405)
    assert "use POST /v1/verify with a VerifyRequest body" in body["detail"]


@pytest.mark.parametrize(("route", "edit", "path"), [
    ("/v1/verify", lambda r: r.update(mode="ful"), "mode"),
    ("/v1/verify", lambda r: r.update(passes=0), "passes"),
    ("/v1/verify", lambda r: r.update(tolerances={"rtol": -1}), "tolerances.rtol"),
    ("/v1/verify", _nan_input, "inputs[2].tensor.data"),
    ("/v1/verify", lambda r: r["inputs"][0]["random"].update(shape=[-2]),
     "inputs[0].random.shape"),
    ("/v1/verify", lambda r: r["inputs"][0]["random"].update(distribution="gauss"),
     "inputs[0].random.distribution"),
    ("/v1/verify", lambda r: r["inputs"].append(r["inputs"][0]), "inputs[3].blob"),
    ("/v1/verify", lambda r: r.update(check=["fc_w", "nope"]), "check[1]"),
    ("/v1/verify", lambda r: r["inputs"][2]["tensor"].update(dtype="bool", data=[1, 0, 2]),
     "inputs[2].tensor.data[2]"),
    ("/v1/run", lambda r: r["inputs"][2]["tensor"].update(shape=[4]), "inputs[2].tensor.data"),
])
def test_option_and_input_problems_name_their_field(client: TestClient, route: str,
                                                    edit: Callable[[dict[str, Any]], None],
                                                    path: str) -> None:
    base = docs.VERIFY_REQUEST if route == "/v1/verify" else {
        "net": docs.MLP_NET, "fetch": ["prob"],
        "inputs": docs.VERIFY_REQUEST["inputs"]}
    body = assert_problem(client.post(route, json=_with(base, edit)), 400)
    assert [e["path"] for e in body["errors"]] == [path], body


def test_bare_oneof_member_names_are_not_suggested(client: TestClient) -> None:
    """`dense` / `slice` are never JSON keys (a Gradient is a bare string or a slice object),
    so no "did you mean `g_output.dense`" that contradicts the error."""
    body = assert_problem(client.post("/v1/gradients/op", json={
        "op": {"type": "Relu", "input": ["x"], "output": ["y"]},
        "g_output": [{"dense": {"name": "y_grad"}}]}), 400)
    assert "did you mean" not in body["detail"], body["detail"]
    assert body["errors"][0]["path"] == "g_output[0].dense"


@pytest.mark.parametrize(("data", "want"), [
    (b'{"net": {}}', "looks like JSON"),
    (b"  [1, 2]", "looks like JSON"),
    (b'net { op { type: "Relu" } }', "text format"),
    (b"ys: 1", "text format"),
    (b"\x0a\x05hello", None),
    (b"\x0a\x7b\x0a\x03mlp\x12", None),  # field 1, 123 bytes long: binary, not JSON
    (b"\x0a\x61\x3a\x05hello", None),  # field 1, 97 bytes: a length byte follows
    (b"\xff\xfe\x00", None),
    (b"", None),
])
def test_media_hint_reads_only_what_is_certain(data: bytes, want: str | None) -> None:
    from app.api.hints import media_hint

    got = media_hint(data)
    assert (got is None) if want is None else (got is not None and want in got), got
