"""``GET /metrics``: every metric of issue 11 is there, and moves by exactly what was driven."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from api_schemas import caffe2_pb2
from app.api import docs
from app.main import create_app
from app.settings import Settings
from core.control.lowering import add_while_op
from core.proto import codec
from core.registry import make_arg, make_op
from tests.ops.server import serve

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

N = 20  # requests of each kind


def scrape(get: Any) -> Samples:
    """Every sample of ``/metrics`` keyed by (name, labels)."""
    r = get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    out: Samples = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


@pytest.fixture(scope="module")
def limit_client() -> Iterator[TestClient]:
    """One worker, 1 s wall clock, 1 GiB address space, 10**9 elements, no loop cap."""
    settings = Settings(workers=1, job_timeout_s=1.0, job_memory_bytes=1024**3,
                        job_max_elements=10**9, job_max_iterations=10**12)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


@pytest.fixture(scope="module")
def loop_client() -> Iterator[TestClient]:
    """One worker whose While loops may run 100 iterations."""
    settings = Settings(workers=1, job_timeout_s=20.0, job_max_iterations=100)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def _run_request(net: caffe2_pb2.NetDef, inputs: list[dict[str, Any]], fetch: list[str]
                 ) -> dict[str, Any]:
    return {"net": codec.to_json_obj(net), "inputs": inputs, "fetch": fetch}


def _fill(n: int) -> dict[str, Any]:
    net = caffe2_pb2.NetDef(name="fill")
    net.op.append(make_op("ConstantFill", [], ["big"],
                          [make_arg("shape", [n]), make_arg("value", 1.0)]))
    return _run_request(net, [], ["big"])


def _endless_while() -> dict[str, Any]:
    body = caffe2_pb2.NetDef(name="body")
    body.op.append(make_op("Scale", ["x"], ["x"], [make_arg("scale", 1.0)]))
    net = caffe2_pb2.NetDef(name="forever")
    add_while_op(net, "cond", ["cond", "x"], body)
    inputs = [
        {"blob": "cond", "tensor": {"shape": [], "dtype": "bool", "data": [1]}},
        {"blob": "x", "tensor": {"shape": [1], "dtype": "float64", "data": [0.5]}},
    ]
    return _run_request(net, inputs, ["x"])


def _wait_ready(c: TestClient) -> None:
    deadline = time.monotonic() + 60
    while c.get("/readyz").status_code != 200:
        assert time.monotonic() < deadline, "pool never became ready"
        time.sleep(0.1)


def test_every_metric_is_exported(limit_client: TestClient) -> None:
    text = limit_client.get("/metrics").text
    for name in (
        "netgrad_http_requests_total", "netgrad_http_request_duration_seconds_bucket",
        "netgrad_forward_ops_total", "netgrad_gradient_ops_total", "netgrad_pool_workers",
        "netgrad_pool_workers_ready", "netgrad_pool_workers_busy", "netgrad_pool_queue_depth",
        "netgrad_pool_job_duration_seconds_bucket", "netgrad_pool_jobs_limited_total",
        "netgrad_pool_workers_replaced_total", "netgrad_build_info",
    ):
        if name.startswith(("netgrad_http", "netgrad_forward", "netgrad_gradient",
                            "netgrad_pool_job_duration")):
            assert f"# TYPE {name.removesuffix('_bucket')}" in text, name
        else:
            assert f"\n{name}" in text, name
    for limit in ("wall_clock", "memory", "elements", "iterations"):
        assert f'netgrad_pool_jobs_limited_total{{limit="{limit}"}}' in text


def test_counters_move_by_exactly_the_requests_driven(
    limit_client: TestClient, loop_client: TestClient
) -> None:
    c = limit_client
    _wait_ready(c)
    _wait_ready(loop_client)
    kinds = {
        "/v1/gradients/op": docs.DO_REQUEST,
        "/v1/gradients/net": docs.NET_REQUEST,
        "/v1/verify": docs.VERIFY_REQUEST,
        "/v1/run": docs.RUN_REQUEST,
    }
    # What one request of each kind differentiates and emits (asked once, before counting).
    per_request = {}
    for route, body in kinds.items():
        r = c.post(route, json=body)
        assert r.status_code == 200, r.text
        forward = 1 if "op" in body else len(body["net"]["op"])
        per_request[route] = (forward, len(r.json().get("grad_ops", [])))
    before = scrape(c.get)
    for route, body in kinds.items():
        for _ in range(N):
            assert c.post(route, json=body).status_code == 200
    for _ in range(N):
        assert c.get("/v1/operators").status_code == 200
        assert c.get("/livez").status_code == 200
        assert c.post("/v1/gradients/op", json={"op": {"type": "Relu"}}).status_code == 400
    limited = {
        "wall_clock": (c, _endless_while()),
        "memory": (c, _fill(400_000_000)),  # 3.2 GB of float32/64 > 1 GiB address space
        "elements": (c, _fill(10**12)),
        "iterations": (loop_client, _endless_while()),
    }
    for limit, (client, body) in limited.items():
        r = client.post("/v1/run", json=body)
        assert r.status_code == 422, (limit, r.text)
    _wait_ready(c)
    after = scrape(c.get)

    for route, (forward, grads) in per_request.items():
        assert delta(before, after, "netgrad_http_requests_total", method="POST", route=route,
                     status_class="2xx") == N
        also = {"/v1/gradients/op": N, "/v1/run": len(limited)}.get(route, 0)  # 4xx ones
        assert delta(before, after, "netgrad_http_request_duration_seconds_count",
                     method="POST", route=route) == N + also
        assert delta(before, after, "netgrad_forward_ops_total", route=route) == N * forward
        assert delta(before, after, "netgrad_gradient_ops_total", route=route) == N * grads
    assert delta(before, after, "netgrad_http_requests_total", method="POST",
                 route="/v1/gradients/op", status_class="4xx") == N
    assert delta(before, after, "netgrad_http_requests_total", method="GET",
                 route="/v1/operators", status_class="2xx") == N
    assert delta(before, after, "netgrad_http_requests_total", method="GET", route="/livez",
                 status_class="2xx") == N
    assert delta(before, after, "netgrad_http_requests_total", method="POST", route="/v1/run",
                 status_class="4xx") == len(limited)
    # Pool: 2N good jobs (verify, run), one job per limit; a worker replaced per hard limit.
    assert delta(before, after, "netgrad_pool_job_duration_seconds_count", outcome="ok") == 2 * N
    assert delta(before, after, "netgrad_pool_job_duration_seconds_count",
                 outcome="limit") == len(limited)
    for limit in limited:
        assert delta(before, after, "netgrad_pool_jobs_limited_total", limit=limit) == 1, limit
    # The endless While stops itself at its deadline (checked between ops) and the executor
    # turns the fill's MemoryError into a limit error: both workers live on, none replaced.
    for reason in ("wall_clock", "memory", "crashed", "broken"):
        assert delta(before, after, "netgrad_pool_workers_replaced_total", reason=reason) == 0
    # Gauges: one configured worker per app with a pool (2 apps here), idle, nothing queued.
    assert value(after, "netgrad_pool_workers_busy") == 0
    assert value(after, "netgrad_pool_queue_depth") == 0
    assert value(after, "netgrad_pool_workers") >= 1
    info = [k for k in after if k[0] == "netgrad_build_info"]
    assert info and dict(info[0][1])["version"]


def test_busy_and_queue_gauges_follow_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two jobs on one worker: one runs (busy 1), one waits (queue depth 1).

    The gauges are process-wide, and the keepers of this module's other apps set them from
    their own idle pools every 0.2 s, so each reading is taken inside the update that set
    it: every ``PoolMetrics.update`` is serialized by one lock, and the gauges are read
    just after this pool's observer set them.
    """
    import threading

    from app.metrics import POOL_BUSY, POOL_QUEUE, PoolMetrics
    from core.executor.limits import RunLimits
    from core.executor.pool import WorkerPool

    seen: list[tuple[float, float]] = []
    lock = threading.Lock()
    update = PoolMetrics.update
    observer = PoolMetrics()

    def update_and_read(self: PoolMetrics) -> None:
        with lock:
            update(self)
            if self is observer:
                seen.append((POOL_BUSY._value.get(), POOL_QUEUE._value.get()))

    monkeypatch.setattr(PoolMetrics, "update", update_and_read)
    with WorkerPool(1, RunLimits(wall_clock_s=10), observer=observer) as pool:
        observer.pool = pool
        threads = [threading.Thread(target=pool.submit, args=(time.sleep, 1.5))
                   for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in threads)
        assert (1.0, 1.0) in seen, seen
        assert seen[-1] == (0.0, 0.0), seen


def test_several_server_processes_report_correct_totals(tmp_path: Path) -> None:
    """Two uvicorn processes: whichever answers /metrics counts the requests of both."""
    env = {"NETGRAD_HTTP_WORKERS": "2", "NETGRAD_LOG_FORMAT": "json"}
    with serve(tmp_path, env) as server:
        sent = 0
        pids: set[int] = set()
        while sent < 200 and len(pids) < 2:
            for _ in range(N):  # a new connection each time, so that both processes accept
                r = httpx.post(server.url + "/v1/gradients/op", json=docs.DO_REQUEST,
                               timeout=30)
                assert r.status_code == 200
                sent += 1
            time.sleep(0.5)  # the access line is written just after the answer
            pids = {rec["pid"] for rec in server.log_records()
                    if rec.get("logger") == "netgrad.access" and rec["route"] != "/livez"}
        assert len(pids) == 2, "both server processes should have served requests"
        for _ in range(4):  # each scrape may be answered by either process: same totals
            samples = scrape(lambda p: httpx.get(server.url + p, timeout=30))
            assert value(samples, "netgrad_http_requests_total", method="POST",
                         route="/v1/gradients/op", status_class="2xx") == sent
            assert value(samples, "netgrad_forward_ops_total", route="/v1/gradients/op") == sent


def _crash() -> None:
    import os

    os._exit(3)


def test_replaced_workers_are_counted_by_reason() -> None:
    """A job hung in one call is killed at the wall clock, a crashed worker and one whose
    job ran out of memory outside the executor exit: each is replaced and counted."""
    from app.metrics import WORKERS_REPLACED, PoolMetrics
    from core.errors import LimitExceededError, WorkerLostError
    from core.executor.limits import RunLimits
    from core.executor.pool import WorkerPool

    def count(reason: str) -> float:
        return float(WORKERS_REPLACED.labels(reason)._value.get())

    before = {r: count(r) for r in ("wall_clock", "crashed", "memory", "broken")}
    observer = PoolMetrics()
    limits = RunLimits(wall_clock_s=2.0, memory_bytes=1024**3)
    with WorkerPool(1, limits, observer=observer) as pool:
        observer.pool = pool
        with pytest.raises(LimitExceededError):
            pool.submit(time.sleep, 5)
        with pytest.raises(WorkerLostError):  # a server-side fault: 503, not the request's
            pool.submit(_crash)
        with pytest.raises(LimitExceededError, match="memory"):
            pool.submit(np.ones, 400_000_000)  # 3.2 GB > 1 GiB of address space
        assert pool.submit(time.sleep, 0) is None
    after = {r: count(r) for r in before}
    assert {r: after[r] - before[r] for r in before} == {
        "wall_clock": 1, "crashed": 1, "memory": 1, "broken": 0}
