"""The reference server of ``bench.bench_http``: a minimal FastAPI app that echoes a body.

``POST /echo`` answers the request body unchanged with the request's Content-Type, so its
throughput is what FastAPI, uvicorn and the client cost for a body of that size with no work
at all. ``GET /healthz`` lets the benchmark wait for it like for netgrad.
"""

from __future__ import annotations

from fastapi import FastAPI, Request, Response

app = FastAPI()


@app.post("/echo")
async def echo(request: Request) -> Response:
    """The body, as received."""
    body = await request.body()
    return Response(body, media_type=request.headers.get("content-type"))


@app.get("/healthz")
async def healthz() -> Response:
    """Liveness."""
    return Response(b'{"status":"ok"}', media_type="application/json")
