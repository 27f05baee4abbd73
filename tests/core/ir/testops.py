"""Test-only ops of upstream ``core_gradients_test.py`` (spec §2.11), registered on demand.

``Direct`` -> ``DirectGradient(g_outputs -> input grads)``; ``UseOutput`` ->
``UseOutputGradient(outputs + g_outputs -> input grads)``; ``UseInput`` ->
``UseInputGradient(inputs + g_outputs -> input grads)``; ``Nogradient`` -> nothing.
They copy the forward device option and raise when an output gradient is missing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from core.errors import GradientError
from core.ops import load_all
from core.registry import REGISTRY, GradientMaker, OperatorDef, make_op, register_gradient

TEST_OPS = ("Direct", "UseOutput", "UseInput", "Nogradient")


def _outs(m: GradientMaker) -> list[str]:
    names = []
    for i, o in enumerate(m.op.output):
        if m.g_output[i] is None:
            raise GradientError(f'Need gradient for "{o}" but it is not provided.')
        names.append(str(m.g_output[i]))
    return names


def _finish(m: GradientMaker, op_type: str, inputs: list[str]) -> list[OperatorDef]:
    outs = [m.GI(i) for i in range(len(m.op.input))]
    g = make_op(op_type, inputs, outs, name=None)
    if m.op.HasField("device_option"):
        g.device_option.CopyFrom(m.op.device_option)
    return [g]


def _direct(m: GradientMaker) -> list[OperatorDef]:
    return _finish(m, "DirectGradient", _outs(m))


def _use_output(m: GradientMaker) -> list[OperatorDef]:
    return _finish(m, "UseOutputGradient", list(m.op.output) + _outs(m))


def _use_input(m: GradientMaker) -> list[OperatorDef]:
    return _finish(m, "UseInputGradient", list(m.op.input) + _outs(m))


def _nogradient(m: GradientMaker) -> list[OperatorDef]:
    return []


@contextmanager
def registered_test_ops() -> Iterator[None]:
    """Register the test ops for the duration of a ``with`` block."""
    load_all()
    register_gradient("Direct", raw=True)(_direct)
    register_gradient("UseOutput", raw=True)(_use_output)
    register_gradient("UseInput", raw=True)(_use_input)
    register_gradient("Nogradient", raw=True)(_nogradient)
    try:
        yield
    finally:
        for t in TEST_OPS:
            REGISTRY.pop(t, None)
