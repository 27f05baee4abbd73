"""``/v1/jobs`` with API keys and under load: a job is its key's (another key gets the 404 of
an unknown id), a key's queued and running jobs count against its ``max_jobs`` until they
end, and submitting only queues: a 202 at once while every execution worker is busy."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api_schemas import caffe2_pb2
from app import auth
from app.api import docs
from app.main import create_app
from app.settings import Settings
from core.control.lowering import add_while_op
from core.proto import codec
from core.registry import make_arg, make_op
from tests.api.helpers import assert_problem
from tests.api.test_jobs import wait_done
from tests.distributed.nets import mlp_verify_request

#: Wall-clock limit of one execution job: how long an endless job holds its worker.
LIMIT_S = 3.0


def endless_run() -> dict[str, Any]:
    """A ``/v1/run`` body whose While never ends: stopped by the wall clock (LIMIT_S)."""
    body = caffe2_pb2.NetDef(name="body")
    body.op.append(make_op("Scale", ["x"], ["x"], [make_arg("scale", 1.0)]))
    net = caffe2_pb2.NetDef(name="forever")
    add_while_op(net, "cond", ["cond", "x"], body)
    return {"net": codec.to_json_obj(net), "fetch": ["x"], "inputs": [
        {"blob": "cond", "tensor": {"shape": [], "dtype": "bool", "data": [1]}},
        {"blob": "x", "tensor": {"shape": [1], "dtype": "float64", "data": [0.5]}}]}


def _ready(c: TestClient) -> TestClient:
    deadline = time.monotonic() + 60
    while c.get("/readyz").status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return c


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    path = tmp_path_factory.mktemp("keys") / "keys.txt"
    return path, {"alice": auth.add_key(path, "alice", max_jobs=1),
                  "bob": auth.add_key(path, "bob")}


@pytest.fixture(scope="module")
def keyed(keys: tuple[Path, dict[str, str]]) -> Iterator[TestClient]:
    settings = Settings(workers=2, api_keys_file=str(keys[0]), job_timeout_s=LIMIT_S,
                        job_max_iterations=10**12, executor="pool")
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield _ready(c)


def _as(keys: tuple[Path, dict[str, str]], name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {keys[1][name]}"}


def _without(problem: dict[str, Any], *words: str) -> dict[str, Any]:
    """``problem`` without its ``instance`` (the request ID) and with ``words`` blanked."""
    out = {k: v for k, v in problem.items() if k != "instance"}
    for w in words:
        out = {k: v.replace(w, "<id>") if isinstance(v, str) else v for k, v in out.items()}
        out["errors"] = [{k: v.replace(w, "<id>") if isinstance(v, str) else v
                          for k, v in e.items()} for e in out["errors"]]
    return out


def test_another_keys_job_is_the_404_of_an_unknown_id(
    keyed: TestClient, keys: tuple[Path, dict[str, str]]
) -> None:
    alice, bob = _as(keys, "alice"), _as(keys, "bob")
    r = keyed.post("/v1/jobs", json={"run": endless_run()}, headers=alice)
    assert r.status_code == 202, r.text
    location = r.headers["location"]
    job_id = r.json()["id"]
    unknown_id = "f" * len(job_id)
    unknown = assert_problem(keyed.get(f"/v1/jobs/{unknown_id}", headers=bob), 404,
                             "job_not_found")
    for method in ("GET", "DELETE"):
        theirs = assert_problem(keyed.request(method, location, headers=bob), 404,
                                "job_not_found")
        assert _without(theirs, job_id) == _without(unknown, unknown_id), method
    # bob's DELETE cancelled nothing; alice sees and cancels her job
    mine = keyed.get(location, headers=alice)
    assert mine.status_code == 200 and mine.json()["status"] in ("queued", "running")
    d = keyed.delete(location, headers=alice)
    assert d.status_code == 200 and d.json()["status"] == "cancelled"
    assert keyed.get(location, headers=alice).json()["status"] == "cancelled"
    assert_problem(keyed.get(location), 401, "api_key_missing")


def test_a_keys_queued_and_running_jobs_count_against_its_limit(
    keyed: TestClient, keys: tuple[Path, dict[str, str]]
) -> None:
    """alice may have one job in flight; her async job holds that slot until it ends."""
    alice, bob = _as(keys, "alice"), _as(keys, "bob")
    r = keyed.post("/v1/jobs", json={"run": endless_run()}, headers=alice)
    assert r.status_code == 202, r.text
    endless = r.headers["location"]
    for path, body in (("/v1/jobs", {"run": docs.RUN_REQUEST}), ("/v1/run", docs.RUN_REQUEST)):
        refused = keyed.post(path, json=body, headers=alice)
        problem = assert_problem(refused, 429, "too_many_jobs")
        assert refused.headers["retry-after"] == "1"
        assert ("'alice' already has 1 verification/run jobs in flight and its limit is 1 "
                "(0 synchronous requests, 1 asynchronous jobs queued or running)"
                in problem["detail"])
        assert "cancel one of its jobs (DELETE /v1/jobs/{id})" in problem["detail"]
    # other keys are not limited by alice's jobs
    theirs = keyed.post("/v1/jobs", json={"run": docs.RUN_REQUEST}, headers=bob)
    assert theirs.status_code == 202
    # cancelling frees the slot at once
    assert keyed.delete(endless, headers=alice).json()["status"] == "cancelled"
    # (the job in flight is endless: a quick one could end before the next request)
    held = keyed.post("/v1/jobs", json={"run": endless_run()}, headers=alice)
    assert held.status_code == 202, held.text
    assert_problem(keyed.post("/v1/jobs", json={"run": docs.RUN_REQUEST}, headers=alice), 429)
    assert keyed.delete(held.headers["location"], headers=alice).json()["status"] == "cancelled"
    ok = keyed.post("/v1/jobs", json={"run": docs.RUN_REQUEST}, headers=alice)
    assert ok.status_code == 202, ok.text
    # a done job frees it, and so does a failed one
    assert wait_done(keyed, ok.headers["location"], headers=alice)["status"] == "done"
    bad = mlp_verify_request(batch=2)
    bad["check"] = ["nope"]
    failing = keyed.post("/v1/jobs", json={"verify": bad}, headers=alice)
    assert failing.status_code == 202, failing.text
    assert wait_done(keyed, failing.headers["location"], headers=alice)["status"] == "failed"
    last = keyed.post("/v1/run", json=docs.RUN_REQUEST, headers=alice)
    assert last.status_code == 200, last.text
    assert wait_done(keyed, theirs.headers["location"], headers=bob)["status"] == "done"


def test_a_key_whose_requests_fill_its_limit_cannot_queue_a_job(
    keyed: TestClient, keys: tuple[Path, dict[str, str]]
) -> None:
    """alice's one slot held by a synchronous request: her job submission is the 429."""
    alice = _as(keys, "alice")
    first: list[int] = []
    t = threading.Thread(target=lambda: first.append(keyed.post(
        "/v1/run", json=endless_run(), headers=alice).status_code))
    t.start()
    pool = keyed.app.state.pool  # type: ignore[attr-defined]
    deadline = time.monotonic() + 30
    while pool.requests_in_flight("alice") == 0:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    refused = keyed.post("/v1/jobs", json={"run": docs.RUN_REQUEST}, headers=alice)
    problem = assert_problem(refused, 429, "too_many_jobs")
    assert "(1 synchronous requests, 0 asynchronous jobs" in problem["detail"]
    t.join(timeout=60)
    assert first == [422]  # stopped by the wall clock


@pytest.fixture(scope="module")
def one_worker() -> Iterator[TestClient]:
    """No API keys, one execution worker, at most two jobs kept."""
    settings = Settings(workers=1, job_timeout_s=LIMIT_S, job_max_iterations=10**12,
                        max_jobs=2, job_ttl_s=60.0, executor="pool")
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield _ready(c)


def test_submitting_does_not_wait_for_a_busy_worker(one_worker: TestClient) -> None:
    c = one_worker
    first: list[int] = []
    t = threading.Thread(target=lambda: first.append(
        c.post("/v1/run", json=endless_run()).status_code))
    t.start()
    pool = c.app.state.pool  # type: ignore[attr-defined]
    deadline = time.monotonic() + 30
    while pool.status().busy == 0:  # until the endless run holds the only worker
        assert time.monotonic() < deadline
        time.sleep(0.01)
    r = c.post("/v1/jobs", json={"run": docs.RUN_REQUEST})
    assert r.status_code == 202, r.text
    assert t.is_alive(), "the 202 came only once the worker was free again"
    second = c.post("/v1/jobs", json={"run": docs.RUN_REQUEST})
    assert second.status_code == 202
    # NETGRAD_MAX_JOBS=2 jobs kept: the queue is full, a 503 to retry later
    full = c.post("/v1/jobs", json={"run": docs.RUN_REQUEST})
    assert_problem(full, 503, "workers_busy")
    assert full.headers["retry-after"] == "2"
    assert t.is_alive()
    t.join(timeout=60)
    assert first == [422]
    for job in (r, second):  # queued jobs run once the worker is free
        assert wait_done(c, job.headers["location"])["status"] == "done"
