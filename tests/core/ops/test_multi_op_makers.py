"""Every maker whose gradient is more than one op stays correct under accumulation (issue 7, E).

When an input's gradient is summed with another consumer's, accumulation renames the
maker's gradient output. A maker that chains several ops through one name (Pow, Sqrt...)
must be renamed as a unit: upstream renamed each op's output on its own, so the later ops
read the wrong blob (``t2 = x - x**3`` gave ``x_grad = 7`` at x = 2 instead of -11).

Each case of the op table whose maker emits more than one op gets a second consumer of
every checked input (``Scale``), placed after the op and before it, so both the kept and
the renamed side of the ``Sum`` are exercised; the net's gradient is checked in full mode
against central differences.
"""

from __future__ import annotations

import numpy as np
import pytest

from api_schemas import caffe2_pb2
from core.api import gradient_for_op
from core.registry import make_arg, make_op
from core.verify import InputSpec, VerifyOptions, verify_net
from tests.core.ops.opcase import OpCase
from tests.core.ops.test_op_gradients import CASES, SEED


def _grad_op_count(case: OpCase) -> int:
    op = case.build()
    g_output = [
        f"{o}_grad" if k in case.outputs_with_grads else None for k, o in enumerate(op.output)
    ]
    return len(gradient_for_op(op, g_output).grad_ops)


MULTI = [c for c in CASES if c.checked() and _grad_op_count(c) > 1]


def test_the_table_has_multi_op_makers() -> None:
    assert {"Pow", "Sqrt"} <= {c.op_type for c in MULTI}


@pytest.mark.parametrize("order", ["consumer_after", "consumer_before"])
@pytest.mark.parametrize("case", MULTI, ids=[f"{c.op_type}{c.id}" for c in MULTI])
def test_accumulated_gradient_of_a_multi_op_maker(case: OpCase, order: str) -> None:
    op = case.build()
    feeds = case.feed(SEED)
    checked = [n for n in case.checked() if np.asarray(feeds[n]).dtype.kind == "f"]
    extra = [
        make_op("Scale", [n], [f"{n}__extra"], [make_arg("scale", 0.5)]) for n in checked
    ]
    net = caffe2_pb2.NetDef()
    net.name = "accumulate"
    net.op.extend([op, *extra] if order == "consumer_after" else [*extra, op])
    ys = [op.output[k] for k in case.outputs_with_grads] + [f"{n}__extra" for n in checked]
    opts = VerifyOptions(
        inputs=[InputSpec.from_array(k, v) for k, v in feeds.items()],
        mode="full",
        check=checked,
        atol=max(case.atol, 1e-6),
        rtol=max(case.rtol, 1e-5),
        step=case.step,
    )
    result = verify_net(net, ys, opts)
    sums = [o for o in result.grad_ops if o.type == "Sum" and "autosplit" in "".join(o.input)]
    assert sums, "the input gradient was not accumulated"
    assert result.report.passed, result.report


def test_issue_example_pow_then_sub() -> None:
    """t1 = Pow(x, 3); t2 = Sub(x, t1): d t2 / dx = 1 - 3 x**2 = -11 at x = 2."""
    net = caffe2_pb2.NetDef()
    net.op.extend([
        make_op("Pow", ["x"], ["t1"], [make_arg("exponent", 3.0)]),
        make_op("Sub", ["x", "t1"], ["t2"]),
    ])
    from core.api import gradient_for_net
    from core.executor.executor import execute

    res = gradient_for_net(net, {"t2": "t2_grad"})
    full = caffe2_pb2.NetDef()
    full.CopyFrom(net)
    full.op.extend(res.grad_ops)
    out = execute(full, {"x": np.array([2.0]), "t2_grad": np.array([1.0])})
    assert out[str(res.grad_map["x"])].tolist() == [-11.0]


def _duplicate_cases() -> list[tuple[OpCase, str, str]]:
    """(case, kept input, input replaced by the kept one) for same-shape float input pairs."""
    out = []
    for case in CASES:
        feeds = case.feed(SEED)
        names = [
            n for n in case.checked() if np.asarray(feeds[n]).dtype.kind == "f"
        ]
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                if np.shape(feeds[a]) == np.shape(feeds[b]):
                    out.append((case, a, b))
    return out


DUPLICATES = _duplicate_cases()


@pytest.mark.parametrize(
    ("case", "kept", "dropped"),
    DUPLICATES,
    ids=[f"{c.op_type}{c.id}-{a}{b}" for c, a, b in DUPLICATES],
)
def test_one_blob_at_two_input_positions(case: OpCase, kept: str, dropped: str) -> None:
    """``Pow(w, w)`` and friends: each position's gradient is kept apart, then summed."""
    op = case.build()
    for j, name in enumerate(op.input):
        if name == dropped:
            op.input[j] = kept
    net = caffe2_pb2.NetDef()
    net.op.append(op)
    feeds = {k: v for k, v in case.feed(SEED).items() if k != dropped}
    opts = VerifyOptions(
        inputs=[InputSpec.from_array(k, v) for k, v in feeds.items()],
        mode="full",
        check=[kept],
        atol=max(case.atol, 1e-6),
        rtol=max(case.rtol, 1e-5),
        step=case.step,
    )
    result = verify_net(net, [op.output[k] for k in case.outputs_with_grads], opts)
    assert result.report.passed, result.report
