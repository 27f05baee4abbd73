"""Issue 3: 64 levels of lowered If/While/Do nesting work over HTTP, in JSON and binary.

The default limit (128) counts sub-net levels; a lowered If or While level costs two.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api_schemas import caffe2_pb2, netgrad_pb2
from app.main import create_app
from app.settings import Settings
from bench.nets import nested_control
from core.proto import codec
from tests.api.helpers import PB


@pytest.fixture(scope="module")
def default_client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(workers=0)), raise_server_exceptions=False) as c:
        yield c


def subnet_levels(depth: int) -> int:
    """Sub-net levels of ``nested_control(depth)``: If and While 2 each, Do 1."""
    return sum(1 if level % 3 == 2 else 2 for level in range(depth))


@pytest.mark.parametrize("depth", [64, 78])
def test_default_depth_limit_json_and_binary(default_client: TestClient, depth: int) -> None:
    net = nested_control(depth)
    r = default_client.post(
        "/v1/gradients/net", json={"net": codec.to_json_obj(net), "ys": ["y"]}
    )
    req = netgrad_pb2.NetGradientRequest()
    req.net.CopyFrom(net)
    req.ys.add().blob = "y"
    rb = default_client.post(
        "/v1/gradients/net",
        content=req.SerializeToString(),
        headers={"Content-Type": PB, "Accept": PB},
    )
    if subnet_levels(depth) <= 128:
        assert r.status_code == 200, r.text
        assert rb.status_code == 200, rb.text
        resp = codec.from_binary(rb.content, netgrad_pb2.NetGradientResponse)
        assert [op.type for op in resp.grad_ops][-1] in ("If", "While", "Do")
        assert codec.to_json_obj(resp.grad_ops[-1]) == r.json()["grad_ops"][-1]
    else:
        for resp_ in (r, rb):
            assert resp_.status_code == 422, resp_.text
            err = resp_.json()["errors"][0]
            assert err["code"] == "nesting_too_deep"
            assert err["path"].count("/net") + err["path"].count("_net") == 129
    assert isinstance(net, caffe2_pb2.NetDef)
