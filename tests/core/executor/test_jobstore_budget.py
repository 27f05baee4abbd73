"""The byte budget of the job store (``max_bytes``, ``NETGRAD_JOB_STORE_BYTES``).

Finished results were kept for their whole time to live whatever their size, so one key
could pin gigabytes (review, stop 23). Above the budget the oldest results of the owner
holding the most bytes are dropped early, never the result that just finished.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api import docs
from app.main import create_app
from app.settings import Settings
from core.errors import BusyError, LimitExceededError
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
        a2 = store.submit("run", b"A" * 40, "alice")  # 110 bytes: alice would hold 80
        _final(store, a2.id)
        assert store.get(a1.id) is None  # alice's oldest went
        assert store.get(b1.id) is not None and store.get(a2.id) is not None
        b2 = store.submit("run", b"B" * 60, "bob")  # 130: bob would hold 90, loses b1 only
        assert _final(store, b2.id).payload == b"B" * 60
        assert store.get(b1.id) is None and store.get(a2.id) is not None
        assert store._records.bytes == 100
    finally:
        store.close()


def test_queued_requests_count_and_fill_the_store() -> None:
    """Queued jobs' requests sat in memory uncounted (review, stop 24: 24 queued 40 MB jobs
    took the server from 77 MB to 1.5 GB); now they count, and only they refuse a job."""
    release = threading.Event()

    def held(kind: str, request: bytes, *rest: Any) -> tuple[str, bytes]:
        release.wait(10)
        return "done", b"r"

    store = LocalJobs(None, held, None, ttl_s=60.0, max_jobs=50, threads=1,  # type: ignore[arg-type]
                      max_bytes=100)
    try:
        first = store.submit("run", bytes(60), "alice")
        with pytest.raises(BusyError) as err:
            store.submit("run", bytes(50), "bob")  # 110 bytes of queued requests
        assert "retry when some have run" in err.value.message
        with pytest.raises(LimitExceededError) as big:
            store.submit("run", bytes(101), "bob")
        assert big.value.problems[0].code == "job_too_large"
        release.set()
        assert _final(store, first.id).payload == b"r"
        assert store._records.bytes == 1
        store.submit("run", bytes(50), "bob")  # room again
    finally:
        release.set()
        store.close()


def test_the_record_cap_drops_finished_records_first() -> None:
    """NETGRAD_MAX_JOBS counted finished records for their whole TTL: max_jobs tiny jobs
    locked everyone out for an hour, with Retry-After: 2 (review, stop 24)."""
    store = LocalJobs(None, _work, None, ttl_s=3600.0, max_jobs=3, threads=1)  # type: ignore[arg-type]
    try:
        done = [store.submit("run", b"x", "mallory").id for _ in range(3)]
        for jid in done:
            _final(store, jid)
        fresh = store.submit("run", b"y", "alice")  # the oldest of mallory's goes
        assert _final(store, fresh.id).payload == b"y"
        assert store.get(done[0]) is None and store.get(done[2]) is not None
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
    # the docs' run request (under 1 500 bytes) fits, its 1 748-byte answer does not
    settings = Settings(workers=1, job_timeout_s=20.0, executor="pool", job_store_bytes=1500)
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
