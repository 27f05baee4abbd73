"""Empty names, wrong types inside Caffe2 messages, and the field paths of their problems.

Caffe2's ``GradientWrapper`` reads an empty name as no gradient at all (``IsEmpty``), so an
output gradient ``""`` is a missing one, not a blob called ``""`` (netgrad once answered a
200 whose gradient op read blob ``""``). A seed or a forward blob with an empty name is
refused: no workspace blob has that name. A value of the wrong type inside a Caffe2 message
(a string for an integer argument...) is a 400 naming the value's path, not only ``net``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api import docs
from app.main import create_app
from app.settings import Settings
from tests.api.helpers import assert_problem


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(workers=0)), raise_server_exceptions=False) as c:
        yield c


def _relu(g: Any) -> dict[str, Any]:
    return {"op": {"type": "Relu", "input": ["x"], "output": ["y"]}, "g_output": [g]}


@pytest.mark.parametrize("g", ["", {"indices": "", "values": ""}])
def test_an_empty_output_gradient_is_no_gradient(client: TestClient, g: Any) -> None:
    body = assert_problem(client.post("/v1/gradients/op", json=_relu(g)), 422)
    assert "Gradient of output y is not provided" in body["errors"][0]["message"]
    assert "g_output[0] is an empty name" in body["errors"][0]["message"]
    assert "g_output[0] is an empty name" in body["detail"]
    body = assert_problem(client.post("/v1/gradients/op", json=_relu(None)), 422)
    assert "Give g_output[0] a dense gradient" in body["errors"][0]["message"]
    assert body["errors"][0]["path"] == "op[0]:Relu"


def test_an_empty_gradient_of_an_output_that_needs_none_is_fine(client: TestClient) -> None:
    # Dropout's mask output takes no gradient: "" there is the same as null
    op = {"type": "Dropout", "input": ["x"], "output": ["y", "mask"]}
    answers = [client.post("/v1/gradients/op", json={"op": op, "g_output": ["y_grad", g]})
               for g in ("", None)]
    assert [a.status_code for a in answers] == [200, 200]
    assert answers[0].content == answers[1].content


def test_an_empty_seed_name_is_refused(client: TestClient) -> None:
    r = client.post("/v1/gradients/net", json={"net": docs.MLP_NET, "ys": {"prob": ""}})
    body = assert_problem(r, 400)
    (e,) = body["errors"]
    assert e["code"] == "empty_seed_name" and e["path"] == "ys" and e["blobs"] == ["prob"]
    assert "null" in e["message"]


def test_an_empty_blob_name_is_refused_with_the_op(client: TestClient) -> None:
    net = copy.deepcopy(docs.MLP_NET)
    net["op"][1]["input"] = [""]
    r = client.post("/v1/gradients/net", json={"net": net, "ys": ["prob"]})
    body = assert_problem(r, 422)
    hits = [e for e in body["errors"] if e["code"] == "empty_blob_name"]
    assert [(e["op_index"], e["op_type"]) for e in hits] == [(1, net["op"][1]["type"])]
    assert hits[0]["path"] == f"op[1]:{net['op'][1]['type']}"
    op = {"type": "Add", "input": ["a", ""], "output": ["c"]}
    body = assert_problem(client.post("/v1/gradients/op", json={"op": op, "g_output": ["g"]}),
                          422)
    assert body["errors"][0]["code"] == "empty_blob_name"


def test_an_empty_blob_name_inside_a_do_names_the_sub_net(client: TestClient) -> None:
    req = copy.deepcopy(docs.DO_REQUEST)
    inner = req["op"]["arg"][0]["n"]["op"][0]
    inner["output"] = [""]
    body = assert_problem(client.post("/v1/gradients/op", json=req), 422)
    paths = [e["path"] for e in body["errors"] if e["code"] == "empty_blob_name"]
    assert paths and paths[0].startswith("op[0]:Do/net/op[0]:"), body


def test_ys_and_skip_problems_name_their_field(client: TestClient) -> None:
    r = client.post("/v1/gradients/net", json={"net": docs.MLP_NET, "ys": ["nope"]})
    assert assert_problem(r, 400)["errors"][0]["path"] == "ys"
    r = client.post("/v1/gradients/net", json={"net": docs.MLP_NET, "ys": ["prob"], "skip": 99})
    assert assert_problem(r, 400)["errors"][0]["path"] == "skip"


#: A value of the wrong type inside a Caffe2 message, and the path the problem must name.
WRONG_TYPES = [
    ({"arg": [{"name": "kernel", "i": "two"}]}, "net.op[0].arg[0].i", "an integer"),
    ({"arg": [{"name": "kernel", "i": 2.5}]}, "net.op[0].arg[0].i", "an integer"),
    ({"arg": [{"name": "k", "i": 2**70}]}, "net.op[0].arg[0].i", "an integer"),
    ({"input": "x"}, "net.op[0].input", "a JSON array"),
    ({"input": [1]}, "net.op[0].input[0]", "a string"),
    ({"arg": [{"name": "a", "ints": [2, "a"]}]}, "net.op[0].arg[0].ints[1]", "an integer"),
    ({"device_option": {"device_type": "CUDA"}}, "net.op[0].device_option.device_type",
     "an integer"),
    ({"is_gradient_op": "yes"}, "net.op[0].is_gradient_op", "true or false"),
    ({"arg": [{"name": "a", "f": "x"}]}, "net.op[0].arg[0].f", "a number"),
    ({"device_option": 3}, "net.op[0].device_option", "a JSON object"),
]


@pytest.mark.parametrize(("edit", "path", "want"), WRONG_TYPES, ids=[w[1] for w in WRONG_TYPES])
def test_a_wrong_type_inside_a_caffe2_message_names_its_path(
        client: TestClient, edit: dict[str, Any], path: str, want: str) -> None:
    op = {"type": "Relu", "input": ["x"], "output": ["y"], **edit}
    body = assert_problem(client.post("/v1/gradients/net",
                                      json={"net": {"op": [op]}, "ys": ["y"]}), 400)
    (e,) = body["errors"]
    assert (e["code"], e["path"]) == ("invalid_field", path), e
    assert e["message"].startswith(f"{path}: expected {want}"), e
    # the same below /v1/gradients/op's op
    r = client.post("/v1/gradients/op", json={"op": op, "g_output": ["y_grad"]})
    (e,) = assert_problem(r, 400)["errors"]
    assert e["path"] == "op" + path[len("net.op[0]"):], e


#: Two arguments where json_format takes the first and refuses the second (or refuses the
#: first): the path must name the one json_format refused (review findings).
FIRST_OR_SECOND = [
    ([{"name": "a", "i": "+5"}, {"name": "b", "i": "x"}], "net.op[0].arg[1].i"),
    ([{"name": "a", "f": True}, {"name": "b", "f": "x"}], "net.op[0].arg[1].f"),
    ([{"name": "a", "t": {"string_data": ["ab-_"]}}, {"name": "b", "t": {"string_data": [5]}}],
     "net.op[0].arg[1].t.string_data[0]"),
    ([{"name": "a", "f": 1e39}, {"name": "b", "f": "x"}], "net.op[0].arg[0].f"),
    ([{"name": "a", "f": "nan"}, {"name": "b", "f": "x"}], "net.op[0].arg[0].f"),
    ([{"name": "a", "t": {"data_type": 99}}, {"name": "b", "t": {"data_type": "zz"}}],
     "net.op[0].arg[0].t.data_type"),
    ([{"name": "a", "i": "9" * 4301}], "net.op[0].arg[0].i"),  # (was a 500)
    ([{"name": "a", "i": "Failed to parse q field: zz"}], "net.op[0].arg[0].i"),
    ([{"name": "a", "strings": ["a", 5]}], "net.op[0].arg[0].strings[1]"),
]


@pytest.mark.parametrize(("args", "path"), FIRST_OR_SECOND, ids=[p for _, p in FIRST_OR_SECOND])
def test_the_path_is_the_value_json_format_refused(
        client: TestClient, args: list[Any], path: str) -> None:
    op = {"type": "Relu", "input": ["x"], "output": ["y"], "arg": args}
    body = assert_problem(client.post("/v1/gradients/net",
                                      json={"net": {"op": [op]}, "ys": ["y"]}), 400)
    assert [e["path"] for e in body["errors"]] == [path], body


def test_a_camel_case_key_gets_its_path_too(client: TestClient) -> None:
    op = {"type": "Relu", "input": ["x"], "output": ["y"], "isGradientOp": "yes"}
    body = assert_problem(client.post("/v1/gradients/net",
                                      json={"net": {"op": [op]}, "ys": ["y"]}), 400)
    assert body["errors"][0]["path"] == "net.op[0].is_gradient_op"


def test_a_late_bad_value_of_a_long_array_is_found(client: TestClient) -> None:
    op = {"type": "Relu", "input": ["x"] + ["x"] * 20000 + [1], "output": ["y"],
          "arg": [{"name": "a", "ints": [1] * 150000 + ["x"]}]}
    body = assert_problem(client.post("/v1/gradients/net",
                                      json={"net": {"op": [op]}, "ys": ["y"]}), 400)
    assert body["errors"][0]["path"] == "net.op[0].input[20001]"
    ops = [{"type": "Relu", "input": ["x"], "output": ["y"]}] * 3000 + [5]
    body = assert_problem(client.post("/v1/gradients/net",
                                      json={"net": {"op": ops}, "ys": ["y"]}), 400)
    assert body["errors"][0]["path"] == "net.op[3000]"


@pytest.mark.parametrize(("edit", "path"), [
    ({"arg": [{"name": "a", "n": [{"op": []}]}]}, "op.arg[0].n"),  # an array for a NetDef
    ({"arg": [[1]]}, "op.arg[0]"),
    ({"deviceOption": [1]}, "op.device_option"),
])
def test_an_array_where_a_message_belongs_is_named(
        client: TestClient, edit: dict[str, Any], path: str) -> None:
    op = {"type": "Relu", "input": ["x"], "output": ["y"], **edit}
    r = client.post("/v1/gradients/op", json={"op": op, "g_output": ["g"]})
    assert assert_problem(r, 400)["errors"][0]["path"] == path


def test_locating_gives_up_after_its_questions_and_keeps_json_formats_words(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    from core.proto import jsonmap

    monkeypatch.setattr(jsonmap, "MAX_LOCATE_CHECKS", 3)
    op = {"type": "Relu", "input": ["x"], "output": ["y"],
          "arg": [{"name": "a", "floats": [0.5] * 1000 + ["x"]}]}
    body = assert_problem(client.post("/v1/gradients/net",
                                      json={"net": {"op": [op]}, "ys": ["y"]}), 400)
    (e,) = body["errors"]
    assert e["path"] == "net" and "Failed to parse floats field" in e["message"]


def test_a_half_empty_slice_in_g_output_is_refused(client: TestClient) -> None:
    op = {"type": "EnsureDense", "input": ["x"], "output": ["y"]}
    r = client.post("/v1/gradients/op",
                    json={"op": op, "g_output": [{"indices": "", "values": "v"}]})
    (e,) = assert_problem(r, 400)["errors"]
    assert e["path"] == "g_output[0]" and "both names" in e["message"]


def test_verify_refuses_an_empty_seed_name_like_the_others() -> None:
    from api_schemas import caffe2_pb2
    from core.errors import InvalidRequestError
    from core.proto import codec
    from core.types import GradientSlice
    from core.verify.checker import seed_names

    net = codec.from_json_obj(docs.MLP_NET, caffe2_pb2.NetDef)
    for g in ("", GradientSlice("", "")):
        with pytest.raises(InvalidRequestError) as info:
            seed_names(net, {"prob": g})
        (e,) = info.value.problems
        assert (e.code, e.path) == ("empty_seed_name", "ys")
    assert seed_names(net, {"prob": None}) == {"prob": "prob_grad"}


def test_a_very_long_array_is_named_without_reparsing_it(client: TestClient) -> None:
    from core.proto.jsonmap import MAX_BISECT

    op = {"type": "Relu", "input": ["x"], "output": ["y"],
          "arg": [{"name": "a", "floats": [0.5] * MAX_BISECT + ["x"]}]}
    body = assert_problem(client.post("/v1/gradients/net",
                                      json={"net": {"op": [op]}, "ys": ["y"]}), 400)
    assert body["errors"][0]["path"] == "net.op[0].arg[0].floats"


def test_a_binary_body_with_bad_utf8_names_the_string_not_a_bare_netdef(
        client: TestClient) -> None:
    from api_schemas import caffe2_pb2, netgrad_pb2

    op = caffe2_pb2.OperatorDef(type="Relu", input=["x", "z"], output=["y"])
    req = netgrad_pb2.NetGradientRequest(net=caffe2_pb2.NetDef(op=[op]), ys=[{"blob": "y"}])
    data = req.SerializeToString().replace(b"z", b"\xff")
    r = client.post("/v1/gradients/net", content=data,
                    headers={"Content-Type": "application/protobuf"})
    body = assert_problem(r, 400)
    assert body["errors"][0]["path"] == "net.op[0].input[1]"
    assert "bare" not in body["detail"] and "wraps it" not in body["detail"]
