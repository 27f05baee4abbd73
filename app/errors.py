"""Map engine errors and HTTP-level refusals to RFC 9457 ``application/problem+json``.

Every answer carries an ``errors`` list with *all* the problems of the error (each offending
op with its index, type and sub-net path), so a client fixes a request in one round trip.

Status codes:

* 400 - :class:`~core.errors.DecodeError`, :class:`~core.errors.InvalidRequestError`, a body
  that does not match the request message (unknown field, wrong type);
* 406 / 413 / 415 - not acceptable, body too large, unsupported media type;
* 413 - :class:`~core.errors.LimitExceededError` about sizes (body, op count, JSON values);
  422 for the other limits (nesting depth, tensor elements, iterations);
* 422 - :class:`~core.errors.InvalidNetError`, :class:`~core.errors.GradientError` (and its
  subclasses) and :class:`~core.errors.ExecutionError`: the request is readable but the net
  cannot be differentiated or run as asked;
* 408 - the body did not arrive within ``NETGRAD_BODY_TIMEOUT_S``;
* 429 - one client has more than ``NETGRAD_MAX_CLIENT_INFLIGHT`` requests in progress;
* 503 - :class:`~core.errors.BusyError`: every execution worker stayed busy past the queue
  limit, the job queue is full, a worker died under the job
  (:class:`~core.errors.WorkerLostError`), or an admission bound was reached (retry later);
  or verification/run without workers;
* 500 - :class:`~core.errors.InternalError`: a job failed in the worker with an exception
  netgrad did not expect (a bug, reported with its text and the request ID).

Every 503 and 429 carries ``Retry-After`` (seconds). A client that disconnects before its
body arrived is logged as one info line; no answer is sent.

A last-resort handler turns anything unexpected into a 500 problem without internals; client
mistakes never reach it because decoding and validation raise typed errors first.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from typing import cast

from asgi_correlation_id import correlation_id
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from api_schemas import netgrad_pb2
from app.api import jsonmap
from app.settings import get_settings
from core.errors import (
    BusyError,
    DecodeError,
    ExecutionError,
    GradientError,
    InternalError,
    InvalidNetError,
    InvalidRequestError,
    LimitExceededError,
    NetgradError,
)
from core.types import Diagnostic

log = logging.getLogger("netgrad")

PROBLEM_JSON = "application/problem+json"

#: LimitExceededError codes that are about the size of the request (413); others are 422.
SIZE_LIMIT_CODES = frozenset({"body_too_large", "too_many_ops", "too_many_subnets",
                              "too_many_args", "too_many_values"})

_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    408: "Request Timeout",
    404: "Not Found",
    405: "Method Not Allowed",
    406: "Not Acceptable",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}


class ProblemError(Exception):
    """An HTTP-level refusal that is not an engine error (406, 413, 415, 501, 503...).

    Attributes:
        status: HTTP status code.
        code: stable machine-readable code (``urn:netgrad:problem:<code>``).
        detail: human-readable explanation.
        problems: the offending items (defaults to one built from ``code``/``detail``).
        retry_after: ``Retry-After`` seconds (503/429; ``None``: the configured default).
        close: ask the client to close the connection (the body was not read).
    """

    def __init__(
        self, status: int, code: str, detail: str, problems: Iterable[Diagnostic] = (),
        retry_after: int | None = None, close: bool = False,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.problems = list(problems) or [Diagnostic("error", code, detail)]
        self.retry_after = retry_after
        self.close = close


def status_for(exc: NetgradError) -> int:
    """HTTP status of an engine error (see the module docstring)."""
    if isinstance(exc, BusyError):
        return 503
    if isinstance(exc, InternalError):  # (before ExecutionError, its base)
        return 500
    if isinstance(exc, DecodeError | InvalidRequestError):
        return 400
    if isinstance(exc, LimitExceededError):
        codes = {p.code for p in exc.problems} | {exc.code}
        return 413 if codes & SIZE_LIMIT_CODES else 422
    if isinstance(exc, InvalidNetError | GradientError | ExecutionError):
        return 422
    return 400


def problem_response(
    status: int, code: str, detail: str, problems: Sequence[Diagnostic], close: bool = False,
    retry_after: int | None = None,
) -> Response:
    """An ``application/problem+json`` response (always JSON, whatever ``Accept`` said).

    The document is a ``netgrad.v1.Problem`` in its JSON form; ``close`` asks the client to
    close the connection (the rest of the request body was not read); ``retry_after`` sets
    ``Retry-After`` (seconds).
    """
    items = [
        netgrad_pb2.ProblemItem(code=p.code, message=_text(p.message), op_index=p.op_index,
                                op_type=_opt_text(p.op_type), path=_opt_text(p.path),
                                blobs=[_text(b) for b in p.blobs])
        for p in problems or [Diagnostic("error", code, detail)]
    ]
    doc = netgrad_pb2.Problem(type=f"urn:netgrad:problem:{code}",
                              title=_TITLES.get(status, "Error"), status=status,
                              detail=_text(detail), errors=items)
    rid = correlation_id.get()
    if rid:  # the request ID (app.observability), so a report can be matched to the logs
        doc.instance = f"urn:netgrad:request:{rid}"
    data = json.dumps(jsonmap.encode(doc), ensure_ascii=False, separators=(",", ":"))
    headers = {"Connection": "close"} if close else {}
    if retry_after is not None:
        headers["Retry-After"] = str(int(retry_after))
    return Response(data.encode("utf-8"), status_code=status, media_type=PROBLEM_JSON,
                    headers=headers)


#: Most problems one answer lists (a body with 100 000 unknown keys has as many; listing
#: them all took the event loop for minutes: review, stop 21); the rest are counted.
MAX_LISTED_PROBLEMS = 100
#: Longest ``detail`` of an answer, in characters.
MAX_DETAIL_CHARS = 4000


def _cut(detail: str) -> str:
    if len(detail) <= MAX_DETAIL_CHARS:
        return detail
    return detail[:MAX_DETAIL_CHARS] + f"... ({len(detail):,} characters in all)"


def _text(s: str) -> str:
    """``s`` as valid UTF-8: a problem may quote what the client sent (e.g. a JSON key holding
    a lone surrogate), which is then escaped rather than allowed to fail the answer."""
    if s.isascii():
        return s
    return s.encode("utf-8", "backslashreplace").decode("utf-8")


def _opt_text(s: str | None) -> str | None:
    return None if s is None else _text(s)


def _closing(request: Request) -> bool:
    return bool(getattr(request.state, "close_connection", False))


def _retry_after(request: Request, status: int, given: int | None = None) -> int | None:
    """``Retry-After`` seconds of a 503/429 answer (the configured default unless given)."""
    if status not in (429, 503):
        return None
    if given is not None:
        return given
    return request.app.dependency_overrides.get(get_settings, get_settings)().retry_after_s


def install_handlers(app: FastAPI) -> None:
    """Register the exception handlers on ``app``."""

    async def on_netgrad(request: Request, exc: Exception) -> Response:
        from app.api.hints import detail_with_hints, with_hints

        exc = cast(NetgradError, exc)
        listed = exc.problems[:MAX_LISTED_PROBLEMS]
        problems = with_hints(request.url.path, listed)  # the fix, where known
        detail = detail_with_hints(_cut(exc.message), problems, listed)
        if len(exc.problems) > len(listed):
            more = len(exc.problems) - len(listed)
            problems.append(Diagnostic("error", "more_problems",
                                       f"and {more} more problem(s) like these, not listed; "
                                       "fix these and send the request again"))
        status = status_for(exc)
        return problem_response(status, exc.code, detail, problems,
                                close=_closing(request), retry_after=_retry_after(request, status))

    async def on_problem(request: Request, exc: Exception) -> Response:
        exc = cast(ProblemError, exc)
        return problem_response(exc.status, exc.code, exc.detail, exc.problems,
                                close=exc.close or _closing(request),
                                retry_after=_retry_after(request, exc.status, exc.retry_after))

    async def on_disconnect(request: Request, exc: Exception) -> Response:
        # Not a server error: one line, no traceback. Nobody reads the answer.
        client = request.client.host if request.client else "?"
        log.info("client %s disconnected before its %s %s body arrived", client,
                 request.method, request.url.path)
        return problem_response(400, "client_disconnected", "client disconnected", [],
                                close=True)

    async def on_validation(_: Request, exc: Exception) -> Response:
        problems = []
        for e in cast(RequestValidationError, exc).errors():
            where = ".".join(str(p) for p in e.get("loc", ()) if p != "body")
            msg = str(e.get("msg", "invalid value"))
            problems.append(Diagnostic("error", "invalid_field",
                                       f"{where}: {msg}" if where else msg, path=where or None))
        detail = "; ".join(p.message for p in problems) or "invalid request"
        return problem_response(422, "invalid_request", detail, problems)

    async def on_http(request: Request, exc: Exception) -> Response:
        from app.api.hints import not_found_hint

        exc = cast(StarletteHTTPException, exc)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        detail = str(exc.detail)
        if exc.status_code in (404, 405):
            paths = request.app.openapi().get("paths", {})  # built once, then cached
            routes = [(p, {m.upper() for m in ops}) for p, ops in paths.items()]
            hint = not_found_hint(request.url.path, request.method, routes)
            detail = f"{detail}: {hint}" if hint else detail
        response = problem_response(exc.status_code, code, detail, [])
        response.headers.update(exc.headers or {})  # e.g. Allow on a 405
        return response

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        response = problem_response(
            500, "internal_error", "internal error; the request was not served", []
        )
        rid = correlation_id.get()
        if rid:  # answered outside the request-ID middleware: echo the ID here
            response.headers["X-Request-ID"] = rid
        return response

    app.add_exception_handler(NetgradError, on_netgrad)
    app.add_exception_handler(ProblemError, on_problem)
    app.add_exception_handler(ClientDisconnect, on_disconnect)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)
