"""What every route needs: settings, limits, the worker pool, and the lean request path.

:func:`serve` is the whole request path of a POST route: check ``Content-Type`` (415) and
``Accept`` (406), read the body (413 / 400 as soon as it shows), then run the route's work.
Bodies up to :data:`INLINE_BYTES` are served right on the event loop: with the GIL a thread
gains nothing for CPU-bound work, and the hand-off costs more than the work for small
requests. Larger ones go to a thread of a :class:`~core.proto.stack.DeepStackExecutor`,
whose stack also holds the protobuf parser's own nesting limit, so the loop stays free.
Work that waits on the execution workers (``blocking``, or a continuation the work
returns) goes to the regular thread pool, never onto the event loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from google.protobuf.message import Message
from starlette.concurrency import run_in_threadpool

from app.api.negotiation import Body, read_body, request_media, response_media
from app.settings import Settings, get_settings
from core.ir.env import GenLimits
from core.proto.limits import effective_max_depth
from core.proto.stack import DeepStackExecutor

#: Bodies served on the event loop (see the module doc): up to some 1 000 ops, a few ms of
#: work. Binary ones above ``SAFE_BYTES`` are still parsed on a deep-stack thread
#: (:func:`core.proto.codec.decode_binary`).
INLINE_BYTES = 128 * 1024
#: Threads that serve larger bodies (generation holds the GIL: more would not help).
WORK_THREADS = 4


@dataclass(frozen=True)
class Context:
    """The per-request environment of a route's work.

    Attributes:
        settings: the service settings.
        limits: generation limits (nesting depth capped by the decoders; op count).
        pool: the execution worker pool, or ``None`` when disabled.
    """

    settings: Settings
    limits: GenLimits
    pool: Any


def current_settings(request: Request) -> Settings:
    """The settings of the app (tests override :func:`get_settings` per app)."""
    return request.app.dependency_overrides.get(get_settings, get_settings)()


def worker_pool(request: Request) -> Any:
    """The execution worker pool started by the lifespan (``None`` when disabled)."""
    return getattr(request.app.state, "pool", None)


_executor: DeepStackExecutor | None = None
_executor_lock = threading.Lock()


def _work_executor() -> DeepStackExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = DeepStackExecutor(WORK_THREADS, "netgrad-work")
        return _executor


#: What a route's work returns: the answer, or a call that completes it by waiting on the
#: execution workers (run in the thread pool).
Outcome = Response | Callable[[], Response]


async def serve(
    request: Request,
    work: Callable[[Body, Context], Outcome],
    message: type[Message],
    *,
    blocking: bool = False,
) -> Response:
    """Negotiate, read the body and run ``work(body, context)`` where it costs least.

    ``message`` is the request message class (read early for hopeless bodies).

    Raises:
        ProblemError: 415 / 406.
        LimitExceededError, DecodeError: from reading the body; anything ``work`` raises.
    """
    settings = current_settings(request)
    media = request_media(request.headers.get("content-type"))
    accept, accept_type = response_media(request.headers.get("accept"))
    data, text = await read_body(request, settings.max_body_bytes, media, message.DESCRIPTOR)
    body = Body(data, media, accept, accept_type, text)
    limits = GenLimits(max_depth=effective_max_depth(settings.max_depth),
                       max_ops=settings.max_ops)
    ctx = Context(settings, limits, worker_pool(request))
    if blocking:
        outcome = await run_in_threadpool(work, body, ctx)
    elif len(data) + len(text or "") <= INLINE_BYTES:
        outcome = work(body, ctx)
    else:
        # The request's context goes along (request ID, op counts: app.observability).
        run = contextvars.copy_context().run
        outcome = await asyncio.wrap_future(_work_executor().submit(run, work, body, ctx))
    if isinstance(outcome, Response):
        return outcome
    return await run_in_threadpool(outcome)
