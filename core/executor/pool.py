"""A pool of worker processes that run execution jobs under per-job limits.

Execution never runs in the server process (issue 4, "Isolation"). Each worker is a
separate process started with the ``spawn`` (default) or ``forkserver`` method, so no
server threads or sockets are inherited. Per job:

* wall clock - the parent waits at most ``limits.wall_clock_s`` (+ a short grace for the
  worker's own, cooperative check); then it kills the worker, starts a replacement and
  raises :class:`~core.errors.LimitExceededError`;
* memory - each worker sets ``RLIMIT_AS`` to ``limits.memory_bytes``; a ``MemoryError``
  becomes :class:`~core.errors.LimitExceededError`; one raised outside the executor recycles
  the worker (the executor's own, located error leaves it whole: the job's workspaces are
  released and the worker collects garbage after every job);
* crash - a worker that dies mid-job (kill -9, the OOM killer) gives
  :class:`~core.errors.WorkerLostError` (a server fault, retryable), and a replacement is
  started;
* ``max_elements`` / ``max_loop_iterations`` - installed as the worker's default
  :class:`~core.executor.limits.RunLimits`, used by jobs that pass no limits of their own.

Exceptions of type :class:`~core.errors.NetgradError` raised by a job are re-raised in the
parent as the same type with the same ``problems``. Other jobs are never affected.

This module imports no NumPy at top level, so a worker can configure BLAS threads first.
"""

from __future__ import annotations

import gc
import importlib
import logging
import multiprocessing
import os
import queue
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from types import TracebackType
from typing import Any

from core.errors import (
    ExecutionError,
    InternalError,
    LimitExceededError,
    NetgradError,
    QueueTimeoutError,
    WorkerLostError,
)
from core.executor.limits import RunLimits
from core.executor.observer import PoolObserver, PoolStatus, limit_of
from core.preload import import_packages
from core.types import Diagnostic

log = logging.getLogger("netgrad.pool")

#: Extra seconds the parent waits past the wall-clock limit, so a worker that stops itself
#: (the executor checks the deadline between ops) reports its own, more precise error.
_GRACE_S = 0.3
#: Seconds a new worker may take to import NumPy and the kernels before it counts as broken.
_STARTUP_TIMEOUT_S = 60.0
#: Imported when a worker starts, so that a job never has to import engine code later
#: (the installed files may have been replaced meanwhile, e.g. by a reinstall) ...
_MODULES_TO_PRELOAD = (
    "numpy",
    "core.executor.executor",
    "core.executor.jobs",
    "core.verify.checker",
)
#: ... and then every module of these packages: error paths import some inside functions
#: (``core.typos`` for an unknown op type's did-you-mean was a 500 in a worker started
#: before the README's second command reinstalled netgrad; walkthrough, stop 26).
_PACKAGES_TO_PRELOAD = ("api_schemas", "core")


def _preload() -> None:
    """Import :data:`_MODULES_TO_PRELOAD`, then every module of :data:`_PACKAGES_TO_PRELOAD`
    (a module needing an optional extra that is not installed is left out)."""
    for mod in _MODULES_TO_PRELOAD:
        try:
            importlib.import_module(mod)
        except ImportError:  # optional preload; the job imports what it needs
            pass
    import_packages(_PACKAGES_TO_PRELOAD)


def _worker_main(conn: Connection, limits: RunLimits, preload: tuple[str, ...] = ()) -> None:
    """Worker process: preload (with the caller's ``preload`` packages), set limits, then
    serve ``(fn, args)`` jobs until ``None``."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    _preload()
    for name in preload:
        try:
            import_packages((name,))
        except Exception:  # noqa: BLE001 - the caller's preload only saves time: a module
            pass  # that fails here fails the job that needs it, as without a preload
    from core.executor.allocator import keep_freed_memory, release_freed_memory
    from core.executor.executor import _ensure_loaded
    from core.executor.limits import set_default_limits

    _ensure_loaded()
    set_default_limits(limits)
    keep_freed_memory()
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    except (ImportError, ValueError, OSError):  # pragma: no cover - platform dependent
        pass
    gc.collect()
    gc.freeze()  # the start-up objects: never garbage, and never scanned again
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        except Exception as exc:  # the job could not be unpickled: this worker is unusable
            conn.send(("broken", f"job could not be loaded in the worker: {exc!r}"))
            return
        if msg is None:
            return
        fn, args = msg
        recycle = False
        reply: tuple[Any, ...]
        try:
            reply = ("ok", fn(*args))
        except MemoryError:
            reply = ("limit", f"job ran out of memory (limit {limits.memory_bytes} bytes)")
            recycle = True
        except NetgradError as exc:
            reply = ("netgrad", type(exc).__module__, type(exc).__qualname__, exc.message,
                     list(exc.problems))
        except BaseException as exc:  # any other failure of the job
            reply = ("error", f"{type(exc).__name__}: {exc}")
        del msg, fn, args
        if not recycle:
            # a failed job's traceback holds its frames (and their workspaces) in cycles,
            # and so do sub-workspaces a job kept: free them before the next job, which gets
            # the whole memory limit (the start-up objects are frozen, so this costs
            # microseconds)
            gc.collect()
        try:
            conn.send(reply)
        except MemoryError:
            conn.send(("limit", "job result exceeded the memory limit"))
            recycle = True
        except Exception as exc:
            conn.send(("error", f"job result could not be sent back: {exc!r}"))
        if recycle:
            return
        del reply
        release_freed_memory()  # after the reply: the caller does not wait for it


class _Worker:
    """One worker process and the parent's end of its pipe."""

    def __init__(self, ctx: Any, limits: RunLimits, preload: tuple[str, ...] = ()) -> None:
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        self.conn: Connection = parent_conn
        self.proc = ctx.Process(
            target=_worker_main, args=(child_conn, limits, preload), daemon=True,
            name="netgrad-worker",
        )
        self.proc.start()
        child_conn.close()
        self.ready = False
        self.jobs = 0

    def wait_ready(self) -> bool:
        """Block until the worker reported ready; ``False`` if it died or timed out."""
        if self.ready:
            return True
        try:
            if not self.conn.poll(_STARTUP_TIMEOUT_S):
                return False
            msg = self.conn.recv()
        except (EOFError, OSError):
            return False
        self.ready = isinstance(msg, tuple) and msg[:1] == ("ready",)
        return self.ready

    def poll_ready(self) -> bool:
        """Like :meth:`wait_ready` without waiting (for an idle worker only)."""
        if not self.ready:
            try:
                if self.conn.poll(0):
                    msg = self.conn.recv()
                    self.ready = isinstance(msg, tuple) and msg[:1] == ("ready",)
            except (EOFError, OSError):
                return False
        return self.ready

    def alive(self) -> bool:
        return self.proc.is_alive()

    def kill(self) -> None:
        """Stop this worker's process (by its own handle) and release the pipe."""
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=5)
        self.conn.close()

    def stop(self) -> None:
        """Ask the worker to exit; kill it if it does not within a second."""
        try:
            self.conn.send(None)
        except (OSError, ValueError):
            pass
        self.proc.join(timeout=1)
        self.kill()


def _rebuild_error(module: str, qualname: str, message: str,
                   problems: list[Diagnostic]) -> NetgradError:
    """The parent-side copy of a job's NetgradError (same type, same problems)."""
    try:
        cls: Any = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
    except (ImportError, AttributeError):
        cls = ExecutionError
    if not (isinstance(cls, type) and issubclass(cls, NetgradError)):
        cls = ExecutionError
    err: NetgradError = cls(message, problems)
    return err


class _WorkerLost(Exception):
    """Internal: the worker of a job must be replaced; ``error`` is what to raise then."""

    def __init__(self, error: NetgradError) -> None:
        super().__init__(error.message)
        self.error = error


class WorkerPool:
    """Worker processes that run picklable top-level functions under :class:`RunLimits`.

    Args:
        size: number of worker processes (>= 1).
        limits: per-job limits (default :class:`RunLimits` defaults).
        start_method: ``"spawn"`` (default) or ``"forkserver"``.
        queue_timeout_s: longest wait for an idle worker before
            :class:`~core.errors.QueueTimeoutError` (``None``: wait as long as it takes).
        observer: told about jobs, waits and replaced workers (metrics); default: nobody.
        recycle_after: replace a worker after it ran this many jobs (``None``: never), so
            whatever memory its jobs left behind goes back to the OS with the process.
        preload: modules or packages (dotted names; a package with every module in it) a
            worker imports before it is ready, beside the engine's own: the modules of the
            functions the caller will submit, so that unpickling a job imports nothing (a
            fresh worker per job, as ``recycle_after=1`` makes, would pay those imports on
            every job). One that fails to import is left out.

    Raises:
        ValueError: ``size < 1`` or an unknown start method (programming errors).
    """

    def __init__(
        self,
        size: int = 2,
        limits: RunLimits | None = None,
        start_method: str = "spawn",
        queue_timeout_s: float | None = None,
        observer: PoolObserver | None = None,
        recycle_after: int | None = None,
        preload: tuple[str, ...] = (),
    ) -> None:
        if size < 1:
            raise ValueError(f"WorkerPool size must be >= 1, got {size}")
        if start_method not in ("spawn", "forkserver"):
            raise ValueError("start_method must be 'spawn' or 'forkserver'")
        self.size = size
        self.limits = limits or RunLimits()
        self.queue_timeout_s = queue_timeout_s
        self.recycle_after = recycle_after
        self.preload = preload
        self._ctx = multiprocessing.get_context(start_method)
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._lock = threading.Lock()
        self._closed = False
        self._workers: list[_Worker] = []
        self.observer = observer or PoolObserver()
        self._busy = 0
        self._waiting = 0
        for _ in range(size):
            w = _Worker(self._ctx, self.limits, self.preload)
            self._workers.append(w)
            self._idle.put(w)

    # -- lifecycle ---------------------------------------------------------------------
    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop every worker. Further :meth:`submit` calls raise WorkerLostError."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            workers = list(self._workers)
            self._workers.clear()
        for w in workers:
            w.stop()

    def _replace(self, old: _Worker, reason: str = "crashed") -> _Worker:
        old.kill()
        self.observer.worker_replaced(reason)
        new = _Worker(self._ctx, self.limits, self.preload)
        with self._lock:
            if old in self._workers:
                self._workers.remove(old)
            if self._closed:
                new.kill()
            else:
                self._workers.append(new)
        return new

    def _release(self, w: _Worker) -> None:
        with self._lock:
            closed = self._closed
        if closed:
            w.kill()
        else:
            self._idle.put(w)

    def pids(self) -> list[int]:
        """Process ids of the current workers (for tests and monitoring)."""
        with self._lock:
            return [w.proc.pid for w in self._workers if w.proc.pid is not None]

    def status(self) -> PoolStatus:
        """Workers configured, alive, ready, busy, and submits waiting (see PoolStatus)."""
        with self._lock:
            workers = list(self._workers)
            busy, waiting = self._busy, self._waiting
        alive = [w for w in workers if w.alive()]
        return PoolStatus(self.size, len(alive), sum(w.ready for w in alive), busy, waiting)

    def maintain(self) -> None:
        """Replace idle workers that died, and note idle ones that finished starting.

        Without it a dead idle worker is replaced when a job next picks it; a caller that
        reports readiness (``/readyz``) calls this every fraction of a second.
        """
        taken: list[_Worker] = []
        while not self._closed:
            try:
                taken.append(self._idle.get_nowait())
            except queue.Empty:
                break
        for w in taken:
            if not w.alive():
                w = self._replace(w, "crashed")
            else:
                w.poll_ready()
            self._release(w)

    def _count(self, busy: int = 0, waiting: int = 0) -> None:
        with self._lock:
            self._busy += busy
            self._waiting += waiting
        if waiting:
            self.observer.waiting_changed(waiting)

    # -- jobs --------------------------------------------------------------------------
    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` in a worker and return its result (blocking; thread-safe).

        Args:
            fn: a picklable top-level function.
            args: picklable arguments.

        Returns:
            ``fn(*args)`` as computed in the worker.

        Raises:
            LimitExceededError: the job exceeded the wall-clock limit (worker killed and
                replaced) or the memory limit.
            WorkerLostError: the worker crashed (replaced), no worker could be started, or
                the pool is closed (a server fault: retry later).
            ExecutionError: the job raised a non-netgrad exception.
            NetgradError: any netgrad error the job raised, same type and problems.
            QueueTimeoutError: no worker became idle within ``queue_timeout_s``.
        """
        waited_since = time.monotonic()
        self._count(waiting=1)
        try:
            while True:  # wait for an idle worker, noticing a close() meanwhile
                if self._closed:
                    raise WorkerLostError("worker pool is closed (the service is stopping)")
                try:
                    w = self._idle.get(timeout=0.5)
                    break
                except queue.Empty:
                    waited = time.monotonic() - waited_since
                    if self.queue_timeout_s is not None and waited >= self.queue_timeout_s:
                        raise QueueTimeoutError(
                            f"all {self.size} execution workers stayed busy for "
                            f"{waited:.1f} s; retry later"
                        ) from None
        finally:
            self._count(waiting=-1)
        started = time.monotonic()
        self._count(busy=1)
        self.observer.job_started()
        error: BaseException | None = None
        try:
            for _attempt in range(2):  # one retry if an idle worker turned out dead
                if w.alive() and w.wait_ready():
                    break
                w = self._replace(w)
            else:
                raise WorkerLostError("could not start an execution worker")
            try:
                reply = self._exchange(w, fn, args)
                if reply[0] == "broken":  # a worker that cannot load jobs: a fresh one retries
                    w = self._replace(w, "broken")
                    if not w.wait_ready():
                        raise WorkerLostError("could not start an execution worker")
                    reply = self._exchange(w, fn, args)
                    if reply[0] == "broken":
                        w = self._replace(w, "broken")
                        raise ExecutionError(f"execution worker failed: {reply[1]}")
            except _WorkerLost as lost:
                w = self._replace(w, "wall_clock" if limit_of(lost.error) else "crashed")
                raise lost.error from lost.__cause__
            w.jobs += 1
            if reply[0] == "limit":  # the worker exits after a MemoryError: replace it now
                w = self._replace(w, "memory")
            elif self.recycle_after is not None and w.jobs >= self.recycle_after:
                w = self._replace(w, "recycled")
            return self._unpack(reply)
        except BaseException as exc:
            error = exc
            raise
        finally:
            self._count(busy=-1)
            self.observer.job_ended(time.monotonic() - started, error)
            self._release(w)

    def _exchange(self, w: _Worker, fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[
        Any, ...
    ]:
        """Send one job to worker ``w`` and wait for its reply, under the wall-clock limit.

        Raises:
            _WorkerLost: the worker must be replaced (no reply within the wall-clock limit,
                it died, or the pipe broke); carries the error to raise.
            ExecutionError: the job could not be pickled (the worker is fine).
        """
        try:
            w.conn.send((fn, args))
        except (OSError, ValueError) as exc:
            err: NetgradError = WorkerLostError(f"could not send the job to a worker: {exc}")
            raise _WorkerLost(err) from exc
        except Exception as exc:  # pickling the job failed; the worker is fine
            raise ExecutionError(f"job is not picklable: {exc!r}") from exc
        limit = self.limits.wall_clock_s
        start = time.monotonic()
        if not w.conn.poll(limit + _GRACE_S):
            raise _WorkerLost(
                LimitExceededError(
                    f"job exceeded the wall-clock limit of {limit} s and was stopped",
                    [Diagnostic("error", "wall_clock_exceeded",
                                f"job exceeded the wall-clock limit of {limit} s")],
                )
            )
        try:
            reply: tuple[Any, ...] = w.conn.recv()
        except (EOFError, OSError) as exc:
            code = w.proc.exitcode
            w.proc.join(timeout=1)
            code = w.proc.exitcode if w.proc.exitcode is not None else code
            elapsed = time.monotonic() - start
            err = WorkerLostError(
                f"execution worker crashed after {elapsed:.2f} s (exit code {code}); "
                "it was replaced: retry the request"
            )
            raise _WorkerLost(err) from exc
        return reply

    def _unpack(self, reply: tuple[Any, ...]) -> Any:
        kind = reply[0]
        if kind == "ok":
            return reply[1]
        if kind == "netgrad":
            raise _rebuild_error(reply[1], reply[2], reply[3], reply[4])
        if kind == "limit":
            raise LimitExceededError(
                reply[1], [Diagnostic("error", "memory_exceeded", reply[1])]
            )
        log.error("job failed in the worker with an unexpected error: %s", reply[1])
        raise InternalError(
            f"the job failed in the worker with an unexpected error ({reply[1][:300]}); "
            "this is a netgrad bug, not a problem of the request: report it with the "
            "request ID")
