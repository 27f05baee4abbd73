"""What every route needs: settings, limits, the worker pool, and the lean request path.

:func:`serve` is the whole request path of a POST route: check ``Content-Type`` (415) and
``Accept`` (406), read the body (413 / 400 as soon as it shows), then run the route's work.
Bodies up to :data:`INLINE_BYTES` are served right on the event loop: with the GIL a thread
gains nothing for CPU-bound work, and the hand-off costs more than the work for small
requests. Larger ones go to a thread of a :class:`~core.proto.stack.DeepStackExecutor`,
whose stack also holds the protobuf parser's own nesting limit, so the loop stays free.
Work that waits on the execution workers (``blocking``, or a continuation the work
returns) first waits for a job permit on the event loop, then runs on a job thread
(:mod:`app.api.admission`), never onto the event loop nor a thread generation needs. Every
request is admitted first: per client, per kind, and for large bodies.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from google.protobuf.message import Message

from app.api import isolation
from app.api.admission import Admission
from app.api.negotiation import (
    Body,
    Media,
    check_content_encoding,
    read_body,
    request_media,
    response_media,
)
from app.auth import request_job_slot
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


def admission(request: Request) -> Admission:
    """The :class:`Admission` of the app for the running event loop (made on first use)."""
    loop = asyncio.get_running_loop()
    state = request.app.state
    held = getattr(state, "admission", None)
    if held is None or held[0] is not loop:
        if held is not None:
            held[1].close()
        pool = worker_pool(request)
        workers = int(getattr(pool, "size", 0) or 0) if pool is not None else 0
        held = (loop, Admission(current_settings(request), workers))
        state.admission = held
    adm: Admission = held[1]
    return adm


def _isolation_pool(request: Request) -> Any:
    """The app's isolation pool, started on the first large body (closed by the lifespan)."""
    state = request.app.state
    if getattr(state, "isolation", None) is None:
        state.isolation = isolation.start_isolation_pool(current_settings(request))
    return state.isolation


async def _isolated(pool: Any, work: Callable[[Body, Context], Outcome], body: Body,
                    ctx: Context) -> Outcome:
    """Serve a large body in the isolation pool (:mod:`app.api.isolation`); work that must
    wait on the execution workers comes back here."""
    loop = asyncio.get_running_loop()
    result = await loop.run_in_executor(
        None, pool.submit, isolation.run_isolated, work, body, replace(ctx, pool=None))
    if result == isolation.NEEDS_SERVER:  # (in the request's context: its ID, its op counts)
        run = contextvars.copy_context().run
        return await asyncio.wrap_future(_work_executor().submit(run, work, body, ctx))
    return isolation.answer(result)


def _declared_length(request: Request) -> int | None:
    try:
        return int(request.headers.get("content-length", ""))
    except ValueError:
        return None  # read_body names the bad header


async def serve(
    request: Request,
    work: Callable[[Body, Context], Outcome],
    message: type[Message],
    *,
    blocking: bool = False,
    enqueue: bool = False,
) -> Response:
    """Negotiate, read the body and run ``work(body, context)`` where it costs least.

    ``message`` is the request message class (read early for hopeless bodies). ``blocking``
    work waits on the execution workers (a job permit first); ``enqueue`` work only queues
    a job (``POST /v1/jobs``): it runs on a work thread at once, with no job permit.

    Raises:
        ProblemError: 415 (type, or a Content-Encoding) / 406; 429 / 503 from admission
            control.
        LimitExceededError, DecodeError: from reading the body; anything ``work`` raises.
    """
    settings = current_settings(request)
    media = request_media(request.headers.get("content-type"))
    check_content_encoding(request.headers.get("content-encoding"))
    accept, accept_type = response_media(request.headers.get("accept"))
    limits = GenLimits(max_depth=effective_max_depth(settings.max_depth),
                       max_ops=settings.max_ops)
    adm = admission(request)
    with adm.client(request), (nullcontext() if blocking or enqueue else adm.generating()):
        gate = adm.body_gate(_declared_length(request), media is Media.JSON, limits.max_ops,
                             limits.max_depth)
        try:
            text_limit = (media is Media.TEXT
                          and settings.max_text_body_bytes < settings.max_body_bytes)
            limit = settings.max_text_body_bytes if text_limit else settings.max_body_bytes
            data, text = await read_body(request, limit, media, message.DESCRIPTOR,
                                         watch=gate.watch, text_limit=text_limit,
                                         ended=gate.body_read)
            body = Body(data, media, accept, accept_type, text, request.headers.get("accept"),
                        request.headers.get("content-type"))
            ctx = Context(settings, limits, worker_pool(request))
            if blocking:
                with request_job_slot(ctx.pool):
                    async with adm.job_slot():
                        outcome = await adm.run_job(work, body, ctx)
            elif not enqueue and len(data) + len(text or "") <= INLINE_BYTES:
                outcome = work(body, ctx)
            elif not enqueue and gate.held and settings.isolate_large_bodies:
                outcome = await _isolated(_isolation_pool(request), work, body, ctx)
            else:
                # The request's context goes along (request ID, op counts: app.observability;
                # API key: app.auth).
                run = contextvars.copy_context().run
                outcome = await asyncio.wrap_future(_work_executor().submit(run, work, body, ctx))
            if isinstance(outcome, Response):
                return outcome
            with request_job_slot(ctx.pool):
                async with adm.job_slot():
                    return await adm.run_job(outcome)
        finally:
            gate.release()
