"""The work of an asynchronous job (``POST /v1/jobs``): the engine part of ``/v1/verify`` or
``/v1/run``, run by :mod:`core.executor.jobstore` in a thread or a Ray task.

:func:`job_work` takes the binary request message, runs it exactly as the synchronous route
does and returns the serialized answer (``VerifyResponse`` / ``RunResponse``) - so a job's
result is byte-for-byte the synchronous answer - or a serialized ``Problem`` with the status
the synchronous route would have answered.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from api_schemas import netgrad_pb2
from app.api import wire
from app.api.running import run_in_pool
from app.api.verification import run_verification
from app.errors import ProblemError, status_for
from core.errors import LimitExceededError, NetgradError, QueueTimeoutError
from core.executor.backends import Backend, Cancelled, JobCancelledError, Progress
from core.executor.jobs import RunResult
from core.executor.limits import RunLimits
from core.ir.env import GenLimits
from core.types import Diagnostic

log = logging.getLogger("netgrad")

KINDS = ("verify", "run")


@dataclass(frozen=True)
class JobConfig:
    """What a job needs of the service settings (picklable: it travels to Ray).

    Attributes:
        gen_limits: gradient-generation limits.
        max_fetch_elements: cap of ``/v1/run`` answers.
        run_limits: per-job execution limits.
        ray_task_memory: Ray ``memory`` resource per task.
        queue_timeout_s: longest wait for a worker.
        max_result_bytes: largest answer a job may keep (the job store's byte budget,
            ``NETGRAD_JOB_STORE_BYTES``); ``0``: no limit.
    """

    gen_limits: GenLimits
    max_fetch_elements: int
    run_limits: RunLimits
    ray_task_memory: int
    queue_timeout_s: float
    max_result_bytes: int = 0


def verify_answer(req: netgrad_pb2.VerifyRequest, executor: object,
                  progress: Progress | None = None,
                  cancelled: Cancelled | None = None) -> netgrad_pb2.VerifyResponse:
    """The ``VerifyResponse`` of ``req``: what ``POST /v1/verify`` answers (the route calls
    this too) and a ``/v1/jobs`` verify job returns."""
    c = run_verification(
        req.net, wire.ys_value(req.ys), req.skip, wire.verify_options(req.verify),
        list(req.grad_ops) or None, req.recompute, executor, densify=req.densify,
        init_net=req.init_net if req.HasField("init_net") else None,
        progress=progress, cancelled=cancelled,
    )
    return netgrad_pb2.VerifyResponse(
        report=c.report, grad_ops=c.grad_ops, grad_map=wire.grad_map_kw(c.grad_map),
        diagnostics=[wire.diagnostic_kw(d) for d in c.diagnostics],
    )


def run_answer(req: netgrad_pb2.RunRequest, executor: object,
               config: JobConfig) -> netgrad_pb2.RunResponse:
    """The ``RunResponse`` of ``req``: what ``POST /v1/run`` answers (the route calls this
    too) and a ``/v1/jobs`` run job returns."""
    return run_response(run_in_pool(req, executor, config.max_fetch_elements,
                                    config.gen_limits))


def run_response(res: RunResult) -> netgrad_pb2.RunResponse:
    """A run result (:func:`app.api.running.run_in_pool`) as a ``RunResponse``."""
    return netgrad_pb2.RunResponse(
        outputs=[netgrad_pb2.BlobValue(blob=b, tensor=wire.tensor_pb(a))
                 for b, a in res.outputs.items()],
        grad_ops=res.grad_ops or (),
        grad_map=wire.grad_map_kw(res.grad_map or {}),
        diagnostics=[wire.diagnostic_kw(d) for d in res.diagnostics],
    )


def problem_message(status: int, code: str, detail: str,
                    problems: list[Diagnostic]) -> netgrad_pb2.Problem:
    """A ``Problem`` message as :func:`app.errors.problem_response` writes it."""
    from app.errors import _TITLES

    items = [netgrad_pb2.ProblemItem(code=p.code, message=p.message, op_index=p.op_index,
                                     op_type=p.op_type, path=p.path, blobs=list(p.blobs))
             for p in problems or [Diagnostic("error", code, detail)]]
    return netgrad_pb2.Problem(type=f"urn:netgrad:problem:{code}",
                               title=_TITLES.get(status, "Error"), status=status,
                               detail=detail, errors=items)


#: Longest an asynchronous job keeps waiting for free workers, in all (seconds).
BUSY_WAIT_S = 600.0
#: Pause between two tries of a job that found every worker busy (seconds).
BUSY_RETRY_S = 1.0


def _answer_when_workers_free(kind: str, request: bytes, config: JobConfig, backend: Backend,
                              progress: Progress, cancelled: Cancelled) -> object:
    """The job's answer; a try that found every worker busy (synchronous requests hold them)
    is made again after :data:`BUSY_RETRY_S`, for up to :data:`BUSY_WAIT_S` in all: a queued
    job waits for workers instead of failing with the 503 a request would get.

    Raises:
        JobCancelledError: cancelled (also while waiting).
        QueueTimeoutError: still busy after :data:`BUSY_WAIT_S`.
        NetgradError, ProblemError: the job's own error.
    """
    give_up = time.monotonic() + BUSY_WAIT_S
    while True:
        try:
            if kind == "verify":
                vreq = netgrad_pb2.VerifyRequest.FromString(request)
                return verify_answer(vreq, backend, progress, cancelled)
            rreq = netgrad_pb2.RunRequest.FromString(request)
            progress(0, 1)
            answer = run_answer(rreq, backend, config)
            progress(1, 1)
            return answer
        except QueueTimeoutError:
            if time.monotonic() + BUSY_RETRY_S > give_up:
                raise
        until = time.monotonic() + BUSY_RETRY_S
        while time.monotonic() < until:
            if cancelled():
                raise JobCancelledError("the job was cancelled")
            time.sleep(0.1)


def job_work(kind: str, request: bytes, config: JobConfig, backend: Backend,
             progress: Progress, cancelled: Cancelled) -> tuple[str, bytes]:
    """Run one job; ``("done", answer)``, ``("failed", problem)`` or ``("cancelled", b"")``.

    ``request`` is the binary ``VerifyRequest`` / ``RunRequest`` (already decoded and checked
    by the route). Never raises for a bad request or an engine error: those are the job's
    result.
    """
    try:
        answer = _answer_when_workers_free(kind, request, config, backend, progress, cancelled)
    except JobCancelledError:
        return "cancelled", b""
    except NetgradError as exc:  # (the synchronous route's problem: paths as in its body)
        from app.api.hints import detail_with_hints, with_hints

        # the fixes the synchronous route appends (review, stop 25: the job's problem lacked
        # them)
        problems = with_hints(f"/v1/{kind}", exc.problems)
        detail = detail_with_hints(exc.message, problems, exc.problems)
        msg = problem_message(status_for(exc), exc.code, detail, problems)
        return "failed", msg.SerializeToString(deterministic=True)
    except ProblemError as exc:
        msg = problem_message(exc.status, exc.code, exc.detail, exc.problems)
        return "failed", msg.SerializeToString(deterministic=True)
    except Exception:  # a bug: the job fails as the route would (500), never hangs
        log.exception("async %s job failed unexpectedly", kind)
        msg = problem_message(500, "internal_error",
                              "internal error; the job was not completed", [])
        return "failed", msg.SerializeToString(deterministic=True)
    data: bytes = answer.SerializeToString(deterministic=True)  # type: ignore[attr-defined]
    if config.max_result_bytes and len(data) > config.max_result_bytes:
        too_big = LimitExceededError.at(
            f"the job's answer is {len(data)} bytes, more than the job store keeps "
            f"({config.max_result_bytes} bytes, NETGRAD_JOB_STORE_BYTES): fetch fewer or "
            "smaller blobs, or send the request to its synchronous route",
            code="result_too_large")
        msg = problem_message(status_for(too_big), "result_too_large", too_big.message,
                              too_big.problems)
        return "failed", msg.SerializeToString(deterministic=True)
    return "done", data


__all__ = ["KINDS", "JobConfig", "job_work", "problem_message", "run_answer", "run_response",
           "verify_answer"]
