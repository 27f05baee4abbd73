"""``POST /v1/run``: run a net (and its generated gradient) in a worker; return fetched blobs."""

from __future__ import annotations

from fastapi import APIRouter, Response

from app.api import docs, wire
from app.api.deps import BodyDep, LimitsDep, PoolDep, SettingsDep
from app.api.negotiation import respond
from app.api.running import run_in_pool

router = APIRouter(prefix="/v1", tags=["run"])


@router.post(
    "/run",
    summary="Run a net, optionally with its gradient ops appended, and fetch blob values",
    response_class=Response,
    responses=docs.responses("RunResponse", "RunResponse"),
    openapi_extra=docs.request_body("RunRequest", {"If tutorial": docs.RUN_REQUEST}, "RunRequest"),
)
def run_net(body: BodyDep, limits: LimitsDep, pool: PoolDep, settings: SettingsDep) -> Response:
    """The fetched blobs (fetch order); with ``ys`` also the gradient ops and grad map."""
    req = wire.run_request(body, limits.max_depth)
    res = run_in_pool(req, pool, settings.max_fetch_elements, limits)
    out = wire.run_response(res.outputs, res.grad_ops, res.grad_map, res.diagnostics, body.accept)
    return respond(body, *out)
