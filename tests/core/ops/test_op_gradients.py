"""One table-driven numeric gradient test over every registered op type (house style #10).

Cases come from ``cases_*.py`` beside this file. A coverage test asserts that every op type
with a gradient maker has at least one case.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import numpy as np
import pytest

from core.ops import load_all
from core.registry import REGISTRY, GradientStatus
from core.verify.opcheck import check_op
from tests.core.ops.opcase import OpCase

load_all()

SEED = 20261129


def _all_cases() -> list[OpCase]:
    here = Path(__file__).parent
    cases: list[OpCase] = []
    for info in sorted(pkgutil.iter_modules([str(here)]), key=lambda m: m.name):
        if info.name.startswith("cases_"):
            mod = importlib.import_module(f"tests.core.ops.{info.name}")
            cases.extend(mod.CASES)
    return cases


CASES = _all_cases()

# Op types whose maker is exercised by dedicated tests instead of this single-op table
# (control flow needs whole nets and a workspace runtime).
COVERED_ELSEWHERE = {"Do", "If", "While", "RecurrentNetwork"}


@pytest.mark.parametrize("case", CASES, ids=[f"{c.op_type}{c.id}" for c in CASES])
def test_numeric_gradient(case: OpCase) -> None:
    op = case.build()
    feeds = case.feed(SEED)
    res = check_op(
        op, feeds, case.checked(), case.outputs_with_grads, step=case.step, seed=SEED + 1
    )
    for name in case.checked():
        np.testing.assert_allclose(
            res.analytic[name],
            case.numeric_scale * res.numeric[name],
            atol=case.atol,
            rtol=case.rtol,
            err_msg=f"{case.op_type}{case.id}: gradient of {name} (seed {SEED})",
        )


def test_every_op_with_a_maker_has_a_case() -> None:
    with_maker = {
        t for t, e in REGISTRY.items() if e.status == GradientStatus.GRADIENT
    } - COVERED_ELSEWHERE
    missing = sorted(with_maker - {c.op_type for c in CASES})
    assert missing == []


def test_every_op_has_an_explicit_status_or_kernel() -> None:
    for op_type, e in REGISTRY.items():
        has_role = e.maker is not None or e.kernel is not None or e.doc
        assert has_role or e.status != GradientStatus.NOT_IMPLEMENTED, op_type
