"""``/livez``, ``/readyz`` and ``/healthz``: readiness follows the worker pool."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable

from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.api.helpers import assert_problem


def _until(check: Callable[[], bool], timeout: float = 60.0) -> float:
    """Seconds until ``check()`` held (polled every 20 ms); fails after ``timeout``."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < timeout, "condition not reached in time"
        time.sleep(0.02)
    return time.monotonic() - start


def test_readyz_is_503_while_workers_start_and_after_all_are_killed() -> None:
    with TestClient(create_app(Settings(workers=2)), raise_server_exceptions=False) as c:
        # Workers are processes importing NumPy and the kernels: not ready at once.
        first = c.get("/readyz")
        body = assert_problem(first, 503, "not_ready")
        assert re.search(r"[01] of 2 execution workers ready", body["detail"]), body
        assert first.headers["retry-after"] == "1"
        assert c.get("/livez").status_code == 200  # alive all the same
        _until(lambda: c.get("/readyz").status_code == 200)
        ready = c.get("/readyz").json()
        assert ready["status"] == "ready" and ready["workers"] == 2

        pool = c.app.state.pool  # type: ignore[attr-defined]
        old = set(pool.pids())
        for pid in old:  # the workers this test's app started
            os.kill(pid, signal.SIGKILL)
        # Not ready until the keeper has replaced both and they have started.
        _until(lambda: c.get("/readyz").status_code == 503, timeout=10)
        assert_problem(c.get("/readyz"), 503, "not_ready")
        _until(lambda: c.get("/readyz").status_code == 200)
        assert set(pool.pids()).isdisjoint(old) and len(pool.pids()) == 2
        assert c.get("/livez").status_code == 200


def test_readyz_without_workers_by_configuration_is_ready(client: TestClient) -> None:
    r = client.get("/readyz")
    assert r.status_code == 200 and r.json()["status"] == "ready"


def test_healthz_stays_an_alias_of_livez(client: TestClient) -> None:
    live, health = client.get("/livez"), client.get("/healthz")
    assert live.status_code == health.status_code == 200
    assert live.json() == health.json() == {"status": "ok", "version": live.json()["version"],
                                            "workers": 0}


def test_probes_are_in_the_openapi_document(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/livez", "/readyz", "/healthz", "/metrics"} <= set(paths)
    assert "503" in paths["/readyz"]["get"]["responses"]


def test_probes_answer_head(client: TestClient) -> None:
    # uptime checkers and load balancers send HEAD (it was a 405)
    for path in ("/livez", "/readyz", "/healthz"):
        r = client.head(path)
        assert r.status_code == 200, path
        assert r.headers["content-type"] == "application/json" and r.content == b""
    paths = client.get("/openapi.json").json()["paths"]
    assert "head" not in paths["/livez"]
