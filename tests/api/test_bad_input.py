"""Issue 2 "Bad input": each gets a 4xx problem+json naming what is wrong; the app keeps serving."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator

from fastapi.testclient import TestClient

from api_schemas import caffe2_pb2, netgrad_pb2
from app.api import docs
from core.proto import codec
from tests.api.conftest import TEST_MAX_BODY, TEST_MAX_DEPTH
from tests.api.helpers import (
    PB,
    assert_problem,
    do_request,
    do_request_pb,
    nested_do_net,
    still_serving,
)


def test_truncated_protobuf(client: TestClient) -> None:
    data = do_request_pb().SerializeToString()
    r = client.post("/v1/gradients/op", content=data[:-7], headers={"Content-Type": PB})
    body = assert_problem(r, 400, "decode_error")
    assert "OpGradientRequest" in body["detail"]
    still_serving(client)


def test_garbage_protobuf(client: TestClient) -> None:
    r = client.post("/v1/gradients/net", content=b"\xff" * 40, headers={"Content-Type": PB})
    assert_problem(r, 400, "decode_error")
    still_serving(client)


def test_unknown_top_level_field(client: TestClient) -> None:
    req = {**do_request(), "g_outputs": []}
    body = assert_problem(client.post("/v1/gradients/op", json=req), 400)
    assert any(e["code"] == "unknown_field" and "g_outputs" in e["message"] for e in body["errors"])
    still_serving(client)


def test_unknown_field_inside_operator(client: TestClient) -> None:
    req = do_request()
    req["op"]["inputs"] = ["typo"]
    body = assert_problem(client.post("/v1/gradients/op", json=req), 400)
    assert "inputs" in body["detail"]
    still_serving(client)


def test_unknown_field_inside_nested_netdef(client: TestClient) -> None:
    req = do_request()
    req["op"]["arg"][0]["n"]["op"][0]["bogus_field"] = 1
    body = assert_problem(client.post("/v1/gradients/op", json=req), 400)
    assert "bogus_field" in body["detail"]
    net_req = copy.deepcopy(docs.NET_REQUEST)
    net_req["net"]["external_inputs"] = ["x"]
    body = assert_problem(client.post("/v1/gradients/net", json=net_req), 400)
    assert "external_inputs" in body["detail"]
    still_serving(client)


def test_non_utf8_bytes_in_json(client: TestClient) -> None:
    raw = json.dumps(do_request()).encode().replace(b"outer_Z_grad", b"outer_\xff_grad")
    r = client.post(
        "/v1/gradients/op", content=raw, headers={"Content-Type": "application/json"}
    )
    body = assert_problem(r, 400, "decode_error")
    assert body["errors"][0]["code"] == "invalid_utf8"
    still_serving(client)


def test_lone_surrogate_names_in_json(client: TestClient) -> None:
    for where in ("g_output", "input", "strings"):
        req = do_request()
        if where == "g_output":
            req["g_output"][0] = "\udc80"
        elif where == "input":
            req["op"]["input"][0] = "\ud800x"
        else:
            req["op"]["arg"][1]["strings"][0] = "\udcff"
        raw = json.dumps(req).encode("ascii")  # escapes survive as \udc80 in the text
        r = client.post(
            "/v1/gradients/op", content=raw, headers={"Content-Type": "application/json"}
        )
        assert_problem(r, 400, "decode_error")
    still_serving(client)


def test_invalid_json(client: TestClient) -> None:
    r = client.post(
        "/v1/gradients/op", content=b'{"op": ', headers={"Content-Type": "application/json"}
    )
    assert_problem(r, 400, "decode_error")
    r = client.post("/v1/gradients/op", json=[1, 2])
    assert_problem(r, 400)
    still_serving(client)


def _do_with(inner: list[str], idx: list[int]) -> dict[str, object]:
    req = do_request()
    req["op"]["arg"][1]["strings"] = inner
    req["op"]["arg"][2]["ints"] = idx
    return req


def test_do_bindings_of_different_length(client: TestClient) -> None:
    r = client.post("/v1/gradients/op", json=_do_with(["X", "Y", "Z"], [0, 1]))
    assert 400 <= r.status_code < 500
    body = assert_problem(r, r.status_code)
    assert any(e["op_type"] == "Do" for e in body["errors"]), body
    still_serving(client)


def test_do_binding_index_out_of_range(client: TestClient) -> None:
    r = client.post("/v1/gradients/op", json=_do_with(["X", "Y", "Z"], [0, 1, 7]))
    assert 400 <= r.status_code < 500
    body = assert_problem(r, r.status_code)
    assert any(e["op_type"] == "Do" for e in body["errors"]), body
    still_serving(client)


def test_g_output_of_wrong_length(client: TestClient) -> None:
    req = {**do_request(), "g_output": ["outer_Z_grad"]}
    body = assert_problem(client.post("/v1/gradients/op", json=req), 400)
    assert body["errors"][0]["op_type"] == "Do"
    assert "g_output" in body["detail"]
    still_serving(client)


def test_ys_naming_a_blob_no_op_writes(client: TestClient) -> None:
    req = {**docs.NET_REQUEST, "ys": ["prob", "nowhere"]}
    body = assert_problem(client.post("/v1/gradients/net", json=req), 400)
    assert any("nowhere" in e["blobs"] for e in body["errors"]), body
    still_serving(client)


def test_negative_skip_is_refused(client: TestClient) -> None:
    req = {**docs.NET_REQUEST, "skip": -1}
    assert_problem(client.post("/v1/gradients/net", json=req), 400)
    still_serving(client)


def _deep_path(levels: int) -> str:
    return "/".join(["op[0]:Do/net"] * levels)


def test_net_nested_deeper_than_limit_json(client: TestClient) -> None:
    req = {"net": nested_do_net(TEST_MAX_DEPTH + 1), "ys": ["Z"]}
    body = assert_problem(client.post("/v1/gradients/net", json=req), 422, "limit_exceeded")
    assert body["errors"][0]["code"] == "nesting_too_deep"
    assert body["errors"][0]["path"] == _deep_path(TEST_MAX_DEPTH + 1)
    still_serving(client)


def test_net_nested_deeper_than_limit_binary(client: TestClient) -> None:
    req = netgrad_pb2.NetGradientRequest()
    req.net.CopyFrom(codec.from_json_obj(nested_do_net(TEST_MAX_DEPTH + 1), caffe2_pb2.NetDef))
    req.ys.add(blob="Z")
    r = client.post(
        "/v1/gradients/net", content=req.SerializeToString(), headers={"Content-Type": PB}
    )
    body = assert_problem(r, 422, "limit_exceeded")
    assert body["errors"][0]["path"] == _deep_path(TEST_MAX_DEPTH + 1)
    still_serving(client)


def test_op_nested_deeper_than_limit(client: TestClient) -> None:
    op = nested_do_net(TEST_MAX_DEPTH + 1)["op"][0]
    body = assert_problem(
        client.post("/v1/gradients/op", json={"op": op, "g_output": ["Z_grad", None]}), 422
    )
    assert body["errors"][0]["path"] == _deep_path(TEST_MAX_DEPTH + 1)
    still_serving(client)


def test_nesting_beyond_the_protobuf_decoders_still_names_the_path(client: TestClient) -> None:
    # 40 levels = 122 nested messages: the protobuf decoders alone would refuse this without a
    # path; the service reports where the limit was crossed.
    levels = 40
    net = nested_do_net(levels)
    body = assert_problem(client.post("/v1/gradients/net", json={"net": net, "ys": ["Z"]}), 422)
    assert body["errors"][0]["path"] == _deep_path(TEST_MAX_DEPTH + 1)
    # Build the binary message by hand: protobuf itself cannot nest that deep.
    data = _wire_nested(levels)
    r = client.post("/v1/gradients/net", content=data, headers={"Content-Type": PB})
    body = assert_problem(r, 422)
    assert body["errors"][0]["path"] == _deep_path(TEST_MAX_DEPTH + 1)
    still_serving(client)


def _ld(field: int, payload: bytes) -> bytes:
    out = bytearray([(field << 3) | 2])
    n = len(payload)
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            break
    return bytes(out) + payload


def _wire_nested(levels: int) -> bytes:
    net = _ld(2, _ld(4, b"Add"))  # NetDef{op{type: "Add"}}
    for _ in range(levels):
        arg = _ld(1, b"net") + _ld(8, net)  # Argument{name, n}
        net = _ld(2, _ld(4, b"Do") + _ld(5, arg))  # NetDef{op{type, arg}}
    return _ld(1, net)  # NetGradientRequest{net}


def test_body_over_limit_by_content_length(client: TestClient) -> None:
    big = json.dumps({**do_request(), "pad": "x" * TEST_MAX_BODY}).encode()
    r = client.post(
        "/v1/gradients/op", content=big, headers={"Content-Type": "application/json"}
    )
    body = assert_problem(r, 413, "limit_exceeded")
    assert body["errors"][0]["code"] == "body_too_large"
    still_serving(client)


def test_body_over_limit_without_content_length(client: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(TEST_MAX_BODY // 4096 + 4):
            yield b" " * 4096

    r = client.post(
        "/v1/gradients/net", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert "content-length" not in r.request.headers
    assert_problem(r, 413, "limit_exceeded")
    still_serving(client)


def test_body_just_under_limit_is_read(client: TestClient) -> None:
    raw = json.dumps(do_request()).encode()
    raw = raw + b" " * (TEST_MAX_BODY - len(raw))
    r = client.post("/v1/gradients/op", content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text


def test_unsupported_media_type_and_not_acceptable(client: TestClient) -> None:
    raw = json.dumps(do_request()).encode()
    r = client.post("/v1/gradients/op", content=raw, headers={"Content-Type": "text/plain"})
    assert_problem(r, 415, "unsupported_media_type")
    r = client.post("/v1/gradients/op", content=raw)
    assert_problem(r, 415)
    r = client.post(
        "/v1/gradients/op",
        content=raw,
        headers={"Content-Type": "application/json", "Accept": "text/html"},
    )
    assert_problem(r, 406, "not_acceptable")
    still_serving(client)


def test_query_validation_and_unknown_routes_are_problems(client: TestClient) -> None:
    assert_problem(client.get("/v1/nowhere"), 404)
    assert_problem(client.get("/v1/gradients/op"), 405)
    still_serving(client)


def test_problem_lists_every_offending_op(client: TestClient) -> None:
    # Two ops on the backward path without a usable gradient: both are named at once.
    net = {
        "op": [
            {
                "type": "GenerateProposals",
                "input": ["scores", "deltas", "im_info", "anchors"],
                "output": ["rois", "rois_probs"],
            },
            {
                "type": "BBoxTransform",
                "input": ["rois", "bbox_pred", "im_info"],
                "output": ["boxes", "im_info_out"],
            },
            {"type": "Sum", "input": ["boxes", "rois_probs"], "output": ["y"]},
        ]
    }
    body = assert_problem(client.post("/v1/gradients/net", json={"net": net, "ys": ["y"]}), 422)
    types = {e["op_type"] for e in body["errors"]}
    assert {"GenerateProposals", "BBoxTransform"} <= types, body
    still_serving(client)


def test_unset_required_fields_are_400_not_500(client: TestClient) -> None:
    """Found by fuzzing: proto2 `required` fields left unset used to fail on re-encoding."""
    net = {"op": [{"type": "Relu", "input": ["x"], "output": ["y"]}], "partition_info": [{}]}
    r = client.post("/v1/gradients/net", json={"net": net, "ys": ["y"]},
                    headers={"Accept": PB})
    body = assert_problem(r, 400, "decode_error")
    assert "partition_info[0].name" in body["detail"]
    req = netgrad_pb2.NetGradientRequest()
    req.net.op.add(type="Relu", input=["x"], output=["y"])
    req.net.partition_info.add()
    req.ys.add(blob="y")
    r = client.post("/v1/gradients/net", content=req.SerializePartialToString(),
                    headers={"Content-Type": PB})
    assert_problem(r, 400, "decode_error")
    still_serving(client)


def test_binary_strings_that_are_not_utf8_are_400(client: TestClient) -> None:
    """Found by fuzzing: proto2 string fields are not checked by the decoder."""
    op = _ld(1, b"x") + _ld(2, b"y") + _ld(4, b"R\xbflu")  # OperatorDef{input, output, type}
    body = _ld(1, op) + _ld(2, _ld(1, b"y_grad"))  # OpGradientRequest{op, g_output{dense}}
    r = client.post("/v1/gradients/op", content=body, headers={"Content-Type": PB})
    problem = assert_problem(r, 400, "decode_error")
    assert "op.type" in problem["detail"] and "UTF-8" in problem["detail"]
    still_serving(client)


def test_float_beyond_double_range_is_400(client: TestClient) -> None:
    op = {"type": "Relu", "input": ["x"], "output": ["y"],
          "arg": [{"name": "a", "f": int("1" + "0" * 400)}]}
    r = client.post("/v1/gradients/op", content=json.dumps({"op": op, "g_output": ["g"]}),
                    headers={"Content-Type": "application/json"})
    assert_problem(r, 400, "decode_error")
    still_serving(client)


def test_fields_are_typed_strictly(client: TestClient) -> None:
    """A string where an integer belongs is refused, not coerced (found by fuzzing)."""
    body = {"net": {"op": [{"type": "Relu", "input": ["x"], "output": ["y"]}]},
            "ys": ["y"], "skip": "0"}
    problem = assert_problem(client.post("/v1/gradients/net", json=body), 400, "decode_error")
    assert any(e["path"] == "skip" for e in problem["errors"])
