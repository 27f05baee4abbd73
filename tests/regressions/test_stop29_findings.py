"""Stop 29 findings: the command line's error report, and what the review found."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from api_schemas import caffe2_pb2
from app import cli


def test_one_problem_is_not_printed_twice(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    net = tmp_path / "net.json"
    net.write_text(json.dumps({"op": [{"type": "Reluu", "input": ["x"], "output": ["y"]}]}))
    assert cli.main(["grad", str(net), "--ys", "y"]) == 1
    err = capsys.readouterr().err
    assert err.count("Unknown operator type 'Reluu'") == 1, err
    assert "  - unknown_operator at op[0]:Reluu\n" in err


def test_two_problems_keep_their_own_words(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                           ) -> None:
    ops = [{"type": "Reluu", "input": ["x"], "output": ["y"]},
           {"type": "Sigmoidd", "input": ["y"], "output": ["z"]}]
    net = tmp_path / "net.json"
    net.write_text(json.dumps({"op": ops}))
    assert cli.main(["grad", str(net), "--ys", "z"]) == 1
    err = capsys.readouterr().err
    assert "at op[0]:Reluu: Unknown operator type 'Reluu'" in err
    assert "at op[1]:Sigmoidd: Unknown operator type 'Sigmoidd'" in err


@pytest.mark.parametrize(("ys", "hint"), [("y", True), (1e-7, False), (True, False), (3, False)])
def test_a_list_hint_is_given_only_for_a_value_the_list_would_take(ys: object, hint: bool
                                                                   ) -> None:
    """``ys: "y"`` gets ``["y"]``; ``ys: 3`` does not get ``[3]``, which is refused too."""
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.settings import Settings

    op = {"type": "Relu", "input": ["x"], "output": ["y"]}
    with TestClient(create_app(Settings(workers=0))) as c:
        r = c.post("/v1/gradients/net", json={"net": {"op": [op]}, "ys": ys})
    assert r.status_code == 400
    (e,) = r.json()["errors"]
    assert e["path"] == "ys"
    assert ("a list of it" in e["message"]) is hint, e["message"]


@pytest.mark.parametrize(("route", "body", "field", "words"), [
    ("/v1/run", {"net": {"op": []}}, "fetch", "Blobs to return, in this order"),
    ("/v1/gradients/op", {"g_output": ["g"]}, "op", "The forward op"),
    ("/v1/run", {"fetch": ["y"]}, "net", "The forward net"),
])
def test_a_missing_required_field_says_what_it_holds(route: str, body: dict[str, object],
                                                      field: str, words: str) -> None:
    """The field's description comes from its ``.proto`` comment (the generated schema)."""
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.settings import Settings

    with TestClient(create_app(Settings(workers=0))) as c:
        r = c.post(route, json=body)
    assert r.status_code == 400
    (e,) = [e for e in r.json()["errors"] if e["path"] == field]
    assert e["message"].startswith(f"{field}: field required; what it holds: {words}"), e


# --- review findings on the every-problem walk ------------------------------------------------
def _client():  # type: ignore[no-untyped-def]
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.settings import Settings

    return TestClient(create_app(Settings(workers=0)))


def _relu(x: object = "x", y: object = "y", **more: object) -> dict[str, object]:
    return {"type": "Relu", "input": [x], "output": [y], **more}


def test_bad_enum_and_bytes_values_are_named_in_every_op() -> None:
    ops = [_relu(arg=[{"name": "t", "t": {"data_type": "ZZ"}}]),
           _relu("y", "z", arg=[{"name": "t", "t": {"data_type": "YY"}}]),
           _relu("z", "w", arg=[{"name": "t", "t": {"byte_data": 5}}]),
           _relu("w", "v", arg=[{"name": "t", "t": {"byte_data": [1]}}])]
    with _client() as c:
        r = c.post("/v1/gradients/net", json={"net": {"op": ops}, "ys": ["v"]})
    assert r.status_code == 400
    assert [e["op_index"] for e in r.json()["errors"]] == [0, 1, 2, 3], r.json()


@pytest.mark.parametrize(("body", "hint"), [
    ({"fetch": 3}, None), ({"fetch": "y"}, '["y"]'),
    ({"inputs": [{"blob": "x", "tensor": {"shape": [1], "data": "NaN"}}]}, '["NaN"]'),
    ({"inputs": [{"blob": "x", "tensor": {"shape": [1], "data": "a"}}]}, None),
])
def test_run_list_hints_follow_the_element_type(body: dict[str, object], hint: str | None
                                                ) -> None:
    req = {"net": {"op": [_relu()]}, "fetch": ["y"], **body}
    with _client() as c:
        r = c.post("/v1/run", json=req)
    assert r.status_code == 400
    (e,) = r.json()["errors"]
    if hint is None:
        assert "a list of it" not in e["message"], e
    else:
        assert e["message"].endswith(f"a list of it: {hint})"), e


def test_every_bad_grad_op_and_the_net_are_all_named() -> None:
    grad_ops = [_relu(y=1), _relu(foo=1), _relu(engine=2)]
    with _client() as c:
        r = c.post("/v1/verify", json={"net": {"op": [_relu(y=5)]}, "ys": ["y"],
                                       "grad_ops": grad_ops})
    assert r.status_code == 400
    paths = [e["path"] for e in r.json()["errors"]]
    assert paths == ["net.op[0].output[0]", "grad_ops[0].output[0]", "grad_ops[1].foo",
                     "grad_ops[2].engine"], paths


def test_one_bad_grad_op_keeps_its_readers_words() -> None:
    with _client() as c:
        r = c.post("/v1/verify", json={"net": {"op": [_relu()]}, "ys": ["y"],
                                       "grad_ops": [_relu(), _relu(engine=2)]})
    body = r.json()
    assert r.status_code == 400 and [e["path"] for e in body["errors"]] == ["grad_ops[1].engine"]
    assert body["detail"].startswith("grad_ops[1].engine: expected a string")


def test_the_cli_lists_several_problems_once_each(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    ops = [_relu(arg=[{"name": "a", "i": "z"}]), _relu("y", "z", bad=1)]
    net = tmp_path / "net.json"
    net.write_text(json.dumps({"op": ops}))
    assert cli.main(["grad", str(net), "--ys", "z"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[0] == "netgrad: decode_error: 2 invalid or unknown fields"
    assert "  - invalid_field at op[0].arg[0].i: expected an integer (int64), got 'z'" in err
    assert err.count("op[0].arg[0].i") == 1 and err.count("op[1].bad") == 1, err


@pytest.mark.parametrize(("arg", "words"), [
    ({"ints": "x"}, "expected a JSON array of integers (int64), got x"),
    ({"ints": 2.5}, "expected a JSON array of integers (int64), got 2.5"),
    ({"f": [1]}, "expected a number, got an array"),
    ({"f": {}}, "expected a number, got an object"),
    ({"strings": "abc"}, "must be a JSON array of strings (UTF-8 text), got a string"),
])
def test_words_name_json_kinds_not_python_ones(arg: dict[str, object], words: str) -> None:
    from core.errors import DecodeError
    from core.proto import codec

    with pytest.raises(DecodeError) as info:
        codec.from_json_obj({"op": [_relu(arg=[{"name": "a", **arg}])]}, caffe2_pb2.NetDef)
    assert words in info.value.problems[0].message, info.value.problems[0].message


def test_what_the_walk_takes_without_asking_json_format_takes() -> None:
    """``surely_taken`` never skips a value json_format refuses (field kinds x odd values)."""
    from google.protobuf import json_format

    from core.proto import jsonwalk

    values = [0, -1, 2**31, 2**63, 2**64, 1.5, 1e39, -1e39, 1e308, True, "12", "-3", "+5",
              " 7", "1e3", "007", "9" * 25, "1.5", "NaN", "nan", "Infinity", "-Infinity",
              "1e400", "1_0", "", "x", None, [1], "UNDEFINED", "FLOAT", 1]
    fields = [(caffe2_pb2.Argument, "i"), (caffe2_pb2.Argument, "f"),
              (caffe2_pb2.TensorProto, "data_type"), (caffe2_pb2.TensorProto, "dims"),
              (caffe2_pb2.TensorProto, "double_data"), (caffe2_pb2.TensorProto, "int32_data"),
              (caffe2_pb2.TensorProto, "int64_data"), (caffe2_pb2.OperatorDef, "type"),
              (caffe2_pb2.OperatorDef, "is_gradient_op"), (caffe2_pb2.TensorProto, "byte_data")]
    taken = 0
    for cls, name in fields:
        f = cls.DESCRIPTOR.fields_by_name[name]
        for v in values:
            if jsonwalk.surely_taken(f, v):
                taken += 1
                json_format.ParseDict({name: [v] if f.is_repeated else v}, cls())
    assert taken > 30


def test_the_walk_stops_after_its_questions(monkeypatch: pytest.MonkeyPatch) -> None:
    from core.errors import DecodeError
    from core.proto import jsonmap, jsonwalk

    monkeypatch.setattr(jsonwalk, "MAX_ASKS", 3)
    ops = [_relu(f"b{k}", f"b{k + 1}", arg=[{"name": "a", "i": "+1"}]) for k in range(10)]
    ops[8]["output"] = [8]
    with pytest.raises(DecodeError) as info:
        jsonmap.from_json({"op": ops}, caffe2_pb2.NetDef)
    assert [p.path for p in info.value.problems] == ["op[8].output[0]"]  # (json_format's)


def test_a_full_list_says_there_may_be_more() -> None:
    from core.errors import DecodeError
    from core.proto import jsonmap, jsonwalk

    ops = [_relu(f"x{k}", k) for k in range(3 * jsonwalk.MAX_LISTED)]
    with pytest.raises(DecodeError) as info:
        jsonmap.from_json({"op": ops}, caffe2_pb2.NetDef)
    assert len(info.value.problems) == jsonwalk.MAX_LISTED
    assert info.value.message.startswith(
        f"{jsonwalk.MAX_LISTED} or more invalid fields (the first {jsonwalk.MAX_LISTED} are "
        "listed); the first: op[0].output[0]")


def test_a_key_given_twice_is_named_in_body_order_and_once_per_op() -> None:
    from core.errors import DecodeError
    from core.proto import jsonmap

    ops = [_relu(y=5), _relu(controlInput=["a"], control_input=["b"], engine=1)]
    with pytest.raises(DecodeError) as info:
        jsonmap.from_json({"op": ops}, caffe2_pb2.NetDef)
    assert [p.path for p in info.value.problems] == ["op[0].output[0]", "op[1].control_input"]
    assert "given twice" in info.value.problems[1].message


@pytest.mark.parametrize("edit", [{"device_option": ""}, {"device_option": []},
                                  {"arg": [""]}, {"arg": [[]]}])
def test_an_empty_string_or_array_for_a_message_stays_taken_in_a_large_net(
        edit: dict[str, object]) -> None:
    """json_format takes ``""`` and ``[]`` for an empty message; the walk that runs first on
    a net of more than ``WALK_FIRST_OPS`` ops must not refuse them (review finding)."""
    from core.proto import jsonmap

    for n in (2, jsonmap.WALK_FIRST_OPS + 10):
        ops = [_relu(f"b{k}", f"b{k + 1}") for k in range(n)]
        ops[0].update(edit)
        net = jsonmap.from_json({"op": ops}, caffe2_pb2.NetDef)
        assert len(net.op) == n


def test_an_unknown_key_with_a_huge_index_is_a_400() -> None:
    net = {"op": [_relu()], "op[" + "1" * 5000 + "]": 1}
    with _client() as c:
        r = c.post("/v1/gradients/net", json={"net": net, "ys": ["y"]})
    assert r.status_code == 400, r.text[:300]
    assert r.json()["errors"][0]["code"] == "unknown_field"
