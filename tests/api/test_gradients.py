"""POST /v1/gradients/op and /v1/gradients/net: the acceptance cases of issue 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api_schemas import caffe2_pb2, netgrad_pb2
from app.api import docs
from core.proto import codec
from tests.api.helpers import PB, do_request


def _arg(op: dict[str, Any], name: str) -> dict[str, Any]:
    found = [a for a in op.get("arg", []) if a["name"] == name]
    assert len(found) == 1, f"{op['type']} should have one '{name}' argument: {op.get('arg')}"
    return found[0]


def test_do_op_gradient_acceptance(client: TestClient) -> None:
    r = client.post("/v1/gradients/op", json=do_request())
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["g_input"] == ["outer_X_grad", "outer_Y_grad", None]
    (g,) = body["grad_ops"]
    assert g["type"] == "Do"
    assert g["is_gradient_op"] is True
    assert "outer_Z_grad" in g["input"]
    assert {"outer_X_grad", "outer_Y_grad"} <= set(g["output"])
    assert g["input"][-1] == "W" and g["output"][-1] == "W"
    # Bindings: inner_blobs and outer_blobs_idx pair up, and every index is inside
    # (inputs minus workspace) ++ (outputs minus workspace).
    inner = _arg(g, "inner_blobs")["strings"]
    idx = [int(i) for i in _arg(g, "outer_blobs_idx")["ints"]]
    assert len(inner) == len(idx) == len(set(inner))
    outer = g["input"][:-1] + g["output"][:-1]
    assert all(0 <= i < len(outer) for i in idx)
    bound = {inner[k]: outer[i] for k, i in enumerate(idx)}
    assert bound["Z/_DO_OPERATOR_INNER_GRAD_"] == "outer_Z_grad"
    assert set(bound.values()) >= {"outer_Z_grad", "outer_X_grad", "outer_Y_grad"}
    sub = _arg(g, "net")["n"]
    assert any(op["type"] == "AddGradient" for op in sub["op"])


def test_do_op_gradient_binary_matches_json(client: TestClient) -> None:
    j = client.post("/v1/gradients/op", json=do_request()).json()
    req = netgrad_pb2.OpGradientRequest()
    req.op.CopyFrom(codec.from_json_obj(docs.DO_OP, caffe2_pb2.OperatorDef))
    req.g_output.add().dense = "outer_Z_grad"
    req.g_output.add()
    r = client.post(
        "/v1/gradients/op",
        content=req.SerializeToString(),
        headers={"Content-Type": PB, "Accept": PB},
    )
    assert r.status_code == 200, r.text
    msg = codec.from_binary(r.content, netgrad_pb2.OpGradientResponse)
    assert [codec.to_json_obj(op) for op in msg.grad_ops] == j["grad_ops"]
    kinds = [g.WhichOneof("kind") for g in msg.g_input]
    assert kinds == ["dense", "dense", None]
    assert [g.dense for g in msg.g_input[:2]] == ["outer_X_grad", "outer_Y_grad"]


def test_net_gradient_mlp(client: TestClient) -> None:
    r = client.post("/v1/gradients/net", json=docs.NET_REQUEST)
    assert r.status_code == 200, r.text
    body = r.json()
    types = [op["type"] for op in body["grad_ops"]]
    assert types[0] == "ConstantFill"  # the prob_autogen_grad seed
    assert {"SoftmaxGradient", "ReluGradient", "FCGradient"} <= set(types)
    assert body["grad_map"]["prob"] == "prob_autogen_grad"
    for blob in ("data", "fc_w", "fc_b"):
        assert body["grad_map"][blob] == f"{blob}_grad"
    assert "net" not in body


def test_net_gradient_ys_map_and_return_net(client: TestClient) -> None:
    req = {**docs.NET_REQUEST, "ys": {"prob": "prob_grad_in"}, "return_net": True}
    r = client.post("/v1/gradients/net", json=req)
    assert r.status_code == 200, r.text
    body = r.json()
    assert all(op["type"] != "ConstantFill" for op in body["grad_ops"])
    assert body["grad_ops"][0]["input"][-1] == "prob_grad_in"
    net = body["net"]
    n_fwd = len(docs.MLP_NET["op"])
    assert net["op"][:n_fwd] == docs.MLP_NET["op"]
    assert net["op"][n_fwd:] == body["grad_ops"]


def test_net_gradient_grad_map_keeps_engine_order_in_binary(client: TestClient) -> None:
    j = client.post("/v1/gradients/net", json=docs.NET_REQUEST).json()
    req = netgrad_pb2.NetGradientRequest()
    req.net.CopyFrom(codec.from_json_obj(docs.MLP_NET, caffe2_pb2.NetDef))
    req.ys.add(blob="prob")
    r = client.post(
        "/v1/gradients/net", content=req.SerializeToString(), headers={"Content-Type": PB}
    )
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.json() == j
    rb = client.post(
        "/v1/gradients/net",
        content=req.SerializeToString(),
        headers={"Content-Type": PB, "Accept": PB},
    )
    msg = codec.from_binary(rb.content, netgrad_pb2.NetGradientResponse)
    assert [e.blob for e in msg.grad_map] == list(j["grad_map"])
    assert [e.gradient.dense for e in msg.grad_map] == list(j["grad_map"].values())


CLASSIFICATION_NETS = [
    "caffe2_armcompute__squeezenet_predict.pb",
    "caffe2_test_assets__squeeze_predict_net.pb",
    "model_zoo__bvlc_alexnet__predict_net.pbtxt",
    "model_zoo__densenet121__predict_net.pbtxt",
    "model_zoo__inception_v1__predict_net.pbtxt",
    "model_zoo__inception_v2__predict_net.pbtxt",
    "model_zoo__resnet50__predict_net.pbtxt",
    "model_zoo__vgg19__predict_net.pbtxt",
    "model_zoo__zfnet512__predict_net.pbtxt",
]


def _load(path: Path) -> caffe2_pb2.NetDef:
    if path.suffix == ".pbtxt":
        return codec.from_text(path.read_text(), caffe2_pb2.NetDef)
    return codec.from_binary(path.read_bytes(), caffe2_pb2.NetDef)


def _post_net(
    client: TestClient, net: caffe2_pb2.NetDef, y: str, encoding: str, recompute: bool
) -> tuple[int, list[caffe2_pb2.OperatorDef], dict[str, Any], list[dict[str, Any]]]:
    """POST a net; return status, grad ops, grad map and (on error) the problem's errors."""
    if encoding == "json":
        req_json = {"net": codec.to_json_obj(net), "ys": [y], "recompute": recompute}
        r = client.post("/v1/gradients/net", json=req_json)
        if r.status_code != 200:
            return r.status_code, [], {}, r.json()["errors"]
        body = r.json()
        ops = [codec.from_json_obj(op, caffe2_pb2.OperatorDef) for op in body["grad_ops"]]
        return 200, ops, body["grad_map"], []
    req = netgrad_pb2.NetGradientRequest(net=net, recompute=recompute)
    req.ys.add(blob=y)
    r = client.post(
        "/v1/gradients/net",
        content=req.SerializeToString(),
        headers={"Content-Type": PB, "Accept": PB},
    )
    if r.status_code != 200:
        return r.status_code, [], {}, r.json()["errors"]
    msg = codec.from_binary(r.content, netgrad_pb2.NetGradientResponse)
    return 200, list(msg.grad_ops), {e.blob: e.gradient.dense for e in msg.grad_map}, []


@pytest.mark.parametrize("name", CLASSIFICATION_NETS)
@pytest.mark.parametrize("encoding", ["json", "protobuf"])
def test_classification_net(client: TestClient, shared_dir: Path, name: str, encoding: str) -> None:
    net = _load(shared_dir / "realnets" / name)
    y = net.op[-1].output[0]
    status, grad_ops, grad_map, errors = _post_net(client, net, y, encoding, recompute=False)
    if status != 200:
        # Like Caffe2, the default refuses a gradient that needs a value a later in-place op
        # overwrote; the only acceptable refusal, and recompute=true must then succeed.
        assert status == 422 and {e["code"] for e in errors} == {"version_mismatch"}, errors
        status, grad_ops, grad_map, errors = _post_net(client, net, y, encoding, recompute=True)
        assert status == 200, errors
    for fwd_type in ("Conv", "FC"):
        n_fwd = sum(op.type == fwd_type for op in net.op)
        n_grad = sum(op.type == fwd_type + "Gradient" for op in grad_ops)
        assert n_grad == n_fwd, f"{fwd_type}: {n_grad} gradient ops for {n_fwd} forward ops"
    data = net.op[0].input[0]
    weights = [b for op in net.op if op.type in ("Conv", "FC") for b in op.input[1:]]
    missing = [b for b in [data, *weights] if not grad_map.get(b)]
    assert not missing, f"no grad_map entry for {missing[:5]}"


DETECTRON = "model_zoo__detectron_e2e_faster_rcnn_R-50-C4_1x__predict_net.pbtxt"


def test_detection_net_lists_every_op_without_gradient(
    client: TestClient, shared_dir: Path
) -> None:
    net = codec.to_json_obj(_load(shared_dir / "realnets" / DETECTRON))
    r = client.post("/v1/gradients/net", json={"net": net, "ys": ["pred_bbox", "rpn_roi_probs"]})
    assert r.status_code == 422, r.text[:1000]
    errors = r.json()["errors"]
    located = {(e["op_index"], e["op_type"]) for e in errors}
    assert {(130, "BBoxTransform"), (102, "GenerateProposals")} <= located
    ok = client.post("/v1/gradients/net", json={"net": net, "ys": ["res5_2_branch2a"]})
    assert ok.status_code == 200, ok.text[:1000]
    assert ok.json()["grad_map"]["data"] == "data_grad"


def _overwritten_input_net() -> dict[str, Any]:
    """Mul reads a; a later in-place Relu overwrites a: MulGradient needs the old value."""
    return {
        "op": [
            {"type": "Relu", "input": ["x"], "output": ["a"]},
            {"type": "Mul", "input": ["a", "w"], "output": ["b"]},
            {"type": "Relu", "input": ["a"], "output": ["a"]},
            {"type": "Add", "input": ["a", "b"], "output": ["y"]},
        ]
    }


def test_recompute_is_opt_in_in_json_and_binary(client: TestClient) -> None:
    net = _overwritten_input_net()
    r = client.post("/v1/gradients/net", json={"net": net, "ys": ["y"]})
    assert r.status_code == 422 and r.json()["errors"][0]["code"] == "version_mismatch"
    ok = client.post("/v1/gradients/net", json={"net": net, "ys": ["y"], "recompute": True})
    assert ok.status_code == 200, ok.text
    assert any(d["code"] == "recomputed_forward_value" for d in ok.json()["diagnostics"])
    req = netgrad_pb2.NetGradientRequest(
        net=codec.from_json_obj(net, caffe2_pb2.NetDef), recompute=True
    )
    req.ys.add(blob="y")
    rb = client.post(
        "/v1/gradients/net", content=req.SerializeToString(), headers={"Content-Type": PB}
    )
    assert rb.status_code == 200 and rb.json() == ok.json()
