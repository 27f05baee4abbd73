"""How ``netgrad serve`` runs uvicorn: timeouts, keep-alive, connection cap, file descriptors.

uvicorn's own settings cover most of it (:func:`uvicorn_options`):

* ``timeout_keep_alive`` = ``NETGRAD_KEEP_ALIVE_S``: an idle keep-alive connection closes;
* ``h11_max_incomplete_event_size`` = :data:`MAX_HEADER_BYTES`: a request head larger
  than that is a 400.

Two things uvicorn cannot do. Its ``limit_concurrency`` answers a bare 503 without
``Retry-After``, so the connection cap (``NETGRAD_MAX_CONNECTIONS`` connections or requests
in progress; 503 ``overloaded`` with ``Retry-After`` above) is kept by :func:`capped`, in
front of the app, on uvicorn's own counts. And it does not bound the time a client takes to
send its request head: a client that trickles header bytes (slowloris) holds its connection
and a file descriptor forever. :func:`guarded_protocol` is uvicorn's HTTP protocol (httptools
by default, :func:`http_implementation`; h11 with ``NETGRAD_HTTP=h11``) with one timer
more: a connection that has not delivered a complete request head
``NETGRAD_HEADER_TIMEOUT_S`` after it opened (or after its previous answer plus the
keep-alive time) is closed. Slow *bodies* are bounded in the app by
:class:`BodyTimeoutMiddleware` (408).

:func:`raise_fd_limit` lifts the soft ``RLIMIT_NOFILE`` to the hard one at start-up; the
service unit and manifests set the hard limit (``deploy/``). :func:`tune_malloc` keeps large
freed blocks from staying resident (memory after a burst).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import ProblemError, problem_response
from app.settings import Settings

log = logging.getLogger("netgrad")

#: Largest request head (request line + headers) accepted, bytes.
MAX_HEADER_BYTES = 64 * 1024


def capped(app: ASGIApp, cap: int, connections: Any, tasks: Any,
           retry_after_s: int) -> ASGIApp:
    """``app`` behind the connection cap: with more than ``cap`` connections open or
    requests in progress (uvicorn's own sets), answer 503 ``overloaded`` with
    ``Retry-After`` (uvicorn's ``limit_concurrency`` answers a bare 503 without it)."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (len(connections) > cap or len(tasks) > cap):
            response = problem_response(
                503, "overloaded",
                f"more than {cap} connections or requests are open (NETGRAD_MAX_CONNECTIONS); "
                "retry later", [], close=True, retry_after=retry_after_s,
            )
            await response(scope, receive, send)
            return
        await app(scope, receive, send)

    return guarded


def http_implementation(choice: str) -> str:
    """The HTTP parser ``netgrad serve`` runs: ``httptools`` (C, llhttp) when it is installed
    and ``choice`` is ``auto``, else ``h11`` (pure Python)."""
    if choice != "auto":
        return choice
    try:
        import httptools  # noqa: F401
    except ImportError:  # pragma: no cover - a dependency of netgrad
        return "h11"
    return "httptools"


def guarded_protocol(header_timeout_s: float, keep_alive_s: float, max_connections: int = 0,
                     retry_after_s: int = 2, impl: str = "h11") -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (``impl``: ``h11`` or ``httptools``), closing connections
    whose request head is late, and capping connections (when ``max_connections`` > 0, see
    :func:`capped`). With ``httptools``, a request head that grows past
    :data:`MAX_HEADER_BYTES` (its URL and headers, counted as the parser delivers them,
    whatever the reads) is also answered with a 431 problem document and closed; h11
    answers 400 itself, through
    ``h11_max_incomplete_event_size``, for a head still incomplete past that size.

    Args:
        header_timeout_s: seconds from the connection's start to a complete request head.
        keep_alive_s: extra seconds allowed before the head of a follow-up request.
        max_connections: connections + requests in progress before a 503.
        retry_after_s: ``Retry-After`` of that 503.
        impl: ``h11`` or ``httptools``.
    """
    base: Any
    if impl == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    else:
        from uvicorn.protocols.http.h11_impl import H11Protocol as base

    class Guarded(base):
        _head_timer: asyncio.TimerHandle | None = None
        _head_pending = True  # httptools: the next bytes belong to a request head
        _head_moved = False  # httptools: the parser called back during this read
        _head_bytes = 0  # httptools: bytes of the current request head so far
        _head_partial = 0  # httptools: of which whole reads inside a header not yet complete
        _head_too_large = False

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            if max_connections > 0:
                self.app: Any = capped(self.app, max_connections, self.connections, self.tasks,
                                  retry_after_s)

        def _arm(self, seconds: float) -> None:
            self._disarm()
            self._head_timer = self.loop.call_later(seconds, self._head_timeout)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timeout(self) -> None:
            self._head_timer = None
            busy = self.cycle is not None and not self.cycle.response_complete
            if not busy and not self.transport.is_closing():
                log.debug("closing %s: no complete request head within %.0f s",
                          self.client, header_timeout_s)
                self.transport.close()

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm(header_timeout_s)

        # h11: a request head arrived when handle_events makes a new cycle.
        def handle_events(self) -> None:
            before = self.cycle
            super().handle_events()
            if self.cycle is not before:
                self._disarm()

        # httptools: the parser says where heads and messages begin and end. A head's size
        # is the bytes of its URL and of every complete header (counted as the parser
        # hands them over), plus whole reads that fall inside one long header (no
        # callback); past MAX_HEADER_BYTES the parse stops with a 400.
        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._head_moved = True
            self._head_bytes = self._head_partial = 0

        def on_url(self, url: bytes) -> None:
            super().on_url(url)
            self._head_moved = True
            self._add_head(len(url))

        def on_header(self, name: bytes, value: bytes) -> None:
            super().on_header(name, value)
            self._head_moved = True
            # reads counted whole inside this header are part of it
            self._add_head(len(name) + len(value) + 4 - self._head_partial)
            self._head_partial = 0

        def _add_head(self, n: int) -> None:
            self._head_bytes += max(n, 0)
            if self._head_bytes > MAX_HEADER_BYTES:
                import httptools

                self._head_too_large = True
                raise httptools.HttpParserError("request head too large")

        def send_400_response(self, msg: str) -> None:
            if not self._head_too_large:
                super().send_400_response(msg)
                return
            # Not a malformed request: a 431 problem document, like the app's own answers.
            problem = problem_response(
                431, "request_head_too_large",
                f"the request head (request line and headers) is over {MAX_HEADER_BYTES} "
                "bytes; send fewer or shorter headers", [], close=True)
            head = [b"HTTP/1.1 431 Request Header Fields Too Large\r\n"]
            for name, value in [*self.server_state.default_headers, *problem.raw_headers]:
                head.append(name + b": " + value + b"\r\n")
            self.transport.write(b"".join(head) + b"\r\n" + bytes(problem.body))
            self.transport.close()

        def on_headers_complete(self) -> None:
            self._head_pending = False
            self._head_moved = True
            self._disarm()
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            # The next bytes are the next request's head (a body the app did not read
            # counted as body until here).
            self._head_pending = True
            self._head_moved = True
            if self.cycle is not None and self.cycle.response_complete and not (
                    self.transport.is_closing()):
                self._arm(keep_alive_s + header_timeout_s)

        def data_received(self, data: bytes) -> None:
            if impl != "httptools":
                super().data_received(data)
                return
            in_head = self._head_pending
            self._head_moved = False
            super().data_received(data)
            if in_head and self._head_pending and not self._head_moved and not (
                    self.transport.is_closing()):
                self._head_partial += len(data)
                self._head_bytes += len(data)
                if self._head_bytes > MAX_HEADER_BYTES:
                    self._head_too_large = True
                    self.send_400_response("Request head too large.")

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if impl == "httptools" and not self._head_pending:
                return  # the request's body is still coming: on_message_complete arms
            if not self.transport.is_closing() and (
                self.cycle is None or self.cycle.response_complete
            ):
                self._arm(keep_alive_s + header_timeout_s)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    Guarded.__name__ = Guarded.__qualname__ = (
        "GuardedHttpToolsProtocol" if impl == "httptools" else "GuardedH11Protocol")
    return Guarded


def log_config() -> dict[str, Any]:
    """uvicorn's logging configuration plus the ``netgrad`` logger (INFO, same handler), so
    the service's own one-line notes (e.g. a client that disconnected) reach the log."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["netgrad"] = {"handlers": ["default"], "level": "INFO",
                                    "propagate": False}
    return config


def __getattr__(name: str) -> Any:
    """``SettingsGuardedProtocol``: :func:`guarded_protocol` for the settings of the
    environment, by import string, for uvicorn's worker processes (a class made inside a
    function cannot be pickled to them)."""
    if name in ("SettingsGuardedProtocol", "SettingsGuardedH11Protocol"):
        from app.settings import get_settings

        s = get_settings()
        impl = "h11" if name == "SettingsGuardedH11Protocol" else http_implementation(s.http)
        cls = guarded_protocol(s.header_timeout_s, s.keep_alive_s, s.max_connections,
                               s.retry_after_s, impl)
        globals()[name] = cls
        return cls
    raise AttributeError(name)


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments of ``uvicorn.run`` / ``uvicorn.Config`` for ``settings``.

    The event loop is uvicorn's ``auto`` (uvloop when installed, as it is with netgrad);
    the HTTP parser is :func:`http_implementation` of ``NETGRAD_HTTP``.
    """
    impl = http_implementation(settings.http)
    http: Any = guarded_protocol(settings.header_timeout_s, settings.keep_alive_s,
                                 settings.max_connections, settings.retry_after_s, impl)
    if settings.http_workers > 1:  # worker processes import it (same NETGRAD_* environment)
        http = "app.server:SettingsGuardedProtocol"
    return {
        "log_config": log_config(),
        "http": http,
        "loop": "auto",
        "timeout_keep_alive": settings.keep_alive_s,
        "h11_max_incomplete_event_size": MAX_HEADER_BYTES,
        "backlog": 2048,
    }


#: Blocks from this size up are mapped on their own and unmapped when freed.
MMAP_THRESHOLD_BYTES = 128 * 1024


def tune_malloc() -> bool:
    """Fix glibc's mmap threshold at 128 KiB (and trim the heap above 256 KiB free).

    glibc raises its mmap threshold to the size of the largest block freed (up to 32 MiB),
    so after one large request the request bodies, pickles and answers of the next ones
    are carved from the heap, where freed pages stay resident: the server's resident set
    stayed at twice its steady state after a burst of 200,000-op requests. With the
    threshold fixed they are mapped and unmapped one by one, and the resident set returns
    to its steady state (``tests/reliability/test_memory.py``). Process-wide; returns
    ``False`` where there is no glibc.
    """
    from core.executor.allocator import configure

    return configure(MMAP_THRESHOLD_BYTES, 2 * MMAP_THRESHOLD_BYTES)


def raise_fd_limit() -> int:
    """Lift the soft open-file limit to the hard one; return the soft limit now in force."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return -1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):  # pragma: no cover - platform dependent
            pass
    return int(soft)


class BodyTimeoutMiddleware:
    """Refuse a request whose body does not arrive in time (408, connection closed).

    Args:
        app: the ASGI app.
        timeout_s: returns the seconds a whole body may take (read per request, so tests
            can override the settings).
    """

    def __init__(self, app: ASGIApp, timeout_s: Callable[[], float]) -> None:
        self.app = app
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        limit = self.timeout_s()
        deadline = loop.time() + limit
        done = False

        async def timed_receive() -> Message:
            nonlocal done
            if done:
                return await receive()
            try:
                # a timer on this task (no task per chunk, as asyncio.wait_for would make)
                async with asyncio.timeout_at(max(deadline, loop.time() + 0.001)):
                    message = await receive()
            except TimeoutError:
                raise ProblemError(
                    408, "body_timeout",
                    f"the request body did not arrive within {limit:g} s "
                    "(NETGRAD_BODY_TIMEOUT_S)", close=True,
                ) from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                done = True
            return message

        await self.app(scope, timed_receive, send)
