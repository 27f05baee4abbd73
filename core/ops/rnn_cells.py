"""Recurrent cells: ``LSTMUnit`` and ``GRUUnit``, their gradient makers and kernels.

Source: Caffe2 ``lstm_unit_op.h/.cc`` and ``gru_unit_op.h/.cc`` (the ops ``rnn_cell.LSTM``
and ``rnn_cell.GRU`` put in a ``RecurrentNetwork`` step net). Shapes: ``N`` = batch,
``D`` = hidden size; states are ``[1, N, D]`` (any shape ``[..., N, D]`` whose last two
dimensions are ``N, D``), gates ``[1, N, 4D]`` (LSTM: input, forget, output, cell
candidate) or ``[1, N, 3D]`` (GRU: reset, update, output). ``seq_lengths`` is int32 ``[N]``
(absent when the ``sequence_lengths`` argument is 0); ``timestep`` is int32 ``[1]``.

Row ``n`` is *valid* at step ``t`` when ``t < seq_lengths[n]`` (always, without lengths).
An invalid row copies the previous state through (or writes zeros with ``drop_states``);
its gates get a zero gradient. Float dtypes are kept; the maths is Caffe2's, with NumPy's
``tanh`` and an overflow-free sigmoid.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from api_schemas import caffe2_pb2
from core.errors import ExecutionError
from core.ops._args import get_bool, get_float
from core.registry import (
    GradientMaker,
    GradientStatus,
    make_arg,
    register_gradient,
    register_kernel,
    register_op,
    schema,
)

OperatorDef = caffe2_pb2.OperatorDef
Array = np.ndarray

register_op(
    "LSTM",
    status=GradientStatus.NOT_IMPLEMENTED,
    doc="whole-sequence LSTM op: not implemented in netgrad (use rnn_cell's "
    "RecurrentNetwork + LSTMUnit, which netgrad differentiates)",
)


def _sigmoid(x: Array) -> Array:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _valid_rows(op: OperatorDef, inputs: Sequence[Array], lengths_at: int, n: int) -> Array:
    """Bool ``[N, 1]``: rows valid at this step (Caffe2: ``t < seqLengths[n]``)."""
    has_lengths = get_bool(op, "sequence_lengths", True)
    t_at = lengths_at + (1 if has_lengths else 0)
    if len(inputs) <= t_at:
        raise ExecutionError(
            f"{op.type}: missing input {t_at} (timestep); with sequence_lengths="
            f"{int(has_lengths)} the inputs are hidden_t_prev, "
            f"{'cell_t_prev, ' if op.type.startswith('LSTM') else ''}gates, "
            f"{'seq_lengths, ' if has_lengths else ''}timestep"
        )
    ts = np.asarray(inputs[t_at]).reshape(-1)
    if ts.size < 1 or ts.dtype.kind not in "iu":
        raise ExecutionError(f"{op.type}: timestep must be an integer tensor with one value")
    t = int(ts[0])
    if not has_lengths:
        return np.ones((n, 1), dtype=bool)
    lengths = np.asarray(inputs[lengths_at]).reshape(-1)
    if lengths.size != n:
        raise ExecutionError(
            f"{op.type}: seq_lengths has {lengths.size} entries for a batch of {n}"
        )
    return (t < lengths.astype(np.int64)).reshape(n, 1)


def _forward_arity(op: OperatorDef, inputs: Sequence[Array], lengths_at: int) -> None:
    """Exactly ``lengths_at + 2`` inputs with ``sequence_lengths`` (default), else one fewer.

    Caffe2's unit ops read the timestep at a position fixed by ``sequence_lengths``; an extra
    input was ignored by the forward kernel but shifted the gradient op's inputs (review f1).
    """
    has_lengths = get_bool(op, "sequence_lengths", True)
    want = lengths_at + (2 if has_lengths else 1)
    if len(inputs) != want:
        raise ExecutionError(
            f"{op.type}: with sequence_lengths={int(has_lengths)} it takes {want} inputs, got "
            f"{len(inputs)}; give seq_lengths only when sequence_lengths is 1 (the default)"
        )


def _state(op: OperatorDef, x: Array, what: str) -> tuple[int, int]:
    if x.ndim < 2:
        raise ExecutionError(f"{op.type}: {what} must be [..., N, D], got shape {list(x.shape)}")
    return int(x.shape[-2]), int(x.shape[-1])


def _gates(op: OperatorDef, g: Array, n: int, d: int, k: int) -> Array:
    if g.size != n * k * d:
        raise ExecutionError(
            f"{op.type}: gates must hold N x {k}D = {n} x {k * d} values, got shape "
            f"{list(g.shape)}"
        )
    return g.reshape(n, k, d)


# --- LSTMUnit ---------------------------------------------------------------------------------
# i = σ(X_i), f = σ(X_f + forget_bias), o = σ(X_o), g = tanh(X_g)
# C = f·C_prev + i·g,  H = o·tanh(C)                        (valid rows)
# C = C_prev, H = H_prev  (or zeros with drop_states)         (invalid rows)


@register_kernel("LSTMUnit", op_schema=schema((4, 5), 2))
def lstm_unit(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[hidden_t_prev, cell_t_prev, gates, (seq_lengths,) timestep] -> [hidden_t, cell_t]``."""
    _forward_arity(op, inputs, 3)
    h_prev, c_prev, x = (np.asarray(a) for a in inputs[:3])
    n, d = _state(op, c_prev, "cell_t_prev")
    if h_prev.shape != c_prev.shape:
        raise ExecutionError(f"{op.type}: hidden_t_prev and cell_t_prev differ in shape")
    valid = _valid_rows(op, inputs, 3, n)
    bias = get_float(op, "forget_bias", 0.0)
    drop = get_bool(op, "drop_states", False)
    g4 = _gates(op, x, n, d, 4)
    i, f, o = _sigmoid(g4[:, 0]), _sigmoid(g4[:, 1] + bias), _sigmoid(g4[:, 2])
    g = np.tanh(g4[:, 3])
    cp = c_prev.reshape(n, d)
    hp = h_prev.reshape(n, d)
    c = f * cp + i * g
    h = o * np.tanh(c)
    keep_c = np.zeros_like(cp) if drop else cp
    keep_h = np.zeros_like(hp) if drop else hp
    c = np.where(valid, c, keep_c).astype(c_prev.dtype, copy=False)
    h = np.where(valid, h, keep_h).astype(c_prev.dtype, copy=False)
    return [h.reshape(c_prev.shape), c.reshape(c_prev.shape)]


@register_gradient("LSTMUnit", op_schema=schema((4, 5), 2))
def lstm_unit_grad(m: GradientMaker) -> list[OperatorDef]:
    """``LSTMUnitGradient([h_prev, c_prev, gates, (lengths,) t, h, c, dh, dc] -> [dh_prev,
    dc_prev, dgates])`` (Caffe2 ``GetLSTMUnitGradient``); a missing output gradient is zeros."""
    ops, go = _output_grads(m, 2)
    n_in = len(m.input_names)
    ins = [m.I(k) for k in range(n_in)]
    ops.append(m.make_op("LSTMUnitGradient", [*ins, m.O(0), m.O(1), *go],
                         [m.GI(0), m.GI(1), m.GI(2)]))
    return ops


def _output_grads(m: GradientMaker, k: int) -> tuple[list[OperatorDef], list[str]]:
    """Output gradients, zeros (``ConstantFill`` like the output) where none arrives."""
    ops: list[OperatorDef] = []
    go: list[str] = []
    for j in range(k):
        if m.has_go(j):
            go.append(m.GO(j))
            continue
        zero = f"_{m.O(j)}_grad_zero"
        ops.append(m.make_op("ConstantFill", [m.O(j)], [zero], [make_arg("value", 0.0)]))
        go.append(zero)
    return ops, go


@register_kernel("LSTMUnitGradient", gradient_op=True)
def lstm_unit_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """Caffe2 ``LSTMUnitGradient``: the valid-row ``dh_prev`` is 0 (H_prev is not read)."""
    has_lengths = get_bool(op, "sequence_lengths", True)
    base = 4 + (1 if has_lengths else 0)
    if len(inputs) != base + 4:
        raise ExecutionError(f"{op.type}: expected {base + 4} inputs, got {len(inputs)}")
    h_prev, c_prev, x = (np.asarray(a) for a in inputs[:3])
    c_out, dh, dc = (np.asarray(a) for a in (inputs[base + 1], inputs[base + 2],
                                                inputs[base + 3]))
    n, d = _state(op, c_prev, "cell_t_prev")
    valid = _valid_rows(op, inputs, 3, n)
    bias = get_float(op, "forget_bias", 0.0)
    drop = get_bool(op, "drop_states", False)
    g4 = _gates(op, x, n, d, 4)
    i, f, o = _sigmoid(g4[:, 0]), _sigmoid(g4[:, 1] + bias), _sigmoid(g4[:, 2])
    g = np.tanh(g4[:, 3])
    cp = c_prev.reshape(n, d)
    c = c_out.reshape(n, d)
    dh2, dc2 = dh.reshape(n, d), dc.reshape(n, d)
    tc = np.tanh(c)
    dct = dc2 + dh2 * o * (1 - tc * tc)
    dgates = np.stack(
        [dct * g * i * (1 - i), dct * cp * f * (1 - f), dh2 * tc * o * (1 - o),
         dct * i * (1 - g * g)],
        axis=1,
    )
    dgates = np.where(valid[:, :, None], dgates, 0.0)
    zero = np.zeros_like(cp)
    pass_h = zero if drop else dh2
    pass_c = zero if drop else dc2
    dh_prev = np.where(valid, zero, pass_h)
    dc_prev = np.where(valid, dct * f, pass_c)
    dt = c_prev.dtype
    return [
        dh_prev.astype(dt, copy=False).reshape(h_prev.shape),
        dc_prev.astype(dt, copy=False).reshape(c_prev.shape),
        dgates.astype(x.dtype, copy=False).reshape(x.shape),
    ]


# --- GRUUnit ----------------------------------------------------------------------------------
# u = σ(X_update), o = tanh(X_output);  H = u·H_prev + (1 - u)·o   (valid rows)
# The reset part of the gates is not read here (rnn_cell applies it before, in the step net).


@register_kernel("GRUUnit", op_schema=schema((3, 4), 1))
def gru_unit(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[hidden_t_prev, gates, (seq_lengths,) timestep] -> [hidden_t]``."""
    _forward_arity(op, inputs, 2)
    h_prev, x = np.asarray(inputs[0]), np.asarray(inputs[1])
    n, d = _state(op, h_prev, "hidden_t_prev")
    valid = _valid_rows(op, inputs, 2, n)
    drop = get_bool(op, "drop_states", False)
    g3 = _gates(op, x, n, d, 3)
    u, o = _sigmoid(g3[:, 1]), np.tanh(g3[:, 2])
    hp = h_prev.reshape(n, d)
    h = hp * u + o * (1 - u)
    h = np.where(valid, h, np.zeros_like(hp) if drop else hp)
    return [h.astype(h_prev.dtype, copy=False).reshape(h_prev.shape)]


@register_gradient("GRUUnit", op_schema=schema((3, 4), 1))
def gru_unit_grad(m: GradientMaker) -> list[OperatorDef]:
    """``GRUUnitGradient([h_prev, gates, (lengths,) t, h, dh] -> [dh_prev, dgates])``
    (Caffe2 ``GetGRUUnitGradient``)."""
    ops, go = _output_grads(m, 1)
    ins = [m.I(k) for k in range(len(m.input_names))]
    ops.append(m.make_op("GRUUnitGradient", [*ins, m.O(0), *go], [m.GI(0), m.GI(1)]))
    return ops


@register_kernel("GRUUnitGradient", gradient_op=True)
def gru_unit_gradient(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """Caffe2 ``GRUUnitGradient``; the reset gate's gradient is 0 (not read by GRUUnit)."""
    has_lengths = get_bool(op, "sequence_lengths", True)
    base = 3 + (1 if has_lengths else 0)
    if len(inputs) != base + 2:
        raise ExecutionError(f"{op.type}: expected {base + 2} inputs, got {len(inputs)}")
    h_prev, x, dh = np.asarray(inputs[0]), np.asarray(inputs[1]), np.asarray(inputs[base + 1])
    n, d = _state(op, h_prev, "hidden_t_prev")
    valid = _valid_rows(op, inputs, 2, n)
    drop = get_bool(op, "drop_states", False)
    g3 = _gates(op, x, n, d, 3)
    u, o = _sigmoid(g3[:, 1]), np.tanh(g3[:, 2])
    hp, dh2 = h_prev.reshape(n, d), dh.reshape(n, d)
    zero = np.zeros_like(hp)
    dgates = np.stack(
        [zero, (dh2 * hp - dh2 * o) * u * (1 - u), dh2 * (1 - u) * (1 - o * o)], axis=1
    )
    dgates = np.where(valid[:, :, None], dgates, 0.0)
    dh_prev = np.where(valid, dh2 * u, zero if drop else dh2)
    return [
        dh_prev.astype(h_prev.dtype, copy=False).reshape(h_prev.shape),
        dgates.astype(x.dtype, copy=False).reshape(x.shape),
    ]
