"""Every offending op of a JSON NetDef is named, not only the first json_format refused.

json_format stops at the first value it refuses; ``core.proto.jsonwalk`` then walks the
body and asks json_format about each remaining value it cannot be sure of, one at a time.
Each OperatorDef (at any depth) gets its first refused value, and every unknown key is
listed, each problem with its op index, op type and path.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api_schemas import caffe2_pb2
from app.api import docs
from app.main import create_app
from app.settings import Settings
from core.errors import DecodeError
from core.proto import codec, jsonmap, jsonwalk
from tests.api.helpers import assert_problem


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(workers=0)), raise_server_exceptions=False) as c:
        yield c


def _relu(x: Any = "x", y: Any = "y", **more: Any) -> dict[str, Any]:
    return {"type": "Relu", "input": [x], "output": [y], **more}


def _net_errors(client: TestClient, ops: list[Any], ys: Any = ("y",)) -> dict[str, Any]:
    r = client.post("/v1/gradients/net", json={"net": {"op": ops}, "ys": list(ys)})
    return assert_problem(r, 400)


def test_a_bad_value_in_each_of_two_ops_is_named_twice(client: TestClient) -> None:
    ops = [_relu(y=5), _relu("y", "z"), {"type": "Sigmoid", "input": [1.5], "output": ["w"]}]
    body = _net_errors(client, ops)
    got = [(e["path"], e["op_index"], e["op_type"], e["code"]) for e in body["errors"]]
    assert got == [("net.op[0].output[0]", 0, "Relu", "invalid_field"),
                   ("net.op[2].input[0]", 2, "Sigmoid", "invalid_field")]
    assert body["errors"][0]["message"] == "net.op[0].output[0]: expected a string, got a number"
    assert body["detail"].startswith("2 invalid fields; the first: net.op[0].output[0]")


def test_one_op_keeps_its_first_refused_value_and_every_unknown_key(
        client: TestClient) -> None:
    op = _relu(engine=3, foo=1, arg=[{"name": "a", "i": 1.5, "bar": 2}])
    body = _net_errors(client, [op])
    assert [(e["path"], e["code"]) for e in body["errors"]] == [
        ("net.op[0].engine", "invalid_field"), ("net.op[0].foo", "unknown_field"),
        ("net.op[0].arg[0].bar", "unknown_field")]
    assert all((e["op_index"], e["op_type"]) == (0, "Relu") for e in body["errors"])


def test_ops_inside_sub_nets_are_each_named_with_their_sub_net_path(
        client: TestClient) -> None:
    inner = [_relu("a", 7), _relu("b", "c", engine=[1])]
    do = {"type": "Do", "input": ["x"], "output": ["y"],
          "arg": [{"name": "net", "n": {"op": inner}}]}
    body = _net_errors(client, [do, _relu("y", "z", is_gradient_op="no")], ys=["z"])
    got = [(e["path"], e["op_index"], e["op_type"]) for e in body["errors"]]
    assert got == [("net.op[0].arg[0].n.op[0].output[0]", 0, "Relu"),
                   ("net.op[0].arg[0].n.op[1].engine", 1, "Relu"),
                   ("net.op[1].is_gradient_op", 1, "Relu")]


def test_text_arguments_of_two_ops_are_both_named(client: TestClient) -> None:
    ops = [_relu(arg=[{"name": "order", "s": 4}]), _relu("y", "z", arg=[{"name": "s", "s": []}])]
    body = _net_errors(client, ops, ys=["z"])
    assert [e["path"] for e in body["errors"]] == ["net.op[0].arg[0].s", "net.op[1].arg[0].s"]
    assert "UTF-8 text" in body["errors"][1]["message"]


def test_the_single_op_route_names_each_bad_field_once(client: TestClient) -> None:
    r = client.post("/v1/gradients/op", json={"op": _relu(foo=1, engine=2, bar=3),
                                              "g_output": ["g"]})
    body = assert_problem(r, 400)
    assert [e["path"] for e in body["errors"]] == ["op.foo", "op.engine", "op.bar"]
    assert body["detail"].startswith("3 invalid or unknown fields; the first: op.foo")


def test_a_key_given_twice_is_kept_beside_the_others(client: TestClient) -> None:
    op = {"type": "Relu", "input": ["x"], "output": ["y"],
          "control_input": ["a"], "controlInput": ["b"]}
    body = _net_errors(client, [op, _relu("y", 9)])
    paths = [e["path"] for e in body["errors"]]
    assert paths == ["net.op[0].control_input", "net.op[1].output[0]"], paths
    assert "given twice" in body["errors"][0]["message"]


def test_the_listing_is_bounded(client: TestClient) -> None:
    ops = [_relu(f"x{k}", k) for k in range(jsonwalk.MAX_LISTED + 50)]
    body = _net_errors(client, ops, ys=["x0"])
    assert len(body["errors"]) == jsonwalk.MAX_LISTED
    assert body["errors"][-1]["path"] == f"net.op[{jsonwalk.MAX_LISTED - 1}].output[0]"


def test_a_large_net_with_one_bad_value_names_that_value_alone(client: TestClient) -> None:
    ops = [_relu(f"b{k}", f"b{k + 1}", arg=[{"name": "f", "f": 0.5, "ints": [1, 2]}])
           for k in range(3000)]
    ops[2500]["arg"][0]["ints"] = [1, "two"]
    body = _net_errors(client, ops, ys=["b3000"])
    (e,) = body["errors"]
    assert (e["path"], e["op_index"]) == ("net.op[2500].arg[0].ints[1]", 2500)


def _assert_nothing_refused(obj: dict[str, Any]) -> None:
    found = jsonwalk.every_problem(obj, caffe2_pb2.NetDef.DESCRIPTOR, jsonmap._located,
                                   jsonmap._check_text)
    assert found == []


def test_no_value_of_a_valid_net_is_called_wrong() -> None:
    """The walk asks json_format before it calls anything wrong: on valid nets it finds
    nothing (here the documentation's nets; the real nets below)."""
    for net in (docs.MLP_NET, docs.IF_TUTORIAL_NET):
        _assert_nothing_refused(copy.deepcopy(net))


def test_no_value_of_a_real_net_is_called_wrong(shared_dir: Path) -> None:
    nets = sorted((shared_dir / "realnets").glob("*predict_net.pb*"))
    assert nets
    for path in nets:
        if path.suffix == ".pb":
            net = codec.from_binary(path.read_bytes(), caffe2_pb2.NetDef)
        else:
            net = codec.from_text(path.read_text(), caffe2_pb2.NetDef)
        _assert_nothing_refused(jsonmap.to_json(net))


def test_the_walk_only_reports_values_json_format_refuses() -> None:
    """Each value the walk names is one json_format refuses on its own (a wrong value
    planted in each field kind of Argument and OperatorDef)."""
    bad = {"name": 3, "f": "x", "i": 2**63, "ints": [1, 1.5], "floats": [1e39],
           "t": {"dims": ["a"]}, "strings": [5]}
    for key, value in bad.items():
        arg = {"name": "a", key: value} if key != "name" else {"name": value}
        obj = {"op": [_relu(arg=[arg]), _relu(arg=[dict(arg)])]}
        found = jsonwalk.every_problem(obj, caffe2_pb2.NetDef.DESCRIPTOR, jsonmap._located,
                                       jsonmap._check_text)
        assert [p.path.split(".")[0] for p in found] == ["op[0]", "op[1]"], (key, found)
        with pytest.raises(DecodeError):
            jsonmap.reference_from_json({"op": [_relu(arg=[arg])]}, caffe2_pb2.NetDef)


def test_an_array_too_long_to_bisect_is_named_and_so_is_its_bad_element(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonmap, "MAX_BISECT", 4)
    ops = [_relu(f"b{k}", f"b{k + 1}") for k in range(10)]
    ops[7]["output"] = [7]
    body = _net_errors(client, ops, ys=["b10"])
    assert [e["path"] for e in body["errors"]] == ["net.op", "net.op[7].output[0]"]
    assert body["errors"][0]["message"].startswith(
        "net.op: every element must be a JSON object (OperatorDef); one is not")
    assert body["errors"][1]["op_index"] == 7


BAD_EDITS = [
    {"output": 5}, {"output": "y"}, {"input": ["x", 1.5]}, {"engine": 3}, {"foo": 1},
    {"arg": [{"name": "a", "i": 1.5}]}, {"arg": [{"name": "a", "s": 4}]},
    {"arg": [{"name": "a", "ints": [1, "b"]}]}, {"arg": [{"name": "a", "f": 1e39}]},
    {"device_option": "cpu"}, {"arg": [{"name": "a", "n": {"op": [{"type": 3}]}}]},
    {"is_gradient_op": "no", "bar": 2},
]


@pytest.mark.parametrize("edit", BAD_EDITS, ids=[str(e) for e in BAD_EDITS])
def test_a_large_net_is_refused_in_the_words_of_a_small_one(edit: dict[str, Any]) -> None:
    """Past ``WALK_FIRST_OPS`` ops the walk answers before json_format parses the body: the
    problems are those of the same bad op in a net of two ops."""
    def problems(n_ops: int) -> list[Any]:
        ops = [_relu(**edit)] + [_relu(f"b{k}", f"b{k + 1}") for k in range(n_ops - 1)]
        with pytest.raises(DecodeError) as info:
            jsonmap.from_json({"op": ops}, caffe2_pb2.NetDef)
        return [info.value.message] + [(p.path, p.message, p.op_index, p.op_type)
                                       for p in info.value.problems]

    small = problems(2)
    assert small and small == problems(jsonmap.WALK_FIRST_OPS + 5)


def test_a_string_where_a_message_belongs_is_listed_beside_the_other_problems(
        client: TestClient) -> None:
    ops = [_relu(device_option="cpu"), _relu("y", 5), _relu("y", "w", arg=["a"])]
    body = _net_errors(client, ops)
    got = [(e["path"], e["op_index"]) for e in body["errors"]]
    assert got == [("net.op[0].device_option", 0), ("net.op[1].output[0]", 1),
                   ("net.op[2].arg[0]", 2)]
    assert body["errors"][0]["message"] == (
        "net.op[0].device_option: expected a JSON object (DeviceOption), got a string")
    assert body["errors"][2]["message"].endswith("expected a JSON object (Argument), got a string")
