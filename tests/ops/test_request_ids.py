"""Request IDs: echoed on 200, 4xx and 5xx, in problem documents, and in the JSON access log."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from app.api import docs
from app.main import create_app
from app.settings import Settings
from tests.api.helpers import assert_problem
from tests.ops.server import serve

BAD_OP = {"op": {"type": "Relu", "input": ["x"], "output": ["y"]}, "g_output": []}


def test_client_id_is_echoed_on_200_4xx_and_5xx(client: TestClient) -> None:
    ok = client.post("/v1/gradients/op", json=docs.DO_REQUEST, headers={"X-Request-ID": "a-1"})
    assert ok.status_code == 200 and ok.headers["x-request-id"] == "a-1"
    bad = client.post("/v1/gradients/op", json=BAD_OP, headers={"X-Request-ID": "a-2"})
    body = assert_problem(bad, 400)
    assert bad.headers["x-request-id"] == "a-2"
    assert body["instance"] == "urn:netgrad:request:a-2"
    # No workers: verification is a 503.
    unavailable = client.post("/v1/verify", json=docs.VERIFY_REQUEST,
                              headers={"X-Request-ID": "a-3"})
    assert_problem(unavailable, 503, "verify_unavailable")
    assert unavailable.headers["x-request-id"] == "a-3"
    missing = client.get("/nowhere", headers={"X-Request-ID": "a-4"})
    assert missing.status_code == 404 and missing.headers["x-request-id"] == "a-4"


def test_an_unexpected_500_carries_the_id(monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(*_: Any, **__: Any) -> None:
        raise RuntimeError("simulated bug")

    monkeypatch.setattr("app.api.routes.gradients.api.gradient_for_op", explode)
    with TestClient(create_app(Settings(workers=0)), raise_server_exceptions=False) as c:
        r = c.post("/v1/gradients/op", json=docs.DO_REQUEST, headers={"X-Request-ID": "boom-1"})
    body = assert_problem(r, 500, "internal_error")
    assert r.headers["x-request-id"] == "boom-1"
    assert body["instance"] == "urn:netgrad:request:boom-1"


def test_an_id_is_made_when_none_or_an_unsafe_one_is_sent(client: TestClient) -> None:
    made = client.get("/livez").headers["x-request-id"]
    assert len(made) == 32 and int(made, 16) >= 0
    for unsafe in ("has space", "x" * 129, "semi;colon"):
        got = client.get("/livez", headers={"X-Request-ID": unsafe}).headers["x-request-id"]
        assert got != unsafe and len(got) == 32


def _access(records: list[dict[str, Any]], rid: str) -> dict[str, Any]:
    lines = [r for r in records if r.get("logger") == "netgrad.access"
             and r.get("request_id") == rid]
    assert len(lines) == 1, (rid, lines)
    return lines[0]


def test_json_access_log_has_one_line_per_request_with_its_id(tmp_path: Path) -> None:
    with serve(tmp_path, {"NETGRAD_LOG_FORMAT": "json"}) as server:
        data = json.dumps(docs.NET_REQUEST).encode()
        ok = httpx.post(server.url + "/v1/gradients/net", content=data, timeout=30,
                        headers={"X-Request-ID": "log-200", "Content-Type": "application/json"})
        bad = httpx.post(server.url + "/v1/gradients/op", json=BAD_OP, timeout=30,
                         headers={"X-Request-ID": "log-400"})
        busy = httpx.post(server.url + "/v1/verify", json=docs.VERIFY_REQUEST, timeout=30,
                          headers={"X-Request-ID": "log-503"})
        assert [ok.status_code, bad.status_code, busy.status_code] == [200, 400, 503]
        assert [r.headers["x-request-id"] for r in (ok, bad, busy)] == [
            "log-200", "log-400", "log-503"]
        time.sleep(0.5)  # the line is written right after the answer
        records = server.log_records()
    line = _access(records, "log-200")
    assert line["method"] == "POST" and line["route"] == "/v1/gradients/net"
    assert line["status"] == 200 and line["latency_ms"] > 0
    assert line["bytes_in"] == len(data) and line["bytes_out"] == len(ok.content)
    assert line["op_count"] == len(docs.NET_REQUEST["net"]["op"])
    assert {"time", "level", "pid", "message"} <= set(line)
    assert _access(records, "log-400")["status"] == 400
    assert _access(records, "log-503")["status"] == 503
    # Every JSON line carries a request_id field ("-" outside a request).
    assert all("request_id" in r for r in records)


def test_text_log_format(tmp_path: Path) -> None:
    with serve(tmp_path, {"NETGRAD_LOG_FORMAT": "text"}) as server:
        httpx.get(server.url + "/livez", headers={"X-Request-ID": "txt-1"}, timeout=30)
        time.sleep(0.5)
        text = server.log_path.read_text()
    line = next(ln for ln in text.splitlines() if "txt-1" in ln)
    assert not line.startswith("{") and "netgrad.access" in line and "GET /livez 200" in line
