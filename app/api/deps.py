"""Dependencies shared by the routes: settings, the negotiated body, limits and the pool."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request

from app.api.negotiation import Body, read_limited, request_media, response_media
from app.settings import Settings, get_settings
from core.ir.env import GenLimits
from core.proto.limits import effective_max_depth

SettingsDep = Annotated[Settings, Depends(get_settings)]


async def negotiated_body(request: Request, settings: SettingsDep) -> Body:
    """Check Content-Type (415) and Accept (406), then read at most ``max_body_bytes`` (413)."""
    media = request_media(request.headers.get("content-type"))
    accept, accept_type = response_media(request.headers.get("accept"))
    data = await read_limited(request, settings.max_body_bytes)
    return Body(data, media, accept, accept_type)


def gen_limits(settings: SettingsDep) -> GenLimits:
    """Generation limits of a request (nesting depth capped by the decoders; op count)."""
    return GenLimits(max_depth=effective_max_depth(settings.max_depth), max_ops=settings.max_ops)


def worker_pool(request: Request) -> Any:
    """The execution worker pool started by the lifespan (``None`` when disabled)."""
    return getattr(request.app.state, "pool", None)


BodyDep = Annotated[Body, Depends(negotiated_body)]
LimitsDep = Annotated[GenLimits, Depends(gen_limits)]
PoolDep = Annotated[Any, Depends(worker_pool)]
