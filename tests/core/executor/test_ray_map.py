"""RayBackend.map without a cluster: shared arguments are put once, tasks go in a window.

A stand-in for the ``ray`` module runs each task at once in this process and records what
the backend asked of it; the Ray tests in ``tests/distributed`` run the same code on a real
cluster.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from core.errors import InvalidRequestError
from core.executor import backends
from core.executor.backends import RAY_IN_FLIGHT_PER_CPU, RayBackend, _resolve, _Shared
from core.executor.limits import RunLimits


class _Ref:
    def __init__(self, value: Any) -> None:
        self.value = value


class _FakeRay:
    def __init__(self) -> None:
        self.puts: list[Any] = []
        self.largest_wait = 0
        self.cancelled = 0

    def put(self, value: Any) -> _Ref:
        self.puts.append(value)
        return _Ref(value)

    def get(self, ref: Any) -> Any:
        if isinstance(ref, list):
            return [r.value for r in ref]
        return ref.value

    def wait(self, pending: list[Any], num_returns: int, timeout: float) -> tuple[list, list]:
        self.largest_wait = max(self.largest_wait, len(pending))
        return pending[:num_returns], pending[num_returns:]

    def cancel(self, ref: Any, force: bool) -> None:
        self.cancelled += 1


def _backend(fake: _FakeRay, cpus: int) -> RayBackend:
    b = object.__new__(RayBackend)
    b._ray = fake
    b.limits = RunLimits()
    b.size = cpus
    b.queue_timeout_s = 30.0

    class _Task:
        @staticmethod
        def remote(fn: Any, args: tuple[Any, ...], limits: RunLimits) -> _Ref:
            real = tuple(fake.get(a.ref) if isinstance(a, _Shared) else a for a in args)
            try:
                return _Ref(("ok", fn(*real)))
            except InvalidRequestError as exc:
                return _Ref(("netgrad", type(exc).__module__, type(exc).__qualname__,
                             exc.message, list(exc.problems)))

    b._task = _Task()
    return b


def _weighted(weights: np.ndarray, tag: str, k: int) -> float:
    if k < 0:
        raise InvalidRequestError(f"job {k} refused")
    return float(weights.sum()) + k


def test_an_argument_shared_by_all_jobs_is_put_once() -> None:
    fake = _FakeRay()
    weights = np.arange(1000.0)
    out = _backend(fake, 2).map(_weighted, [(weights, "w", k) for k in range(50)])
    assert out == [float(weights.sum()) + k for k in range(50)]
    assert len(fake.puts) == 1 and fake.puts[0] is weights  # not one copy per task


def test_arguments_of_one_job_only_travel_by_value() -> None:
    calls = _backend(_FakeRay(), 2)._shared([(np.zeros(3), "a", 1), (np.ones(3), "a", 2)])
    assert not any(isinstance(a, _Shared) for args in calls for a in args)
    assert _resolve(calls[0]) is calls[0]  # nothing to fetch


def test_at_most_a_window_of_tasks_is_in_flight() -> None:
    fake = _FakeRay()
    done: list[int] = []
    _backend(fake, 3).map(_weighted, [(np.ones(2), "w", k) for k in range(40)],
                          on_done=lambda d, t: done.append(d))
    assert fake.largest_wait == RAY_IN_FLIGHT_PER_CPU * 3
    assert done == list(range(1, 41))


def test_a_failed_job_stops_submitting_and_raises_its_error() -> None:
    fake = _FakeRay()
    args = [(np.ones(2), "w", k) for k in range(10)] + [(np.ones(2), "w", -1)]
    args += [(np.ones(2), "w", k) for k in range(10, 40)]
    with pytest.raises(InvalidRequestError, match="job -1 refused"):
        _backend(fake, 2).map(_weighted, args)
    assert fake.largest_wait <= RAY_IN_FLIGHT_PER_CPU * 2


def test_the_driver_environment_keeps_a_value_already_set(
        monkeypatch: pytest.MonkeyPatch) -> None:
    key = next(iter(backends.RAY_DRIVER_ENV))
    monkeypatch.delenv(key, raising=False)
    backends.ray_driver_environment()
    import os

    assert os.environ[key] == backends.RAY_DRIVER_ENV[key]
    monkeypatch.setenv(key, "1234")
    backends.ray_driver_environment()
    assert os.environ[key] == "1234"


def test_only_a_lost_worker_is_retried_not_a_job_error_mentioning_a_crash() -> None:
    from core.errors import ExecutionError, WorkerLostError

    assert backends._crashed(WorkerLostError("execution worker crashed after 0.1 s"))
    # a job's own error is the job's answer, even when its text says "crashed"
    assert not backends._crashed(ExecutionError("blob 'crashed' could not start an execution"))
    assert not backends._crashed(InvalidRequestError("input 'crashed' is missing"))
