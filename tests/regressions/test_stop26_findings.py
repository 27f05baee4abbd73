"""Regressions of stop 26.

* ``/v1/verify`` with given ``grad_ops`` that start with the all-ones seed fill (as
  ``/v1/gradients/net`` returns them) named a failing gradient op by its index *after* the
  checker dropped the fill: ``grad_ops/op[1]`` for the caller's ``grad_ops[2]``.
* The fuzzer's independent cross-check read a GradientSlice of a multi-rank index blob as
  one value per row and crashed; the fuzzer now draws Gathers with 0-d and [2, 2] indices.
* Invalid UTF-8 in a binary body had code ``decode_error``; JSON and text say
  ``invalid_utf8``.
* A binary OpGradientRequest without ``g_output`` on a net route got "Wire format was
  corrupt"; an OpGradientRequest on ``/v1/jobs`` got ``verify.net.op`` as a did-you-mean.
* A problem inside ``OpGradientRequest.op`` (JSON or text) or a given ``grad_ops[k]`` named
  no op; it names op 0 (as the engine's own problems do) or op ``k`` and its type.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import numpy as np
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings

from api_schemas import caffe2_pb2, netgrad_pb2
from app.main import create_app
from app.settings import Settings
from core.api import gradient_for_net
from core.errors import ExecutionError
from core.executor.executor import execute
from core.registry import make_op
from core.verify.checker import InputSpec, TensorSpec, VerifyOptions, verify_net
from tests.fuzz.property import RIGHT_200, check_outcome, cross_check
from tests.fuzz.strategies import FuzzCase, fuzz_cases

J = {"content-type": "application/json"}
B = {"content-type": "application/x-protobuf"}
T = {"content-type": "text/x-protobuf"}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(workers=1))) as c:
        yield c


def _relu_net() -> caffe2_pb2.NetDef:
    net = caffe2_pb2.NetDef(name="relu")
    net.op.append(make_op("Relu", ["x"], ["y"]))
    return net


X = [InputSpec("x", tensor=TensorSpec([2], "float64", [1.0, -2.0]))]


# --- the checker names given gradient ops by the caller's index ------------------------------
def test_a_failing_given_gradient_op_is_named_by_the_callers_index() -> None:
    ops = list(gradient_for_net(_relu_net(), ["y"]).grad_ops)
    assert [o.type for o in ops] == ["ConstantFill", "ReluGradient"]  # the fill is adopted
    ops.append(make_op("Mul", ["nope", "y_autogen_grad"], ["z"]))
    with pytest.raises(ExecutionError) as info:
        verify_net(_relu_net(), ["y"], VerifyOptions(inputs=X), grad_ops=ops)
    (p,) = info.value.problems
    assert (p.op_index, p.op_type, p.path) == (2, "Mul", "grad_ops/op[2]:Mul")
    assert p.message.startswith("grad_ops/op[2]:Mul:")


def test_an_unknown_given_gradient_op_type_is_named_by_the_callers_index() -> None:
    ops = list(gradient_for_net(_relu_net(), ["y"]).grad_ops)
    ops.append(make_op("ReluGradeint", ["y", "y_autogen_grad"], ["z"]))
    with pytest.raises(ExecutionError) as info:
        verify_net(_relu_net(), ["y"], VerifyOptions(inputs=X), grad_ops=ops)
    (p,) = info.value.problems
    assert (p.op_index, p.code) == (2, "unknown_op_type")


def test_given_ops_without_a_seed_fill_keep_their_indices(client: TestClient) -> None:
    body = {"net": {"op": [{"type": "Relu", "input": ["x"], "output": ["y"]}]}, "ys": ["y"],
            "inputs": [{"blob": "x", "tensor": {"shape": [2], "data": [1.0, -2.0]}}],
            "grad_ops": [{"type": "ReluGradient", "input": ["y", "y_grad"],
                          "output": ["x_grad"]},
                         {"type": "Mul", "input": ["nope", "y_grad"], "output": ["z"]}]}
    r = client.post("/v1/verify", json=body)
    assert r.status_code == 422, r.text
    (p,) = r.json()["errors"]
    assert (p["op_index"], p["path"]) == (1, "grad_ops/op[1]:Mul")
    body["grad_ops"].insert(0, {"type": "ConstantFill", "input": ["y"],
                                "output": ["y_autogen_grad"]})
    body["grad_ops"][1]["input"][1] = body["grad_ops"][2]["input"][1] = "y_autogen_grad"
    r = client.post("/v1/verify", json=body)
    assert r.status_code == 422, r.text
    (p,) = r.json()["errors"]
    assert (p["op_index"], p["path"]) == (2, "grad_ops/op[2]:Mul")


# --- multi-rank index blobs in the fuzzer -----------------------------------------------------
def _gather2d() -> tuple[caffe2_pb2.NetDef, list[InputSpec]]:
    net = caffe2_pb2.NetDef(name="g2")
    net.op.extend([make_op("Gather", ["U", "IDX"], ["m"]), make_op("Tanh", ["m"], ["t"])])
    inputs = [InputSpec("U", tensor=TensorSpec([3], "float64", [0.3, -0.7, 1.1])),
              InputSpec("IDX", tensor=TensorSpec([2, 2], "int64", [0, 2, 2, 1]))]
    return net, inputs


def test_a_gather_of_2d_indices_passes_the_property() -> None:
    net, inputs = _gather2d()
    assert check_outcome(net, ["t"], inputs, constants=["IDX"], seed=1) == RIGHT_200


def test_the_cross_check_catches_a_wrong_multi_rank_slice() -> None:
    net, inputs = _gather2d()
    feeds = {"U": np.array([0.3, -0.7, 1.1]), "IDX": np.array([[0, 2], [2, 1]])}
    base = execute(net, feeds)
    res = gradient_for_net(net, {"t": "t_grad"})
    good, _ = cross_check(net, ["t"], feeds, base, res.grad_ops, res.grad_map, ["U"], 1)
    assert good == []
    wrong = [caffe2_pb2.OperatorDef() for _ in res.grad_ops]
    for w, o in zip(wrong, res.grad_ops, strict=True):
        w.CopyFrom(o)
    values = res.grad_map["U"].values  # type: ignore[union-attr]
    wrong.append(make_op("Scale", [values], [values]))
    wrong[-1].arg.add(name="scale", f=1.5)
    problems, blobs = cross_check(net, ["t"], feeds, base, wrong, res.grad_map, ["U"], 1)
    assert blobs == ["U"] and problems


SEEN: Counter[tuple[int, ...]] = Counter()


@settings(max_examples=300, derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(case=fuzz_cases())
def _draw(case: FuzzCase) -> None:
    for spec in case.inputs:
        if spec.blob.startswith("IDX") and spec.tensor is not None:
            SEEN[tuple(spec.tensor.shape)] += 1


def test_the_fuzzer_draws_index_blobs_of_three_ranks() -> None:
    SEEN.clear()
    _draw()
    assert SEEN[()] > 0 and SEEN[(2, 2)] > 0 and SEEN[(2,)] > 0, dict(SEEN)


# --- wire messages ----------------------------------------------------------------------------
def _op() -> caffe2_pb2.OperatorDef:
    return caffe2_pb2.OperatorDef(type="Relu", input=["x"], output=["y"])


def test_invalid_utf8_in_a_binary_body_has_the_json_code(client: TestClient) -> None:
    req = netgrad_pb2.OpGradientRequest(op=_op(), g_output=[netgrad_pb2.Gradient(dense="g")])
    data = req.SerializeToString().replace(b"\x01x", b"\x01\xff")
    r = client.post("/v1/gradients/op", content=data, headers=B)
    assert r.status_code == 400
    (p,) = r.json()["errors"]
    assert (p["code"], p["path"]) == ("invalid_utf8", "op.input[0]")


def test_a_binary_op_request_without_g_output_on_a_net_route(client: TestClient) -> None:
    data = netgrad_pb2.OpGradientRequest(op=_op()).SerializeToString()
    r = client.post("/v1/gradients/net", content=data, headers=B)
    assert r.status_code == 400
    (p,) = r.json()["errors"]
    assert p["code"] == "op_request_on_net_route" and "/v1/gradients/op" in p["message"]


@pytest.mark.parametrize("binary", [False, True])
def test_an_op_request_on_the_jobs_route(client: TestClient, binary: bool) -> None:
    req = netgrad_pb2.OpGradientRequest(op=_op(), g_output=[netgrad_pb2.Gradient(dense="g")])
    if binary:
        r = client.post("/v1/jobs", content=req.SerializeToString(), headers=B)
    else:
        r = client.post("/v1/jobs", json={"op": {"type": "Relu", "input": ["x"],
                                                 "output": ["y"]}, "g_output": ["g"]})
    assert r.status_code == 400
    detail = r.json()["detail"]
    assert "POST it to /v1/gradients/op" in detail and "verify.net.op" not in detail


@pytest.mark.parametrize("media", ["json", "text"])
def test_a_problem_inside_the_single_op_names_op_0(client: TestClient, media: str) -> None:
    if media == "json":
        r = client.post("/v1/gradients/op", json={
            "op": {"type": "Relu", "inptu": ["x"], "output": ["y"]}, "g_output": ["g"]})
    else:
        r = client.post("/v1/gradients/op", headers=T,
                        content=b'op { type: "Relu" inptu: "x" output: "y" } g_output: "g"')
    assert r.status_code == 400
    (p,) = r.json()["errors"]
    assert (p["code"], p["path"], p["op_index"], p["op_type"]) == (
        "unknown_field", "op.inptu", 0, "Relu")


def test_a_problem_inside_given_grad_ops_names_its_index(client: TestClient) -> None:
    body = {"net": {"op": [{"type": "Relu", "input": ["x"], "output": ["y"]}]}, "ys": ["y"],
            "inputs": [{"blob": "x", "tensor": {"shape": [1], "data": [1.0]}}],
            "grad_ops": [{"type": "ConstantFill", "input": ["y"], "output": ["y_autogen_grad"]},
                         {"type": "ReluGradient", "inptu": ["y"], "output": ["x_grad"]}]}
    r = client.post("/v1/verify", json=body)
    assert r.status_code == 400
    (p,) = r.json()["errors"]
    assert (p["path"], p["op_index"], p["op_type"]) == ("grad_ops[1].inptu", 1, "ReluGradient")


# --- adversarial review, stop 26 ------------------------------------------------------------
def _bodies() -> dict[str, bytes]:
    req = netgrad_pb2.OpGradientRequest(op=_op(), g_output=[netgrad_pb2.Gradient(dense="g")])
    net = caffe2_pb2.NetDef(op=[_op()])
    return {"op_request": req.SerializeToString(), "operatordef": _op().SerializeToString(),
            "netdef": net.SerializeToString()}


@pytest.mark.parametrize("kind", ["op_request", "operatordef", "netdef"])
@pytest.mark.parametrize("route", ["/v1/gradients/net", "/v1/verify", "/v1/run", "/v1/jobs",
                                   "/v1/gradients/op"])
def test_a_misrouted_binary_body_with_a_bad_utf8_type_is_a_400(
        client: TestClient, kind: str, route: str) -> None:
    data = _bodies()[kind].replace(b"Relu", b"Re\xc3u")  # (the type is not UTF-8)
    r = client.post(route, content=data, headers=B)
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith("application/problem+json")


def test_invalid_utf8_in_a_binary_body_names_its_op(client: TestClient) -> None:
    net = caffe2_pb2.NetDef(op=[_op(), caffe2_pb2.OperatorDef(type="Tanh", input=["y"],
                                                               output=["qq"])])
    req = netgrad_pb2.NetGradientRequest(net=net, ys=[netgrad_pb2.GradientMapEntry(blob="y")])
    data = req.SerializeToString().replace(b"\x02qq", b"\x02q\xff")
    r = client.post("/v1/gradients/net", content=data, headers=B)
    assert r.status_code == 400
    p = r.json()["errors"][0]
    assert (p["code"], p["op_index"], p["op_type"]) == ("invalid_utf8", 1, "Tanh"), p
    assert p["path"] == "net.op[1].output[0]"


def _tanh_ops() -> tuple[caffe2_pb2.NetDef, list[caffe2_pb2.OperatorDef]]:
    net = caffe2_pb2.NetDef(name="tanh")
    net.op.append(make_op("Tanh", ["x"], ["y"]))
    ops = []
    for g in gradient_for_net(net, ["y"]).grad_ops:
        op = caffe2_pb2.OperatorDef()
        op.CopyFrom(g)
        ops.append(op)
    return net, ops


def _passes(net: caffe2_pb2.NetDef, ops: list[caffe2_pb2.OperatorDef]) -> bool:
    opts = VerifyOptions(inputs=[InputSpec("x", tensor=TensorSpec([2], "float64", [0.5, -0.2]))],
                         mode="full")
    return verify_net(net, ["y"], opts, grad_ops=ops).report.passed


def test_the_generated_seed_fill_is_adopted() -> None:
    net, ops = _tanh_ops()
    assert ops[0].type == "ConstantFill" and _passes(net, ops)


@pytest.mark.parametrize("edit", ["value 0", "value 2", "dtype"])
def test_a_seed_fill_of_another_value_is_not_adopted(edit: str) -> None:
    net, ops = _tanh_ops()
    if edit.startswith("value"):
        ops[0].arg[0].f = float(edit.split()[1])
    else:
        ops[0].arg.add(name="dtype", i=10)
    assert not _passes(net, ops)  # the fill runs as given: the gradient it makes is wrong


def test_a_seed_fill_after_its_reader_is_not_adopted() -> None:
    net, ops = _tanh_ops()
    ops.reverse()
    with pytest.raises(ExecutionError) as info:  # as in Caffe2: the reader finds no seed
        _passes(net, ops)
    assert info.value.problems[0].path == "grad_ops/op[0]:TanhGradient"


@pytest.mark.parametrize("bad", ["abc", 5, [1]])
def test_a_grad_ops_element_that_is_not_an_object_names_its_index(
        client: TestClient, bad: object) -> None:
    body = {"net": {"op": [{"type": "Relu", "input": ["x"], "output": ["y"]}]}, "ys": ["y"],
            "inputs": [{"blob": "x", "tensor": {"shape": [1], "data": [1.0]}}],
            "grad_ops": [{"type": "ConstantFill", "input": ["y"], "output": ["y_autogen_grad"]},
                         bad]}
    r = client.post("/v1/verify", json=body)
    assert r.status_code == 400
    (p,) = r.json()["errors"]
    assert (p["code"], p["op_index"], p["path"]) == ("invalid_field", 1, "grad_ops[1]")


def test_verify_answers_given_ops_as_given(client: TestClient) -> None:
    net = {"op": [{"type": "Tanh", "input": ["x"], "output": ["y"]}]}
    given = client.post("/v1/gradients/net", json={"net": net, "ys": ["y"]}).json()["grad_ops"]
    assert given[0]["type"] == "ConstantFill"
    r = client.post("/v1/verify", json={
        "net": net, "ys": ["y"], "grad_ops": given,
        "inputs": [{"blob": "x", "tensor": {"shape": [2], "data": [0.5, -0.2]}}]})
    assert r.status_code == 200, r.text
    assert r.json()["report"]["passed"] is True
    assert r.json()["grad_ops"] == given  # (indices as the caller's; the fill kept)


# --- walkthrough, stop 26 ---------------------------------------------------------------------
def _loaded_modules() -> list[str]:
    import sys

    return sorted(m for m in sys.modules if m.startswith(("core.", "api_schemas.")))


def test_a_worker_imports_every_engine_module_when_it_starts() -> None:
    """An unknown op type's did-you-mean (``core.typos``, imported inside a function) was a
    500 from a worker started before the README's second command reinstalled netgrad."""
    import pkgutil

    import core
    from core.executor.pool import WorkerPool

    every = sorted(i.name for i in pkgutil.walk_packages(core.__path__, "core."))
    with WorkerPool(1) as pool:
        loaded = pool.submit(_loaded_modules)
    assert "core.typos" in loaded
    assert [m for m in every if m not in loaded] == []


@pytest.mark.parametrize(("route", "text", "field", "fixed"), [
    ("/v1/gradients/net", 'net { op { type: "Relu" input: "x" output: "y" } } ys: "y"', "ys",
     'net { op { type: "Relu" input: "x" output: "y" } } ys { blob: "y" }'),
    ("/v1/gradients/op", 'op { type: "Relu" input: "x" output: "y" } g_output: "y_grad"',
     "g_output", 'op { type: "Relu" input: "x" output: "y" } g_output { dense: "y_grad" }'),
])
def test_a_bare_value_for_a_text_format_message_field_says_how_to_write_it(
        client: TestClient, route: str, text: str, field: str, fixed: str) -> None:
    r = client.post(route, content=text.encode(), headers=T)
    assert r.status_code == 400
    (p,) = r.json()["errors"]
    assert p["path"] == field and f"write {field} {{" in p["message"]
    assert ".;" not in p["message"]
    assert client.post(route, content=fixed.encode(), headers=T).status_code == 200


def test_a_text_format_output_without_a_gradient_is_json_null(client: TestClient) -> None:
    text = b'op { type: "Relu" input: "x" output: "y" } g_output { }'
    r = client.post("/v1/gradients/op", content=text, headers=T)
    j = client.post("/v1/gradients/op", json={
        "op": {"type": "Relu", "input": ["x"], "output": ["y"]}, "g_output": [None]})
    assert r.status_code == j.status_code == 422  # (Relu's gradient needs its output's)
    assert r.json()["errors"] == j.json()["errors"]


def test_json_sent_as_text_format_names_the_media_type(client: TestClient) -> None:
    body = b'{"net": {"op": [{"type": "Relu", "input": ["x"], "output": ["y"]}]}, "ys": ["y"]}'
    r = client.post("/v1/gradients/net", content=body, headers=T)
    assert r.status_code == 400
    (p,) = r.json()["errors"]
    assert p["code"] == "json_as_text" and "application/json" in p["message"]


def test_a_net_routes_binary_request_on_the_jobs_route(client: TestClient) -> None:
    net = caffe2_pb2.NetDef(op=[_op()])
    data = netgrad_pb2.VerifyRequest(net=net, ys=[netgrad_pb2.GradientMapEntry(blob="y")])
    r = client.post("/v1/jobs", content=data.SerializeToString(), headers=B)
    assert r.status_code == 400
    (p,) = r.json()["errors"]
    assert p["code"] == "unwrapped_job_request" and '{"verify":' in p["message"]


def test_the_cli_says_a_request_file_is_not_a_netdef(tmp_path: object) -> None:
    import subprocess
    import sys
    from pathlib import Path

    f = Path(str(tmp_path), "req.pbtxt")
    f.write_text('net { op { type: "Relu" input: "x" output: "y" } } ys { blob: "y" }')
    out = subprocess.run([sys.executable, "-m", "app.cli", "grad", str(f)], capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 1
    assert "holds a request message" in out.stderr and "--ys" in out.stderr


@pytest.mark.parametrize("kind", ["verify", "run"])
def test_a_job_missing_an_input_is_a_400_at_once(client: TestClient, kind: str) -> None:
    body: dict[str, object] = {"net": {"op": [{"type": "Relu", "input": ["x"],
                                               "output": ["y"]}]}}
    body.update({"ys": ["y"]} if kind == "verify" else {"fetch": ["y"]})
    r = client.post("/v1/jobs", json={kind: body})
    assert r.status_code == 400, r.text  # (was 202, then a failed job)
    (p,) = r.json()["errors"]
    assert (p["code"], p["op_index"], p["blobs"]) == ("missing_input", 0, ["x"])
    body["inputs"] = [{"blob": "x", "tensor": {"shape": [1], "data": [1.0]}}]
    assert client.post("/v1/jobs", json={kind: body}).status_code == 202


# --- final review, stop 26 --------------------------------------------------------------------
@pytest.mark.parametrize("body", [b"[" * 100_000, b'{"a":' * 5000 + b"1" + b"}" * 5000])
def test_deep_json_sent_as_text_format_is_a_400(client: TestClient, body: bytes) -> None:
    r = client.post("/v1/verify", content=body, headers=T)
    assert r.status_code == 400, r.text  # (a full json.loads recursed: 500)
    assert r.json()["errors"][0]["code"] == "json_as_text"


def test_text_format_is_never_taken_for_json(client: TestClient) -> None:
    r = client.post("/v1/gradients/net", content=b'net { op { type: "Relu" inptu: "x" } }',
                    headers=T)
    assert r.status_code == 400 and r.json()["errors"][0]["code"] == "unknown_field"


def test_misroute_checks_read_a_bounded_number_of_ops() -> None:
    from app.api import misrouted

    net = caffe2_pb2.NetDef(op=[_op()] * misrouted._OPS_LOOKED_AT)
    assert misrouted._typed_ops(net)
    net.op.add(type="1 not a type")  # (past the ops looked at)
    assert misrouted._typed_ops(net)
    net.op[0].type = "1 not a type"
    assert not misrouted._typed_ops(net)
