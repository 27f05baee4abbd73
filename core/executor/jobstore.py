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
seconds after it finished; a record of an unknown or expired id is ``None``. The results
kept and the requests of jobs not finished hold at most ``max_bytes`` together, and at most
``max_jobs`` records are kept: room is made by dropping finished records early, the oldest
of the owner holding the most first (an owner filling the store evicts its own results
first), never the result that just finished; only jobs queued or running that fill the
store refuse a new one. The job function keeps every single result below the budget.

Owners: a job may be submitted for an ``owner`` (the name of an API key). ``get`` and
``cancel`` given an owner treat another owner's job exactly as an unknown id (``None``);
given none (no API keys) they see every job. ``submit`` with ``max_owned`` refuses
(:class:`OwnerLimitError`) when that owner has that many jobs queued or running already; a
job stops counting once it is final (done, failed, cancelled, or its driver died).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from core.errors import BusyError, LimitExceededError
from core.executor.backends import Backend, Cancelled, Progress

STATUSES = ("queued", "running", "done", "failed", "cancelled")
FINAL = frozenset({"done", "failed", "cancelled"})
#: Name and namespace of the detached actor that keeps the jobs of a Ray cluster.
#: Version 2 records owners; ``-v2`` keeps replicas of this version off an older store
#: (whose methods lack owners), which stays readable: see :data:`LEGACY_STORE_NAME`.
STORE_NAME = "netgrad-jobs-v2"
#: The store of netgrad versions before job owners. Its jobs (which have no owner) remain
#: visible to requests without an API key until they expire; no new job goes there.
LEGACY_STORE_NAME = "netgrad-jobs"

log = logging.getLogger("netgrad")

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
        owner: name of the API key that submitted it (``None`` without keys). Added in
            store version 2, with a default: a record pickled by an older version reads
            back with ``owner=None``.
        size: bytes of the job's request, which the store holds until the job ends
            (default 0, for records pickled before it).
    """

    id: str
    kind: str
    status: str = "queued"
    done: int = 0
    total: int = 0
    payload: bytes = b""
    finished: float | None = None
    owner: str | None = None
    size: int = 0


class OwnerLimitError(Exception):
    """The owner (an API key) has its allowance of jobs queued or running already.

    Attributes:
        in_flight: the owner's jobs queued or running now.
    """

    def __init__(self, in_flight: int) -> None:
        super().__init__(in_flight)  # args as the constructor's: it pickles (Ray)
        self.in_flight = in_flight


def visible(rec: JobRecord | None, owner: str | None) -> JobRecord | None:
    """``rec`` if a request of ``owner`` may see it, else ``None`` (as for an unknown id).

    Without an owner (API keys off) every job is visible; with one, only its own jobs.
    """
    if rec is None or owner is None or rec.owner == owner:
        return rec
    return None


def _new_id() -> str:
    return uuid.uuid4().hex


class _Records:
    """Records with expiry (``ttl_s`` after the end), a cap on the records kept and a byte
    budget (``max_bytes``; ``None``: none) over what they hold: the request of a job not
    finished, the result (or problem) of a finished one.

    Room for a new job, or for a result, is made by dropping finished records before their
    time to live: those of the owner holding the most (bytes, or records for the record
    cap) first, oldest first; never the record that just finished. Only queued and running
    jobs that fill the store refuse a new one (``BusyError``: retry when some have run).
    """

    def __init__(self, ttl_s: float, max_jobs: int, max_bytes: int | None = None) -> None:
        self.ttl_s = ttl_s
        self.max_jobs = max_jobs
        self.max_bytes = max_bytes
        self.bytes = 0  # what the records hold: requests until final, then payloads
        self.jobs: dict[str, JobRecord] = {}
        self.cancelled: set[str] = set()
        self.active: dict[str, int] = {}  # owner -> its jobs queued or running

    @staticmethod
    def _held(rec: JobRecord) -> int:
        return len(rec.payload) if rec.status in FINAL else rec.size

    def _drop(self, jid: str) -> None:
        rec = self.jobs.pop(jid)
        self.bytes -= self._held(rec)
        self.cancelled.discard(jid)

    def sweep(self) -> None:
        now = time.time()
        for jid in [j for j, r in self.jobs.items()
                    if r.finished is not None and now - r.finished > self.ttl_s]:
            self._drop(jid)

    def _make_room(self, fresh: str | None, extra_bytes: int = 0, slot: bool = False,
                   owner: str | None = None) -> bool:
        """Drop finished records (never ``fresh``) until ``extra_bytes`` more (a request of
        ``owner``, counted as its) fit the budget and, with ``slot``, one more record fits
        the cap. Whether they fit now."""
        def over() -> tuple[bool, bool]:
            return (self.max_bytes is not None and self.bytes + extra_bytes > self.max_bytes,
                    slot and len(self.jobs) >= self.max_jobs)

        too_big, too_many = over()
        if not (too_big or too_many):
            return True
        held: dict[str | None, list[int]] = {}  # owner -> [bytes, records]
        for r in self.jobs.values():
            h = held.setdefault(r.owner, [0, 0])
            h[0] += self._held(r)
            h[1] += 1
        if extra_bytes or slot:
            h = held.setdefault(owner, [0, 0])
            h[0] += extra_bytes
            h[1] += int(slot)
        queues: dict[str | None, list[JobRecord]] = {}
        for r in sorted((r for r in self.jobs.values()
                         if r.status in FINAL and r.id != fresh),
                        key=lambda r: (r.finished or 0.0, r.id)):
            queues.setdefault(r.owner, []).append(r)
        while (too_big or too_many) and queues:
            metric = 0 if too_big else 1
            owner = max(queues, key=lambda o: (held[o][metric], o or ""))
            victim = queues[owner].pop(0)
            if not queues[owner]:
                del queues[owner]
            held[owner][0] -= self._held(victim)
            held[owner][1] -= 1
            log.warning("job %s: its result (%d bytes) is dropped before its time to live to "
                        "keep the job store within NETGRAD_JOB_STORE_BYTES (%s) and "
                        "NETGRAD_MAX_JOBS (%d)", victim.id, len(victim.payload),
                        self.max_bytes, self.max_jobs)
            self._drop(victim.id)
            too_big, too_many = over()
        return not (too_big or too_many)

    def add(self, kind: str, owner: str | None = None,
            max_owned: int | None = None, size: int = 0) -> JobRecord:
        """A new ``queued`` record for a request of ``size`` bytes.

        Raises:
            OwnerLimitError: ``owner`` has ``max_owned`` jobs queued or running.
            LimitExceededError: the request alone is larger than the byte budget.
            BusyError: the jobs queued or running fill the store.
        """
        self.sweep()
        if owner is not None and max_owned is not None:
            n = self.active.get(owner, 0)
            if n >= max_owned:
                raise OwnerLimitError(n)
        if self.max_bytes is not None and size > self.max_bytes:
            raise LimitExceededError.at(
                f"the job's request is {size} bytes, more than the job store holds "
                f"({self.max_bytes} bytes, NETGRAD_JOB_STORE_BYTES); send it to its "
                "synchronous route", code="job_too_large")
        if not self._make_room(None, size, slot=True, owner=owner):
            queued = sum(r.status not in FINAL for r in self.jobs.values())
            raise BusyError(f"{queued} jobs are queued or running and fill the job store "
                            f"(NETGRAD_MAX_JOBS = {self.max_jobs}, NETGRAD_JOB_STORE_BYTES = "
                            f"{self.max_bytes}); retry when some have run")
        rec = JobRecord(_new_id(), kind, owner=owner, size=size)
        self.jobs[rec.id] = rec
        self.bytes += size
        if owner is not None:
            self.active[owner] = self.active.get(owner, 0) + 1
        return rec

    def update(self, jid: str, **changes: Any) -> JobRecord | None:
        rec = self.jobs.get(jid)
        if rec is None or rec.status in FINAL:
            return rec
        if changes.get("status") in FINAL:
            changes["finished"] = time.time()
            if rec.owner is not None:  # the owner's slot is free again
                left = self.active.get(rec.owner, 0) - 1
                if left > 0:
                    self.active[rec.owner] = left
                else:
                    self.active.pop(rec.owner, None)
        before = self._held(rec)
        rec = self.jobs[jid] = replace(rec, **changes)
        after = self._held(rec)
        if after != before:
            self.bytes += after - before
            self._make_room(jid)
        return rec

    def get(self, jid: str, owner: str | None = None) -> JobRecord | None:
        self.sweep()
        return visible(self.jobs.get(jid), owner)

    def cancel(self, jid: str, owner: str | None = None) -> JobRecord | None:
        rec = self.get(jid, owner)
        if rec is not None and rec.status not in FINAL:
            self.cancelled.add(jid)
            rec = self.update(jid, status="cancelled")
        return rec

    def in_flight(self, owner: str) -> int:
        return self.active.get(owner, 0)


class LocalJobs:
    """Jobs run by threads of this process on ``backend`` (the pool).

    Args:
        backend: the executor the jobs' numeric work runs on.
        work: the job function (see the module docstring).
        config: passed to ``work`` (limits of the service).
        ttl_s: seconds a finished job stays retrievable.
        max_jobs: most job records kept (503 ``workers_busy`` above).
        threads: jobs that run at once (more wait as ``queued``).
        max_bytes: most bytes of results kept (``None``: no budget); see the module
            docstring.
    """

    def __init__(self, backend: Backend, work: JobWork, config: Any, *, ttl_s: float,
                 max_jobs: int = 1000, threads: int = 2, max_bytes: int | None = None) -> None:
        self.backend = backend
        self.work = work
        self.config = config
        self._records = _Records(ttl_s, max_jobs, max_bytes)
        # requests of queued jobs: the thread pool's work items name the job only, so a
        # cancelled job's request is freed at once, not when a thread reaches its item
        self._requests: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._threads = ThreadPoolExecutor(max_workers=max(1, threads),
                                           thread_name_prefix="netgrad-job")

    @property
    def ttl_s(self) -> float:
        """Seconds a finished job stays retrievable."""
        return self._records.ttl_s

    def submit(self, kind: str, request: bytes, owner: str | None = None,
               max_owned: int | None = None) -> JobRecord:
        """Queue a job of ``owner``; its record (status ``queued``).

        Raises:
            OwnerLimitError: ``owner`` has ``max_owned`` jobs queued or running already.
            LimitExceededError: the request is larger than the store's byte budget.
            BusyError: the jobs queued or running fill the store.
        """
        with self._lock:
            rec = self._records.add(kind, owner, max_owned, len(request))
            self._requests[rec.id] = request
        self._threads.submit(self._run, rec.id, kind)
        return rec

    def _run(self, jid: str, kind: str) -> None:
        with self._lock:
            request = self._requests.pop(jid, None)
            rec = self._records.update(jid, status="running")
        if request is None or rec is None or rec.status != "running":
            return

        def progress(done: int, total: int) -> None:
            with self._lock:
                self._records.update(jid, done=done, total=total)

        def cancelled() -> bool:
            with self._lock:
                return jid in self._records.cancelled

        # If the work itself dies (a bug: it returns its failures), the job is failed with no
        # payload (the job was lost), not left running with its owner's slot held.
        status, payload = "failed", b""
        try:
            status, payload = self.work(kind, request, self.config, self.backend, progress,
                                        cancelled)
        except Exception:
            log.exception("async %s job %s died", kind, jid)
        finally:
            with self._lock:
                self._records.update(jid, status=status, payload=payload)

    def get(self, jid: str, owner: str | None = None) -> JobRecord | None:
        """The record of ``jid``, or ``None`` (unknown, expired, or not ``owner``'s)."""
        with self._lock:
            return self._records.get(jid, owner)

    def cancel(self, jid: str, owner: str | None = None) -> JobRecord | None:
        """Cancel ``jid`` unless it finished; its record, or ``None`` (unknown, expired, or
        not ``owner``'s: then nothing is cancelled)."""
        with self._lock:
            rec = self._records.cancel(jid, owner)
            if rec is not None and rec.status == "cancelled":
                self._requests.pop(jid, None)
            return rec

    def in_flight(self, owner: str) -> int:
        """Jobs of ``owner`` queued or running."""
        with self._lock:
            return self._records.in_flight(owner)

    def close(self) -> None:
        """Stop taking jobs; running ones are asked to stop."""
        with self._lock:
            self._records.cancelled.update(self._records.jobs)
            self._requests.clear()
        self._threads.shutdown(wait=False, cancel_futures=True)


# --- Ray ------------------------------------------------------------------------------------
class RayStore:
    """Body of the detached actor that keeps the jobs of a Ray cluster (see :class:`RayJobs`).

    Owners came in version 2 as optional trailing arguments: ``get(jid)`` and
    ``cancel(jid)`` keep the first version's form, in which :class:`RayJobs` reads an older
    store (:data:`LEGACY_STORE_NAME`).
    """

    def __init__(self, ttl_s: float, max_jobs: int, name: str = STORE_NAME,
                 max_bytes: int | None = None) -> None:
        self.records = _Records(ttl_s, max_jobs, max_bytes)
        self.drivers: dict[str, list[Any]] = {}
        self.name = name

    def submit(self, kind: str, request: bytes, work: JobWork, config: Any,
               owner: str | None = None, max_owned: int | None = None) -> JobRecord:
        import ray

        if owner is not None and max_owned is not None:
            self._reap(self._running_of(owner))  # a dead driver's job no longer counts
        rec = self.records.add(kind, owner, max_owned, len(request))
        driver = ray.remote(_ray_driver).options(num_cpus=0, max_retries=0)
        namespace = ray.get_runtime_context().namespace
        self.drivers[rec.id] = [driver.remote(rec.id, kind, request, work, config, namespace,
                                              self.name)]
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

    def _running_of(self, owner: str) -> list[str]:
        return [j for j in self.drivers
                if (r := self.records.jobs.get(j)) is not None and r.owner == owner]

    def _reap(self, jids: list[str]) -> None:
        """Fail the jobs of ``jids`` whose driver task ended without reporting: it died
        (payload empty: the job was lost)."""
        import ray

        refs = {self.drivers[j][0]: j for j in jids
                if j in self.drivers and (r := self.records.jobs.get(j)) is not None
                and r.status not in FINAL}
        if not refs:
            return
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        for ref in ready:
            try:
                ray.get(ref)
                reason = "it returned without reporting"
            except Exception as exc:
                reason = repr(exc)[:500]
            log.warning("the driver of job %s died: %s", refs[ref], reason)
            self.finish(refs[ref], "failed", b"")

    def get(self, jid: str, owner: str | None = None) -> JobRecord | None:
        self._reap([jid])
        for j in [j for j in self.drivers if j not in self.records.jobs]:
            del self.drivers[j]
        return self.records.get(jid, owner)

    def cancel(self, jid: str, owner: str | None = None) -> JobRecord | None:
        return self.records.cancel(jid, owner)

    def in_flight(self, owner: str) -> int:
        self._reap(self._running_of(owner))
        return self.records.in_flight(owner)


def _ray_driver(jid: str, kind: str, request: bytes, work: JobWork, config: Any,
                namespace: str, store_name: str = STORE_NAME) -> None:
    """Ray task of one job: run ``work`` on a :class:`RayBackend`, report to the store."""
    import ray

    from core.executor.backends import RayBackend

    store = ray.get_actor(store_name, namespace=namespace)
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
    """Jobs kept and run in a Ray cluster: a detached actor (:data:`STORE_NAME`) holds the
    records and owns one driver task per job, so jobs and results outlive this process.

    Args:
        backend: a connected :class:`~core.executor.backends.RayBackend`.
        work, config, ttl_s, max_jobs, max_bytes: as for :class:`LocalJobs` (``config``
            must carry ``run_limits``, ``ray_task_memory`` and ``queue_timeout_s``).
        name: the actor's name (tests give their own).
        legacy_name: the store of an older netgrad version, read for ids this store does not
            know when the request has no owner (``None``: none).

    The actor is created by the first replica (``get_if_exists``); its ``ttl_s``,
    ``max_jobs`` and ``max_bytes`` are the creator's.
    """

    def __init__(self, backend: Any, work: JobWork, config: Any, *, ttl_s: float,
                 max_jobs: int = 1000, name: str = STORE_NAME,
                 legacy_name: str | None = LEGACY_STORE_NAME,
                 max_bytes: int | None = None) -> None:
        import ray

        self.ttl_s = ttl_s
        self.work = work
        self.config = config
        self._namespace = backend.namespace
        self._name = name
        self._legacy_name = legacy_name
        self._actor = ray.remote(RayStore).options(
            name=name, namespace=backend.namespace, lifetime="detached",
            get_if_exists=True, num_cpus=0, max_restarts=0,
        )
        self._max_jobs = max_jobs
        self._max_bytes = max_bytes
        self._store = self._actor.remote(ttl_s, max_jobs, name, max_bytes)
        self._ray = ray

    def _call(self, method: str, *args: Any, timeout: float = 30.0) -> Any:
        try:
            return self._ray.get(getattr(self._store, method).remote(*args), timeout=timeout)
        except self._ray.exceptions.RayActorError:
            # the store died (its jobs with it): a new one serves the jobs from now on
            self._store = self._actor.remote(self.ttl_s, self._max_jobs, self._name,
                                             self._max_bytes)
            return self._ray.get(getattr(self._store, method).remote(*args), timeout=timeout)

    def _legacy(self, method: str, jid: str) -> JobRecord | None:
        """``method(jid)`` of the legacy store, or ``None`` when there is none."""
        if self._legacy_name is None:
            return None
        try:
            store = self._ray.get_actor(self._legacy_name, namespace=self._namespace)
            rec: JobRecord | None = self._ray.get(getattr(store, method).remote(jid),
                                                  timeout=30)
        except (ValueError, self._ray.exceptions.RayError):  # no legacy store (any more)
            return None
        return rec

    def submit(self, kind: str, request: bytes, owner: str | None = None,
               max_owned: int | None = None) -> JobRecord:
        """Queue a job of ``owner`` in the cluster; its record.

        Raises:
            OwnerLimitError: ``owner`` has ``max_owned`` jobs queued or running already.
            LimitExceededError: the request is larger than the store's byte budget.
            BusyError: the jobs queued or running fill the store.
        """
        try:
            rec: JobRecord = self._call("submit", kind, request, self.work, self.config,
                                        owner, max_owned)
        except self._ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, BusyError):
                raise BusyError(cause.message) from None
            if isinstance(cause, LimitExceededError):
                raise LimitExceededError(cause.message, cause.problems) from None
            if isinstance(cause, OwnerLimitError):
                raise OwnerLimitError(cause.in_flight) from None
            raise
        return rec

    def get(self, jid: str, owner: str | None = None) -> JobRecord | None:
        """The record of ``jid``, or ``None`` (unknown, expired, or not ``owner``'s)."""
        rec: JobRecord | None = self._call("get", jid, owner)
        if rec is None and owner is None:
            rec = self._legacy("get", jid)
        return rec

    def cancel(self, jid: str, owner: str | None = None) -> JobRecord | None:
        """Cancel ``jid`` unless it finished; its record, or ``None`` (unknown, expired, or
        not ``owner``'s: then nothing is cancelled)."""
        rec: JobRecord | None = self._call("cancel", jid, owner)
        if rec is None and owner is None:
            rec = self._legacy("cancel", jid)
        return rec

    def in_flight(self, owner: str) -> int:
        """Jobs of ``owner`` queued or running in the cluster (a died driver's job is failed
        first, so it does not count). Asked before every synchronous request of a key, so
        it waits 5 s at most.

        Raises:
            ray.exceptions.GetTimeoutError: the store did not answer within 5 s.
        """
        n: int = self._call("in_flight", owner, timeout=5.0)
        return n

    def close(self) -> None:
        """Nothing to stop: the jobs live in the cluster."""


__all__ = ["FINAL", "LEGACY_STORE_NAME", "STATUSES", "STORE_NAME", "JobRecord", "JobWork",
           "LocalJobs", "OwnerLimitError", "RayJobs", "visible"]
