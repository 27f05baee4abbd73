"""The real Mask R-CNN2Go If op (control-flow-cases §1; issue 3 item 6)."""

from __future__ import annotations

from pathlib import Path

import pytest

from api_schemas import caffe2_pb2
from core.api import gradient_for_net
from core.errors import GradientNotDefinedError
from core.proto import codec

FILES = [
    "model_zoo__mask_rcnn_2go_fp32__model.pbtxt",
    "model_zoo__mask_rcnn_2go_int8__model.pbtxt",
]


def load(shared_dir: Path, name: str) -> caffe2_pb2.NetDef:
    return codec.from_text((shared_dir / "realnets" / name).read_text(), caffe2_pb2.NetDef)


@pytest.mark.parametrize("name", FILES)
def test_gradient_of_undeclared_branch_output_is_the_seed_only(
    shared_dir: Path, name: str
) -> None:
    net = load(shared_dir, name)
    res = gradient_for_net(net, ["mask_fcn_probs"])
    assert [(o.type, list(o.input), list(o.output)) for o in res.grad_ops] == [
        ("ConstantFill", ["mask_fcn_probs"], ["mask_fcn_probs_autogen_grad"])
    ]
    assert res.grad_map == {"mask_fcn_probs": "mask_fcn_probs_autogen_grad"}
    warn = [d for d in res.diagnostics if d.code == "undeclared_branch_write"]
    assert len(warn) == 1 and warn[0].op_type == "If"
    assert "mask_fcn_probs" in warn[0].blobs
    assert warn[0].path == f"op[{warn[0].op_index}]:If"


@pytest.mark.parametrize("name", FILES)
def test_detection_outputs_list_every_op_without_gradient(shared_dir: Path, name: str) -> None:
    net = load(shared_dir, name)
    with pytest.raises(GradientNotDefinedError) as info:
        gradient_for_net(net, ["score_nms"])
    types = {p.op_type for p in info.value.problems}
    assert {"BoxWithNMSLimit", "BBoxTransform", "GenerateProposals"} <= types
    assert all(p.op_index is not None and p.path for p in info.value.problems)


def test_detectron_lists_all_three_detection_ops_at_once(shared_dir: Path) -> None:
    net = load(shared_dir, "model_zoo__detectron_e2e_faster_rcnn_R-50-C4_1x__predict_net.pbtxt")
    with pytest.raises(GradientNotDefinedError) as info:
        gradient_for_net(net, ["score_nms"])
    assert [p.op_type for p in info.value.problems] == [
        "BoxWithNMSLimit", "BBoxTransform", "GenerateProposals"
    ]


def test_fp32_conv_feature_gradient_passes_the_if(shared_dir: Path) -> None:
    net = load(shared_dir, FILES[0])
    conv = next(o.output[0] for o in net.op if o.type == "Conv")
    res = gradient_for_net(net, [conv])
    assert res.grad_ops and conv in res.grad_map


@pytest.mark.parametrize("name", FILES)
def test_round_trip_keeps_the_nested_else_net(shared_dir: Path, name: str) -> None:
    net = load(shared_dir, name)
    again = codec.from_binary(codec.to_binary(net), caffe2_pb2.NetDef)
    assert again == net
    if_op = next(o for o in again.op if o.type == "If")
    else_net = next(a.n for a in if_op.arg if a.name == "else_net")
    assert len(else_net.op) >= 28
    assert codec.from_json_obj(codec.to_json_obj(net), caffe2_pb2.NetDef) == net
