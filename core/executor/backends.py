"""Executor backends: one interface for "run this job under these limits", pool or Ray.

A backend runs picklable top-level functions under a :class:`~core.executor.limits.RunLimits`
and raises the same typed errors whichever engine runs them:

* :class:`PoolBackend` - the embedded :class:`~core.executor.pool.WorkerPool` (default,
  ``NETGRAD_EXECUTOR=pool``): worker processes of this server.
* :class:`RayBackend` - a Ray cluster (``NETGRAD_EXECUTOR=ray``, ``NETGRAD_RAY_ADDRESS``;
  ``pip install 'netgrad[ray]'``). Each job is one Ray task that carries the pool's limits:
  the task reserves Ray's ``memory`` resource and runs the job in a one-process
  :class:`~core.executor.pool.WorkerPool` of its own, so the job gets the same wall-clock
  kill, ``RLIMIT_AS`` memory limit (a Ray worker itself maps the object store, far beyond any
  sensible address-space limit), tensor-element and loop-iteration limits as a pool job. A
  task whose process dies (the Ray worker or the job's process) is retried once by Ray, as the
  pool retries a job whose worker died before it started; a second death is a 503.

Both offer :meth:`submit` (one job, blocking) and :meth:`map` (many jobs, results in input
order whatever order they finish in, with a progress callback and a cancellation check), the
fan-out primitive of :mod:`core.verify.fanout`. Ray is imported only by :class:`RayBackend`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Protocol, cast

from core.errors import (
    BusyError,
    ExecutionError,
    NetgradError,
    QueueTimeoutError,
    WorkerLostError,
)
from core.executor.limits import RunLimits, default_limits
from core.executor.pool import WorkerPool, _rebuild_error

#: ``on_done(done, total)``: called after each finished job of a :meth:`Backend.map`.
Progress = Callable[[int, int], None]
#: ``cancelled()``: true once the caller gave up; no further job of the map is started.
Cancelled = Callable[[], bool]

#: Executor names of ``NETGRAD_EXECUTOR``.
EXECUTORS = ("pool", "ray")
#: Seconds past a Ray task's wall-clock limit before it is cancelled from outside (its own
#: pool stops it first, with the precise error).
_RAY_GRACE_S = 5.0
#: Ray tasks of one map in flight per CPU of the cluster (one running, one queued behind it).
RAY_IN_FLIGHT_PER_CPU = 2
#: Ray settings of the process that submits the tasks (read by ``ray.init``; a value already
#: in the environment wins). ``worker_lease_timeout_milliseconds``: how long a submitter
#: keeps a leased worker for its next queued task. Ray's 500 ms default is shorter than a
#: fan-out chunk (about 1 s, :data:`core.verify.fanout.TARGET_CHUNK_S`), so every chunk gave
#: its worker back and the next one waited for a new lease: 18-145 ms between chunks on one
#: of two nodes (bench/README.md §9). 5 s keeps a worker for a few chunks, then lets other
#: submitters of the cluster have it.
RAY_DRIVER_ENV = {"RAY_worker_lease_timeout_milliseconds": "5000"}


def ray_driver_environment() -> None:
    """Put :data:`RAY_DRIVER_ENV` in ``os.environ`` (before ``ray.init``; kept if set)."""
    for key, value in RAY_DRIVER_ENV.items():
        os.environ.setdefault(key, value)


class JobCancelledError(NetgradError):
    """The job was cancelled (``DELETE /v1/jobs/{id}``) before it finished."""

    code = "job_cancelled"


class Backend(Protocol):
    """What the service needs from an executor.

    Attributes:
        name: ``"pool"`` or ``"ray"``.
        size: jobs that can run at once (pool workers, or CPUs of the Ray cluster).
        limits: the per-job limits.
    """

    name: str
    size: int
    limits: RunLimits

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` under the limits; its result or its typed error."""
        ...

    def map(self, fn: Callable[..., Any], args_list: Sequence[tuple[Any, ...]], *,
            on_done: Progress | None = None, cancelled: Cancelled | None = None) -> list[Any]:
        """``[fn(*a) for a in args_list]`` run in parallel, results in input order."""
        ...

    def close(self) -> None:
        """Release the workers (the pool's processes; Ray: disconnect)."""
        ...


def as_backend(executor: Any) -> Backend:
    """``executor`` as a :class:`Backend`: a bare :class:`WorkerPool` (or anything with only a
    pool's ``submit``, e.g. a wrapper) is wrapped."""
    if isinstance(executor, WorkerPool) or not hasattr(executor, "map"):
        return PoolBackend(executor)
    return cast(Backend, executor)


class PoolBackend:
    """The embedded worker pool as a :class:`Backend` (``map`` keeps every worker busy)."""

    name = "pool"

    def __init__(self, pool: WorkerPool) -> None:
        self.pool = pool
        self.size = getattr(pool, "size", 1)
        self.limits = getattr(pool, "limits", default_limits())

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        """See :meth:`core.executor.pool.WorkerPool.submit` (same errors)."""
        return self.pool.submit(fn, *args)

    def map(self, fn: Callable[..., Any], args_list: Sequence[tuple[Any, ...]], *,
            on_done: Progress | None = None, cancelled: Cancelled | None = None) -> list[Any]:
        """Run the jobs on the pool, at most :attr:`size` at once, results in input order.

        Raises:
            JobCancelledError: ``cancelled()`` became true (running jobs finish first).
            NetgradError: the error of the failed job with the lowest index (no further job
                is started after a failure).
        """
        total = len(args_list)
        results: list[Any] = [None] * total
        errors: dict[int, BaseException] = {}
        done = 0
        with ThreadPoolExecutor(max_workers=max(1, min(self.size, total)),
                                thread_name_prefix="netgrad-map") as tpe:
            running: dict[Future[Any], int] = {}
            nxt = 0
            while nxt < total or running:
                stop = bool(errors) or (cancelled is not None and cancelled())
                while not stop and nxt < total and len(running) < self.size:
                    running[tpe.submit(self.pool.submit, fn, *args_list[nxt])] = nxt
                    nxt += 1
                if not running:
                    break
                finished, _ = wait(list(running), timeout=0.5, return_when=FIRST_COMPLETED)
                for fut in finished:
                    k = running.pop(fut)
                    exc = fut.exception()
                    if exc is not None:
                        errors[k] = exc
                        continue
                    results[k] = fut.result()
                    done += 1
                    if on_done is not None:
                        on_done(done, total)
        if errors:
            raise errors[min(errors)]
        if done < total:
            raise JobCancelledError("the job was cancelled")
        return results

    def close(self) -> None:
        """Stop the pool's workers."""
        self.pool.close()

    def pids(self) -> list[int]:
        """Process ids of the pool's workers."""
        return self.pool.pids()


# --- Ray ------------------------------------------------------------------------------------
class WorkerDiedError(Exception):
    """Raised in a Ray task whose job process died, so that Ray retries the task once."""


_task_pools: dict[RunLimits, WorkerPool] = {}
_task_pools_lock = threading.Lock()


def _task_pool(limits: RunLimits) -> WorkerPool:
    """The one-process pool of this Ray worker for ``limits`` (started on first use)."""
    with _task_pools_lock:
        pool = _task_pools.get(limits)
        if pool is None:
            pool = _task_pools[limits] = WorkerPool(1, limits)
        return pool


def _crashed(exc: NetgradError) -> bool:
    """Whether the job's own process died (the task retries once), not the job's error.

    Only the pool's :class:`~core.errors.WorkerLostError` (a crashed or unstartable worker)
    counts: a job's own error is never retried, whatever its message says.
    """
    return isinstance(exc, WorkerLostError)


@dataclass(frozen=True)
class _Shared:
    """An argument put once in Ray's object store for all jobs of a map (see ``_shared``)."""

    ref: Any


def _resolve(args: tuple[Any, ...]) -> tuple[Any, ...]:
    if not any(isinstance(a, _Shared) for a in args):
        return args
    import ray

    refs = [a.ref for a in args if isinstance(a, _Shared)]
    values = iter(ray.get(refs))
    return tuple(next(values) if isinstance(a, _Shared) else a for a in args)


def ray_job(fn: Callable[..., Any], args: tuple[Any, ...], limits: RunLimits) -> tuple[Any, ...]:
    """Body of a Ray task: ``fn(*args)`` in this worker's own pool, under ``limits``.

    Returns ``("ok", result)`` or ``("netgrad", module, qualname, message, problems)``: errors
    travel as data and are rebuilt by the caller with the same type and problems.

    Raises:
        WorkerDiedError: the job's process died (Ray retries the task once).
    """
    try:
        return ("ok", _task_pool(limits).submit(fn, *_resolve(args)))
    except NetgradError as exc:
        if _crashed(exc):
            raise WorkerDiedError(exc.message) from None
        return ("netgrad", type(exc).__module__, type(exc).__qualname__, exc.message,
                list(exc.problems))


def _import_ray() -> Any:
    try:
        import ray
    except ModuleNotFoundError as exc:
        if exc.name != "ray":
            raise ExecutionError(f"Ray could not be imported: {exc}") from exc
        raise ExecutionError(
            "NETGRAD_EXECUTOR=ray needs Ray: pip install 'netgrad[ray]'"
        ) from exc
    except ImportError as exc:
        raise ExecutionError(f"Ray could not be imported: {exc}") from exc
    return ray


def _loopback(address: str | None) -> bool:
    host = (address or "").rsplit(":", 1)[0].removeprefix("ray://")
    return host in ("localhost", "127.0.0.1", "::1", "[::1]")


class RayBackend:
    """A Ray cluster as a :class:`Backend`.

    Args:
        address: the cluster (``host:port`` of the head's GCS, ``ray://host:10001``,
            ``"auto"``; ``None`` starts a local Ray for this process).
        limits: per-job limits, carried by every task.
        task_memory_bytes: Ray ``memory`` resource each task reserves (scheduling).
        queue_timeout_s: longest a job may wait for a free CPU of the cluster before 503.
        namespace: Ray namespace of the service (where the jobs store lives).

    Raises:
        ExecutionError: Ray is not installed.

    With a loopback address the whole cluster is kept on loopback
    (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``), as CI and the tests run it.
    """

    name = "ray"

    def __init__(self, address: str | None, limits: RunLimits | None = None, *,
                 task_memory_bytes: int = 512 * 1024**2, queue_timeout_s: float = 30.0,
                 namespace: str = "netgrad") -> None:
        if _loopback(address):
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        ray = self._ray = _import_ray()
        if not ray.is_initialized():
            ray_driver_environment()
            ray.init(address=address, namespace=namespace, logging_level="ERROR",
                     log_to_driver=False, configure_logging=False)
        self.limits = limits or RunLimits()
        self.namespace = namespace
        self.task_memory_bytes = task_memory_bytes
        self.queue_timeout_s = queue_timeout_s
        self.size = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._task = ray.remote(ray_job).options(
            max_retries=1, retry_exceptions=[WorkerDiedError], memory=task_memory_bytes
        )

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        """One job as a Ray task; same results and errors as the pool (see :meth:`map`)."""
        return self.map(fn, [args])[0]

    def map(self, fn: Callable[..., Any], args_list: Sequence[tuple[Any, ...]], *,
            on_done: Progress | None = None, cancelled: Cancelled | None = None) -> list[Any]:
        """One Ray task per job, at most :data:`RAY_IN_FLIGHT_PER_CPU` per cluster CPU in
        flight at once; results in input order.

        Keeping only a window in flight bounds what a cancel has to stop and what each
        ``ray.wait`` scans (with every task queued at once, the waits over 391 pending
        references cost the caller 8 ms of CPU per task).

        Raises:
            NetgradError: the job's own error, rebuilt with its type and problems (of the
                failed job with the lowest index; the other tasks are cancelled).
            LimitExceededError: wall clock or memory, from the task's own pool.
            BusyError: a task died twice, or the cluster did not finish the jobs in time
                (``queue_timeout_s`` plus the wall-clock limit per round of jobs).
            JobCancelledError: ``cancelled()`` became true (the tasks are cancelled).
        """
        ray = self._ray
        total = len(args_list)
        calls = self._shared(args_list)
        window = max(2, RAY_IN_FLIGHT_PER_CPU * self.size)
        results: list[Any] = [None] * total
        rounds = -(-total // self.size) + 1
        deadline = time.monotonic() + self.queue_timeout_s + rounds * (
            self.limits.wall_clock_s + _RAY_GRACE_S)
        index: dict[Any, int] = {}
        pending: list[Any] = []
        submitted = 0
        done = 0
        failure: tuple[int, NetgradError] | None = None
        try:
            while submitted < total or pending:
                while submitted < total and len(pending) < window and failure is None:
                    ref = self._task.remote(fn, calls[submitted], self.limits)
                    index[ref] = submitted
                    pending.append(ref)
                    submitted += 1
                if cancelled is not None and cancelled():
                    raise JobCancelledError("the job was cancelled")
                if time.monotonic() > deadline:
                    raise QueueTimeoutError(
                        f"the Ray cluster did not finish {total} job(s) in time; retry later")
                ready, pending = ray.wait(pending, num_returns=1, timeout=0.5)
                for ref in ready:
                    k = index.pop(ref)
                    try:
                        reply = ray.get(ref)
                    except Exception as exc:  # the task died twice, or was cancelled
                        err: NetgradError = BusyError(
                            f"a Ray task died twice and was given up: {_ray_reason(exc)}; "
                            "retry later")
                        if failure is None or k < failure[0]:
                            failure = (k, err)
                        continue
                    if reply[0] != "ok":
                        err = _rebuild_error(reply[1], reply[2], reply[3], reply[4])
                        if failure is None or k < failure[0]:
                            failure = (k, err)
                        continue
                    results[k] = reply[1]
                    done += 1
                    if on_done is not None:
                        on_done(done, total)
                if failure is not None:
                    raise failure[1]
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
        return results

    def _shared(self, args_list: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Each job's arguments as one object-store reference when jobs share arguments.

        The chunks of a fan-out all carry the same job and loss weights (megabytes for a
        10^5-element input). Passed by value, Ray would store one copy per task: 391 copies
        of 0.8 MB filled a 200 MB object store and spilled to disk, and every worker fetched
        its own copy. Here an argument object passed to more than one job is put once; each
        task gets a reference to its tuple, whose shared members are references too (Ray
        resolves a top-level reference argument, and the worker reads nested ones below).
        """
        ray = self._ray
        if len(args_list) < 2:
            return [tuple(a) for a in args_list]
        seen: dict[int, int] = {}
        for args in args_list:
            for a in args:
                seen[id(a)] = seen.get(id(a), 0) + 1
        put: dict[int, Any] = {}
        out = []
        for args in args_list:
            items = []
            for a in args:
                if seen[id(a)] > 1 and not isinstance(a, (int, float, str, bool, type(None))):
                    if id(a) not in put:
                        put[id(a)] = ray.put(a)
                    items.append(_Shared(put[id(a)]))
                else:
                    items.append(a)
            out.append(tuple(items))
        return out

    def close(self) -> None:
        """Nothing to stop: the cluster outlives this process (jobs kept in Ray live on)."""


def _ray_reason(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)
    text = str(cause if cause is not None else exc).strip().splitlines()
    return text[-1][:300] if text else type(exc).__name__


def make_backend(executor: str, workers: int, limits: RunLimits, *, ray_address: str | None,
                 ray_task_memory_bytes: int, queue_timeout_s: float) -> Backend:
    """The backend ``NETGRAD_EXECUTOR`` names.

    Raises:
        ValueError: an unknown executor name.
        ExecutionError: ``ray`` without Ray installed.
    """
    if executor == "pool":
        return PoolBackend(WorkerPool(workers, limits, queue_timeout_s=queue_timeout_s))
    if executor == "ray":
        return RayBackend(ray_address, limits, task_memory_bytes=ray_task_memory_bytes,
                          queue_timeout_s=queue_timeout_s)
    raise ValueError(f"NETGRAD_EXECUTOR must be one of {EXECUTORS}, got {executor!r}")


__all__ = [
    "EXECUTORS",
    "Backend",
    "JobCancelledError",
    "PoolBackend",
    "RayBackend",
    "WorkerDiedError",
    "as_backend",
    "make_backend",
    "ray_job",
]
