"""Cost of the operation layer (issue 11) on a small request, measured side by side.

``python -m bench.bench_ops [--rounds 7] [--n 2000]``

Times ``POST /v1/gradients/op`` (the README's Do example, a request of a few hundred bytes)
and ``GET /livez`` through the ASGI app directly (no client or socket), in two apps built in
the same process: the full app (request IDs, JSON access log written to ``/dev/null``,
metrics) and the same app with those two middlewares removed (the metrics of the routes are
then not recorded; the API-key check is off in both). Reports the best of ``rounds`` runs
of ``n`` requests, µs per request, and the difference.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import time
from typing import Any

from app.api import docs
from app.main import create_app
from app.settings import Settings


def _app(bare: bool) -> Any:
    app = create_app(Settings(workers=0, log_format="json"))
    if bare:
        app.user_middleware = [m for m in app.user_middleware
                               if m.cls.__name__ not in ("AccessMiddleware",
                                                         "CorrelationIdMiddleware")]
    return app


async def _call(app: Any, method: str, path: str, body: bytes) -> int:
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1),
             "server": ("127.0.0.1", 8000),
             "headers": [(b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode())]}
    sent = False
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status


async def _time(app: Any, method: str, path: str, body: bytes, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        status = await _call(app, method, path, body)
    elapsed = time.perf_counter() - start
    assert status == 200, status
    return elapsed / n * 1e6


async def _main(rounds: int, n: int) -> None:
    apps = {"full": _app(False), "bare": _app(True)}
    # The JSON access log is formatted and written as in production, to /dev/null.
    for handler in logging.getLogger("netgrad").handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(open(os.devnull, "w"))  # noqa: SIM115
    body = json.dumps(docs.DO_REQUEST).encode()
    cases = {"POST /v1/gradients/op": ("POST", "/v1/gradients/op", body),
             "GET /livez": ("GET", "/livez", b"")}
    for a in apps.values():  # start-up (lifespan not needed without workers) and warm-up
        for method, path, data in cases.values():
            await _time(a, method, path, data, 50)
    print(f"{'request':<24}{'full µs':>10}{'bare µs':>10}{'added µs':>10}")
    for label, (method, path, data) in cases.items():
        best = {k: min([await _time(a, method, path, data, n) for _ in range(rounds)])
                for k, a in apps.items()}
        print(f"{label:<24}{best['full']:>10.1f}{best['bare']:>10.1f}"
              f"{best['full'] - best['bare']:>10.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--n", type=int, default=2000)
    ns = parser.parse_args()
    asyncio.run(_main(ns.rounds, ns.n))


if __name__ == "__main__":
    main()
