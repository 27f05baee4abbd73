"""``POST /v1/verify``: check generated (or given) gradient ops against finite differences."""

from __future__ import annotations

from fastapi import APIRouter, Response

from app.api import docs, wire
from app.api.deps import BodyDep, LimitsDep, PoolDep
from app.api.negotiation import respond
from app.api.verification import run_verification

router = APIRouter(prefix="/v1", tags=["verify"])


@router.post(
    "/verify",
    summary="Numeric gradient check of a net (finite differences, run in a worker process)",
    response_class=Response,
    responses=docs.responses("VerifyResponse", "VerifyResponse"),
    openapi_extra=docs.request_body(
        "VerifyRequest", {"FC + Relu + Softmax": docs.VERIFY_REQUEST}, "VerifyRequest"
    ),
)
def verify_gradients(body: BodyDep, limits: LimitsDep, pool: PoolDep) -> Response:
    """The report per checked input blob, plus the gradient ops it checked."""
    req = wire.verify_request(body, limits.max_depth)
    c = run_verification(req, pool)
    out = wire.verify_response(c.report, c.grad_ops, c.grad_map, c.diagnostics, body.accept)
    return respond(body, *out)
