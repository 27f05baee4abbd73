"""Forward control-flow conformance cases, run in-process and through the worker pool.

The cases are data (``tests/conformance/cases.py``); the same suite runs on both executors
(house style #13).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import pytest

from api_schemas import caffe2_pb2
from core.executor.executor import execute
from core.executor.limits import RunLimits
from core.executor.pool import WorkerPool
from tests.conformance.cases import ConformanceCase, forward_cases

CASES = forward_cases()
Runner = Callable[[caffe2_pb2.NetDef, Mapping[str, np.ndarray]], dict[str, np.ndarray]]


@pytest.fixture(scope="module")
def pool() -> Iterator[WorkerPool]:
    with WorkerPool(2, RunLimits(wall_clock_s=20)) as p:
        yield p


@pytest.fixture(params=["in_process", "worker_pool"])
def runner(request: pytest.FixtureRequest) -> Runner:
    if request.param == "in_process":
        return lambda net, feeds: execute(net, feeds)
    p: WorkerPool = request.getfixturevalue("pool")
    return lambda net, feeds: p.submit(execute, net, dict(feeds))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_forward_case(case: ConformanceCase, runner: Runner) -> None:
    blobs = runner(case.net, case.feeds)
    for name, want in case.expected.items():
        assert name in blobs, f"{case.name}: {name} missing; have {sorted(blobs)}"
        got: Any = blobs[name]
        np.testing.assert_array_equal(
            np.asarray(got).reshape(-1),
            np.asarray(want).reshape(-1),
            err_msg=f"{case.name}: {name}",
        )
    for name in case.absent:
        assert name not in blobs, f"{case.name}: {name} leaked into the outer workspace"
