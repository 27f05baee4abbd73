"""``POST /v1/gradients/op`` and ``POST /v1/gradients/net``: gradient generation as a service."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from api_schemas import netgrad_pb2
from app.api import docs, wire
from app.api.checks import require_ys
from app.api.deps import Context, Outcome, serve
from app.api.hints import nested_under
from app.api.negotiation import Body
from app.api.verification import run_verification
from core import api
from core.errors import NetgradError

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
async def gradient_of_op(request: Request) -> Response:
    """Gradient ops and one input gradient per forward input, for ``{op, g_output}``."""
    return await serve(request, _gradient_of_op, netgrad_pb2.OpGradientRequest)


def _gradient_of_op(body: Body, ctx: Context) -> Response:
    req = wire.decode(body, netgrad_pb2.OpGradientRequest, ctx.limits.max_depth,
                       ctx.limits.max_ops)
    res = api.gradient_for_op(req.op, [wire.grad_value(g) for g in req.g_output], ctx.limits)
    return wire.respond(body, netgrad_pb2.OpGradientResponse(
        grad_ops=res.grad_ops,
        g_input=[wire.gradient_kw(g) for g in res.g_input],
        diagnostics=[wire.diagnostic_kw(d) for d in res.diagnostics],
    ))


@router.post(
    "/net",
    summary="Backward pass of a net (AddGradientOperators), optionally verified numerically",
    response_class=Response,
    responses=docs.responses("NetGradientResponse", "NetGradientResponse"),
    openapi_extra=docs.request_body(
        "NetGradientRequest", {"FC + Relu + Softmax": docs.NET_REQUEST}, "NetGradientRequest"
    ),
)
async def gradient_of_net(request: Request) -> Response:
    """Gradient ops and a blob -> gradient map for ``{net, ys, skip, return_net, verify?...}``."""
    return await serve(request, _gradient_of_net, netgrad_pb2.NetGradientRequest)


def _gradient_of_net(body: Body, ctx: Context) -> Outcome:
    req = wire.decode(body, netgrad_pb2.NetGradientRequest, ctx.limits.max_depth,
                       ctx.limits.max_ops)
    require_ys(req.ys)
    ys = wire.ys_value(req.ys)
    res = api.gradient_for_net(
        req.net, ys, req.skip, req.return_net, ctx.limits, req.recompute, req.densify
    )

    def answer() -> Response:
        diagnostics, report = list(res.diagnostics), None
        if req.HasField("verify"):  # the report covers these ops, seeded with explicit names
            try:
                checked = run_verification(
                    req.net, ys, req.skip, wire.verify_options(req.verify), None,
                    req.recompute, ctx.pool, known=diagnostics, densify=req.densify,
                )
            except NetgradError as exc:  # its option and input paths: inside `verify`
                nested_under(exc, "verify", netgrad_pb2.VerifyOptions.DESCRIPTOR)
                raise
            report = checked.report
            diagnostics += [d for d in checked.diagnostics if d not in diagnostics]
        return wire.respond(body, netgrad_pb2.NetGradientResponse(
            grad_ops=res.grad_ops,
            grad_map=wire.grad_map_kw(res.grad_map),
            diagnostics=[wire.diagnostic_kw(d) for d in diagnostics],
            net=res.net,
            verify_report=report,
        ))

    # Verification waits on the worker processes: finish in the thread pool.
    return answer if req.HasField("verify") else answer()
