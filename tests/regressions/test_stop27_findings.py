"""Regressions of stop 27 (the walkthrough and review findings of stop 26, mended).

* ``/v1/run`` with ``"fetch": []`` (or a text/binary body without ``fetch``) answered 200
  with no outputs, while JSON without ``fetch`` was a 400; an empty fetch list is now a 400
  everywhere, ``/v1/jobs`` included (at submission).
* Text-format requests got no pointer for a field one level off (top-level ``inputs`` of a
  VerifyRequest belongs in ``verify { }``; ``verify { ys: ... }`` belongs outside) and none
  for the list form ``ys: ["y"]``.
* ``inputs[0].name`` had no did-you-mean ``blob``; ``inputs[0].tensor.shape: 2`` got the
  hint about ``inputs`` itself; ``"fetch": "y"`` said "must be a JSON array" and no more.
* A check of given gradient ops that lost an output said only "blob 'x_grad' does not exist".
* A net computing in float16 failed the numeric check of a correct gradient with no word on
  why; it now says so and how to check it exactly (and that recipe passes).
* A binary body with several non-UTF-8 strings named the last one, not the first.
* A binary request file given to the CLI read as a NetDef of untyped ops.
* Text and binary ``/v1/jobs`` bodies nested too deep were queued (JSON ones were refused).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from google.protobuf import text_format

from api_schemas import caffe2_pb2, netgrad_pb2
from app.cli import load_net
from app.main import create_app
from app.settings import Settings
from core.errors import DecodeError, ExecutionError
from core.executor.executor import execute
from core.proto import codec
from core.registry import make_op
from core.verify.checker import InputSpec, TensorSpec, VerifyOptions, verify_net

J = {"content-type": "application/json"}
B = {"content-type": "application/x-protobuf"}
T = {"content-type": "text/x-protobuf"}
NET = {"op": [{"type": "Relu", "input": ["x"], "output": ["y"]}]}
TNET = 'net { op { type: "Relu" input: "x" output: "y" } }'
X = {"blob": "x", "tensor": {"shape": [2], "data": [1.0, -2.0]}}
TX = 'inputs { blob: "x" tensor { shape: 2 data: 1 data: -2 } }'


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(workers=1))) as c:
        yield c


def _error(r: object) -> dict:
    (p, *_) = r.json()["errors"]  # type: ignore[attr-defined]
    return p


# --- an empty fetch list ------------------------------------------------------------------------
def test_an_empty_fetch_list_is_a_400_in_json_and_text(client: TestClient) -> None:
    r = client.post("/v1/run", json={"net": NET, "inputs": [X], "fetch": []})
    assert r.status_code == 400, r.text
    p = _error(r)
    assert (p["path"], p["code"]) == ("fetch", "missing_field")
    assert '"fetch": ["y"]' in p["message"] and 'fetch: "y"' in p["message"]
    r = client.post("/v1/run", content=f"{TNET} {TX}", headers=T)  # (text: no fetch at all)
    assert r.status_code == 400 and _error(r)["path"] == "fetch", r.text
    r = client.post("/v1/run", content=f'{TNET} {TX} fetch: "y"', headers=T)
    assert r.status_code == 200 and list(r.json()["outputs"]) == ["y"], r.text


def test_a_job_with_an_empty_fetch_list_is_refused_at_submission(client: TestClient) -> None:
    r = client.post("/v1/jobs", json={"run": {"net": NET, "inputs": [X], "fetch": []}})
    assert r.status_code == 400, r.text
    assert _error(r)["path"] == "run.fetch"


# --- text-format fields one level off -----------------------------------------------------------
def test_top_level_inputs_of_a_text_verify_request_point_into_verify(client: TestClient) -> None:
    r = client.post("/v1/verify", content=f'{TNET} ys {{ blob: "y" }} {TX}', headers=T)
    assert r.status_code == 400, r.text
    p = _error(r)
    assert p["path"] == "inputs" and "verify { inputs { ... } }" in p["message"], p
    fixed = f'{TNET} ys {{ blob: "y" }} verify {{ {TX} }}'
    assert client.post("/v1/verify", content=fixed, headers=T).status_code == 200


def test_ys_inside_verify_of_a_text_request_is_sent_out(client: TestClient) -> None:
    r = client.post("/v1/verify", content=f'{TNET} verify {{ ys: "y" }}', headers=T)
    assert r.status_code == 400, r.text
    p = _error(r)
    assert p["path"] == "verify.ys" and "move it out of verify { }" in p["message"], p


def test_the_list_form_of_ys_in_text_gets_the_message_form(client: TestClient) -> None:
    r = client.post("/v1/gradients/net", content=f'{TNET} ys: ["y"]', headers=T)
    assert r.status_code == 400, r.text
    p = _error(r)
    assert p["path"] == "ys" and 'ys { blob: "y" }' in p["message"], p


def test_an_empty_ys_says_how_to_write_it(client: TestClient) -> None:
    r = client.post("/v1/gradients/net", content=TNET, headers=T)
    assert r.status_code == 400, r.text
    p = _error(r)
    assert p["code"] == "ys_empty" and 'ys { blob: "prob" }' in p["message"], p


# --- JSON field hints ---------------------------------------------------------------------------
def test_inputs_name_suggests_blob(client: TestClient) -> None:
    body = {"net": NET, "ys": ["y"],
            "inputs": [{"name": "x", "tensor": {"shape": [2], "data": [1, 2]}}]}
    r = client.post("/v1/verify", json=body)
    assert r.status_code == 400, r.text
    p = _error(r)
    assert p["path"] == "inputs[0].name" and "did you mean `blob`?" in p["message"], p


def test_a_scalar_where_a_list_goes_is_shown_as_a_list(client: TestClient) -> None:
    r = client.post("/v1/run", json={"net": NET, "inputs": [X], "fetch": "y"})
    assert r.status_code == 400 and '["y"]' in _error(r)["message"], r.text
    body = {"net": NET, "ys": ["y"], "inputs": [{"blob": "x", "tensor": {"shape": 2,
                                                                         "data": [1, 2]}}]}
    r = client.post("/v1/verify", json=body)
    assert r.status_code == 400, r.text
    p = _error(r)
    assert p["path"] == "inputs[0].tensor.shape" and "[2]" in p["message"], p
    assert "not an object keyed by blob" not in p["message"]  # (the hint for `inputs` itself)


# --- given gradient ops that lost an output -----------------------------------------------------
def test_a_given_gradient_op_without_an_output_is_named_in_the_note(client: TestClient) -> None:
    net = {"op": [{"type": "FC", "input": ["x", "w", "b"], "output": ["y"]}]}
    inputs = [{"blob": "x", "random": {"shape": [2, 3]}},
              {"blob": "w", "random": {"shape": [4, 3]}},
              {"blob": "b", "random": {"shape": [4]}}]
    ops = client.post("/v1/gradients/net", json={"net": net, "ys": ["y"]}).json()["grad_ops"]
    full = client.post("/v1/verify", json={"net": net, "ys": ["y"], "inputs": inputs,
                                           "grad_ops": ops})
    assert full.status_code == 200 and full.json()["report"]["passed"], full.text
    ops[1]["output"] = [o for o in ops[1]["output"] if o != "x_grad"]
    r = client.post("/v1/verify", json={"net": net, "ys": ["y"], "inputs": inputs,
                                        "grad_ops": ops})
    assert r.status_code == 200, r.text
    rep = r.json()["report"]
    assert not rep["passed"]
    (x,) = [b for b in rep["blobs"] if b["blob"] == "x"]
    assert "no op of the given grad_ops writes it" in x["note"], x


# --- float16 inside the net ---------------------------------------------------------------------
def _half_net() -> caffe2_pb2.NetDef:
    net = caffe2_pb2.NetDef(name="half")
    net.op.extend([make_op("FloatToHalf", ["x"], ["h"]), make_op("HalfToFloat", ["h"], ["f"]),
                   make_op("Tanh", ["f"], ["z"])])
    return net


def test_a_float16_net_is_flagged_and_the_advised_check_passes() -> None:
    grid = [k / 256 for k in (70, 100, 150, 200, 250)]  # (multiples of 2^-8 in [0.25, 1))
    inputs = [InputSpec("x", tensor=TensorSpec([5], "float32", grid))]
    off_grid = [InputSpec("x", tensor=TensorSpec([5], "float32", [0.3, -1.7, 2.2, 5.1, 0.9]))]
    plain = verify_net(_half_net(), ["z"], VerifyOptions(inputs=off_grid))
    (warn,) = [d for d in plain.diagnostics if d.code == "half_precision_blob"]
    assert warn.blobs == ("h",) and 'mode "full"' in warn.message
    advised = verify_net(_half_net(), ["z"], VerifyOptions(
        inputs=inputs, mode="full", step=2.0**-8, rtol=2e-3))
    assert advised.report.passed
    # (and the advised check still catches a wrong gradient: Tanh's derivative doubled)
    ops = list(advised.grad_ops)
    ops.append(make_op("Scale", ["x_grad"], ["x_grad"]))
    ops[-1].arg.add(name="scale", f=2.0)
    wrong = verify_net(_half_net(), ["z"], VerifyOptions(
        inputs=inputs, mode="full", step=2.0**-8, rtol=2e-3), grad_ops=ops)
    assert not wrong.report.passed


def test_a_float64_net_gets_no_float16_warning() -> None:
    net = caffe2_pb2.NetDef(name="t")
    net.op.append(make_op("Tanh", ["x"], ["z"]))
    res = verify_net(net, ["z"], VerifyOptions(
        inputs=[InputSpec("x", tensor=TensorSpec([2], "float64", [0.1, 0.2]))]))
    assert res.report.passed
    assert not [d for d in res.diagnostics if d.code == "half_precision_blob"]


# --- the first non-UTF-8 string of a binary body ------------------------------------------------
def test_the_first_bad_string_of_a_binary_body_is_named() -> None:
    net = caffe2_pb2.NetDef()
    for i in range(4):
        net.op.add(type="Relu", input=[f"x{i}"], output=[f"y{i}"])
    req = netgrad_pb2.NetGradientRequest(net=net)
    req.ys.add(blob="y3")
    data = req.SerializeToString().replace(b"x2", b"\xff\xfe").replace(b"y3", b"\xff\xfd")
    with pytest.raises(DecodeError) as info:
        codec.from_binary(data, netgrad_pb2.NetGradientRequest)
    (p,) = info.value.problems
    assert (p.path, p.op_index, p.code) == ("net.op[2].input[0]", 2, "invalid_utf8")


# --- kernel output count ------------------------------------------------------------------------
def test_an_op_listing_more_outputs_than_its_kernel_computes_says_how_many() -> None:
    net = caffe2_pb2.NetDef()
    net.op.append(make_op("Relu", ["x"], ["y", "z"]))
    import numpy as np

    with pytest.raises(ExecutionError) as info:
        execute(net, {"x": np.ones(2)})
    assert "computes 1 output(s)" in info.value.message and "list at most 1" in info.value.message


# --- CLI: a binary request file -----------------------------------------------------------------
def test_the_cli_refuses_a_binary_request_file_with_the_fix(tmp_path: Path) -> None:
    net = caffe2_pb2.NetDef(name="n")
    net.op.append(make_op("Relu", ["x"], ["y"]))
    req = netgrad_pb2.NetGradientRequest(net=net)
    req.ys.add(blob="y")
    path = tmp_path / "req.pb"
    path.write_bytes(req.SerializeToString())
    with pytest.raises(DecodeError) as info:
        load_net(path)
    assert "holds a NetGradientRequest" in info.value.message
    assert "/v1/gradients/net" in info.value.message
    bare = tmp_path / "net.pb"
    bare.write_bytes(net.SerializeToString())
    assert load_net(bare) == net


# --- /v1/jobs: depth-checked at submission in every encoding ------------------------------------
def _deep(levels: int) -> caffe2_pb2.NetDef:
    net = caffe2_pb2.NetDef()
    net.op.append(make_op("Relu", ["x"], ["y"]))
    for _ in range(levels):
        op = make_op("Do", ["x"], ["y"])
        arg = op.arg.add(name="net")
        arg.n.CopyFrom(net)
        net = caffe2_pb2.NetDef()
        net.op.append(op)
    return net


@pytest.mark.parametrize("media", ["binary", "text", "json"])
def test_a_job_nested_too_deep_is_refused_at_submission(client: TestClient, media: str) -> None:
    req = netgrad_pb2.JobRequest()
    req.run.net.CopyFrom(_deep(150))
    req.run.fetch.append("y")
    if media == "binary":
        r = client.post("/v1/jobs", content=req.SerializeToString(), headers=B)
    elif media == "text":
        r = client.post("/v1/jobs", content=text_format.MessageToString(req), headers=T)
    else:
        from google.protobuf import json_format

        r = client.post("/v1/jobs", content=json.dumps(json_format.MessageToDict(req)),
                        headers=J)
    assert r.status_code == 422, r.text
    assert r.json()["type"].endswith("limit_exceeded")


# --- an empty text body; an answer that cannot be JSON ------------------------------------------
def test_an_empty_text_body_says_what_to_send(client: TestClient) -> None:
    r = client.post("/v1/gradients/net", content="", headers=T)
    assert r.status_code == 400, r.text
    p = _error(r)
    assert p["path"] == "net" and "the body is empty" in p["message"]
    assert 'ys { blob: "<output blob>" }' in p["message"]


def test_an_answer_that_cannot_be_json_has_its_own_code(client: TestClient) -> None:
    req = netgrad_pb2.OpGradientRequest()
    req.op.CopyFrom(caffe2_pb2.OperatorDef(type="Relu", input=["x"], output=["y"]))
    req.op.arg.add(name="blob", s=b"\xff\xfe")
    req.g_output.add(dense="y_grad")
    r = client.post("/v1/gradients/op", content=req.SerializeToString(), headers=B)
    assert r.status_code == 400, r.text
    assert {p["code"] for p in r.json()["errors"]} == {"answer_not_json"}


# --- a pass where every gradient compared is 0 ---------------------------------------------------
def _empty_batch_net() -> tuple[caffe2_pb2.NetDef, list[InputSpec]]:
    net = caffe2_pb2.NetDef(name="empty")
    net.op.extend([make_op("FC", ["data", "w", "b"], ["fc"]), make_op("Tanh", ["fc"], ["t"]),
                   make_op("AveragedLoss", ["t"], ["loss"])])
    inputs = [InputSpec("data", tensor=TensorSpec([0, 2], "float64", [])),
              InputSpec("w", tensor=TensorSpec([3, 2], "float64", [0.1, 0.2, 0.3, 0.4, 0.5,
                                                                    0.6])),
              InputSpec("b", tensor=TensorSpec([3], "float64", [0.1, -0.2, 0.3]))]
    return net, inputs


@pytest.mark.parametrize("mode", ["fast", "full"])
def test_an_empty_batch_pass_is_called_vacuous(mode: str) -> None:
    net, inputs = _empty_batch_net()
    res = verify_net(net, ["loss"], VerifyOptions(inputs=inputs, mode=mode))
    assert res.report.passed
    (warn,) = [d for d in res.diagnostics if d.code == "vacuous_check"]
    assert set(warn.blobs) == {"data", "w", "b"}
    (data,) = [b for b in res.report.blobs if b.blob == "data"]
    assert data.note and "no elements (shape [0, 2])" in data.note


@pytest.mark.parametrize("mode", ["fast", "full"])
def test_a_batch_with_rows_is_not_vacuous(mode: str) -> None:
    net, inputs = _empty_batch_net()
    inputs[0] = InputSpec("data", tensor=TensorSpec([1, 2], "float64", [0.5, -0.5]))
    res = verify_net(net, ["loss"], VerifyOptions(inputs=inputs, mode=mode))
    assert res.report.passed
    assert not [d for d in res.diagnostics if d.code == "vacuous_check"]


def test_the_fanned_out_full_check_flags_a_vacuous_pass_too() -> None:
    from core.executor.pool import WorkerPool
    from core.verify import fanout

    net, inputs = _empty_batch_net()
    with WorkerPool(2) as pool:
        res = verify_net(net, ["loss"], VerifyOptions(inputs=inputs, mode="full"), pool=pool,
                         runner=lambda job: fanout.numeric(job, pool, min_elements=1))
    assert res.report.passed
    assert [d for d in res.diagnostics if d.code == "vacuous_check"]


@pytest.mark.parametrize("seed", range(6))
def test_the_bisecting_locator_names_the_first_bad_op_of_a_big_net(seed: int) -> None:
    import random

    rnd = random.Random(seed)
    n = rnd.choice([1, 17, 100, 1000])
    bad = sorted(rnd.sample(range(n), min(n, rnd.choice([1, 2, 5]))))
    net = caffe2_pb2.NetDef()
    for i in range(n):
        net.op.add(type="Relu", input=[f"in{i:05d}"], output=[f"out{i:05d}"])
    data = net.SerializeToString()
    for i in bad:  # (same length: the encoding stays well-formed)
        field = rnd.choice([b"in", b"out"])
        data = data.replace(field + f"{i:05d}".encode(), field + b"\xff" + f"{i:05d}".encode()[1:])
    with pytest.raises(DecodeError) as info:
        codec.from_binary(data, caffe2_pb2.NetDef)
    (p,) = info.value.problems
    assert p.op_index == bad[0] and p.path is not None and p.path.startswith(f"op[{bad[0]}].")


# --- review of this stop: op counts, CLI request types, hints ------------------------------------
def _many_ops_binary(n: int) -> bytes:
    req = netgrad_pb2.NetGradientRequest()
    for i in range(n):
        req.net.op.append(make_op("Relu", [f"a{i}"], [f"a{i + 1}"]))
    req.ys.add(blob=f"a{n}")
    return req.SerializeToString()


def test_binary_and_text_bodies_with_too_many_ops_are_a_quick_413() -> None:
    with TestClient(create_app(Settings(workers=0, max_ops=50))) as c:
        r = c.post("/v1/gradients/net", content=_many_ops_binary(51), headers=B)
        assert r.status_code == 413, r.text
        assert r.json()["errors"][0]["code"] == "too_many_ops"
        text = "net { " + 'op { type: "Relu" input: "x" output: "x" } ' * 51 + '} ys { blob: "x" }'
        r = c.post("/v1/gradients/net", content=text, headers=T)
        assert r.status_code == 413 and r.json()["errors"][0]["code"] == "too_many_ops", r.text
        r = c.post("/v1/gradients/net", content=_many_ops_binary(50), headers=B)
        assert r.status_code == 200, r.text


def test_the_engine_refuses_too_many_ops_before_reading_ys() -> None:
    from core.api import gradient_for_net
    from core.errors import LimitExceededError
    from core.ir.env import GenLimits

    net = caffe2_pb2.NetDef()
    for i in range(11):
        net.op.append(make_op("Relu", [f"a{i}"], [f"a{i + 1}"]))
    with pytest.raises(LimitExceededError) as info:
        gradient_for_net(net, ["nowhere"], limits=GenLimits(max_ops=10))
    assert info.value.problems[0].code == "too_many_ops"


@pytest.mark.parametrize("kind", ["run", "verify_init", "job"])
def test_the_cli_names_other_binary_request_files(tmp_path: Path, kind: str) -> None:
    net = caffe2_pb2.NetDef(name="n")
    net.op.append(make_op("Relu", ["x"], ["y"]))
    msg: object
    if kind == "run":
        msg = netgrad_pb2.RunRequest(net=net, fetch=["y"])
    elif kind == "verify_init":
        msg = netgrad_pb2.VerifyRequest(net=net, init_net=net)
        msg.ys.add(blob="y")  # type: ignore[attr-defined]
    else:
        msg = netgrad_pb2.JobRequest(run=netgrad_pb2.RunRequest(net=net, fetch=["y"]))
    path = tmp_path / "req.pb"
    path.write_bytes(msg.SerializeToString())  # type: ignore[attr-defined]
    with pytest.raises(DecodeError) as info:
        load_net(path)
    name = {"run": "RunRequest", "verify_init": "VerifyRequest", "job": "JobRequest"}[kind]
    route = {"run": "/v1/run", "verify_init": "/v1/verify", "job": "/v1/jobs"}[kind]
    assert f"holds a {name}" in info.value.message and route in info.value.message
    assert not info.value.problems or "num_workers" not in info.value.problems[0].message


@pytest.mark.parametrize("suffix", [".pb", ".pbtxt", ".json"])
def test_the_cli_names_an_op_gradient_request_file(tmp_path: Path, suffix: str) -> None:
    from google.protobuf import json_format

    req = netgrad_pb2.OpGradientRequest(op=make_op("Relu", ["x"], ["y"]))
    req.g_output.add(dense="y_grad")
    path = tmp_path / f"req{suffix}"
    if suffix == ".pb":
        path.write_bytes(req.SerializeToString())
    elif suffix == ".pbtxt":
        path.write_text(text_format.MessageToString(req))
    else:
        path.write_text(json_format.MessageToJson(req, preserving_proto_field_name=True))
    with pytest.raises(DecodeError) as info:
        load_net(path)
    assert "OpGradientRequest" in info.value.message and "/v1/gradients/op" in info.value.message


def test_inputs_data_points_to_tensor_data(client: TestClient) -> None:
    body = {"net": NET, "ys": ["y"], "verify": {"inputs": [{"blob": "x", "data": [1]}]}}
    r = client.post("/v1/gradients/net", json=body)
    assert r.status_code == 400, r.text
    assert "did you mean `tensor.data`?" in _error(r)["message"]


def test_a_list_of_messages_gets_no_scalar_list_hint(client: TestClient) -> None:
    r = client.post("/v1/verify", json={"net": NET, "ys": ["y"], "inputs": "x"})
    assert r.status_code == 400, r.text
    assert '["x"]' not in _error(r)["message"]


def test_fetching_y_grad_points_to_the_autogen_seed(client: TestClient) -> None:
    r = client.post("/v1/run", json={"net": NET, "inputs": [X], "fetch": ["y_grad"],
                                     "ys": ["y"]})
    assert r.status_code == 422, r.text
    assert "did you mean 'y_autogen_grad'" in _error(r)["message"]


def _do_request(per_net: int) -> netgrad_pb2.NetGradientRequest:
    req = netgrad_pb2.NetGradientRequest()
    for k in range(2):
        sub = caffe2_pb2.NetDef()
        for i in range(per_net):
            sub.op.append(make_op("Relu", [f"a{i}"], [f"a{i + 1}"]))
        do = make_op("Do", [f"x{k}"], [f"o{k}"])
        do.arg.add(name="net").n.CopyFrom(sub)
        req.net.op.append(do)
    req.ys.add(blob="o1")
    return req


@pytest.mark.parametrize("media", ["binary", "text", "json"])
def test_sub_net_ops_count_against_max_ops_in_every_encoding(media: str) -> None:
    from google.protobuf import json_format

    def send(c: TestClient, req: netgrad_pb2.NetGradientRequest) -> object:
        if media == "binary":
            return c.post("/v1/gradients/net", content=req.SerializeToString(), headers=B)
        if media == "text":
            return c.post("/v1/gradients/net", content=text_format.MessageToString(req),
                          headers=T)
        body = json_format.MessageToDict(req, preserving_proto_field_name=True)
        body["ys"] = [e["blob"] for e in body["ys"]]  # (JSON's list form)
        return c.post("/v1/gradients/net", json=body)

    with TestClient(create_app(Settings(workers=0, max_ops=50))) as c:
        r = send(c, _do_request(25))  # 2 + 50 ops
        assert r.status_code == 413, r.text  # type: ignore[attr-defined]
        assert r.json()["errors"][0]["code"] == "too_many_ops"  # type: ignore[attr-defined]
        r = send(c, _do_request(24))  # 2 + 48 ops: past the count (another 4xx or a 200)
        assert r.status_code != 413, r.text  # type: ignore[attr-defined]


# --- walkthrough of this stop: more hints ---------------------------------------------------------
def test_a_gradient_given_as_a_bare_value_in_text_gets_the_message_form(client: TestClient) -> None:
    r = client.post("/v1/gradients/net", content=f'{TNET} ys {{ blob: "y" gradient: "g" }}',
                    headers=T)
    assert r.status_code == 400, r.text
    p = _error(r)
    assert p["path"] == "ys[0].gradient" and 'gradient { dense: "y_grad" }' in p["message"], p


def test_tolerance_synonyms(client: TestClient) -> None:
    r = client.post("/v1/verify", json={"net": NET, "ys": ["y"], "inputs": [X],
                                        "tolerances": {"abs": 1e-3}})
    assert r.status_code == 400 and "did you mean `atol`?" in _error(r)["message"], r.text


@pytest.mark.parametrize(("op", "shown"), [
    ({"type": "Relu", "input": ["x"], "output": ["y"]}, "[{...}]"),
])
def test_one_op_where_the_op_list_goes_says_to_wrap_it(client: TestClient, op: dict,
                                                        shown: str) -> None:
    r = client.post("/v1/gradients/net", json={"net": {"op": op}, "ys": ["y"]})
    assert r.status_code == 400, r.text
    p = _error(r)
    assert p["path"] == "net.op" and "got an object" in p["message"] and shown in p["message"]
    assert "{'" not in p["message"]  # (no Python repr)


def test_one_input_name_where_the_list_goes_is_shown_as_a_list(client: TestClient) -> None:
    net = {"op": [{"type": "Relu", "input": "x", "output": ["y"]}]}
    r = client.post("/v1/gradients/net", json={"net": net, "ys": ["y"]})
    assert r.status_code == 400, r.text
    assert '["x"]' in _error(r)["message"]


# --- second review of this stop ------------------------------------------------------------------
def test_bad_utf8_deep_in_a_chain_of_sub_nets_is_located_in_linear_time() -> None:
    import time

    net = caffe2_pb2.NetDef()
    net.op.add(type="Relu", input=["innermost"], output=["y"])
    for _ in range(2000):
        outer = caffe2_pb2.NetDef()
        op = outer.op.add(type="Do", input=["x"], output=["y"])
        op.arg.add(name="net").n.CopyFrom(net)
        net = outer
    data = net.SerializeToString().replace(b"innermost", b"innermos\xff")
    t = time.process_time()
    with pytest.raises(DecodeError) as info:
        codec.from_binary(data, caffe2_pb2.NetDef)
    assert time.process_time() - t < 5.0  # (quadratic: about 8 s here; linear: 0.1 s)
    assert info.value.problems[0].code == "invalid_utf8"


def test_bad_utf8_beside_an_unset_required_field_is_no_500() -> None:
    net = caffe2_pb2.NetDef()
    for i in range(40):  # (more than a walked list: the locator bisects)
        net.op.add(type="Relu", input=[f"x{i}"], output=[f"y{i}"])
    net.op[0].arg.add(name="q").qtensors.add()  # (a QTensorProto without its required fields)
    data = net.SerializeToPartialString() if hasattr(net, "SerializeToPartialString") else \
        net.SerializePartialToString()
    data = data.replace(b"x7", b"\xff7")
    with pytest.raises(DecodeError) as info:
        codec.from_binary(data, caffe2_pb2.NetDef)
    assert info.value.problems
