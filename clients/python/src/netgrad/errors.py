"""Typed exceptions of the client: one class per kind of refusal, each carrying the problem.

Every error answer of the service is an RFC 9457 ``application/problem+json`` document whose
``errors`` list names every offending item (op index, op type, sub-net path, blobs).
:class:`ProblemError` carries it; the subclass says the kind, by HTTP status.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ProblemItem:
    """One offending item of a problem (typically one op).

    Attributes:
        code: stable machine-readable code, e.g. ``missing_input``.
        message: what is wrong and, where known, what to do.
        op_index: index of the op in its (sub-)net, or ``None``.
        op_type: type of that op, or ``None``.
        path: sub-net path (``op[3]:If/then_net/op[0]:Do``) or request field, or ``None``.
        blobs: blob names involved.
    """

    code: str
    message: str
    op_index: int | None = None
    op_type: str | None = None
    path: str | None = None
    blobs: tuple[str, ...] = field(default_factory=tuple)


class NetgradError(Exception):
    """Base class of every error the client raises."""


class TransportError(NetgradError):
    """The service could not be reached, or the connection failed (no HTTP answer)."""


class JobCancelledError(NetgradError):
    """The awaited job was cancelled (``DELETE /v1/jobs/{id}``) before it finished.

    Attributes:
        job_id: the job's id.
    """

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id} was cancelled")


class JobTimeoutError(NetgradError, TimeoutError):
    """``wait`` gave up before the job finished; the job itself goes on (cancel it, or wait
    again).

    Attributes:
        job_id: the job's id.
        status: the last status seen (``queued`` or ``running``).
    """

    def __init__(self, job_id: str, status: str, seconds: float) -> None:
        self.job_id = job_id
        self.status = status
        super().__init__(f"job {job_id} still {status} after {seconds:g} s")


class ProblemError(NetgradError):
    """The service refused the request.

    Attributes:
        status: HTTP status.
        code: the problem's code (the last part of its ``type`` URN), e.g. ``decode_error``.
        title, detail: the problem's reason phrase and explanation.
        errors: every offending item (:class:`ProblemItem`).
        document: the whole problem document (``{}`` when the body was not one).
        retry_after: seconds from ``Retry-After`` (429, 503), else ``None``.
    """

    def __init__(self, status: int, document: dict[str, Any], retry_after: float | None = None,
                 text: str = "") -> None:
        self.status = status
        self.document = document
        self.code = str(document.get("type", "")).rsplit(":", 1)[-1] or f"http_{status}"
        self.title = str(document.get("title", ""))
        self.detail = str(document.get("detail", text[:500]))
        self.errors = [
            ProblemItem(code=str(e.get("code", "")), message=str(e.get("message", "")),
                        op_index=e.get("op_index"), op_type=e.get("op_type"),
                        path=e.get("path"), blobs=tuple(e.get("blobs") or ()))
            for e in document.get("errors", []) if isinstance(e, dict)
        ]
        self.retry_after = retry_after
        super().__init__(f"{status} {self.code}: {self.detail}")


class BadRequestError(ProblemError):
    """400: the body cannot be decoded or its fields are inconsistent (e.g. missing inputs)."""


class AuthenticationError(ProblemError):
    """401: the service has API keys configured and the request carried none: pass
    ``api_key=`` (or set ``NETGRAD_API_KEY``)."""


class PermissionDeniedError(ProblemError):
    """403: the API key is not one the service knows (mistyped, or removed from its keys
    file)."""


class RateLimitedError(ProblemError):
    """429: the API key has as many execution jobs in flight as it may; retry after
    ``retry_after`` seconds (the server's ``Retry-After``)."""


class NotFoundError(ProblemError):
    """404: no such route (a trailing slash?)."""


class NotAcceptableError(ProblemError):
    """406: the Accept header allows neither JSON nor protobuf."""


class PayloadTooLargeError(ProblemError):
    """413: the body or the net is larger than the service's limits."""


class UnsupportedMediaTypeError(ProblemError):
    """415: unsupported Content-Type."""


class UnprocessableError(ProblemError):
    """422: the net cannot be differentiated or run as asked (every offending op listed)."""


class ServiceUnavailableError(ProblemError):
    """503: no execution worker free (or none configured): retry after ``retry_after``."""


class ServerError(ProblemError):
    """500 or another 5xx: a fault of the service."""


_BY_STATUS: dict[int, type[ProblemError]] = {
    400: BadRequestError, 401: AuthenticationError, 403: PermissionDeniedError,
    404: NotFoundError, 405: NotFoundError, 406: NotAcceptableError,
    413: PayloadTooLargeError, 415: UnsupportedMediaTypeError, 422: UnprocessableError,
    429: RateLimitedError, 503: ServiceUnavailableError,
}


def error_for(status: int, document: dict[str, Any], retry_after: float | None = None,
              text: str = "") -> ProblemError:
    """The typed exception of an error answer."""
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else ProblemError)
    return cls(status, document, retry_after, text)
