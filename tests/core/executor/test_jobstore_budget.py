"""The byte budget of the job store (``max_bytes``, ``NETGRAD_JOB_STORE_BYTES``).

Finished results were kept for their whole time to live whatever their size, so one key
could pin gigabytes (review, stop 23). Above the budget the oldest results of the owner
holding the most bytes are dropped early, never the result that just finished.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api import docs
from app.main import create_app
from app.settings import Settings
from core.executor.jobstore import FINAL, JobRecord, LocalJobs


def _work(kind: str, request: bytes, config: Any, backend: Any, progress: Any,
          cancelled: Any) -> tuple[str, bytes]:
    return "done", request  # the answer is the request: its size is the test's to pick


def _final(store: LocalJobs, jid: str) -> JobRecord:
    deadline = time.monotonic() + 10
    while True:
        rec = store.get(jid)
        assert rec is not None, jid
        if rec.status in FINAL:
            return rec
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_the_owner_holding_most_loses_its_oldest_result_first() -> None:
    store = LocalJobs(None, _work, None, ttl_s=60.0, max_jobs=50, threads=1,  # type: ignore[arg-type]
                      max_bytes=100)
    try:
        a1 = store.submit("run", b"a" * 40, "alice")
        _final(store, a1.id)
        b1 = store.submit("run", b"b" * 30, "bob")
        _final(store, b1.id)
        a2 = store.submit("run", b"A" * 40, "alice")  # 110 bytes: alice holds 80
        _final(store, a2.id)
        assert store.get(a1.id) is None  # alice's oldest went
        assert store.get(b1.id) is not None and store.get(a2.id) is not None
        b2 = store.submit("run", b"B" * 60, "bob")  # 130: bob holds 90, loses b1 only
        assert _final(store, b2.id).payload == b"B" * 60  # the fresh result stays
        assert store.get(b1.id) is None and store.get(a2.id) is not None
        assert store._records.bytes == 100
    finally:
        store.close()


def test_without_a_budget_results_stay_until_they_expire() -> None:
    store = LocalJobs(None, _work, None, ttl_s=60.0, max_jobs=50, threads=1)  # type: ignore[arg-type]
    try:
        ids = [store.submit("run", bytes(1000), None).id for _ in range(5)]
        assert all(_final(store, j).status == "done" for j in ids)
        assert store._records.bytes == 5000
    finally:
        store.close()


@pytest.fixture(scope="module")
def small_store() -> Any:
    settings = Settings(workers=1, job_timeout_s=20.0, executor="pool", job_store_bytes=200)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def test_a_result_larger_than_the_budget_fails_its_job(small_store: TestClient) -> None:
    r = small_store.post("/v1/jobs", json={"run": docs.RUN_REQUEST})
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 60
    while (body := small_store.get(r.headers["location"]).json())["status"] in (
            "queued", "running"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert body["status"] == "failed", body
    err = body["error"]
    assert err["type"].endswith(":result_too_large") and err["status"] == 422
    assert [e["code"] for e in err["errors"]] == ["result_too_large"]
    assert "NETGRAD_JOB_STORE_BYTES" in err["detail"] and "synchronous route" in err["detail"]
