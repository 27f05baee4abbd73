"""Threads whose C stack holds whatever the protobuf parser may nest.

upb follows up to 65 535 nested messages (``SetAllowOversizeProtos``, set in ``core``, is
needed for deep control flow), about 175 bytes of C stack each: more than some thread
stacks hold. Rather than walking the bytes in Python to bound their depth, large untrusted
bodies are parsed on threads made here, whose stacks hold the parser's own limit several
times over; upb then refuses anything deeper with a decode error. A body cannot nest
deeper than half its length, so bodies of at most :data:`SAFE_BYTES` parse on any thread,
and somewhat larger ones on the main thread, whose stack is known.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

#: C stack of a :class:`DeepStackExecutor` thread (virtual memory; pages are used on demand).
STACK_BYTES = 64 * 1024 * 1024
#: Bodies up to this size nest at most 8 192 messages (each level costs >= 2 bytes): under
#: 1.5 MiB of parser stack, which every thread has.
SAFE_BYTES = 16 * 1024
#: C stack the parser takes per nested message (measured: about 175 bytes), rounded up.
STACK_PER_MESSAGE = 192

_local = threading.local()


def _main_thread_safe_bytes() -> int:
    """Largest body the main thread parses in place: nesting it as deep as its bytes allow
    takes at most half of the main thread's stack (``RLIMIT_STACK``; 8 MiB if unlimited)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_STACK)[0]
        if soft == resource.RLIM_INFINITY:
            soft = 8 * 1024 * 1024
    except (ImportError, OSError, ValueError):  # pragma: no cover - not POSIX
        return SAFE_BYTES
    # levels <= size / 2 and levels * STACK_PER_MESSAGE <= soft / 2
    return max(SAFE_BYTES, soft // STACK_PER_MESSAGE)


#: See :func:`_main_thread_safe_bytes` (48 KiB with the usual 8 MiB stack).
MAIN_THREAD_SAFE_BYTES = _main_thread_safe_bytes()


def on_deep_stack() -> bool:
    """Whether the calling thread is a :class:`DeepStackExecutor` thread."""
    return bool(getattr(_local, "deep", False))


class DeepStackExecutor:
    """A fixed set of daemon threads with :data:`STACK_BYTES` stacks running submitted calls.

    Args:
        workers: number of threads, started at once.
        name: thread name prefix.
    """

    def __init__(self, workers: int, name: str = "netgrad-deep") -> None:
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        old = threading.stack_size(STACK_BYTES)
        try:
            for k in range(workers):
                t = threading.Thread(target=self._run, name=f"{name}-{k}", daemon=True)
                t.start()
                self._threads.append(t)
        finally:
            threading.stack_size(old)

    def _run(self) -> None:
        _local.deep = True
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fut, fn, args = job
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as exc:  # handed to the waiting caller
                fut.set_exception(exc)
            # Drop this job before waiting for the next: an idle thread must not keep the
            # last request's body and answer alive (issue 14, memory after a burst).
            del job, fut, fn, args

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Run ``fn(*args)`` on one of the threads; its result or exception in a Future."""
        fut: Future[T] = Future()
        self._jobs.put((fut, fn, args))
        return fut

    def shutdown(self) -> None:
        """Stop the threads once the queued calls are done (does not wait)."""
        for _ in self._threads:
            self._jobs.put(None)


_shared: DeepStackExecutor | None = None
_shared_lock = threading.Lock()


def call_deep(size: int, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on a thread whose stack suits parsing ``size`` untrusted bytes.

    Runs in the calling thread when ``size <= SAFE_BYTES``, or up to
    :data:`MAIN_THREAD_SAFE_BYTES` on the main thread (the server's event loop), or when the
    thread is already a deep one; else on a shared :class:`DeepStackExecutor` (waiting for
    the result).
    """
    if size <= SAFE_BYTES or on_deep_stack():
        return fn(*args)
    if size <= MAIN_THREAD_SAFE_BYTES and threading.current_thread() is threading.main_thread():
        return fn(*args)
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = DeepStackExecutor(2, "netgrad-parse")
        executor = _shared
    return executor.submit(fn, *args).result()
