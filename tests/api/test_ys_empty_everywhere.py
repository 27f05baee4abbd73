"""``ys: []`` is the same 400 (``ys_empty``) wherever ``ys`` is required: /v1/gradients/net,
/v1/verify and a verify job (/v1/jobs), not a 200 with an empty answer or a failed job; so is
a blob given two different seeds (``duplicate_ys``), where the last one used to win."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api import docs
from app.main import create_app
from app.settings import Settings
from tests.api.helpers import assert_problem


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(workers=1)), raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize(("route", "body", "path"), [
    ("/v1/gradients/net", {"net": docs.MLP_NET, "ys": []}, "ys"),
    ("/v1/gradients/net", {"net": docs.MLP_NET, "ys": {}}, "ys"),
    ("/v1/verify", {**docs.VERIFY_REQUEST, "ys": []}, "ys"),
    ("/v1/jobs", {"verify": {**docs.VERIFY_REQUEST, "ys": []}}, "verify.ys"),
])
def test_empty_ys_is_ys_empty_400(client: TestClient, route: str, body: dict[str, Any],
                                  path: str) -> None:
    problem = assert_problem(client.post(route, json=body), 400)
    assert [(e["code"], e["path"]) for e in problem["errors"]] == [("ys_empty", path)]


@pytest.mark.parametrize(("route", "path"), [
    ("/v1/gradients/net", "ys[1]"), ("/v1/verify", "ys[1]"), ("/v1/jobs", "verify.ys[1]")])
def test_a_blob_given_two_seeds_is_duplicate_ys_400(client: TestClient, route: str,
                                                    path: str) -> None:
    # only binary (or text) bodies can repeat a blob in ys: JSON refuses the repeated key
    from api_schemas import netgrad_pb2

    req = netgrad_pb2.VerifyRequest()
    req.net.op.add(type="Tanh", input=["x"], output=["y"])
    req.ys.add(blob="y").gradient.dense = "g1"
    req.ys.add(blob="y").gradient.dense = "g2"
    msg: Any = req
    if route == "/v1/jobs":
        msg = netgrad_pb2.JobRequest()
        msg.verify.CopyFrom(req)
    elif route == "/v1/gradients/net":
        msg = netgrad_pb2.NetGradientRequest(net=req.net, ys=req.ys)
    r = client.post(route, content=msg.SerializeToString(),
                    headers={"Content-Type": "application/x-protobuf"})
    problem = assert_problem(r, 400)
    assert [(e["code"], e["path"]) for e in problem["errors"]] == [("duplicate_ys", path)]
