"""Service settings (pydantic-settings): environment variables prefixed ``NETGRAD_``.

Example: ``NETGRAD_MAX_BODY_BYTES=1048576 NETGRAD_WORKERS=4 netgrad serve``.
Tests override :func:`get_settings` through ``app.dependency_overrides`` or build the app with
``create_app(Settings(...))``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

# pydantic stays for the settings only (FastAPI depends on it anyway): pydantic-settings reads
# and validates the NETGRAD_* environment variables. It defines no part of the wire format:
# requests and answers are defined once, in api_schemas/netgrad.proto.
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """All tunables of the service.

    Attributes:
        host, port: where ``netgrad serve`` listens.
        max_body_bytes: largest accepted request body (413 above).
        max_text_body_bytes: largest accepted body in protobuf text format
            (``text/x-protobuf``; 413 above, when smaller than ``max_body_bytes``). The
            text parser is pure Python, 1-4 µs of CPU per byte, so a 64 MiB text body would
            hold a core for up to four minutes; binary and JSON bodies parse in C.
        max_depth: deepest sub-net nesting (Do/If/While inside each other) accepted, in sub-net
            levels: a lowered If/While level costs two (branch net + its Do wrapper), so the
            default 128 admits 64 levels of lowered control flow; capped at
            :data:`core.proto.limits.DECODER_MAX_DEPTH`, what every decoder can follow.
        workers: execution worker processes (numeric verification); 0 disables them.
        job_timeout_s: wall-clock limit of one execution job.
        job_memory_bytes: address-space limit of a worker process.
        job_max_elements: largest tensor (elements) a job may create.
        job_max_iterations: most loop iterations (While) a job may run.
        max_fetch_elements: most tensor elements one ``POST /v1/run`` may return (all fetched
            blobs together; 422 above).
        queue_timeout_s: longest wait for an idle execution worker (503 ``workers_busy``
            above), so a burst of long jobs cannot pile up requests without bound.
        max_ops: most ops in one request, sub-nets included (413 above): bounds the time
            gradient generation, which runs in the server process, can take. It bounds the
            number of sub-nets (``Argument.n`` / ``nets``) the same way.

    Operation (issue 11; README "Operate it"):
        http_workers: uvicorn worker processes of ``netgrad serve`` (each with its own
            execution pool of ``workers``); metrics are then summed over them through
            ``PROMETHEUS_MULTIPROC_DIR``.
        http: HTTP/1.1 parser of ``netgrad serve``: ``httptools`` (C; what ``auto`` picks
            when it is installed, as it is with netgrad) or ``h11`` (pure Python).
        log_format: ``json`` (one JSON object per line) or ``text``.
        log_level: level of the ``netgrad`` loggers and of the access log.
        api_keys_file: file of hashed API keys (``netgrad keys add``); when set, every
            ``/v1/*`` route needs a key.
        protect_docs: also require a key for ``/docs``, ``/redoc``, ``/openapi.json`` and
            ``/metrics`` (health stays open).
        key_max_jobs: verification/run jobs one API key may have in flight (429 above).
        cors_origins: comma-separated origins allowed by CORS (``*`` for any); empty = off.

    Execution backend and asynchronous jobs (issue 13):
        executor: where execution jobs run: ``pool`` (this server's worker processes) or
            ``ray`` (a Ray cluster; ``pip install 'netgrad[ray]'``).
        ray_address: the Ray cluster (``host:port`` of its head, or ``ray://host:10001``);
            unset: ``auto`` (a cluster started on this machine with ``ray start``).
        ray_task_memory_bytes: Ray ``memory`` resource each Ray task reserves.
        job_ttl_s: seconds a finished asynchronous job (``/v1/jobs``) stays retrievable.
        max_jobs: most asynchronous jobs kept at once; finished ones are dropped early to
            make room (the oldest of the API key holding the most first), and only queued
            and running jobs that fill it refuse a new one (503).
        job_store_bytes: most bytes the job store holds: the requests of queued and running
            jobs and the results of finished ones, made room for as for ``max_jobs``; a
            larger single request is refused (``job_too_large``), a larger single result
            fails its job (``result_too_large``).

    Admission, timeouts and memory (issue 14; ``deploy/README.md`` and :mod:`app.api.admission`
    say how they fit together):
        max_generation_inflight: generation requests (``/v1/gradients/*``) in progress at once;
            503 with ``Retry-After`` above.
        max_queued_jobs: job requests (``/v1/run``, ``/v1/verify``, verified ``/v1/gradients/net``)
            waiting for a worker beyond the ``workers`` running; 503 ``workers_busy`` above.
        large_body_bytes: a body above this many bytes is *large*.
        max_large_bodies: large bodies read and served at once (503 above); with
            ``max_body_bytes`` it bounds the server's peak memory (see ``server_memory_bytes``).
        max_client_inflight: requests in progress from one client address; 429 above.
        max_json_containers: most JSON objects + arrays in one body, counted while it is read
            (413 above): bounds what decoding a body can allocate.
        header_timeout_s: a connection must deliver a request's headers within this (closed
            otherwise; slowloris).
        body_timeout_s: a request's body must arrive within this (408 otherwise).
        keep_alive_s: an idle keep-alive connection is closed after this.
        max_connections: connections + requests the server handles at once (uvicorn
            ``limit_concurrency``; 503 above).
        server_memory_bytes: memory budget of the server process itself (worker processes
            excluded); the deployment limit is ``workers * job_memory_bytes +
            max_large_bodies * large_job_memory_bytes + server_memory_bytes``
            (:func:`app.api.isolation.deployment_memory_bytes`).
        retry_after_s: ``Retry-After`` of a 503/429 answer.
        isolate_large_bodies: serve generation requests with large bodies in a separate
            process (``max_large_bodies`` of them), replaced after every request, so the
            server's own memory stays flat (:mod:`app.api.isolation`).
        large_job_memory_bytes: address-space limit of such a process.
        large_job_timeout_s: wall-clock limit of one large generation request there.
    """

    model_config = SettingsConfigDict(env_prefix="NETGRAD_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    max_body_bytes: int = Field(default=64 * 1024 * 1024, ge=1)
    max_text_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1)
    max_depth: int = Field(default=128, ge=0)
    workers: int = Field(default=2, ge=0)
    job_timeout_s: float = Field(default=30.0, gt=0)
    job_memory_bytes: int = Field(default=4 * 1024**3, ge=64 * 1024**2)
    job_max_elements: int = Field(default=100_000_000, ge=1)
    job_max_iterations: int = Field(default=100_000, ge=1)
    max_fetch_elements: int = Field(default=10**6, ge=1)
    queue_timeout_s: float = Field(default=30.0, gt=0)
    max_ops: int = Field(default=200_000, ge=1)
    # -- operation (issue 11) --
    http_workers: int = Field(default=1, ge=1)
    http: Literal["auto", "httptools", "h11"] = "auto"
    log_format: Literal["json", "text"] = "json"
    log_level: Literal["CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG"] = "INFO"
    api_keys_file: str | None = None
    protect_docs: bool = False
    key_max_jobs: int = Field(default=2, ge=1)
    cors_origins: str = ""
    executor: Literal["pool", "ray"] = "pool"
    ray_address: str = "auto"
    ray_task_memory_bytes: int = Field(default=512 * 1024**2, ge=1)
    job_ttl_s: float = Field(default=3600.0, gt=0)
    max_jobs: int = Field(default=1000, ge=1)
    job_store_bytes: int = Field(default=512 * 1024**2, ge=1)
    # -- admission, timeouts and memory (issue 14) --
    max_generation_inflight: int = Field(default=64, ge=1)
    max_queued_jobs: int = Field(default=16, ge=0)
    large_body_bytes: int = Field(default=1024 * 1024, ge=1)
    max_large_bodies: int = Field(default=1, ge=1)
    max_client_inflight: int = Field(default=64, ge=1)
    max_json_containers: int = Field(default=2_000_000, ge=1)
    header_timeout_s: float = Field(default=10.0, gt=0)
    body_timeout_s: float = Field(default=60.0, gt=0)
    keep_alive_s: float = Field(default=5.0, gt=0)
    max_connections: int = Field(default=4096, ge=1)
    server_memory_bytes: int = Field(default=1024**3, ge=64 * 1024**2)
    retry_after_s: int = Field(default=2, ge=1)
    isolate_large_bodies: bool = True
    large_job_memory_bytes: int = Field(default=3 * 1024**3, ge=256 * 1024**2)
    large_job_timeout_s: float = Field(default=600.0, gt=0)

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_level(cls, value: object) -> object:
        """Level names in any case (``NETGRAD_LOG_LEVEL=debug``)."""
        if not isinstance(value, str):
            return value
        upper = value.upper()
        return {"WARN": "WARNING", "FATAL": "CRITICAL"}.get(upper, upper)


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return Settings()
