"""The OpenAPI schemas come from the .proto descriptors: every field described, examples valid."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from google.protobuf import descriptor_pb2

from api_schemas import caffe2_pb2, netgrad_pb2
from api_schemas.openapi import SchemaError, component_schemas
from api_schemas.openapi_schemas import SCHEMAS
from app.api import wire
from app.api.negotiation import Body, Media

#: Request message of each POST route.
REQUESTS = {
    "/v1/gradients/op": netgrad_pb2.OpGradientRequest,
    "/v1/gradients/net": netgrad_pb2.NetGradientRequest,
    "/v1/verify": netgrad_pb2.VerifyRequest,
    "/v1/run": netgrad_pb2.RunRequest,
}


def _properties(schema: dict[str, Any]) -> dict[str, Any]:
    return dict(schema.get("properties", {}))


def test_every_property_and_message_is_described() -> None:
    assert {"OpGradientRequest", "NetGradientResponse", "Problem", "Health", "caffe2.NetDef",
            "caffe2.Argument", "Gradient"} <= set(SCHEMAS)
    undocumented = [
        f"{name}.{prop}"
        for name, schema in SCHEMAS.items()
        for prop, sub in _properties(schema).items()
        if not sub.get("description", "").strip()
    ]
    assert undocumented == []
    for name, schema in SCHEMAS.items():
        assert schema.get("description", "").strip(), name


def test_served_document_carries_the_generated_schemas(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    served = spec["components"]["schemas"]
    for name, schema in SCHEMAS.items():
        assert served[name] == json.loads(json.dumps(schema)), name


def test_json_forms_show_in_the_schemas() -> None:
    # Strict integers, the bare Gradient, object maps, inlined VerifyOptions, required fields.
    assert SCHEMAS["NetGradientRequest"]["properties"]["skip"]["anyOf"][0] == {
        "type": "integer", "format": "int32"}
    assert {"type": "null", "description": "none"} in SCHEMAS["Gradient"]["anyOf"]
    ys = SCHEMAS["NetGradientRequest"]["properties"]["ys"]["anyOf"]
    assert {"type": "array", "items": {"type": "string"}} in ys
    assert SCHEMAS["NetGradientRequest"]["required"] == ["net", "ys"]
    verify = SCHEMAS["VerifyRequest"]["properties"]
    assert {"inputs", "mode", "tolerances", "check", "passes", "seed"} <= set(verify)
    assert "verify" not in verify
    assert SCHEMAS["caffe2.Argument"]["properties"]["i"]["anyOf"][1] == {"type": "string"}
    assert "JsonField" not in SCHEMAS


def test_a_field_without_a_comment_fails_the_generation() -> None:
    fds = descriptor_pb2.FileDescriptorSet()
    for module in (descriptor_pb2, caffe2_pb2, netgrad_pb2):
        module.DESCRIPTOR.CopyToProto(fds.file.add())  # no source info: no comments
    with pytest.raises(SchemaError, match="has no comment"):
        component_schemas(fds)


def test_every_example_decodes_through_the_schema(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    for path, cls in REQUESTS.items():
        content = spec["paths"][path]["post"]["requestBody"]["content"]
        for example in content["application/json"]["examples"].values():
            text = json.dumps(example["value"])
            body = Body(text.encode(), Media.JSON, Media.JSON, Media.JSON.value, text)
            msg = wire.decode(body, cls, 128)
            binary = Body(msg.SerializeToString(), Media.PROTOBUF, Media.JSON, "x")
            assert wire.decode(binary, cls, 128) == msg
