"""``/v1/jobs``: verifications and runs as asynchronous jobs (submit, poll, cancel).

``POST /v1/jobs`` takes a ``JobRequest`` (a verify or a run request), answers ``202
Accepted`` with ``Location: /v1/jobs/{id}`` and the job's status; ``GET /v1/jobs/{id}`` gives
status, progress and, when done, the answer the synchronous route would have given (when
failed, its problem); ``DELETE /v1/jobs/{id}`` cancels it. Finished jobs are kept
``NETGRAD_JOB_TTL_S`` seconds. With ``NETGRAD_EXECUTOR=ray`` the jobs live in the Ray cluster
(:class:`core.executor.jobstore.RayJobs`), so they outlive this replica; with the pool they
live as long as this process.

With API keys a job belongs to the key that submitted it: another key's ``GET`` / ``DELETE``
is the same 404 as an unknown id. Its queued or running jobs count against the key's
``NETGRAD_KEY_MAX_JOBS`` (429 ``too_many_jobs`` above, :mod:`app.auth`). Submitting only
queues: it never waits for an execution worker (503 only when queued and running jobs fill
``NETGRAD_MAX_JOBS`` or ``NETGRAD_JOB_STORE_BYTES``; finished ones make room). A failed job's
problem has the job's URL as its ``instance``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from api_schemas import netgrad_pb2
from app import auth
from app.api import docs, wire
from app.api.checks import YS_EMPTY
from app.api.deps import Context, serve
from app.api.hints import nested_under
from app.api.job_work import JobConfig, job_work, problem_message
from app.api.negotiation import Body, answer_body
from app.errors import ProblemError
from app.settings import Settings
from core.errors import InvalidRequestError
from core.executor.jobs import check_fetch_names
from core.executor.jobstore import JobRecord, LocalJobs, OwnerLimitError, RayJobs
from core.executor.limits import RunLimits
from core.ir.env import GenLimits
from core.proto.limits import effective_max_depth
from core.verify.missing import check_inputs

router = APIRouter(prefix="/v1", tags=["jobs"])

_UNAVAILABLE = docs._problem("No execution workers (NETGRAD_WORKERS=0), or too many jobs kept")
_NOT_FOUND = docs._problem("No such job, its result expired (NETGRAD_JOB_TTL_S), or it is "
                           "another API key's")


def _submit_responses() -> dict[int | str, dict[str, Any]]:
    out = docs.responses("JobStatus", "JobStatus")
    out[202] = {**out.pop(200), "description": "Accepted: poll the Location header's URL"}
    out[503] = _UNAVAILABLE
    return out


def _status_responses() -> dict[int | str, dict[str, Any]]:
    ok = docs.responses("JobStatus", "JobStatus")[200]
    return {200: ok, 404: _NOT_FOUND, 406: docs._problem("Accept allows neither JSON nor "
                                                         "protobuf"), 503: _UNAVAILABLE}


def start_jobs(pool: Any, settings: Settings) -> Any:
    """The job store of the app: in Ray for a Ray backend, else threads on the pool."""
    if pool is None:
        return None
    from core.executor.backends import RayBackend, as_backend

    backend = as_backend(pool)
    limits = backend.limits
    config = JobConfig(
        GenLimits(max_depth=effective_max_depth(settings.max_depth), max_ops=settings.max_ops),
        settings.max_fetch_elements,
        RunLimits(limits.wall_clock_s, limits.memory_bytes, limits.max_elements,
                  limits.max_loop_iterations),
        settings.ray_task_memory_bytes,
        settings.queue_timeout_s,
        settings.job_store_bytes,
    )
    if isinstance(backend, RayBackend):
        return RayJobs(backend, job_work, config, ttl_s=settings.job_ttl_s,
                       max_jobs=settings.max_jobs, max_bytes=settings.job_store_bytes)
    return LocalJobs(backend, job_work, config, ttl_s=settings.job_ttl_s,
                     max_jobs=settings.max_jobs, threads=backend.size,
                     max_bytes=settings.job_store_bytes)


def _jobs(request: Request) -> Any:
    jobs = getattr(request.app.state, "jobs", None)
    if jobs is None:
        raise ProblemError(503, "jobs_unavailable",
                           "jobs run in worker processes; start the service with "
                           "NETGRAD_WORKERS >= 1")
    return jobs


def _status(rec: JobRecord, ttl_s: float) -> netgrad_pb2.JobStatus:
    msg = netgrad_pb2.JobStatus(id=rec.id, status=rec.status, kind=rec.kind, ttl_s=ttl_s,
                                progress=netgrad_pb2.JobProgress(done=rec.done,
                                                                 total=rec.total))
    if rec.status == "done" and rec.kind == "verify":
        msg.verify.ParseFromString(rec.payload)
    elif rec.status == "done":
        msg.run.ParseFromString(rec.payload)
    elif rec.status == "failed":
        try:
            msg.error.ParseFromString(rec.payload)
        except Exception:  # an older store kept a dead driver's reason as text
            msg.error.Clear()
        if not msg.error.type:  # no problem: the job's driver (or thread) died under it
            msg.error.CopyFrom(problem_message(
                503, "job_lost", "the job's driver died; submit it again", []))
        # Where the problem happened: the job (a synchronous problem names its request).
        msg.error.instance = f"/v1/jobs/{rec.id}"
    return msg


def _owner() -> str | None:
    """The API key name whose jobs the request may see (``None`` without keys: all)."""
    key = auth.current_key()
    return key.name if key is not None else None


def _not_found(job_id: str) -> ProblemError:
    return ProblemError(404, "job_not_found",
                        f"no job '{job_id}': it never existed, its result expired "
                        "(NETGRAD_JOB_TTL_S after it finished), or it was dropped early to "
                        "make room in the job store (NETGRAD_MAX_JOBS, "
                        "NETGRAD_JOB_STORE_BYTES)")


@router.post(
    "/jobs",
    summary="Submit a verification or a run as an asynchronous job (202, Location)",
    response_class=Response,
    status_code=202,
    responses=_submit_responses(),
    openapi_extra=docs.request_body(
        "JobRequest", {"verify": {"verify": docs.VERIFY_REQUEST}}, "JobRequest"),
)
async def submit_job(request: Request) -> Response:
    """Queue the job (of the request's API key); its status (``queued``), with
    ``Location: /v1/jobs/{id}``. Never waits for an execution worker.

    Raises:
        HeaderProblem: 429 ``too_many_jobs`` when the key has its limit of jobs in flight.
        BusyError: 503 when queued and running jobs fill the job store.
    """
    jobs = _jobs(request)

    def submit(body: Body, ctx: Context) -> Response:
        req = wire.decode(body, netgrad_pb2.JobRequest, ctx.limits.max_depth,
                           ctx.limits.max_ops)
        kind = req.WhichOneof("job")
        if kind is None:
            raise InvalidRequestError.at("give one of 'verify' or 'run'", path="job")
        inner = getattr(req, kind)
        if kind == "verify" and not len(inner.ys):  # a 400 now, as /v1/verify gives
            raise InvalidRequestError.at(YS_EMPTY, path="verify.ys", code="ys_empty")
        try:
            wire.ys_value(inner.ys)  # a blob given two seeds: a 400 now too
            if kind == "run":
                check_fetch_names(inner.fetch)
            if not (inner.HasField("init_net") and len(inner.init_net.op)):
                # every blob the net reads is fed: a 400 now, as the synchronous route
                # gives (with an init net, only running it tells what it writes)
                given = inner.verify.inputs if kind == "verify" else inner.inputs
                check_inputs(inner.net, [i.blob for i in given])
        except InvalidRequestError as exc:
            raise nested_under(exc, kind, inner.DESCRIPTOR) from None
        allowance = auth.job_allowance(ctx.pool)
        try:
            rec = jobs.submit(kind, inner.SerializeToString(deterministic=True),
                              allowance.owner, allowance.max_owned)
        except OwnerLimitError as exc:
            raise allowance.refusal(exc.in_flight) from None
        resp = wire.respond(body, _status(rec, jobs.ttl_s))
        resp.status_code = 202
        resp.headers["Location"] = f"/v1/jobs/{rec.id}"
        return resp

    return await serve(request, submit, netgrad_pb2.JobRequest, enqueue=True)


#: The path parameter, declared by hand: read from ``request.path_params`` so that FastAPI adds
#: no validation-error (422) schema of its own to these routes.
_JOB_ID = {"parameters": [{"name": "job_id", "in": "path", "required": True,
                           "description": "The id a POST /v1/jobs answered.",
                           "schema": {"type": "string"}}]}


@router.get("/jobs/{job_id}", summary="Status, progress and result of a job",
            response_class=Response, responses=_status_responses(), openapi_extra=_JOB_ID)
def get_job(request: Request) -> Response:
    """The job's status; its answer when ``done``, its problem when ``failed``.

    Raises:
        ProblemError: 404 ``job_not_found`` for an unknown or expired id, or another API
            key's job (the same answer: nothing says the job exists).
    """
    job_id = request.path_params["job_id"]
    jobs = _jobs(request)
    body = answer_body(request.headers.get("accept"))
    rec = jobs.get(job_id, _owner())
    if rec is None:
        raise _not_found(job_id)
    return wire.respond(body, _status(rec, jobs.ttl_s), vary=True)


@router.delete("/jobs/{job_id}", summary="Cancel a job",
               response_class=Response, responses=_status_responses(), openapi_extra=_JOB_ID)
def cancel_job(request: Request) -> Response:
    """Cancel a queued or running job (a finished one is left as it is); its status.

    Raises:
        ProblemError: 404 ``job_not_found`` as :func:`get_job` (another key's job is left
            alone).
    """
    job_id = request.path_params["job_id"]
    jobs = _jobs(request)
    body = answer_body(request.headers.get("accept"))
    rec = jobs.cancel(job_id, _owner())
    if rec is None:
        raise _not_found(job_id)
    return wire.respond(body, _status(rec, jobs.ttl_s), vary=True)
