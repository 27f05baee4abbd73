"""core.proto.limits: nesting depth of sub-nets, on messages, JSON objects and wire bytes."""

from __future__ import annotations

from typing import Any

import pytest

from api_schemas import caffe2_pb2
from core.errors import LimitExceededError
from core.proto import codec
from core.proto.limits import (
    DECODER_MAX_DEPTH,
    check_depth,
    check_json_depth,
    check_wire_depth,
    effective_max_depth,
)


def _if_do_net() -> dict[str, Any]:
    """op[3] is an If whose then_net's op[0] is a Do around an Add (depth 2)."""
    do = {
        "type": "Do",
        "input": ["a", "W"],
        "output": ["b", "W"],
        "arg": [
            {"name": "net", "n": {"op": [{"type": "Relu", "input": ["a"], "output": ["b"]}]}},
        ],
    }
    then_net = {"name": "then", "op": [do]}
    else_net = {"name": "else", "op": [{"type": "Copy", "input": ["a"], "output": ["b"]}]}
    return {
        "op": [
            {"type": "ConstantFill", "output": ["a"]},
            {"type": "ConstantFill", "output": ["c"]},
            {"type": "CreateScope", "output": ["W"]},
            {
                "type": "If",
                "input": ["c", "a", "W"],
                "output": ["b", "W"],
                "arg": [
                    {"name": "then_net", "n": then_net},
                    {"name": "else_net", "n": else_net},
                ],
            },
        ]
    }


def _checks(obj: dict[str, Any], max_depth: int) -> list[str]:
    """Run the three checkers; return their error paths ('' = no error)."""
    msg = codec.from_json_obj(obj, caffe2_pb2.NetDef)
    paths = []
    for fn in (
        lambda: check_depth(msg, max_depth),
        lambda: check_json_depth(obj, max_depth),
        lambda: check_wire_depth(msg.SerializeToString(), max_depth),
    ):
        try:
            fn()
            paths.append("")
        except LimitExceededError as exc:
            (p,) = exc.problems
            assert p.code == "nesting_too_deep"
            paths.append(p.path or "?")
    return paths


def test_depth_two_passes_at_limit_two() -> None:
    assert _checks(_if_do_net(), 2) == ["", "", ""]


def test_paths_name_the_first_too_deep_subnet() -> None:
    assert _checks(_if_do_net(), 1) == ["op[3]:If/then_net/op[0]:Do/net"] * 3
    assert _checks(_if_do_net(), 0) == ["op[3]:If/then_net"] * 3


def test_error_locates_the_op() -> None:
    msg = codec.from_json_obj(_if_do_net(), caffe2_pb2.NetDef)
    with pytest.raises(LimitExceededError) as info:
        check_depth(msg, 1)
    (p,) = info.value.problems
    assert (p.op_index, p.op_type) == (0, "Do")


def test_nets_list_arguments_are_followed() -> None:
    inner = {"op": [{"type": "Relu", "input": ["x"], "output": ["y"]}]}
    net = {"op": [{"type": "Custom", "arg": [{"name": "bodies", "nets": [inner, inner]}]}]}
    assert _checks(net, 1) == ["", "", ""]
    assert _checks(net, 0) == ["op[0]:Custom/bodies[0]"] * 3


def test_single_operator_is_op_zero() -> None:
    op_obj = _if_do_net()["op"][3]
    op = codec.from_json_obj(op_obj, caffe2_pb2.OperatorDef)
    for fn in (
        lambda: check_depth(op, 1),
        lambda: check_json_depth(op_obj, 1, is_op=True),
        lambda: check_wire_depth(op.SerializeToString(), 1, is_op=True),
    ):
        with pytest.raises(LimitExceededError) as info:
            fn()
        assert info.value.problems[0].path == "op[0]:If/then_net/op[0]:Do/net"


def test_malformed_wire_bytes_are_left_to_the_decoder() -> None:
    data = codec.from_json_obj(_if_do_net(), caffe2_pb2.NetDef).SerializeToString()
    check_wire_depth(data[:-5], 0)  # truncated: no verdict, no crash
    check_wire_depth(b"\xff\xff\xff", 0)


def test_effective_max_depth_is_capped_by_the_decoders() -> None:
    assert effective_max_depth(5) == 5
    assert effective_max_depth(DECODER_MAX_DEPTH + 50) == DECODER_MAX_DEPTH
    assert effective_max_depth(-3) == 0


def test_decoder_cap_really_decodes() -> None:
    # A net nested exactly DECODER_MAX_DEPTH levels, inside a request message, still parses.
    from api_schemas import netgrad_pb2

    net = caffe2_pb2.NetDef()
    cur = net
    for _ in range(DECODER_MAX_DEPTH):
        arg = cur.op.add(type="Do").arg.add(name="net")
        cur = arg.n
    leaf = cur.op.add(type="Relu").arg.add(name="t")
    leaf.t.device_detail.device_id = 1
    req = netgrad_pb2.NetGradientRequest(net=net)
    codec.from_binary(req.SerializeToString(), netgrad_pb2.NetGradientRequest)
    codec.from_json_obj(codec.to_json_obj(net), caffe2_pb2.NetDef)
