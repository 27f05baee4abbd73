"""Problems name the field of the request the caller sent (review of the path changes).

The engine names fields of the verify/run request it is given; ``/v1/gradients/net``, whose
``verify`` holds the options, moves their paths under it (a ``/v1/jobs`` error stays the
synchronous route's problem), and an ``init_net`` does not shift ``inputs[k]``. A checked input
holding NaN or an infinity is refused, but one the default list would check is left out
with a note (a ``-inf`` mask is a fine input).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api_schemas import netgrad_pb2
from app.api import docs
from app.main import create_app
from app.settings import Settings
from tests.api.helpers import PB, assert_problem


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(workers=1)), raise_server_exceptions=False) as c:
        yield c


def _verify(**edits: Any) -> dict[str, Any]:
    req = copy.deepcopy(docs.VERIFY_REQUEST)
    req.update(edits)
    return req


#: fc_w and fc_b from an init_net; `data` the only explicit input
INIT_NET = {"op": [
    {"type": "GivenTensorFill", "output": ["fc_w"],
     "arg": [{"name": "shape", "ints": [3, 4]}, {"name": "values", "floats": [0.1] * 12}]},
    {"type": "GivenTensorFill", "output": ["fc_b"],
     "arg": [{"name": "shape", "ints": [3]}, {"name": "values", "floats": [0.1, -0.2, 0.3]}]},
]}
DATA = {"blob": "data", "tensor": {"shape": [2, 4], "data": [0.5] * 8}}


def _job_error(client: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    r = client.post("/v1/jobs", json=body)
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        j = client.get(r.headers["location"]).json()
        if j["status"] not in ("queued", "running"):
            assert j["status"] == "failed", j
            return dict(j["error"])
        time.sleep(0.05)
    raise AssertionError("job did not finish")


def test_init_net_does_not_shift_input_paths(client: TestClient) -> None:
    bad = {"blob": "data", "tensor": {"shape": [2, 4], "data": [0.5] * 7}}
    for route, body in (("/v1/verify", _verify(init_net=INIT_NET, inputs=[bad])),
                        ("/v1/run", {"net": docs.MLP_NET, "fetch": ["prob"],
                                     "init_net": INIT_NET, "inputs": [bad]})):
        problem = assert_problem(client.post(route, json=body), 400)
        assert [e["path"] for e in problem["errors"]] == ["inputs[0].tensor.data"], route
    twice = _verify(init_net=INIT_NET, inputs=[DATA, DATA])
    problem = assert_problem(client.post("/v1/verify", json=twice), 400)
    assert [e["path"] for e in problem["errors"]] == ["inputs[1].blob"]


def test_init_net_blob_with_nan_named_in_check_points_at_check(client: TestClient) -> None:
    init = copy.deepcopy(INIT_NET)
    init["op"][1]["arg"][1]["floats"] = [0.1, "NaN", 0.3]
    body = _verify(init_net=init, inputs=[DATA], check=["fc_b"])
    problem = assert_problem(client.post("/v1/verify", json=body), 400)
    assert [e["path"] for e in problem["errors"]] == ["check"]
    assert "'fc_b' holds NaN at element 1" in problem["detail"]


def test_verify_inside_gradients_net_names_verify_paths(client: TestClient) -> None:
    opts = {k: v for k, v in docs.VERIFY_REQUEST.items() if k not in ("net", "ys")}
    body = {"net": docs.MLP_NET, "ys": ["prob"], "verify": {**opts, "mode": "ful"}}
    problem = assert_problem(client.post("/v1/gradients/net", json=body), 400)
    assert [e["path"] for e in problem["errors"]] == ["verify.mode"]
    opts["inputs"] = copy.deepcopy(opts["inputs"])
    opts["inputs"][2]["tensor"]["data"] = [0.1, 0.2]
    body = {"net": docs.MLP_NET, "ys": ["prob"], "verify": opts}
    problem = assert_problem(client.post("/v1/gradients/net", json=body), 400)
    assert [e["path"] for e in problem["errors"]] == ["verify.inputs[2].tensor.data"]


def test_job_errors_are_the_synchronous_problems(client: TestClient) -> None:
    """A job's error is what its synchronous route answers (tests/api/test_jobs.py): paths
    name fields of the wrapped verify/run body."""
    error = _job_error(client, {"verify": _verify(mode="ful")})
    assert [e["path"] for e in error["errors"]] == ["mode"]
    run = {"net": docs.MLP_NET, "fetch": ["prob"], "inputs": copy.deepcopy(
        docs.VERIFY_REQUEST["inputs"])}
    run["inputs"][2]["tensor"]["shape"] = [4]
    error = _job_error(client, {"run": run})
    assert [e["path"] for e in error["errors"]] == ["inputs[2].tensor.data"]


SOFTMAX_MASK_NET = {"op": [
    {"type": "Add", "input": ["scores", "mask"], "output": ["masked"]},
    {"type": "Softmax", "input": ["masked"], "output": ["p"]},
]}
MASKED = [
    {"blob": "scores", "random": {"shape": [2, 3], "seed": 3}},
    {"blob": "mask", "tensor": {"shape": [2, 3], "data": [0, 0, "-Infinity", 0, 0, 0]}},
]


def test_default_check_leaves_a_non_finite_input_out_with_a_note(client: TestClient) -> None:
    body = {"net": SOFTMAX_MASK_NET, "ys": ["p"], "inputs": MASKED, "mode": "full"}
    r = client.post("/v1/verify", json=body)
    assert r.status_code == 200, r.text
    res = r.json()
    assert [b["blob"] for b in res["report"]["blobs"]] == ["scores"]
    assert res["report"]["passed"] is True
    notes = [d for d in res["diagnostics"] if d["code"] == "not_checked_non_finite"]
    assert [d["blobs"] for d in notes] == [["mask"]]
    assert "an infinity at element 2" in notes[0]["message"]
    named = {**body, "check": ["scores", "mask"]}
    problem = assert_problem(client.post("/v1/verify", json=named), 400)
    assert [e["path"] for e in problem["errors"]] == ["inputs[1].tensor.data"]


def test_float32_overflow_says_as_float32(client: TestClient) -> None:
    inputs = copy.deepcopy(docs.VERIFY_REQUEST["inputs"])
    inputs[2]["tensor"].update(dtype="float32", data=[0.1, 1e39, 0.3])
    problem = assert_problem(client.post("/v1/verify", json=_verify(
        inputs=inputs, check=["fc_b"])), 400)
    assert "an infinity at element 1 (as float32)" in problem["detail"]


def test_slice_fields_are_suggested_without_the_member_name(client: TestClient) -> None:
    body = {"op": {"type": "Relu", "input": ["x"], "output": ["y"]}, "g_output": ["y_g"],
            "indices": "i"}
    problem = assert_problem(client.post("/v1/gradients/op", json=body), 400)
    assert "`g_output.indices`" in problem["detail"] and "slice" not in problem["detail"]


def test_binary_request_without_net_is_not_called_a_bare_netdef(client: TestClient) -> None:
    req = netgrad_pb2.NetGradientRequest()
    req.ys.add(blob="prob")
    r = client.post("/v1/gradients/net", content=req.SerializeToString(),
                    headers={"Content-Type": PB})
    problem = assert_problem(r, 400)
    assert [e["code"] for e in problem["errors"]] == ["invalid_field"], problem
    assert [e["path"] for e in problem["errors"]] == ["net"]


def test_a_verify_job_honours_init_net_and_densify(client: TestClient) -> None:
    """Walkthrough finding: a /v1/jobs verify job dropped `init_net` and `densify` (it built
    its own call); the route and the job now share one answer builder."""
    with_init = _verify(init_net=INIT_NET, inputs=[DATA])
    sparse = {"net": {"op": [
        {"type": "Gather", "input": ["W", "idx"], "output": ["rows"]},
        {"type": "Tanh", "input": ["W"], "output": ["t"]},
        {"type": "Sum", "input": ["rows", "t"], "output": ["s"]},
    ]}, "ys": ["s"], "densify": True, "mode": "full", "inputs": [
        {"blob": "W", "random": {"shape": [3, 3], "seed": 1}},
        {"blob": "idx", "tensor": {"shape": [3], "dtype": "int64", "data": [0, 2, 1]}}]}
    for body in (with_init, sparse):
        sync = client.post("/v1/verify", json=body)
        assert sync.status_code == 200, sync.text
        r = client.post("/v1/jobs", json={"verify": body})
        assert r.status_code == 202, r.text
        deadline = time.monotonic() + 60
        while (job := client.get(r.headers["location"]).json())["status"] in ("queued",
                                                                               "running"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert job["status"] == "done", job
        assert job["verify"] == sync.json()


def test_nothing_compared_is_never_a_pass(client: TestClient) -> None:
    """Review finding: an input that overflows float32 made every output element infinite,
    so every loss weight was 0 and a wrong gradient "passed" with nothing compared."""
    wrong = [{"type": "Scale", "input": ["y_grad"], "output": [f"{b}_grad"],
              "arg": [{"name": "scale", "f": 3.0}], "is_gradient_op": True} for b in "ab"]
    body = {"net": {"op": [{"type": "Add", "input": ["a", "b"], "output": ["y"]}]},
            "ys": ["y"], "mode": "full", "grad_ops": wrong, "inputs": [
                {"blob": "a", "tensor": {"shape": [2], "data": [1, 2]}},
                {"blob": "b", "tensor": {"shape": [2], "dtype": "float32",
                                         "data": [1e39, -1e39]}}]}
    problem = assert_problem(client.post("/v1/verify", json=body), 400)
    assert [e["code"] for e in problem["errors"]] == ["no_finite_output"]
    finite = copy.deepcopy(body)
    finite["inputs"][1]["tensor"]["data"] = [1, 2]
    r = client.post("/v1/verify", json=finite)
    assert r.status_code == 200 and r.json()["report"]["passed"] is False  # (3 != 1)


def test_binary_job_missing_its_net_is_not_a_bare_netdef(client: TestClient) -> None:
    req = netgrad_pb2.JobRequest()
    req.run.fetch.append("z")
    req.run.ys.add(blob="z")
    r = client.post("/v1/jobs", content=req.SerializeToString(), headers={"Content-Type": PB})
    problem = assert_problem(r, 400)
    assert [(e["code"], e["path"]) for e in problem["errors"]] == [("invalid_field", "run.net")]


@pytest.mark.parametrize(("route", "body", "want"), [
    ("/v1/gradients/net", {"net": docs.MLP_NET, "ys": ["prob"], "input": []},
     "did you mean `verify.inputs`?"),
    ("/v1/gradients/net", {"net": docs.MLP_NET, "ys": ["prob"], "verify": {"input": []}},
     "did you mean `inputs`?"),
    ("/v1/jobs", {"run": {"net": docs.MLP_NET, "fetch": ["prob"], "input": []}},
     "did you mean `inputs`?"),
    ("/v1/verify", _verify(inputs=[{"blob": "x", "tensor": {"shape": [1], "data": [1],
                                                            "type": "float32"}}]),
     "did you mean `dtype`?"),
])
def test_nested_typos_are_matched_in_their_own_message(client: TestClient, route: str,
                                                       body: dict[str, Any], want: str) -> None:
    problem = assert_problem(client.post(route, json=body), 400)
    assert want in problem["detail"], problem["detail"]


def test_a_typo_is_not_matched_in_another_branch(client: TestClient) -> None:
    """`run.output` is no field of RunRequest; `verify.grad_ops.output` (the other member of
    the job) and `net.op.output` (a Caffe2 message) are not what was meant."""
    body = {"run": {"net": docs.MLP_NET, "fetch": ["prob"], "output": 1}}
    problem = assert_problem(client.post("/v1/jobs", json=body), 400)
    assert "did you mean" not in problem["detail"], problem["detail"]


def test_default_check_keeps_double_spelled_inputs(client: TestClient) -> None:
    """Review finding: with an input left out by design (StopGradient), the default list kept
    only dtypes spelled float*, silently dropping one given as "double"."""
    body = {"net": {"op": [
        {"type": "Mul", "input": ["a", "w"], "output": ["m"]},
        {"type": "StopGradient", "input": ["s"], "output": ["t"]},
        {"type": "Add", "input": ["m", "t"], "output": ["y"]},
    ]}, "ys": ["y"], "mode": "full", "inputs": [
        {"blob": "a", "random": {"shape": [3], "seed": 1}},
        {"blob": "w", "random": {"shape": [3], "seed": 2, "dtype": "double"}},
        {"blob": "s", "random": {"shape": [3], "seed": 3}}]}
    r = client.post("/v1/verify", json=body)
    assert r.status_code == 200, r.text
    assert [b["blob"] for b in r.json()["report"]["blobs"]] == ["a", "w"]


@pytest.mark.parametrize("mode", ["fast", "full"])
def test_a_step_below_the_inputs_resolution_is_refused(client: TestClient, mode: str) -> None:
    """Final walkthrough: at |x| = 1e20 the step 1e-6 is lost (x + h == x); fast mode then
    compared 0 with 0 and passed, full mode divided by zero (a 422 worker error)."""
    body = {"net": {"op": [{"type": "Relu", "input": ["x"], "output": ["y"]}]}, "ys": ["y"],
            "mode": mode, "inputs": [{"blob": "x", "tensor": {"shape": [2],
                                                              "data": [1e20, 3e20]}}]}
    problem = assert_problem(client.post("/v1/verify", json=body), 400)
    assert [(e["code"], e["path"]) for e in problem["errors"]] == [
        ("step_below_resolution", "tolerances.step")]
    body["tolerances"] = {"step": 1e9}  # 6e4 ulps: the check runs, and Relu is right
    r = client.post("/v1/verify", json=body)
    assert r.status_code == 200 and r.json()["report"]["passed"] is True, r.text


def test_nothing_left_to_check_is_not_a_pass(client: TestClient) -> None:
    body = {"net": {"op": [{"type": "Softmax", "input": ["mask"], "output": ["p"]}]},
            "ys": ["p"], "inputs": [{"blob": "mask", "tensor": {
                "shape": [1, 3], "data": [0, "-Infinity", 1]}}]}
    problem = assert_problem(client.post("/v1/verify", json=body), 400)
    assert [(e["code"], e["path"]) for e in problem["errors"]] == [("nothing_to_check", "check")]


@pytest.mark.parametrize(("tolerances", "path"), [
    ({"rtol": "Infinity"}, "tolerances.rtol"), ({"rtol": 1.0}, "tolerances.rtol"),
    ({"atol": "Infinity"}, "tolerances.atol"), ({"atol": "NaN"}, "tolerances.atol"),
])
def test_tolerances_that_pass_anything_are_refused(client: TestClient, tolerances: dict[str, Any],
                                                   path: str) -> None:
    """Final walkthrough: `"rtol": "Infinity"` made a wrong gradient (Scale -100 for
    Mul(x, x)) pass."""
    body = _verify(tolerances={**docs.VERIFY_REQUEST["tolerances"], **tolerances})
    problem = assert_problem(client.post("/v1/verify", json=body), 400)
    assert [e["path"] for e in problem["errors"]] == [path]
