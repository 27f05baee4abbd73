"""Regressions of stop 35 (adversarial hunts).

A ``RecurrentNetwork`` whose step net holds a ``Do`` binding one of the RNN's own inputs
(the parameter ``w``) answered 200, but netgrad's executor could not run the forward net:
the Do's binding of ``w`` hopped to the step workspace and stopped there, without the step
workspace's rule of reading what it lacks from its shared parent (Caffe2's step workspaces
are children of the op's workspace, spec §4.1, §6). So ``/v1/verify`` could not check the
answer. The binding now resolves through the step workspace's rule, and the gradient
verifies against finite differences.
"""

from __future__ import annotations

import numpy as np

from api_schemas import caffe2_pb2
from core.executor.executor import execute
from core.registry import make_arg, make_op
from core.verify.checker import InputSpec, VerifyOptions, verify_net


def _rnn_with_a_do_in_its_step() -> caffe2_pb2.NetDef:
    """``s_t = tanh(x_t + s_{t-1} * w)``, the step's arithmetic inside a Do bound to ``w``."""
    inner = caffe2_pb2.NetDef(name="inner", op=[
        make_op("Mul", ["p", "q"], ["t"], [make_arg("broadcast", 1)]),
        make_op("Add", ["t", "u"], ["t2"]), make_op("Tanh", ["t2"], ["o"])])
    step = caffe2_pb2.NetDef(name="step", op=[
        make_op("CreateScope", [], ["r/W1"]),
        make_op("Do", ["r/x_t", "r/s0_prev", "w", "r/W1"], ["r/s0_t", "r/W1"], [
            make_arg("net", inner), make_arg("inner_blobs", ["u", "p", "q", "o"]),
            make_arg("outer_blobs_idx", [0, 1, 2, 3])])])
    states = ["r/s0_prev_states"]
    rnn = make_op("RecurrentNetwork", ["x", "init", "w"],
                  ["r/s0_all", "r/s0_last", "r/step_workspaces"], [
        make_arg("step_net", step),
        make_arg("backward_step_net", caffe2_pb2.NetDef(name="placeholder")),
        make_arg("recurrent_states", states), make_arg("initial_recurrent_state_ids", [1]),
        make_arg("link_internal", ["r/s0_prev", "r/s0_t", "r/x_t"]),
        make_arg("link_external", [states[0], states[0], "x"]),
        make_arg("link_offset", [0, 1, 0]), make_arg("alias_src", states * 2),
        make_arg("alias_dst", ["r/s0_all", "r/s0_last"]), make_arg("alias_offset", [1, -1]),
        make_arg("timestep", "timestep")])
    return caffe2_pb2.NetDef(name="rnn_do", op=[rnn])


def _feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(20261205)
    return {"x": rng.uniform(-1, 1, (3, 2, 2)), "init": rng.uniform(-1, 1, (1, 2, 2)),
            "w": rng.uniform(-0.8, 0.8, (2,))}


def test_a_do_in_a_step_net_reads_the_rnn_parameter_it_binds() -> None:
    feeds = _feeds()
    out = execute(_rnn_with_a_do_in_its_step(), feeds)
    s = feeds["init"][0]
    for t in range(3):  # the step by hand: the Do's sub-net read the real w
        s = np.tanh(s * feeds["w"] + feeds["x"][t])
    np.testing.assert_allclose(out["r/s0_last"][0], s, rtol=1e-12)


def test_its_gradient_verifies_against_finite_differences() -> None:
    opts = VerifyOptions(inputs=[InputSpec.from_array(k, v) for k, v in _feeds().items()],
                         mode="full")
    result = verify_net(_rnn_with_a_do_in_its_step(), ["r/s0_all"], opts)
    assert result.report.passed, result.report
    assert [b.blob for b in result.report.blobs] == ["x", "init", "w"]
