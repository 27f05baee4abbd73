"""Regressions from stop 21's adversarial review: nets that had a wrong gradient answered 200.

* A forward blob with a name the gradient ops write (``x_grad = Tanh(x)``; an edge detector's
  ``image_grad``) was overwritten by the gradient of ``x`` before ``TanhGradient`` read it.
* A caller-given seed named like an internal name (``_a_grad_autosplit_0``) was overwritten
  before it was read.
* A While whose ``cond_net`` computes a value the body differentiates lost that part.
* An in-place Add whose broadcast grows the input it overwrites ran (Caffe2 cannot).
* LeakyRelu with ``alpha < 0`` (its gradient op tests Y's sign) and in-place Pow with an even
  exponent (the sign of X is gone) or an odd one (NaN) gave wrong numbers.
"""

from __future__ import annotations

import numpy as np
import pytest

from api_schemas import caffe2_pb2
from core.api import gradient_for_net
from core.control.lowering import add_while_op
from core.errors import (
    ExecutionError,
    GradientError,
    InvalidNetError,
    InvalidRequestError,
    NetgradError,
)
from core.executor.executor import execute
from core.registry import make_arg, make_op


def _net(*ops: caffe2_pb2.OperatorDef) -> caffe2_pb2.NetDef:
    net = caffe2_pb2.NetDef()
    net.op.extend(ops)
    return net


def test_a_forward_blob_named_like_a_gradient_is_refused_with_its_op() -> None:
    net = _net(make_op("Tanh", ["x"], ["x_grad"]), make_op("Relu", ["x_grad"], ["y"]),
               make_op("Mul", ["x", "y"], ["z"]))
    with pytest.raises(InvalidNetError) as info:
        gradient_for_net(net, ["z"])
    (p,) = info.value.problems
    assert p.code == "gradient_name_collision"
    assert (p.op_index, p.op_type, p.blobs) == (0, "Tanh", ("x_grad",))
    assert "rename the forward blob" in p.message


def test_an_edge_detector_blob_named_image_grad_is_refused() -> None:
    net = _net(make_op("Sigmoid", ["image"], ["s"]), make_op("Sub", ["s", "image"], ["image_grad"]),
               make_op("Mul", ["image_grad", "s"], ["loss"]))
    with pytest.raises(InvalidNetError) as info:
        gradient_for_net(net, ["loss"])
    assert [p.blobs for p in info.value.problems] == [("image_grad",)]
    assert info.value.problems[0].op_index == 1


def test_a_seed_named_like_an_internal_name_is_refused_at_ys() -> None:
    # a is read twice: its gradient is summed from _a_grad_autosplit_0 and the other part,
    # and the seed given for y has the first part's name
    net = _net(make_op("Relu", ["a"], ["y"]), make_op("Tanh", ["a"], ["t"]),
               make_op("Mul", ["y", "t"], ["z"]))
    with pytest.raises(InvalidNetError) as info:
        gradient_for_net(net, {"z": None, "y": "_a_grad_autosplit_0"})
    (p,) = info.value.problems
    assert (p.code, p.path, p.blobs) == ("gradient_name_collision", "ys",
                                         ("y", "_a_grad_autosplit_0"))


def test_a_seed_with_its_own_blobs_gradient_name_is_not_a_clash() -> None:
    net = _net(make_op("Relu", ["x"], ["x"]), make_op("Tanh", ["y"], ["x"]),
               make_op("Relu", ["x"], ["y"]))
    res = gradient_for_net(net, {"y": "y_grad"})
    assert [op.type for op in res.grad_ops] == ["ReluGradient", "TanhGradient"]
    assert res.grad_map["y"] == "y_grad"


def test_ordinary_names_still_work() -> None:
    net = _net(make_op("Tanh", ["x"], ["h"]), make_op("Relu", ["h"], ["y"]))
    res = gradient_for_net(net, {"y": "y_seed"})
    assert [op.type for op in res.grad_ops] == ["ReluGradient", "TanhGradient"]


def _loop(cond_ops: list[caffe2_pb2.OperatorDef],
          body_ops: list[caffe2_pb2.OperatorDef]) -> caffe2_pb2.NetDef:
    net = caffe2_pb2.NetDef()
    net.name = "loop"
    body, cond = caffe2_pb2.NetDef(), caffe2_pb2.NetDef()
    body.name, cond.name = "body", "cond"
    body.op.extend(body_ops)
    cond.op.extend(cond_ops)
    add_while_op(net, "cond", ["cond", "ONE", "TEN", "counter", "out", "x", "t"], body, cond)
    return net


_COUNT = [make_op("Add", ["counter", "ONE"], ["counter"]),
          make_op("LT", ["counter", "TEN"], ["cond"])]


def test_a_cond_net_value_the_body_differentiates_is_refused() -> None:
    # cond_net computes t = 3x each test; the body adds t: the gradient of x runs
    # only through the cond_net, which the gradient While does not differentiate
    net = _loop([*_COUNT, make_op("Scale", ["x"], ["t"], [make_arg("scale", 3.0)])],
                [make_op("Add", ["out", "t"], ["out"])])
    with pytest.raises(InvalidNetError) as info:
        gradient_for_net(net, {"out": "out_grad"})
    (p,) = info.value.problems
    assert (p.code, p.op_type, p.blobs) == ("unsupported_loop", "While", ("t",))
    assert "loop_net" in p.message


def test_a_cond_net_counter_the_body_reads_without_gradient_still_works() -> None:
    # brew.loop: the cond_net increments the counter; the body reads it as a Gather index
    gather = make_op("Gather", ["x", "counter"], ["t"], [make_arg("dense_gradient", 1)])
    net = _loop(list(_COUNT), [gather, make_op("Add", ["out", "t"], ["out"])])
    res = gradient_for_net(net, {"out": "out_grad"})
    assert "While" in [op.type for op in res.grad_ops]
    assert res.grad_map.get("counter") is None and res.grad_map.get("x") is not None


def _run_gradient(net: caffe2_pb2.NetDef, ys: dict[str, str | None],
                  feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    res = gradient_for_net(net, ys)
    full = caffe2_pb2.NetDef()
    full.CopyFrom(net)
    full.op.extend(res.grad_ops)
    out = execute(full, feeds)
    return {b: out[str(g)] for b, g in res.grad_map.items() if isinstance(g, str) and b in feeds}


def test_leaky_relu_with_a_negative_alpha_reads_x() -> None:
    # alpha < 0: a negative X gives a positive Y; the gradient is alpha·dY there, not dY
    x = np.array([-2.0, -0.5, 0.5, 3.0])
    net = _net(make_op("LeakyRelu", ["x"], ["y"], [make_arg("alpha", -0.5)]))
    (g,) = _run_gradient(net, {"y": None}, {"x": x}).values()
    np.testing.assert_allclose(g, np.where(x > 0, 1.0, -0.5))


def test_leaky_relu_with_a_positive_alpha_keeps_caffe2s_op() -> None:
    net = _net(make_op("LeakyRelu", ["x"], ["x"], [make_arg("alpha", 0.2)]))
    res = gradient_for_net(net, {"x": None})
    assert list(res.grad_ops[-1].input) == ["x", "x_autogen_grad"]  # Y (in place)
    x = np.array([-2.0, 0.5])
    (g,) = _run_gradient(net, {"x": None}, {"x": x}).values()
    np.testing.assert_allclose(g, [0.2, 1.0])


def test_leaky_relu_in_place_with_a_negative_alpha_is_refused() -> None:
    net = _net(make_op("LeakyRelu", ["x"], ["x"], [make_arg("alpha", -0.5)]))
    with pytest.raises(GradientError, match="new blob"):
        gradient_for_net(net, {"x": None})


def test_an_in_place_add_whose_broadcast_grows_its_input_is_refused() -> None:
    net = _net(make_op("Add", ["a", "b"], ["a"]))
    feeds = {"a": np.ones(3), "b": np.ones((2, 3))}
    with pytest.raises(ExecutionError, match="new blob"):
        execute(net, feeds)
    ok = _net(make_op("Add", ["b", "a"], ["b"]))  # the larger input in place: same shape
    np.testing.assert_allclose(execute(ok, feeds)["b"], np.full((2, 3), 2.0))


@pytest.mark.parametrize(("op_type", "outs", "args"), [
    ("Split", ["a", "a"], [make_arg("axis", 0)]),
    ("Dropout", ["a", "a"], [make_arg("ratio", 0.5)]),
])
def test_an_op_listing_one_output_twice_is_refused(
        op_type: str, outs: list[str], args: list[caffe2_pb2.Argument]) -> None:
    # Split(x) -> [a, a]: a = x[2:] after the run, yet each slot got a's gradient (all ones)
    with pytest.raises(InvalidNetError) as info:
        gradient_for_net(_net(make_op(op_type, ["x"], outs, args)), ["a"])
    (p,) = info.value.problems
    assert (p.code, p.op_index, p.op_type, p.blobs) == ("duplicate_output", 0, op_type, ("a",))


def test_an_if_writing_an_undeclared_blob_with_a_gradient_is_refused() -> None:
    then = caffe2_pb2.NetDef(name="then")
    then.op.append(make_op("Mul", ["x", "x"], ["z"]))
    net = _net(make_op("Scale", ["x"], ["z"], [make_arg("scale", 1.0)]),
               make_op("If", ["c", "x"], [], [make_arg("then_net", then)]))
    with pytest.raises(InvalidNetError) as info:
        gradient_for_net(net, ["z"])  # dz/dx was answered 1 (Scale's), for z = x·x
    (p,) = info.value.problems
    assert (p.code, p.op_index, p.op_type, p.blobs) == ("undeclared_branch_write", 1, "If",
                                                        ("z",))
    assert "Declare it as an output" in p.message


def test_a_non_finite_pow_exponent_is_a_gradient_error_not_a_500() -> None:
    for e in (float("inf"), float("-inf"), float("nan")):
        for outs in (["x"], ["y"]):
            net = _net(make_op("Pow", ["x"], outs, [make_arg("exponent", e)]))
            with pytest.raises(GradientError, match="finite exponent"):
                gradient_for_net(net, outs)


def test_verify_refuses_one_seed_name_for_two_ys() -> None:
    from core.verify.checker import seed_names

    net = _net(make_op("Tanh", ["x"], ["y"]), make_op("Sigmoid", ["x"], ["z"]))
    with pytest.raises(InvalidRequestError) as info:
        seed_names(net, {"y": "g", "z": "g"})
    (p,) = info.value.problems
    assert (p.code, p.path, p.blobs) == ("shared_seed", "ys", ("y", "z", "g"))
    assert seed_names(net, {"y": "g", "z": None}) == {"y": "g", "z": "z_grad"}


@pytest.mark.parametrize(("ys", "skip", "says"), [
    (["y"], 1, "op[0]:Relu writes it, and skip=1 leaves out the first 1 op(s)"),
    (["x"], 0, "it is an input the ops read"),
    (["porb"], 0, "did you mean 'prob'?"),
    (["zzz"], 0, "the net's last outputs are 'y', 'prob'"),
])
def test_a_ys_blob_no_op_writes_says_why(ys: list[str], skip: int, says: str) -> None:
    net = _net(make_op("Relu", ["x"], ["y"]), make_op("Softmax", ["y"], ["prob"]))
    with pytest.raises(InvalidRequestError) as info:
        gradient_for_net(net, ys, skip)
    (p,) = info.value.problems
    assert p.code == "unknown_ys_blob" and says in p.message and says in info.value.message


def test_problems_in_both_branches_of_an_if_are_all_named() -> None:
    then, other = caffe2_pb2.NetDef(name="then"), caffe2_pb2.NetDef(name="else")
    then.op.append(make_op("Tanhh", ["x"], ["x"]))
    other.op.append(make_op("Sigmoidd", ["x"], ["x"]))
    net = _net(make_op("If", ["c", "x"], ["x"], [make_arg("then_net", then),
                                                 make_arg("else_net", other)]),
               make_op("Relu", ["x"], ["y"]))
    with pytest.raises(NetgradError) as info:
        gradient_for_net(net, ["y"])
    assert [(p.op_type, p.path) for p in info.value.problems] == [
        ("Tanhh", "op[0]:If/then_net/op[0]:Tanhh"),
        ("Sigmoidd", "op[0]:If/else_net/op[0]:Sigmoidd")]


def test_an_if_without_then_net_names_a_misspelt_argument() -> None:
    then = caffe2_pb2.NetDef(name="then")
    then.op.append(make_op("Relu", ["x"], ["x"]))
    net = _net(make_op("If", ["c", "x"], ["x"], [make_arg("then_nett", then)]))
    with pytest.raises(InvalidNetError, match="'then_nett' looks like a misspelt then_net"):
        gradient_for_net(net, ["x"])


def test_a_forward_blob_named_like_a_gradient_no_gradient_op_reads_later_is_fine() -> None:
    # review round 3: these were refused although nothing reads the forward value after the
    # gradient ops write the name
    image, k, w = np.array([0.5, -1.0]), np.array([2.0, 3.0]), np.array([-1.0, 0.25])
    net = _net(make_op("Mul", ["image", "k"], ["image_grad"]),
               make_op("Mul", ["image_grad", "w"], ["y"]))
    g = _run_gradient(net, {"y": None}, {"image": image, "k": k, "w": w})
    np.testing.assert_allclose(g["image"], k * w)
    x = np.array([0.3, -0.8])
    net = _net(make_op("Tanh", ["x"], ["x_grad"]))  # TanhGradient reads and writes x_grad
    g = _run_gradient(net, {"x_grad": None}, {"x": x})
    np.testing.assert_allclose(g["x"], 1 - np.tanh(x) ** 2)


def test_the_tutorial_while_whose_cond_net_steps_its_counter_still_works() -> None:
    # control-flow-cases §10: i = 0.5; while (i = i + ONE) <= SEVEN: y += i (review round 3:
    # refused as a cond_net value with a gradient; a step i + c has derivative 1 in i)
    net = caffe2_pb2.NetDef(name="t")
    body, cond = caffe2_pb2.NetDef(name="body"), caffe2_pb2.NetDef(name="cond")
    body.op.append(make_op("Sum", ["y", "i"], ["y"]))
    cond.op.extend([make_op("Add", ["i", "ONE"], ["i"]), make_op("LE", ["i", "SEVEN"], ["c"])])
    add_while_op(net, "c", ["c", "i", "y", "ONE", "SEVEN"], body, cond)
    feeds = {"i": np.array([0.5]), "y": np.array([0.0]), "ONE": np.array([1.0]),
             "SEVEN": np.array([7.0]), "c": np.array(False)}
    g = _run_gradient(net, {"y": None}, feeds)
    assert g["i"].tolist() == [6.0] and g["y"].tolist() == [1.0]


def test_an_undeclared_if_write_over_a_fill_with_a_shape_input_stays_a_warning() -> None:
    # ConstantFill(x) -> m has no gradient, so nothing flows on (review round 3)
    then = caffe2_pb2.NetDef(name="then")
    then.op.append(make_op("Sigmoid", ["z"], ["m"]))
    net = _net(make_op("ConstantFill", ["x"], ["m"]),
               make_op("If", ["c", "z"], [], [make_arg("then_net", then)]),
               make_op("Mul", ["m", "w"], ["y"]))
    res = gradient_for_net(net, ["y"])
    assert [d.code for d in res.diagnostics].count("undeclared_branch_write") == 1
