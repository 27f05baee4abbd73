"""``GET /livez`` and ``GET /readyz`` (KServe-style probes), and the pool keeper.

* ``/livez``: 200 while the process serves (``/healthz`` answers the same).
* ``/readyz``: 200 when the execution worker pool has all its configured workers alive and
  started, or when there are no workers by configuration (``NETGRAD_WORKERS=0``:
  verification disabled); otherwise 503 problem+json ``not_ready`` with the reason and
  ``Retry-After``. It is 503 while the workers start (NumPy and the kernels load, about a
  second) and after workers die, until the keeper has replaced them.

:class:`PoolKeeper` is a thread that, a few times a second, has the pool replace idle
workers that died (without it only the next job would notice) and collect the start-up
reports of new workers; it refreshes the pool gauges of :mod:`app.metrics` on the way.
"""

from __future__ import annotations

import threading
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from api_schemas import netgrad_pb2
from app import __version__
from app.api import docs, wire
from app.api.negotiation import answer_body
from app.auth import HeaderProblem
from app.settings import get_settings

router = APIRouter(tags=["health"])

#: Seconds between two rounds of the keeper.
KEEP_INTERVAL_S = 0.2


def readiness(pool: Any, configured_workers: int) -> tuple[bool, str, int]:
    """``(ready, reason, ready workers)`` of ``pool`` (``None``: no pool started)."""
    if pool is None:
        if configured_workers <= 0:
            return True, "no execution workers configured (verification disabled)", 0
        return False, "the execution worker pool is not running", 0
    status = getattr(pool, "status", None)
    if status is None:  # a backend without local workers (e.g. remote): nothing to wait for
        return True, "execution backend has no local workers", 0
    s = status()
    if s.ready >= s.size:
        return True, f"{s.ready} of {s.size} execution workers ready", s.ready
    return False, (
        f"{s.ready} of {s.size} execution workers ready ({s.alive} alive); workers are "
        "starting or being replaced"
    ), s.ready


def _health(request: Request, status: str, workers: int) -> Response:
    """The probe's ``Health`` answer, in the encoding ``Accept`` prefers (JSON if none fits)."""
    msg = netgrad_pb2.Health(status=status, version=__version__, workers=workers)
    return wire.respond(answer_body(request.headers.get("accept"), lenient=True), msg,
                        vary=True)


@router.get("/livez", summary="Liveness: the process serves", response_class=Response,
            responses=docs.responses("Health", "Health", body=False, probe=True))
async def livez(request: Request) -> Response:
    """``{"status": "ok"}`` while the process answers (async: never queued behind jobs)."""
    pool = getattr(request.app.state, "pool", None)
    return _health(request, "ok", int(getattr(pool, "size", 0) or 0) if pool is not None else 0)


# HEAD of the probes (load balancers and uptime checkers send it): the GET answer's headers.
router.add_api_route("/livez", livez, methods=["HEAD"], include_in_schema=False)


_NOT_READY = {"description": "Not ready (the reason in `detail`); retry after `Retry-After`",
              "content": {"application/problem+json": {"schema": {"$ref": docs.SCHEMA_PREFIX
                                                                  + "Problem"}}}}


@router.get("/readyz", summary="Readiness: all execution workers are up",
            response_class=Response,
            responses={**docs.responses("Health", "Health", body=False, probe=True),
                       503: _NOT_READY})
async def readyz(request: Request) -> Response:
    """``{"status": "ready", "workers": <ready workers>}``, or 503 with the reason."""
    settings = request.app.dependency_overrides.get(get_settings, get_settings)()
    ok, reason, ready = readiness(getattr(request.app.state, "pool", None), settings.workers)
    if not ok:
        raise HeaderProblem(503, "not_ready", reason, {"Retry-After": "1"})
    return _health(request, "ready", ready)


router.add_api_route("/readyz", readyz, methods=["HEAD"], include_in_schema=False)


class PoolKeeper:
    """A daemon thread calling ``pool.maintain()`` and ``observer.update()`` periodically."""

    def __init__(self, pool: Any, observer: Any, interval_s: float = KEEP_INTERVAL_S) -> None:
        self.pool = pool
        self.observer = observer
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="netgrad-pool-keeper",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        maintain = getattr(self.pool, "maintain", None)
        while not self._stop.is_set():
            try:
                if maintain is not None:
                    maintain()
                self.observer.update()
            except Exception:  # never let the keeper die; the next round tries again
                pass
            self._stop.wait(self.interval_s)

