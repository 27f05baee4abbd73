"""Issue 12: the OpenAPI document is readable and its examples are real, current answers."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api.openapi_doc import (
    OPERATION_IDS,
    camel_operation_id,
    escape_markdown,
    recorded_examples,
)
from app.api.record_examples import CASES, answer, app_for
from app.main import create_app
from app.settings import Settings


@pytest.fixture(scope="module")
def clients() -> Iterator[dict[Any, TestClient]]:
    opened: dict[Any, TestClient] = {}
    try:
        for case in CASES:
            if case.app_key not in opened:
                opened[case.app_key] = TestClient(
                    app_for(case), raise_server_exceptions=False).__enter__()
        yield opened
    finally:
        for c in opened.values():
            c.__exit__(None, None, None)


@pytest.fixture(scope="module")
def spec(clients: dict[Any, TestClient]) -> dict[str, Any]:
    doc: dict[str, Any] = clients[(1, None)].get("/openapi.json").json()
    return doc


def _same(a: Any, b: Any, where: str = "") -> None:
    """Equal, floats within 1e-9 relative (NumPy builds may differ in the last bits)."""
    if isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, int | float) and isinstance(b, int | float), where
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), (where, a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), (where, a, b)
        for k in a:
            if k == "instance":  # the request ID (problem+json): new on every request
                assert isinstance(a[k], str) and isinstance(b[k], str) and a[k], where
                continue
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), (where, a, b)
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.op_id}-{c.status}-{c.name}" for c in CASES])
def test_recorded_example_is_still_the_answer(clients: dict[Any, TestClient], case: Any) -> None:
    recorded = recorded_examples()[case.op_id][str(case.status)][case.name]
    live = answer(case, clients[case.app_key])
    _same(live, recorded["response"], case.op_id)


def test_operator_example_entries_are_in_the_live_list(clients: dict[Any, TestClient]) -> None:
    (ex,) = recorded_examples()["listOperators"]["200"].values()
    live = clients[(1, None)].get("/v1/operators").json()["operators"]
    assert ex["response"]["operators"] and all(o in live for o in ex["response"]["operators"])


def test_operation_ids_are_stable(spec: dict[str, Any]) -> None:
    ids = {(p, m): op["operationId"] for p, ops in spec["paths"].items() for m, op in ops.items()}
    for key, op_id in OPERATION_IDS.items():
        assert ids[key] == op_id
    assert {"gradientsOp", "gradientsNet", "verify", "run", "listOperators"} <= set(ids.values())
    assert all(re.fullmatch(r"[a-z][A-Za-z0-9]*", i) for i in ids.values()), ids
    assert camel_operation_id({"operationId": "create_job_v1_jobs_post"}, "/v1/jobs",
                              "post") == "createJob"
    assert camel_operation_id({"operationId": "get_job_v1_jobs__job_id__get"},
                              "/v1/jobs/{job_id}", "get") == "getJob"


def test_every_status_is_documented_with_a_problem_and_503_retry_after(
        spec: dict[str, Any]) -> None:
    for path, ops in spec["paths"].items():
        for op in ops.values():
            responses = op["responses"]
            assert {"500", "503"} <= set(responses), path
            assert any(s.startswith("2") for s in responses), path
            assert "Retry-After" in responses["503"]["headers"]
            for status, resp in responses.items():
                assert resp["description"].strip(), (path, status)
                if not status.startswith("2"):
                    assert "application/problem+json" in resp["content"], (path, status)
            if "requestBody" in op:
                assert {"400", "406", "413", "415", "422"} <= set(responses), path


def test_every_response_example_is_recorded_not_a_placeholder(spec: dict[str, Any]) -> None:
    recorded = recorded_examples()
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            if (path, method) not in OPERATION_IDS:
                continue  # a route of another feature: give it an entry and a recorded case
            assert op["operationId"] in recorded, path
            for status, by_name in recorded[op["operationId"]].items():
                content = op["responses"][status]["content"]
                media = "application/json" if status == "200" else "application/problem+json"
                shown = {k: v["value"] for k, v in content[media]["examples"].items()}
                assert shown == {k: v["response"] for k, v in by_name.items()}
    assert '"UNDEFINED"' not in str(recorded)


def test_binary_types_are_not_offered_to_swagger_but_described(spec: dict[str, Any]) -> None:
    for path, ops in spec["paths"].items():
        for op in ops.values():
            media = set(op.get("requestBody", {}).get("content", {}))
            for resp in op["responses"].values():
                media |= set(resp.get("content", {}))
            assert not media & {"application/protobuf", "application/x-protobuf"}, path
            if "requestBody" in op:
                assert "application/protobuf" in op["description"], path


def test_no_bare_angle_words_for_redoc_to_swallow(spec: dict[str, Any]) -> None:
    texts: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("description", "summary") and isinstance(v, str):
                    texts.append(v)
                elif k not in ("example", "examples"):
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(spec)
    for text in texts:
        outside = re.sub(r"(`+).+?\1", "", text, flags=re.S)
        assert not re.search(r"<[A-Za-z_]\w*>", outside), text
    assert escape_markdown("seed `<y>_autogen_grad` of <y>") == \
        "seed `<y>_autogen_grad` of &lt;y&gt;"


def test_every_property_in_the_document_is_described(spec: dict[str, Any]) -> None:
    missing: list[str] = []
    for name, schema in spec["components"]["schemas"].items():
        for prop, sub in schema.get("properties", {}).items():
            if not str(sub.get("description", "")).strip():
                missing.append(f"{name}.{prop}")
    assert missing == []


def test_redoc_page_and_script_are_local(clients: dict[Any, TestClient]) -> None:
    c = clients[(1, None)]
    page = c.get("/redoc")
    assert page.status_code == 200
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert assets and all(a.startswith("/") for a in assets), assets
    for asset in assets:
        r = c.get(asset)
        assert r.status_code == 200, asset
        assert "cdn.redoc.ly" not in r.text and "fonts.googleapis" not in r.text


def test_500_example_is_what_the_last_resort_handler_writes(spec: dict[str, Any]) -> None:
    app = create_app(Settings(workers=0))

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("a bug")

    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.get("/boom")
    assert r.status_code == 500
    for ops in spec["paths"].values():
        for op in ops.values():
            content = op["responses"]["500"]["content"]["application/problem+json"]
            (shown,) = content["examples"].values()
            _same(r.json(), shown["value"], "500")


def test_the_document_is_the_same_bytes_for_every_request_and_app() -> None:
    # It is built on the first request for it; nothing of that request may leak into it
    # (the 500 example once carried that request's ID).
    texts = []
    for _ in range(2):
        with TestClient(create_app(Settings(workers=0))) as c:
            texts.append(c.get("/openapi.json").content)
            texts.append(c.get("/openapi.json").content)
    assert len(set(texts)) == 1
    assert "urn:netgrad:request:" in texts[0].decode()
