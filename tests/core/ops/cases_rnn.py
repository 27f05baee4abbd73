"""Numeric gradient cases of the recurrent cells (core/ops/rnn_cells.py).

N=3 rows, D=2. At ``timestep`` 1 with ``seq_lengths`` [3, 1, 0] row 0 is valid and rows 1
and 2 are past their sequence end, so both branches (computed row, copied or dropped
state) are checked in one case.
"""

from __future__ import annotations

import numpy as np

from tests.core.ops.opcase import OpCase, OpInput, const

N, D = 3, 2
LENGTHS = OpInput("seq_lengths", (N,), const([3, 1, 0], np.int32))
T1 = OpInput("timestep", (1,), const([1], np.int32))


def _lstm(args: dict[str, object], ids: str, lengths: bool = True) -> list[OpCase]:
    ins = [OpInput("h_prev", (1, N, D)), OpInput("c_prev", (1, N, D)),
           OpInput("gates", (1, N, 4 * D))]
    ins += [LENGTHS, T1] if lengths else [T1]
    return [
        OpCase("LSTMUnit", ins, ["h", "c"], args=args, outputs_with_grads=(0, 1), id=ids),
        OpCase("LSTMUnit", ins, ["h", "c"], args=args, outputs_with_grads=(0,),
               id=ids + "_hidden_only"),
    ]


def _gru(args: dict[str, object], ids: str, lengths: bool = True) -> OpCase:
    ins = [OpInput("h_prev", (1, N, D)), OpInput("gates", (1, N, 3 * D))]
    ins += [LENGTHS, T1] if lengths else [T1]
    return OpCase("GRUUnit", ins, ["h"], args=args, id=ids)


CASES: list[OpCase] = [
    *_lstm({}, ""),
    *_lstm({"drop_states": 1, "forget_bias": 1.0}, "_drop_states_forget_bias"),
    *_lstm({"sequence_lengths": 0}, "_no_lengths", lengths=False),
    _gru({}, ""),
    _gru({"drop_states": 1}, "_drop_states"),
    _gru({"sequence_lengths": 0}, "_no_lengths", lengths=False),
]
