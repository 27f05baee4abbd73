"""Regressions of stop 28 (items stop 27 noticed and left alone, mended).

* Sub-nets were not bounded: a body of 200,000 empty ``nets {}`` under one op (400 KB of
  binary) held a request for 1.7 s of walks before a 422, 2.4 s as JSON; a million of
  them cost about ten times that. ``NETGRAD_MAX_OPS`` now bounds the number of sub-nets
  too (413 ``too_many_subnets``), counted where their argument is reached, before any
  walk over them: in the binary and text decoders, before a small JSON body is decoded,
  and while a large JSON body streams in.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from google.protobuf import json_format, text_format

from api_schemas import caffe2_pb2, netgrad_pb2
from app.main import create_app
from app.settings import Settings
from core.errors import LimitExceededError
from core.proto import limits
from core.proto.jsonscan import JsonScan
from core.registry import make_op

B = {"content-type": "application/x-protobuf"}
T = {"content-type": "text/x-protobuf"}
J = {"content-type": "application/json"}


def _empty_nets_request(k: int, *, spread: bool = False) -> netgrad_pb2.NetGradientRequest:
    """A ``Do`` op whose ``net`` argument lists ``k`` empty NetDefs (``spread``: ``k`` ops
    with two empty sub-nets each, in the one sub-net of a ``Do`` at the top)."""
    req = netgrad_pb2.NetGradientRequest()
    do = make_op("Do", ["x"], ["y"])
    arg = do.arg.add(name="net")
    if spread:
        body = arg.n
        for _ in range(k):
            inner = make_op("Do", ["x"], ["y"])
            inner.arg.add(name="nets").nets.add()
            inner.arg[0].nets.add()
            body.op.append(inner)
    else:
        for _ in range(k):
            arg.nets.add()
    req.net.op.append(do)
    req.ys.add(blob="y")
    return req


def _encode(req: netgrad_pb2.NetGradientRequest, media: str) -> tuple[bytes, dict[str, str]]:
    if media == "binary":
        return req.SerializeToString(), B
    if media == "text":
        return text_format.MessageToString(req).encode(), T
    body = json_format.MessageToDict(req, preserving_proto_field_name=True)
    body["ys"] = [e["blob"] for e in body["ys"]]  # (JSON's list form)
    return json.dumps(body).encode(), J


def _code(r: object) -> str:
    return str(r.json()["errors"][0]["code"])  # type: ignore[attr-defined]


@pytest.mark.parametrize("media", ["binary", "text", "json"])
@pytest.mark.parametrize("spread", [False, True])
def test_more_sub_nets_than_max_ops_is_a_413_in_every_encoding(media: str,
                                                                spread: bool) -> None:
    with TestClient(create_app(Settings(workers=0, max_ops=50))) as c:
        # spread: 1 + 30 ops, 61 sub-nets; one list: 1 op, 51 sub-nets
        over = _empty_nets_request(30 if spread else 51, spread=spread)
        content, headers = _encode(over, media)
        r = c.post("/v1/gradients/net", content=content, headers=headers)
        assert r.status_code == 413, r.text
        assert _code(r) == "too_many_subnets", r.text
        assert "more than 50 sub-nets" in r.json()["errors"][0]["message"]
        # within the limit (spread: 25 ops, 49 sub-nets): past the count (another answer,
        # whatever the net's own problems)
        at = _empty_nets_request(24 if spread else 50, spread=spread)
        content, headers = _encode(at, media)
        r = c.post("/v1/gradients/net", content=content, headers=headers)
        assert r.status_code != 413, r.text


def test_a_large_json_body_of_sub_nets_is_refused_while_it_streams() -> None:
    settings = Settings(workers=0, max_ops=1_000, large_body_bytes=4 * 1024)
    with TestClient(create_app(settings)) as c:
        content, headers = _encode(_empty_nets_request(5_000), "json")
        assert len(content) > 4 * 1024
        r = c.post("/v1/gradients/net", content=content, headers=headers)
    assert r.status_code == 413, r.text
    assert _code(r) == "too_many_subnets"


def _scan(body: bytes, max_ops: int, size: int = 7) -> JsonScan:
    scan = JsonScan(max_ops=max_ops, max_depth=8, max_containers=10**6)
    for i in range(0, len(body), size):
        scan.feed(body[i:i + size])
    return scan


def test_the_json_scan_counts_sub_nets_apart_from_ops() -> None:
    content, _ = _encode(_empty_nets_request(30), "json")
    scan = _scan(content, max_ops=30)
    assert (scan.ops, scan.subnets) == (1, 30)
    with pytest.raises(LimitExceededError) as info:
        _scan(content, max_ops=29)
    assert info.value.problems[0].code == "too_many_subnets"


@pytest.mark.parametrize("check", ["binary", "json"])
def test_a_long_list_of_sub_nets_is_refused_before_any_is_walked(check: str) -> None:
    """The whole list is charged when its argument is reached: the walk never enters one
    (``visit`` would count it; here it counts nothing)."""
    req = _empty_nets_request(1_000)
    budget = limits.OpBudget(999)
    with pytest.raises(LimitExceededError) as info:
        if check == "binary":
            limits.check_depth(req.net, 128, budget)
        else:
            obj = json_format.MessageToDict(req.net, preserving_proto_field_name=True)
            limits.check_json_depth(obj, 128, budget=budget)
    assert info.value.problems[0].code == "too_many_subnets"
    assert budget.nets_left == 999 - 1_000


def test_the_text_pre_count_counts_sub_nets_and_ops_apart() -> None:
    nets = 'net { op { type: "Do" arg { name: "net" ' + "nets { } " * 40 + "} } }"
    limits.check_text_op_count(nets, 40)  # 40 sub-nets, 1 op: within
    with pytest.raises(LimitExceededError) as info:
        limits.check_text_op_count(nets, 39)
    assert info.value.problems[0].code == "too_many_subnets"
    ops = "net { " + 'op { type: "Relu" } ' * 40 + "}"
    with pytest.raises(LimitExceededError) as info:
        limits.check_text_op_count(ops, 39)
    assert info.value.problems[0].code == "too_many_ops"


def test_sub_nets_still_count_their_ops() -> None:
    """The sub-net count is beside the op count, not instead of it."""
    sub = caffe2_pb2.NetDef()
    for i in range(30):
        sub.op.append(make_op("Relu", [f"a{i}"], [f"a{i + 1}"]))
    net = caffe2_pb2.NetDef()
    do = make_op("Do", ["x"], ["y"])
    do.arg.add(name="net").n.CopyFrom(sub)
    net.op.append(do)
    run: Callable[[int], None] = lambda m: limits.check_depth(  # noqa: E731
        net, 128, limits.OpBudget(m, netgrad_pb2.NetGradientRequest(net=net)))
    run(31)
    with pytest.raises(LimitExceededError) as info:
        run(30)
    assert info.value.problems[0].code == "too_many_ops"


# --- tolerances.step far too large ------------------------------------------------------------
TANH = {"op": [{"type": "Tanh", "input": ["x"], "output": ["y"]}]}


def _verify(c: TestClient, step: float, data: list[float] | None = None) -> object:
    x = {"blob": "x", "tensor": {"shape": [3], "data": data or [0.5, -1.0, 2.0]}}
    return c.post("/v1/verify", json={"net": TANH, "ys": ["y"], "inputs": [x], "mode": "full",
                                      "tolerances": {"step": step}})


def test_a_step_that_overflows_the_input_is_refused_by_name() -> None:
    """x = 1e308 and step 1e308 used to be refused as a step *below* the resolution."""
    with TestClient(create_app(Settings(workers=1))) as c:
        r = _verify(c, 1e308, [0.5, 1e308, 2.0])
        assert r.status_code == 400, r.text
        (p,) = r.json()["errors"]
        assert (p["code"], p["path"], p["blobs"]) == ("step_too_large", "tolerances.step", ["x"])
        assert "overflows float64 at element 0" in p["message"]
        # x + 1e300 is finite: the check runs, fails, and says the step may be why
        r = _verify(c, 1e300)
        assert r.status_code == 200, r.text
        report = r.json()["report"]
        assert report["passed"] is False
        assert "step_large" in [d["code"] for d in report["diagnostics"]]
        # the default step: no such warning, and the check passes
        r = _verify(c, 1e-6)
        report = r.json()["report"]
        assert report["passed"] is True, report
        assert "step_large" not in [d["code"] for d in report["diagnostics"]]


def test_the_large_step_warning_scales_with_the_inputs() -> None:
    import numpy as np

    from core.verify.specs import large_step_warning

    feeds = {"x": np.array([1e6, -3.0]), "n": np.array([1, 2])}
    assert large_step_warning(feeds, ["x", "n"], 1e3) is None  # 1e-3 of 1e6
    found = large_step_warning(feeds, ["x", "n"], 2e4)
    assert found is not None and found.code == "step_large" and found.blobs == ("x",)
    small = {"x": np.array([1e-3])}
    assert large_step_warning(small, ["x"], 5e-3) is None  # scale is at least 1
    assert large_step_warning(small, ["x"], 0.05) is not None


# --- the CLI's file loading -------------------------------------------------------------------
def test_a_json_netdef_with_a_stray_g_output_is_not_called_an_op_request(tmp_path) -> None:
    from app.cli import load_net
    from core.errors import DecodeError

    f = tmp_path / "net.json"
    f.write_text(json.dumps({"op": [{"type": "Relu", "input": ["x"], "output": ["y"]}],
                             "g_output": ["y_grad"]}))
    with pytest.raises(DecodeError) as info:
        load_net(f)
    assert "a NetDef has no g_output" in info.value.message
    assert "holds an OpGradientRequest" not in info.value.message
    assert [p.path for p in info.value.problems] == ["g_output"]
    # an OpGradientRequest file still gets its route
    f.write_text(json.dumps({"op": {"type": "Relu", "input": ["x"], "output": ["y"]},
                             "g_output": ["y_grad"]}))
    with pytest.raises(DecodeError) as info:
        load_net(f)
    assert "POST the file to /v1/gradients/op" in info.value.message


@pytest.mark.parametrize("name", ["net.pb", "net.pbtxt"])
def test_an_empty_net_file_is_refused(tmp_path, name: str) -> None:
    from app.cli import load_net
    from core.errors import DecodeError

    f = tmp_path / name
    f.write_bytes(b"" if name.endswith(".pb") else b"  \n")
    with pytest.raises(DecodeError) as info:
        load_net(f)
    assert "the file is empty" in info.value.message


# --- list hints in JSON -----------------------------------------------------------------------
@pytest.mark.parametrize(("value", "got", "one"), [
    ("1e5", 'got "1e5" (a string)', '["1e5"]'), ("0", 'got "0" (a string)', '["0"]'),
    (True, "got true", "[true]"), ("{x", 'got "{x" (a string)', '["{x"]'),
    ("x", "got x", '["x"]'), (3, "got 3", "[3]"),
])
def test_a_scalar_for_a_list_inside_a_net_is_shown_as_json(value: object, got: str,
                                                           one: str) -> None:
    from core.errors import DecodeError
    from core.proto import codec

    with pytest.raises(DecodeError) as info:
        codec.from_json_obj({"op": [{"type": "Relu", "input": value, "output": ["y"]}]},
                            caffe2_pb2.NetDef)
    message = info.value.problems[0].message
    assert f"expected a JSON array, {got};" in message, message
    assert message.endswith(f"for one value, a list of it: {one}"), message


@pytest.mark.parametrize(("route", "body", "path"), [
    ("/v1/gradients/op", {"op": {"type": "Relu", "input": ["x"], "output": ["y"]},
                          "g_output": {"dense": "y_grad"}}, "g_output"),
    ("/v1/verify", {"net": {"op": [{"type": "Relu", "input": ["x"], "output": ["y"]}]},
                    "ys": ["y"], "inputs": [{"blob": "x", "tensor": {"shape": [1],
                                                                    "data": [1]}}],
                    "grad_ops": {"type": "ReluGradient"}}, "grad_ops"),
])
def test_one_message_given_where_a_list_goes_gets_the_list_form(route: str, body: dict,
                                                                path: str) -> None:
    with TestClient(create_app(Settings(workers=0))) as c:
        r = c.post(route, json=body)
    assert r.status_code == 400, r.text
    p = r.json()["errors"][0]
    assert p["path"] == path
    assert p["message"].endswith("must be a JSON array (for one value, a list of it: [{...}])")


@pytest.mark.parametrize("cls", ["net", "op"])
def test_a_binary_body_of_many_top_level_sub_nets_is_refused_right_after_parsing(
        cls: str) -> None:
    """Counted before the checking twin parses (and before any walk), for a net's ops and
    for the op of an OpGradientRequest."""
    from core.proto import codec

    do = make_op("Do", ["x"], ["y"])
    arg = do.arg.add(name="net")
    for _ in range(60):
        arg.nets.add()
    if cls == "net":
        req: object = netgrad_pb2.NetGradientRequest(net=caffe2_pb2.NetDef(op=[do]))
        msg_cls: type = netgrad_pb2.NetGradientRequest
    else:
        req = netgrad_pb2.OpGradientRequest(op=do)
        msg_cls = netgrad_pb2.OpGradientRequest
    data = req.SerializeToString()  # type: ignore[attr-defined]
    with pytest.raises(LimitExceededError) as info:
        limits.check_op_count(msg_cls.FromString(data), 59)
    assert info.value.problems[0].code == "too_many_subnets"
    with pytest.raises(LimitExceededError):
        codec.decode_binary(data, msg_cls, max_ops=59)
    limits.check_op_count(msg_cls.FromString(data), 60)


# --- text bodies have their own size limit ----------------------------------------------------
def test_a_text_body_above_the_text_limit_is_a_413_that_points_to_binary() -> None:
    settings = Settings(workers=0, max_text_body_bytes=4096)
    body = "net { " + 'op { type: "Relu" input: "x" output: "y" } ' * 400 + '} ys { blob: "y" }'
    assert len(body) > 4096
    with TestClient(create_app(settings)) as c:
        r = c.post("/v1/gradients/net", content=body, headers=T)
        assert r.status_code == 413, r.text
        (p,) = r.json()["errors"]
        assert p["code"] == "body_too_large"
        assert "NETGRAD_MAX_TEXT_BODY_BYTES" in p["message"] and "binary" in p["message"]
        # the same net as binary or JSON is not held to the text limit
        req = text_format.Parse(body, netgrad_pb2.NetGradientRequest())
        for media in ("binary", "json"):
            content, headers = _encode(req, media)
            assert len(content) > 4096
            r = c.post("/v1/gradients/net", content=content, headers=headers)
            assert r.status_code != 413, r.text
        # within the limit, text is served as before
        small = 'net { op { type: "Relu" input: "x" output: "y" } } ys { blob: "y" }'
        assert c.post("/v1/gradients/net", content=small, headers=T).status_code == 200


def test_the_text_limit_never_raises_the_body_limit() -> None:
    settings = Settings(workers=0, max_body_bytes=1000, max_text_body_bytes=10**6)
    with TestClient(create_app(settings)) as c:
        r = c.post("/v1/gradients/net", content="#" * 2000, headers=T)
    assert r.status_code == 413
    assert "NETGRAD_MAX_BODY_BYTES" in r.json()["errors"][0]["message"]


# --- adversarial review of this stop --------------------------------------------------------
def test_a_binary_body_of_many_empty_arguments_is_a_quick_413() -> None:
    """Ten million empty ``Argument`` entries on one op (20 MB) ran the isolation worker out
    of memory (a 500); nothing counted arguments."""
    from core.proto import codec

    op = caffe2_pb2.OperatorDef(type="Relu", input=["x"], output=["y"]).SerializeToString()
    def body(k: int) -> bytes:
        net = op + b"\x2a\x00" * k  # (OperatorDef.arg = 5, empty)
        return netgrad_pb2.NetGradientRequest(
            net=caffe2_pb2.NetDef(op=[caffe2_pb2.OperatorDef.FromString(net)]),
            ys=[netgrad_pb2.GradientMapEntry(blob="y")]).SerializeToString()

    with pytest.raises(LimitExceededError) as info:
        codec.decode_binary(body(41), netgrad_pb2.NetGradientRequest, max_ops=10)
    assert info.value.problems[0].code == "too_many_args"
    codec.decode_binary(body(40), netgrad_pb2.NetGradientRequest, max_ops=10)
    with TestClient(create_app(Settings(workers=0, max_ops=10))) as c:
        r = c.post("/v1/gradients/net", content=body(41), headers=B)
    assert r.status_code == 413 and _code(r) == "too_many_args", r.text


def test_arguments_inside_sub_nets_count_too() -> None:
    sub = caffe2_pb2.NetDef()
    relu = sub.op.add(type="Relu", input=["x"], output=["y"])
    for _ in range(45):
        relu.arg.add(name="a", i=1)
    net = caffe2_pb2.NetDef()
    do = make_op("Do", ["x"], ["y"])
    do.arg.add(name="net").n.CopyFrom(sub)
    net.op.append(do)
    with pytest.raises(LimitExceededError) as info:
        limits.check_depth(net, 128, limits.OpBudget(10))
    assert info.value.problems[0].code == "too_many_args"


def test_a_step_whose_central_difference_overflows_is_too_large_not_too_small() -> None:
    with TestClient(create_app(Settings(workers=1))) as c:
        r = _verify(c, 1e308)  # x + 1e308 is finite, (x + s) - (x - s) is not
    assert r.status_code == 400, r.text
    (p,) = r.json()["errors"]
    assert p["code"] == "step_too_large", p


@pytest.mark.parametrize("text", ["# only a comment\n", "\ufeff"])
def test_a_text_net_file_of_comments_or_a_bom_only_is_empty(tmp_path, text: str) -> None:
    from app.cli import load_net
    from core.errors import DecodeError

    f = tmp_path / "net.pbtxt"
    f.write_text(text, encoding="utf-8")
    with pytest.raises(DecodeError) as info:
        load_net(f)
    assert "the file is empty" in info.value.message


def test_a_text_net_file_with_a_bom_loads(tmp_path) -> None:
    from app.cli import load_net

    f = tmp_path / "net.pbtxt"
    f.write_text('\ufeffop { type: "Relu" input: "x" output: "y" }', encoding="utf-8")
    assert load_net(f).op[0].type == "Relu"


@pytest.mark.parametrize(("x", "said"), [
    ({"shape": [3], "data": [1, "NaN", 3]}, "input 'x' holds NaN at element 1"),
    ({"shape": [1], "data": [1], "dtype": "int32"}, "not float inputs: 'x'"),
])
def test_nothing_to_check_says_why_each_input_was_left_out(x: dict, said: str) -> None:
    """Walkthrough: the 400 named no blob and no reason."""
    with TestClient(create_app(Settings(workers=1))) as c:
        r = c.post("/v1/verify", json={"net": TANH, "ys": ["y"],
                                       "inputs": [{"blob": "x", "tensor": x}]})
    assert r.status_code == 400, r.text
    (p,) = r.json()["errors"]
    assert p["code"] == "nothing_to_check" and said in p["message"] and p["blobs"] == ["x"]


@pytest.mark.parametrize("media", ["binary", "text", "json"])
def test_the_argument_limit_holds_in_every_encoding(media: str) -> None:
    """Final walkthrough: JSON and text bodies of 900,000 empty arguments answered 200."""
    req = netgrad_pb2.NetGradientRequest()
    relu = req.net.op.add(type="Relu", input=["x"], output=["y"])
    for _ in range(41):
        relu.arg.add(name="a", i=1)
    req.ys.add(blob="y")
    with TestClient(create_app(Settings(workers=0, max_ops=10))) as c:
        content, headers = _encode(req, media)
        r = c.post("/v1/gradients/net", content=content, headers=headers)
        assert r.status_code == 413 and _code(r) == "too_many_args", r.text
        del relu.arg[-1]
        content, headers = _encode(req, media)
        assert c.post("/v1/gradients/net", content=content, headers=headers).status_code != 413
