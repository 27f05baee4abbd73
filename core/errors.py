"""Typed exceptions of the engine. ``app/`` maps each class to an HTTP status.

Every error carries a list of :class:`~core.types.Diagnostic` entries (``problems``), so one
answer can name every offending op (op index, op type and sub-net path) at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Self

from core.types import Diagnostic


def shown_names(names: Sequence[str], limit: int = 10) -> str:
    """``'a', 'b' ...``: the first ``limit`` blob names of a problem, quoted, for its text."""
    return ", ".join(f"'{n}'" for n in names[:limit]) + (" ..." if len(names) > limit else "")


class NetgradError(Exception):
    """Base class: a request the engine cannot serve. Never an internal bug."""

    code = "netgrad_error"

    def __init__(self, message: str, problems: Iterable[Diagnostic] | None = None) -> None:
        super().__init__(message)
        self.message = message
        probs = list(problems or ())
        if not probs:
            probs = [Diagnostic("error", self.code, message)]
        self.problems: list[Diagnostic] = probs

    @classmethod
    def at(
        cls,
        message: str,
        *,
        op_index: int | None = None,
        op_type: str | None = None,
        path: str | None = None,
        blobs: Iterable[str] = (),
        code: str | None = None,
    ) -> Self:
        """Build an error with a single problem located at one op."""
        return cls(
            message,
            [
                Diagnostic(
                    "error",
                    code or cls.code,
                    message,
                    op_index=op_index,
                    op_type=op_type,
                    path=path,
                    blobs=tuple(blobs),
                )
            ],
        )


class DecodeError(NetgradError):
    """The body could not be decoded (truncated protobuf, bad JSON, unknown field, bad UTF-8)."""

    code = "decode_error"


class InvalidRequestError(NetgradError):
    """The request is well-formed but its fields are inconsistent (e.g. wrong g_output length)."""

    code = "invalid_request"


class LimitExceededError(NetgradError):
    """A configured limit was exceeded (nesting depth, body size, tensor size, iterations)."""

    code = "limit_exceeded"


class InvalidNetError(NetgradError):
    """The NetDef or an op in it is malformed (schema check, bad Do bindings, bad sub-net)."""

    code = "invalid_net"


class GradientError(NetgradError):
    """Gradient generation failed for reasons located in the net (Caffe2 raised here too)."""

    code = "gradient_error"


class GradientNotDefinedError(GradientError):
    """An op on the backward path has no gradient (not registered, should-not, not-yet)."""

    code = "gradient_not_defined"


class VersionMismatchError(GradientError):
    """A gradient op needs a blob version that a later in-place write overwrote (spec §2.6)."""

    code = "version_mismatch"


class ExecutionError(NetgradError):
    """Running a net failed: a kernel raised, shapes mismatched, or a job limit was hit."""

    code = "execution_error"


class InternalError(ExecutionError):
    """netgrad itself failed unexpectedly (a bug): a job raised an exception that is no
    :class:`NetgradError` in the worker. A server-side fault, not the request's (HTTP 500,
    where other execution errors are 422)."""

    code = "internal_error"


class BusyError(NetgradError):
    """Every execution worker stayed busy longer than the queue limit; retry later."""

    code = "workers_busy"


class QueueTimeoutError(BusyError):
    """No execution worker (or cluster CPU) became free within the queue limit: the service
    is busy, nothing failed. An asynchronous job waits and tries again; a request is a 503."""


class WorkerLostError(BusyError):
    """The execution worker of a job died under it (killed, OOM-killed, crashed) or could not
    be started. A server-side fault, not the request's: retry later (HTTP 503)."""

    code = "worker_lost"
