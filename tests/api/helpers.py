"""Request builders shared by the HTTP tests."""

from __future__ import annotations

import copy
from typing import Any

from fastapi.testclient import TestClient
from httpx import Response

from api_schemas import caffe2_pb2, netgrad_pb2
from app.api import docs
from core.proto import codec

PB = "application/protobuf"


def do_request() -> dict[str, Any]:
    """control-flow-cases §2: Do([outer_X, outer_Y, W] -> [outer_Z, W]) around Add."""
    return copy.deepcopy(docs.DO_REQUEST)


def do_request_pb() -> netgrad_pb2.OpGradientRequest:
    """The same request as a ``netgrad.v1.OpGradientRequest``."""
    msg = netgrad_pb2.OpGradientRequest()
    msg.op.CopyFrom(codec.from_json_obj(docs.DO_OP, caffe2_pb2.OperatorDef))
    msg.g_output.add().dense = "outer_Z_grad"
    msg.g_output.add()  # no gradient
    return msg


def nested_do_net(levels: int) -> dict[str, Any]:
    """A NetDef whose op[0] is a Do nesting ``levels`` sub-net levels, Add innermost."""
    inner: dict[str, Any] = {"op": [{"type": "Add", "input": ["X", "Y"], "output": ["Z"]}]}
    for _ in range(levels):
        inner = {
            "op": [
                {
                    "type": "Do",
                    "input": ["X", "Y", "W"],
                    "output": ["Z", "W"],
                    "arg": [
                        {"name": "net", "n": inner},
                        {"name": "inner_blobs", "strings": ["X", "Y", "Z"]},
                        {"name": "outer_blobs_idx", "ints": [0, 1, 2]},
                    ],
                }
            ]
        }
    return inner


def assert_problem(r: Response, status: int, code: str | None = None) -> dict[str, Any]:
    """Check an RFC 9457 problem document and return it."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert set(body) >= {"type", "title", "status", "detail", "errors"}
    assert body["status"] == status
    assert body["type"].startswith("urn:netgrad:problem:")
    assert body["errors"], body
    for e in body["errors"]:
        assert set(e) == {"code", "message", "op_index", "op_type", "path", "blobs"}
    if code is not None:
        assert body["type"] == f"urn:netgrad:problem:{code}", body
    return dict(body)


def still_serving(client: TestClient) -> None:
    """The app answers health checks and a valid request after a bad one."""
    assert client.get("/healthz").status_code == 200
    r = client.post("/v1/gradients/op", json=do_request())
    assert r.status_code == 200, r.text
