"""Fuzzing the gradient of a While's cond_net counter step ``i = i + c`` (stop 23).

Tutorial-shaped loops (control-flow-cases §10, built with ``add_while_op``, so the cond_net
is Do-wrapped): the cond_net steps a float counter ``i`` by a parameter ``c`` (``Add``,
``Sub`` or ``Sum`` with ``c`` once or twice) and tests it against a limit; the body reads
the counter in its math, sometimes ``c`` too. The start ``i0``, the step ``c`` and ``y0``
are checked against finite differences (:func:`tests.fuzz.property.check_outcome`); the
limit sits half a step between two counter values, so no perturbation changes the trip
count (0 to 4 trips).
"""

from __future__ import annotations

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from api_schemas import caffe2_pb2
from core.control.lowering import add_while_op
from core.registry import make_op
from core.verify import InputSpec, TensorSpec
from tests.fuzz.profiles import fuzz_settings
from tests.fuzz.property import check_outcome

#: A tenth of the random nets' examples (250 in CI, 1 000 in the ``long`` profile).
SETTINGS = settings(fuzz_settings(), max_examples=max(1, fuzz_settings().max_examples // 10))


def _scalar(name: str, value: float) -> InputSpec:
    return InputSpec(name, tensor=TensorSpec([1], "float64", [value]))


@st.composite
def step_loops(draw: st.DrawFn) -> tuple[caffe2_pb2.NetDef, list[str], list[InputSpec]]:
    """A loop, its ``ys`` and its inputs (``LIMIT`` fed, not checked)."""
    step = draw(st.sampled_from(["Add", "Sub", "Sum1", "Sum2"]))
    i0 = draw(st.integers(-100, 100)) / 100
    c = draw(st.integers(50, 150)) / 100
    trips = draw(st.integers(0, 4))
    per_trip = {"Add": c, "Sub": -c, "Sum1": c, "Sum2": 2 * c}[step]
    limit = i0 + (trips + 0.5) * per_trip
    ins = {"Add": ["i", "c"], "Sub": ["i", "c"], "Sum1": ["i", "c"], "Sum2": ["i", "c", "c"]}
    cond = caffe2_pb2.NetDef(name="cond")
    cond.op.append(make_op("Sub" if step == "Sub" else "Add" if step == "Add" else "Sum",
                           ins[step], ["i"]))
    cond.op.append(make_op("GE" if per_trip < 0 else "LE", ["i", "LIMIT"], ["cond"]))
    body = caffe2_pb2.NetDef(name="body")
    kind = draw(st.sampled_from(["sum", "mul", "with_c"]))
    if kind == "sum":
        body.op.append(make_op("Sum", ["y", "i"], ["y"]))
    elif kind == "mul":  # y = y + i * i
        body.op.extend([make_op("Mul", ["i", "i"], ["t"]), make_op("Sum", ["y", "t"], ["y"])])
    else:  # y = y + i * c: the body reads the step too
        body.op.extend([make_op("Mul", ["i", "c"], ["t"]), make_op("Sum", ["y", "t"], ["y"])])
    net = caffe2_pb2.NetDef(name="steps")
    add_while_op(net, "cond", ["cond", "i", "y", "c", "LIMIT"], body, cond)
    ys = draw(st.sampled_from([["y"], ["y", "i"], ["i"]]))
    event(f"{step}, body {kind}, {trips} trips, ys {ys}")
    inputs = [_scalar("i", i0), _scalar("c", c), _scalar("y", draw(st.integers(-9, 9)) / 10),
              _scalar("LIMIT", limit), InputSpec("cond", tensor=TensorSpec([], "bool", [0]))]
    return net, ys, inputs


@pytest.mark.timeout(900)
@SETTINGS
@given(case=step_loops())
def test_a_cond_net_step_operand_gets_the_right_gradient(
        case: tuple[caffe2_pb2.NetDef, list[str], list[InputSpec]]) -> None:
    net, ys, inputs = case
    outcome = check_outcome(net, ys, inputs, constants=["LIMIT", "cond"], seed=23)
    assert outcome == "200"
