"""Numbers of control-flow gradients: control-flow-cases §9 and finite differences (issue 3).

Nets are lowered the way Caffe2's add_if_op / add_while_op do it (core.control.lowering).
Loop bodies use ops whose gradients read outputs (Tanh, Scale) or nothing (Sum), because a
loop-carried blob's value before an iteration is not kept by Caffe2's runtime (§4.4).
"""

from __future__ import annotations

import numpy as np
import pytest

from api_schemas import caffe2_pb2
from core.api import gradient_for_net
from core.control.lowering import add_do_op, add_if_op, add_while_op
from core.executor.executor import execute
from core.registry import make_arg, make_op
from core.verify import InputSpec, RandomSpec, VerifyOptions, verify_net
from tests.conformance.cases import if_tutorial_net

NetDef = caffe2_pb2.NetDef
CONSTS = {"ONE": 1.0, "ONEHALF": 1.5, "TWOHALF": 2.5}


def net_of(name: str, *ops: caffe2_pb2.OperatorDef) -> NetDef:
    n = NetDef()
    n.name = name
    n.op.extend(ops)
    return n


@pytest.mark.parametrize(("x", "expected"), [(0.5, 8.0), (-0.5, 48.0)])
def test_tutorial_if_gradient_values(x: float, expected: float) -> None:
    """control-flow-cases §9: z = y**2 if x > 0 else y**3 with y = 4."""
    net = if_tutorial_net()
    res = gradient_for_net(net, ["z"])
    full = NetDef()
    full.CopyFrom(net)
    full.op.extend(res.grad_ops)
    out = execute(full, {"x": np.array(x, dtype=np.float32)})
    assert res.grad_map["y"] == "y_grad"
    assert out["y_grad"].reshape(-1).tolist() == pytest.approx([expected])
    assert out["z"].reshape(-1).tolist() == pytest.approx([16.0 if x > 0 else 64.0])


def branch_update(name: str, kind: str) -> NetDef:
    """x <- tanh(x + w) ("then") or x <- 3·x + w ("else"), in place."""
    if kind == "then":
        return net_of(name, make_op("Sum", ["x", "w"], ["x"]), make_op("Tanh", ["x"], ["x"]))
    return net_of(
        name,
        make_op("Scale", ["x"], ["x"], [make_arg("scale", 3.0)]),
        make_op("Sum", ["x", "w"], ["x"]),
    )


def counting_loop(body: NetDef, limit: str, scope: list[str]) -> NetDef:
    """counter <- 0; while counter < limit: counter += 1; body."""
    net = NetDef()
    net.name = "loop"
    loop_body = net_of("loop_body", make_op("Sum", ["counter", "ONE"], ["counter"]))
    loop_body.op.extend(body.op)
    cond = net_of("cond", make_op("LT", ["counter", limit], ["cond"]))
    add_while_op(net, "cond", [*scope, "counter", "ONE", limit], loop_body, cond)
    return net


def while_with_if() -> NetDef:
    """A While whose body holds an If choosing by the iteration count (then from the 2nd)."""
    body = net_of("body", make_op("GT", ["counter", "ONEHALF"], ["c2"]))
    add_if_op(body, "c2", ["c2", "x", "w"], branch_update("then", "then"),
              branch_update("else", "else"))
    return counting_loop(body, "THREE", ["x", "w", "ONEHALF"])


def if_in_do_in_while() -> NetDef:
    """A While whose body runs a Do whose net holds an If."""
    inner = net_of("inner", make_op("GT", ["counter", "TWOHALF"], ["c2"]))
    add_if_op(inner, "c2", ["c2", "x", "w"], branch_update("then", "then"),
              branch_update("else", "else"))
    body = NetDef()
    body.name = "body"
    add_do_op(body, ["x", "w", "counter", "TWOHALF"], inner)
    return counting_loop(body, "THREE", ["x", "w", "TWOHALF"])


def zero_trip_while() -> NetDef:
    """A While whose condition is false at once: x passes through unchanged."""
    return counting_loop(branch_update("b", "then"), "ZERO", ["x", "w"])


def feeds(extra: dict[str, float]) -> list[InputSpec]:
    specs = [
        InputSpec("x", random=RandomSpec([4], distribution="normal", seed=1)),
        InputSpec("w", random=RandomSpec([4], distribution="normal", seed=2)),
        InputSpec.from_array("counter", np.array(0.0)),
    ]
    consts = {**CONSTS, **extra}
    specs += [InputSpec.from_array(k, np.array(v)) for k, v in consts.items()]
    return specs


@pytest.mark.parametrize(
    ("build", "extra"),
    [
        (while_with_if, {"THREE": 3.0}),
        (if_in_do_in_while, {"THREE": 3.0}),
        (zero_trip_while, {"ZERO": 0.0}),
    ],
    ids=["while_with_if", "if_in_do_in_while", "zero_trip_while"],
)
def test_nested_control_flow_matches_finite_differences(build, extra) -> None:  # type: ignore[no-untyped-def]
    net = build()
    opts = VerifyOptions(inputs=feeds(extra), mode="full", check=["x", "w"], atol=1e-6)
    result = verify_net(net, {"x": "x_grad"}, opts)
    by_blob = {b.blob: b for b in result.report.blobs}
    assert by_blob["x"].passed, by_blob["x"]
    assert by_blob["w"].passed, by_blob["w"]
    assert result.report.passed


def test_zero_trip_while_gradient_is_identity_and_zero() -> None:
    net = zero_trip_while()
    res = gradient_for_net(net, {"x": "x_grad"})
    full = NetDef()
    full.CopyFrom(net)
    full.op.extend(res.grad_ops)
    seed = np.array([1.0, -2.0, 3.0, 0.5])
    f = {"x": np.zeros(4), "w": np.ones(4), "counter": np.array(0.0), "x_grad": seed,
         "ONE": np.array(1.0), "ZERO": np.array(0.0)}
    out = execute(full, f)
    np.testing.assert_array_equal(out[str(res.grad_map["x"])], seed)
    np.testing.assert_array_equal(out[str(res.grad_map["w"])], np.zeros(4))


def test_accumulation_renames_the_while_gradient_output() -> None:
    """x feeds both a Scale and the loop: the While's x gradient is renamed and summed."""
    body = branch_update("b", "then")
    net = counting_loop(body, "THREE", ["x", "w", "s"])
    pre = make_op("Scale", ["x"], ["s"], [make_arg("scale", 5.0)])
    net.op.insert(0, pre)
    opts = VerifyOptions(inputs=feeds({"THREE": 3.0}), mode="full", check=["x", "w"], atol=1e-6)
    result = verify_net(net, {"x": "x_grad", "s": "s_grad"}, opts)
    assert any(o.type == "Sum" and "autosplit" in "".join(o.input) for o in result.grad_ops)
    assert result.report.passed, result.report
