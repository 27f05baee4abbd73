"""``/v1/jobs`` on the embedded pool: submit, poll, result, cancel, expiry, errors."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api_schemas import caffe2_pb2, netgrad_pb2
from app.api import docs
from app.main import create_app
from app.settings import Settings
from core.proto import codec
from tests.api.helpers import PB, assert_problem
from tests.distributed.nets import mlp_verify_request


@pytest.fixture(scope="module")
def jobs_client() -> Iterator[TestClient]:
    settings = Settings(workers=2, job_timeout_s=20.0, job_ttl_s=2.0, executor="pool")
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def wait_done(client: TestClient, location: str, timeout: float = 60.0,
              headers: dict[str, str] | None = None) -> dict[str, Any]:
    """Poll ``location`` (with ``headers``) until the job is no longer queued or running."""
    deadline = time.monotonic() + timeout
    while True:
        r = client.get(location, headers=headers)
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        if body["status"] not in ("queued", "running") or time.monotonic() > deadline:
            return body
        time.sleep(0.05)


def test_submit_poll_result_equals_the_synchronous_answer(jobs_client: TestClient) -> None:
    req = mlp_verify_request(batch=64)  # 64*8 + 16*8 + 16 elements: fans out
    r = jobs_client.post("/v1/jobs", json={"verify": req})
    assert r.status_code == 202, r.text
    location = r.headers["location"]
    first = r.json()
    assert location == f"/v1/jobs/{first['id']}"
    assert first["status"] in ("queued", "running") and first["kind"] == "verify"
    body = wait_done(jobs_client, location)
    assert body["status"] == "done", body
    assert body["progress"]["done"] == body["progress"]["total"] > 2  # chunks counted
    sync = jobs_client.post("/v1/verify", json=req)
    assert sync.status_code == 200
    assert body["verify"] == sync.json()
    assert "run" not in body and "error" not in body


def test_binary_result_is_the_synchronous_binary_answer(jobs_client: TestClient) -> None:
    req = docs.RUN_REQUEST
    r = jobs_client.post("/v1/jobs", json={"run": req})
    assert r.status_code == 202
    body = wait_done(jobs_client, r.headers["location"])
    assert body["status"] == "done" and body["progress"] == {"done": 1, "total": 1}
    pb = jobs_client.get(r.headers["location"], headers={"accept": PB})
    status = netgrad_pb2.JobStatus.FromString(pb.content)
    sync = jobs_client.post("/v1/run", json=req, headers={"accept": PB})
    assert codec.to_binary(status.run) == sync.content


def test_a_bad_request_fails_the_job_with_the_synchronous_problem(
    jobs_client: TestClient,
) -> None:
    req = mlp_verify_request(batch=2)
    req["check"] = ["nope"]
    sync = jobs_client.post("/v1/verify", json=req)
    r = jobs_client.post("/v1/jobs", json={"verify": req})
    body = wait_done(jobs_client, r.headers["location"])
    assert body["status"] == "failed"
    # The same problem; only the synchronous one carries a request ID (``instance``): the job
    # ran after its request was answered, and its id names it.
    sync_problem = {k: v for k, v in sync.json().items() if k != "instance"}
    job_problem = {k: v for k, v in body["error"].items() if k != "instance"}
    assert job_problem == sync_problem and body["error"]["status"] == 400


def test_a_failed_jobs_problem_names_the_job_as_its_instance(
    jobs_client: TestClient,
) -> None:
    req = mlp_verify_request(batch=2)
    req["check"] = ["nope"]
    r = jobs_client.post("/v1/jobs", json={"verify": req})
    location = r.headers["location"]
    body = wait_done(jobs_client, location)
    assert body["status"] == "failed"
    assert body["error"]["instance"] == location == f"/v1/jobs/{body['id']}"
    pb = jobs_client.get(location, headers={"accept": PB})
    assert netgrad_pb2.JobStatus.FromString(pb.content).error.instance == location
    # the synchronous problem names its request instead
    sync = jobs_client.post("/v1/verify", json=req)
    assert sync.json()["instance"].startswith("urn:netgrad:request:")


@pytest.mark.parametrize("payload", [b"", b"WorkerCrashedError('the worker died')"])
def test_a_job_whose_driver_died_is_a_job_lost_problem(payload: bytes) -> None:
    """A job failed with no problem (its thread or Ray driver died; an older store kept the
    reason as text) is a 503 ``job_lost``, with the job as its instance."""
    from app.api.routes.jobs import _status
    from core.executor.jobstore import JobRecord

    msg = _status(JobRecord("abc", "run", status="failed", payload=payload), 60.0)
    assert msg.error.type == "urn:netgrad:problem:job_lost"
    assert (msg.error.status, msg.error.title) == (503, "Service Unavailable")
    assert "submit it again" in msg.error.detail and msg.error.errors[0].code == "job_lost"
    assert msg.error.instance == "/v1/jobs/abc"


def test_cancel_during_a_long_full_check(jobs_client: TestClient) -> None:
    req = mlp_verify_request(batch=1000)  # 8 000+ elements: many seconds of chunks
    r = jobs_client.post("/v1/jobs", json={"verify": req})
    location = r.headers["location"]
    deadline = time.monotonic() + 30
    while jobs_client.get(location).json()["progress"]["done"] < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    d = jobs_client.delete(location)
    assert d.status_code == 200 and d.json()["status"] == "cancelled"
    body = jobs_client.get(location).json()
    assert body["status"] == "cancelled"
    assert body["progress"]["done"] < body["progress"]["total"]
    assert "verify" not in body
    # the workers are free again soon: a small job completes
    r2 = jobs_client.post("/v1/jobs", json={"run": docs.RUN_REQUEST})
    assert wait_done(jobs_client, r2.headers["location"], 30)["status"] == "done"


def test_results_expire_after_the_ttl(jobs_client: TestClient) -> None:
    r = jobs_client.post("/v1/jobs", json={"run": docs.RUN_REQUEST})
    location = r.headers["location"]
    assert wait_done(jobs_client, location)["status"] == "done"
    time.sleep(2.5)  # job_ttl_s=2
    assert_problem(jobs_client.get(location), 404)


def test_unknown_job_and_empty_request(jobs_client: TestClient) -> None:
    body = assert_problem(jobs_client.get("/v1/jobs/0123"), 404)
    assert "0123" in body["detail"]
    assert_problem(jobs_client.delete("/v1/jobs/0123"), 404)
    assert_problem(jobs_client.post("/v1/jobs", json={}), 400)
    assert_problem(jobs_client.post("/v1/jobs", json={"verify": {}, "run": {}}), 400)


def test_jobs_without_workers_are_refused(client: TestClient) -> None:
    assert_problem(client.post("/v1/jobs", json={"run": docs.RUN_REQUEST}), 503)


def test_openapi_jobs_example_runs(jobs_client: TestClient) -> None:
    spec = jobs_client.get("/openapi.json").json()
    content = spec["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]
    for ex in content["application/json"]["examples"].values():
        r = jobs_client.post("/v1/jobs", json=ex["value"])
        assert r.status_code == 202, r.text
        body = wait_done(jobs_client, r.headers["location"])
        assert body["status"] == "done" and body["verify"]["report"]["passed"] is True


def test_a_bare_verify_body_is_told_to_wrap_it(jobs_client: TestClient) -> None:
    r = jobs_client.post("/v1/jobs", json=mlp_verify_request(batch=2))
    assert r.status_code == 400
    assert 'a /v1/jobs body wraps a /v1/verify or a /v1/run request' in r.json()["detail"]
    net = mlp_verify_request(batch=2)["net"]
    binary = jobs_client.post("/v1/jobs", content=codec.from_json_obj(
        net, caffe2_pb2.NetDef).SerializeToString(),
        headers={"Content-Type": "application/protobuf"})
    assert binary.status_code == 400 and "netgrad.v1.JobRequest" in binary.json()["detail"]
    assert "OpGradientRequest" not in binary.json()["detail"]
