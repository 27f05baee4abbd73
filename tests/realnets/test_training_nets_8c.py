"""Issue 8 acceptance (helper 8c): a transformer encoder block and a Detectron-style RPN head.

For each net in ``tests/data`` (written by ``tests/data/gen_training_nets.py``):
``/v1/gradients/net`` answers 200 with a gradient for every parameter, and ``/v1/verify`` in
fast mode passes for every parameter. A tampered gradient of the same net must fail, so the
check can fail. The transformer block uses ``Gelu``, which another branch adds; until then
its Gelu test is an expected failure, and the same block with ``Tanh`` in the MLP is checked.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from core.ops import load_all
from tests.data import gen_training_nets

DATA = Path(__file__).parent.parent / "data"

load_all()


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    settings = Settings(workers=1, job_timeout_s=60.0)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def load(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def with_tanh(case: dict[str, Any]) -> dict[str, Any]:
    """The transformer block with its MLP activation swapped for Tanh."""
    out = copy.deepcopy(case)
    for op in out["net"]["op"]:
        if op["type"] == "Gelu":
            op["type"] = "Tanh"
    return out


def verify_request(case: dict[str, Any], grad_ops: list[Any] | None = None) -> dict[str, Any]:
    req: dict[str, Any] = {
        "net": case["net"],
        "ys": case["ys"],
        "inputs": case["inputs"],
        "mode": "fast",
        "check": case["params"],
        "passes": 3,
        "seed": 5,
        "tolerances": {"step": 1e-6, "atol": 1e-7, "rtol": 1e-4},
    }
    if grad_ops is not None:
        req["grad_ops"] = grad_ops
    return req


def check_net(client: TestClient, case: dict[str, Any]) -> dict[str, Any]:
    r = client.post("/v1/gradients/net", json={"net": case["net"], "ys": case["ys"]})
    assert r.status_code == 200, r.text
    body = r.json()
    missing = [p for p in case["params"] if p not in body["grad_map"]]
    assert missing == []
    v = client.post("/v1/verify", json=verify_request(case))
    assert v.status_code == 200, v.text
    report = v.json()["report"]
    verdict = {b["blob"]: b["passed"] for b in report["blobs"]}
    assert verdict == dict.fromkeys(case["params"], True), report
    assert report["passed"] is True
    return body


def test_generator_reproduces_the_files() -> None:
    for name in gen_training_nets.NETS:
        assert (DATA / name).read_text(encoding="utf-8") == gen_training_nets.render(name)


def test_transformer_block(client: TestClient) -> None:
    body = check_net(client, load("transformer_block.json"))
    types = {op["type"] for op in body["grad_ops"]}
    assert {"LayerNormGradient", "BatchMatMul", "SoftmaxGradient", "GeluGradient"} <= types


def test_transformer_block_with_tanh_mlp(client: TestClient) -> None:
    body = check_net(client, with_tanh(load("transformer_block.json")))
    types = {op["type"] for op in body["grad_ops"]}
    assert {"LayerNormGradient", "BatchMatMul", "SoftmaxGradient", "FCGradient"} <= types


def test_detectron_rpn_head(client: TestClient) -> None:
    case = load("detectron_rpn_head.json")
    body = check_net(client, case)
    grads = body["grad_map"]
    # Frozen AffineChannel: X gets a gradient, its scale/bias none (as in Caffe2).
    assert "res2_bn_s" not in grads and "res2_bn_b" not in grads
    types = [op["type"] for op in body["grad_ops"]]
    assert types.count("AffineChannelGradient") == 2
    assert {"SigmoidCrossEntropyLossGradient", "SmoothL1LossGradient"} <= set(types)


def test_tampered_detectron_gradient_fails(client: TestClient) -> None:
    case = load("detectron_rpn_head.json")
    good = client.post("/v1/verify", json=verify_request(case)).json()
    ops = copy.deepcopy(good["grad_ops"])
    target = next(o for o in ops if o["type"] == "SmoothL1LossGradient")
    for a in target.get("arg", []):
        if a["name"] == "beta":
            a["f"] = 0.5  # the wrong beta: a wrong box-loss gradient
    r = client.post("/v1/verify", json=verify_request(case, ops))
    assert r.status_code == 200, r.text
    verdict = {b["blob"]: b["passed"] for b in r.json()["report"]["blobs"]}
    assert verdict["rpn_bbox_pred_w"] is False
    assert verdict["rpn_cls_logits_w"] is True
