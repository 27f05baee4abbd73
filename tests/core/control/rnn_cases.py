"""Small ``RecurrentNetwork`` nets for the runtime, maker, bad-input and fuzz tests.

:func:`simple_rnn` builds the plain tanh RNN ``h_t = tanh(h_{t-1} W^T + b + x_t)`` the way
``recurrent_net`` lays it out (state ``h/h_prev_states``, outputs ``h/h_t_all``,
``h/h_t_last``, ``h/step_workspaces``), with hooks to break it for the bad-input tests.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from api_schemas import caffe2_pb2
from core.registry import make_arg, make_op
from core.verify.specs import InputSpec

NetDef = caffe2_pb2.NetDef
OperatorDef = caffe2_pb2.OperatorDef

STATE = "h/h_prev_states"


def step_ops(gate_if: bool = False) -> list[OperatorDef]:
    """Step net ``pre = FC(h_prev) + x_t; h_t = tanh(pre)``; with ``gate_if`` an If on the
    outer bool blob ``flag`` chooses ``Tanh`` or ``Sigmoid`` for the new state."""
    ops = [
        make_op("FC", ["h/h_prev", "W", "b"], ["h/pre"], [make_arg("axis", 2)]),
        make_op("Add", ["h/pre", "h/x_t"], ["h/pre2"]),
    ]
    if not gate_if:
        ops.append(make_op("Tanh", ["h/pre2"], ["h/h_t"]))
        return ops
    then_net = NetDef(name="gate_then")
    then_net.op.append(make_op("Tanh", ["h/pre2"], ["h/h_t"]))
    else_net = NetDef(name="gate_else")
    else_net.op.append(make_op("Sigmoid", ["h/pre2"], ["h/h_t"]))
    ops.append(make_op("If", ["flag", "h/pre2"], ["h/h_t"],
                       [make_arg("then_net", then_net), make_arg("else_net", else_net)]))
    return ops


def simple_rnn(
    *,
    ops: list[OperatorDef] | None = None,
    links: list[tuple[str, str, int]] | None = None,
    windows: list[int] | None = None,
    states: list[str] | None = None,
    ids: list[int] | None = None,
    extra_inputs: list[str] | None = None,
    args: list[Any] | None = None,
    backward_step_net: bool = True,
    loss_on: str = "all",
) -> NetDef:
    """A net ``RecurrentNetwork`` + ``loss = mean(out²)`` (``out`` = ``_all`` or ``_last``).

    Inputs: ``x`` [T, N, D], ``h0`` [1, N, D] (or [D]), ``W`` [D, D], ``b`` [D].
    """
    step = NetDef(name="rnn_step", type="simple")
    step.op.extend(ops if ops is not None else step_ops())
    lk = links if links is not None else [("h/h_prev", STATE, 0), ("h/h_t", STATE, 1),
                                          ("h/x_t", "x", 0)]
    inputs = ["x", "h0", "W", "b", *(extra_inputs or [])]
    a = [
        make_arg("step_net", step),
        make_arg("recurrent_states", states if states is not None else [STATE]),
        make_arg("initial_recurrent_state_ids", ids if ids is not None else [1]),
        make_arg("link_internal", [x[0] for x in lk]),
        make_arg("link_external", [x[1] for x in lk]),
        make_arg("link_offset", [x[2] for x in lk]),
        make_arg("alias_src", [STATE, STATE]),
        make_arg("alias_dst", ["h/h_t_all", "h/h_t_last"]),
        make_arg("alias_offset", [1, -1]),
        make_arg("timestep", "timestep"),
    ]
    if windows is not None:
        a.append(make_arg("link_window", windows))
    if backward_step_net:
        a.append(make_arg("backward_step_net", NetDef(name="placeholder")))
    a.extend(args or [])
    rnn = make_op("RecurrentNetwork", inputs, ["h/h_t_all", "h/h_t_last", "h/step_workspaces"], a)
    net = NetDef(name="rnn_net")
    out = "h/h_t_all" if loss_on == "all" else "h/h_t_last"
    net.op.extend([
        rnn,
        make_op("Mul", [out, out], ["sq"]),
        make_op("AveragedLoss", ["sq"], ["loss"]),
    ])
    return net


def simple_feeds(t: int = 4, n: int = 2, d: int = 3, seed: int = 0, h0_1d: bool = False,
                 flag: bool | None = None) -> list[InputSpec]:
    """Fixed-seed float64 inputs for :func:`simple_rnn`."""
    rng = np.random.default_rng(seed)
    feeds = [
        InputSpec.from_array("x", rng.standard_normal((t, n, d))),
        InputSpec.from_array("h0", rng.standard_normal((d,) if h0_1d else (1, n, d))),
        InputSpec.from_array("W", rng.standard_normal((d, d)) * 0.5),
        InputSpec.from_array("b", rng.standard_normal((d,))),
    ]
    if flag is not None:
        feeds.append(InputSpec.from_array("flag", np.array([flag])))
    return feeds
