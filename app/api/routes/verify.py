"""``POST /v1/verify``: check generated (or given) gradient ops against finite differences."""

from __future__ import annotations

from fastapi import APIRouter, Response

from app.api import docs, wire
from app.api.deps import BodyDep, LimitsDep, PoolDep
from app.api.negotiation import respond
from app.api.verification import run_verification
from core import api

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
def verify_net(body: BodyDep, limits: LimitsDep, pool: PoolDep) -> Response:
    """The report per checked input blob, plus the gradient ops it checked."""
    req = wire.verify_request(body, limits.max_depth)
    res = api.gradient_for_net(req.net, req.ys, req.skip, False, limits)
    grad_ops = req.grad_ops if req.grad_ops is not None else res.grad_ops
    checked = run_verification(req, grad_ops, pool)
    diagnostics = list(res.diagnostics) + checked.diagnostics
    out = wire.verify_response(checked.report, grad_ops, res.grad_map, diagnostics, body.accept)
    return respond(body, *out)
