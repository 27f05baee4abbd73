"""The JSON mapping of Caffe2 messages: protobuf's json_format plus the Argument text rule.

Round trips are exact (binary-identical messages), other spellings json_format accepts give
the canonical message, and everything json_format refuses is a DecodeError (a 400).
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest

from api_schemas import caffe2_pb2
from app.api import docs
from core.errors import DecodeError
from core.proto import codec, jsonmap
from tests.conftest import SHARED_DIR

REAL_NETS = [
    "model_zoo__resnet50__predict_net.pbtxt",
    "model_zoo__inception_v2__predict_net.pbtxt",
    "model_zoo__mask_rcnn_2go_fp32__model.pbtxt",
]


def _odd_net() -> caffe2_pb2.NetDef:
    """A net using every kind of field: enums, bytes, int64 extremes, float specials."""
    net = caffe2_pb2.NetDef(name="odd", type="dag", num_workers=3)
    op = net.op.add(type="Custom", input=["a", "b"], output=["c"], is_gradient_op=False,
                    engine="E", control_input=["z"], op_version=-(2**63), domain="d")
    op.device_option.device_type = 1
    op.device_option.random_seed = 2**32 - 1
    op.arg.add(name="f", f=0.1)
    op.arg.add(name="nan", f=math.nan)
    op.arg.add(name="inf", floats=[math.inf, -math.inf, 1e-30, 3.0])
    op.arg.add(name="i", i=2**63 - 1)
    op.arg.add(name="ints", ints=[-1, 0, 2**40])
    op.arg.add(name="s", s="naïve NCHW".encode())
    op.arg.add(name="strings", strings=[b"x", "ü".encode()])
    t = op.arg.add(name="t").t
    t.dims.extend([2, 1])
    t.data_type = caffe2_pb2.TensorProto.DOUBLE
    t.double_data.extend([1.5, math.nan])
    t.byte_data = b"\x00\xff"
    t.string_data.extend([b"\x01", b""])
    t.segment.begin, t.segment.end = 0, 2
    q = op.arg.add(name="q").qtensors.add(precision=8, scale=0.5, bias=0.0, is_signed=True)
    q.data.extend([1, -2])
    op.arg.add(name="sub", n=caffe2_pb2.NetDef(op=[caffe2_pb2.OperatorDef(type="Relu")]))
    net.partition_info.add(name="p", device_id=[0, 1])
    net.external_input.append("a")
    return net


def _nets(shared_dir: Path | None) -> list[caffe2_pb2.NetDef]:
    nets = [_odd_net(), codec.from_json_obj(docs.IF_TUTORIAL_NET, caffe2_pb2.NetDef)]
    if shared_dir is not None:
        for name in REAL_NETS:
            path = shared_dir / "realnets" / name
            if path.exists():
                nets.append(codec.from_text(path.read_text(), caffe2_pb2.NetDef))
    return nets


@pytest.fixture(scope="module")
def nets() -> list[caffe2_pb2.NetDef]:
    return _nets(SHARED_DIR if SHARED_DIR.is_dir() else None)


def test_round_trips_are_exact(nets: list[caffe2_pb2.NetDef]) -> None:
    for net in nets:
        obj = json.loads(json.dumps(jsonmap.to_json(net)))
        kept = copy.deepcopy(obj)
        back = jsonmap.from_json(obj, caffe2_pb2.NetDef)
        assert back.SerializeToString(deterministic=True) == net.SerializeToString(
            deterministic=True)
        assert obj == kept  # the input is not modified


def test_json_uses_proto_field_names_and_int64_strings() -> None:
    op = caffe2_pb2.OperatorDef(type="X", control_input=["a"], is_gradient_op=True)
    op.arg.add(name="ints", ints=[1, 2**40])
    obj = jsonmap.to_json(op)
    assert obj["control_input"] == ["a"] and obj["is_gradient_op"] is True
    assert obj["arg"][0]["ints"] == ["1", str(2**40)]


@pytest.mark.parametrize(
    "op",
    [
        {"type": "X", "controlInput": ["a"], "isGradientOp": True},  # lowerCamelCase names
        {"type": "X", "arg": [{"name": "i", "i": 5}, {"name": "j", "ints": [1, "2", -3]}]},
        {"type": "X", "arg": [{"name": "f", "f": "NaN"}, {"name": "g", "floats": [1, "Infinity"]}]},
        {"type": "X", "arg": [{"name": "f", "f": 1}, {"name": "g", "floats": [True, 2.5]}]},
        {"type": "X", "arg": [{"name": "t", "t": {"byte_data": "AP8=", "data_type": "DOUBLE"}}]},
        {"type": "X", "arg": [{"name": "t", "t": {"data_type": 2, "int64_data": ["7"]}}]},
        {"type": "X", "name": None, "input": None, "arg": [{"name": "n", "n": None}]},
        {"type": "X", "device_option": {"device_type": "1"}},
        {"type": "X", "arg": [{"name": "i", "i": 3.0}]},
        {"type": "X", "arg": [{"name": "s", "s": "x", "strings": []}]},
    ],
)
def test_other_spellings_round_trip_to_the_same_message(op: dict[str, Any]) -> None:
    msg = jsonmap.from_json(op, caffe2_pb2.OperatorDef)
    assert msg.type == "X"
    again = jsonmap.from_json(jsonmap.to_json(msg), caffe2_pb2.OperatorDef)
    assert again.SerializeToString(deterministic=True) == msg.SerializeToString(
        deterministic=True)


@pytest.mark.parametrize(
    "op",
    [
        {"type": "X", "input": "abc"},  # a string where a list belongs
        {"type": "X", "is_gradient_op": 1},  # a number for a bool
        {"type": 5},
        {"type": "X", "inputs": ["a"]},  # unknown field
        {"type": "X", "arg": [{"name": "f", "f": 1e39}]},  # beyond float32
        {"type": "X", "arg": [{"name": "f", "floats": [1.0, 1e39]}]},
        {"type": "X", "arg": [{"name": "f", "f": float("nan")}]},  # bare NaN
        {"type": "X", "arg": [{"name": "f", "f": 10**400}]},
        {"type": "X", "arg": [{"name": "i", "i": True}]},
        {"type": "X", "arg": [{"name": "i", "i": 2**63}]},
        {"type": "X", "arg": [{"name": "i", "ints": [1, None]}]},
        {"type": "X", "arg": [{"name": "i", "i": "1.5"}]},
        {"type": "X", "arg": [{"name": "s", "s": 5}]},
        {"type": "X", "arg": [{"name": "s", "strings": "ab"}]},
        {"type": "X", "arg": [{"name": "s", "s": "\udc80"}]},
        {"type": "X", "arg": [{"name": "n", "n": [1]}]},
        {"type": "X", "arg": {"name": "a"}},
        {"type": "\udc80"},
        ["not", "an", "object"],
    ],
)
def test_what_json_format_refuses_is_a_decode_error(op: Any) -> None:
    with pytest.raises(DecodeError):
        jsonmap.from_json(op, caffe2_pb2.OperatorDef)


def test_text_fields_are_text_both_ways() -> None:
    arg = caffe2_pb2.Argument(name="order", s=b"NCHW", strings=[b"data", "é".encode()])
    assert jsonmap.to_json(arg) == {"name": "order", "s": "NCHW", "strings": ["data", "é"]}
    assert jsonmap.from_json(jsonmap.to_json(arg), caffe2_pb2.Argument) == arg
    with pytest.raises(DecodeError, match="not UTF-8"):
        jsonmap.to_json(caffe2_pb2.Argument(s=b"\xff"))
