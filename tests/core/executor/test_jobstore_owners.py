"""Job owners in the thread job store (:class:`core.executor.jobstore.LocalJobs`): another
owner's job is an unknown id, an owner's queued + running jobs are counted against its
allowance until they end (done, failed, cancelled, or the work died), and records pickled
before owners existed read back without one."""

from __future__ import annotations

import pickle
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from core.executor.jobstore import FINAL, JobRecord, LocalJobs, OwnerLimitError, visible

#: Jobs whose request is ``b"hold"`` run until this is set (per test, see ``store``).
_release = threading.Event()


def _work(kind: str, request: bytes, config: Any, backend: Any, progress: Any,
          cancelled: Any) -> tuple[str, bytes]:
    """``hold``: until released or cancelled; ``fail``: a failed job; ``die``: the work
    raises (a bug); else done with the request as the answer."""
    if request == b"hold":
        while not _release.is_set() and not cancelled():
            time.sleep(0.01)
        return ("cancelled", b"") if cancelled() else ("done", b"held")
    if request == b"fail":
        return "failed", b"problem"
    if request == b"die":
        raise RuntimeError("the work died")
    return "done", request


@pytest.fixture
def store() -> Iterator[LocalJobs]:
    _release.clear()
    jobs = LocalJobs(None, _work, None, ttl_s=60.0, max_jobs=50, threads=1)  # type: ignore[arg-type]
    yield jobs
    _release.set()
    jobs.close()


def _final(store: LocalJobs, jid: str, timeout: float = 10.0) -> JobRecord:
    deadline = time.monotonic() + timeout
    while True:
        rec = store.get(jid)
        assert rec is not None
        if rec.status in FINAL:
            return rec
        assert time.monotonic() < deadline, rec
        time.sleep(0.01)


def test_another_owners_job_is_an_unknown_id(store: LocalJobs) -> None:
    rec = store.submit("run", b"hold", "alice")
    assert rec.owner == "alice"
    assert store.get(rec.id, "bob") is None
    assert store.get(rec.id, "bob") == store.get("no-such-id", "bob")
    assert store.cancel(rec.id, "bob") is None  # and nothing was cancelled
    mine = store.get(rec.id, "alice")
    assert mine is not None and mine.status in ("queued", "running")
    assert store.get(rec.id) is not None  # no owner (no API keys): every job
    cancelled = store.cancel(rec.id, "alice")
    assert cancelled is not None and cancelled.status == "cancelled"


def test_owners_queued_and_running_jobs_count_until_they_end(store: LocalJobs) -> None:
    first = store.submit("run", b"hold", "alice", max_owned=2)  # runs (one thread)
    second = store.submit("run", b"hold", "alice", max_owned=2)  # waits behind it
    with pytest.raises(OwnerLimitError) as info:
        store.submit("run", b"x", "alice", max_owned=2)
    assert info.value.in_flight == 2 and store.in_flight("alice") == 2
    assert store.submit("run", b"x", "bob", max_owned=1).owner == "bob"  # others unaffected
    assert store.in_flight("bob") == 1
    # A cancelled job stops counting at once, queued or running.
    assert store.cancel(second.id, "alice") is not None
    assert store.in_flight("alice") == 1
    store.submit("run", b"x", "alice", max_owned=2)
    with pytest.raises(OwnerLimitError):
        store.submit("run", b"x", "alice", max_owned=2)
    _release.set()  # the rest end: done
    assert _final(store, first.id).status == "done"
    deadline = time.monotonic() + 10
    while store.in_flight("alice") or store.in_flight("bob"):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert store.submit("run", b"x", "alice", max_owned=1).owner == "alice"


def test_failed_and_died_jobs_free_their_slot(store: LocalJobs) -> None:
    failed = store.submit("run", b"fail", "alice", max_owned=1)
    assert _final(store, failed.id).status == "failed"
    assert store.in_flight("alice") == 0
    died = store.submit("run", b"die", "alice", max_owned=1)
    rec = _final(store, died.id)
    assert (rec.status, rec.payload) == ("failed", b"")  # lost: not left running
    assert store.in_flight("alice") == 0
    done = store.submit("run", b"ok", "alice", max_owned=1)
    assert _final(store, done.id).payload == b"ok"


def test_a_zero_allowance_refuses_and_no_owner_is_never_limited(store: LocalJobs) -> None:
    with pytest.raises(OwnerLimitError) as info:  # the key's synchronous requests fill it
        store.submit("run", b"x", "alice", max_owned=0)
    assert info.value.in_flight == 0
    for _ in range(5):
        store.submit("run", b"x")
    assert store.in_flight("alice") == 0


def test_owner_limit_error_pickles() -> None:
    again = pickle.loads(pickle.dumps(OwnerLimitError(3)))  # it crosses Ray
    assert isinstance(again, OwnerLimitError) and again.in_flight == 3


def test_a_record_pickled_before_owners_reads_back_without_one() -> None:
    old = JobRecord.__new__(JobRecord)
    old.__dict__.update(id="j1", kind="run", status="done", done=1, total=1,
                        payload=b"answer", finished=1.0)  # the fields of version 1
    rec = pickle.loads(pickle.dumps(old))
    assert (rec.id, rec.status, rec.payload, rec.owner) == ("j1", "done", b"answer", None)
    assert visible(rec, None) is rec and visible(rec, "alice") is None
