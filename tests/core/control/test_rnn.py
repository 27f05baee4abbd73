"""RecurrentNetwork (issue 9): runtime values, gradients checked by finite differences,
nesting with If, bad input, limits."""

from __future__ import annotations

import numpy as np
import pytest

from api_schemas import caffe2_pb2
from core.api import gradient_for_net
from core.errors import ExecutionError, InvalidNetError, LimitExceededError, NetgradError
from core.executor.executor import execute
from core.executor.limits import RunLimits
from core.registry import find_arg, make_arg, make_op
from core.verify.checker import verify_net
from core.verify.specs import InputSpec, VerifyOptions
from tests.core.control.rnn_cases import STATE, simple_feeds, simple_rnn, step_ops
from tests.realnets import rnn_builders

NetDef = caffe2_pb2.NetDef


def _verify(net: NetDef, feeds: list[InputSpec], **kw: object) -> dict[str, float]:
    res = verify_net(net, ["loss"], VerifyOptions(inputs=feeds, mode="full", step=1e-6,
                                                   atol=1e-6, rtol=1e-4), **kw)  # type: ignore[arg-type]
    errs = {b.blob: b.max_abs_error for b in res.report.blobs}
    assert res.report.passed, errs
    return errs


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def test_lstm_forward_matches_a_numpy_reference() -> None:
    """Runtime + LSTMUnit against an independent loop (gate order i, f, o, g; lengths)."""
    net = rnn_builders.lstm_net()
    rng = np.random.default_rng(3)
    t_, n, h, d = rnn_builders.T, rnn_builders.N, rnn_builders.H, rnn_builders.D_IN
    feeds = {
        "input": rng.standard_normal((t_, n, d)), "hidden_init": rng.standard_normal((1, n, h)),
        "cell_init": rng.standard_normal((1, n, h)),
        "lstm/i2h_w": rng.standard_normal((4 * h, d)), "lstm/i2h_b": rng.standard_normal(4 * h),
        "lstm/gates_t_w": rng.standard_normal((4 * h, h)),
        "lstm/gates_t_b": rng.standard_normal(4 * h),
        "seq_lengths": np.array([5, 2, 4], dtype=np.int32),
    }
    out = execute(net, feeds)
    hp, cp = feeds["hidden_init"][0], feeds["cell_init"][0]
    hs = []
    for t in range(t_):
        g = feeds["input"][t] @ feeds["lstm/i2h_w"].T + feeds["lstm/i2h_b"]
        g = g + hp @ feeds["lstm/gates_t_w"].T + feeds["lstm/gates_t_b"]
        i, f, o = _sigmoid(g[:, :h]), _sigmoid(g[:, h:2 * h]), _sigmoid(g[:, 2 * h:3 * h])
        c = f * cp + i * np.tanh(g[:, 3 * h:])
        hn = o * np.tanh(c)
        valid = (t < feeds["seq_lengths"])[:, None]
        hp, cp = np.where(valid, hn, hp), np.where(valid, c, cp)
        hs.append(hp)
    np.testing.assert_allclose(out["lstm/hidden_t_all"], np.stack(hs), rtol=1e-12)
    np.testing.assert_allclose(out["lstm/hidden_t_last"], hs[-1][None], rtol=1e-12)
    np.testing.assert_allclose(out["lstm/cell_t_last"], cp[None], rtol=1e-12)


@pytest.mark.parametrize("loss_on", ["all", "last"])
def test_simple_rnn_gradient_verifies(loss_on: str) -> None:
    errs = _verify(simple_rnn(loss_on=loss_on), simple_feeds())
    assert set(errs) == {"x", "h0", "W", "b"}


def test_one_dimensional_initial_state_is_summed_over_the_batch() -> None:
    _verify(simple_rnn(), simple_feeds(h0_1d=True))


def test_recompute_blobs_on_backward() -> None:
    net = simple_rnn(args=[make_arg("recompute_blobs_on_backward", ["h/pre"])])
    res = gradient_for_net(net, ["loss"])
    g = next(o for o in res.grad_ops if o.type == "RecurrentNetworkGradient")
    back = find_arg(g, "backward_step_net").n
    assert back.op[0].type == "FC" and list(back.op[0].output) == ["h/pre"]
    diag = next(d for d in res.diagnostics if d.code == "rnn_recompute_candidates")
    assert "recomputed now: h/pre" in diag.message
    _verify(net, simple_feeds())


@pytest.mark.parametrize("flag", [True, False])
def test_step_net_with_if_differentiates_and_verifies(flag: bool) -> None:
    net = simple_rnn(ops=step_ops(gate_if=True), extra_inputs=["flag"])
    res = gradient_for_net(net, ["loss"])
    g = next(o for o in res.grad_ops if o.type == "RecurrentNetworkGradient")
    assert "If" in [o.type for o in find_arg(g, "backward_step_net").n.op]
    _verify(net, simple_feeds(flag=flag))


def test_gradient_needs_the_step_workspaces_caffe2_keeps() -> None:
    """Without backward_step_net the forward op keeps two workspaces (Caffe2): the gradient
    op of a longer sequence fails; return_net's forward op carries it and runs."""
    net = simple_rnn(backward_step_net=False)
    res = gradient_for_net(net, {"loss": "loss_grad"}, return_net=True)
    feeds = {s.blob: s.tensor.data for s in simple_feeds() if s.tensor is not None}
    feeds["loss_grad"] = np.ones(1)
    plain = NetDef()
    plain.CopyFrom(net)
    plain.op.extend(res.grad_ops)
    with pytest.raises(ExecutionError, match="kept 2 step workspaces for 4 steps"):
        execute(plain, feeds)
    assert res.net is not None
    fwd = res.net.op[0]
    assert find_arg(fwd, "backward_step_net").n.name == "RecurrentBackwardStep"
    out = execute(res.net, feeds)
    assert out["W_grad"].shape == (3, 3) and np.any(out["W_grad"] != 0)


def test_steps_count_as_loop_iterations() -> None:
    feeds = {s.blob: s.tensor.data for s in simple_feeds() if s.tensor is not None}
    with pytest.raises(LimitExceededError, match="max_loop_iterations"):
        execute(simple_rnn(), feeds, RunLimits(max_loop_iterations=3))


def _problem(net: NetDef) -> NetgradError:
    with pytest.raises(NetgradError) as info:
        gradient_for_net(net, ["loss"])
    return info.value


def test_window_outside_the_sequence_is_refused() -> None:
    net = simple_rnn(links=[("h/h_prev", STATE, 0), ("h/h_t", STATE, 1), ("h/x_t", "x", 1)])
    err = _problem(net)
    assert isinstance(err, InvalidNetError)
    p = err.problems[0]
    assert p.path == "op[0]:RecurrentNetwork" and p.op_type == "RecurrentNetwork"
    assert "outside the sequence" in p.message and p.code == "rnn_link_window"
    net = simple_rnn(windows=[1, 1, 2])
    assert _problem(net).problems[0].code == "rnn_link_window"


def test_step_net_writing_a_read_link_is_refused() -> None:
    ops = [*step_ops(), make_op("Scale", ["h/x_t"], ["h/x_t"], [make_arg("scale", 2.0)])]
    p = _problem(simple_rnn(ops=ops)).problems[0]
    assert p.code == "rnn_writes_read_link" and "h/x_t" in p.message
    assert p.path == "op[0]:RecurrentNetwork"


def test_recurrent_state_without_initial_value_is_refused() -> None:
    err = _problem(simple_rnn(states=[], ids=[]))
    codes = [p.code for p in err.problems]
    assert "rnn_state_without_initial" in codes
    assert all(p.path == "op[0]:RecurrentNetwork" for p in err.problems)
    err = _problem(simple_rnn(ids=[]))
    assert "initial_recurrent_state_ids" in err.problems[0].message


def test_param_never_read_is_refused() -> None:
    net = simple_rnn(extra_inputs=["unused"], args=[make_arg("param", [2, 3, 4])])
    p = _problem(net).problems[0]
    assert p.code == "rnn_param_unread" and "unused" in p.message


def test_step_net_error_names_the_nested_path() -> None:
    ops = [*step_ops()[:2], make_op("Floor", ["h/pre2"], ["h/h_t"])]
    err = _problem(simple_rnn(ops=ops))
    assert any(p.path is not None and p.path.startswith("op[0]:RecurrentNetwork/step_net/op[2]")
               for p in err.problems), err.problems


def test_sequence_gradient_and_params_layout() -> None:
    res = gradient_for_net(simple_rnn(), ["loss"])
    g = next(o for o in res.grad_ops if o.type == "RecurrentNetworkGradient")
    assert list(g.input) == ["h/h_t_all_grad", "x", "h0", "W", "b", "h/h_t_all",
                             "h/h_t_last", "h/step_workspaces"]
    assert list(g.output) == ["x_grad", "W_grad", "b_grad", "h0_grad"]
    assert list(find_arg(g, "param").ints) == [2, 3]
    assert list(find_arg(g, "outputs_with_grads").ints) == [0]
    assert [s.decode() for s in find_arg(g, "backward_link_external").strings] == [
        STATE + "_grad", STATE + "_grad", "x_grad"]


def test_sequence_gradient_accumulated_with_another_consumer() -> None:
    """x feeds the RNN and a Tanh: the RNN's x gradient is renamed for the accumulation
    (Caffe2's ``<x>_grad.rename`` argument) and the sum verifies."""
    net = simple_rnn()
    net.op.extend([make_op("Tanh", ["x"], ["tx"]), make_op("AveragedLoss", ["tx"], ["l2"]),
                   make_op("Add", ["loss", "l2"], ["total"])])
    res = gradient_for_net(net, ["total"])
    g = next(o for o in res.grad_ops if o.type == "RecurrentNetworkGradient")
    renamed = find_arg(g, "x_grad.rename")
    assert renamed is not None and renamed.s.decode() == g.output[0] != "x_grad"
    res2 = verify_net(net, ["total"], VerifyOptions(inputs=simple_feeds(), mode="full",
                                                      step=1e-6, atol=1e-6, rtol=1e-4))
    assert res2.report.passed, [(b.blob, b.max_abs_error) for b in res2.report.blobs]


def test_overwritten_param_is_refused_even_with_recompute() -> None:
    net = simple_rnn()
    net.op.insert(1, make_op("Scale", ["W"], ["W"], [make_arg("scale", 2.0)]))
    net.op.insert(2, make_op("FC", ["h/h_t_last", "W", "b"], ["y2"], [make_arg("axis", 2)]))
    net.op.extend([make_op("AveragedLoss", ["y2"], ["l2"]),
                   make_op("Add", ["loss", "l2"], ["total"])])
    net.op.insert(0, make_op("Copy", ["W_fed"], ["W"]))  # W computed: recompute could redo it
    codes = []
    for recompute in (False, True):
        with pytest.raises(NetgradError) as info:
            gradient_for_net(net, ["total"], recompute=recompute)
        p = info.value.problems[0]
        assert p.op_index == 1 and p.op_type == "RecurrentNetwork", p
        assert "W" in p.blobs
        codes.append(p.code)
    assert codes == ["version_mismatch", "rnn_recompute_input"]


def test_value_carried_outside_the_states_is_refused() -> None:
    ops = [*step_ops(), make_op("Scale", ["W"], ["W"], [make_arg("scale", 0.5)])]
    p = _problem(simple_rnn(ops=ops)).problems[0]
    assert p.code == "rnn_hidden_recurrence" and "W" in p.message


def test_initial_state_ids_must_be_distinct_positions() -> None:
    net = simple_rnn(states=[STATE, "h/other_states"], ids=[1, 1],
                     links=[("h/h_prev", STATE, 0), ("h/h_t", STATE, 1), ("h/x_t", "x", 0),
                            ("h/o_prev", "h/other_states", 0), ("h/h_t2", "h/other_states", 1)],
                     ops=[*step_ops(), make_op("Tanh", ["h/o_prev"], ["h/h_t2"])])
    assert "rnn_link_role" in [p.code for p in _problem(net).problems]


def test_step_blob_that_exists_outside_is_an_execution_error() -> None:
    net = simple_rnn()
    net.op.insert(0, make_op("Copy", ["b"], ["h/pre2"]))  # an outer blob named like a step blob
    feeds = {s.blob: s.tensor.data for s in simple_feeds() if s.tensor is not None}
    with pytest.raises(ExecutionError, match="h/pre2, which already exist outside the step"):
        execute(net, feeds)


def test_step_net_in_text_format_is_accepted() -> None:
    """Older recurrent_net builds pass step_net as a protobuf text string."""
    from core.proto import codec

    net = simple_rnn()
    rnn = net.op[0]
    step = find_arg(rnn, "step_net")
    text = codec.to_text(step.n)
    step.ClearField("n")
    step.s = text.encode()
    res = gradient_for_net(net, ["loss"])
    assert [o.type for o in res.grad_ops].count("RecurrentNetworkGradient") == 1
    _verify(net, simple_feeds())
    step.s = b"op { type: "
    assert _problem(net).problems[0].code == "invalid_rnn_arguments"


@pytest.mark.parametrize("flag", [True, False])
def test_recurrent_network_inside_an_if_branch(flag: bool) -> None:
    inner = simple_rnn()
    then_net = NetDef(name="then")
    then_net.op.append(inner.op[0])
    then_net.op.append(make_op("Copy", ["h/h_t_all"], ["out"]))
    else_net = NetDef(name="else")
    else_net.op.append(make_op("Tanh", ["x"], ["out"]))
    net = NetDef(name="outer")
    net.op.extend([
        # the branch's RecurrentNetwork outputs are declared on the If (its gradient reads
        # them; Caffe2's If gradient has the same scope rule)
        make_op("If", ["flag", "x", "h0", "W", "b"],
                ["out", "h/h_t_all", "h/h_t_last", "h/step_workspaces"],
                [make_arg("then_net", then_net), make_arg("else_net", else_net)]),
        make_op("Mul", ["out", "out"], ["sq"]),
        make_op("AveragedLoss", ["sq"], ["loss"]),
    ])
    res = gradient_for_net(net, ["loss"], return_net=True)
    assert res.net is not None
    fwd_then = find_arg(res.net.op[0], "then_net").n
    assert find_arg(fwd_then.op[0], "backward_step_net").n.name == "RecurrentBackwardStep"
    _verify(net, simple_feeds(flag=flag))


@pytest.mark.parametrize("flag", [True, False])
def test_param_read_inside_an_if_of_the_step_net(flag: bool) -> None:
    """The If's gradient writes the param's step gradient inside its branches: the maker
    copies it out so the runtime's per-step rename (``<name>_tmpstep``) sees a plain op."""
    then_net = NetDef(name="then")
    then_net.op.append(make_op("Mul", ["h/pre2", "s"], ["h/h_t0"]))
    else_net = NetDef(name="else")
    else_net.op.append(make_op("Add", ["h/pre2", "s"], ["h/h_t0"]))
    ops = [*step_ops()[:2],
           make_op("If", ["flag", "h/pre2", "s"], ["h/h_t0"],
                   [make_arg("then_net", then_net), make_arg("else_net", else_net)]),
           make_op("Tanh", ["h/h_t0"], ["h/h_t"])]
    net = simple_rnn(ops=ops, extra_inputs=["flag", "s"])
    res = gradient_for_net(net, ["loss"])
    g = next(o for o in res.grad_ops if o.type == "RecurrentNetworkGradient")
    pg = [x.decode() for x in find_arg(g, "param_grads").strings]
    assert pg[-1].startswith("s_grad_rnn")
    feeds = [*simple_feeds(flag=flag), InputSpec.from_array("s", np.array([0.3, -0.2, 0.5]))]
    _verify(net, feeds)


def test_sequence_read_directly_is_refused() -> None:
    ops = [*step_ops(), make_op("Add", ["h/h_t", "h0"], ["h/unused"])]
    net = simple_rnn(ops=ops, links=[("h/h_prev", STATE, 0), ("h/h_t", STATE, 1)])
    net.op[0].input[0] = "x"
    ops2 = [make_op("FC", ["h/h_prev", "W", "b"], ["h/pre"], [make_arg("axis", 2)]),
            make_op("Add", ["h/pre", "x"], ["h/pre2"]), make_op("Tanh", ["h/pre2"], ["h/h_t"])]
    net = simple_rnn(ops=ops2, links=[("h/h_prev", STATE, 0), ("h/h_t", STATE, 1)])
    assert "rnn_input_two_roles" in [p.code for p in _problem(net).problems]


def test_backward_step_net_writing_an_outer_blob_is_an_execution_error() -> None:
    net = simple_rnn()
    res = gradient_for_net(net, {"loss": "loss_grad"})
    g = next(o for o in res.grad_ops if o.type == "RecurrentNetworkGradient")
    back = find_arg(g, "backward_step_net").n
    back.op.append(make_op("Copy", ["h/pre_grad"], ["b"]))  # clobbers an outer input
    full = NetDef()
    full.CopyFrom(net)
    full.op.extend(res.grad_ops)
    feeds = {s.blob: s.tensor.data for s in simple_feeds() if s.tensor is not None}
    feeds["loss_grad"] = np.ones(1)
    with pytest.raises(ExecutionError, match="backward step net writes b, which exist outside"):
        execute(full, feeds)


def test_malformed_ops_are_clean_errors() -> None:
    from core.api import gradient_for_op

    op = make_op("RecurrentNetwork", [], ["only"], [])
    with pytest.raises(InvalidNetError) as info:
        gradient_for_op(op, ["g"])
    assert info.value.problems[0].path == "op[0]:RecurrentNetwork"
    bad = NetDef()
    bad.op.append(op)
    with pytest.raises(InvalidNetError, match="step_net"):
        execute(bad, {})
    grad = NetDef()
    grad.op.append(make_op("RecurrentNetworkGradient", ["a"], ["b"],
                           [make_arg("backward_step_net", NetDef())]))
    with pytest.raises(InvalidNetError):
        execute(grad, {"a": np.ones(1)})


def test_forward_step_writing_its_read_only_input_link() -> None:
    """Forward-only, Caffe2 lets a step write its input window (shared memory): the fed
    sequence changes in place; the gradient of such an op is refused (see above)."""
    ops = [*step_ops(), make_op("Scale", ["h/x_t"], ["h/x_t"], [make_arg("scale", 2.0)])]
    net = simple_rnn(ops=ops, backward_step_net=False)
    feeds = {s.blob: s.tensor.data for s in simple_feeds() if s.tensor is not None}
    x = np.array(feeds["x"])
    x.flags.writeable = False
    out = execute(net, {**feeds, "x": x}, fetch=["x"])
    np.testing.assert_allclose(out["x"], 2 * feeds["x"])


def test_recurrent_network_in_a_do_and_in_a_while_body() -> None:
    """The forward op runs in the Do's / each iteration's saved workspace; its step
    workspaces are found there again by the gradient."""
    from core.control.lowering import add_do_op, add_while_op

    rnn = simple_rnn().op[0]
    body = NetDef(name="body")
    body.op.extend([rnn, make_op("Copy", ["h/h_t_last"], ["y"])])
    net = NetDef(name="outer")
    add_do_op(net, ["x", "h0", "W", "b", "y"], body)
    net.op.extend([make_op("Mul", ["y", "y"], ["sq"]), make_op("AveragedLoss", ["sq"], ["loss"])])
    _verify(net, simple_feeds())

    body = NetDef(name="wbody")
    body.op.extend([rnn, make_op("Add", ["acc", "h/h_t_last"], ["acc"]),
                    make_op("Add", ["i", "one"], ["i"])])
    cond = NetDef(name="cond")
    cond.op.append(make_op("LT", ["i", "two"], ["c"]))
    net = NetDef(name="outer2")
    net.op.extend([make_op("Copy", ["zero"], ["i"]),
                   make_op("Scale", ["h0"], ["acc"], [make_arg("scale", 0.5)]),
                   make_op("LT", ["i", "two"], ["c"])])
    add_while_op(net, "c", ["x", "h0", "W", "b", "i", "one", "two", "c", "acc"], body, cond)
    net.op.extend([make_op("Mul", ["acc", "acc"], ["sq"]),
                   make_op("AveragedLoss", ["sq"], ["loss"])])
    consts = [InputSpec.from_array(n, np.array([v]))
              for n, v in (("zero", 0.0), ("one", 1.0), ("two", 2.0))]
    res = verify_net(net, ["loss"], VerifyOptions(inputs=[*simple_feeds(), *consts],
                                                  mode="full", step=1e-6, atol=1e-6,
                                                  rtol=1e-4, check=["x", "h0", "W", "b"]))
    assert res.report.passed, [(b.blob, b.max_abs_error) for b in res.report.blobs]


def test_verify_reports_the_saved_step_workspaces_with_elements() -> None:
    res = verify_net(simple_rnn(), ["loss"], VerifyOptions(inputs=simple_feeds(), mode="fast"))
    diag = [d for d in res.diagnostics if d.code == "saved_step_workspaces"]
    assert len(diag) == 1 and diag[0].blobs == ("h/step_workspaces",)
    # 4 steps; each keeps timestep, h/h_prev, h/h_t, h/x_t, h/pre, h/pre2 (1 + 5 x 2 x 3 values)
    assert "4 x 6 blobs, 124 elements" in diag[0].message, diag[0].message


def test_forward_windows_and_a_multi_step_initial_state() -> None:
    """Caffe2's windowed links: with a 3-D initial state of two rows, step t reads rows
    [t, t + 2) of the state (window 2) and writes row t + 2; h_t = tanh(sum(window) + x_t)."""
    step = NetDef(name="win_step")
    step.op.extend([
        make_op("ReduceSum", ["w/prev2"], ["w/s"], [make_arg("axes", [0]),
                                                    make_arg("keepdims", 1)]),
        make_op("Add", ["w/s", "w/x_t"], ["w/pre"]),
        make_op("Tanh", ["w/pre"], ["w/h_t"]),
    ])
    rnn = make_op("RecurrentNetwork", ["x", "h0"], ["w/all", "w/last", "w/ws"], [
        make_arg("step_net", step),
        make_arg("recurrent_states", ["w/states"]),
        make_arg("initial_recurrent_state_ids", [1]),
        make_arg("link_internal", ["w/prev2", "w/h_t", "w/x_t"]),
        make_arg("link_external", ["w/states", "w/states", "x"]),
        make_arg("link_offset", [0, 2, 0]),
        make_arg("link_window", [2, 1, 1]),
        make_arg("alias_src", ["w/states", "w/states"]),
        make_arg("alias_dst", ["w/all", "w/last"]),
        make_arg("alias_offset", [2, -1]),
    ])
    net = NetDef()
    net.op.append(rnn)
    rng = np.random.default_rng(5)
    x, h0 = rng.standard_normal((4, 2, 3)), rng.standard_normal((2, 2, 3))
    out = execute(net, {"x": x, "h0": h0})
    rows = [h0[0], h0[1]]
    for t in range(4):
        rows.append(np.tanh(rows[t] + rows[t + 1] + x[t]))
    np.testing.assert_allclose(out["w/all"], np.stack(rows[2:]), rtol=1e-12)
    np.testing.assert_allclose(out["w/last"], rows[-1][None], rtol=1e-12)
    # its gradient is refused (window 2), not guessed
    net.op.extend([make_op("AveragedLoss", ["w/all"], ["loss"])])
    assert _problem(net).problems[0].code == "rnn_link_window"
    # a window reaching past the state fails at run time, located
    bad = NetDef()
    bad.CopyFrom(net)
    find_arg(bad.op[0], "link_window").ints[0] = 4  # rows [3, 7) of 6 at the last step
    with pytest.raises(ExecutionError, match="falls outside the sequence"):
        execute(bad, {"x": x, "h0": h0})
