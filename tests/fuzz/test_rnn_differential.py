"""Differential fuzzing of RecurrentNetwork gradients (issue 9): a clean 4xx, or right numbers.

Random small ``RecurrentNetwork`` ops (:func:`tests.fuzz.strategies.rnn_fuzz_cases`: plain
step nets, LSTMUnit / GRUUnit cells with sequence lengths, an ``If`` in the step net,
``recompute_blobs_on_backward``) go through :func:`tests.fuzz.property.check_outcome`, the
same property as the control-flow fuzzer. The CI profile runs :data:`CI_RNN_EXAMPLES`.
"""

from __future__ import annotations

import pytest
from hypothesis import event, given, note, settings

from tests.fuzz.profiles import CI_EXAMPLES, fuzz_settings
from tests.fuzz.property import RIGHT_200, check_outcome
from tests.fuzz.strategies import FuzzCase, rnn_fuzz_cases

#: Examples in the CI profile (each runs a full finite-difference check).
CI_RNN_EXAMPLES = 150
_BASE = fuzz_settings()
SETTINGS = settings(_BASE, max_examples=min(_BASE.max_examples, CI_RNN_EXAMPLES)) if (
    _BASE.max_examples <= CI_EXAMPLES) else _BASE


@pytest.mark.timeout(900)
@SETTINGS
@given(case=rnn_fuzz_cases())
def test_rnn_gradient_is_clean_4xx_or_right(case: FuzzCase) -> None:
    note(f"ys={case.ys}\n{case.listing()}")
    outcome = check_outcome(case.net, case.ys, case.inputs, constants=case.constants,
                            seed=case.seed)
    event(f"outcome {outcome}")
    # every drawn op is a supported shape: a 4xx here would be a false refusal
    assert outcome == RIGHT_200
