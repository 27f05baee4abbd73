"""``POST /v1/verify``: check generated (or given) gradient ops against finite differences."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from api_schemas import netgrad_pb2
from app.api import docs, wire
from app.api.checks import require_ys
from app.api.deps import Context, serve
from app.api.job_work import verify_answer
from app.api.negotiation import Body

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
async def verify_gradients(request: Request) -> Response:
    """The report per checked input blob, plus the gradient ops it checked."""
    return await serve(request, _verify, netgrad_pb2.VerifyRequest, blocking=True)


def _verify(body: Body, ctx: Context) -> Response:
    req = wire.decode(body, netgrad_pb2.VerifyRequest, ctx.limits.max_depth,
                       ctx.limits.max_ops)
    require_ys(req.ys)
    return wire.respond(body, verify_answer(req, ctx.pool))  # (a /v1/jobs job's answer too)
