"""Content-Type picks the decoder, Accept picks the encoder; all four combinations agree."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from api_schemas import netgrad_pb2
from app.api.negotiation import Media, request_media, response_media
from app.errors import ProblemError
from core.proto import codec
from tests.api.helpers import do_request, do_request_pb


def _post(client: TestClient, content_type: str, accept: str | None) -> tuple[str, bytes]:
    if content_type == "application/json":
        import json

        data = json.dumps(do_request()).encode()
    else:
        data = do_request_pb().SerializeToString()
    headers = {"Content-Type": content_type}
    if accept is not None:
        headers["Accept"] = accept
    r = client.post("/v1/gradients/op", content=data, headers=headers)
    assert r.status_code == 200, r.text
    return r.headers["content-type"], r.content


def _as_json(ctype: str, content: bytes) -> dict[str, object]:
    if ctype.startswith("application/json"):
        import json

        return dict(json.loads(content))
    msg = codec.from_binary(content, netgrad_pb2.OpGradientResponse)
    return {
        "grad_ops": [codec.to_json_obj(op) for op in msg.grad_ops],
        "g_input": [g.dense if g.WhichOneof("kind") == "dense" else None for g in msg.g_input],
        "diagnostics": [
            {
                "severity": d.severity,
                "code": d.code,
                "message": d.message,
                "op_index": d.op_index if d.op_index >= 0 else None,
                "op_type": d.op_type or None,
                "path": d.path or None,
                "blobs": list(d.blobs),
            }
            for d in msg.diagnostics
        ],
    }


@pytest.mark.parametrize(
    "content_type", ["application/json", "application/protobuf", "application/x-protobuf"]
)
@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (None, "application/json"),
        ("*/*", "application/json"),
        ("application/json", "application/json"),
        ("application/protobuf", "application/protobuf"),
        ("application/x-protobuf", "application/x-protobuf"),
        ("application/json;q=0.5, application/protobuf", "application/protobuf"),
        ("text/html, application/json;q=0.1", "application/json"),
    ],
)
def test_every_encoding_pair_gives_the_same_answer(
    client: TestClient, content_type: str, accept: str | None, expected: str
) -> None:
    reference = _as_json(*_post(client, "application/json", None))
    ctype, content = _post(client, content_type, accept)
    assert ctype.split(";")[0] == expected
    assert _as_json(ctype, content) == reference


def test_json_content_type_with_charset(client: TestClient) -> None:
    import json

    r = client.post(
        "/v1/gradients/op",
        content=json.dumps(do_request()).encode(),
        headers={"Content-Type": "application/json; charset=utf-8"},
    )
    assert r.status_code == 200


def test_request_media() -> None:
    assert request_media("application/json") is Media.JSON
    assert request_media("Application/JSON; charset=UTF-8") is Media.JSON
    assert request_media("application/x-protobuf") is Media.PROTOBUF
    for bad in (None, "", "text/plain", "application/problem+json", "multipart/form-data"):
        with pytest.raises(ProblemError) as info:
            request_media(bad)
        assert info.value.status == 415


def test_response_media() -> None:
    assert response_media(None) == (Media.JSON, "application/json")
    assert response_media("application/*") == (Media.JSON, "application/json")
    assert response_media("application/protobuf;q=0.9, application/json;q=0.9")[0] is Media.JSON
    assert response_media("application/json;q=0, application/protobuf;q=0.2")[0] is Media.PROTOBUF
    with pytest.raises(ProblemError) as info:
        response_media("text/html, application/json;q=0")
    assert info.value.status == 406


def test_problem_is_json_even_when_protobuf_is_accepted(client: TestClient) -> None:
    req = {**do_request(), "g_output": []}
    r = client.post("/v1/gradients/op", json=req, headers={"Accept": "application/protobuf"})
    assert r.status_code == 400
    assert r.headers["content-type"] == "application/problem+json"


def test_json_in_another_charset_is_415(client: TestClient) -> None:
    body = json.dumps(do_request()).encode("latin-1")
    r = client.post("/v1/gradients/op", content=body,
                    headers={"Content-Type": "application/json; charset=latin-1"})
    assert r.status_code == 415
    ok = client.post("/v1/gradients/op", content=json.dumps(do_request()),
                     headers={"Content-Type": "application/json; charset=UTF-8"})
    assert ok.status_code == 200


@pytest.mark.parametrize(("accept", "expected"), [
    ("application/json;q=0, */*;q=0.1", "application/protobuf"),  # walkthrough: was JSON
    ("application/x-protobuf;q=0, */*", "application/json"),
    ("*/*;q=0.5, application/json;q=0.4, application/protobuf", "application/protobuf"),
])
def test_the_most_specific_media_range_decides(accept: str, expected: str) -> None:
    assert response_media(accept)[1] == expected
