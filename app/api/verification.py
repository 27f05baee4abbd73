"""Glue between the verify requests and :func:`core.verify.verify_net` (run in the pool)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from api_schemas import caffe2_pb2
from app.api.wire import NetRequest
from app.errors import ProblemError
from core.types import Diagnostic


@dataclass
class Checked:
    """JSON form of a verification report and the diagnostics to add to the answer."""

    report: dict[str, Any]
    diagnostics: list[Diagnostic] = field(default_factory=list)


def run_verification(
    req: NetRequest, grad_ops: Sequence[caffe2_pb2.OperatorDef], pool: Any
) -> Checked:
    """Check ``grad_ops`` of ``req.net`` numerically (in a worker process when a pool runs).

    Raises:
        ProblemError: 501 when the verification engine is not available.
    """
    raise ProblemError(
        501, "verify_unavailable", "numeric verification is not available in this build"
    )
