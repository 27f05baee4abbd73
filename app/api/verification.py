"""Glue between the verify requests and :func:`core.verify.verify_net` (run in the pool).

Numeric work never runs in the server process: without a worker pool
(``NETGRAD_WORKERS=0``) verification is refused with 503.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from api_schemas import caffe2_pb2, netgrad_pb2
from app.api.wire import Ys, report_pb
from app.errors import ProblemError
from core.executor.backends import Cancelled, Progress
from core.types import Diagnostic, GradValue
from core.verify import VerifyOptions, VerifyReport, fanout, verify_net
from core.verify.compare import blind_diagnostic
from core.verify.init_net import prepare_inputs


@dataclass
class Checked:
    """A verification outcome ready for the response.

    Attributes:
        report: the report message (its diagnostics: the check's own, then the verdict).
        grad_ops: the gradient ops that were checked.
        grad_map: blob -> gradient from generation.
        diagnostics: every diagnostic of the verification, then a one-line verdict.
    """

    report: netgrad_pb2.VerifyReport
    grad_ops: list[caffe2_pb2.OperatorDef]
    grad_map: dict[str, GradValue]
    diagnostics: list[Diagnostic]


def run_verification(
    net: caffe2_pb2.NetDef,
    ys: Ys,
    skip: int,
    options: VerifyOptions,
    grad_ops: Sequence[caffe2_pb2.OperatorDef] | None,
    recompute: bool,
    pool: Any,
    known: Sequence[Diagnostic] = (),
    densify: bool = False,
    init_net: caffe2_pb2.NetDef | None = None,
    progress: Progress | None = None,
    cancelled: Cancelled | None = None,
) -> Checked:
    """Check the gradient of ``net`` numerically in a worker process.

    Args:
        net, ys, skip, recompute: as for gradient generation.
        options: inputs, mode, tolerances...
        grad_ops: gradient ops to check instead of generated ones (``None`` = generate).
        pool: the worker pool of the app, or ``None``.
        known: diagnostics the caller already reports (left out of the report's own list).
        densify: generate with ``densify`` (sparse and dense gradients of a blob summed).
        init_net: run first; the blobs it writes are fed (explicit inputs win).
        progress, cancelled: for async jobs (see :func:`core.verify.fanout.numeric`); a
            full-mode check fans out over the executor's workers either way.

    Raises:
        ProblemError: 503 when no worker pool runs.
        InvalidRequestError, GradientError, ExecutionError, LimitExceededError: from the engine
            (``missing_input`` for every blob the net reads that nothing gives).
    """
    if pool is None:
        raise ProblemError(
            503,
            "verify_unavailable",
            "numeric verification runs in worker processes; start the service with "
            "NETGRAD_WORKERS >= 1",
        )
    options.inputs = prepare_inputs(net, options.inputs, init_net, pool)
    res = verify_net(
        net, ys, options, skip=skip, grad_ops=grad_ops, pool=pool, recompute=recompute,
        densify=densify,
        runner=lambda job: fanout.numeric(job, pool, progress=progress, cancelled=cancelled),
    )
    own = [d for d in res.diagnostics if d not in known]
    blind = blind_diagnostic(res.report.blobs)
    verdict = [_verdict(res.report), *([blind] if blind is not None else [])]
    report = report_pb(res.report, [*own, *verdict])
    return Checked(report, list(res.grad_ops), dict(res.grad_map), [*res.diagnostics, *verdict])


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
