"""A one-line maker made directly gives the maker's own answer (``core.template``).

Differential: for every op type whose maker is a :class:`~core.template.GradTemplate`, random
forward ops (arities around the schema's, repeated and in-place names, device options,
engines and arguments) and random output gradients (dense, sparse, missing) go through
:func:`core.registry.gradient_for_op_read` twice: once as the backward pass runs it (the
template builds the op directly when it can) and once with that shortcut switched off (the
template runs as a maker, through ``GradientMaker``). Both must give the same gradient ops
(byte for byte), ``g_input``, input reads, gradient-op names and diagnostics, or the same
error. Seeds are fixed.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from api_schemas import caffe2_pb2
from core import registry
from core.errors import NetgradError
from core.ir.env import GenEnv, GenLimits
from core.ops import load_all
from core.registry import REGISTRY, gradient_for_op_read, make_arg, make_op
from core.template import GO, GradTemplate, I, O, template
from core.types import GradientSlice, GradValue

load_all()

TEMPLATED = sorted(t for t, e in REGISTRY.items() if isinstance(e.maker, GradTemplate))
_NAMES = ["a", "b", "c", "a_grad", "_a_grad_input_1"]


def _answer(op: caffe2_pb2.OperatorDef, g_output: list[GradValue]) -> Any:
    env = GenEnv(GenLimits())
    try:
        ops, g_input, reads, ins, outs = gradient_for_op_read(
            op, g_output, env, op.input[:], op.output[:], op.type
        )
    except NetgradError as exc:
        return ("error", type(exc).__name__, exc.message, [repr(p) for p in exc.problems])
    return (
        [o.SerializeToString() for o in ops],
        list(g_input),
        list(reads),
        [list(x) for x in ins],
        [list(x) for x in outs],
        [repr(d) for d in env.diagnostics],
    )


def _random_case(rng: random.Random, op_type: str) -> tuple[caffe2_pb2.OperatorDef, list[Any]]:
    s = REGISTRY[op_type].schema
    hi_i = s.max_inputs if s.max_inputs >= 0 else s.min_inputs + 3
    hi_o = s.max_outputs if s.max_outputs >= 0 else s.min_outputs + 3
    slack = 1 if rng.random() < 0.15 else 0  # an arity the schema refuses, now and then
    n_in = rng.randint(max(0, s.min_inputs - slack), hi_i + slack)
    n_out = rng.randint(max(0, s.min_outputs - slack), hi_o + slack)
    ins = [rng.choice(_NAMES) if rng.random() < 0.35 else f"x{j}" for j in range(n_in)]
    outs = [
        rng.choice(ins) if ins and rng.random() < 0.3 else f"y{j}" for j in range(n_out)
    ]
    op = make_op(op_type, ins, outs)
    r = rng.random()
    if r < 0.15:
        op.arg.extend([make_arg("axis", rng.randint(0, 2)), make_arg("order", "NCHW")])
    elif r < 0.25:
        op.device_option.device_type = 1
        op.device_option.device_id = rng.randint(0, 3)
    elif r < 0.3:
        op.engine = "CUDNN"
    g_output: list[Any] = []
    for o in outs:
        x = rng.random()
        g_output.append(
            None if x < 0.15
            else GradientSlice(o + "_i", o + "_v") if x < 0.25
            else rng.choice(ins) if ins and x < 0.3  # a gradient named like an input
            else o + "_grad"
        )
    return op, g_output


def test_templates_are_registered() -> None:
    # the common ops of real nets and of the benchmark MLP take the shortcut
    for op_type in ("FC", "Relu", "Softmax", "MaxPool", "AveragePool", "Sigmoid", "Tanh"):
        assert op_type in TEMPLATED
    assert len(TEMPLATED) >= 70


@pytest.mark.parametrize("op_type", TEMPLATED)
def test_direct_build_equals_maker(op_type: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(f"template-{op_type}")
    cases = [_random_case(rng, op_type) for _ in range(60)]
    tmpl = REGISTRY[op_type].maker
    assert isinstance(tmpl, GradTemplate)
    built = [tmpl.build(op.type, g, op.input[:], op.output[:]) is not None for op, g in cases]
    # both paths are exercised: ops made directly, and cases left to the maker
    assert sum(built) >= 10 and not all(built)
    fast = [_answer(op, g) for op, g in cases]
    monkeypatch.setattr(registry, "GradTemplate", None)  # the maker path only
    slow = [_answer(op, g) for op, g in cases]
    for (op, g), f, s in zip(cases, fast, slow, strict=True):
        assert f == s, (op, g)


def test_build_declines_where_the_maker_raises() -> None:
    t = template("{type}Gradient", [I(0), O(0), GO(0)], [0])
    assert t.build("MaxPool", ["y_grad"], ["x"], ["y"]) is not None
    assert t.build("MaxPool", [None], ["x"], ["y"]) is None  # missing output gradient
    assert t.build("MaxPool", [GradientSlice("i", "v")], ["x"], ["y"]) is None  # sparse
    assert t.build("MaxPool", ["y_grad"], [], ["y"]) is None  # no input 0
    assert t.build("MaxPool", [], ["x"], []) is None  # no output 0


def test_build_names_like_the_maker() -> None:
    t = template("{type}Gradient", [I(0), I(1), GO(0)], [1, 2, 0])
    built = t.build("FC", ["y_grad"], ["x", "x", "b"], ["y"])
    assert built is not None
    op, g_input, reads, ins, outs = built
    assert op.type == "FCGradient"
    assert list(op.input) == ins == ["x", "x", "y_grad"]
    # a repeated input gets a name of its own at its later position (GradientMaker.GI)
    assert list(op.output) == outs == ["_x_grad_input_1", "b_grad", "x_grad"]
    assert g_input == ["x_grad", "_x_grad_input_1", "b_grad"]
    assert reads == [0, 1]
    # O(0) of an in-place op is a read of both values: position n_in + 0
    relu = template("ReluGradient", [O(0), GO(0)], [0])
    built = relu.build("Relu", ["y_grad"], ["y"], ["y"])
    assert built is not None and built[2] == [1]
    built = relu.build("Relu", ["z_grad"], ["x"], ["z"])
    assert built is not None and built[2] == []


def test_templates_are_checked_and_immutable() -> None:
    import pickle

    with pytest.raises(ValueError):
        GradTemplate("XGradient", [("Go", 0)], [0])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        GradTemplate("XGradient", [I(-1)], [0])
    with pytest.raises(ValueError):
        GradTemplate("XGradient", [I(0)], [True])
    t = template("XGradient", [GO(0), I(0)], [0])
    with pytest.raises(AttributeError):
        t.inputs = (GO(0),)  # type: ignore[misc]
    copy = pickle.loads(pickle.dumps(t))
    assert repr(copy) == repr(t) and copy.__module__ == t.__module__ == __name__
    assert copy.build("X", ["y_grad"], ["x"], ["y"])[3] == ["y_grad", "x"]  # type: ignore[index]


def test_build_shows_its_source_in_tracebacks() -> None:
    import traceback

    t = template("XGradient", [I(0)], [0])
    try:
        t.build("X", [], None, [])  # type: ignore[arg-type]
    except TypeError:
        text = traceback.format_exc()
    assert "<GradTemplate" in text and "n_in = len(input_names)" in text
