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


@pytest.mark.timeout(900 if SETTINGS.max_examples <= CI_EXAMPLES else 0)  # (long: no limit)
@SETTINGS
@given(case=rnn_fuzz_cases())
def test_rnn_gradient_is_clean_4xx_or_right(case: FuzzCase) -> None:
    note(f"ys={case.ys}\n{case.listing()}")
    outcome = check_outcome(case.net, case.ys, case.inputs, constants=case.constants,
                            seed=case.seed)
    event(f"outcome {outcome}")
    # every drawn op is a supported shape: a 4xx here would be a false refusal
    assert outcome == RIGHT_200


def test_a_planted_wrong_rnn_gradient_is_caught() -> None:
    """The property is not vacuous for RecurrentNetwork: a tampered backward step net fails."""
    from api_schemas import caffe2_pb2
    from core.api import gradient_for_net
    from core.registry import find_arg, make_arg, make_op
    from tests.core.control.rnn_cases import simple_feeds, simple_rnn
    from tests.fuzz.property import OutcomeFailure

    net = simple_rnn()
    feeds = simple_feeds()
    res = gradient_for_net(net, ["loss"])
    ops = [caffe2_pb2.OperatorDef() for _ in res.grad_ops]
    for new, old in zip(ops, res.grad_ops, strict=True):
        new.CopyFrom(old)
    rnn_grad = next(o for o in ops if o.type == "RecurrentNetworkGradient")
    back = find_arg(rnn_grad, "backward_step_net").n
    back.op.append(make_op("Scale", ["h/h_prev_grad"], ["h/h_prev_grad"],
                           [make_arg("scale", 0.9)]))  # the recurrence loses 10 % per step
    assert check_outcome(net, ["loss"], feeds, seed=0) == RIGHT_200
    with pytest.raises(OutcomeFailure, match="wrong gradient"):
        check_outcome(net, ["loss"], feeds, seed=0, grad_ops=ops)
