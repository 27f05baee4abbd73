"""Findings of the adversarial review after issue 7: each was a wrong 200 or a hang."""

from __future__ import annotations

import pytest

from core.api import gradient_for_net
from core.errors import GradientError, InvalidRequestError, VersionMismatchError
from core.registry import make_op
from tests.regressions.issue7_nets import net_of


def test_a_seed_named_like_another_ys_auto_seed_is_refused() -> None:
    net = net_of("n", make_op("Tanh", ["x"], ["t"]), make_op("Mul", ["t", "w"], ["u"]))
    with pytest.raises(InvalidRequestError) as info:
        gradient_for_net(net, {"u": "t_autogen_grad", "t": None})
    assert "all-ones seed netgrad generates for 't'" in info.value.problems[0].message


@pytest.mark.timeout(60)
def test_version_error_advice_is_not_exponential() -> None:
    """40 in-place Mul(x, x -> x): the advice walk used to take 2^40 steps (a hang, which
    the timeout turns into a failure)."""
    net = net_of("n", make_op("Tanh", ["a"], ["x"]), *[make_op("Mul", ["x", "x"], ["x"])] * 40)
    with pytest.raises(VersionMismatchError) as info:
        gradient_for_net(net, ["x"])
    assert "recompute" in info.value.problems[0].message


def test_softmax_with_loss_refuses_a_gradient_on_its_probabilities() -> None:
    net = net_of("n", make_op("SoftmaxWithLoss", ["X", "lab"], ["P", "L"]),
                 make_op("Mul", ["P", "P"], ["Q"]))
    with pytest.raises(GradientError) as info:
        gradient_for_net(net, ["L", "Q"])
    p = info.value.problems[0]
    assert (p.op_index, p.op_type) == (0, "SoftmaxWithLoss") and "'P'" in p.message
    gradient_for_net(net, ["L"])  # the loss alone still works


def test_a_gradient_the_maker_ignores_is_reported() -> None:
    """Dropout's mask gets no gradient flow: a gradient reaching it is named in a warning."""
    from core.api import gradient_for_op
    from core.registry import make_arg

    op = make_op("Dropout", ["x"], ["y", "mask"], [make_arg("ratio", 0.5)])
    res = gradient_for_op(op, ["y_grad", "mask_grad"])
    (warn,) = [d for d in res.diagnostics if d.code == "dropped_output_gradient"]
    assert warn.blobs == ("mask",) and warn.op_type == "Dropout"
    assert not [d for d in gradient_for_op(op, ["y_grad", None]).diagnostics
                if d.code == "dropped_output_gradient"]
