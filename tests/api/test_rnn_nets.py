"""Issue 9 acceptance: real LSTM / GRU nets (tests/data) over /v1/gradients/net, /v1/verify
(full mode) and /v1/run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.realnets import rnn_builders

DATA = Path(__file__).resolve().parent.parent / "data"
TOL = {"step": 1e-6, "atol": 1e-6, "rtol": 1e-4}
FILES = ["rnn_lstm_1layer.json", "rnn_gru_2layer.json"]


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(workers=1, job_timeout_s=60.0)),
                    raise_server_exceptions=False) as c:
        yield c


def _load(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((DATA / name).read_text())
    return body


@pytest.mark.parametrize("name", FILES)
def test_data_files_match_the_builders(name: str) -> None:
    assert (DATA / name).read_text() == rnn_builders.as_json(name)


@pytest.mark.parametrize("name", FILES)
def test_gradients_net_gives_one_recurrent_network_gradient(client: TestClient,
                                                            name: str) -> None:
    body = _load(name)
    r = client.post("/v1/gradients/net", json={"net": body["net"], "ys": ["loss"],
                                               "return_net": True})
    assert r.status_code == 200, r.text
    out = r.json()
    types = [op["type"] for op in out["grad_ops"]]
    assert types.count("RecurrentNetworkGradient") == 1
    rnn_grad = next(op for op in out["grad_ops"] if op["type"] == "RecurrentNetworkGradient")
    args = {a["name"]: a for a in rnn_grad["arg"]}
    assert {"backward_step_net", "backward_link_internal", "backward_link_external",
            "backward_link_offset", "param", "param_grads", "outputs_with_grads",
            "recurrent_states", "alias_src", "alias_dst", "alias_offset"} <= set(args)
    # the returned forward op carries the same backward_step_net
    fwd = next(op for op in out["net"]["op"] if op["type"] == "RecurrentNetwork")
    fwd_args = {a["name"]: a for a in fwd["arg"]}
    assert fwd_args["backward_step_net"] == args["backward_step_net"]
    codes = {d["code"] for d in out["diagnostics"]}
    assert {"rnn_step_workspaces", "rnn_recompute_candidates"} <= codes
    # every weight, the input sequence and the initial states get a gradient
    weights = [i["blob"] for i in body["inputs"] if i["blob"] != "seq_lengths"]
    grads = {g["blob"]: g for g in out["grad_map"]} if isinstance(out["grad_map"], list) \
        else out["grad_map"]
    assert set(weights) <= set(grads)


def test_lstm_carried_backward_step_net_is_compared() -> None:
    from core.api import gradient_for_net

    res = gradient_for_net(rnn_builders.lstm_net(), ["loss"])
    codes = [d.code for d in res.diagnostics]
    # the hand-written (Caffe2-style) backward step net matches netgrad's op for op
    assert "backward_step_net_regenerated" not in codes
    net = rnn_builders.lstm_net()
    rnn = net.op[1]
    back = next(a for a in rnn.arg if a.name == "backward_step_net")
    del back.n.op[2]  # drop the accumulation Sum: now it differs
    res = gradient_for_net(net, ["loss"])
    diag = [d for d in res.diagnostics if d.code == "backward_step_net_regenerated"]
    assert len(diag) == 1 and diag[0].op_index == 1 and "first difference at op 2" in (
        diag[0].message)


@pytest.mark.parametrize("name", FILES)
def test_verify_full_mode_passes(client: TestClient, name: str) -> None:
    body = _load(name)
    r = client.post("/v1/verify", json={"net": body["net"], "ys": ["loss"],
                                        "inputs": body["inputs"], "mode": "full",
                                        "tolerances": TOL})
    assert r.status_code == 200, r.text
    report = r.json()["report"]
    checked = {b["blob"] for b in report["blobs"]}
    assert checked == {i["blob"] for i in body["inputs"] if i["blob"] != "seq_lengths"}
    bad = [(b["blob"], b["max_abs_error"]) for b in report["blobs"] if not b["passed"]]
    assert report["passed"], bad
    # the check is not vacuous: every gradient is non-zero somewhere
    assert all(b["gradient"] for b in report["blobs"])


@pytest.mark.parametrize("name", FILES)
def test_run_returns_the_gradients(client: TestClient, name: str) -> None:
    body = _load(name)
    weights = [i["blob"] for i in body["inputs"] if i["blob"] != "seq_lengths"]
    gen = client.post("/v1/gradients/net", json={"net": body["net"], "ys": ["loss"]}).json()
    gmap = gen["grad_map"]
    names = [gmap[w] if isinstance(gmap[w], str) else gmap[w]["dense"] for w in weights]
    r = client.post("/v1/run", json={"net": body["net"], "inputs": body["inputs"],
                                     "ys": ["loss"], "fetch": ["loss", *names]})
    assert r.status_code == 200, r.text
    outs = r.json()["outputs"]
    for w, g in zip(weights, names, strict=True):
        arr = np.asarray(outs[g]["data"], dtype=np.float64)
        spec = next(i for i in body["inputs"] if i["blob"] == w)
        assert list(outs[g]["shape"]) == spec["random"]["shape"], w
        assert np.all(np.isfinite(arr)) and np.any(arr != 0), w


def test_bad_recurrent_network_is_a_4xx_naming_the_op(client: TestClient) -> None:
    from core.proto import codec
    from tests.core.control.rnn_cases import STATE, simple_rnn

    net = simple_rnn(links=[("h/h_prev", STATE, 0), ("h/h_t", STATE, 1), ("h/x_t", "x", 1)],
                     states=[], ids=[])
    r = client.post("/v1/gradients/net", json={"net": codec.to_json_obj(net), "ys": ["loss"]})
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    errors = r.json()["errors"]
    assert {e["code"] for e in errors} >= {"rnn_link_window", "rnn_state_without_initial"}
    assert all(e["path"] == "op[0]:RecurrentNetwork" and e["op_index"] == 0 for e in errors)
