"""Regressions of stop 25's walkthrough and adversarial review.

* A ``Do`` sub-net reading a blob that no binding provides and no earlier sub-net op writes
  got a 200 without a word (the inner gradient of that blob dropped silently); the forward
  Do fails at run time in its new workspace (with ``reuse_workspace`` an earlier run may have
  left the blob). Now an ``unbound_subnet_read`` warning names the reading sub-net op.
* ``Pow(A, B)`` of different shapes without ``broadcast`` ran with NumPy broadcasting (a
  ``[2, 3]`` gradient for a ``[3]`` exponent); Caffe2's kernel refuses it, and so does ours.
* Conv / pooling / Im2Col / PadImage / Upsample / Resize built their output (gigabytes for a
  32-byte request) before the element cap refused it; the cap is now checked first.
* ``FC``, ``Softmax``, ``SoftmaxWithLoss`` and ``SquaredL2Distance`` of an empty batch raised
  NumPy's reshape error (a 422 for a kernel bug); they give empty results as Caffe2's do.
* ``/v1/gradients/op`` gave two partial gradients for ``Mul(x, x)`` without a word.
* A failed job's problem lacked the fix the synchronous route appends.
* An ``OpGradientRequest`` or a bare ``OperatorDef`` sent to a net route (JSON or binary) got
  nonsense did-you-means ("verify.inputs.tensor.dtype") or no hint at all.
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from google.protobuf import json_format

from api_schemas import caffe2_pb2, netgrad_pb2
from app.main import create_app
from app.settings import Settings
from core.api import gradient_for_net, gradient_for_op
from core.errors import ExecutionError, LimitExceededError, NetgradError
from core.executor.executor import execute
from core.registry import make_arg, make_op
from core.verify.checker import InputSpec, VerifyOptions, verify_net


def _do(inner: list[caffe2_pb2.OperatorDef], reuse: bool = False) -> caffe2_pb2.NetDef:
    """``CreateScope(W)``, then the README's Do with the given sub-net ops."""
    sub = caffe2_pb2.NetDef(name="subnet")
    sub.op.extend(inner)
    args = [make_arg("net", sub), make_arg("inner_blobs", ["X", "Y", "Z"]),
            make_arg("outer_blobs_idx", [0, 1, 2])]
    if reuse:
        args.append(make_arg("reuse_workspace", 1))
    net = caffe2_pb2.NetDef(name="do")
    net.op.extend([make_op("CreateScope", [], ["W"]),
                   make_op("Do", ["outer_X", "outer_Y", "W"], ["outer_Z", "W"], args)])
    return net


def test_a_do_subnet_reading_an_unbound_blob_is_named() -> None:
    net = _do([make_op("Tanh", ["Y"], ["T"]), make_op("Add", ["X", "Q"], ["Z"])])
    res = gradient_for_net(net, {"outer_Z": None})
    (w,) = [d for d in res.diagnostics if d.code == "unbound_subnet_read"]
    assert w.severity == "warning" and w.blobs == ("Q",)
    assert (w.op_index, w.op_type, w.path) == (1, "Add", "op[1]:Do/net/op[1]:Add")
    assert "inner_blobs" in w.message and "fails there at run time" in w.message
    # the forward net indeed cannot run: the Do's workspace holds only the bound blobs
    feeds = {"outer_X": np.ones(2), "outer_Y": np.ones(2), "Q": np.ones(2)}
    with pytest.raises(ExecutionError, match="'Q'"):
        execute(net, feeds)


def test_a_do_subnet_reading_what_it_wrote_or_an_in_place_blob_is_fine() -> None:
    net = _do([make_op("Tanh", ["X"], ["Q"]), make_op("Add", ["Q", "Y"], ["Z"])])
    res = gradient_for_net(net, {"outer_Z": None})
    assert not [d for d in res.diagnostics if d.code == "unbound_subnet_read"]


def test_with_reuse_workspace_an_unbound_read_is_a_warning() -> None:
    net = _do([make_op("Add", ["X", "Q"], ["Z"])], reuse=True)
    res = gradient_for_net(net, {"outer_Z": None})
    (w,) = [d for d in res.diagnostics if d.code == "unbound_subnet_read"]
    assert w.severity == "warning" and "earlier run" in w.message


def test_pow_of_two_shapes_without_broadcast_is_refused() -> None:
    net = caffe2_pb2.NetDef(name="p")
    net.op.append(make_op("Pow", ["x", "e"], ["y"]))
    feeds = {"x": np.full((2, 3), 2.0), "e": np.ones(3)}
    with pytest.raises(ExecutionError, match="broadcast=1"):
        execute(net, feeds)
    net.op[0].arg.append(make_arg("broadcast", 1))
    assert execute(net, feeds)["y"].shape == (2, 3)
    rng = np.random.default_rng(20261202)
    opts = VerifyOptions(inputs=[InputSpec.from_array("x", rng.uniform(1, 2, (2, 3))),
                                 InputSpec.from_array("e", rng.normal(size=3))], mode="full")
    assert verify_net(net, ["y"], opts).report.passed


_BIG = [
    ("Conv", {"W": np.ones((1, 1, 1, 1))}, [make_arg("kernel", 1), make_arg("pad", 6000)]),
    ("MaxPool", {}, [make_arg("kernel", 1), make_arg("pad", 6000)]),
    ("AveragePool", {}, [make_arg("kernel", 1), make_arg("pad", 6000)]),
    ("Im2Col", {}, [make_arg("kernel", 1), make_arg("pad", 6000)]),
    ("PadImage", {}, [make_arg("pad", 6000)]),
    ("UpsampleNearest", {}, [make_arg("scale", 6000)]),
    ("ResizeNearest", {}, [make_arg("width_scale", 6000.0), make_arg("height_scale", 6000.0)]),
    ("Conv", {"W": np.ones((1, 1, 1, 1))}, [make_arg("kernel", 1), make_arg("pad", 2**40)]),
]


def _refused_before_allocating(net: caffe2_pb2.NetDef, feeds: dict[str, np.ndarray]) -> None:
    """The run is refused by the element cap after allocating less than 50 MiB."""
    tracemalloc.start()
    try:
        with pytest.raises(LimitExceededError, match="more than the limit"):
            execute(net, feeds)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 50 * 2**20, f"{net.op[0].type} allocated {peak / 2**20:.0f} MiB first"


@pytest.mark.parametrize(("op_type", "extra", "args"), _BIG,
                         ids=[f"{t}-{a[-1].i or a[-1].f:g}" for t, _, a in _BIG])
def test_the_element_cap_is_checked_before_the_output_is_built(
        op_type: str, extra: dict[str, np.ndarray], args: list[Any]) -> None:
    net = caffe2_pb2.NetDef(name="big")
    net.op.append(make_op(op_type, ["X", *extra], ["Y"], args))
    feeds = {"X": np.ones((1, 1, 2, 2)), **extra}
    _refused_before_allocating(net, feeds)


@pytest.mark.parametrize(("op_type", "feeds", "args"), [
    ("Conv", {"X": np.ones((1, 1, 400, 400)), "W": np.ones((1, 1, 60, 60))},
     [make_arg("kernel", 60)]),  # the window tensor, not the output, is what is large
    ("MaxPool", {"X": np.ones((1, 1, 400, 400))}, [make_arg("kernel", 60)]),
    ("ConvTranspose", {"X": np.ones((1, 1, 3, 3)), "W": np.ones((1, 1, 1, 1))},
     [make_arg("kernel", 1), make_arg("stride", 10**6)]),
    ("RoIAlign", {"X": np.ones((1, 1, 4, 4)), "R": np.array([[0, 0, 0, 3, 3]], float)},
     [make_arg("pooled_h", 10**5), make_arg("pooled_w", 10**5)]),
], ids=["Conv-windows", "MaxPool-windows", "ConvTranspose-stride", "RoIAlign-pooled"])
def test_intermediate_tensors_are_capped_before_they_are_built(
        op_type: str, feeds: dict[str, np.ndarray], args: list[Any]) -> None:
    net = caffe2_pb2.NetDef(name="big")
    net.op.append(make_op(op_type, list(feeds), ["Y"], args))
    _refused_before_allocating(net, feeds)


@pytest.mark.parametrize("case", ["FC", "FCTransposed", "Softmax", "SoftmaxWithLoss",
                                  "SquaredL2Distance"])
def test_an_empty_batch_gives_empty_results(case: str) -> None:
    feeds = {"X": np.ones((0, 3)), "W": np.ones((2, 3) if case == "FC" else (3, 2)),
             "b": np.ones(2), "L": np.zeros(0, np.int32), "T": np.ones((0, 3))}
    ins = {"FC": ["X", "W", "b"], "FCTransposed": ["X", "W", "b"], "Softmax": ["X"],
           "SoftmaxWithLoss": ["X", "L"], "SquaredL2Distance": ["X", "T"]}[case]
    outs = ["Y", "loss"] if case == "SoftmaxWithLoss" else ["Y"]
    net = caffe2_pb2.NetDef(name="empty")
    net.op.append(make_op(case, ins, outs))
    got = execute(net, {k: feeds[k] for k in ins})
    want = {"FC": (0, 2), "FCTransposed": (0, 2), "Softmax": (0, 3), "SoftmaxWithLoss": (0, 3),
            "SquaredL2Distance": (0,)}[case]
    assert got["Y"].shape == want


def test_an_empty_batch_has_verified_parameter_gradients() -> None:
    net = caffe2_pb2.NetDef(name="e")
    net.op.extend([make_op("FC", ["X", "W", "b"], ["H"]),
                   make_op("SoftmaxWithLoss", ["H", "L"], ["P", "loss"])])
    rng = np.random.default_rng(20261202)
    opts = VerifyOptions(inputs=[InputSpec.from_array("X", np.ones((0, 3))),
                                 InputSpec.from_array("W", rng.normal(size=(2, 3))),
                                 InputSpec.from_array("b", rng.normal(size=2)),
                                 InputSpec.from_array("L", np.zeros(0, np.int32))],
                         mode="full", check=["W", "b"])
    assert verify_net(net, ["loss"], opts).report.passed


def test_the_op_route_warns_about_partial_gradients_of_one_blob() -> None:
    res = gradient_for_op(make_op("Mul", ["x", "x"], ["y"]), ["y_grad"])
    (w,) = res.diagnostics
    assert w.code == "partial_input_gradients" and w.blobs[0] == "x"
    assert set(w.blobs[1:]) == {g for g in res.g_input if isinstance(g, str)}
    assert not gradient_for_op(make_op("Mul", ["x", "z"], ["y"]), ["y_grad"]).diagnostics
    # Sum(x, x): both entries are y_grad, and x's gradient is 2 * y_grad
    (w,) = gradient_for_op(make_op("Sum", ["x", "x"], ["y"]), ["y_grad"]).diagnostics
    assert w.code == "partial_input_gradients" and "(y_grad, y_grad)" in w.message


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(workers=1, job_timeout_s=20.0))) as c:
        yield c


def test_a_failed_job_carries_the_synchronous_fix(client: TestClient) -> None:
    body = {"net": {"op": [{"type": "Relu", "input": ["x"], "output": ["y"]}]}, "ys": ["nope"],
            "inputs": [{"blob": "x", "random": {"shape": [2]}}]}
    sync = client.post("/v1/verify", json=body).json()
    loc = client.post("/v1/jobs", json={"verify": body}).headers["location"]
    deadline = time.monotonic() + 30
    while (job := client.get(loc).json())["status"] in ("queued", "running"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert job["status"] == "failed"
    assert job["error"]["errors"] == sync["errors"]
    assert "external_output" in job["error"]["errors"][0]["message"]


_OP = {"type": "Relu", "input": ["x"], "output": ["y"]}
_OP_REQUEST = {"op": _OP, "g_output": ["y_grad"]}


@pytest.mark.parametrize("route", ["/v1/gradients/net", "/v1/verify", "/v1/run"])
@pytest.mark.parametrize("media", ["json", "binary"])
@pytest.mark.parametrize("bare", [False, True])
def test_an_op_body_on_a_net_route_points_to_the_op_route(
        client: TestClient, route: str, media: str, bare: bool) -> None:
    if media == "json":
        r = client.post(route, json=_OP if bare else _OP_REQUEST)
    else:
        msg = (json_format.ParseDict(_OP, caffe2_pb2.OperatorDef()) if bare else
               json_format.ParseDict({"op": _OP, "g_output": [{"dense": "y_grad"}]},
                                     netgrad_pb2.OpGradientRequest()))
        r = client.post(route, content=msg.SerializeToString(),
                        headers={"Content-Type": "application/protobuf"})
    assert r.status_code == 400, r.text
    first = r.json()["errors"][0]["message"]
    assert "/v1/gradients/op" in first and '{"net": {"op": [<your OperatorDef>]}' in first
    assert ("bare caffe2.OperatorDef" in first) == bare
    assert "did you mean" not in first


_RELU = {"type": "Relu", "input": ["x"], "output": ["y"]}


@pytest.mark.parametrize(("route", "kwargs", "says"), [
    ("/v1/gradients/op", {"json": {"op": _RELU}}, 'e.g. "g_output": ["y_grad"]'),
    ("/v1/gradients/net", {"content": '{"net": {"op": []}, "ys": ["y"]} {"a": 1}',
                           "headers": {"Content-Type": "application/json"}},
     "send one JSON object and nothing after it"),
    ("/v1/gradients/net", {"json": {"net": {"op": [_RELU]}, "ys": "y"}},
     'for one name, a list of it: ["y"]'),
    ("/v1/gradients/net", {"content": b"", "headers": {"Content-Type": "application/protobuf"}},
     "the body is empty: send a NetGradientRequest in binary protobuf"),
])
def test_common_mistakes_say_what_to_send(client: TestClient, route: str,
                                          kwargs: dict[str, Any], says: str) -> None:
    r = client.post(route, **kwargs)
    assert r.status_code == 400, r.text
    assert says in r.json()["detail"]


def test_spatial_bn_training_on_an_empty_batch_keeps_the_running_statistics() -> None:
    net = caffe2_pb2.NetDef(name="bn")
    net.op.append(make_op("SpatialBN", ["X", "s", "b", "m", "v"], ["Y", "m", "v", "sm", "sv"]))
    feeds = {"X": np.ones((0, 2, 2, 2)), "s": np.ones(2), "b": np.zeros(2),
             "m": np.array([1.0, 2.0]), "v": np.array([3.0, 4.0])}
    got = execute(net, feeds)
    assert got["Y"].shape == (0, 2, 2, 2)
    assert got["m"].tolist() == [1.0, 2.0] and got["v"].tolist() == [3.0, 4.0]
    assert np.isfinite(got["sm"]).all() and np.isfinite(got["sv"]).all()


_NET = {"name": "n", "op": [_RELU]}


@pytest.mark.parametrize("form", ["json-netdef", "json-op-list", "binary-netdef",
                                  "binary-net-request", "binary-run-request", "text-netdef"])
def test_a_net_body_on_the_op_route_points_to_the_net_route(client: TestClient,
                                                            form: str) -> None:
    net = json_format.ParseDict(_NET, caffe2_pb2.NetDef())
    if form.startswith("json"):
        r = client.post("/v1/gradients/op",
                        json=_NET if form == "json-netdef" else {"op": _NET["op"]})
    elif form == "text-netdef":
        r = client.post("/v1/gradients/op", content='name: "n" op { type: "Relu" }',
                        headers={"Content-Type": "text/x-protobuf"})
    else:
        msg: Any = net
        if form == "binary-net-request":
            msg = netgrad_pb2.NetGradientRequest(net=net)
            msg.ys.add().blob = "y"
        elif form == "binary-run-request":
            msg = netgrad_pb2.RunRequest(net=net, fetch=["y"])
        r = client.post("/v1/gradients/op", content=msg.SerializeToString(),
                        headers={"Content-Type": "application/protobuf"})
    assert r.status_code == 400, r.text
    messages = " ".join(e["message"] for e in r.json()["errors"])
    assert "POST /v1/gradients/net" in messages and "did you mean" not in messages


def test_a_request_with_its_net_and_a_stray_op_is_not_called_a_bare_netdef(
        client: TestClient) -> None:
    r = client.post("/v1/gradients/net",
                    json={"net": {"op": [_RELU]}, "ys": ["y"], "op": _RELU})
    (p,) = r.json()["errors"]
    assert p["path"] == "op" and "bare" not in p["message"]
    assert "OpGradientRequest" not in p["message"]


def test_a_text_op_request_on_a_net_route_points_to_the_op_route(client: TestClient) -> None:
    r = client.post("/v1/gradients/net", content='op { type: "Relu" input: "x" output: "y" } '
                    'g_output { dense: "y_grad" }', headers={"Content-Type": "text/x-protobuf"})
    (p,) = r.json()["errors"]
    assert p["code"] == "op_request_on_net_route" and "/v1/gradients/op" in p["message"]


def test_a_missing_blob_in_a_do_workspace_says_how_to_bind_it() -> None:
    net = _do([make_op("Add", ["X", "Q"], ["Z"])])
    feeds = {"outer_X": np.ones(2), "outer_Y": np.ones(2), "Q": np.ones(2)}
    with pytest.raises(ExecutionError, match="inner_blobs") as info:
        execute(net, feeds)
    assert "op[1]:Do/net/op[0]:Add" in info.value.message


def test_verifying_an_empty_output_says_the_batch_is_empty() -> None:
    net = caffe2_pb2.NetDef(name="e")
    net.op.append(make_op("FC", ["X", "W", "b"], ["Y"]))
    rng = np.random.default_rng(20261202)
    opts = VerifyOptions(inputs=[InputSpec.from_array("X", np.ones((0, 3))),
                                 InputSpec.from_array("W", rng.normal(size=(2, 3))),
                                 InputSpec.from_array("b", rng.normal(size=2))], mode="full")
    with pytest.raises(NetgradError, match=r"'Y' has no elements \(shape \[0, 2\]\)"):
        verify_net(net, ["Y"], opts)


def test_a_text_net_request_on_the_op_route_is_told_without_a_second_parse(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The parser's first words (`net` is no field of OpGradientRequest) tell it; the text
    is not parsed again as a NetGradientRequest (seconds for a megabyte of text)."""
    from core.proto import codec

    parsed: list[str] = []
    real = codec.from_text

    def spy(text: str, cls: Any, **kw: Any) -> Any:
        parsed.append(cls.DESCRIPTOR.name)
        return real(text, cls, **kw)

    monkeypatch.setattr(codec, "from_text", spy)
    r = client.post("/v1/gradients/op", content='net { op { type: "Relu" } } ys { blob: "y" }',
                    headers={"Content-Type": "text/x-protobuf"})
    (p,) = r.json()["errors"]
    assert p["code"] == "net_request_on_op_route" and "/v1/gradients/net" in p["message"]
    assert "NetGradientRequest" not in parsed and "RunRequest" not in parsed
