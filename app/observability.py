"""Request IDs, the JSON access log and per-request metrics.

* **Request IDs** (asgi-correlation-id): an ``X-Request-ID`` the client sends is kept when it
  is 1-128 characters of ``A-Z a-z 0-9 . _ : / + = @ -`` (so it is safe in logs and URIs),
  otherwise a fresh hex UUID is made; the ID is echoed on every answer, stamped on every log
  record as ``request_id`` and written into problem documents as ``instance``.
* **Access log**: one record per request on the ``netgrad.access`` logger: method, route
  (template), path, status, latency in ms, body bytes in and out, op count and request ID.
* **Logs** (standard :mod:`logging`): ``NETGRAD_LOG_FORMAT=json`` renders every record as
  one JSON object per line (python-json-logger), ``text`` as a plain line; see
  :func:`logging_config`.
* **Metrics**: the same middleware feeds :func:`app.metrics.record_request`.

Route code reports the op counts of a request through :func:`note_forward_ops` and
:func:`note_gradient_ops` (a context variable set by the middleware; worker threads that
serve the request see it because the request's context is copied to them).
"""

from __future__ import annotations

import logging
import logging.config
import re
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from asgi_correlation_id import CorrelationIdFilter, CorrelationIdMiddleware, correlation_id
from google.protobuf import message as pb_message
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import metrics

REQUEST_ID_HEADER = "X-Request-ID"
_ID_OK = re.compile(r"[A-Za-z0-9._:/+=@-]{1,128}")
#: Route label of requests no route matched (keeps the label set bounded).
UNMATCHED = "<unmatched>"

access_log = logging.getLogger("netgrad.access")
M = TypeVar("M", bound=pb_message.Message)
T = TypeVar("T")


def valid_request_id(value: str) -> bool:
    """Whether a client's ``X-Request-ID`` is kept (else a new ID is made)."""
    return _ID_OK.fullmatch(value) is not None


def request_id() -> str | None:
    """The ID of the request being served, or ``None`` outside a request."""
    return correlation_id.get()


@dataclass
class RequestStats:
    """What route code reports about one request (op counts; ``None`` = not reported)."""

    forward_ops: int | None = None
    gradient_ops: int | None = None
    api_key: str | None = None


_stats: ContextVar[RequestStats | None] = ContextVar("netgrad_request_stats", default=None)


def note_forward_ops(n: int) -> None:
    """Record the number of forward ops in the request being served (if any)."""
    stats = _stats.get()
    if stats is not None:
        stats.forward_ops = n


def note_gradient_ops(n: int) -> None:
    """Record the number of gradient ops the answer carries (if serving a request)."""
    stats = _stats.get()
    if stats is not None:
        stats.gradient_ops = n


def counted(fn: Callable[..., T], *args: Any) -> tuple[T, tuple[int | None, int | None]]:
    """``fn(*args)`` with op counts collected apart, and ``(forward ops, gradient ops)``
    it noted: for work done in another process (``app.api.isolation``), whose counts the
    server then notes with :func:`note_ops`. (What ``fn`` raises goes up as it is: the
    isolation pool rebuilds an error from its type and problems only, so the counts of a
    request that fails there are not carried.)"""
    stats = RequestStats()
    token = _stats.set(stats)
    try:
        out = fn(*args)
    finally:
        _stats.reset(token)
    return out, (stats.forward_ops, stats.gradient_ops)


def note_ops(ops: tuple[int | None, int | None]) -> None:
    """Note the ``(forward ops, gradient ops)`` that :func:`counted` collected."""
    forward, gradient = ops
    if forward is not None:
        note_forward_ops(forward)
    if gradient is not None:
        note_gradient_ops(gradient)


def request_ops(msg: M) -> M:
    """Note the forward-op count of a decoded request message and return it unchanged.

    The count is ``len(net.op)`` for a message with a ``net`` (top level: a control op
    counts once), 1 for one with an ``op``.
    """
    fields = msg.DESCRIPTOR.fields_by_name
    if "net" in fields:
        note_forward_ops(len(msg.net.op))  # type: ignore[attr-defined]
    elif "op" in fields:
        note_forward_ops(1)
    return msg


def response_ops(msg: pb_message.Message) -> None:
    """Note the gradient-op count of an answer message (its top-level ``grad_ops``)."""
    if "grad_ops" in msg.DESCRIPTOR.fields_by_name:
        note_gradient_ops(len(msg.grad_ops))  # type: ignore[attr-defined]


def note_api_key(name: str) -> None:
    """Record the name of the API key the request was admitted with (for the access log)."""
    stats = _stats.get()
    if stats is not None:
        stats.api_key = name


def _route_of(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    endpoint = scope.get("endpoint")  # a plain Starlette route (docs pages)
    if endpoint is not None:
        return str(scope.get("path", UNMATCHED))
    return UNMATCHED


class AccessMiddleware:
    """ASGI middleware: one access-log record and one metrics sample per HTTP request.

    Runs inside :class:`~asgi_correlation_id.CorrelationIdMiddleware`, so the request ID is
    known. A request whose handler raised is logged and counted as 500, then re-raised for
    the server-error handler.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        stats = RequestStats()
        token = _stats.set(stats)
        seen = {"in": 0, "out": 0, "status": 500}

        async def counting_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                seen["in"] += len(message.get("body", b""))
            return message

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                seen["status"] = int(message["status"])
            elif message["type"] == "http.response.body":
                seen["out"] += len(message.get("body", b""))
            await send(message)

        metrics.HTTP_IN_PROGRESS.inc()
        try:
            await self.app(scope, counting_receive, counting_send)
        finally:
            metrics.HTTP_IN_PROGRESS.dec()
            _stats.reset(token)
            seconds = time.perf_counter() - start
            route = _route_of(scope)
            method = str(scope.get("method", ""))
            status = seen["status"]
            metrics.record_request(method, route, status, seconds, stats.forward_ops,
                                   stats.gradient_ops)
            if access_log.isEnabledFor(logging.INFO):
                # A record made directly: Logger.info would walk the stack for the caller's
                # file and line, which is a third of the cost of the line and says nothing.
                access_log.handle(access_log.makeRecord(
                    access_log.name, logging.INFO, "app.observability", 0,
                    "%s %s %d %.1f ms",
                    (method, scope.get("path", ""), status, seconds * 1000), None,
                    extra={
                        "method": method,
                        "route": route,
                        "path": scope.get("path", ""),
                        "status": status,
                        "latency_ms": round(seconds * 1000, 3),
                        "bytes_in": seen["in"],
                        "bytes_out": seen["out"],
                        "op_count": stats.forward_ops,
                        "api_key": stats.api_key,
                    },
                ))


def install(app: Any) -> None:
    """Add the access middleware and, outside it, the request-ID middleware to ``app``."""
    app.add_middleware(AccessMiddleware)
    app.add_middleware(
        CorrelationIdMiddleware,
        header_name=REQUEST_ID_HEADER,
        validator=valid_request_id,
    )


def logging_config(fmt: str, level: str = "INFO") -> dict[str, Any]:
    """A :func:`logging.config.dictConfig` document for the service and uvicorn.

    Every record of the ``netgrad`` and ``uvicorn`` loggers goes to stderr with a
    ``request_id`` field; ``fmt`` ``json`` renders one JSON object per line (timestamp,
    level, logger, message and every extra field), ``text`` a readable line.
    """
    if fmt == "json":
        formatter: dict[str, Any] = {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(levelname)s %(name)s %(process)d %(message)s %(request_id)s",
            "rename_fields": {"levelname": "level", "name": "logger", "process": "pid"},
            "timestamp": "time",  # ISO 8601, UTC
        }
    else:
        formatter = {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"}
    handler = {
        "class": "logging.StreamHandler",
        "stream": "ext://sys.stderr",
        "formatter": "netgrad",
        "filters": ["request_id"],
    }
    loggers: dict[str, Any] = {
        name: {"handlers": ["netgrad"], "level": level.upper(), "propagate": False}
        for name in ("uvicorn", "asgi_correlation_id")
    }
    loggers["uvicorn.error"] = {"level": level.upper()}  # through "uvicorn"
    # Propagates as well: a root handler (none under uvicorn; pytest's) sees the records too.
    loggers["netgrad"] = {"handlers": ["netgrad"], "level": level.upper(), "propagate": True}
    loggers["uvicorn.access"] = {"handlers": [], "level": "WARNING", "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {
            "request_id": {"()": RequestIdFilter}
        },
        "formatters": {"netgrad": formatter},
        "handlers": {"netgrad": handler},
        "loggers": loggers,
    }


class RequestIdFilter(CorrelationIdFilter):
    """Stamps every record with ``request_id`` (``-`` outside a request)."""

    def __init__(self) -> None:
        super().__init__(default_value="-")

    def filter(self, record: logging.LogRecord) -> bool:
        super().filter(record)
        record.request_id = record.__dict__.pop("correlation_id", None) or "-"
        return True


_configured: tuple[str, str] | None = None


def configure_logging(fmt: str, level: str = "INFO") -> None:
    """Apply :func:`logging_config` once per process (again only when the format changes).

    ``netgrad serve`` hands the same document to uvicorn; an app started another way
    (``uvicorn --factory app.main:create_app``) configures itself here.
    """
    global _configured
    if _configured == (fmt, level):
        return
    _configured = (fmt, level)
    logging.config.dictConfig(logging_config(fmt, level))
