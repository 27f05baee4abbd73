"""Application factory: routers, error handlers, OpenAPI document and the worker-pool lifespan.

Run with ``netgrad serve`` or ``uvicorn --factory app.main:create_app``.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi_offline import FastAPIOffline

from app import __version__, operations
from app.api import docs, openapi_doc
from app.api.routes import gradients, health, jobs, operators, run, ui, verify
from app.errors import install_handlers
from app.server import BodyTimeoutMiddleware
from app.settings import Settings, get_settings
from core.ops import load_all
from core.preload import import_packages
from core.proto.limits import DECODER_MAX_DEPTH

log = logging.getLogger("netgrad")

DESCRIPTION = f"""
Caffe2 gradient nets generated remotely: `GetGradientForOp` and `AddGradientOperators` as a
service, control flow (`Do`, `If`, `While`) included, plus numeric verification of the result.

**Bodies.** JSON (`application/json`) or binary protobuf (`application/protobuf`,
`application/x-protobuf`), chosen by `Content-Type`; answers follow `Accept` (JSON by default).
A `.pbtxt` body (the request message in protobuf text format) is accepted as
`text/x-protobuf`. The page at `/` draws a net and its gradient (Netron) and verifies it.
`api_schemas/netgrad.proto` defines both: binary bodies are its `netgrad.v1` messages, JSON
bodies their JSON form (stated at the top of that file), and the schemas below are generated
from it, each field described by its comment there. netgrad fields are typed strictly
(integers are JSON numbers); every offending field of a body is named with its path.

**Caffe2 messages in JSON** use protobuf's JSON mapping with proto field names
(lowerCamelCase accepted on input), with one deviation: **`Argument.s` and
`Argument.strings` are UTF-8 text, not base64**, because they hold blob names (`"X"`,
`"NCHW"`); the canonical base64 mapping would turn a name like `data` into junk bytes.
Arguments holding non-UTF-8 bytes can only travel as binary protobuf. int64 fields
(`Argument.i`, `ints`) come back as JSON strings, as protobuf's JSON mapping prescribes.

**Gradient entries** are `null` (no gradient), a blob name (dense) or
`{{"indices": ..., "values": ...}}` (a sparse `GradientSlice`).

**Errors** are RFC 9457 `application/problem+json` documents whose `errors` list names every
offending op (op index, op type, sub-net path such as `op[3]:If/then_net/op[0]:Do/net`).

**Verification** (`/v1/verify`) runs in worker processes (`NETGRAD_WORKERS`, 503 when 0)
under per-job wall-clock, memory, tensor-size and loop-iteration limits.

**Limits.** Body size (`NETGRAD_MAX_BODY_BYTES`, 413) and sub-net nesting (`NETGRAD_MAX_DEPTH`,
capped at {DECODER_MAX_DEPTH}, what every decoder can follow, 422).
"""


def _start_pool(settings: Settings) -> Any:
    """Start the execution worker pool, or return ``None`` when disabled or unavailable."""
    if settings.workers <= 0:
        return None
    try:
        from core.executor import limits, pool
    except ImportError:
        log.warning("execution worker pool unavailable; /v1/verify will answer 501")
        return None
    run_limits = limits.RunLimits(
        wall_clock_s=settings.job_timeout_s,
        memory_bytes=settings.job_memory_bytes,
        max_elements=settings.job_max_elements,
        max_loop_iterations=settings.job_max_iterations,
    )
    if settings.executor != "pool":
        from core.executor import backends

        return backends.make_backend(
            settings.executor, settings.workers, run_limits, ray_address=settings.ray_address,
            ray_task_memory_bytes=settings.ray_task_memory_bytes,
            queue_timeout_s=settings.queue_timeout_s,
        )
    return pool.WorkerPool(
        settings.workers, run_limits, queue_timeout_s=settings.queue_timeout_s
    )


_frozen = False

#: The packages whose every module the server imports at start-up (:func:`import_everything`).
PACKAGES = ("api_schemas", "core", "app")


def import_everything() -> list[str]:
    """Import every module of netgrad's packages now, not when a request first needs one.

    Many modules are imported inside functions (error paths, hints, optional routes). The
    README's second command reinstalls netgrad under a running first server; a module first
    imported after that came from another copy of netgrad or, when pip had removed the old
    copy, failed to import: the request was answered 500. A module that needs an optional
    extra that is not installed (``ImportError``) is left out; its route says so itself.

    Returns:
        The names of the modules left out (sorted).
    """
    missing = import_packages(PACKAGES)
    if missing:
        log.debug("modules left out at start-up (optional extras): %s", ", ".join(missing))
    return sorted(missing)


def _freeze_startup_objects() -> None:
    """Move everything alive at the first start-up out of the garbage collector's sight.

    The modules, classes and tables loaded at start-up live as long as the process; without
    this every full collection (one every few dozen requests) walks them all again, which
    cost small requests about 15 % of their server time. Done once per process.
    """
    global _frozen
    if not _frozen:
        _frozen = True
        gc.collect()
        gc.freeze()


def _openapi(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema is not None:
        return app.openapi_schema
    schema = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    comps = schema.setdefault("components", {}).setdefault("schemas", {})
    comps.update(docs.component_schemas())
    openapi_doc.finish(schema)  # operationIds, every status, recorded examples, no binary
    app.openapi_schema = dict(schema)
    return app.openapi_schema


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the FastAPI application.

    Args:
        settings: explicit settings (tests); default :func:`app.settings.get_settings`.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Every module is imported and every op registers now, not on the first request: a
        # reinstall under a running server (the README's second command) must not turn
        # later requests into import errors.
        import_everything()
        load_all()
        settings_now = app.dependency_overrides.get(get_settings, get_settings)()
        pool = _start_pool(settings_now)
        app.state.pool = pool
        app.state.jobs = jobs.start_jobs(pool, settings_now)
        _freeze_startup_objects()
        try:
            yield
        finally:
            app.state.pool = None
            if app.state.jobs is not None:
                app.state.jobs.close()
            app.state.jobs = None
            held = getattr(app.state, "admission", None)
            if held is not None:
                held[1].close()
            if app.state.isolation is not None:
                app.state.isolation.close()
                app.state.isolation = None
            if pool is not None:
                pool.close()

    # Swagger UI and ReDoc served from the package (fastapi-offline), not from a CDN, so
    # /docs renders on machines without internet access.
    app = FastAPIOffline(
        title="netgrad",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        redoc_url=None,  # served by app.api.routes.ui: no CDN logo
        swagger_ui_parameters={"validatorUrl": None},  # no call to the online validator
    )
    if settings is not None:
        app.dependency_overrides[get_settings] = lambda: settings
    app.state.pool = None
    app.state.jobs = None
    app.state.isolation = None
    app.router.redirect_slashes = False  # a trailing slash is a 404 that names the route
    install_handlers(app)
    app.add_middleware(
        BodyTimeoutMiddleware,
        timeout_s=lambda: app.dependency_overrides.get(get_settings, get_settings)().body_timeout_s,
    )
    keys = operations.install(app, settings or get_settings())  # metrics, health, keys, logs
    app.include_router(gradients.router, **keys)
    app.include_router(verify.router, **keys)
    app.include_router(run.router, **keys)
    app.include_router(jobs.router, **keys)
    app.include_router(operators.router, **keys)
    app.include_router(health.router)
    app.include_router(ui.router)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app
