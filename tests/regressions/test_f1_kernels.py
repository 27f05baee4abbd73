"""Review f1, finding 5: forward kernels validate what their gradient kernels need, and a bad
input gets a clear message naming the op, never a raw Python exception text."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from api_schemas import caffe2_pb2
from core.api import gradient_for_net
from core.errors import ExecutionError
from core.executor.executor import execute
from core.proto.codec import from_json_obj

NetDef = caffe2_pb2.NetDef
RAW = ("ValueError", "OverflowError", "cannot reshape", "cannot convert", "TypeError")


def _net(ops: list[dict[str, Any]]) -> NetDef:
    net: NetDef = from_json_obj({"op": ops}, NetDef)
    return net


def _forward_and_gradient(ops: list[dict[str, Any]], feeds: dict[str, np.ndarray],
                          ys: list[str]) -> dict[str, np.ndarray]:
    net = _net(ops)
    out = execute(net, feeds)
    gen = gradient_for_net(net, {y: y + "_grad" for y in ys})
    gnet = NetDef()
    gnet.op.extend(gen.grad_ops)
    seeds = {y + "_grad": np.ones_like(out[y]) for y in ys}
    got: dict[str, np.ndarray] = execute(gnet, {**feeds, **out, **seeds})
    return got


def _rois(t: str) -> np.ndarray:
    row = [0, np.nan, 0, 1, 1] + ([0] if t == "RoIAlignRotated" else [])
    return np.array([row], dtype=np.float64)


REFUSED = [
    ("Col2Im", [{"type": "Col2Im", "input": ["c", "z"], "output": ["y"],
                 "arg": [{"name": "kernel", "i": 2}]}],
     {"c": np.ones(16), "z": np.ones((1, 1, 3, 3))}, "cols must have Im2Col's shape"),
    ("BatchPermutation", [{"type": "BatchPermutation", "input": ["x", "i"], "output": ["y"]}],
     {"x": np.ones((3, 2)), "i": np.array([0, 1], dtype=np.int32)},
     "one index per batch row"),
    ("LSTMUnit", [{"type": "LSTMUnit", "input": ["h", "c", "g", "l", "t"],
                   "output": ["h2", "c2"], "arg": [{"name": "sequence_lengths", "i": 0}]}],
     {"h": np.ones((1, 2, 3)), "c": np.ones((1, 2, 3)), "g": np.ones((1, 2, 12)),
      "l": np.array([1, 1], dtype=np.int32), "t": np.array([0], dtype=np.int32)},
     "with sequence_lengths=0 it takes 4 inputs, got 5"),
    ("UpsampleBilinear", [{"type": "UpsampleBilinear", "input": ["x", "s"], "output": ["y"]}],
     {"x": np.ones((1, 1, 2, 2)), "s": np.array([np.inf, 2.0], dtype=np.float32)},
     "scales must be finite and > 0"),
    *[(t, [{"type": t, "input": ["x", "r"], "output": ["y", "am"][: 1 if t ==
                                                                 "RoIAlignRotated" else 2],
            "arg": [{"name": "pooled_h", "i": 2}, {"name": "pooled_w", "i": 2},
                    {"name": "group_size", "i": 2}, {"name": "output_dim", "i": 1}]}],
       {"x": np.ones((1, 4, 4, 4)), "r": _rois(t)}, "rois must be finite")
      for t in ("RoIPool", "PSRoIPool", "RoIAlignRotated")],
]


@pytest.mark.parametrize(("op_type", "ops", "feeds", "fragment"), REFUSED,
                         ids=[r[0] for r in REFUSED])
def test_forward_refuses_what_the_gradient_cannot_take(
        op_type: str, ops: list[dict[str, Any]], feeds: dict[str, np.ndarray],
        fragment: str) -> None:
    with pytest.raises(ExecutionError) as info:
        execute(_net(ops), feeds)
    msg = info.value.message
    assert fragment in msg and f"op[0]:{op_type}" in msg
    assert not any(r in msg for r in RAW), msg


EMPTY = [
    ("GroupNorm", [{"type": "GroupNorm", "input": ["x", "g", "b"], "output": ["y", "m", "s"],
                    "arg": [{"name": "group", "i": 2}]}],
     {"x": np.zeros((0, 4, 2, 2)), "g": np.ones(4), "b": np.zeros(4)}, ["y"], "x"),
    ("CosineSimilarity", [{"type": "CosineSimilarity", "input": ["a", "b"], "output": ["y"]}],
     {"a": np.zeros((0, 3)), "b": np.zeros((0, 3))}, ["y"], "a"),
    ("RMSNorm", [{"type": "RMSNorm", "input": ["x", "g", "b"], "output": ["y", "r"],
                  "arg": [{"name": "axis", "i": 1}]}],
     {"x": np.zeros((0, 3)), "g": np.ones(3), "b": np.zeros(3)}, ["y"], "x"),
]


@pytest.mark.parametrize(("op_type", "ops", "feeds", "ys", "x"), EMPTY, ids=[e[0] for e in EMPTY])
def test_an_empty_batch_runs_forward_and_backward(
        op_type: str, ops: list[dict[str, Any]], feeds: dict[str, np.ndarray], ys: list[str],
        x: str) -> None:
    got = _forward_and_gradient(ops, feeds, ys)
    assert got[f"{x}_grad"].shape == feeds[x].shape
