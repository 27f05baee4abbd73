"""The fuzz strategies really draw the non-square ``R`` kind ([3, 2]) into the ops that take
matrices: FC, MatMul, BatchMatMul, LayerNorm and the reductions read [3, 2] rows (a
gradient that mixes up a matrix's axes then has the wrong shape, not just wrong values)."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings

from core.executor.executor import execute
from core.verify import materialize_inputs
from tests.fuzz.strategies import FuzzCase, fuzz_cases

ROW_OPS = ("FC", "MatMul", "BatchMatMul", "LayerNorm", "ReduceSum", "ReduceMean",
           "ReduceFrontSum", "ReduceFrontMean", "Add", "Mul")
SEEN: Counter[tuple[str, tuple[int, ...]]] = Counter()


@settings(max_examples=150, derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(case=fuzz_cases())
def _draw(case: FuzzCase) -> None:
    def observe(op: object, inputs: list, path: str) -> None:
        op_type = getattr(op, "type", "")
        if op_type in ROW_OPS and inputs:
            SEEN[(op_type, tuple(inputs[0].shape))] += 1

    execute(case.net, materialize_inputs(list(case.inputs)), observer=observe)


def test_non_square_rows_reach_the_matrix_ops() -> None:
    SEEN.clear()
    _draw()
    for op_type in ("FC", "MatMul", "ReduceSum"):
        assert SEEN[(op_type, (3, 2))] > 0, dict(SEEN)
        assert SEEN[(op_type, (2, 2))] > 0, dict(SEEN)  # the square kind stays drawn
    assert SEEN[("Add", (3, 2))] > 0, dict(SEEN)
