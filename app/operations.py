"""Everything an operator needs, wired into the app in one call: :func:`install`.

Logs and request IDs (:mod:`app.observability`), ``/metrics`` (:mod:`app.metrics`),
``/livez`` and ``/readyz`` (:mod:`app.health`), API keys and per-key job limits
(:mod:`app.auth`), CORS. The command-line side is :mod:`app.ops_cli`.

Middleware order, outermost first: request ID, access log + metrics, CORS, docs guard,
then the app. So every answer (CORS preflights and refusals included) carries the request
ID and is logged and counted once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

from app import auth, health, metrics, observability
from app.settings import Settings, get_settings


def cors_origins(settings: Settings) -> list[str]:
    """The CORS origins of ``NETGRAD_CORS_ORIGINS`` (comma-separated; empty: CORS off)."""
    return [o.strip() for o in settings.cors_origins.split(",") if o.strip()]


def install(app: FastAPI, settings: Settings) -> dict[str, Any]:
    """Add logging, request IDs, metrics, health, keys and CORS to ``app``.

    Call before the ``/v1`` routers are included: the returned dict holds the keyword
    arguments of their ``include_router`` (the API-key check as ``dependencies`` and its
    answers as ``responses``; both empty when no keys file is configured).
    """
    observability.configure_logging(settings.log_format, settings.log_level)
    ring = auth.KeyRing(settings.api_keys_file) if settings.api_keys_file else None
    app.state.keyring = ring
    if ring is not None and settings.protect_docs:
        app.add_middleware(auth.DocsGuard, ring=ring)
    origins = cors_origins(settings)
    if origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["GET", "POST", "OPTIONS"],
            allow_headers=["Authorization", "X-API-Key", "Content-Type", "Accept",
                           observability.REQUEST_ID_HEADER],
            expose_headers=[observability.REQUEST_ID_HEADER, "Retry-After",
                            "WWW-Authenticate"],
        )
    observability.install(app)
    auth.install_handlers(app)
    app.include_router(health.router)
    app.include_router(metrics.router)
    _wrap_lifespan(app, ring)
    return {"dependencies": auth.key_dependencies(ring), "responses": auth.key_responses(ring)}


def _wrap_lifespan(app: FastAPI, ring: auth.KeyRing | None) -> None:
    """Run the app's own lifespan (which starts the pool), then watch the pool."""
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[Any]:
        async with inner(a) as state:
            settings = a.dependency_overrides.get(get_settings, get_settings)()
            pool = a.state.pool
            observer = metrics.PoolMetrics()
            observer.pool = pool
            if pool is not None and hasattr(pool, "observer"):
                pool.observer = observer
            if pool is not None and ring is not None:
                a.state.pool = auth.KeyLimitedPool(pool, settings.key_max_jobs,
                                                   jobs=getattr(a.state, "jobs", None))
            a.state.pool_metrics = observer
            keeper = health.PoolKeeper(pool, observer)
            keeper.start()
            try:
                yield state
            finally:
                keeper.stop()
                metrics.process_exited()

    app.router.lifespan_context = lifespan
