"""Regressions of stop 28 (items stop 27 noticed and left alone, mended).

* Sub-nets were not bounded: a body of 200,000 empty ``nets {}`` under one op (400 KB of
  binary) held a request for 1.7 s of walks before a 422, 2.4 s as JSON; a million of
  them cost about ten times that. ``NETGRAD_MAX_OPS`` now bounds the number of sub-nets
  too (413 ``too_many_subnets``), counted where their argument is reached, before any
  walk over them: in the binary and text decoders, before a small JSON body is decoded,
  and while a large JSON body streams in.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from google.protobuf import json_format, text_format

from api_schemas import caffe2_pb2, netgrad_pb2
from app.main import create_app
from app.settings import Settings
from core.errors import LimitExceededError
from core.proto import limits
from core.proto.jsonscan import JsonScan
from core.registry import make_op

B = {"content-type": "application/x-protobuf"}
T = {"content-type": "text/x-protobuf"}
J = {"content-type": "application/json"}


def _empty_nets_request(k: int, *, spread: bool = False) -> netgrad_pb2.NetGradientRequest:
    """A ``Do`` op whose ``net`` argument lists ``k`` empty NetDefs (``spread``: ``k`` ops
    with two empty sub-nets each, in the one sub-net of a ``Do`` at the top)."""
    req = netgrad_pb2.NetGradientRequest()
    do = make_op("Do", ["x"], ["y"])
    arg = do.arg.add(name="net")
    if spread:
        body = arg.n
        for _ in range(k):
            inner = make_op("Do", ["x"], ["y"])
            inner.arg.add(name="nets").nets.add()
            inner.arg[0].nets.add()
            body.op.append(inner)
    else:
        for _ in range(k):
            arg.nets.add()
    req.net.op.append(do)
    req.ys.add(blob="y")
    return req


def _encode(req: netgrad_pb2.NetGradientRequest, media: str) -> tuple[bytes, dict[str, str]]:
    if media == "binary":
        return req.SerializeToString(), B
    if media == "text":
        return text_format.MessageToString(req).encode(), T
    body = json_format.MessageToDict(req, preserving_proto_field_name=True)
    body["ys"] = [e["blob"] for e in body["ys"]]  # (JSON's list form)
    return json.dumps(body).encode(), J


def _code(r: object) -> str:
    return str(r.json()["errors"][0]["code"])  # type: ignore[attr-defined]


@pytest.mark.parametrize("media", ["binary", "text", "json"])
@pytest.mark.parametrize("spread", [False, True])
def test_more_sub_nets_than_max_ops_is_a_413_in_every_encoding(media: str,
                                                                spread: bool) -> None:
    with TestClient(create_app(Settings(workers=0, max_ops=50))) as c:
        # spread: 1 + 30 ops, 61 sub-nets; one list: 1 op, 51 sub-nets
        over = _empty_nets_request(30 if spread else 51, spread=spread)
        content, headers = _encode(over, media)
        r = c.post("/v1/gradients/net", content=content, headers=headers)
        assert r.status_code == 413, r.text
        assert _code(r) == "too_many_subnets", r.text
        assert "more than 50 sub-nets" in r.json()["errors"][0]["message"]
        # within the limit (spread: 25 ops, 49 sub-nets): past the count (another answer,
        # whatever the net's own problems)
        at = _empty_nets_request(24 if spread else 50, spread=spread)
        content, headers = _encode(at, media)
        r = c.post("/v1/gradients/net", content=content, headers=headers)
        assert r.status_code != 413, r.text


def test_a_large_json_body_of_sub_nets_is_refused_while_it_streams() -> None:
    settings = Settings(workers=0, max_ops=1_000, large_body_bytes=4 * 1024)
    with TestClient(create_app(settings)) as c:
        content, headers = _encode(_empty_nets_request(5_000), "json")
        assert len(content) > 4 * 1024
        r = c.post("/v1/gradients/net", content=content, headers=headers)
    assert r.status_code == 413, r.text
    assert _code(r) == "too_many_subnets"


def _scan(body: bytes, max_ops: int, size: int = 7) -> JsonScan:
    scan = JsonScan(max_ops=max_ops, max_depth=8, max_containers=10**6)
    for i in range(0, len(body), size):
        scan.feed(body[i:i + size])
    return scan


def test_the_json_scan_counts_sub_nets_apart_from_ops() -> None:
    content, _ = _encode(_empty_nets_request(30), "json")
    scan = _scan(content, max_ops=30)
    assert (scan.ops, scan.subnets) == (1, 30)
    with pytest.raises(LimitExceededError) as info:
        _scan(content, max_ops=29)
    assert info.value.problems[0].code == "too_many_subnets"


@pytest.mark.parametrize("check", ["binary", "json"])
def test_a_long_list_of_sub_nets_is_refused_before_any_is_walked(check: str) -> None:
    """The whole list is charged when its argument is reached: the walk never enters one
    (``visit`` would count it; here it counts nothing)."""
    req = _empty_nets_request(1_000)
    budget = limits.OpBudget(999)
    with pytest.raises(LimitExceededError) as info:
        if check == "binary":
            limits.check_depth(req.net, 128, budget)
        else:
            obj = json_format.MessageToDict(req.net, preserving_proto_field_name=True)
            limits.check_json_depth(obj, 128, budget=budget)
    assert info.value.problems[0].code == "too_many_subnets"
    assert budget.nets_left == 999 - 1_000


def test_the_text_pre_count_counts_sub_nets_and_ops_apart() -> None:
    nets = 'net { op { type: "Do" arg { name: "net" ' + "nets { } " * 40 + "} } }"
    limits.check_text_op_count(nets, 40)  # 40 sub-nets, 1 op: within
    with pytest.raises(LimitExceededError) as info:
        limits.check_text_op_count(nets, 39)
    assert info.value.problems[0].code == "too_many_subnets"
    ops = "net { " + 'op { type: "Relu" } ' * 40 + "}"
    with pytest.raises(LimitExceededError) as info:
        limits.check_text_op_count(ops, 39)
    assert info.value.problems[0].code == "too_many_ops"


def test_sub_nets_still_count_their_ops() -> None:
    """The sub-net count is beside the op count, not instead of it."""
    sub = caffe2_pb2.NetDef()
    for i in range(30):
        sub.op.append(make_op("Relu", [f"a{i}"], [f"a{i + 1}"]))
    net = caffe2_pb2.NetDef()
    do = make_op("Do", ["x"], ["y"])
    do.arg.add(name="net").n.CopyFrom(sub)
    net.op.append(do)
    run: Callable[[int], None] = lambda m: limits.check_depth(  # noqa: E731
        net, 128, limits.OpBudget(m, netgrad_pb2.NetGradientRequest(net=net)))
    run(31)
    with pytest.raises(LimitExceededError) as info:
        run(30)
    assert info.value.problems[0].code == "too_many_ops"
