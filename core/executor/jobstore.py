"""Asynchronous jobs: submit, poll, cancel; results kept until a time-to-live after the end.

A job is a verification or a run request that outlives the HTTP request that made it. The
store runs ``work(kind, request, config, backend, progress, cancelled)`` - a picklable
top-level function supplied by the HTTP layer, which decodes the request, calls the engine
and returns ``("done", answer bytes)`` or ``("failed", problem bytes)`` - and keeps the
record (status, progress, payload):

* :class:`LocalJobs` (``NETGRAD_EXECUTOR=pool``): threads of this process; jobs live as long
  as the process.
* :class:`RayJobs` (``NETGRAD_EXECUTOR=ray``): a detached Ray actor holds the records and
  starts one driver task per job, so the work and its result live in the Ray cluster and
  outlive the API replica that took the job; any replica can answer for any job.

Statuses: ``queued`` -> ``running`` -> ``done`` | ``failed`` | ``cancelled``. Cancelling is
cooperative: the job stops before its next executor job (a fanned-out check between chunks;
on Ray the chunk tasks not yet finished are cancelled). A finished record expires ``ttl_s``
seconds after it finished; a record of an unknown or expired id is ``None``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from core.errors import BusyError
from core.executor.backends import Backend, Cancelled, Progress

STATUSES = ("queued", "running", "done", "failed", "cancelled")
FINAL = frozenset({"done", "failed", "cancelled"})
#: Name and namespace of the detached actor that keeps the jobs of a Ray cluster.
STORE_NAME = "netgrad-jobs"

#: ``work(kind, request, config, backend, progress, cancelled) -> (status, payload)``.
JobWork = Callable[[str, bytes, Any, Backend, Progress, Cancelled], tuple[str, bytes]]


@dataclass(frozen=True)
class JobRecord:
    """The state of one job.

    Attributes:
        id: random hex id.
        kind: ``"verify"`` or ``"run"``.
        status: one of :data:`STATUSES`.
        done, total: executor jobs finished / in all (0 / 0 before it runs).
        payload: ``done``: the serialized answer; ``failed``: the serialized problem.
        finished: ``time.time()`` when it reached a final status (``None`` before).
    """

    id: str
    kind: str
    status: str = "queued"
    done: int = 0
    total: int = 0
    payload: bytes = b""
    finished: float | None = None


def _new_id() -> str:
    return uuid.uuid4().hex


class _Records:
    """Records with expiry (``ttl_s`` after the end) and a cap on the records kept."""

    def __init__(self, ttl_s: float, max_jobs: int) -> None:
        self.ttl_s = ttl_s
        self.max_jobs = max_jobs
        self.jobs: dict[str, JobRecord] = {}
        self.cancelled: set[str] = set()

    def sweep(self) -> None:
        now = time.time()
        for jid in [j for j, r in self.jobs.items()
                    if r.finished is not None and now - r.finished > self.ttl_s]:
            del self.jobs[jid]
            self.cancelled.discard(jid)

    def add(self, kind: str) -> JobRecord:
        self.sweep()
        if len(self.jobs) >= self.max_jobs:
            raise BusyError(f"{self.max_jobs} jobs are kept already (NETGRAD_MAX_JOBS); "
                            "retry when some have expired")
        rec = JobRecord(_new_id(), kind)
        self.jobs[rec.id] = rec
        return rec

    def update(self, jid: str, **changes: Any) -> JobRecord | None:
        rec = self.jobs.get(jid)
        if rec is None or rec.status in FINAL:
            return rec
        if changes.get("status") in FINAL:
            changes["finished"] = time.time()
        rec = self.jobs[jid] = replace(rec, **changes)
        return rec

    def cancel(self, jid: str) -> JobRecord | None:
        self.sweep()
        rec = self.jobs.get(jid)
        if rec is not None and rec.status not in FINAL:
            self.cancelled.add(jid)
            rec = self.update(jid, status="cancelled")
        return rec


class LocalJobs:
    """Jobs run by threads of this process on ``backend`` (the pool).

    Args:
        backend: the executor the jobs' numeric work runs on.
        work: the job function (see the module docstring).
        config: passed to ``work`` (limits of the service).
        ttl_s: seconds a finished job stays retrievable.
        max_jobs: most job records kept (503 ``workers_busy`` above).
        threads: jobs that run at once (more wait as ``queued``).
    """

    def __init__(self, backend: Backend, work: JobWork, config: Any, *, ttl_s: float,
                 max_jobs: int = 1000, threads: int = 2) -> None:
        self.backend = backend
        self.work = work
        self.config = config
        self._records = _Records(ttl_s, max_jobs)
        self._lock = threading.Lock()
        self._threads = ThreadPoolExecutor(max_workers=max(1, threads),
                                           thread_name_prefix="netgrad-job")

    @property
    def ttl_s(self) -> float:
        """Seconds a finished job stays retrievable."""
        return self._records.ttl_s

    def submit(self, kind: str, request: bytes) -> JobRecord:
        """Queue a job; its record (status ``queued``).

        Raises:
            BusyError: too many records kept.
        """
        with self._lock:
            rec = self._records.add(kind)
        self._threads.submit(self._run, rec.id, kind, request)
        return rec

    def _run(self, jid: str, kind: str, request: bytes) -> None:
        with self._lock:
            rec = self._records.update(jid, status="running")
        if rec is None or rec.status != "running":
            return

        def progress(done: int, total: int) -> None:
            with self._lock:
                self._records.update(jid, done=done, total=total)

        def cancelled() -> bool:
            with self._lock:
                return jid in self._records.cancelled

        status, payload = self.work(kind, request, self.config, self.backend, progress,
                                    cancelled)
        with self._lock:
            self._records.update(jid, status=status, payload=payload)

    def get(self, jid: str) -> JobRecord | None:
        """The record of ``jid``, or ``None`` (unknown or expired)."""
        with self._lock:
            self._records.sweep()
            return self._records.jobs.get(jid)

    def cancel(self, jid: str) -> JobRecord | None:
        """Cancel ``jid`` unless it finished; its record, or ``None`` (unknown or expired)."""
        with self._lock:
            return self._records.cancel(jid)

    def close(self) -> None:
        """Stop taking jobs; running ones are asked to stop."""
        with self._lock:
            self._records.cancelled.update(self._records.jobs)
        self._threads.shutdown(wait=False, cancel_futures=True)


# --- Ray ------------------------------------------------------------------------------------
class RayStore:
    """Body of the detached actor that keeps the jobs of a Ray cluster (see :class:`RayJobs`)."""

    def __init__(self, ttl_s: float, max_jobs: int) -> None:
        self.records = _Records(ttl_s, max_jobs)
        self.drivers: dict[str, list[Any]] = {}

    def submit(self, kind: str, request: bytes, work: JobWork, config: Any) -> JobRecord:
        import ray

        rec = self.records.add(kind)
        driver = ray.remote(_ray_driver).options(num_cpus=0, max_retries=0)
        namespace = ray.get_runtime_context().namespace
        self.drivers[rec.id] = [driver.remote(rec.id, kind, request, work, config, namespace)]
        return rec

    def start(self, jid: str) -> bool:
        rec = self.records.update(jid, status="running")
        return rec is not None and rec.status == "running"

    def progress(self, jid: str, done: int, total: int) -> None:
        self.records.update(jid, done=done, total=total)

    def finish(self, jid: str, status: str, payload: bytes) -> None:
        self.records.update(jid, status=status, payload=payload)
        self.drivers.pop(jid, None)

    def is_cancelled(self, jid: str) -> bool:
        return jid in self.records.cancelled

    def get(self, jid: str) -> JobRecord | None:
        import ray

        self.records.sweep()
        rec = self.records.jobs.get(jid)
        ref = self.drivers.get(jid)
        if rec is not None and ref is not None and rec.status not in FINAL:
            ready, _ = ray.wait(ref, timeout=0)
            if ready:  # the driver ended without reporting: it died
                try:
                    ray.get(ready[0])
                except Exception as exc:
                    self.finish(jid, "failed", repr(exc)[:500].encode())
                rec = self.records.jobs.get(jid)
        for j in [j for j in self.drivers if j not in self.records.jobs]:
            del self.drivers[j]
        return rec

    def cancel(self, jid: str) -> JobRecord | None:
        return self.records.cancel(jid)


def _ray_driver(jid: str, kind: str, request: bytes, work: JobWork, config: Any,
                namespace: str) -> None:
    """Ray task of one job: run ``work`` on a :class:`RayBackend`, report to the store."""
    import ray

    from core.executor.backends import RayBackend

    store = ray.get_actor(STORE_NAME, namespace=namespace)
    if not ray.get(store.start.remote(jid)):
        return
    backend = RayBackend(None, config.run_limits, task_memory_bytes=config.ray_task_memory,
                         queue_timeout_s=config.queue_timeout_s)
    last = [0.0]

    def cancelled() -> bool:
        now = time.monotonic()
        if now - last[0] < 0.5:
            return False
        last[0] = now
        return bool(ray.get(store.is_cancelled.remote(jid)))

    def progress(done: int, total: int) -> None:
        store.progress.remote(jid, done, total)

    status, payload = work(kind, request, config, backend, progress, cancelled)
    ray.get(store.finish.remote(jid, status, payload))


class RayJobs:
    """Jobs kept and run in a Ray cluster: a detached actor ``netgrad-jobs`` holds the
    records and owns one driver task per job, so jobs and results outlive this process.

    Args:
        backend: a connected :class:`~core.executor.backends.RayBackend`.
        work, config, ttl_s, max_jobs: as for :class:`LocalJobs` (``config`` must carry
            ``run_limits``, ``ray_task_memory`` and ``queue_timeout_s``).

    The actor is created by the first replica (``get_if_exists``); its ``ttl_s`` and
    ``max_jobs`` are the creator's.
    """

    def __init__(self, backend: Any, work: JobWork, config: Any, *, ttl_s: float,
                 max_jobs: int = 1000) -> None:
        import ray

        self.ttl_s = ttl_s
        self.work = work
        self.config = config
        self._actor = ray.remote(RayStore).options(
            name=STORE_NAME, namespace=backend.namespace, lifetime="detached",
            get_if_exists=True, num_cpus=0, max_restarts=0,
        )
        self._max_jobs = max_jobs
        self._store = self._actor.remote(ttl_s, max_jobs)
        self._ray = ray

    def _call(self, method: str, *args: Any) -> Any:
        try:
            return self._ray.get(getattr(self._store, method).remote(*args), timeout=30)
        except self._ray.exceptions.RayActorError:
            # the store died (its jobs with it): a new one serves the jobs from now on
            self._store = self._actor.remote(self.ttl_s, self._max_jobs)
            return self._ray.get(getattr(self._store, method).remote(*args), timeout=30)

    def submit(self, kind: str, request: bytes) -> JobRecord:
        """Queue a job in the cluster; its record (``BusyError`` when too many are kept)."""
        try:
            rec: JobRecord = self._call("submit", kind, request, self.work, self.config)
        except self._ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, BusyError):
                raise BusyError(cause.message) from None
            raise
        return rec

    def get(self, jid: str) -> JobRecord | None:
        """The record of ``jid``, or ``None`` (unknown or expired)."""
        rec: JobRecord | None = self._call("get", jid)
        return rec

    def cancel(self, jid: str) -> JobRecord | None:
        """Cancel ``jid`` unless it finished; its record, or ``None``."""
        rec: JobRecord | None = self._call("cancel", jid)
        return rec

    def close(self) -> None:
        """Nothing to stop: the jobs live in the cluster."""


__all__ = ["FINAL", "STATUSES", "STORE_NAME", "JobRecord", "JobWork", "LocalJobs", "RayJobs"]
