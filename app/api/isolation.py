"""Generation for large bodies in a recycled subprocess: the server's memory stays flat.

Decoding and differentiating a request of 200,000 ops costs the process that does it about
a gigabyte at its peak, and CPython gives little of that back afterwards (freed small
objects stay in partly used arenas; the resident set stayed three times its fresh size).
So a generation request whose body is *large* (above ``NETGRAD_LARGE_BODY_BYTES``) is
served in a separate process of an isolation pool (a :class:`core.executor.pool.WorkerPool`
of ``NETGRAD_MAX_LARGE_BODIES`` processes under ``NETGRAD_LARGE_JOB_MEMORY_BYTES`` of address
space and ``NETGRAD_LARGE_JOB_TIMEOUT_S`` of wall clock), which is replaced after every
request: its memory goes back to the OS with it. The server process keeps only the body and
the answer's bytes.

The route's own work function runs there, unchanged, with the same settings and limits; its
answer comes back as ``(status, bytes, media type)``, and engine errors come back as the
same error type with the same problems. A ``/v1/gradients/net`` request that asks for
verification needs the execution workers, which only the server reaches: for it the
subprocess answers :data:`NEEDS_SERVER`, and the server serves it in-process as any other.

Deployment memory (the rule ``deploy/README.md`` states and ``tests/reliability/
test_deploy_limits.py`` checks against every manifest):
``workers * job_memory_bytes + max_large_bodies * large_job_memory_bytes + server_memory_bytes``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fastapi.responses import Response

from app import observability
from app.settings import Settings

log = logging.getLogger("netgrad")

#: The module of the work functions served in the isolation process (the generation routes).
ISOLATED_ROUTES = "app.api.routes.gradients"

#: What the subprocess answers for work that must finish in the server (verification).
NEEDS_SERVER = "needs-server"


def deployment_memory_bytes(settings: Settings) -> int:
    """Memory a deployment must allow the service: every process at its limit.

    ``workers * job_memory_bytes`` (execution workers; none with ``executor=ray``)
    ``+ max_large_bodies * large_job_memory_bytes`` (isolation processes, when enabled)
    ``+ server_memory_bytes``.
    """
    # With the Ray executor the execution workers run in the cluster, not beside the server.
    workers = 0 if settings.executor == "ray" else settings.workers
    total = workers * settings.job_memory_bytes + settings.server_memory_bytes
    if settings.isolate_large_bodies:
        total += settings.max_large_bodies * settings.large_job_memory_bytes
    return total


def start_isolation_pool(settings: Settings) -> Any:
    """The isolation pool of ``settings``, or ``None`` when disabled or unavailable."""
    if not settings.isolate_large_bodies:
        return None
    try:
        from core.executor import limits, pool
    except ImportError:  # pragma: no cover - the executor is part of the package
        return None
    run_limits = limits.RunLimits(
        wall_clock_s=settings.large_job_timeout_s,
        memory_bytes=settings.large_job_memory_bytes,
    )
    # (the generation routes' work functions come pickled by reference: their module is
    # imported while a worker starts, not by the request it serves; about 0.3 s per large
    # body. Only generation is isolated: run, verify and jobs never come here.)
    return pool.WorkerPool(settings.max_large_bodies, run_limits,
                           queue_timeout_s=settings.queue_timeout_s, recycle_after=1,
                           preload=(ISOLATED_ROUTES,))


#: What :func:`run_isolated` answers: status, content, media type, and the op counts the
#: work noted (forward, gradient; for the server's access log and metrics).
Isolated = tuple[int, bytes, "str | None", tuple["int | None", "int | None"]]


def run_isolated(work: Callable[..., Any], body: Any, context: Any) -> Isolated | str:
    """In the isolation process: ``work(body, context)`` (``context`` has no execution pool).

    Returns:
        ``(status, content, media type, op counts)`` of the answer, or :data:`NEEDS_SERVER`
        when the work must wait on the execution workers (verification).

    Raises:
        NetgradError: whatever the work raises (the pool re-raises it in the server).
    """
    outcome, ops = observability.counted(work, body, context)
    if not isinstance(outcome, Response):
        return NEEDS_SERVER
    return outcome.status_code, bytes(outcome.body), outcome.media_type, ops


def answer(result: Isolated) -> Response:
    """The server-side response of :func:`run_isolated`'s result (its op counts noted for
    the request being served)."""
    status, content, media, ops = result
    observability.note_ops(ops)
    return Response(content, status_code=status, media_type=media)
