"""An asynchronous job that finds every worker busy waits and tries again (it is queued),
instead of failing with the 503 a synchronous request gets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from api_schemas import netgrad_pb2
from app.api import docs, job_work, wire
from app.api.job_work import JobConfig
from app.api.negotiation import Body, Media
from core.errors import QueueTimeoutError
from core.executor.backends import PoolBackend
from core.executor.limits import RunLimits
from core.executor.pool import WorkerPool
from core.ir.env import GenLimits


class _BusyFirst:
    """A backend whose first ``busy`` calls find every worker busy."""

    def __init__(self, inner: PoolBackend, busy: int) -> None:
        self.inner, self.busy, self.calls = inner, busy, 0
        self.size, self.limits = inner.size, inner.limits

    def _turn(self) -> None:
        self.calls += 1
        if self.calls <= self.busy:
            raise QueueTimeoutError("all 1 execution workers stayed busy for 30.0 s")

    def submit(self, fn: Any, *args: Any) -> Any:
        self._turn()
        return self.inner.submit(fn, *args)

    def map(self, fn: Any, args_list: Any, **kw: Any) -> Any:
        self._turn()
        return self.inner.map(fn, args_list, **kw)


@pytest.fixture(scope="module")
def pool() -> Iterator[PoolBackend]:
    with WorkerPool(1, RunLimits(wall_clock_s=30.0)) as p:
        yield PoolBackend(p)


CONFIG = JobConfig(GenLimits(), 10**6, RunLimits(wall_clock_s=30.0), 0, 1.0)


def _run_request() -> bytes:
    body = Body(b"", Media.JSON, Media.JSON, "application/json", json.dumps(docs.RUN_REQUEST))
    return wire.decode(body, netgrad_pb2.RunRequest, 64).SerializeToString()


def test_a_busy_pool_is_waited_for_then_the_job_is_done(pool: PoolBackend,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(job_work, "BUSY_RETRY_S", 0.05)
    flaky = _BusyFirst(pool, busy=3)
    status, payload = job_work.job_work("run", _run_request(), CONFIG, flaky,  # type: ignore[arg-type]
                                        lambda d, t: None, lambda: False)
    assert status == "done" and flaky.calls > 3
    _, same = job_work.job_work("run", _run_request(), CONFIG, pool, lambda d, t: None,
                                lambda: False)
    assert payload == same  # the answer is the one an idle pool gives


def test_busy_for_longer_than_the_wait_is_a_503_problem(pool: PoolBackend,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(job_work, "BUSY_RETRY_S", 0.05)
    monkeypatch.setattr(job_work, "BUSY_WAIT_S", 0.3)
    status, payload = job_work.job_work("run", _run_request(), CONFIG,
                                        _BusyFirst(pool, busy=10**6),  # type: ignore[arg-type]
                                        lambda d, t: None, lambda: False)
    problem = netgrad_pb2.Problem.FromString(payload)
    assert status == "failed" and problem.status == 503
    assert problem.type.endswith("workers_busy")


def test_a_cancel_while_waiting_for_workers_cancels(pool: PoolBackend,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(job_work, "BUSY_RETRY_S", 5.0)
    flaky = _BusyFirst(pool, busy=10**6)
    status, _ = job_work.job_work("run", _run_request(), CONFIG, flaky,  # type: ignore[arg-type]
                                  lambda d, t: None, lambda: flaky.calls >= 1)
    assert status == "cancelled" and flaky.calls == 1
