"""/docs, /openapi.json (with runnable examples), /v1/operators and /healthz."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        out = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        for v in node.values():
            out.extend(_refs(v))
        return out
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_docs_render(client: TestClient) -> None:
    r = client.get("/docs")
    assert r.status_code == 200
    assert "swagger-ui" in r.text.lower()


def test_openapi_refs_resolve_and_document_utf8(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    prefix = "#/components/schemas/"
    missing = sorted({r for r in _refs(spec) if r[len(prefix):] not in schemas})
    assert not missing
    assert "UTF-8" in spec["info"]["description"]
    assert "UTF-8" in schemas["caffe2.Argument"]["properties"]["s"]["description"]
    assert schemas["caffe2.Argument"]["additionalProperties"] is False


def test_every_post_endpoint_has_a_runnable_example(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    posts = {p: ops["post"] for p, ops in spec["paths"].items() if "post" in ops}
    assert set(posts) == {"/v1/gradients/op", "/v1/gradients/net", "/v1/verify", "/v1/run",
                          "/v1/jobs"}
    for path, op in posts.items():
        content = op["requestBody"]["content"]
        assert set(content) == {"application/json"}  # binary: described, not offered
        assert "application/protobuf" in op["description"]
        examples = content["application/json"]["examples"]
        assert examples, path
        for ex in examples.values():
            r = client.post(path, json=ex["value"])
            if path in ("/v1/verify", "/v1/run", "/v1/jobs"):  # no worker pool: test_verify.py
                assert r.status_code == 503, r.text[:1000]
                continue
            assert r.status_code == 200, (path, r.text[:1000])


def test_do_example_is_the_control_flow_case(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    content = spec["paths"]["/v1/gradients/op"]["post"]["requestBody"]["content"]
    (ex,) = content["application/json"]["examples"].values()
    assert ex["value"]["op"]["type"] == "Do"
    assert ex["value"]["g_output"] == ["outer_Z_grad", None]


def test_operators_lists_control_flow_and_conv(client: TestClient) -> None:
    r = client.get("/v1/operators")
    assert r.status_code == 200
    ops = r.json()["operators"]
    names = [o["type"] for o in ops]
    assert names == sorted(names) and len(names) == len(set(names))
    by = {o["type"]: o for o in ops}
    for t in ("Do", "If", "While", "Conv"):
        assert by[t]["gradient"] == "gradient", by.get(t)
    statuses = {o["gradient"] for o in ops}
    assert statuses <= {
        "gradient",
        "no_gradient",
        "should_not_differentiate",
        "not_implemented",
        "gradient_op",
        "not_implemented_in_netgrad",
    }
    assert by["ConvGradient"]["gradient"] == "gradient_op"


def test_healthz(client: TestClient) -> None:
    r = client.get("/healthz")
    assert r.status_code == 200
    assert r.json()["status"] == "ok"


def test_docs_assets_are_served_locally(client: TestClient) -> None:
    """/docs must render without internet access: no CDN, every asset served here."""
    import re

    page = client.get("/docs")
    assert page.status_code == 200
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert assets and all(a.startswith("/") for a in assets), assets
    for asset in assets:
        assert client.get(asset).status_code == 200, asset


def test_wrong_method_is_405_with_allow(client: TestClient) -> None:
    r = client.get("/v1/gradients/op")
    assert r.status_code == 405
    assert r.headers["content-type"].startswith("application/problem+json")
    assert "POST" in r.headers.get("allow", "")
