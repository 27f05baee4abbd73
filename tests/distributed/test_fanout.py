"""Full-mode fan-out: chunks assembled in order give exactly the single-process report."""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Iterator

import pytest
from google.protobuf import json_format

from api_schemas import caffe2_pb2
from core.api import gradient_for_net
from core.errors import InvalidRequestError
from core.executor.backends import JobCancelledError, PoolBackend
from core.executor.limits import RunLimits
from core.executor.pool import WorkerPool
from core.verify import fanout
from core.verify.checker import _Job, run_check, seed_names
from core.verify.specs import InputSpec, RandomSpec, VerifyOptions
from tests.distributed.nets import mlp_verify_request


def _job(batch: int = 16, mode: str = "full", check: list[str] | None = None) -> _Job:
    req = mlp_verify_request(batch=batch, mode=mode)
    net = caffe2_pb2.NetDef()
    json_format.ParseDict(req["net"], net)
    inputs = [InputSpec(s["blob"], random=RandomSpec(s["random"]["shape"],
                                                      seed=s["random"]["seed"]))
              for s in req["inputs"]]
    opts = VerifyOptions(inputs=inputs, mode=mode, check=check)
    seeds = seed_names(net, ["prob"], [s.blob for s in inputs])
    gen = gradient_for_net(net, dict(seeds))
    return _Job(net.SerializeToString(), [op.SerializeToString() for op in gen.grad_ops],
                dict(gen.grad_map), seeds, opts, None)


@pytest.fixture(scope="module")
def pool() -> Iterator[WorkerPool]:
    with WorkerPool(2, RunLimits(wall_clock_s=30.0)) as p:
        yield p


def test_fanned_out_report_equals_the_single_process_report(pool: WorkerPool) -> None:
    job = _job(batch=16)
    single = run_check(job)
    seen: list[tuple[int, int]] = []
    fanned = fanout.numeric(job, pool, min_elements=0,
                            progress=lambda d, t: seen.append((d, t)))
    assert fanned == single  # dataclass equality: every float bit-for-bit
    total = seen[-1][1]
    assert total > 2 and seen[-1] == (total, total)
    assert [d for d, _ in seen] == list(range(1, total + 1))


def test_fast_mode_and_small_checks_are_one_job(pool: WorkerPool) -> None:
    seen: list[tuple[int, int]] = []
    job = _job(batch=2, mode="fast")
    assert fanout.numeric(job, pool, progress=lambda d, t: seen.append((d, t))) == run_check(job)
    assert seen == [(1, 1)]


def test_only_the_checked_blobs_are_chunked(pool: WorkerPool) -> None:
    job = _job(batch=16, check=["fc_w"])
    plan = fanout.prepare_full(job)
    ranges = fanout.chunk_ranges(plan, 2)
    assert {b for b, _, _ in ranges} == {"fc_w"}
    assert fanout.numeric(job, pool, min_elements=0) == run_check(job)


def test_chunks_cover_every_element_once_in_order() -> None:
    plan = fanout.prepare_full(_job(batch=40))
    ranges = fanout.chunk_ranges(plan, 3)
    for b in plan.blobs:
        mine = [(lo, hi) for blob, lo, hi in ranges if blob == b.blob]
        assert mine[0][0] == 0
        assert all(a[1] == c[0] for a, c in zip(mine, mine[1:], strict=False))
        n = 1
        for d in b.shape:
            n *= d
        assert mine[-1][1] == n
    assert [b for b, _, _ in ranges] == sorted([b for b, _, _ in ranges],
                                               key=[p.blob for p in plan.blobs].index)


def _slow(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def test_cancel_stops_before_the_next_job(pool: WorkerPool) -> None:
    backend = PoolBackend(pool)
    flag = threading.Event()
    threading.Timer(0.3, flag.set).start()
    start = time.monotonic()
    with pytest.raises(JobCancelledError):
        backend.map(_slow, [(0.5,)] * 20, cancelled=flag.is_set)
    assert time.monotonic() - start < 3.0  # 20 jobs would take 5 s on 2 workers


def test_an_error_is_the_single_process_error(pool: WorkerPool) -> None:
    job = _job(batch=16)
    job.limits = RunLimits(max_elements=10)  # the 16x8 input is refused
    with pytest.raises(InvalidRequestError) as single:
        run_check(job)
    with pytest.raises(InvalidRequestError) as fanned:
        fanout.numeric(job, pool, min_elements=0)
    assert fanned.value.message == single.value.message
    assert fanned.value.problems == single.value.problems


def test_http_answer_with_fan_out_is_byte_identical_to_one_worker() -> None:
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.settings import Settings
    from tests.api.helpers import PB

    req = mlp_verify_request(batch=64)  # 656 elements: fans out on 2 workers
    answers = []
    for workers in (1, 2):  # one worker: no fan-out (a single run_check job)
        settings = Settings(workers=workers, job_timeout_s=20.0, executor="pool")
        with TestClient(create_app(settings)) as c:
            answers.append((c.post("/v1/verify", json=req).content,
                            c.post("/v1/verify", json=req, headers={"accept": PB}).content))
    assert b'"passed":true' in answers[0][0]
    assert answers[0] == answers[1]


def test_chunks_are_sized_by_the_measured_run_time() -> None:
    plan = fanout.prepare_full(_job(batch=40))
    assert plan.run_seconds > 0 and plan.chunk_s == fanout.TARGET_CHUNK_S  # 30 s job limit
    total = sum(math.prod(b.shape) for b in plan.blobs if b.failed is None)
    slow = dataclasses.replace(plan, run_seconds=plan.chunk_s / 20)  # 10 elements per chunk
    assert fanout.chunk_size(slow, 2) == fanout.MIN_CHUNK
    fast = dataclasses.replace(plan, run_seconds=1e-7)
    assert fanout.chunk_size(fast, 2) == fast_size(total)
    mid = dataclasses.replace(plan, run_seconds=plan.chunk_s / 100)  # 50 per chunk
    assert fanout.chunk_size(mid, 1) == min(50, -(-total // fanout.CHUNKS_PER_SLOT))
    short = fanout.prepare_full(dataclasses.replace(_job(batch=40),
                                                    limits=RunLimits(wall_clock_s=1.0)))
    assert short.chunk_s == 0.25  # a chunk stays well inside a short per-job limit
    unknown = dataclasses.replace(plan, run_seconds=0.0)
    assert fanout.chunk_size(unknown, 2) == fast_size(total)


def fast_size(total: int) -> int:
    return max(fanout.MIN_CHUNK, min(fanout.MAX_CHUNK, -(-total // (2 * fanout.CHUNKS_PER_SLOT))))


def test_any_chunk_size_gives_the_same_report(pool: WorkerPool,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    job = _job(batch=16)
    single = run_check(job)
    for size in (fanout.MIN_CHUNK, 37, fanout.MAX_CHUNK):
        monkeypatch.setattr(fanout, "chunk_size", lambda plan, slots, s=size: s)
        assert fanout.numeric(job, pool, min_elements=0) == single


def test_a_blob_checked_twice_is_a_400_fanned_out_or_not(pool: WorkerPool) -> None:
    job = _job(batch=40, check=["data", "data"])  # fanned out, this was a 500 (reshape)
    for run in (lambda: run_check(job), lambda: fanout.numeric(job, pool, min_elements=0)):
        with pytest.raises(InvalidRequestError) as twice:
            run()
        assert "'data' more than once" in twice.value.message
        assert [p.path for p in twice.value.problems] == ["check"]
