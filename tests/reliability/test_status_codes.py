"""Honest status codes (issue 14 §5) and admission bounds, in-process.

A stand-in worker pool (it runs the job in-process once the test lets it) holds jobs for as
long as a test needs, so busy, queued and lost workers are shown without timing races.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api_schemas import netgrad_pb2
from app.api.admission import Admission
from app.errors import ProblemError
from app.main import create_app
from app.settings import Settings
from core.errors import LimitExceededError, WorkerLostError
from core.proto import codec
from core.proto.jsonscan import JsonScan
from tests.reliability.common import NET_BODY, OP_BODY, RUN_BODY, VERIFY_BODY, big_net_body

PB = "application/protobuf"
POST_ROUTES = ("/v1/gradients/op", "/v1/gradients/net", "/v1/run", "/v1/verify")
#: The field each route names when an empty protobuf body leaves it unset.
REQUIRED = {"/v1/gradients/op": "op", "/v1/gradients/net": "net", "/v1/run": "net",
            "/v1/verify": "net"}


class HeldPool:
    """A worker pool stand-in: ``submit`` waits for :meth:`open`, then runs the job here
    (or raises ``fail``)."""

    size = 1

    def __init__(self, fail: Exception | None = None) -> None:
        self.gate = threading.Event()
        self.started = threading.Semaphore(0)
        self.fail = fail

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        self.started.release()
        self.gate.wait(30)
        if self.fail is not None:
            raise self.fail
        return fn(*args)

    def open(self) -> None:
        self.gate.set()


@pytest.fixture
def make_client() -> Iterator[Callable[..., tuple[TestClient, Any]]]:
    opened: list[TestClient] = []

    def make(pool: Any = None, **settings: Any) -> tuple[TestClient, Any]:
        app = create_app(Settings(workers=0, **settings))
        client = TestClient(app, raise_server_exceptions=False)
        client.__enter__()
        opened.append(client)
        app.state.pool = pool
        return client, app

    yield make
    for c in opened:
        c.__exit__(None, None, None)


def _problem(r: Any) -> dict[str, Any]:
    assert r.headers["content-type"].startswith("application/problem+json"), r.text
    doc: dict[str, Any] = r.json()
    return doc


# -- empty bodies and ys: [] -----------------------------------------------------------------------


@pytest.mark.parametrize("route", POST_ROUTES)
def test_empty_protobuf_body_is_a_400_naming_the_missing_field(make_client: Any,
                                                                route: str) -> None:
    client, _ = make_client(HeldPool())
    r = client.post(route, content=b"", headers={"content-type": PB})
    assert r.status_code == 400
    doc = _problem(r)
    field = REQUIRED[route]
    assert [e["path"] for e in doc["errors"]] == [field]
    assert f"{field}: field required" in doc["detail"]


@pytest.mark.parametrize("route", POST_ROUTES)
def test_empty_json_object_is_a_400_naming_the_missing_fields(make_client: Any,
                                                              route: str) -> None:
    client, _ = make_client(HeldPool())
    r = client.post(route, content=b"{}", headers={"content-type": "application/json"})
    assert r.status_code == 400
    paths = {e["path"] for e in _problem(r)["errors"]}
    assert REQUIRED[route] in paths


@pytest.mark.parametrize("route,body", [("/v1/gradients/net", NET_BODY),
                                        ("/v1/verify", VERIFY_BODY)])
@pytest.mark.parametrize("encoding", ["json", "protobuf"])
def test_empty_ys_is_the_same_400_wherever_ys_is_required(make_client: Any, route: str,
                                                          body: dict[str, Any],
                                                          encoding: str) -> None:
    pool = HeldPool()
    pool.open()
    client, _ = make_client(pool)
    doc = {**body, "ys": []}
    if encoding == "json":
        r = client.post(route, json=doc)
    else:
        cls = (netgrad_pb2.NetGradientRequest if route.endswith("net")
               else netgrad_pb2.VerifyRequest)
        msg = cls()
        msg.net.CopyFrom(codec.from_json_obj(doc["net"], type(msg.net)))
        r = client.post(route, content=codec.to_binary(msg), headers={"content-type": PB})
    assert r.status_code == 400, r.text
    errors = _problem(r)["errors"]
    assert [(e["code"], e["path"]) for e in errors] == [("ys_empty", "ys")]


def test_empty_ys_on_run_means_no_gradient(make_client: Any) -> None:
    pool = HeldPool()
    pool.open()
    client, _ = make_client(pool)
    r = client.post("/v1/run", json={**RUN_BODY, "ys": []})
    assert r.status_code == 200, r.text
    assert r.json()["outputs"]["y"]["data"] == [1.0, 0.0]
    assert "grad_ops" not in r.json()


# -- server faults: 503 with Retry-After -----------------------------------------------------------


@pytest.mark.parametrize("route,body", [("/v1/run", RUN_BODY), ("/v1/verify", VERIFY_BODY)])
def test_a_lost_worker_is_a_503_with_retry_after(make_client: Any, route: str,
                                                 body: dict[str, Any]) -> None:
    pool = HeldPool(fail=WorkerLostError("execution worker crashed after 0.10 s (exit code "
                                         "-9); it was replaced: retry the request"))
    pool.open()
    client, _ = make_client(pool, retry_after_s=3)
    r = client.post(route, json=body)
    assert r.status_code == 503
    assert r.headers["retry-after"] == "3"
    assert _problem(r)["type"] == "urn:netgrad:problem:worker_lost"


def _in_thread(fn: Callable[[], Any]) -> Future[Any]:
    ex = ThreadPoolExecutor(1)
    fut = ex.submit(fn)
    ex.shutdown(wait=False)
    return fut


def test_a_full_job_queue_is_a_503_workers_busy_with_retry_after(make_client: Any) -> None:
    pool = HeldPool()
    client, _ = make_client(pool, max_queued_jobs=0)
    first = _in_thread(lambda: client.post("/v1/run", json=RUN_BODY))
    assert pool.started.acquire(timeout=10)  # the first job holds the only worker
    start = time.monotonic()
    r = client.post("/v1/verify", json=VERIFY_BODY)
    assert time.monotonic() - start < 2.0  # refused at once, not after the queue timeout
    assert r.status_code == 503
    assert int(r.headers["retry-after"]) >= 1
    assert _problem(r)["type"] == "urn:netgrad:problem:workers_busy"
    pool.open()
    assert first.result(timeout=10).status_code == 200


def test_a_job_waiting_past_the_queue_timeout_is_a_503_with_retry_after(
        make_client: Any) -> None:
    pool = HeldPool()
    client, _ = make_client(pool, max_queued_jobs=4, queue_timeout_s=0.5)
    first = _in_thread(lambda: client.post("/v1/run", json=RUN_BODY))
    assert pool.started.acquire(timeout=10)
    r = client.post("/v1/run", json=RUN_BODY)
    assert r.status_code == 503 and "retry-after" in r.headers
    assert "stayed busy" in _problem(r)["detail"]
    pool.open()
    assert first.result(timeout=10).status_code == 200


def test_generation_is_served_while_every_job_waits(make_client: Any) -> None:
    """Starvation, in-process: jobs queue for a worker without holding threads, so
    generation requests are answered while the worker is held and the queue is full."""
    pool = HeldPool()
    client, _ = make_client(pool, max_queued_jobs=8, queue_timeout_s=20)
    jobs = [_in_thread(lambda: client.post("/v1/verify", json=VERIFY_BODY)) for _ in range(9)]
    assert pool.started.acquire(timeout=10)
    time.sleep(0.3)
    for _ in range(5):
        start = time.monotonic()
        r = client.post("/v1/gradients/op", json=OP_BODY)
        assert r.status_code == 200
        assert time.monotonic() - start < 1.0
    extra = client.post("/v1/run", json=RUN_BODY)  # 1 running + 8 queued: full
    assert extra.status_code == 503 and "retry-after" in extra.headers
    pool.open()
    assert all(j.result(timeout=30).status_code == 200 for j in jobs)


def test_too_many_requests_of_one_client_is_a_429_with_retry_after(make_client: Any) -> None:
    pool = HeldPool()
    client, _ = make_client(pool, max_client_inflight=1)
    first = _in_thread(lambda: client.post("/v1/run", json=RUN_BODY))
    assert pool.started.acquire(timeout=10)
    r = client.post("/v1/gradients/op", json=OP_BODY)
    assert r.status_code == 429
    assert "retry-after" in r.headers
    assert _problem(r)["type"] == "urn:netgrad:problem:too_many_requests"
    pool.open()
    assert first.result(timeout=10).status_code == 200
    assert client.post("/v1/gradients/op", json=OP_BODY).status_code == 200


# -- admission bounds (unit level: no request can be held open in-process) ------------------------


def test_generation_and_large_body_bounds_refuse_with_503() -> None:
    adm = Admission(Settings(max_generation_inflight=2, max_large_bodies=1,
                             large_body_bytes=100), workers=1)
    try:
        with adm.generating(), adm.generating():
            with pytest.raises(ProblemError) as info:
                with adm.generating():
                    pass
            assert info.value.status == 503 and info.value.code == "overloaded"
        with adm.generating():  # released again
            pass
        gate = adm.body_gate(1000, False, 10, 10)  # declared large: takes the slot at once
        with pytest.raises(ProblemError):
            adm.body_gate(1000, False, 10, 10)
        late = adm.body_gate(None, False, 10, 10)  # chunked: becomes large while it streams
        late.watch(b"x" * 100)
        with pytest.raises(ProblemError):
            late.watch(b"x")
        gate.release()
        late.watch(b"x")
        assert late.held
        late.release()
        assert adm.large == 0
    finally:
        adm.close()


# -- limits counted while the body streams in ------------------------------------------------------


def _chunks(data: bytes, size: int = 64 * 1024) -> list[bytes]:
    return [data[k:k + size] for k in range(0, len(data), size)]


def test_op_count_refuses_the_body_before_its_end() -> None:
    body = big_net_body(30_000)
    scan = JsonScan(max_ops=10_000, max_depth=8, max_containers=10**9)
    chunks = _chunks(body)
    fed = 0
    with pytest.raises(LimitExceededError) as info:
        for c in chunks:
            fed += 1
            scan.feed(c)
    assert info.value.problems[0].code == "too_many_ops"
    assert fed < len(chunks) / 2  # refused at about a third of the body


def test_junk_json_is_refused_by_its_container_count() -> None:
    junk = b'{"net": {"op": []}, "junk": [' + b"[]," * 300_000 + b"[]]}"
    scan = JsonScan(max_ops=10, max_depth=8, max_containers=100_000)
    with pytest.raises(LimitExceededError) as info:
        for c in _chunks(junk):
            scan.feed(c)
    assert info.value.problems[0].code == "too_many_values"


def test_scan_counts_like_the_decoder_whatever_the_chunking() -> None:
    nested: dict[str, Any] = {"op": [{"type": "Relu", "input": ["a\\\"{["], "output": ["b"]}]}
    for _ in range(4):
        nested = {"name": "x\"}", "op": [
            {"type": "Add", "input": ["p", "q"], "output": ["r"]},
            {"type": "Do", "arg": [{"name": "k", "i": 5}, {"i": 1, "name": "net", "n": nested},
                                   {"name": "k", "ints": [1]}]}]}
    body = json.dumps({"net": nested, "ys": ["r"]}).encode()
    for size in (1, 2, 3, 5, 17, len(body)):
        scan = JsonScan(max_ops=100, max_depth=8, max_containers=10**6)
        for c in _chunks(body, size):
            scan.feed(c)
        assert scan.ops == 9
    scan = JsonScan(max_ops=100, max_depth=2, max_containers=10**6)
    with pytest.raises(LimitExceededError) as info:
        for c in _chunks(body, 7):
            scan.feed(c)
    p = info.value.problems[0]
    assert (p.code, p.op_type, p.path) == ("nesting_too_deep", "Do",
                                           "op[1]:Do/net/op[1]:Do/net/op[1]:Do/net")
    # the path matches what the decoder-side check names for the same body
    from core.proto.limits import check_json_depth
    with pytest.raises(LimitExceededError) as ref:
        check_json_depth(json.loads(body)["net"], 2)
    assert ref.value.problems[0].path == p.path


def test_a_large_body_over_the_op_limit_is_a_413_over_http(make_client: Any) -> None:
    client, _ = make_client(None, max_ops=5_000, large_body_bytes=64 * 1024)
    r = client.post("/v1/gradients/net", content=big_net_body(20_000),
                    headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert _problem(r)["errors"][0]["code"] == "too_many_ops"
    ok = client.post("/v1/gradients/net", content=big_net_body(4_000),
                     headers={"content-type": "application/json"})
    assert ok.status_code == 200, ok.text


# -- the OpenAPI document declares them ------------------------------------------------------------


def test_openapi_declares_every_status_with_retry_after(make_client: Any) -> None:
    client, _ = make_client(None)
    paths = client.get("/openapi.json").json()["paths"]
    for route in POST_ROUTES:
        responses = paths[route]["post"]["responses"]
        assert {"400", "408", "413", "422", "429", "503"} <= set(responses), route
        for status in ("429", "503"):
            assert "Retry-After" in responses[status]["headers"], (route, status)
