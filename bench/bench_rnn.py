"""Benchmark RecurrentNetwork gradient generation (issue 9).

An LSTM of L = 1…8 layers built as ``rnn_cell.LSTM(num_layers=L)`` builds it: an outer
``FC`` preprocesses the input sequence, one ``RecurrentNetwork`` whose step net holds the L
cells (``FC`` + ``Sum`` + ``LSTMUnit`` per layer, plus the ``FC`` input projection of every
layer after the first), a loss on the top layer's ``hidden_t_all``. Timed:
``core.api.gradient_for_net(net, ["loss"])``, best of several rounds after a warm-up.
Reported: ms per net, step-net ops, µs per step-net op, and for comparison µs per forward op
of a plain MLP of the same op count (the ratio shows what the RecurrentNetwork maker costs
beyond the backward pass over its step net).

Run from the repository root: ``python -m bench.bench_rnn`` (``--quick``: fewer rounds).
Prints a Markdown table; record it in ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from api_schemas import caffe2_pb2
from core.api import gradient_for_net
from core.registry import make_arg, make_op

NetDef = caffe2_pb2.NetDef
OperatorDef = caffe2_pb2.OperatorDef
LAYERS = (1, 2, 4, 8)


def _fc(x: str, y: str, w: str, b: str) -> OperatorDef:
    return make_op("FC", [x, w, b], [y], [make_arg("axis", 2)])


def lstm_stack(layers: int) -> tuple[NetDef, int]:
    """``(net, step-net op count)`` of an L-layer LSTM (see the module docstring)."""
    step = NetDef(name="lstm", type="simple")
    params: list[str] = []
    states: list[tuple[str, str, str]] = []  # (prev, new, initial)
    x_t = "lstm/input_t"
    below = x_t
    for k in range(layers):
        s = f"lstm_{k}"
        hp, cp, h, c, g = (f"{s}/hidden_t_prev", f"{s}/cell_t_prev", f"{s}/hidden_t",
                           f"{s}/cell_t", f"{s}/gates_t")
        if k:
            step.op.append(_fc(below, f"{s}/i2h", f"{s}/i2h_w", f"{s}/i2h_b"))
            params += [f"{s}/i2h_w", f"{s}/i2h_b"]
            below = f"{s}/i2h"
        step.op.extend([
            _fc(hp, g, f"{s}/gates_t_w", f"{s}/gates_t_b"),
            make_op("Sum", [g, below], [g]),
            make_op("LSTMUnit", [hp, cp, g, "seq_lengths", "timestep"], [h, c]),
        ])
        params += [f"{s}/gates_t_w", f"{s}/gates_t_b"]
        states += [(hp, h, f"{s}/hidden_init"), (cp, c, f"{s}/cell_init")]
        below = h
    inputs = ["lstm/i2h", *(st[2] for st in states), *params, "seq_lengths"]
    links: list[tuple[str, str, int]] = []
    aliases: list[tuple[str, str, int]] = []
    outputs: list[str] = []
    names = []
    for prev, new, _ in states:
        name = f"lstm/{prev}_states"
        names.append(name)
        links += [(prev, name, 0), (new, name, 1)]
        aliases += [(name, new + "_all", 1), (name, new + "_last", -1)]
        outputs += [new + "_all", new + "_last"]
    links.append((x_t, "lstm/i2h", 0))
    rnn = make_op("RecurrentNetwork", inputs, [*outputs, "lstm/step_workspaces"], [
        make_arg("step_net", step),
        make_arg("recurrent_states", names),
        make_arg("initial_recurrent_state_ids", [1 + i for i in range(len(states))]),
        make_arg("link_internal", [lk[0] for lk in links]),
        make_arg("link_external", [lk[1] for lk in links]),
        make_arg("link_offset", [lk[2] for lk in links]),
        make_arg("alias_src", [a[0] for a in aliases]),
        make_arg("alias_dst", [a[1] for a in aliases]),
        make_arg("alias_offset", [a[2] for a in aliases]),
        make_arg("timestep", "timestep"),
    ])
    top = outputs[-4]  # hidden_t_all of the last layer
    net = NetDef(name=f"lstm{layers}")
    net.op.extend([
        _fc("input", "lstm/i2h", "lstm/i2h_w", "lstm/i2h_b"),
        rnn,
        make_op("Mul", [top, top], ["sq"]),
        make_op("AveragedLoss", ["sq"], ["loss"]),
    ])
    return net, len(step.op)


def mlp(n_ops: int) -> NetDef:
    """``n_ops`` FC/Relu ops, then AveragedLoss: the plain-pass reference."""
    net = NetDef(name="mlp")
    x = "x"
    for k in range(n_ops // 2):
        net.op.extend([make_op("FC", [x, f"w{k}", f"b{k}"], [f"y{k}"]),
                       make_op("Relu", [f"y{k}"], [f"y{k}"])])
        x = f"y{k}"
    net.op.append(make_op("AveragedLoss", [x], ["loss"]))
    return net


def best(fn: Callable[[], object], rounds: int) -> float:
    """Best wall-clock seconds of ``fn`` over ``rounds`` (after one warm-up call)."""
    fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    """Print the table of the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="3 rounds instead of 15")
    rounds = 3 if ap.parse_args().quick else 15
    print("| layers | step-net ops | ms | µs / step-net op | MLP µs / op (same count) | ratio |")
    print("|---:|---:|---:|---:|---:|---:|")
    for layers in LAYERS:
        net, n_step = lstm_stack(layers)
        t = best(lambda net=net: gradient_for_net(net, ["loss"]), rounds)
        ref = mlp(n_step)
        t_ref = best(lambda ref=ref: gradient_for_net(ref, ["loss"]), rounds)
        per = t / n_step * 1e6
        per_ref = t_ref / len(ref.op) * 1e6
        print(f"| {layers} | {n_step} | {t * 1e3:.2f} | {per:.1f} | {per_ref:.1f} | "
              f"{per / per_ref:.1f}× |")


if __name__ == "__main__":
    main()
