"""Two server processes with different PYTHONHASHSEED answer the same requests byte for byte."""

from __future__ import annotations

import json
from typing import Any

import httpx

from api_schemas import caffe2_pb2, netgrad_pb2
from core.proto import codec
from tests.api.helpers import PB, do_request, do_request_pb
from tests.api.live_server import live_server

#: X feeds four ops and `a` two, so their gradients are accumulated (autosplit + Sum).
ACCUMULATING_NET: dict[str, Any] = {
    "name": "fanout",
    "op": [
        {"type": "Relu", "input": ["X"], "output": ["a"]},
        {"type": "Sigmoid", "input": ["X"], "output": ["b"]},
        {"type": "Tanh", "input": ["X"], "output": ["c"]},
        {"type": "Mul", "input": ["a", "X"], "output": ["d"]},
        {"type": "Add", "input": ["a", "b"], "output": ["e"]},
        {"type": "Sum", "input": ["c", "d", "e"], "output": ["y"]},
    ],
    "external_input": ["X"],
    "external_output": ["y"],
}


def _requests() -> list[tuple[str, bytes, dict[str, str]]]:
    net_json = json.dumps({"net": ACCUMULATING_NET, "ys": ["y"], "return_net": True}).encode()
    net_pb = netgrad_pb2.NetGradientRequest(
        net=codec.from_json_obj(ACCUMULATING_NET, caffe2_pb2.NetDef), return_net=True
    )
    net_pb.ys.add(blob="y")
    js = {"Content-Type": "application/json"}
    pb = {"Content-Type": PB, "Accept": PB}
    return [
        ("/v1/gradients/net", net_json, js),
        ("/v1/gradients/net", net_pb.SerializeToString(), pb),
        ("/v1/gradients/op", json.dumps(do_request()).encode(), js),
        ("/v1/gradients/op", do_request_pb().SerializeToString(), pb),
        ("/v1/operators", b"", {}),
    ]


def _answers(url: str) -> list[bytes]:
    out = []
    with httpx.Client(base_url=url, timeout=30.0) as c:
        for path, body, headers in _requests():
            if body:
                r = c.post(path, content=body, headers=headers)
            else:
                r = c.get(path)
            assert r.status_code == 200, (path, r.text[:1000])
            out.append(r.content)
    return out


def test_answers_do_not_depend_on_hash_seed() -> None:
    with live_server({"PYTHONHASHSEED": "1"}) as url_a:
        first = _answers(url_a)
    with live_server({"PYTHONHASHSEED": "4242"}) as url_b:
        second = _answers(url_b)
    assert first == second
    # The net really accumulates: more than one gradient flows into X.
    body = json.loads(first[0])
    assert any(op["type"] == "Sum" and op["output"] == ["X_grad"] for op in body["grad_ops"])
