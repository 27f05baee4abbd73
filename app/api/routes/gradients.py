"""``POST /v1/gradients/op`` and ``POST /v1/gradients/net``: gradient generation as a service."""

from __future__ import annotations

from fastapi import APIRouter, Response

from app.api import docs, wire
from app.api.deps import BodyDep, LimitsDep, PoolDep
from app.api.negotiation import respond
from app.api.verification import run_verification
from core import api

router = APIRouter(prefix="/v1/gradients", tags=["gradients"])


@router.post(
    "/op",
    summary="Gradient ops of one forward op (GetGradientForOp), Do/If/While included",
    response_class=Response,
    responses=docs.responses("OpGradientResponse", "OpGradientResponse"),
    openapi_extra=docs.request_body(
        "OpGradientRequest", {"Do op (Add inside Do)": docs.DO_REQUEST}, "OpGradientRequest"
    ),
)
def gradient_of_op(body: BodyDep, limits: LimitsDep) -> Response:
    """Gradient ops and one input gradient per forward input, for ``{op, g_output}``."""
    req = wire.op_request(body, limits.max_depth)
    res = api.gradient_for_op(req.op, req.g_output, limits)
    return respond(body, *wire.op_response(res.grad_ops, res.g_input, res.diagnostics, body.accept))


@router.post(
    "/net",
    summary="Backward pass of a net (AddGradientOperators), optionally verified numerically",
    response_class=Response,
    responses=docs.responses("NetGradientResponse", "NetGradientResponse"),
    openapi_extra=docs.request_body(
        "NetGradientRequest", {"FC + Relu + Softmax": docs.NET_REQUEST}, "NetGradientRequest"
    ),
)
def gradient_of_net(body: BodyDep, limits: LimitsDep, pool: PoolDep) -> Response:
    """Gradient ops and a blob -> gradient map for ``{net, ys, skip, return_net, verify?...}``."""
    req = wire.net_request(body, limits.max_depth)
    res = api.gradient_for_net(req.net, req.ys, req.skip, req.return_net, limits, req.recompute)
    report, diagnostics = None, list(res.diagnostics)
    if req.verify is not None:  # the report covers these ops, seeded with explicit names
        checked = run_verification(req, pool, known=diagnostics)
        report = checked.report
        diagnostics += [d for d in checked.diagnostics if d not in diagnostics]
    out = wire.net_response(res.grad_ops, res.grad_map, diagnostics, res.net, report, body.accept)
    return respond(body, *out)
