"""Job owners in the Ray job store (:class:`core.executor.jobstore.RayJobs`): another owner's
job is an unknown id on every replica, an owner's queued + running jobs count cluster-wide
until they end (a dead driver's job too), the store of an older version stays readable for
requests without a key, and the whole of it through a keyed server. Needs Ray (see conftest).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from app import auth
from app.api import docs
from app.api.job_work import JobConfig
from core.executor.jobstore import FINAL, JobRecord, OwnerLimitError, RayJobs, RayStore
from core.executor.limits import RunLimits
from core.ir.env import GenLimits
from tests.api.live_server import live_server
from tests.distributed.nets import mlp_verify_request
from tests.distributed.test_ray import _ray_env

NAMESPACE = "netgrad"
CONFIG = JobConfig(GenLimits(), 10**6, RunLimits(wall_clock_s=20.0), 64 * 1024**2, 30.0)


# Job functions: picklable top-level functions (imported by the Ray workers from the repository).
def _hold_work(kind: str, request: bytes, config: Any, backend: Any, progress: Any,
               cancelled: Any) -> tuple[str, bytes]:
    """Runs until cancelled (60 s at most)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if cancelled():
            return "cancelled", b""
        time.sleep(0.1)
    return "done", b"held"


def _quick_work(kind: str, request: bytes, config: Any, backend: Any, progress: Any,
                cancelled: Any) -> tuple[str, bytes]:
    return "done", request


def _die_work(kind: str, request: bytes, config: Any, backend: Any, progress: Any,
              cancelled: Any) -> tuple[str, bytes]:
    os._exit(3)  # the driver's process dies: the job never reports


@pytest.fixture
def store_name(ray_address: str) -> Iterator[str]:
    """A store of this test's own (killed afterwards)."""
    import ray

    name = f"test-jobs-{uuid.uuid4().hex[:8]}"
    yield name
    try:
        ray.kill(ray.get_actor(name, namespace=NAMESPACE))
    except ValueError:
        pass


def _replica(work: Any, name: str, legacy_name: str | None = None) -> RayJobs:
    """A RayJobs as one API replica makes it (replicas share the store of ``name``)."""
    return RayJobs(SimpleNamespace(namespace=NAMESPACE), work, CONFIG, ttl_s=60.0,
                   max_jobs=20, name=name, legacy_name=legacy_name)


def _until(check: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.1)


def _final(jobs: RayJobs, jid: str, owner: str | None = None) -> JobRecord:
    out: list[JobRecord] = []

    def final() -> bool:
        rec = jobs.get(jid, owner)
        assert rec is not None
        out[:] = [rec]
        return rec.status in FINAL

    _until(final)
    return out[0]


def test_owners_are_kept_and_counted_across_replicas(store_name: str) -> None:
    one, two = _replica(_hold_work, store_name), _replica(_quick_work, store_name)
    held = one.submit("run", b"", "alice", 1)
    assert held.owner == "alice"
    for replica in (one, two):
        assert replica.get(held.id, "bob") is None
        assert replica.cancel(held.id, "bob") is None  # and nothing was cancelled
        mine = replica.get(held.id, "alice")
        assert mine is not None and mine.status in ("queued", "running")
        assert replica.get(held.id) is not None  # no key: every job
        assert replica.in_flight("alice") == 1
        with pytest.raises(OwnerLimitError) as info:  # refused in the actor, typed here
            replica.submit("run", b"", "alice", 1)
        assert info.value.in_flight == 1
    assert two.submit("run", b"bob's", "bob", 1).owner == "bob"
    cancelled = two.cancel(held.id, "alice")  # any replica cancels; the slot is free
    assert cancelled is not None and cancelled.status == "cancelled"
    assert one.in_flight("alice") == 0
    quick = two.submit("run", b"answer", "alice", 1)
    assert _final(one, quick.id, "alice").payload == b"answer"
    assert two.in_flight("alice") == 0


def test_a_dead_driver_frees_its_owners_slot(store_name: str) -> None:
    jobs = _replica(_die_work, store_name)
    lost = jobs.submit("run", b"", "alice", 1)
    _until(lambda: jobs.in_flight("alice") == 0)  # the dead driver is noticed by counting
    rec = jobs.get(lost.id, "alice")
    assert rec is not None and (rec.status, rec.payload) == ("failed", b"")
    assert jobs.submit("run", b"", "alice", 1).owner == "alice"


def test_the_legacy_store_is_read_for_requests_without_a_key(
    store_name: str, ray_address: str
) -> None:
    import ray

    legacy_name = store_name + "-legacy"
    legacy = ray.remote(RayStore).options(
        name=legacy_name, namespace=NAMESPACE, lifetime="detached", num_cpus=0,
    ).remote(60.0, 20, legacy_name)
    try:
        # submitted as a replica of the first version calls it: no owner
        old: JobRecord = ray.get(legacy.submit.remote("run", b"old", _quick_work, CONFIG))
        _until(lambda: ray.get(legacy.get.remote(old.id)).status == "done")
        jobs = _replica(_quick_work, store_name, legacy_name)
        rec = jobs.get(old.id)
        assert rec is not None and (rec.status, rec.payload, rec.owner) == ("done", b"old", None)
        assert jobs.get(old.id, "alice") is None  # it has no owner: no key sees it
        assert jobs.cancel(old.id, "alice") is None
        after = jobs.cancel(old.id)
        assert after is not None and after.status == "done"  # finished: left as it is
        assert jobs.get("no-such-id") is None
        assert _replica(_quick_work, store_name, store_name + "-absent").get(old.id) is None
    finally:
        ray.kill(legacy)


def test_a_keyed_server_on_ray(ray_address: str, tmp_path: Path) -> None:
    path = tmp_path / "keys.txt"
    alice = {"X-API-Key": auth.add_key(path, "alice", max_jobs=1)}
    bob = {"X-API-Key": auth.add_key(path, "bob")}
    env = {**_ray_env(ray_address), "NETGRAD_API_KEYS_FILE": str(path)}
    req = {"verify": mlp_verify_request(batch=300)}  # a few seconds of chunks
    with live_server(env, timeout=120.0) as url, httpx.Client(base_url=url, timeout=60) as c:
        r = c.post("/v1/jobs", json=req, headers=alice)
        assert r.status_code == 202, r.text
        location = r.headers["location"]
        assert c.get(location, headers=bob).status_code == 404
        assert c.delete(location, headers=bob).status_code == 404
        refused = c.post("/v1/jobs", json=req, headers=alice)
        assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
        assert "1 asynchronous jobs queued or running" in refused.json()["detail"]
        assert c.delete(location, headers=alice).json()["status"] == "cancelled"
        again = c.post("/v1/jobs", json={"run": docs.RUN_REQUEST}, headers=alice)
        assert again.status_code == 202, again.text  # the cancelled job's slot is free
        _until(lambda: c.get(again.headers["location"], headers=alice).json()["status"]
               == "done")
