"""``GET /v1/operators``: every registered op type with its gradient status."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from api_schemas import netgrad_pb2
from app.api import docs, jsonmap
from app.api.negotiation import json_bytes
from core import ops, registry

router = APIRouter(prefix="/v1", tags=["operators"])


@router.get(
    "/operators",
    summary="Registered op types and their gradient status",
    response_class=Response,
    responses=docs.responses("OperatorList"),
)
def list_operators() -> Response:
    """Every registered op type, sorted, with gradient status and whether it has a kernel."""
    ops.load_all()
    entries = [registry.REGISTRY[name] for name in registry.known_op_types()]
    msg = netgrad_pb2.OperatorList(operators=[
        netgrad_pb2.OperatorInfo(type=e.op_type, gradient=e.status.value,
                                 has_kernel=e.kernel is not None, doc=e.doc)
        for e in entries
    ])
    return Response(json_bytes(jsonmap.encode(msg)), media_type="application/json")
