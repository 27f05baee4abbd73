"""``densify``: sparse gradients (GradientSlice) returned as dense blobs via SparseToDense."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from api_schemas import caffe2_pb2
from app.main import create_app
from app.settings import Settings
from core.executor.executor import execute
from core.proto import codec


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(workers=0)), raise_server_exceptions=False) as c:
        yield c


def _net(dense_gradient: bool = False) -> dict[str, Any]:
    gather: dict[str, Any] = {"type": "Gather", "input": ["emb", "idx"], "output": ["rows"]}
    if dense_gradient:
        gather["arg"] = [{"name": "dense_gradient", "i": 1}]
    return {"name": "lookup", "op": [
        gather,
        {"type": "Mul", "input": ["rows", "w"], "output": ["y"]},
    ], "external_input": ["emb", "idx", "w"], "external_output": ["y"]}


def _run(answer: dict[str, Any], feeds: dict[str, np.ndarray], blob: str) -> np.ndarray:
    net = codec.from_json_obj(answer["net"], caffe2_pb2.NetDef)
    return execute(net, feeds, fetch=[blob])[blob]


def test_densify_matches_the_dense_gradient_maker(client: TestClient) -> None:
    rng = np.random.default_rng(3)
    feeds = {"emb": rng.normal(size=(5, 3)), "idx": np.array([0, 2, 2, 4], dtype=np.int64),
             "w": rng.normal(size=(4, 3))}
    sparse = client.post("/v1/gradients/net", json={"net": _net(), "ys": ["y"],
                                                     "return_net": True}).json()
    assert sparse["grad_map"]["emb"] == {"indices": "idx", "values": "rows_grad"}
    dense = client.post("/v1/gradients/net", json={"net": _net(), "ys": ["y"],
                                                    "return_net": True, "densify": True}).json()
    assert dense["grad_map"]["emb"] == "emb_grad_dense"
    last = dense["grad_ops"][-1]
    assert last["type"] == "SparseToDense" and last["input"] == ["idx", "rows_grad", "emb"]
    assert dense["grad_ops"][:-1] == sparse["grad_ops"]
    reference = client.post("/v1/gradients/net", json={
        "net": _net(dense_gradient=True), "ys": ["y"], "return_net": True}).json()
    got = _run(dense, feeds, "emb_grad_dense")
    want = _run(reference, feeds, reference["grad_map"]["emb"])
    assert got.shape == (5, 3)
    np.testing.assert_array_equal(got, want)
    # duplicate index 2 adds up both rows of w (the all-ones seed times w)
    np.testing.assert_allclose(got[2], feeds["w"][1] + feeds["w"][2])
    np.testing.assert_array_equal(got[1], np.zeros(3))


def test_a_blob_the_net_writes_stays_sparse_with_a_note(client: TestClient) -> None:
    net = _net()
    net["op"].insert(0, {"type": "GaussianFill", "output": ["emb"],
                         "arg": [{"name": "shape", "ints": [5, 3]}]})
    res = client.post("/v1/gradients/net", json={"net": net, "ys": ["y"],
                                                   "densify": True}).json()
    assert res["grad_map"]["emb"] == {"indices": "idx", "values": "rows_grad"}
    notes = [d for d in res["diagnostics"] if d["code"] == "densify_skipped"]
    assert notes and notes[0]["blobs"] == ["emb"]
