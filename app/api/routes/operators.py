"""``GET /v1/operators``: every registered op type with its gradient status."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from api_schemas import netgrad_pb2
from app.api import docs, wire
from app.api.negotiation import answer_body
from app.errors import ProblemError
from core import ops, registry

router = APIRouter(prefix="/v1", tags=["operators"])

_STATUSES = tuple(s.value for s in registry.GradientStatus)


@router.get(
    "/operators",
    summary="Registered op types and their gradient status",
    response_class=Response,
    responses={**docs.responses("OperatorList", "OperatorList", body=False),
               400: docs.problem_response("Unknown `status` (the answer lists the valid ones)")},
    # The query parameter is read by hand (declared here), so that a bad value is this
    # route's own 400 problem, not FastAPI's undocumented 422 validation error.
    openapi_extra={"parameters": [{
        "name": "status", "in": "query", "required": False,
        "description": "Only the types with this gradient status: " + ", ".join(_STATUSES) + ".",
        "schema": {"type": "string", "enum": list(_STATUSES)},
    }]},
)
def list_operators(request: Request) -> Response:
    """Every registered op type, sorted, with gradient status and whether it has a kernel.

    ``status`` keeps only the types with that status (``not_implemented_in_netgrad``: Caffe2
    differentiates the type, netgrad does not yet). An unknown status is a 400. The answer
    is JSON, binary protobuf or text format (``netgrad.v1.OperatorList``), as ``Accept``
    asks; one that allows none of them is a 406.
    """
    body = answer_body(request.headers.get("accept"))
    ops.load_all()
    status = request.query_params.get("status")
    if status is not None and status not in _STATUSES:
        raise ProblemError(
            400, "invalid_request",
            f"unknown status '{status}'; use one of: {', '.join(_STATUSES)}",
        )
    entries = [registry.REGISTRY[name] for name in registry.known_op_types()]
    if status is not None:
        entries = [e for e in entries if e.status.value == status]
    msg = netgrad_pb2.OperatorList(operators=[
        netgrad_pb2.OperatorInfo(type=e.op_type, gradient=e.status.value,
                                 has_kernel=e.kernel is not None or e.native is not None,
                                 doc=e.doc)
        for e in entries
    ])
    return wire.respond(body, msg, vary=True)
