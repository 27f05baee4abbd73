"""Glue between ``POST /v1/run`` and :func:`core.executor.jobs.run_net` (run in the pool).

Like verification, running a net is numeric work and never happens in the server process:
without a worker pool (``NETGRAD_WORKERS=0``) the request is refused with 503.
"""

from __future__ import annotations

from typing import Any

from api_schemas import netgrad_pb2
from app.api import wire
from app.errors import ProblemError
from core.executor.jobs import RunResult, check_fetch_names, run_net
from core.ir.env import GenLimits
from core.verify.init_net import prepare_inputs


def run_in_pool(
    req: netgrad_pb2.RunRequest, pool: Any, max_fetch_elements: int, limits: GenLimits
) -> RunResult:
    """Run ``req.net`` (plus gradient ops when ``req.ys`` is not empty) in a worker process.

    Raises:
        ProblemError: 503 when no worker pool runs.
        InvalidRequestError, GradientError, ExecutionError, LimitExceededError: from the engine
            (a fetch name the run did not produce is ``ExecutionError`` ``fetch_not_produced``,
            more than ``max_fetch_elements`` returned elements ``LimitExceededError``
            ``fetch_too_large``; ``missing_input`` for every blob the net reads that neither
            ``inputs`` nor ``init_net`` gives; ``densify`` without ``ys``).
    """
    if pool is None:
        raise ProblemError(
            503,
            "run_unavailable",
            "running nets happens in worker processes; start the service with "
            "NETGRAD_WORKERS >= 1",
        )
    check_fetch_names(req.fetch)  # (before init_net runs)
    inputs = prepare_inputs(
        req.net, wire.input_specs(req.inputs),
        req.init_net if req.HasField("init_net") else None, pool,
    )
    return run_net(
        req.net,
        inputs,
        list(req.fetch),
        ys=wire.ys_value(req.ys) if len(req.ys) else None,
        skip=req.skip,
        recompute=req.recompute,
        densify=req.densify,
        pool=pool,
        max_fetch_elements=max_fetch_elements,
        gen_limits=limits,
    )
