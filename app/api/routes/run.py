"""``POST /v1/run``: run a net (and its generated gradient) in a worker; return fetched blobs."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from api_schemas import netgrad_pb2
from app.api import docs, wire
from app.api.deps import Context, serve
from app.api.job_work import run_response
from app.api.negotiation import Body
from app.api.running import run_in_pool

router = APIRouter(prefix="/v1", tags=["run"])


@router.post(
    "/run",
    summary="Run a net, optionally with its gradient ops appended, and fetch blob values",
    response_class=Response,
    responses=docs.responses("RunResponse", "RunResponse"),
    openapi_extra=docs.request_body("RunRequest", {"If tutorial": docs.RUN_REQUEST}, "RunRequest"),
)
async def run_net(request: Request) -> Response:
    """The fetched blobs (fetch order); with ``ys`` also the gradient ops and grad map."""
    return await serve(request, _run, netgrad_pb2.RunRequest, blocking=True)


def _run(body: Body, ctx: Context) -> Response:
    req = wire.decode(body, netgrad_pb2.RunRequest, ctx.limits.max_depth,
                       ctx.limits.max_ops)
    res = run_in_pool(req, ctx.pool, ctx.settings.max_fetch_elements, ctx.limits)
    return wire.respond(body, run_response(res))  # (a /v1/jobs run job's answer too)
