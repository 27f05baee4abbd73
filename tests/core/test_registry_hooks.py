"""The control ops plug into the engine through the registry (issue 10, item 5).

``core.control`` registers the executor-native runtime of ``Do``/``If``/``While``/
``CreateScope``/``HasScope``, the renamers of gradient control ops and nothing else; the
backward pass registers itself as the sub-net pass. The engine finds all of them in
:mod:`core.registry` and never imports ``core.control``.
"""

from __future__ import annotations

from core.control import renaming, runtime
from core.ir import backward
from core.ir.renaming import rename_input, rename_output
from core.ops import load_all
from core.registry import (
    REGISTRY,
    get_kernel,
    get_native,
    make_op,
    subnet_pass,
)


def test_control_runtime_is_registered_as_native_ops() -> None:
    load_all()
    for op_type, fn in runtime.NATIVE_OPS.items():
        assert get_native(op_type) is fn
        assert get_kernel(op_type) is None  # native ops have no kernel
    assert get_native("Relu") is None


def test_gradient_control_ops_have_renamers_and_plain_ops_none() -> None:
    load_all()
    for op_type in ("Do", "If", "While"):
        e = REGISTRY[op_type]
        assert e.rename_output is renaming.rename_control_output
        assert e.rename_input is renaming.rename_control_input
    assert REGISTRY["Relu"].rename_output is None


def test_the_backward_pass_is_the_registered_subnet_pass() -> None:
    assert subnet_pass() is backward.backward


def test_renaming_a_plain_gradient_op_only_touches_its_field() -> None:
    load_all()
    op = make_op("ReluGradient", ["y", "y_grad"], ["x_grad"])
    rename_output(op, 0, "_x_grad_autosplit_0")
    rename_input(op, 1, "other")
    assert list(op.input) == ["y", "other"]
    assert list(op.output) == ["_x_grad_autosplit_0"]
