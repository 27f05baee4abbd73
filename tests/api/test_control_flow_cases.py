"""Issue 3 acceptance: the nets of control-flow-cases §2-§5 and §9 get a gradient over HTTP,
in JSON and in binary, with the same answer either way."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from api_schemas import caffe2_pb2, netgrad_pb2
from core.proto import codec
from tests.api.helpers import PB
from tests.conformance.cases import (
    brew_cond_net,
    brew_loop_net,
    do_op_net,
    if_tutorial_net,
    reuse_workspace_net,
)

# §3's Add reads only blobs local to the re-used workspace, so no outer blob has a gradient:
# the answer is the seed alone (no gradient Do), which the test checks as such.
CASES: list[tuple[str, Callable[[], caffe2_pb2.NetDef], str, str | None]] = [
    ("§2 Do", do_op_net, "outer_Z", "Do"),
    ("§3 reuse_workspace", reuse_workspace_net, "outer_Z", None),
    ("§4 brew cond", brew_cond_net, "output_blob", "If"),
    ("§5 brew loop", brew_loop_net, "output_blob", "While"),
    ("§9 tutorial If", if_tutorial_net, "z", "If"),
]


@pytest.mark.parametrize(("name", "build", "y", "control"), CASES, ids=[c[0] for c in CASES])
def test_case_gets_a_gradient_in_json_and_binary(
    client: TestClient,
    name: str,
    build: Callable[[], caffe2_pb2.NetDef],
    y: str,
    control: str | None,
) -> None:
    net = build()
    rj = client.post("/v1/gradients/net", json={"net": codec.to_json_obj(net), "ys": [y]})
    assert rj.status_code == 200, rj.text
    body = rj.json()
    if control is None:
        assert [op["type"] for op in body["grad_ops"]] == ["ConstantFill"]
    else:
        assert any(op["type"] == control and op.get("is_gradient_op") for op in body["grad_ops"])
    assert y in body["grad_map"]
    req = netgrad_pb2.NetGradientRequest()
    req.net.CopyFrom(net)
    req.ys.add(blob=y)
    rb = client.post("/v1/gradients/net", content=req.SerializeToString(),
                     headers={"Content-Type": PB, "Accept": PB})
    assert rb.status_code == 200, rb.text
    msg = codec.from_binary(rb.content, netgrad_pb2.NetGradientResponse)
    assert [codec.to_json_obj(op) for op in msg.grad_ops] == body["grad_ops"]
    assert [e.blob for e in msg.grad_map] == list(body["grad_map"])
