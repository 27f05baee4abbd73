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


# -- second review ---------------------------------------------------------------------------

def _net(obj: dict[str, Any]) -> caffe2_pb2.NetDef:
    from core.proto import codec

    return codec.from_json_obj(obj, caffe2_pb2.NetDef)


def test_a_reserved_name_inside_an_if_of_a_do_sub_net_is_refused() -> None:
    then = {"name": "then", "op": [
        {"type": "Tanh", "input": ["a"], "output": ["b/_DO_OPERATOR_INNER_GRAD_"]},
        {"type": "Mul", "input": ["b/_DO_OPERATOR_INNER_GRAD_", "a"], "output": ["b"]}]}
    sub = {"name": "sub", "op": [
        {"type": "ConstantFill", "output": ["cond"], "arg": [
            {"name": "shape", "ints": [1]}, {"name": "value", "f": 1.0},
            {"name": "dtype", "i": 9}]},
        {"type": "If", "input": ["cond", "a"], "output": ["b"],
         "arg": [{"name": "then_net", "n": then}]}]}
    net = _net({"op": [{"type": "CreateScope", "output": ["W"]},
                       {"type": "Do", "input": ["x", "W"], "output": ["h", "W"], "arg": [
                           {"name": "net", "n": sub},
                           {"name": "inner_blobs", "strings": ["a", "b"]},
                           {"name": "outer_blobs_idx", "ints": [0, 1]}]}]})
    from core.api import gradient_for_net

    with pytest.raises(NetgradError) as info:
        gradient_for_net(net, ["h"])
    assert [p.code for p in info.value.problems] == ["gradient_name_collision"]


def _do_writing_its_input() -> caffe2_pb2.NetDef:
    """``Do`` whose sub-net scales ``a``, bound only to the input ``x``: the write lands in
    ``x`` (the binding forwards to it), which ``Mul(x, h)`` then reads."""
    return _net({"op": [
        {"type": "CreateScope", "output": ["W"]},
        {"type": "Do", "input": ["x", "W"], "output": ["h", "W"], "arg": [
            {"name": "net", "n": {"name": "sub", "op": [
                {"type": "Scale", "input": ["a"], "output": ["a"],
                 "arg": [{"name": "scale", "f": 3.0}]},
                {"type": "Tanh", "input": ["a"], "output": ["b"]}]}},
            {"name": "inner_blobs", "strings": ["a", "b"]},
            {"name": "outer_blobs_idx", "ints": [0, 1]}]},
        {"type": "Mul", "input": ["x", "h"], "output": ["z"]}]})


def test_a_do_writing_through_an_input_only_binding_is_refused_where_it_matters() -> None:
    inputs = [InputSpec("x", tensor=_t([2], [0.5, -0.2]))]
    net = _do_writing_its_input()
    from core.api import gradient_for_net

    with pytest.raises(NetgradError) as info:
        gradient_for_net(net, ["z"])
    (p,) = info.value.problems
    assert (p.code, p.path, p.blobs) == ("undeclared_branch_write", "op[1]:Do", ("x",)), p
    assert check_outcome(net, ["z"], inputs) == "4xx"
    del net.op[2]  # (nothing reads x after the Do: the gradient of h is right)
    assert check_outcome(net, ["h"], inputs) == "200"


def _loop_with_cond_step(copy: bool, declared: bool, shape: list[int]) -> caffe2_pb2.NetDef:
    """``z += y * w`` in the body; the cond_net steps ``y += D`` (``D`` of ``shape``, which
    may broadcast), through a binding declared as the cond Do's output or not."""
    body = {"name": "body", "op": [{"type": "Mul", "input": ["y", "w"], "output": ["t"]},
                                   {"type": "Sum", "input": ["z", "t"], "output": ["z"]}]}
    body_args = [{"name": "net", "n": body}, {"name": "inner_blobs", "strings": ["y", "w", "z"]},
                 {"name": "outer_blobs_idx", "ints": [0, 1, 3]}]
    if copy:
        body_args.append({"name": "copy_external_blobs", "i": 1})
    cond = {"name": "cond", "op": [{"type": "Add", "input": ["i", "ONE"], "output": ["i"]},
                                   {"type": "Add", "input": ["yy", "D"], "output": ["yy"]},
                                   {"type": "LE", "input": ["i", "LIMIT"], "output": ["c"]}]}
    outs = ["i", "c", "y", "ws_cond"] if declared else ["i", "c", "ws_cond"]
    idx = [0, 1, 2, 3, 4, 7] if declared else [0, 1, 2, 3, 4, 6]
    inner = ["i", "ONE", "LIMIT", "yy", "D", "c"]
    if declared:
        inner, idx = ["i", "ONE", "LIMIT", "D", "c", "yy"], [0, 1, 2, 4, 6, 7]
    cond_do = {"type": "Do", "input": ["i", "ONE", "LIMIT", "y", "D", "ws_cond"], "output": outs,
               "arg": [{"name": "net", "n": cond}, {"name": "inner_blobs", "strings": inner},
                       {"name": "outer_blobs_idx", "ints": idx}]}
    loop_outs = ["z", "ws_body", "i", "c", *(["y"] if declared else []), "ws_cond"]
    return _net({"op": [
        {"type": "CreateScope", "output": ["ws_body"]},
        {"type": "CreateScope", "output": ["ws_cond"]},
        {"type": "While",
         "input": ["c", "y", "w", "z", "ws_body", "i", "ONE", "LIMIT", "D", "ws_cond"],
         "output": loop_outs, "arg": [
             {"name": "loop_net", "n": {"name": "body_do", "op": [
                 {"type": "Do", "input": ["y", "w", "z", "ws_body"], "output": ["z", "ws_body"],
                  "arg": body_args}]}},
             {"name": "cond_net", "n": {"name": "cond_do", "op": [cond_do]}}]}]})


def _step_inputs(d: list[int]) -> list[InputSpec]:
    return [InputSpec("y", tensor=_t([2], [0.5, -0.3])), InputSpec("w", tensor=_t([2], [0.7, 1.2])),
            InputSpec("z", tensor=_t([2], [0.1, 0.2])), InputSpec("D", tensor=_t(d, [0.25] * d[0])),
            InputSpec("i", tensor=_t([1], [0.0])), InputSpec("ONE", tensor=_t([1], [1.0])),
            InputSpec("LIMIT", tensor=_t([1], [2.5])),
            InputSpec("c", tensor=TensorSpec([], "bool", [False]))]


@pytest.mark.parametrize("declared", [True, False])
@pytest.mark.parametrize("d", [[1], [2]])
def test_a_cond_net_step_is_right_with_copies_and_refused_without(declared: bool,
                                                                 d: list[int]) -> None:
    """The step's operand ``D`` broadcast over ``y`` gets a gradient of its own shape (the
    gradient net could not run before), and a step through an input-only binding counts as
    a write of the loop (a wrong gradient for ``w`` before)."""
    constants = ["i", "ONE", "LIMIT", "c"]
    outcome = check_outcome(_loop_with_cond_step(True, declared, d), ["z"], _step_inputs(d),
                            constants=constants)
    assert outcome == ("200" if declared else "4xx")
    from core.api import gradient_for_net

    for copy in (False,) if declared else (True, False):
        with pytest.raises(NetgradError) as info:
            gradient_for_net(_loop_with_cond_step(copy, declared, d), ["z"])
        code = "unsaved_loop_values" if declared else "undeclared_branch_write"
        assert [p.code for p in info.value.problems] == [code], info.value.problems


def test_a_while_listing_an_input_twice_is_refused(client: TestClient) -> None:
    net = _loop(_READS_CARRIED, True)
    loop = net.op[2]
    loop.input.insert(3, "w")  # (w twice: its gradient slots would share one name)
    problem = assert_problem(client.post(NET, json={"net": _json(net), "ys": ["y"]}), 422)
    (err,) = problem["errors"]
    assert (err["code"], err["path"], err["blobs"]) == ("duplicate_input", "op[2]:While", ["w"])
