"""Glue between the verify requests and :func:`core.verify.verify_net` (run in the pool).

Numeric work never runs in the server process: without a worker pool
(``NETGRAD_WORKERS=0``) verification is refused with 503.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from api_schemas import caffe2_pb2
from app.api.wire import NetRequest
from app.api.wire import json_float as _num
from app.errors import ProblemError, diagnostic_json
from core.types import Diagnostic, GradValue
from core.verify import VerifyOptions, VerifyReport, verify_net


@dataclass
class Checked:
    """A verification outcome ready for the response.

    Attributes:
        report: JSON form of the report (see ``VerifyReportModel``).
        grad_ops: the gradient ops that were checked.
        grad_map: blob -> gradient from generation.
        diagnostics: every diagnostic of the verification, then a one-line verdict.
    """

    report: dict[str, Any]
    grad_ops: list[caffe2_pb2.OperatorDef]
    grad_map: dict[str, GradValue]
    diagnostics: list[Diagnostic]


def run_verification(
    req: NetRequest, pool: Any, known: Sequence[Diagnostic] = ()
) -> Checked:
    """Check the gradient of ``req.net`` numerically in a worker process.

    Args:
        req: the decoded request (``req.verify`` = options, ``req.grad_ops`` = override).
        pool: the worker pool of the app, or ``None``.
        known: diagnostics the caller already reports (left out of the report's own list).

    Raises:
        ProblemError: 503 when no worker pool runs.
        InvalidRequestError, GradientError, ExecutionError, LimitExceededError: from the engine.
    """
    if pool is None:
        raise ProblemError(
            503,
            "verify_unavailable",
            "numeric verification runs in worker processes; start the service with "
            "NETGRAD_WORKERS >= 1",
        )
    options = req.verify if req.verify is not None else VerifyOptions()
    res = verify_net(
        req.net,
        req.ys,
        options,
        skip=req.skip,
        grad_ops=req.grad_ops,
        pool=pool,
        recompute=req.recompute,
    )
    own = [d for d in res.diagnostics if d not in known]
    verdict = _verdict(res.report)
    report = report_json(res.report, [*own, verdict])
    return Checked(report, list(res.grad_ops), dict(res.grad_map), [*res.diagnostics, verdict])


def _verdict(report: VerifyReport) -> Diagnostic:
    failed = [b.blob for b in report.blobs if not b.passed]
    if not failed:
        checked = ", ".join(b.blob for b in report.blobs) or "(none)"
        return Diagnostic(
            "info", "verify_passed", f"numeric check ({report.mode}) passed for {checked}"
        )
    return Diagnostic(
        "warning",
        "verify_failed",
        f"numeric check ({report.mode}) failed for {', '.join(failed)}",
        blobs=tuple(failed),
    )


def report_json(report: VerifyReport, diagnostics: Sequence[Diagnostic]) -> dict[str, Any]:
    """JSON form of a :class:`core.verify.VerifyReport`."""
    return {
        "passed": report.passed,
        "mode": report.mode,
        "step": _num(report.step),
        "atol": _num(report.atol),
        "rtol": _num(report.rtol),
        "blobs": [
            {
                "blob": b.blob,
                "passed": b.passed,
                "max_abs_error": _num(b.max_abs_error),
                "max_rel_error": _num(b.max_rel_error),
                "worst_index": [int(i) for i in (b.worst_index or ())],
                "analytic": _num(b.analytic),
                "numeric": _num(b.numeric),
                "gradient": b.gradient,
                "checked": b.checked,
                "nondifferentiable": b.nondifferentiable,
                "note": b.note or None,
            }
            for b in report.blobs
        ],
        "diagnostics": [diagnostic_json(d) for d in diagnostics],
    }
