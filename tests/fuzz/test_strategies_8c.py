"""The 8c block of the fuzz strategies really draws its ops (BatchMatMul, LayerNorm, a loss)."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings

from api_schemas import caffe2_pb2
from tests.fuzz.strategies import FuzzCase, fuzz_cases

SEEN: Counter[str] = Counter()


def _walk(net: caffe2_pb2.NetDef) -> None:
    for op in net.op:
        SEEN[op.type] += 1
        if op.type == "LayerNorm":
            assert len(op.output) == 3  # Y, mean, std: the schema needs all three
        for arg in op.arg:
            if arg.HasField("n"):
                _walk(arg.n)


@settings(
    max_examples=150,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(case=fuzz_cases())
def _draw(case: FuzzCase) -> None:
    _walk(case.net)


def test_8c_ops_are_drawn() -> None:
    SEEN.clear()
    _draw()
    for op_type in ("BatchMatMul", "LayerNorm", "SigmoidCrossEntropyWithLogits"):
        assert SEEN[op_type] > 0, dict(SEEN)
    # every loss reads targets made in the net by a fill op, never a fed (checked) blob
    assert SEEN["GivenTensorFill"] >= SEEN["SigmoidCrossEntropyWithLogits"]
