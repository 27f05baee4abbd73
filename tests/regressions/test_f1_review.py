"""Findings of the adversarial review of main 9a28701 (branch f1).

Each test failed before its fix: a wrong 200, a 200 with a malformed gradient, or a raw
Python exception text in a 4xx. The smaller nets of finding 1 are fuzzer counterexamples
(tests/core/fuzz_counterexamples/F7_*.json, run by tests/core/test_fuzz_counterexamples.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from core.api import gradient_for_net
from core.registry import make_arg, make_op
from tests.regressions.issue7_nets import net_of

DATA = Path(__file__).resolve().parent.parent / "data"


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(workers=1, job_timeout_s=60.0)),
                    raise_server_exceptions=False) as c:
        yield c


def _failed(body: dict[str, Any]) -> list[str]:
    return [b["blob"] for b in body["report"]["blobs"] if not b["passed"]]


# -- 1: a shared Sum gradient blob written in place by an earlier in-place op -----------------
def test_inplace_scale_before_sum_gets_its_own_gradient_blob() -> None:
    net = net_of("n", make_op("Mul", ["a", "c"], ["g"]),
                 make_op("Scale", ["g"], ["g"], [make_arg("scale", 3.0)]),
                 make_op("Sum", ["g", "x"], ["g"]))
    res = gradient_for_net(net, {"g": "g_grad"})
    assert res.grad_map["x"] == "g_grad"
    scale_grad = next(op for op in res.grad_ops if op.type == "Scale")
    assert list(scale_grad.input) == ["g_grad"] and scale_grad.output[0] != "g_grad"
    writes = [o for op in res.grad_ops for o in op.output]
    assert "g_grad" not in writes  # nothing overwrites x's gradient
    # byte-deterministic
    again = gradient_for_net(net, {"g": "g_grad"})
    assert [op.SerializeToString() for op in again.grad_ops] == [
        op.SerializeToString() for op in res.grad_ops]


def test_rnn_step_net_inplace_scale_before_sum_is_right(client: TestClient) -> None:
    body = json.loads((DATA / "rnn_lstm_1layer.json").read_text())
    rnn = next(op for op in body["net"]["op"] if op["type"] == "RecurrentNetwork")
    step = next(a for a in rnn["arg"] if a["name"] == "step_net")
    step["n"]["op"].insert(1, {"type": "Scale", "input": ["lstm/gates_t"],
                               "output": ["lstm/gates_t"],
                               "arg": [{"name": "scale", "f": 3.0}]})
    r = client.post("/v1/verify", json={"net": body["net"], "inputs": body["inputs"],
                                        "ys": ["loss"], "mode": "full"})
    assert r.status_code == 200, r.text
    assert _failed(r.json()) == []


# -- 2: a gradient reaching a statistics / probabilities output is refused ---------------
STAT_OUTPUTS = [
    ("LayerNorm", ["x"], ["y", "mean", "std"], "mean"),
    ("LayerNorm", ["x"], ["y", "mean", "std"], "std"),
    ("GroupNorm", ["x", "gamma", "beta"], ["y", "mean", "rstd"], "rstd"),
    ("InstanceNorm", ["x", "s", "b"], ["y", "mean", "inv_std"], "mean"),
    ("RMSNorm", ["x", "gamma", "beta"], ["y", "rrms"], "rrms"),
    ("LRN", ["x"], ["y", "scale"], "scale"),
    ("SoftmaxFocalLoss", ["x", "t", "wp"], ["loss", "p"], "p"),
    ("SpatialBN", ["x", "s", "b", "rm", "rv"], ["y", "rm", "rv", "sm", "siv"], "sm"),
]


@pytest.mark.parametrize(("op_type", "ins", "outs", "stat"), STAT_OUTPUTS,
                         ids=[f"{t}-{s}" for t, _, _, s in STAT_OUTPUTS])
def test_gradient_reaching_a_statistics_output_is_a_located_4xx(
    op_type: str, ins: list[str], outs: list[str], stat: str
) -> None:
    from core.errors import GradientError

    net = net_of("n", make_op("Tanh", ["a"], ["x"]), make_op(op_type, ins, outs),
                 make_op("Mul", [stat, stat], ["q"]))
    with pytest.raises(GradientError) as info:
        gradient_for_net(net, [outs[0], "q"])
    p = info.value.problems[0]
    assert (p.op_index, p.op_type, p.code) == (1, op_type, "output_gradient_unsupported")
    assert p.path == f"op[1]:{op_type}" and stat in p.blobs
    gradient_for_net(net, [outs[0]])  # without a gradient on the statistics it still works



# -- 3: an If / While without its condition input -------------------------------------------
@pytest.mark.parametrize(("op_type", "arg"), [("If", "then_net"), ("While", "loop_net")])
def test_control_op_without_condition_is_refused(client: TestClient, op_type: str,
                                                 arg: str) -> None:
    body = {"net": {"op": [{"type": op_type, "output": ["b"], "arg": [
        {"name": arg, "n": {"op": [{"type": "Relu", "input": ["a"], "output": ["b"]}]}}]}]},
        "ys": ["b"]}
    r = client.post("/v1/gradients/net", json=body)
    assert r.status_code == 422, r.text
    err = r.json()["errors"][0]
    assert (err["op_index"], err["op_type"], err["path"]) == (0, op_type, f"op[0]:{op_type}")
    assert "requires at least one input (the condition)" in err["message"]


# -- 4: the checker's default check list, infinities ------------------------------------------
def _verify(client: TestClient, ops: list[dict[str, Any]], ys: list[str],
            inputs: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    r = client.post("/v1/verify", json={"net": {"op": ops}, "ys": ys, "mode": "full",
                                        "inputs": inputs, **extra})
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


AFFINE = [{"type": "AffineChannel", "input": ["x", "s", "b"], "output": ["y"]}]
AFFINE_INPUTS = [{"blob": "x", "random": {"shape": [2, 3, 2, 2]}},
                 {"blob": "s", "random": {"shape": [3]}}, {"blob": "b", "random": {"shape": [3]}}]


def test_frozen_affine_channel_scale_and_bias_are_skipped_with_a_note(
        client: TestClient) -> None:
    body = _verify(client, AFFINE, ["y"], AFFINE_INPUTS)
    assert [b["blob"] for b in body["report"]["blobs"]] == ["x"]
    assert body["report"]["passed"] is True
    notes = [d for d in body["diagnostics"] if d["code"] == "not_checked_no_gradient"]
    assert [d["blobs"] for d in notes] == [["s"], ["b"]]
    assert "op[0]:AffineChannel input 1" in notes[0]["message"]


def test_explicitly_requested_input_without_gradient_is_still_checked(
        client: TestClient) -> None:
    body = _verify(client, AFFINE, ["y"], AFFINE_INPUTS, check=["s"])
    assert _failed(body) == ["s"]


def test_a_dense_path_without_gradient_is_not_excused() -> None:
    from core.verify.by_design import no_gradient_by_design

    ops = [make_op("Mul", ["x", "w"], ["y"]),
           make_op("SoftmaxWithLoss", ["y", "lab"], ["p", "l"])]
    # w's gradient missing from the map (a bug): Mul's maker does give w one -> checked
    assert no_gradient_by_design(ops, 0, {"x": "x_grad"}, ["x", "w", "lab"]) == {
        "lab": no_gradient_by_design(ops, 0, {}, ["lab"])["lab"]}
    # an input read inside a control op's sub-net is never excused
    if_op = make_op("If", ["c", "w"], ["y"])
    assert no_gradient_by_design([if_op], 0, {}, ["w"]) == {}


def test_upsample_bilinear_scales_are_not_perturbed(client: TestClient) -> None:
    body = _verify(client, [{"type": "UpsampleBilinear", "input": ["x", "sc"], "output": ["y"]}],
                   ["y"], [{"blob": "x", "random": {"shape": [1, 1, 2, 2]}},
                           {"blob": "sc", "tensor": {"shape": [2], "dtype": "float32",
                                                     "data": [2.0, 2.0]}}])
    assert [b["blob"] for b in body["report"]["blobs"]] == ["x"] and body["report"]["passed"]


def test_sequence_mask_minus_infinity_fill_is_left_out_of_the_loss(client: TestClient) -> None:
    body = _verify(client, [{"type": "SequenceMask", "input": ["x", "len"], "output": ["y"]}],
                   ["y"], [{"blob": "x", "random": {"shape": [2, 3]}},
                           {"blob": "len", "tensor": {"shape": [2], "dtype": "int32",
                                                      "data": [1, 2]}}])
    assert body["report"]["passed"] is True
    (warn,) = [d for d in body["diagnostics"] if d["code"] == "non_finite_output"]
    assert warn["message"].startswith("3 element(s) of y 'y'")


def test_detectron_rpn_head_passes_with_the_default_check_list(client: TestClient) -> None:
    """Targets and frozen AffineChannel parameters used to be checked by default and FAIL."""
    case = json.loads((DATA / "detectron_rpn_head.json").read_text())
    r = client.post("/v1/verify", json={
        "net": case["net"], "ys": case["ys"], "inputs": case["inputs"], "mode": "fast",
        "seed": 5, "tolerances": {"step": 1e-6, "atol": 1e-7, "rtol": 1e-4}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["report"]["passed"] is True
    skipped = [d["blobs"][0] for d in body["diagnostics"]
               if d["code"] == "not_checked_no_gradient"]
    assert skipped == ["res2_bn_s", "res2_bn_b", "rpn_bbox_targets",
                       "rpn_bbox_inside_weights", "rpn_bbox_outside_weights"]
    checked = {b["blob"] for b in body["report"]["blobs"]}
    assert set(case["params"]) <= checked
