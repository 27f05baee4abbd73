"""Every maker answers or refuses any arity: never an unexpected exception (a 500).

For each op type with a maker (control ops aside), ops with 0-6 inputs and 0-4 outputs, with
and without the arguments some makers branch on, and with dense or missing output
gradients, go through :func:`core.api.gradient_for_op`. Each must give an answer or a
``NetgradError`` (a 4xx); an ``IndexError`` from a maker reading a position the op lacks was
a 500 (WeightedSum with an odd number of inputs).
"""

from __future__ import annotations

import itertools

import pytest

from core.api import gradient_for_op
from core.errors import NetgradError
from core.ops import load_all
from core.registry import REGISTRY, make_arg, make_op

load_all()
TYPES = sorted(t for t, e in REGISTRY.items()
               if e.maker is not None and t not in ("Do", "If", "While", "RecurrentNetwork"))


@pytest.mark.parametrize("op_type", TYPES)
def test_any_arity_gives_an_answer_or_a_4xx(op_type: str) -> None:
    answered = refused = 0
    for n_in, n_out in itertools.product(range(7), range(5)):
        for args in ([], [make_arg("grad_on_w", 1)], [make_arg("is_test", 1)]):
            op = make_op(op_type, [f"i{k}" for k in range(n_in)],
                         [f"o{k}" for k in range(n_out)], args)
            for dense in (True, False):
                try:
                    gradient_for_op(op, [f"{o}_g" if dense else None for o in op.output])
                    answered += 1
                except NetgradError:
                    refused += 1
    assert answered + refused == 7 * 5 * 3 * 2


def test_weighted_sum_with_an_odd_input_count_is_refused() -> None:
    op = make_op("WeightedSum", ["x0", "w0", "x1"], ["y"])
    with pytest.raises(NetgradError, match="even number of inputs"):
        gradient_for_op(op, ["y_grad"])
