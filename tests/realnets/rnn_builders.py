"""LSTM and GRU training nets built the way ``caffe2.python.rnn_cell`` builds them.

The builders follow ``rnn_cell.LSTM`` / ``rnn_cell.GRU`` (``LSTMCell`` / ``GRUCell``,
``MultiRNNCell`` for two layers, ``apply_over_sequence``) and ``recurrent.recurrent_net``:
an outer ``FC`` (``<scope>/i2h``, axis 2) preprocesses the input sequence; one
``RecurrentNetwork`` runs the step net; states ``<scope>/<state>_prev_states`` of shape
``[T + 1, N, H]``; outputs ``<state>_all`` / ``<state>_last`` per state plus the step
workspaces; ``param`` / ``param_grads`` / ``backward_link_*`` / ``outputs_with_grads`` and a
``backward_step_net`` written the way Caffe2's Python gradient registry emits it (FC
gradients, ``_autosplit`` accumulation), so netgrad's regeneration can be compared.

``python -m tests.realnets.rnn_builders`` rewrites ``tests/data/rnn_*.json``; a test keeps
the files equal to the builders.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from api_schemas import caffe2_pb2
from core.proto import codec
from core.registry import make_arg, make_op

NetDef = caffe2_pb2.NetDef
DATA = Path(__file__).resolve().parent.parent / "data"

T, N, H, D_IN = 5, 3, 4, 2


def _fc(x: str, y: str, w: str, b: str) -> caffe2_pb2.OperatorDef:
    return make_op("FC", [x, w, b], [y], [make_arg("axis", 2)])


def _net(name: str, ops: list[caffe2_pb2.OperatorDef], ext_in: list[str],
         ext_out: list[str]) -> NetDef:
    net = NetDef(name=name, type="simple")
    net.op.extend(ops)
    net.external_input.extend(ext_in)
    net.external_output.extend(ext_out)
    return net


def _recurrent(
    scope: str,
    step: NetDef,
    back: NetDef | None,
    seq: tuple[str, str],
    states: list[tuple[str, str, str]],
    refs: list[str],
    params: list[str],
    outputs_with_grads: list[int],
    back_links: list[tuple[str, str, int]],
) -> caffe2_pb2.OperatorDef:
    """``recurrent_net``: ``seq`` = (input_t, sequence blob); ``states`` = (prev name, new
    name, initial blob) per state; ``refs`` = the step net's other outer inputs."""
    all_inputs = [seq[1], *(s[2] for s in states), *refs]
    links: list[tuple[str, str, int]] = []
    aliases: list[tuple[str, str, int]] = []
    outputs: list[str] = []
    state_names = []
    for prev, new, _ in states:
        st = f"{scope}/{prev}_states"
        state_names.append(st)
        links += [(prev, st, 0), (new, st, 1)]
        aliases += [(st, new + "_all", 1), (st, new + "_last", -1)]
        outputs += [new + "_all", new + "_last"]
    links.append((seq[0], seq[1], 0))
    args = [
        make_arg("alias_src", [a[0] for a in aliases]),
        make_arg("alias_dst", [a[1] for a in aliases]),
        make_arg("alias_offset", [a[2] for a in aliases]),
        make_arg("recurrent_states", state_names),
        make_arg("initial_recurrent_state_ids", [all_inputs.index(s[2]) for s in states]),
        make_arg("link_internal", [lk[0] for lk in links]),
        make_arg("link_external", [lk[1] for lk in links]),
        make_arg("link_offset", [lk[2] for lk in links]),
        make_arg("enable_rnn_executor", 1),
        make_arg("step_net", step),
        make_arg("timestep", "timestep"),
        make_arg("param", [all_inputs.index(p) for p in params]),
        make_arg("backward_link_internal", [lk[0] for lk in back_links]),
        make_arg("backward_link_external", [lk[1] for lk in back_links]),
        make_arg("backward_link_offset", [lk[2] for lk in back_links]),
        make_arg("outputs_with_grads", outputs_with_grads),
        make_arg("param_grads", [p + "_grad" for p in params]),
    ]
    if back is not None:
        args.append(make_arg("backward_step_net", back))
    return make_op("RecurrentNetwork", all_inputs, [*outputs, f"{scope}/step_workspaces"], args)


def lstm_net() -> NetDef:
    """One-layer LSTM (T=5, N=3, H=4, input size 2), loss = mean(hidden_all²).

    Inputs: ``input`` [T, N, 2], ``seq_lengths`` int32 [N], ``hidden_init``/``cell_init``
    [1, N, H], weights ``lstm/i2h_w`` [4H, 2], ``lstm/i2h_b`` [4H], ``lstm/gates_t_w``
    [4H, H], ``lstm/gates_t_b`` [4H]. Output: ``loss``.
    """
    s = "lstm"
    hp, cp, h, c = f"{s}/hidden_t_prev", f"{s}/cell_t_prev", f"{s}/hidden_t", f"{s}/cell_t"
    x_t, g = f"{s}/input_t", f"{s}/gates_t"
    step = _net(s, [
        _fc(hp, g, f"{s}/gates_t_w", f"{s}/gates_t_b"),
        make_op("Sum", [g, x_t], [g]),
        make_op("LSTMUnit", [hp, cp, g, "seq_lengths", "timestep"], [h, c],
                [make_arg("forget_bias", 0.0), make_arg("drop_states", 0),
                 make_arg("sequence_lengths", 1)]),
    ], [x_t, "timestep", hp, cp, f"{s}/gates_t_w", f"{s}/gates_t_b", "seq_lengths"], [h, c])
    back = _net("RecurrentBackwardStep", [
        make_op("LSTMUnitGradient", [hp, cp, g, "seq_lengths", "timestep", h, c,
                                     h + "_grad", c + "_grad"],
                [hp + "_grad", cp + "_grad", g + "_grad"],
                [make_arg("forget_bias", 0.0), make_arg("drop_states", 0),
                 make_arg("sequence_lengths", 1)]),
        make_op("FCGradient", [hp, f"{s}/gates_t_w", g + "_grad"],
                [f"{s}/gates_t_w_grad", f"{s}/gates_t_b_grad", f"_{hp}_grad_autosplit_0"],
                [make_arg("axis", 2)]),
        make_op("Sum", [hp + "_grad", f"_{hp}_grad_autosplit_0"], [hp + "_grad"]),
    ], [h + "_grad", c + "_grad"], [])
    rnn = _recurrent(
        s, step, back, (x_t, f"{s}/i2h"),
        [(hp, h, "hidden_init"), (cp, c, "cell_init")],
        [f"{s}/gates_t_w", f"{s}/gates_t_b", "seq_lengths"],
        [f"{s}/gates_t_w", f"{s}/gates_t_b"], [0],
        [(h + "_grad", f"{s}/{hp}_states_grad", 1),
         (hp + "_grad", f"{s}/{hp}_states_grad", 0),
         (c + "_grad", f"{s}/{cp}_states_grad", 1),
         (cp + "_grad", f"{s}/{cp}_states_grad", 0),
         (g + "_grad", f"{s}/i2h_grad", 0)],
    )
    return _net("lstm_train", [
        _fc("input", f"{s}/i2h", f"{s}/i2h_w", f"{s}/i2h_b"),
        rnn,
        make_op("Mul", [h + "_all", h + "_all"], ["hidden_sq"]),
        make_op("AveragedLoss", ["hidden_sq"], ["loss"]),
    ], ["input", "seq_lengths", "hidden_init", "cell_init", f"{s}/i2h_w", f"{s}/i2h_b",
        f"{s}/gates_t_w", f"{s}/gates_t_b"], ["loss"])


def _gru_layer(s: str, hp: str, x_t: str) -> tuple[list[caffe2_pb2.OperatorDef], str]:
    """``GRUCell._apply`` ops of one layer; returns (ops, hidden_t)."""
    h = f"{s}/hidden_t"
    ops = [
        make_op("Split", [x_t], [f"{s}/input_t_reset", f"{s}/input_t_update",
                                 f"{s}/input_t_output"], [make_arg("axis", 2)]),
        _fc(hp, f"{s}/reset_gate_t", f"{s}/reset_gate_t_w", f"{s}/reset_gate_t_b"),
        _fc(hp, f"{s}/update_gate_t", f"{s}/update_gate_t_w", f"{s}/update_gate_t_b"),
        make_op("Sum", [f"{s}/reset_gate_t", f"{s}/input_t_reset"], [f"{s}/reset_gate_t"]),
        make_op("Sigmoid", [f"{s}/reset_gate_t"], [f"{s}/reset_gate_t_sigmoid"]),
        make_op("Mul", [f"{s}/reset_gate_t_sigmoid", hp], [f"{s}/modified_hidden_t_prev"]),
        _fc(f"{s}/modified_hidden_t_prev", f"{s}/output_gate_t", f"{s}/output_gate_t_w",
            f"{s}/output_gate_t_b"),
        make_op("Sum", [f"{s}/update_gate_t", f"{s}/input_t_update"], [f"{s}/update_gate_t"]),
        make_op("Sum", [f"{s}/output_gate_t", f"{s}/input_t_output"],
                [f"{s}/output_gate_t_summed"]),
        make_op("Concat", [f"{s}/reset_gate_t", f"{s}/update_gate_t",
                           f"{s}/output_gate_t_summed"],
                [f"{s}/gates_t", f"{s}/_gates_t_concat_dims"], [make_arg("axis", 2)]),
        make_op("GRUUnit", [hp, f"{s}/gates_t", "seq_lengths", "timestep"], [h],
                [make_arg("drop_states", 0), make_arg("sequence_lengths", 1)]),
    ]
    return ops, h


GRU_WEIGHTS = [f"gru_{k}/{g}_{p}" for k in (0, 1)
               for g in ("reset_gate_t", "update_gate_t", "output_gate_t") for p in ("w", "b")]


def gru_net() -> NetDef:
    """Two-layer GRU (``MultiRNNCell`` of two ``GRUCell``s; T=5, N=3, H=4, input size 2),
    loss = mean(last hidden state of layer 2 ²).

    Layer 2's input projection (``gru_1/i2h``) runs inside the step net, as MultiRNNCell does
    for every layer after the first. Inputs: ``input`` [T, N, 2], ``seq_lengths`` int32
    [N], ``hidden_init_0``/``hidden_init_1`` [1, N, H], ``gru_0/i2h_w`` [3H, 2],
    ``gru_0/i2h_b`` [3H], ``gru_1/i2h_w`` [3H, H], ``gru_1/i2h_b`` [3H], per layer
    reset/update/output gate ``_w`` [H, H] and ``_b`` [H]. Output: ``loss``.
    """
    hp0, hp1 = "gru_0/hidden_t_prev", "gru_1/hidden_t_prev"
    x_t = "gru_0/input_t"
    ops0, h0 = _gru_layer("gru_0", hp0, x_t)
    i2h1 = _fc(h0, "gru_1/i2h", "gru_1/i2h_w", "gru_1/i2h_b")
    ops1, h1 = _gru_layer("gru_1", hp1, "gru_1/i2h")
    refs = [*GRU_WEIGHTS[:6], "gru_1/i2h_w", "gru_1/i2h_b", *GRU_WEIGHTS[6:], "seq_lengths"]
    step = _net("gru", [*ops0, i2h1, *ops1],
                [x_t, "timestep", hp0, hp1, *refs], [h0, h1])
    rnn = _recurrent(
        "gru", step, None, (x_t, "gru_0/i2h"),
        [(hp0, h0, "hidden_init_0"), (hp1, h1, "hidden_init_1")],
        refs, [r for r in refs if r != "seq_lengths"], [3],
        [],
    )
    # Built without backward_step_net (as recurrent_net(..., forward_only=True) leaves
    # it): netgrad's return_net / run / verify give the forward op the generated one.
    return _net("gru_train", [
        _fc("input", "gru_0/i2h", "gru_0/i2h_w", "gru_0/i2h_b"),
        rnn,
        make_op("Mul", [h1 + "_last", h1 + "_last"], ["last_sq"]),
        make_op("AveragedLoss", ["last_sq"], ["loss"]),
    ], ["input", "seq_lengths", "hidden_init_0", "hidden_init_1", "gru_0/i2h_w",
        "gru_0/i2h_b", *refs[:-1]], ["loss"])


def lstm_feeds() -> list[dict[str, Any]]:
    """/v1/verify ``inputs`` for :func:`lstm_net` (float64, fixed seeds)."""
    return _feeds({"input": [T, N, D_IN], "hidden_init": [1, N, H], "cell_init": [1, N, H],
                   "lstm/i2h_w": [4 * H, D_IN], "lstm/i2h_b": [4 * H],
                   "lstm/gates_t_w": [4 * H, H], "lstm/gates_t_b": [4 * H]}, [5, 3, 4])


def gru_feeds() -> list[dict[str, Any]]:
    """/v1/verify ``inputs`` for :func:`gru_net` (float64, fixed seeds)."""
    shapes: dict[str, list[int]] = {
        "input": [T, N, D_IN], "hidden_init_0": [1, N, H], "hidden_init_1": [1, N, H],
        "gru_0/i2h_w": [3 * H, D_IN], "gru_0/i2h_b": [3 * H],
        "gru_1/i2h_w": [3 * H, H], "gru_1/i2h_b": [3 * H],
    }
    for w in GRU_WEIGHTS:
        shapes[w] = [H, H] if w.endswith("_w") else [H]
    return _feeds(shapes, [5, 5, 2])


def _feeds(shapes: dict[str, list[int]], lengths: list[int]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"blob": b, "random": {"shape": s, "dtype": "float64", "distribution": "normal",
                               "seed": 100 + k}}
        for k, (b, s) in enumerate(shapes.items())
    ]
    out.append({"blob": "seq_lengths",
                "tensor": {"shape": [N], "dtype": "int32", "data": lengths}})
    return out


FILES = {"rnn_lstm_1layer.json": (lstm_net, lstm_feeds),
         "rnn_gru_2layer.json": (gru_net, gru_feeds)}


def as_json(name: str) -> str:
    """The text of ``tests/data/<name>``: ``{"net": ..., "inputs": ...}``."""
    net_fn, feeds_fn = FILES[name]
    body = {"net": codec.to_json_obj(net_fn()), "inputs": feeds_fn()}
    return json.dumps(body, indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    DATA.mkdir(exist_ok=True)
    for fname in FILES:
        (DATA / fname).write_text(as_json(fname))
