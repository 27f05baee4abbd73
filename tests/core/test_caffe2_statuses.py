"""Every Caffe2 op type is known with Caffe2's gradient status (issue 8, item 1).

The acceptance test reads ``../shared/spec/caffe2-op-statuses.csv`` (skipped where the
shared material is absent): each row's status must be netgrad's, or
``not_implemented_in_netgrad`` where Caffe2 says ``gradient`` and netgrad has no maker.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from core.caffe2_statuses import CAFFE2_STATUS, differentiable_count
from core.errors import GradientNotDefinedError
from core.ops import load_all
from core.registry import REGISTRY, GradientStatus, get_gradient_for_op, make_op

load_all()

CSV = Path(__file__).resolve().parents[3] / "shared" / "spec" / "caffe2-op-statuses.csv"


def test_every_csv_row_has_caffe2s_status_in_netgrad() -> None:
    if not CSV.exists():
        pytest.skip(f"shared material absent: {CSV}")
    with CSV.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 550
    wrong = []
    for row in rows:
        e = REGISTRY.get(row["op_type"])
        got = e.status.value if e is not None else "unknown"
        want = row["status"]
        ok = got == want or (want == "gradient" and got == "not_implemented_in_netgrad")
        if not ok:
            wrong.append((row["op_type"], want, got))
    assert wrong == []
    n = sum(1 for r in rows if REGISTRY[r["op_type"]].status is GradientStatus.GRADIENT)
    print(f"\ndifferentiable Caffe2 op types in netgrad: {n} of "
          f"{sum(r['status'] == 'gradient' for r in rows)}")
    assert n == differentiable_count()


def test_table_has_550_types_with_caffe2_counts() -> None:
    counts: dict[str, int] = {}
    for s in CAFFE2_STATUS.values():
        counts[s.value] = counts.get(s.value, 0) + 1
    assert len(CAFFE2_STATUS) == 550
    assert counts == {
        "gradient": 248, "no_gradient": 125, "should_not_differentiate": 172,
        "not_implemented": 5,
    }


def test_status_follows_the_registered_makers() -> None:
    """``gradient`` iff a maker is registered: never a status without its maker."""
    for name, status in CAFFE2_STATUS.items():
        e = REGISTRY[name]
        if status is GradientStatus.GRADIENT:
            want = (
                GradientStatus.GRADIENT if e.maker is not None
                else GradientStatus.NOT_IMPLEMENTED_IN_NETGRAD
            )
            assert e.status is want, name


def _lacking() -> str:
    return next(
        t for t, e in sorted(REGISTRY.items())
        if e.status is GradientStatus.NOT_IMPLEMENTED_IN_NETGRAD
    )


def test_typo_and_unsupported_get_different_errors() -> None:
    with pytest.raises(GradientNotDefinedError) as typo:
        get_gradient_for_op(make_op("Rleu", ["X"], ["Y"]), ["Y_grad"])
    assert typo.value.problems[0].code == "unknown_operator"
    assert "Did you mean Relu" in typo.value.message
    assert "GET /v1/operators" in typo.value.message
    lacking = _lacking()
    with pytest.raises(GradientNotDefinedError) as missing:
        get_gradient_for_op(make_op(lacking, ["X"], ["Y"]), ["Y_grad"])
    assert missing.value.problems[0].code == "not_implemented_in_netgrad"
    assert "a Caffe2 operator netgrad does not differentiate yet" in missing.value.message


def test_reader_ops_stop_silently() -> None:
    for t in ("TensorProtosDBInput", "ImageInput", "Iter", "OneHot"):
        assert REGISTRY[t].status is GradientStatus.NO_GRADIENT, t
        ops, g_input = get_gradient_for_op(make_op(t, ["X"], ["Y"]), ["Y_grad"])
        assert (ops, g_input) == ([], [None])


def test_executor_names_the_nearest_types_for_an_unknown_op() -> None:
    from api_schemas import caffe2_pb2
    from core.errors import ExecutionError
    from core.executor.executor import validate_net

    net = caffe2_pb2.NetDef()
    net.op.append(make_op("Rleu", ["X"], ["Y"]))
    with pytest.raises(ExecutionError, match="did you mean Relu") as err:
        validate_net(net)
    assert err.value.problems[0].op_type == "Rleu"


@pytest.mark.parametrize(("typo", "first"), [
    ("Tahn", "Tanh"),  # two letters swapped: one edit, before Tan's deletion of a letter
    ("FullyConnected", "FC"), ("BatchNorm2d", "SpatialBN"), ("relu", "Relu"),
    ("Sigmod", "Sigmoid"),
])
def test_the_nearest_type_is_suggested_first(typo: str, first: str) -> None:
    with pytest.raises(GradientNotDefinedError) as err:
        get_gradient_for_op(make_op(typo, ["X"], ["Y"]), ["Y_grad"])
    assert f"Did you mean {first}" in err.value.message
