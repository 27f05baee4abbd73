"""Prometheus metrics (prometheus-client) and ``GET /metrics``.

Every metric is named ``netgrad_*`` after Prometheus' conventions (base units: seconds;
counters end in ``_total``). Per route: requests by status class and a latency histogram;
forward ops differentiated and gradient ops emitted; for the execution worker pool: its
size, ready and busy workers, queue depth, a job-duration histogram by outcome, jobs ended
by each limit and workers replaced by reason; ``netgrad_build_info``.

**Several processes.** ``netgrad serve`` with ``NETGRAD_HTTP_WORKERS`` > 1 runs that many
uvicorn processes. It then points ``PROMETHEUS_MULTIPROC_DIR`` at an empty directory before
they start, every process writes its values there (prometheus-client's multiprocess mode)
and ``/metrics``, whichever process answers it, sums them: counters and histograms over every
process that ever ran, the pool gauges over the live ones (``livesum``). The variable must be
set before :mod:`prometheus_client` is first imported, which is why only this module and
:mod:`app.cli` deal with it.
"""

from __future__ import annotations

import os
import platform
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

from app import __version__
from core.executor.observer import LIMITS, REPLACE_REASONS, PoolObserver, limit_of, outcome_of

#: prometheus-client's multiprocess directory variable (``netgrad serve`` sets it).
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: Latency buckets of HTTP requests (s): small generation requests take about a
#: millisecond, verification up to the job limit (30 s by default).
HTTP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                30.0, 60.0)
#: Duration buckets of execution jobs (s).
JOB_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

HTTP_REQUESTS = Counter(
    "netgrad_http_requests_total",
    "HTTP requests answered, by method, route template and status class (2xx, 4xx, ...).",
    ["method", "route", "status_class"],
)
HTTP_DURATION = Histogram(
    "netgrad_http_request_duration_seconds",
    "Time from the start of a request to the end of its answer, by method and route.",
    ["method", "route"],
    buckets=HTTP_BUCKETS,
)
HTTP_IN_PROGRESS = Gauge(
    "netgrad_http_requests_in_progress",
    "HTTP requests being served now.",
    multiprocess_mode="livesum",
)
FORWARD_OPS = Counter(
    "netgrad_forward_ops_total",
    "Forward ops of answered (2xx) requests that were differentiated: the ops of the "
    "request's net at its top level (a Do/If/While counts once), or 1 for /v1/gradients/op.",
    ["route"],
)
GRADIENT_OPS = Counter(
    "netgrad_gradient_ops_total",
    "Gradient ops emitted in answered (2xx) responses (top level of grad_ops).",
    ["route"],
)
POOL_SIZE = Gauge(
    "netgrad_pool_workers",
    "Execution worker processes configured (NETGRAD_WORKERS, summed over server processes).",
    multiprocess_mode="livesum",
)
POOL_READY = Gauge(
    "netgrad_pool_workers_ready",
    "Execution worker processes alive and started (what /readyz compares with the size).",
    multiprocess_mode="livesum",
)
POOL_BUSY = Gauge(
    "netgrad_pool_workers_busy",
    "Execution worker processes running a job now.",
    multiprocess_mode="livesum",
)
POOL_QUEUE = Gauge(
    "netgrad_pool_queue_depth",
    "Jobs waiting for an idle execution worker now.",
    multiprocess_mode="livesum",
)
JOB_DURATION = Histogram(
    "netgrad_pool_job_duration_seconds",
    "Wall-clock time of execution jobs, from hand-over to a worker to the result, by outcome "
    "(ok; limit: a job limit stopped it; error: anything else, e.g. a bad net or a crash).",
    ["outcome"],
    buckets=JOB_BUCKETS,
)
JOBS_LIMITED = Counter(
    "netgrad_pool_jobs_limited_total",
    "Execution jobs ended by a limit: wall_clock, memory, elements (tensor size) or "
    "iterations (While loop).",
    ["limit"],
)
WORKERS_REPLACED = Counter(
    "netgrad_pool_workers_replaced_total",
    "Execution worker processes replaced by a new one, by reason: crashed (died, killed), "
    "wall_clock (killed at the job limit), memory (exited at the memory limit), broken, "
    "recycled (replaced after recycle_after jobs: the large-body isolation pool).",
    ["reason"],
)
BUILD_INFO = Gauge(
    "netgrad_build_info",
    "Always 1; the labels say which netgrad and Python serve.",
    ["version", "python"],
    multiprocess_mode="livemax",
)

BUILD_INFO.labels(__version__, platform.python_version()).set(1)
for _limit in LIMITS:  # every label value exported from the start, at 0
    JOBS_LIMITED.labels(_limit)
for _reason in REPLACE_REASONS:
    WORKERS_REPLACED.labels(_reason)


def multiprocess_dir() -> str | None:
    """The directory of prometheus-client's multiprocess mode, or ``None`` (one process)."""
    return os.environ.get(MULTIPROC_ENV) or None


def exposition() -> bytes:
    """Every metric in the Prometheus text format (summed over processes in multiprocess
    mode)."""
    if multiprocess_dir() is None:
        return bytes(generate_latest(REGISTRY))
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return bytes(generate_latest(registry))


def process_exited() -> None:
    """Drop this process's ``live*`` gauge files (multiprocess mode), at shutdown."""
    if multiprocess_dir() is not None:
        multiprocess.mark_process_dead(os.getpid())


def record_request(method: str, route: str, status: int, seconds: float,
                   forward_ops: int | None, gradient_ops: int | None) -> None:
    """Count one answered request (called once per request by the access middleware)."""
    HTTP_REQUESTS.labels(method, route, f"{status // 100}xx").inc()
    HTTP_DURATION.labels(method, route).observe(seconds)
    if 200 <= status < 300:
        if forward_ops:
            FORWARD_OPS.labels(route).inc(forward_ops)
        if gradient_ops:
            GRADIENT_OPS.labels(route).inc(gradient_ops)


class PoolMetrics(PoolObserver):
    """The pool observer that feeds the ``netgrad_pool_*`` metrics.

    ``pool`` (set once the pool exists) is asked for its status to set the gauges.
    """

    def __init__(self) -> None:
        self.pool: Any = None

    def update(self) -> None:
        """Set the pool gauges from the pool's status (0 without a pool)."""
        status = getattr(self.pool, "status", None)
        if status is None:
            for g in (POOL_SIZE, POOL_READY, POOL_BUSY, POOL_QUEUE):
                g.set(0)
            return
        s = status()
        POOL_SIZE.set(s.size)
        POOL_READY.set(s.ready)
        POOL_BUSY.set(s.busy)
        POOL_QUEUE.set(s.waiting)

    def job_started(self) -> None:
        self.update()

    def job_ended(self, seconds: float, exc: BaseException | None) -> None:
        JOB_DURATION.labels(outcome_of(exc)).observe(seconds)
        limit = limit_of(exc)
        if limit is not None:
            JOBS_LIMITED.labels(limit).inc()
        self.update()

    def worker_replaced(self, reason: str) -> None:
        WORKERS_REPLACED.labels(reason).inc()

    def waiting_changed(self, delta: int) -> None:
        self.update()


router = APIRouter(tags=["operations"])


@router.get(
    "/metrics",
    summary="Prometheus metrics (text exposition format)",
    response_class=Response,
    responses={200: {"description": "Metrics", "content": {"text/plain": {}}}},
)
async def metrics(request: Request) -> Response:
    """Every ``netgrad_*`` metric (plus the client's ``process_*`` ones in one process)."""
    observer = getattr(request.app.state, "pool_metrics", None)
    if observer is not None:
        observer.update()
    return Response(exposition(), media_type=CONTENT_TYPE_LATEST)
