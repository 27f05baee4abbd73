"""Structure of Do/If/While gradients (spec §3.3-§3.7, §7.2; control-flow-cases §1-§6)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from api_schemas import caffe2_pb2
from core.api import gradient_for_net, gradient_for_op
from core.control.gradients import INNER_GRAD, INNER_GRAD_COPY, check_do, rename_control_output
from core.control.lowering import add_if_op, add_while_op
from core.errors import GradientError, InvalidNetError, LimitExceededError
from core.ir.env import GenEnv, GenLimits
from core.registry import find_arg, make_arg, make_op

NetDef = caffe2_pb2.NetDef


def net_of(name: str, *ops: caffe2_pb2.OperatorDef) -> NetDef:
    n = NetDef()
    n.name = name
    n.op.extend(ops)
    return n


def strings(op: caffe2_pb2.OperatorDef, name: str) -> list[str]:
    a = find_arg(op, name)
    assert a is not None, name
    return [s.decode() for s in a.strings]


def ints(op: caffe2_pb2.OperatorDef, name: str) -> list[int]:
    a = find_arg(op, name)
    assert a is not None, name
    return list(a.ints)


def subnet(op: caffe2_pb2.OperatorDef, name: str) -> NetDef:
    a = find_arg(op, name)
    assert a is not None and a.HasField("n"), name
    return a.n


def bindings(do: caffe2_pb2.OperatorDef) -> dict[str, str]:
    """inner name -> outer name of a Do op."""
    outer = list(do.input[:-1]) + list(do.output[:-1])
    pairs = zip(strings(do, "inner_blobs"), ints(do, "outer_blobs_idx"), strict=True)
    return {i: outer[k] for i, k in pairs}


def sig(ops: Sequence[caffe2_pb2.OperatorDef]) -> list[tuple[str, list[str], list[str]]]:
    return [(o.type, list(o.input), list(o.output)) for o in ops]


def do_op_case() -> caffe2_pb2.OperatorDef:
    """control-flow-cases §2: Do([outer_X, outer_Y, W] -> [outer_Z, W]) around Add."""
    inner = net_of("subnet", make_op("Add", ["X", "Y"], ["Z"]))
    return make_op(
        "Do",
        ["outer_X", "outer_Y", "W"],
        ["outer_Z", "W"],
        [
            make_arg("net", inner),
            make_arg("inner_blobs", ["X", "Y", "Z"]),
            make_arg("outer_blobs_idx", [0, 1, 2]),
        ],
    )


def test_do_gradient_acceptance() -> None:
    res = gradient_for_op(do_op_case(), ["outer_Z_grad", None])
    assert len(res.grad_ops) == 1
    g = res.grad_ops[0]
    assert g.type == "Do" and g.is_gradient_op
    assert "outer_Z_grad" in g.input
    assert g.input[-1] == "W" and g.output[-1] == "W"
    assert list(g.output[:-1]) == ["outer_X_grad", "outer_Y_grad"]
    assert res.g_input == ["outer_X_grad", "outer_Y_grad", None]
    b = bindings(g)
    assert b["Z" + INNER_GRAD] == "outer_Z_grad"
    assert b["X" + INNER_GRAD_COPY] == "outer_X_grad"
    assert b["Y" + INNER_GRAD_COPY] == "outer_Y_grad"
    assert b["X"] == "outer_X" and b["Y"] == "outer_Y"
    assert [a.name for a in g.arg] == ["net", "inner_blobs", "outer_blobs_idx", "saved_fwd_blobs"]
    inner = subnet(g, "net")
    assert inner.name == "subnet_grad"
    assert [o.type for o in inner.op] == ["AddGradient", "Copy", "Copy"]
    check_do(g, GenEnv())  # the bindings are consistent


def test_do_without_inner_gradient_keeps_length() -> None:
    inner = net_of("s", make_op("ConstantFill", [], ["Z"], [make_arg("shape", [1])]))
    do = make_op(
        "Do",
        ["a", "W"],
        ["Z", "W"],
        [make_arg("net", inner), make_arg("inner_blobs", ["a", "Z"]),
         make_arg("outer_blobs_idx", [0, 1])],
    )
    res = gradient_for_op(do, ["Z_grad", None])
    assert res.grad_ops == [] and res.g_input == [None, None]


def test_bad_do_bindings_are_4xx_errors() -> None:
    do = do_op_case()
    find_arg(do, "outer_blobs_idx").ints[:] = [0, 1]  # type: ignore[union-attr]
    with pytest.raises(InvalidNetError) as info:
        gradient_for_op(do, ["outer_Z_grad", None])
    assert "lengths" in info.value.problems[0].message
    assert info.value.problems[0].op_type == "Do"
    do = do_op_case()
    find_arg(do, "outer_blobs_idx").ints[:] = [0, 1, 7]  # type: ignore[union-attr]
    with pytest.raises(InvalidNetError, match="out of"):
        gradient_for_op(do, ["outer_Z_grad", None])
    do = do_op_case()
    do.output[-1] = "W2"
    with pytest.raises(InvalidNetError, match="workspace"):
        gradient_for_op(do, ["outer_Z_grad", None])
    do = do_op_case()
    find_arg(do, "outer_blobs_idx").ints[:] = [0, 0, 2]  # type: ignore[union-attr]
    with pytest.raises(InvalidNetError, match="Reusage"):
        gradient_for_op(do, ["outer_Z_grad", None])


def test_sparse_gradient_into_do_is_rejected() -> None:
    from core.types import GradientSlice

    with pytest.raises(GradientError) as info:
        gradient_for_op(do_op_case(), [GradientSlice("i", "v"), None])
    p = info.value.problems[0]
    assert p.code == "sparse_through_control_op" and "outer_Z" in p.blobs


def if_net(else_scale: float | None = 3.0) -> NetDef:
    net = NetDef()
    net.name = "if_net"
    then = net_of("then", make_op("Scale", ["x"], ["y"], [make_arg("scale", 2.0)]))
    els = (
        net_of("else", make_op("Scale", ["x"], ["y"], [make_arg("scale", else_scale)]))
        if else_scale is not None
        else None
    )
    add_if_op(net, "cond", ["cond", "x", "y"], then, els)
    return net


def test_if_gradient_worked_example() -> None:
    """Spec §3.7."""
    res = gradient_for_net(if_net(), {"y": "y_grad"})
    assert len(res.grad_ops) == 1
    g = res.grad_ops[0]
    wt, we = "if_net/workspace_if_then", "if_net/workspace_if_else"
    assert g.type == "If" and g.is_gradient_op
    assert g.input[0] == "cond"
    assert set(g.input) == {"cond", "y_grad", wt, we}
    assert set(g.output) == {"x_grad", wt, we}
    then_do = subnet(g, "then_net").op[0]
    assert sig([then_do]) == [("Do", ["y_grad", wt], ["x_grad", wt])]
    inner = subnet(then_do, "net").op
    assert sig(inner) == [
        ("Scale", ["y" + INNER_GRAD], ["x_grad"]),
        ("Copy", ["x_grad"], ["x" + INNER_GRAD_COPY]),
    ]
    assert find_arg(inner[0], "scale").f == 2.0  # type: ignore[union-attr]
    assert inner[0].is_gradient_op
    assert strings(then_do, "inner_blobs") == ["x" + INNER_GRAD_COPY, "y" + INNER_GRAD]
    assert ints(then_do, "outer_blobs_idx") == [1, 0]
    assert strings(then_do, "saved_fwd_blobs") == []
    else_inner = subnet(subnet(g, "else_net").op[0], "net").op
    assert find_arg(else_inner[0], "scale").f == 3.0  # type: ignore[union-attr]
    assert res.grad_map == {"x": "x_grad", "y": "y_grad"}


def test_if_without_else_gets_zero_fill() -> None:
    res = gradient_for_net(if_net(None), {"y": "y_grad"})
    g = res.grad_ops[0]
    els = subnet(g, "else_net")
    assert sig(els.op) == [("ConstantFill", ["x"], ["x_grad"])]
    assert find_arg(els.op[0], "value").f == 0.0  # type: ignore[union-attr]
    assert "x" in g.input  # §3.8 #8: the zero-fill's input is declared


def test_if_without_then_net_is_rejected() -> None:
    op = make_op("If", ["c", "x"], ["y"], [])
    with pytest.raises(InvalidNetError, match="then"):
        gradient_for_op(op, ["y_grad"])


def test_condition_blob_removed_by_name() -> None:
    """§3.8 #2: a one-letter input that occurs in the condition name is kept."""
    net = NetDef()
    net.name = "n"
    then = net_of("t", make_op("Mul", ["c", "x"], ["y"]))
    add_if_op(net, "cx", ["cx", "c", "x", "y"], then, None)
    g = gradient_for_net(net, {"y": "y_grad"}).grad_ops[0]
    assert list(g.input).count("cx") == 1
    assert "c" in g.input and "x" in g.input


def test_disambiguate_grad_if_op_output() -> None:
    """Spec §7.2 / control-flow-cases §6."""
    then = net_of("then_test_model", make_op("Copy", ["then_grad"], ["input_grad"]))
    els = net_of(
        "else_test_model",
        make_op("Copy", ["else_grad"], ["else_temp_grad"]),
        make_op("Copy", ["else_temp"], ["input_grad"]),
    )
    op = make_op(
        "If",
        ["cond", "then_grad", "else_grad"],
        ["input_grad", "else_temp_grad"],
        [make_arg("then_net", then), make_arg("else_net", els)],
    )
    rename_control_output(op, 0, "input_grad_autosplit_0")
    assert op.output[0] == "input_grad_autosplit_0"
    assert subnet(op, "else_net").op[1].output[0] == "input_grad_autosplit_0"
    assert subnet(op, "then_net").op[0].output[0] == "input_grad_autosplit_0"


def test_accumulation_renames_inside_gradient_if() -> None:
    net = if_net()
    net.op.append(make_op("Scale", ["x"], ["z"], [make_arg("scale", 5.0)]))
    res = gradient_for_net(net, {"y": "y_grad", "z": "z_grad"})
    types = [o.type for o in res.grad_ops]
    assert types[-1] == "Sum"
    summed = list(res.grad_ops[-1].input)
    g_if = next(o for o in res.grad_ops if o.type == "If")
    renamed = [n for n in g_if.output if "autosplit" in n] or [
        n for n in res.grad_ops[0].output if "autosplit" in n
    ]
    assert renamed and renamed[0] in summed
    for arg in ("then_net", "else_net"):
        do = subnet(g_if, arg).op[0]
        if renamed[0] in g_if.output:
            assert renamed[0] in do.output
            check_do(do, GenEnv())


def loop_net() -> NetDef:
    """brew.loop shape (control-flow-cases §5) with a differentiable body."""
    net = NetDef()
    net.name = "loop"
    body = net_of("body", make_op("Scale", ["output_blob"], ["output_blob"],
                                  [make_arg("scale", 2.0)]))
    cond = net_of(
        "cond",
        make_op("Add", ["counter", "ONE"], ["counter"]),
        make_op("LT", ["counter", "TEN"], ["tmp"]),
        make_op("Copy", ["tmp"], ["cond"]),
    )
    scope = ["cond", "ONE", "TEN", "counter", "output_blob"]
    add_while_op(net, "cond", scope, body, cond)
    return net


def test_while_gradient_in_place_loop_carried_blob() -> None:
    """§3.8 #7: the body reads and writes output_blob; bindings must stay one-to-one."""
    res = gradient_for_net(loop_net(), {"output_blob": "output_blob_grad"})
    types = [o.type for o in res.grad_ops]
    assert types[-1] == "While" and "HasScope" in types
    w = res.grad_ops[-1]
    assert w.is_gradient_op
    cond_net = subnet(w, "cond_net")
    assert cond_net.name == "gradient_loop_cond_net"
    assert cond_net.op[0].type == "HasScope"
    assert w.input[0] == "gradient_loop_cond_net/cond"
    body = subnet(w, "loop_net").op[0]
    check_do(body, GenEnv())
    # Each iteration reads its output gradient from a private carry blob and writes the
    # input gradient to a fresh blob: the incoming gradient blob itself is never written
    # (it may be shared, issue 7 fuzzer F1/F5), and the feedback copy closes the loop.
    carry = "_output_blob_grad_while_carry"
    assert carry in body.input and "output_blob_grad" not in body.output
    (out,) = [o for o in body.output if o != body.input[-1]]
    assert [(c.input[0], c.output[0]) for c in cond_net.op[1:]] == [(out, carry)]
    assert res.grad_map["output_blob"] == out
    assert any(d.code == "while_keeps_workspaces" for d in res.diagnostics)


def test_while_body_must_be_single_do() -> None:
    body = net_of("b", make_op("Mul", ["x", "x"], ["x"]))
    op = make_op("While", ["c", "x"], ["x"], [make_arg("loop_net", body)])
    with pytest.raises(InvalidNetError) as info:
        gradient_for_op(op, ["x_grad"])
    assert "single Do" in info.value.problems[0].message
    assert "add_while_op" in info.value.problems[0].message


def test_while_body_with_reuse_workspace_is_rejected() -> None:
    net = loop_net()
    w = net.op[-1]
    do = subnet(w, "loop_net").op[0]
    do.arg.append(make_arg("reuse_workspace", 1))
    with pytest.raises(InvalidNetError, match="reuse_workspace"):
        gradient_for_net(net, {"output_blob": "output_blob_grad"})


def nested_do(depth: int) -> caffe2_pb2.OperatorDef:
    inner: caffe2_pb2.OperatorDef = make_op("Scale", ["a"], ["b"], [make_arg("scale", 2.0)])
    for level in range(depth):
        ws = f"W{level}"
        inner = make_op(
            "Do",
            ["a", ws],
            ["b", ws],
            [make_arg("net", net_of(f"n{level}", inner)), make_arg("inner_blobs", ["a", "b"]),
             make_arg("outer_blobs_idx", [0, 1])],
        )
    return inner


def test_nesting_up_to_the_limit_and_beyond() -> None:
    res = gradient_for_op(nested_do(64), ["b_grad", None], GenLimits(max_depth=64))
    assert res.grad_ops[0].type == "Do" and res.g_input[0] == "a_grad"
    with pytest.raises(LimitExceededError) as info:
        gradient_for_op(nested_do(65), ["b_grad", None], GenLimits(max_depth=64))
    path = info.value.problems[0].path or ""
    assert path.count("/net") == 65  # the sub-net that would exceed the limit


def test_errors_inside_sub_nets_carry_the_path() -> None:
    inner = net_of("s", make_op("GenerateProposals", ["X"], ["Z"]))
    do = make_op(
        "Do",
        ["X", "W"],
        ["Z", "W"],
        [make_arg("net", inner), make_arg("inner_blobs", ["X", "Z"]),
         make_arg("outer_blobs_idx", [0, 1])],
    )
    with pytest.raises(Exception) as info:
        gradient_for_op(do, ["Z_grad", None])
    p = info.value.problems[0]  # type: ignore[attr-defined]
    assert p.path == "op[0]:Do/net/op[0]:GenerateProposals"


def test_in_place_op_whose_gradient_reads_its_input_is_rejected_in_a_loop() -> None:
    """An in-place Mul in a loop body: MulGradient needs x before the write (upstream let
    the gradient read the overwritten value silently)."""
    from core.errors import VersionMismatchError

    net = NetDef()
    net.name = "loop"
    body = net_of("body", make_op("Mul", ["x", "w"], ["x"]))
    cond = net_of("cond", make_op("LT", ["counter", "TEN"], ["cond"]))
    add_while_op(net, "cond", ["cond", "x", "w", "counter", "TEN"], body, cond)
    with pytest.raises(VersionMismatchError) as info:
        gradient_for_net(net, {"x": "x_grad"})
    p = info.value.problems[0]
    assert p.path is not None and p.path.endswith("/net/op[0]:Mul")
    assert 'needs input "x" at version 0' in p.message


def test_branches_that_name_a_gradient_differently_are_a_4xx_error() -> None:
    """§3.8 #1: a real error (upstream raised a str, a TypeError in Python 3)."""
    then = net_of("t", make_op("Copy", ["x"], ["y"]))
    els = net_of("e", make_op("Sum", ["x"], ["y"]))  # pass-through: x's gradient is y's
    op = make_op(
        "If", ["c", "x"], ["y"], [make_arg("then_net", then), make_arg("else_net", els)]
    )
    with pytest.raises(GradientError) as info:
        gradient_for_op(op, ["y_grad"])
    p = info.value.problems[0]
    assert p.code == "if_branch_gradient_conflict" and p.op_type == "If"
    assert "x" in p.blobs
