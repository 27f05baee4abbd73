"""Stop 34, adversarial review: four ways a 200 carried a wrong gradient, now refused or
right, each checked against finite differences where it answers 200.

1. A ``While`` body ``Do`` without ``copy_external_blobs`` whose gradient reads a value
   the loop overwrites (every iteration read the last one).
2. ``LayerNorm`` with gamma and beta but no ``elementwise_affine``: the kernel applied them,
   the gradient did not (Caffe2 ignores them; now both do, and the answer says so).
3. Arguments in the wrong field (``axis`` as ``f = 1``): kernels read one value, makers
   the default. Now both refuse it, as Caffe2's ``GetSingleArgument`` does.
4. Sub-net blobs named with the gradient Do's reserved suffixes.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from api_schemas import caffe2_pb2
from core.errors import NetgradError
from core.registry import make_arg, make_op
from core.verify import InputSpec, TensorSpec
from tests.api.helpers import assert_problem
from tests.fuzz.property import check_outcome

NET = "/v1/gradients/net"


def _t(shape: list[int], data: list[float]) -> TensorSpec:
    return TensorSpec(shape, "float64", data)


def _loop(body_ops: list[caffe2_pb2.OperatorDef], copy: bool) -> caffe2_pb2.NetDef:
    """A While running ``body_ops`` (on ``y``, reading ``w``) twice, its body Do with or
    without ``copy_external_blobs``, the counter stepped in the cond_net."""
    body = caffe2_pb2.NetDef(name="body", op=body_ops)
    do_args = [make_arg("net", body), make_arg("inner_blobs", ["y", "w"]),
               make_arg("outer_blobs_idx", [0, 1])]
    if copy:
        do_args.append(make_arg("copy_external_blobs", 1))
    body_do = make_op("Do", ["y", "w", "ws_body"], ["y", "ws_body"], do_args)
    cond = caffe2_pb2.NetDef(name="cond", op=[make_op("Add", ["i", "ONE"], ["i"]),
                                               make_op("LE", ["i", "LIMIT"], ["c"])])
    cond_do = make_op("Do", ["i", "ONE", "LIMIT", "ws_cond"], ["i", "c", "ws_cond"], [
        make_arg("net", cond), make_arg("inner_blobs", ["i", "ONE", "LIMIT", "c"]),
        make_arg("outer_blobs_idx", [0, 1, 2, 4])])
    loop = make_op("While", ["c", "y", "w", "ws_body", "i", "ONE", "LIMIT", "ws_cond"],
                   ["y", "ws_body", "i", "c", "ws_cond"],
                   [make_arg("loop_net", caffe2_pb2.NetDef(name="body_do", op=[body_do])),
                    make_arg("cond_net", caffe2_pb2.NetDef(name="cond_do", op=[cond_do]))])
    return caffe2_pb2.NetDef(name="loop", op=[make_op("CreateScope", [], ["ws_body"]),
                                              make_op("CreateScope", [], ["ws_cond"]), loop])


_LOOP_INPUTS = [InputSpec("y", tensor=_t([2], [0.5, -0.3])),
                InputSpec("w", tensor=_t([2], [0.7, 1.2])),
                InputSpec("i", tensor=_t([1], [0.0])), InputSpec("ONE", tensor=_t([1], [1.0])),
                InputSpec("LIMIT", tensor=_t([1], [2.5])),
                InputSpec("c", tensor=TensorSpec([], "bool", [False]))]
_CONSTANTS = ["i", "ONE", "LIMIT", "c"]


def _json(net: caffe2_pb2.NetDef) -> Any:
    from core.proto import codec

    return codec.to_json_obj(net)


#: ``y = Sigmoid(0.8 y w)``: Sigmoid's gradient reads its output, the carried ``y`` (a
#: value the next iteration overwrites).
_READS_CARRIED = [make_op("Scale", ["y"], ["t"], [make_arg("scale", 0.8)]),
                  make_op("Mul", ["t", "w"], ["u"]), make_op("Sigmoid", ["u"], ["y"])]


def test_a_loop_body_without_copies_that_reads_a_carried_value_is_refused(
        client: TestClient) -> None:
    net = _loop(_READS_CARRIED, False)
    problem = assert_problem(client.post(NET, json={"net": _json(net), "ys": ["y"]}), 422)
    (err,) = problem["errors"]
    assert err["code"] == "unsaved_loop_values" and err["path"] == "op[2]:While", err
    assert err["blobs"] == ["y"] and "copy_external_blobs" in err["message"], err


def test_the_same_loop_with_copies_is_right() -> None:
    net = _loop(_READS_CARRIED, True)
    assert check_outcome(net, ["y"], _LOOP_INPUTS, constants=_CONSTANTS) == "200"


def test_a_loop_body_without_copies_that_reads_no_carried_value_is_right() -> None:
    """``y = 0.5 * tanh(y) * w``: the body's gradient reads its own locals and ``w``, which
    the loop never writes, so the missing copies change nothing (not refused)."""
    net = _loop([make_op("Tanh", ["y"], ["t"]), make_op("Mul", ["t", "w"], ["u"]),
                 make_op("Scale", ["u"], ["y"], [make_arg("scale", 0.5)])], False)
    assert check_outcome(net, ["y"], _LOOP_INPUTS, constants=_CONSTANTS) == "200"


# -- 2. LayerNorm ----------------------------------------------------------------------------

_LN_INPUTS = [InputSpec("X", tensor=_t([2, 3], [0.126, -0.132, 0.64, 0.105, -0.536, 0.362])),
              InputSpec("gamma", tensor=_t([3], [1.304, 0.947, -0.704])),
              InputSpec("beta", tensor=_t([3], [-1.265, -0.623, 0.041]))]


@pytest.mark.parametrize("affine", [None, 0, 1])
def test_layer_norm_applies_gamma_and_beta_only_when_affine(affine: int | None) -> None:
    args = [make_arg("axis", 1)] + ([] if affine is None else
                                    [make_arg("elementwise_affine", affine)])
    net = caffe2_pb2.NetDef(op=[make_op("LayerNorm", ["X", "gamma", "beta"],
                                        ["Y", "mean", "std"], args)])
    assert check_outcome(net, ["Y"], _LN_INPUTS) == "200"


def test_layer_norm_says_gamma_and_beta_are_ignored(client: TestClient) -> None:
    op = {"type": "LayerNorm", "input": ["X", "gamma", "beta"], "output": ["Y", "mean", "std"]}
    r = client.post(NET, json={"net": {"op": [op]}, "ys": ["Y"]})
    assert r.status_code == 200, r.text
    (d,) = [d for d in r.json()["diagnostics"] if d["code"] == "input_gradient_off"]
    assert d["severity"] == "warning" and d["blobs"] == ["gamma", "beta"], d
    assert "elementwise_affine: 1" in d["message"] and d["path"] == "op[0]:LayerNorm", d
    assert set(r.json()["grad_map"]) == {"X", "Y"}


# -- 3. arguments in the wrong field ----------------------------------------------------------

_WRONG_FIELDS = [
    ("Gather", ["D", "I"], ["G"], {"name": "axis", "f": 1.0}),
    ("MatMul", ["A", "B"], ["C"], {"name": "trans_b", "f": 1.0}),
    ("BatchMatMul", ["A", "B"], ["C"], {"name": "trans_a", "f": 1.0}),
    ("LayerNorm", ["X", "g", "b"], ["Y", "m", "s"], {"name": "elementwise_affine", "f": 1.0}),
    ("AffineChannel", ["X", "s", "b"], ["Y"], {"name": "is_learnable", "s": "1"}),
    ("WeightedSum", ["X", "w"], ["Y"], {"name": "grad_on_w", "ints": [1]}),
    ("SparseLengthsWeightedSum", ["D", "W", "I", "L"], ["Y"],
     {"name": "grad_on_weights", "f": 1.0}),
    ("LengthsWeightedSum", ["D", "W", "L"], ["Y"], {"name": "grad_on_weights", "s": "1"}),
]


@pytest.mark.parametrize(("op_type", "ins", "outs", "arg"), _WRONG_FIELDS,
                         ids=[c[0] for c in _WRONG_FIELDS])
def test_an_argument_in_the_wrong_field_is_refused_not_read_as_the_default(
        client: TestClient, op_type: str, ins: list[str], outs: list[str],
        arg: dict[str, Any]) -> None:
    ops = [{"type": "Relu", "input": ["x0"], "output": ["x1"]},
           {"type": op_type, "input": ins, "output": outs, "arg": [arg]}]
    problem = assert_problem(client.post(NET, json={"net": {"op": ops}, "ys": [outs[0]]}), 422)
    (err,) = problem["errors"]
    assert err["code"] == "invalid_argument", err
    assert (err["op_index"], err["op_type"], err["path"]) == (1, op_type, f"op[1]:{op_type}")
    assert f"argument '{arg['name']}' must be an integer (field i)" in err["message"], err


def test_a_kernel_refuses_an_integer_argument_given_as_a_float() -> None:
    from core.errors import ExecutionError
    from core.ops._args import get_int

    op = make_op("Gather", ["D", "I"], ["G"])
    op.arg.add(name="axis", f=1.0)
    with pytest.raises(ExecutionError, match="must be an integer \\(field i\\), not f = 1"):
        get_int(op, "axis", 0)


@pytest.mark.parametrize("flag", ["copy_external_blobs", "reuse_workspace"])
def test_a_control_flag_in_the_wrong_field_is_refused(client: TestClient, flag: str) -> None:
    do = {"type": "Do", "input": ["x", "W"], "output": ["y", "W"], "arg": [
        {"name": "net", "n": {"op": [{"type": "Relu", "input": ["a"], "output": ["b"]}]}},
        {"name": "inner_blobs", "strings": ["a", "b"]}, {"name": "outer_blobs_idx", "ints": [0, 1]},
        {"name": flag, "f": 1.0}]}
    net = {"op": [{"type": "CreateScope", "output": ["W"]}, do]}
    err = assert_problem(client.post(NET, json={"net": net, "ys": ["y"]}), 422)["errors"][0]
    assert err["code"] == "invalid_argument" and err["path"] == "op[1]:Do", err


@pytest.mark.parametrize(("op_type", "ins", "arg", "blobs"), [
    ("WeightedSum", ["X0", "w0", "X1", "w1"], None, ["w0", "w1"]),
    ("SparseLengthsWeightedSum", ["D", "W", "I", "L"], None, ["W"]),
    ("AffineChannel", ["X", "s", "b"], None, ["s", "b"]),
    ("WeightedSum", ["X0", "w0"], 1, None),
    ("AffineChannel", ["X", "s", "b"], 1, None),
])
def test_an_input_whose_gradient_a_flag_turns_off_is_named(
        client: TestClient, op_type: str, ins: list[str], arg: int | None,
        blobs: list[str] | None) -> None:
    flag = {"WeightedSum": "grad_on_w", "AffineChannel": "is_learnable"}.get(
        op_type, "grad_on_weights")
    op: dict[str, Any] = {"type": op_type, "input": ins, "output": ["Y"]}
    if arg is not None:
        op["arg"] = [{"name": flag, "i": arg}]
    r = client.post(NET, json={"net": {"op": [op]}, "ys": ["Y"]})
    assert r.status_code == 200, r.text
    off = [d for d in r.json()["diagnostics"] if d["code"] == "input_gradient_off"]
    if blobs is None:
        assert off == []
    else:
        (d,) = off
        assert d["severity"] == "info" and d["blobs"] == blobs and flag in d["message"], d


# -- 4. reserved names in sub-nets ------------------------------------------------------------

@pytest.mark.parametrize("local", ["b/_DO_OPERATOR_INNER_GRAD_", "b/_DO_OPERATOR_INNER_GRAD_COPY_"])
def test_a_sub_net_blob_with_a_reserved_suffix_is_refused(local: str) -> None:
    sub = caffe2_pb2.NetDef(name="sub", op=[make_op("Tanh", ["a"], [local]),
                                            make_op("Mul", [local, "a"], ["b"])])
    do = make_op("Do", ["x", "W"], ["h", "W"], [
        make_arg("net", sub), make_arg("inner_blobs", ["a", "b"]),
        make_arg("outer_blobs_idx", [0, 1])])
    net = caffe2_pb2.NetDef(op=[make_op("CreateScope", [], ["W"]), do])
    from core.api import gradient_for_net

    with pytest.raises(NetgradError) as info:
        gradient_for_net(net, ["h"])
    (p,) = info.value.problems
    assert (p.code, p.path, p.blobs) == ("gradient_name_collision", "op[1]:Do", (local,)), p
    renamed = caffe2_pb2.NetDef()
    renamed.CopyFrom(net)
    for o in renamed.op[1].arg[0].n.op:
        o.input[:] = ["t" if n == local else n for n in o.input]
        o.output[:] = ["t" if n == local else n for n in o.output]
    inputs = [InputSpec("x", tensor=_t([2], [0.5, -1.0]))]
    assert check_outcome(renamed, ["h"], inputs) == "200"
