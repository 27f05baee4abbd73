"""Every counterexample the differential fuzzer (tests/fuzz) found stays fixed.

Each file in ``fuzz_counterexamples/`` is the shrunk net the fuzzer printed: a ready
``POST /v1/verify`` body. The property check must now pass on it (a 200 whose gradients
agree with central differences), and the expected outcome is a 200, not a 4xx: every one of
these nets has a correct gradient that netgrad once got wrong.

- ``A_*``: a Do whose body writes a bound input without reading its value (defect A).
- ``E_*``: accumulation renamed one op of Pow's three-op gradient (defect E).
- ``F1_*``: a gradient While/If wrote its incoming gradient blob, which Sum had shared.
- ``F2_*``: an If nested in a Do or an If branch left a blob unchanged at run time, but the
  Do binding declared it written, so its old value got no gradient.
- ``F3_*``: an in-place MatMul (with recompute) wrote dA over dY before reading dY again.
- ``F4_*``: recompute redirected an in-place Div's read of its own (current) output too.
- ``F5_*``: F1 through a gradient Do's binding of its incoming gradient.
- ``F6_*``: a zero-trip While left a carried blob's gradient unwritten: its zero seed
  was only found after another carried blob's zero seed (long profile, seed 20261201).
- ``F7_*``: an in-place op (Scale, Negative, AffineChannel) before a Sum, or in an If
  branch, had its gradient op write into the gradient blob Sum shared with another input
  (review f1, finding 1); ``F7_chained_*`` (found by the fuzz-ci run once the strategy
  emitted that pattern): a chain of in-place Scale + in-place Sum, where the gradient op
  wrote ``<x>_grad``, which a later in-place Sum had given to its other input;
  ``F7_do_*``: the same through a gradient Do writing ``<a>_grad`` for its input ``a``
  while its other input ``b`` held that blob; ``F7_do_final_*``: a gradient Do's final
  copy into a seed's inner name ran before another input's copy read that seed (Sum in the
  body had given the seed to both).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fuzz.property import CLEAN_4XX, RIGHT_200, case_from_request, check_outcome

HERE = Path(__file__).parent / "fuzz_counterexamples"
FILES = sorted(HERE.glob("*.json"))


def test_there_are_counterexamples() -> None:
    assert len(FILES) >= 14


#: Counterexamples whose right answer is a clean 4xx: an in-place Div into its divisor reads
#: both values of one name, which recompute cannot tell apart (F4).
REFUSED = {"F4_inplace_div_into_divisor_recompute"}


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_counterexample_gets_a_right_gradient(path: Path) -> None:
    case = case_from_request(json.loads(path.read_text()))
    assert check_outcome(**case) == (CLEAN_4XX if path.stem in REFUSED else RIGHT_200)
