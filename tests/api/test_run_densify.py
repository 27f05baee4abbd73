"""``/v1/run`` with ``densify``: the run that Caffe2's mixed sparse/dense error asks for."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.api.helpers import assert_problem

MIXED_NET: dict[str, Any] = {"name": "mixed", "op": [
    {"type": "Gather", "input": ["E", "I"], "output": ["G"]},
    {"type": "Relu", "input": ["E"], "output": ["R"]},
    {"type": "ReduceSum", "input": ["G"], "output": ["Gs"], "arg": [{"name": "keepdims", "i": 0}]},
    {"type": "ReduceSum", "input": ["R"], "output": ["Rs"], "arg": [{"name": "keepdims", "i": 0}]},
    {"type": "Add", "input": ["Gs", "Rs"], "output": ["loss"]},
]}
E = [[0.5, -1.0, 2.0], [1.5, 0.25, -0.75], [-2.0, 3.0, 1.0], [0.1, 0.2, -0.3]]
INPUTS = [{"blob": "E", "tensor": {"shape": [4, 3], "data": [x for row in E for x in row]}},
          {"blob": "I", "tensor": {"shape": [3], "dtype": "int32", "data": [0, 2, 0]}}]


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(workers=1, job_timeout_s=20.0)),
                    raise_server_exceptions=False) as c:
        yield c


def _request(**extra: Any) -> dict[str, Any]:
    return {"net": MIXED_NET, "inputs": INPUTS, "fetch": ["loss", "E_grad"], "ys": ["loss"],
            **extra}


def test_mixed_gradients_without_densify_say_how_to_ask(client: TestClient) -> None:
    body = assert_problem(client.post("/v1/run", json=_request()), 422)
    assert '"densify": true' in body["detail"]


def test_run_with_densify_fetches_the_dense_sum(client: TestClient) -> None:
    r = client.post("/v1/run", json=_request(densify=True))
    assert r.status_code == 200, r.text
    body = r.json()
    e = np.array(E)
    want = (e > 0).astype(float)  # d sum(relu(E)) / dE
    for i in (0, 2, 0):  # d sum(E[I]) / dE: one per gathered row, repeats add up
        want[i] += 1.0
    got = np.array(body["outputs"]["E_grad"]["data"]).reshape(4, 3)
    assert np.allclose(got, want), (got, want)
    loss = e[[0, 2, 0]].sum() + np.maximum(e, 0).sum()
    assert np.isclose(body["outputs"]["loss"]["data"][0], loss)
    assert any(op["type"] == "SparseToDense" for op in body["grad_ops"])
    assert body["grad_map"]["E"] == "E_grad"
    assert any(d["code"] == "densified_gradient" for d in body["diagnostics"])
    gen = client.post("/v1/gradients/net",
                      json={"net": MIXED_NET, "ys": ["loss"], "densify": True}).json()
    assert body["grad_ops"] == gen["grad_ops"]


def test_densify_without_ys_is_refused(client: TestClient) -> None:
    body = assert_problem(client.post("/v1/run", json={
        "net": MIXED_NET, "inputs": INPUTS, "fetch": ["loss"], "densify": True}), 400)
    assert "ys" in body["detail"]


def test_python_client_sends_densify() -> None:
    from tests.client.conftest import CLIENT_SRC  # noqa: F401  (puts the client on sys.path)

    from netgrad.client import run_request  # isort: skip

    assert run_request(MIXED_NET, ["E_grad"], ys=["loss"], densify=True).densify
