"""API keys: 401 / 403 / 200, open health, Swagger's security schemes, per-key job limit."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api_schemas import caffe2_pb2
from app import auth, cli
from app.api import docs
from app.main import create_app
from app.settings import Settings
from core.control.lowering import add_while_op
from core.proto import codec
from core.registry import make_arg, make_op
from tests.api.helpers import assert_problem


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    path = tmp_path_factory.mktemp("keys") / "keys.txt"
    return path, auth.add_key(path, "alice", max_jobs=1), auth.add_key(path, "bob")


@pytest.fixture(scope="module")
def keyed(keys: tuple[Path, str, str]) -> Iterator[TestClient]:
    settings = Settings(workers=1, api_keys_file=str(keys[0]), job_timeout_s=1.5,
                        job_max_iterations=10**12)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        deadline = time.monotonic() + 60
        while c.get("/readyz").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        yield c


def test_key_file_stores_only_hashes(keys: tuple[Path, str, str]) -> None:
    path, alice, bob = keys
    text = path.read_text()
    assert alice not in text and bob not in text
    assert auth.digest_of(alice).hex() in text
    assert [k.name for k in auth.parse_keys(text)] == ["alice", "bob"]
    assert path.stat().st_mode & 0o077 == 0  # readable by its owner only


def test_no_key_401_wrong_key_403_right_key_200(
    keyed: TestClient, keys: tuple[Path, str, str]
) -> None:
    _, alice, bob = keys
    url = "/v1/gradients/op"
    missing = keyed.post(url, json=docs.DO_REQUEST)
    assert_problem(missing, 401, "api_key_missing")
    assert missing.headers["www-authenticate"].startswith("Bearer")
    wrong = keyed.post(url, json=docs.DO_REQUEST, headers={"Authorization": "Bearer ng_nope"})
    assert_problem(wrong, 403, "api_key_invalid")
    assert_problem(keyed.post(url, json=docs.DO_REQUEST, headers={"X-API-Key": alice + "x"}),
                   403, "api_key_invalid")
    assert keyed.post(url, json=docs.DO_REQUEST,
                      headers={"Authorization": f"Bearer {alice}"}).status_code == 200
    assert keyed.post(url, json=docs.DO_REQUEST, headers={"X-API-Key": bob}).status_code == 200
    assert_problem(keyed.get("/v1/operators"), 401)


def test_health_metrics_and_docs_stay_open(keyed: TestClient) -> None:
    for path in ("/livez", "/readyz", "/healthz", "/metrics", "/docs", "/openapi.json"):
        assert keyed.get(path).status_code == 200, path


def test_protect_docs_puts_docs_and_metrics_behind_a_key(keys: tuple[Path, str, str]) -> None:
    path, alice, _ = keys
    settings = Settings(workers=0, api_keys_file=str(path), protect_docs=True)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        for p in ("/docs", "/redoc", "/openapi.json", "/metrics"):
            r = c.get(p)
            assert_problem(r, 401, "api_key_missing")
            assert "www-authenticate" in r.headers
            assert_problem(c.get(p, headers={"X-API-Key": "wrong"}), 403)
            assert c.get(p, headers={"Authorization": f"Bearer {alice}"}).status_code == 200
        for p in ("/livez", "/readyz", "/healthz"):
            assert c.get(p).status_code == 200


def test_new_keys_work_without_a_restart(keyed: TestClient, tmp_path: Path,
                                         keys: tuple[Path, str, str]) -> None:
    carol = auth.add_key(keys[0], f"carol{time.monotonic_ns()}")
    assert keyed.get("/v1/operators", headers={"X-API-Key": carol}).status_code == 200


def test_swagger_authorize_and_try_it_out(keyed: TestClient, keys: tuple[Path, str, str]) -> None:
    """What Swagger UI does: read the security schemes, send the key the way the chosen
    scheme says with the operation's example body, and get 200."""
    _, alice, _ = keys
    spec = keyed.get("/openapi.json").json()
    schemes = spec["components"]["securitySchemes"]
    assert schemes["bearer"] == {"type": "http", "scheme": "bearer",
                                 "description": schemes["bearer"]["description"]}
    assert (schemes["apiKey"]["type"], schemes["apiKey"]["in"], schemes["apiKey"]["name"]) == (
        "apiKey", "header", "X-API-Key")
    html = keyed.get("/docs").text
    assert "swagger-ui" in html and "/openapi.json" in html
    tried = 0
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            if not path.startswith("/v1/"):
                assert "security" not in op, path
                continue
            assert {"bearer": []} in op["security"] and {"apiKey": []} in op["security"]
            assert {"401", "403"} <= set(op["responses"]), path
            # 429: per-key job limit or per-client admission; GET /v1/operators has neither
            assert ("429" in op["responses"]) == (op["operationId"] != "listOperators"), path
            if "{" in path:  # /v1/jobs/{job_id}: needs a job made first (tests/api/test_jobs)
                continue
            examples = (op.get("requestBody", {}).get("content", {})
                        .get("application/json", {}).get("examples", {}))
            body = next(iter(examples.values()))["value"] if examples else None
            for scheme in ("bearer", "apiKey"):
                headers = ({"Authorization": f"Bearer {alice}"} if scheme == "bearer"
                           else {"X-API-Key": alice})
                r = keyed.request(method.upper(), path, json=body, headers=headers)
                assert r.status_code in (200, 202), (path, scheme, r.text)
                tried += 1
                if r.status_code == 202:  # a job holds alice's one slot until it ends
                    deadline = time.monotonic() + 60
                    while keyed.get(r.headers["location"], headers=headers).json()[
                            "status"] in ("queued", "running"):
                        assert time.monotonic() < deadline, path
                        time.sleep(0.05)
    assert tried >= 8


def _endless_run() -> dict[str, Any]:
    body = caffe2_pb2.NetDef(name="body")
    body.op.append(make_op("Scale", ["x"], ["x"], [make_arg("scale", 1.0)]))
    net = caffe2_pb2.NetDef(name="forever")
    add_while_op(net, "cond", ["cond", "x"], body)
    return {
        "net": codec.to_json_obj(net),
        "inputs": [
            {"blob": "cond", "tensor": {"shape": [], "dtype": "bool", "data": [1]}},
            {"blob": "x", "tensor": {"shape": [1], "dtype": "float64", "data": [0.5]}},
        ],
        "fetch": ["x"],
    }


def test_per_key_job_limit_is_429_with_retry_after(
    keyed: TestClient, keys: tuple[Path, str, str]
) -> None:
    """alice may have one job in flight: a second one while the first runs is a 429."""
    _, alice, bob = keys
    first: list[int] = []
    t = threading.Thread(target=lambda: first.append(keyed.post(
        "/v1/run", json=_endless_run(), headers={"X-API-Key": alice}).status_code))
    t.start()
    pool = keyed.app.state.pool  # type: ignore[attr-defined]
    deadline = time.monotonic() + 30
    while pool.status().busy == 0:  # until the first job holds the worker (1.5 s limit)
        assert time.monotonic() < deadline
        time.sleep(0.01)
    second = keyed.post("/v1/run", json=docs.RUN_REQUEST, headers={"X-API-Key": alice})
    body = assert_problem(second, 429, "too_many_jobs")
    assert second.headers["retry-after"] == "1"
    assert "alice" in body["detail"]
    t.join(timeout=30)
    assert first == [422]  # stopped by the wall-clock limit
    # The slot is free again, and other keys were never limited by alice's jobs.
    assert keyed.post("/v1/run", json=docs.RUN_REQUEST,
                      headers={"X-API-Key": alice}).status_code == 200
    assert keyed.post("/v1/verify", json=docs.VERIFY_REQUEST,
                      headers={"X-API-Key": bob}).status_code == 200


def test_keys_add_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "k.txt"
    assert cli.main(["keys", "add", "ci-bot", "--file", str(path), "--max-jobs", "3"]) == 0
    key = capsys.readouterr().out.strip()
    assert key.startswith("ng_") and len(key) > 40
    (stored,) = auth.parse_keys(path.read_text())
    assert (stored.name, stored.max_jobs) == ("ci-bot", 3)
    assert auth.KeyRing(path).lookup(key) == stored
    assert key not in path.read_text()
    assert cli.main(["keys", "add", "ci-bot", "--file", str(path)]) == 1  # name taken
    assert "exists already" in capsys.readouterr().err
    assert cli.main(["keys", "add", "bad name", "--file", str(path)]) == 1


def test_an_unreadable_keys_file_refuses_every_key(tmp_path: Path) -> None:
    ring = auth.KeyRing(tmp_path / "absent.txt")
    assert ring.lookup("ng_anything") is None
    bad = tmp_path / "bad.txt"
    bad.write_text("alice not-a-hash\n")
    assert auth.KeyRing(bad).keys() == []
    with pytest.raises(ValueError, match="line 1"):
        auth.parse_keys(bad.read_text())


def test_cors_is_off_by_default_and_on_with_origins(client: TestClient) -> None:
    pre = {"Origin": "https://ui.example", "Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "content-type,x-api-key"}
    assert "access-control-allow-origin" not in client.get(
        "/livez", headers={"Origin": "https://ui.example"}).headers
    assert "access-control-allow-origin" not in client.options(
        "/v1/gradients/op", headers=pre).headers
    settings = Settings(workers=0, cors_origins="https://ui.example, https://b.example")
    with TestClient(create_app(settings)) as c:
        r = c.options("/v1/gradients/op", headers=pre)
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == "https://ui.example"
        assert "x-api-key" in r.headers["access-control-allow-headers"].lower()
        got = c.post("/v1/gradients/op", json=docs.DO_REQUEST,
                     headers={"Origin": "https://ui.example", "X-Request-ID": "cors-1"})
        assert got.headers["access-control-allow-origin"] == "https://ui.example"
        assert "x-request-id" in got.headers["access-control-expose-headers"].lower()
        assert got.headers["x-request-id"] == "cors-1"
        other = c.get("/livez", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers
