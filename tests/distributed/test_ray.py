"""The Ray backend: the pool's limits on Ray tasks, retry on worker death, fan-out, jobs that
outlive the API process. Needs Ray (see conftest: skipped without it outside CI)."""

from __future__ import annotations

import os
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from core.errors import BusyError, LimitExceededError
from core.executor.backends import RayBackend
from core.executor.executor import execute
from core.executor.limits import RunLimits, default_limits
from core.verify import fanout
from core.verify.checker import run_check
from tests.api.live_server import live_server
from tests.conformance.cases import brew_loop_net, while_net
from tests.distributed.nets import mlp_verify_request
from tests.distributed.test_fanout import _job

LIMIT_S = 2.0


# Jobs: picklable top-level functions (imported by the Ray workers from the repository).
def _pid() -> int:
    return os.getpid()


def _worker_limits() -> RunLimits:
    return default_limits()


def _allocate(n: int) -> float:
    return float(np.ones(n).sum())


def _crash() -> None:
    os._exit(3)


def _die_once(marker: str, whom: str) -> str:
    """First call: kill the job's process (``job``) or the Ray worker above it (``ray``)."""
    path = Path(marker)
    if path.exists():
        return "retried"
    path.write_text("died once")
    if whom == "ray":
        os.kill(os.getppid(), signal.SIGKILL)
    os._exit(9)


def _infinite_while_feeds() -> dict[str, np.ndarray]:
    return {"cond": np.array(True), "ONE": np.array(0), "TWO": np.array(2),
            "TEN": np.array(10), "counter": np.array(0), "output_blob": np.array(0)}


@pytest.fixture(scope="module")
def backend(ray_address: str) -> Iterator[RayBackend]:
    limits = RunLimits(wall_clock_s=LIMIT_S, memory_bytes=1024**3, max_loop_iterations=10**12)
    b = RayBackend(ray_address, limits, task_memory_bytes=64 * 1024**2, queue_timeout_s=30.0)
    yield b
    b.close()


def test_jobs_run_in_ray_workers_with_the_limits(backend: RayBackend) -> None:
    assert backend.submit(_pid) != os.getpid()
    assert backend.submit(_worker_limits) == backend.limits
    assert backend.submit(execute, while_net(), {})["x"].tolist() == [7]


def test_infinite_while_is_stopped_by_the_wall_clock(backend: RayBackend) -> None:
    start = time.monotonic()
    with pytest.raises(LimitExceededError) as info:
        backend.submit(execute, brew_loop_net(), _infinite_while_feeds())
    assert "wall-clock" in info.value.message
    assert time.monotonic() - start < LIMIT_S + 10.0  # + a first worker's start-up
    assert backend.submit(execute, while_net(), {})["x"].tolist() == [7]


def test_infinite_while_is_stopped_by_the_iteration_limit(ray_address: str) -> None:
    b = RayBackend(ray_address, RunLimits(wall_clock_s=20.0, max_loop_iterations=1000),
                   task_memory_bytes=64 * 1024**2)
    with pytest.raises(LimitExceededError, match="1000"):
        b.submit(execute, brew_loop_net(), _infinite_while_feeds())


def test_memory_bomb_hits_the_address_space_limit(backend: RayBackend) -> None:
    with pytest.raises(LimitExceededError, match="memory"):
        backend.submit(_allocate, 400_000_000)  # 3.2 GB of float64 > 1 GiB address space
    assert backend.submit(_allocate, 1000) == 1000.0


def test_tensor_element_limit(ray_address: str) -> None:
    from api_schemas import caffe2_pb2
    from core.registry import make_arg, make_op

    b = RayBackend(ray_address, RunLimits(wall_clock_s=20.0, max_elements=1000),
                   task_memory_bytes=64 * 1024**2)
    net = caffe2_pb2.NetDef(name="n")
    net.op.append(make_op("ConstantFill", [], ["big"],
                          [make_arg("shape", [10**6]), make_arg("value", 1.0)]))
    with pytest.raises(LimitExceededError, match="elements") as info:
        b.submit(execute, net, {})
    assert info.value.problems[0].op_type == "ConstantFill"


@pytest.mark.parametrize("whom", ["job", "ray"])
def test_a_worker_killed_mid_job_is_retried_once(backend: RayBackend, whom: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        marker = str(Path(tmp) / "died")
        assert backend.submit(_die_once, marker, whom) == "retried"
        assert Path(marker).exists()


def test_a_worker_that_dies_twice_is_a_retryable_busy_error(backend: RayBackend) -> None:
    with pytest.raises(BusyError, match="died twice"):
        backend.submit(_crash)
    assert backend.submit(_allocate, 10) == 10.0


def test_fan_out_on_ray_equals_the_single_process_report(backend: RayBackend) -> None:
    job = _job(batch=16)
    seen: list[int] = []
    assert fanout.numeric(job, backend, min_elements=0,
                          progress=lambda d, t: seen.append(d)) == run_check(job)
    assert len(seen) > 2


def _wait(url: str, location: str, timeout: float = 120.0) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        body: dict[str, object] = httpx.get(url + location, timeout=30).json()
        if body["status"] not in ("queued", "running") or time.monotonic() > deadline:
            return body
        time.sleep(0.2)


def _ray_env(ray_address: str) -> dict[str, str]:
    return {"NETGRAD_EXECUTOR": "ray", "NETGRAD_RAY_ADDRESS": ray_address,
            "NETGRAD_WORKERS": "1", "NETGRAD_RAY_TASK_MEMORY_BYTES": str(64 * 1024**2)}


def test_pool_and_ray_answer_the_same_bytes(ray_address: str) -> None:
    req = mlp_verify_request(batch=64)
    answers = []
    for env in ({"NETGRAD_WORKERS": "2", "NETGRAD_EXECUTOR": "pool"}, _ray_env(ray_address)):
        with live_server(env, timeout=120.0) as url:
            answers.append(httpx.post(url + "/v1/verify", json=req, timeout=120).content)
    assert b'"passed":true' in answers[0]
    assert answers[0] == answers[1]


def test_jobs_outlive_the_api_process_that_took_them(ray_address: str) -> None:
    req = mlp_verify_request(batch=300)  # ~2 600 elements: a few seconds of chunks
    with live_server(_ray_env(ray_address), timeout=120.0) as url:
        r = httpx.post(url + "/v1/jobs", json={"verify": req}, timeout=60)
        assert r.status_code == 202, r.text
        location = r.headers["location"]
    # that API process is gone; a new one (another replica) answers for the job
    with live_server(_ray_env(ray_address), timeout=120.0) as url:
        body = _wait(url, location)
        assert body["status"] == "done", body
        sync = httpx.post(url + "/v1/verify", json=req, timeout=120)
        assert body["verify"] == sync.json()


def test_cancel_a_long_full_check_on_ray(ray_address: str) -> None:
    req = mlp_verify_request(batch=1000)
    with live_server(_ray_env(ray_address), timeout=120.0) as url:
        location = httpx.post(url + "/v1/jobs", json={"verify": req},
                              timeout=60).headers["location"]
        deadline = time.monotonic() + 60
        while True:
            body = httpx.get(url + location, timeout=30).json()
            if body["progress"]["done"] >= 2:
                break
            assert time.monotonic() < deadline, body
            time.sleep(0.1)
        d = httpx.delete(url + location, timeout=30)
        assert d.status_code == 200 and d.json()["status"] == "cancelled"
        time.sleep(1.0)
        after = httpx.get(url + location, timeout=30).json()
        assert after["status"] == "cancelled" and "verify" not in after
        assert after["progress"]["done"] < after["progress"]["total"]
