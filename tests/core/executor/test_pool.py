"""The worker pool: isolation, per-job limits, crash recovery, error round-trips."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from core.errors import (
    BusyError,
    ExecutionError,
    InvalidNetError,
    LimitExceededError,
    WorkerLostError,
)
from core.executor.executor import execute
from core.executor.limits import RunLimits, default_limits
from core.executor.pool import WorkerPool
from tests.conformance.cases import brew_loop_net, while_net

LIMIT_S = 2.0


# Jobs: picklable top-level functions.
def _pid() -> int:
    return os.getpid()


def _sleep(seconds: float) -> str:
    time.sleep(seconds)
    return "woke"


def _crash() -> None:
    os._exit(3)


def _allocate(n: int) -> float:
    return float(np.ones(n).sum())


def _raise_value_error() -> None:
    raise ValueError("plain bug")


def _worker_limits() -> RunLimits:
    return default_limits()


def _infinite_while_feeds() -> dict[str, np.ndarray]:
    return {
        "cond": np.array(True),
        "ONE": np.array(0),
        "TWO": np.array(2),
        "TEN": np.array(10),
        "counter": np.array(0),
        "output_blob": np.array(0),
    }


@pytest.fixture(scope="module")
def pool() -> Iterator[WorkerPool]:
    limits = RunLimits(wall_clock_s=LIMIT_S, memory_bytes=1024**3, max_loop_iterations=10**12)
    with WorkerPool(2, limits) as p:
        yield p


def test_jobs_run_in_other_processes(pool: WorkerPool) -> None:
    pid = pool.submit(_pid)
    assert pid != os.getpid()
    assert pid in pool.pids()


def test_workers_use_the_pool_limits_by_default(pool: WorkerPool) -> None:
    assert pool.submit(_worker_limits) == pool.limits


def test_infinite_while_times_out_while_another_job_succeeds(pool: WorkerPool) -> None:
    # ONE = 0: the counter never reaches TEN, so the While never stops by itself.
    results: dict[str, object] = {}

    def other() -> None:
        time.sleep(0.2)  # submitted while the infinite job is running
        results["other"] = pool.submit(execute, while_net(), {})

    t = threading.Thread(target=other)
    t.start()
    start = time.monotonic()
    with pytest.raises(LimitExceededError) as info:
        pool.submit(execute, brew_loop_net(), _infinite_while_feeds())
    elapsed = time.monotonic() - start
    t.join()
    assert elapsed <= LIMIT_S + 1.0
    assert "wall-clock" in info.value.message
    other_out = results["other"]
    assert isinstance(other_out, dict) and other_out["y"].tolist() == [21]
    # the pool keeps serving
    assert pool.submit(execute, while_net(), {})["x"].tolist() == [7]


def test_a_hung_job_is_killed_and_the_worker_replaced(pool: WorkerPool) -> None:
    before = set(pool.pids())
    start = time.monotonic()
    with pytest.raises(LimitExceededError):
        pool.submit(_sleep, 60.0)
    assert time.monotonic() - start <= LIMIT_S + 1.0
    after = set(pool.pids())
    assert len(after) == 2 and after != before
    assert pool.submit(_sleep, 0.0) == "woke"


def test_a_crashing_worker_gives_a_retryable_error_and_is_replaced(pool: WorkerPool) -> None:
    # A worker dying under a job is a server fault (503 + Retry-After), not the request's.
    with pytest.raises(WorkerLostError, match="crashed") as info:
        pool.submit(_crash)
    assert isinstance(info.value, BusyError) and not isinstance(info.value, ExecutionError)
    assert len(pool.pids()) == 2
    assert pool.submit(_sleep, 0.0) == "woke"


def test_memory_limit(pool: WorkerPool) -> None:
    with pytest.raises(LimitExceededError, match="memory"):
        pool.submit(_allocate, 400_000_000)  # 3.2 GB of float64 > 1 GiB address space
    assert pool.submit(_allocate, 1000) == 1000.0


def _allocating_loop(elements: int, feeds: dict[str, np.ndarray]) -> int:
    """counter <- 0; while counter < TEN: a Do body fills ``elements`` floats (saved per pass).

    Runs the loop and returns the final counter.
    """
    from api_schemas import caffe2_pb2
    from core.control.lowering import add_while_op
    from core.registry import make_arg, make_op

    net, body, cond = (caffe2_pb2.NetDef(name=n) for n in ("loop", "body", "cond"))
    body.op.extend([
        make_op("ConstantFill", [], ["big"], [make_arg("shape", [elements]),
                                             make_arg("value", 1.0)]),
        make_op("Add", ["counter", "ONE"], ["counter"]),
    ])
    cond.op.append(make_op("LT", ["counter", "TEN"], ["cond"]))
    add_while_op(net, "cond", ["cond", "ONE", "TEN", "counter", "big"], body, cond)
    return int(execute(net, feeds, fetch=["counter"])["counter"])


def _fill(elements: int) -> float:
    from api_schemas import caffe2_pb2
    from core.registry import make_arg, make_op

    net = caffe2_pb2.NetDef(name="fill")
    net.op.append(make_op("ConstantFill", [], ["b"], [make_arg("shape", [elements]),
                                                      make_arg("value", 1.0)]))
    return float(execute(net, {})["b"][-1])


@pytest.mark.parametrize("iterations", [20, 1000])
def test_a_loop_that_ends_or_runs_out_of_memory_leaves_the_worker_whole(
        iterations: int) -> None:
    # A While keeps one saved workspace per iteration, and a child workspace forwards to its
    # parent: a cycle. The 400 MB of a finished loop (20 iterations), or everything up to the
    # limit (1000 iterations run out of memory), stayed alive in the worker, and the next
    # 400 MB job failed with out of memory (adversarial review, stop 21).
    limits = RunLimits(wall_clock_s=30.0, memory_bytes=1024**3)
    feeds = {"ONE": np.array(1), "TEN": np.array(iterations), "counter": np.array(0),
             "big": np.zeros(1, np.float32)}
    with WorkerPool(1, limits) as p:
        if iterations < 100:
            assert p.submit(_allocating_loop, 5_000_000, feeds) == iterations
        else:
            with pytest.raises(LimitExceededError) as info:
                p.submit(_allocating_loop, 5_000_000, feeds)
            assert info.value.problems[0].code == "memory_exceeded"
        assert p.submit(_fill, 100_000_000) == 1.0


def _garbage_after_loop(feeds: dict[str, np.ndarray]) -> int:
    import gc

    gc.collect()
    gc.disable()
    try:
        assert _allocating_loop(10, feeds) == int(feeds["TEN"])
        return gc.collect()
    finally:
        gc.enable()


def test_a_finished_loop_leaves_no_reference_cycles() -> None:
    # (151 unreachable objects, each iteration's workspace among them, before the fix)
    feeds = {"ONE": np.array(1), "TEN": np.array(20), "counter": np.array(0),
             "big": np.zeros(1, np.float32)}
    assert _garbage_after_loop(feeds) == 0


def test_netgrad_errors_keep_type_and_problems(pool: WorkerPool) -> None:
    from api_schemas import caffe2_pb2
    from core.registry import make_op

    net = caffe2_pb2.NetDef(name="n")
    net.op.append(make_op("Relu", ["x"], ["y"]))
    net.op.append(make_op("NoSuchOp", ["y"], ["z"]))
    with pytest.raises(ExecutionError) as info:
        pool.submit(execute, net, {"x": np.array([1.0])})
    problem = info.value.problems[0]
    assert (problem.op_index, problem.op_type, problem.code) == (1, "NoSuchOp", "unknown_op_type")

    bad_do = caffe2_pb2.NetDef(name="n")
    bad_do.op.append(make_op("CreateScope", [], ["W"]))
    bad_do.op.append(make_op("Do", ["W"], ["V"]))
    with pytest.raises(InvalidNetError):
        pool.submit(execute, bad_do, {})


def test_other_exceptions_become_execution_errors(pool: WorkerPool) -> None:
    with pytest.raises(ExecutionError, match="ValueError: plain bug"):
        pool.submit(_raise_value_error)


def test_an_unexpected_exception_is_an_internal_error_not_the_requests(
        pool: WorkerPool) -> None:
    # a bug of netgrad's: a 500, where execution errors of the request are 422 (stop 23: an
    # in-place Gather's verify job answered "422 ... ValueError: cannot reshape array")
    from app.errors import status_for
    from core.errors import InternalError

    with pytest.raises(InternalError, match="netgrad bug") as info:
        pool.submit(_raise_value_error)
    assert status_for(info.value) == 500 and info.value.problems[0].code == "internal_error"


def test_closed_pool_refuses_jobs() -> None:
    p = WorkerPool(1, RunLimits(wall_clock_s=5))
    assert p.submit(_sleep, 0.0) == "woke"
    p.close()
    with pytest.raises(WorkerLostError, match="closed"):
        p.submit(_sleep, 0.0)


def test_huge_fill_fails_fast_in_a_worker(pool: WorkerPool) -> None:
    from api_schemas import caffe2_pb2
    from core.registry import make_arg, make_op

    net = caffe2_pb2.NetDef(name="n")
    net.op.append(
        make_op("ConstantFill", [], ["big"], [make_arg("shape", [10**12]), make_arg("value", 1.0)])
    )
    start = time.monotonic()
    with pytest.raises(LimitExceededError, match="elements") as info:
        pool.submit(execute, net, {})
    assert time.monotonic() - start < LIMIT_S  # refused before allocating, not timed out
    assert info.value.problems[0].op_type == "ConstantFill"


def test_a_worker_that_cannot_load_a_job_is_replaced_and_the_job_retried(
    tmp_path: os.PathLike[str],
) -> None:
    """E.g. the package was reinstalled under a running server: the old worker cannot
    import the job's module any more; a fresh worker can."""
    import importlib
    import sys
    from pathlib import Path

    with WorkerPool(1) as pool:
        before = pool.pids()
        Path(tmp_path, "late_job_module.py").write_text("def twice(x):\n    return 2 * x\n")
        sys.path.insert(0, str(tmp_path))  # only workers started from now on see it
        try:
            mod = importlib.import_module("late_job_module")
            assert pool.submit(mod.twice, 21) == 42
            assert pool.pids() != before
        finally:
            sys.path.remove(str(tmp_path))
            sys.modules.pop("late_job_module", None)


def test_a_full_queue_answers_busy_instead_of_waiting_forever() -> None:
    import threading as _threading

    from core.errors import BusyError

    with WorkerPool(1, RunLimits(wall_clock_s=5.0), queue_timeout_s=0.5) as busy_pool:
        started = _threading.Event()

        def occupy() -> None:
            started.set()
            busy_pool.submit(time.sleep, 2.0)

        t = _threading.Thread(target=occupy)
        t.start()
        started.wait()
        time.sleep(0.2)  # let the sleeper take the only worker
        with pytest.raises(BusyError):
            busy_pool.submit(os.getpid)
        t.join()
        assert isinstance(busy_pool.submit(os.getpid), int)  # free again afterwards


def test_recycle_after_replaces_a_worker_after_its_jobs() -> None:
    with WorkerPool(1, RunLimits(wall_clock_s=5), recycle_after=2) as p:
        first = p.pids()
        assert p.submit(_sleep, 0.0) == "woke"
        assert p.pids() == first  # one job: kept
        assert p.submit(_sleep, 0.0) == "woke"
        second = p.pids()
        assert len(second) == 1 and second != first  # two jobs: replaced
        assert p.submit(_sleep, 0.0) == "woke"


def _loaded(names: list[str]) -> list[str]:
    import sys

    return [n for n in names if n in sys.modules]


def test_a_worker_imports_the_callers_preload_packages_before_it_is_ready() -> None:
    """``preload``: the modules of what the caller submits (the isolation pool's routes) are
    imported while a worker starts, not while the job that needs them waits; a package that
    cannot be imported leaves the worker working."""
    names = ["xmlrpc.server", "xmlrpc.client"]
    with WorkerPool(size=1, preload=("xmlrpc",)) as preloading:
        assert preloading.submit(_loaded, names) == names
    with WorkerPool(size=1) as plain:
        assert plain.submit(_loaded, names) == []
    with WorkerPool(size=1, preload=("no_such_package_for_netgrad", "xmlrpc.client")) as one:
        assert one.submit(_pid) != os.getpid()  # (a missing name leaves the worker working)
        assert one.submit(_loaded, names) == ["xmlrpc.client"]  # (a module: itself alone)
