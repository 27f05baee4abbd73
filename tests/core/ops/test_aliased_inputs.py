"""Every op case again, with one blob fed to all its inputs of one shape and sampler.

``Mul(x, x)``, ``SparseToDense(I, V, V)``: an op that reads one blob at several input
positions gets one gradient per position, which the backward pass sums (spec §2.7). A
position without gradient must not drop another position's (adversarial review, stop 24:
``SparseToDense(I, V, V)`` lost ``V``'s gradient). Each aliased case runs through the whole
pass and the product's checker (:func:`core.verify.checker.verify_net`, full mode) and must
verify, or be refused with a located 4xx.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from api_schemas import caffe2_pb2
from core.errors import NetgradError
from core.registry import make_arg, make_op
from core.verify.checker import InputSpec, VerifyOptions, verify_net
from tests.core.ops.opcase import OpCase
from tests.core.ops.test_op_gradients import CASES, SEED

#: Aliasing puts these at a kink or a tie of the function (Max(x, x), |x - x|), where
#: central differences are not the gradient.
AT_A_KINK = {"Max", "Min", "L1Distance", "MaxGradient", "MinGradient", "Abs"}


def _aliased(case: OpCase) -> tuple[caffe2_pb2.NetDef, str, list[str]] | None:
    """The case with each group of same-shape, same-sampler inputs fed one blob."""
    checked = set(case.checked())
    groups: dict[tuple[tuple[int, ...], str], list[str]] = defaultdict(list)
    for i in case.inputs:
        if i.name in checked:
            groups[(tuple(i.shape), getattr(i.sampler, "__name__", ""))].append(i.name)
    alias = {name: names[0] for names in groups.values() if len(names) > 1 for name in names}
    if not alias:
        return None
    op = make_op(case.op_type, [alias.get(i.name, i.name) for i in case.inputs], case.outputs,
                 [make_arg(k, v) for k, v in case.args.items()])
    net = caffe2_pb2.NetDef(name=f"aliased_{case.op_type}")
    net.op.append(op)
    check = sorted({alias.get(n, n) for n in checked})
    return net, next(iter(alias.values())), check


ALIASED = [(c, a) for c in CASES if c.op_type not in AT_A_KINK
           if (a := _aliased(c)) is not None]
#: Aliased cases netgrad refuses (a located 4xx) instead of differentiating: none today.
REFUSED: set[str] = set()


@pytest.mark.parametrize(("case", "aliased"), ALIASED,
                         ids=[f"{c.op_type}{c.id}" for c, _ in ALIASED])
def test_an_op_reading_one_blob_twice_gets_the_right_gradient(
        case: OpCase, aliased: tuple[caffe2_pb2.NetDef, str, list[str]]) -> None:
    net, _, check = aliased
    feeds = case.feed(SEED)
    names = {n for op in net.op for n in op.input}
    ys = [case.outputs[k] for k in case.outputs_with_grads]
    opts = VerifyOptions(
        inputs=[InputSpec.from_array(k, np.asarray(v)) for k, v in feeds.items() if k in names],
        mode="full", check=check, atol=max(case.atol, 1e-6), rtol=max(case.rtol, 1e-4),
        step=case.step, seed=SEED)
    try:
        result = verify_net(net, ys, opts)
    except NetgradError as exc:
        assert case.op_type + case.id in REFUSED, exc.message
        assert all(p.op_index is not None or p.path for p in exc.problems), exc.problems
        return
    assert result.report.passed, result.report


def test_the_aliased_table_covers_the_multi_input_families() -> None:
    types = {c.op_type for c, _ in ALIASED}
    assert len(ALIASED) >= 30
    assert {"Mul", "Sum", "DotProduct", "LayerNorm", "SpatialBN", "LSTMUnit"} <= types
