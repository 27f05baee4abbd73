"""Admission control: bounded in-flight requests per kind, per client, and for large bodies.

Every POST route passes through :func:`app.api.deps.serve`, which asks an :class:`Admission`
(one per app, made on first use) before it does anything costly:

* **per client** - at most ``max_client_inflight`` requests of one client address in
  progress; 429 with ``Retry-After`` above;
* **generation** (``/v1/gradients/*``) - at most ``max_generation_inflight`` in progress;
  503 ``overloaded`` above;
* **large bodies** - a body above ``large_body_bytes`` (declared, or once that much has
  arrived) needs one of ``max_large_bodies`` slots, held until its answer is built; 503
  ``overloaded`` when none is free. JSON bodies holding a slot are scanned while they stream
  in (:class:`core.proto.jsonscan.BoundedScan`: op count, sub-net depth, containers), so an
  over-limit body is refused before ``json.loads`` materialises it. Generation for a large
  body runs in a recycled subprocess (:mod:`app.api.isolation`); a second after the last
  large body is done the server returns freed memory to the OS (:func:`release_memory`);
* **jobs** (``/v1/run``, ``/v1/verify``, verified ``/v1/gradients/net``) - a job waits for a
  worker *on the event loop* (an ``asyncio.Semaphore`` of ``workers`` permits), not in a
  thread, and runs on a job thread of its own (``workers`` of them), so waiting jobs never
  hold a thread that generation needs. At most ``workers + max_queued_jobs`` jobs wait or
  run; past that, or after ``queue_timeout_s`` of waiting, 503 ``workers_busy`` with
  ``Retry-After``.

All counters live on the event loop (only touched from coroutines), so they need no lock.
"""

from __future__ import annotations

import asyncio
import contextvars
import ctypes
import ctypes.util
import functools
import gc
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

from starlette.requests import Request

from app.errors import ProblemError
from app.settings import Settings
from core.proto.jsonscan import BoundedScan

log = logging.getLogger("netgrad")

T = TypeVar("T")

#: Seconds after the last large body's answer was built before freed memory is trimmed (by
#: then the answer has been sent and its bytes freed).
TRIM_DELAY_S = 1.0


class Admission:
    """The admission state of one app (see the module doc).

    Args:
        settings: the service settings (bounds and timeouts).
        workers: execution workers running (0: job routes are refused elsewhere with 503).
    """

    def __init__(self, settings: Settings, workers: int) -> None:
        self.settings = settings
        self.workers = max(1, workers)
        self.generation = 0
        self.large = 0
        self.jobs = 0
        self.clients: dict[str, int] = {}
        self._job_slots = asyncio.Semaphore(self.workers)
        self._job_threads = ThreadPoolExecutor(self.workers, thread_name_prefix="netgrad-job")

    def trim_if_idle(self) -> None:
        """Return freed memory to the OS (:func:`release_memory`, on a thread) unless a large
        body is being served again."""
        if self.large == 0:
            threading.Thread(target=release_memory, name="netgrad-trim", daemon=True).start()

    def close(self) -> None:
        """Stop the job threads (at shutdown)."""
        self._job_threads.shutdown(wait=False, cancel_futures=True)

    @contextmanager
    def client(self, request: Request) -> Iterator[None]:
        """Count one request of the client; 429 above ``max_client_inflight``."""
        host = request.client.host if request.client else ""
        n = self.clients.get(host, 0)
        if n >= self.settings.max_client_inflight:
            raise ProblemError(
                429, "too_many_requests",
                f"more than {self.settings.max_client_inflight} requests of this client are "
                "in progress (NETGRAD_MAX_CLIENT_INFLIGHT); retry after the others finish",
                close=True,
            )
        self.clients[host] = n + 1
        try:
            yield
        finally:
            left = self.clients[host] - 1
            if left:
                self.clients[host] = left
            else:
                del self.clients[host]

    @contextmanager
    def generating(self) -> Iterator[None]:
        """Count one generation request; 503 above ``max_generation_inflight``."""
        if self.generation >= self.settings.max_generation_inflight:
            raise _overloaded(
                f"{self.generation} generation requests are in progress "
                "(NETGRAD_MAX_GENERATION_INFLIGHT)"
            )
        self.generation += 1
        try:
            yield
        finally:
            self.generation -= 1

    def body_gate(self, declared: int | None, json: bool, max_ops: int,
                  max_depth: int) -> BodyGate:
        """The large-body gate of one request (see :class:`BodyGate`)."""
        return BodyGate(self, declared, json, max_ops, max_depth)

    @asynccontextmanager
    async def job_slot(self) -> AsyncIterator[None]:
        """Wait (on the event loop) for one of the ``workers`` job permits.

        Raises:
            ProblemError: 503 ``workers_busy`` when ``workers + max_queued_jobs`` jobs wait
                or run already, or no permit came within ``queue_timeout_s``.
        """
        bound = self.workers + self.settings.max_queued_jobs
        if self.jobs >= bound:
            raise _busy(f"{self.jobs} jobs are running or queued, the most this server "
                        f"holds ({self.workers} workers + NETGRAD_MAX_QUEUED_JOBS)")
        self.jobs += 1
        try:
            try:
                await asyncio.wait_for(self._job_slots.acquire(),
                                       self.settings.queue_timeout_s)
            except TimeoutError:
                raise _busy(f"all {self.workers} execution workers stayed busy for "
                            f"{self.settings.queue_timeout_s:g} s") from None
            try:
                yield
            finally:
                self._job_slots.release()
        finally:
            self.jobs -= 1

    async def run_job(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a job thread (the caller holds a :meth:`job_slot`)."""
        loop = asyncio.get_running_loop()
        # The request's context goes along (request ID, API key: app.observability, app.auth).
        run = functools.partial(contextvars.copy_context().run, fn, *args)
        return await loop.run_in_executor(self._job_threads, run)


class BodyGate:
    """Holds a large-body slot from the moment a body is known to be large, and scans JSON.

    Feed it every chunk of the body (:meth:`watch`); chunks of a body not yet known to be
    large are only remembered (no copy), and scanned when it becomes large.
    """

    def __init__(self, admission: Admission, declared: int | None, json: bool,
                 max_ops: int, max_depth: int) -> None:
        self.admission = admission
        self.json = json
        self.max_ops = max_ops
        self.max_depth = max_depth
        self.held = False
        self.seen = 0
        self._early: list[bytes] = []
        self._scan: BoundedScan | None = None
        if declared is not None and declared > admission.settings.large_body_bytes:
            self._acquire()

    def _acquire(self) -> None:
        adm = self.admission
        if adm.large >= adm.settings.max_large_bodies:
            raise _overloaded(
                f"{adm.large} large bodies (over {adm.settings.large_body_bytes} bytes) are "
                "being served (NETGRAD_MAX_LARGE_BODIES)", close=True,
            )
        adm.large += 1
        self.held = True
        if self.json:
            self._scan = BoundedScan(self.max_ops, self.max_depth,
                                     adm.settings.max_json_containers)

    def watch(self, chunk: bytes) -> None:
        """See the next chunk: take a slot when the body passes ``large_body_bytes``; scan.

        Raises:
            ProblemError: 503 when no large-body slot is free.
            LimitExceededError: from the JSON scan (too many ops / containers, too deep).
        """
        self.seen += len(chunk)
        if not self.held:
            if self.seen <= self.admission.settings.large_body_bytes:
                self._early.append(chunk)
                return
            self._acquire()
            early, self._early = self._early, []
            if self._scan is not None:
                for c in early:
                    self._scan.feed(c)
        if self._scan is not None:
            self._scan.feed(chunk)

    def body_read(self) -> None:
        """The body has been read whole: drop what the JSON scan kept (the slot stays)."""
        if self._scan is not None:
            self._scan.close()
        self._early = []

    def release(self) -> None:
        """Give the slot back; the last large body out returns freed memory to the OS."""
        self._early = []
        self._scan = None
        if not self.held:
            return
        self.held = False
        adm = self.admission
        adm.large -= 1
        if adm.large == 0:  # once the answer is sent (its bytes freed), trim
            try:
                asyncio.get_running_loop().call_later(TRIM_DELAY_S, adm.trim_if_idle)
            except RuntimeError:  # no event loop (direct use): trim now
                adm.trim_if_idle()


def _overloaded(what: str, close: bool = False) -> ProblemError:
    return ProblemError(503, "overloaded", f"the server is at capacity: {what}; retry later",
                        close=close)


def _busy(what: str) -> ProblemError:
    return ProblemError(503, "workers_busy", f"{what}; retry later")


_libc: Any = None
_trim_lock = threading.Lock()


def release_memory() -> None:
    """Collect garbage and hand freed heap pages back to the OS (glibc ``malloc_trim``).

    CPython frees small objects into arenas it returns only when they are wholly empty, and
    glibc keeps freed large blocks in its heap; after a large request both stay resident.
    A full collection plus ``malloc_trim(0)`` brings the resident set back near its steady
    state (measured in ``bench/README.md``). A no-op where glibc is absent.
    """
    global _libc
    if not _trim_lock.acquire(blocking=False):
        return
    try:
        gc.collect()
        if _libc is None:
            name = ctypes.util.find_library("c")
            _libc = ctypes.CDLL(name) if name else False
        if _libc and hasattr(_libc, "malloc_trim"):
            _libc.malloc_trim(0)
    except OSError:  # pragma: no cover - no libc to trim
        _libc = False
    finally:
        _trim_lock.release()
