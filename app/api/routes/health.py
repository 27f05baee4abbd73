"""``GET /healthz``: liveness."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from api_schemas import netgrad_pb2
from app import __version__
from app.api import docs, wire
from app.api.negotiation import answer_body

router = APIRouter(tags=["health"])


@router.get(
    "/healthz",
    summary="Liveness",
    response_class=Response,
    responses=docs.responses("Health", "Health", body=False, probe=True),
)
async def health(request: Request) -> Response:
    """``{"status": "ok"}`` while the service answers (async: never queued behind jobs).

    In JSON, or binary protobuf or text format (``netgrad.v1.Health``) when ``Accept``
    prefers one; an ``Accept`` that allows none of them still gets JSON (a probe never
    fails on its headers).
    """
    pool = getattr(request.app.state, "pool", None)
    workers = int(getattr(pool, "size", 0) or 0) if pool is not None else 0
    msg = netgrad_pb2.Health(status="ok", version=__version__, workers=workers)
    return wire.respond(answer_body(request.headers.get("accept"), lenient=True), msg,
                        vary=True)


# HEAD /healthz (uptime checkers): the GET answer's headers.
router.add_api_route("/healthz", health, methods=["HEAD"], include_in_schema=False)
