"""Stop 32: a JSON syntax error and a text body's bad byte say where they stand.

Before, ``body is not valid JSON`` gave only the parser's line and column: no field path,
no op, no advice for the usual slips (a raw tab in a name, a Windows path's backslash, a
trailing comma, Python's ``True``). A text-format body's byte that is not UTF-8 named no
field at all, a byte inside a JSON *key* lost the op's type given after it, and a bare
text-format NetDef of several ops was reported as "N unknown fields" (its own fields, which
the wrapper hint already covers). The CLI reads its ``.json`` files the same way.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api_schemas import netgrad_pb2
from app.api import bodypaths
from core.errors import DecodeError
from tests.api.helpers import assert_problem, still_serving

JSON = {"content-type": "application/json"}
TEXT = {"content-type": "text/x-protobuf"}
NET = "/v1/gradients/net"


TWO_OPS = b'{"net": {"op": [{"type": "Relu", "input": ["x"], "output": ["y"]}, %s]}, "ys": ["z"]}'


@pytest.mark.parametrize(("second_op", "path", "op_type", "advice"), [
    (b'{"type": "Sigmoid", "input": ["a\tb"], "output": ["z"]}', "net.op[1].input[0]", "Sigmoid",
     "JSON writes it as the escape \\t"),
    (b'{"input": ["a\x01b"], "type": "Sigmoid"}', "net.op[1].input[0]", "Sigmoid",
     "escape \\u0001"),
    (b'{"input": ["C:\\data\\x"], "type": "Tanh"}', "net.op[1].input[0]", "Tanh",
     "write a backslash itself as \\\\"),
    (b'{"input": ["a\\u12"], "type": "Tanh"}', "net.op[1].input[0]", "Tanh",
     "four hex digits"),
    # (a trailing comma is placed at the comma: the item it promises does not exist)
    (b'{"type": "Tanh", "input": ["a"],}', "net.op[1].input", "Tanh",
     "remove the comma before '}'"),
    (b'{"type": "Tanh", "input": ["a",]}', "net.op[1].input[0]", "Tanh",
     "remove the comma before ']'"),
    (b"{\"type\": \"Tanh\", \"input\": ['a']}", "net.op[1].input[0]", "Tanh", "double quotes"),
    (b'{"type": "Tanh", "is_gradient_op": True}', "net.op[1].is_gradient_op", "Tanh",
     "JSON writes True as true"),
])
def test_a_syntax_error_names_its_field_op_and_fix(
        client: TestClient, second_op: bytes, path: str, op_type: str, advice: str) -> None:
    body = TWO_OPS % second_op
    with pytest.raises(json.JSONDecodeError):
        json.loads(body)  # (the case is a syntax error indeed)
    problem = assert_problem(client.post(NET, content=body, headers=JSON), 400)
    (err,) = problem["errors"]
    assert (err["code"], err["path"], err["op_index"], err["op_type"]) == (
        "invalid_json", path, 1, op_type), problem
    assert f" in {path}" in problem["detail"] and advice in problem["detail"], problem["detail"]


def test_a_cut_off_body_says_so(client: TestClient) -> None:
    body = b'{"net": {"op": [{"type": "Tanh", "input": ["a"'
    problem = assert_problem(client.post(NET, content=body, headers=JSON), 400)
    (err,) = problem["errors"]
    assert (err["path"], err["op_index"], err["op_type"]) == ("net.op[0].input[0]", 0, "Tanh")
    assert "was it cut off?" in problem["detail"]
    still_serving(client)


def test_a_syntax_error_outside_any_field_has_no_path(client: TestClient) -> None:
    problem = assert_problem(client.post(NET, content=b'{"ys": ["y"]} {}', headers=JSON), 400)
    (err,) = problem["errors"]
    assert (err["code"], err["path"], err["op_index"]) == ("invalid_json", None, None)
    assert "send one JSON object and nothing after it" in problem["detail"]
    # (a key without its colon: the key's field)
    problem = assert_problem(client.post(NET, content=b'{"net" {}}', headers=JSON), 400)
    assert problem["errors"][0]["path"] == "net"


def test_a_syntax_error_past_the_scan_bound_is_not_located(client: TestClient) -> None:
    """Past ``MAX_SCAN_CHARS`` the error is told without a walk (a hostile body stays cheap)."""
    name = "n" * (bodypaths.MAX_SCAN_CHARS + 10)
    body = ('{"net": {"name": "' + name + '", "op": [{"type": "Tanh", "input": ["a",]}]}}'
            ).encode()
    problem = assert_problem(client.post(NET, content=body, headers=JSON), 400)
    (err,) = problem["errors"]
    assert (err["code"], err["path"], err["op_index"]) == ("invalid_json", None, None)


def test_a_bad_byte_in_a_key_names_the_type_after_it(client: TestClient) -> None:
    body = b'{"net": {"op": [{"inp\xffut": ["a"], "type": "Tanh"}]}, "ys": ["z"]}'
    problem = assert_problem(client.post(NET, content=body, headers=JSON), 400)
    (err,) = problem["errors"]
    assert (err["code"], err["path"], err["op_index"], err["op_type"]) == (
        "invalid_utf8", "net.op[0]", 0, "Tanh"), problem
    # (a key's value is read as a value: a "type" inside it is no type of this op)
    assert bodypaths.json_place('{"op": [{"ar', 'g": [{"type": "X"}], "type": "Relu"}]}') == (
        "op[0]", {"op": [{"type": "Relu"}]})


@pytest.mark.parametrize(("route", "body", "path", "op_index", "op_type"), [
    (NET, b'net { op { type: "Relu" input: "x" output: "y" } op { type: "Tanh" input: "a\xffb" }'
          b' } ys { blob: "y" }', "net.op[1]", 1, "Tanh"),
    (NET, b'net { op { input: "a\xffb" type: "Tanh" } } ys { blob: "y" }',  # (type after it)
     "net.op[0]", 0, "Tanh"),
    (NET, b'net { op { type: "Do" arg { name: "net" n { op { input: "a\xffb" type: "Sigmoid" }'
          b' } } } } ys { blob: "y" }', "net.op[0].arg[0].n.op[0]", 0, "Sigmoid"),
    ("/v1/gradients/op", b'op { type: "Relu" input: "x\xff" output: "y" } g_output { dense: "gy" }',
     "op", 0, "Relu"),
    (NET, b'ys { blob: "y\xff" } net { }', "ys[0]", None, None),
    (NET, b'# \xff\nnet { }', None, None, None),  # (top level: no field)
])
def test_a_text_bodys_bad_byte_names_its_message_and_op(
        client: TestClient, route: str, body: bytes, path: str | None, op_index: int | None,
        op_type: str | None) -> None:
    problem = assert_problem(client.post(route, content=body, headers=TEXT), 400)
    (err,) = problem["errors"]
    assert (err["code"], err["path"], err["op_index"], err["op_type"]) == (
        "invalid_utf8", path, op_index, op_type), problem
    assert problem["detail"].startswith("text-format (text/x-protobuf) body is not valid UTF-8")


def test_a_text_bodys_bad_byte_past_the_scan_bound_is_not_located(client: TestClient) -> None:
    body = (b'net { name: "' + b"n" * (bodypaths.MAX_SCAN_CHARS + 10)
            + b'" op { type: "Relu" input: "x\xff" } }')
    problem = assert_problem(client.post(NET, content=body, headers=TEXT), 400)
    (err,) = problem["errors"]
    assert (err["code"], err["path"], err["op_index"]) == ("invalid_utf8", None, None)


def test_a_bare_text_netdef_is_one_problem(client: TestClient) -> None:
    """A bare NetDef of two ops: its ``op`` fields are one mistake (no ``net { }``), told
    once with the wrapper's hint, not as "2 unknown fields"."""
    body = (b'op { type: "Relu" input: "x" output: "y" }\n'
            b'op { type: "Tanh" input: "y" output: "z" }')
    problem = assert_problem(client.post(NET, content=body, headers=TEXT), 400)
    (err,) = problem["errors"]
    assert err["code"] == "bare_netdef", problem
    assert "unknown fields" not in problem["detail"]
    assert "net { op { ... }" in problem["detail"]


def _cli_grad(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app.cli", "grad", str(path)],
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_cli_locates_a_json_files_problems(tmp_path: Path) -> None:
    """The CLI reads a ``.json`` NetDef as the server reads a body: syntax errors and bad
    bytes with their field path, op and advice."""
    cases = [
        (b'{"op": [{"type": "Relu", "input": ["x"], "output": ["y"]},'
         b' {"type": "Sigmoid", "input": ["a\tb"], "output": ["z"]}]}',
         "invalid_json at op[1].input[0] (op 1, Sigmoid)", "escape \\t"),
        (b'{"op": [{"input": ["x\xff"], "type": "Relu"}]}',
         "invalid_utf8 at op[0].input[0] (op 0, Relu)", "not UTF-8 (byte 21, in op[0].input[0]"),
        (b'op { type: "Relu" input: "x" output: "y" }', "invalid_json",
         "name it .pbtxt"),
    ]
    for k, (content, line, advice) in enumerate(cases):
        f = tmp_path / f"net{k}.json"
        f.write_bytes(content)
        out = _cli_grad(f)
        assert out.returncode == 1, out
        assert f"  - {line}" in out.stderr, out.stderr
        assert advice in out.stderr.splitlines()[0], out.stderr


def test_the_cli_says_a_pbtxt_file_holds_json(tmp_path: Path) -> None:
    f = tmp_path / "net.pbtxt"
    f.write_text('{"op": [{"type": "Relu", "input": ["x"], "output": ["y"]}]}')
    out = _cli_grad(f)
    assert out.returncode == 1
    assert "the file holds JSON, not protobuf text format: name it .json" in (
        out.stderr.splitlines()[0]), out.stderr


# Walkthrough, stop 32.

@pytest.mark.parametrize(("body", "path", "op_type"), [
    (b'net { op { type: "Relu" input: "C:\\data\\x" output: "y" } } ys { blob: "y" }',
     "net.op[0]", "Relu"),  # (\x without hex digits)
    (b'net { op { type: "Relu" input: "C:\\users" output: "y" } } ys { blob: "y" }',
     "net.op[0]", "Relu"),  # (\u without four hex digits)
    (b'net {\n op {\n type: "Relu"\n input: "C:\\xdata"\n output: "z" } } ys { blob: "z" }',
     "net.op[0]", "Relu"),  # (\xda: a byte that is not UTF-8, told on the next line)
])
def test_a_text_bodys_bad_escape_says_how_to_write_a_backslash(
        client: TestClient, body: bytes, path: str, op_type: str) -> None:
    problem = assert_problem(client.post(NET, content=body, headers=TEXT), 400)
    (err,) = problem["errors"]
    assert (err["code"], err["path"], err["op_type"]) == ("invalid_field", path, op_type), problem
    assert "write a backslash itself as \\\\" in err["message"], err["message"]


@pytest.mark.parametrize(("body", "path", "op_index"), [
    (b'net { op { type: "Relu" input: "x" output: "y" } op { type: ', "net.op[1]", 1),
    (b'net { op { type: "Relu" input: "x" output: "y" } op { type: "Tanh" input: "y"',
     "net.op[1]", 1),
    (b'net { op { type: "Relu" input: "x" output: "y" } } ys { blob: "y" ', "ys[0]", None),
])
def test_a_cut_off_text_body_says_so(
        client: TestClient, body: bytes, path: str, op_index: int | None) -> None:
    problem = assert_problem(client.post(NET, content=body, headers=TEXT), 400)
    (err,) = problem["errors"]
    assert (err["path"], err["op_index"]) == (path, op_index), problem
    assert "was it cut off?" in err["message"]


def test_an_extra_brace_is_not_called_cut_off(client: TestClient) -> None:
    body = b'net { op { type: "Relu" input: "x" output: "y" } } ys { blob: "y" } }'
    problem = assert_problem(client.post(NET, content=body, headers=TEXT), 400)
    assert "cut off" not in problem["detail"], problem


def test_a_bare_text_netdef_is_not_called_misspelt(client: TestClient) -> None:
    body = b'op { type: "Relu" input: "x" output: "y" }'
    problem = assert_problem(client.post(NET, content=body, headers=TEXT), 400)
    assert problem["errors"][0]["code"] == "bare_netdef"
    assert "misspelt" not in problem["detail"] and '"op"; op is a field of NetDef' in (
        problem["detail"]), problem["detail"]


def test_a_text_body_of_one_comment_line_asks_about_lost_newlines(client: TestClient) -> None:
    """``curl --data @file`` drops newlines: a first-line comment then swallows the body."""
    body = b'# my net net { op { type: "Relu" input: "x" output: "y" } } ys { blob: "y" }'
    problem = assert_problem(client.post(NET, content=body, headers=TEXT), 400)
    assert "--data-binary" in problem["detail"] and "body is empty" not in problem["detail"]
    # (a body of a real comment and nothing else is still "empty")
    problem = assert_problem(client.post(NET, content=b"# nothing here\n", headers=TEXT), 400)
    assert "the body is empty" in problem["detail"] and "--data-binary" not in problem["detail"]


def test_a_json_bom_says_to_drop_it(client: TestClient) -> None:
    body = b'\xef\xbb\xbf{"net": {"op": []}, "ys": ["y"]}'
    problem = assert_problem(client.post(NET, content=body, headers=JSON), 400)
    assert "byte-order mark (U+FEFF)" in problem["detail"], problem["detail"]


def test_the_cli_locates_a_pbtxt_files_bad_byte(tmp_path: Path) -> None:
    for name, content, byte in (
            ("a.pbtxt", b'op { type: "Relu" input: "x" output: "y" }\n'
                        b'op { input: "a\xffb" type: "Tanh" }', 57),
            ("b.pbtxt", b'\xef\xbb\xbfop { input: "a\xffb" type: "Tanh" }', 17)):
        f = tmp_path / name
        f.write_bytes(content)
        out = _cli_grad(f)
        assert out.returncode == 1
        op = "op[1] (op 1, Tanh)" if name == "a.pbtxt" else "op[0] (op 0, Tanh)"
        assert f"  - invalid_utf8 at {op}" in out.stderr, out.stderr
        assert f"not UTF-8 (byte {byte}, in {op[:5]}" in out.stderr, out.stderr


# Review, stop 32.

@pytest.mark.parametrize("body", [
    b'{} "x"', b'{"net": {}} "ys"', b'{}}"a"',  # (nothing open after the value: no type)
    b'{"\\ud800": {"a": tru}}', b'{"net": {"\\udc00x": [1,,]}}',  # (a lone surrogate key)
    b'{} \xff "x"', b'{"net": {"\\ud800": "\xff"}}',
])
def test_odd_bodies_are_400s_not_500s(client: TestClient, body: bytes) -> None:
    problem = assert_problem(client.post(NET, content=body, headers=JSON), 400)
    json.dumps(problem, ensure_ascii=False).encode("utf-8")  # (no lone surrogate in it)


def test_a_surrogate_key_is_named_by_its_escape() -> None:
    assert bodypaths.json_place('{"net": {"\\ud800": ["') == (
        "net.\\ud800[0]", {"net": {"\\ud800": [None]}})


@pytest.mark.parametrize(("body", "path", "advice"), [
    (b'{"net": {"op": [{"type": "Relu", input: ["x"]}]}}', "net.op[0]",
     'JSON keys take double quotes: "input"'),
    (b'{"net": {"op": [], "ys": ["y"], /* c */}}', "net", "JSON has no comments"),
    (b'{"net": {"op": [{"type": "Relu,\n  "input": ["x"]}]}}', "net.op[0].type",
     'missing its closing "?'),
    (b'{"net": {"op": [{"type": "Relu" "input": ["x"]}]}}', "net.op[0].type",
     "a comma is missing"),
    (b'{"net": {"op": [{"type": "Relu"},]}}', "net.op[0]", "remove the comma before ']'"),
])
def test_syntax_advice_fits_the_slip(client: TestClient, body: bytes, path: str,
                                     advice: str) -> None:
    problem = assert_problem(client.post(NET, content=body, headers=JSON), 400)
    (err,) = problem["errors"]
    assert err["path"] == path and advice in problem["detail"], problem["detail"]
    assert "remove the comma" not in problem["detail"] or "comma before ']'" in advice


def test_a_deep_text_body_with_a_bad_byte_is_bounded(client: TestClient) -> None:
    """The walk kept each open message's whole path (memory and time quadratic in depth:
    17 s and 5 GB for 42,000 levels) and looked for the op's frame among all open ones at
    every token; now it keeps path segments and gives up past ``MAX_LOCATE_DEPTH`` levels
    (the cost is measured in bench/README.md §5l, not here)."""
    from core.proto import textproblems

    for depth in (100, 14_000):
        body = (b"net{" + b"op{arg{n{" * depth + b'op{input:"\xff"' + b"," * 30_000
                + b"}" * (3 * depth + 3))
        problem = assert_problem(client.post(NET, content=body, headers=TEXT), 400)
        (err,) = problem["errors"]
        if depth < textproblems.MAX_LOCATE_DEPTH // 3:
            assert err["path"] == "net" + ".op[0].arg[0].n" * depth + ".op[0]", err["path"]
        else:
            assert err["path"] is None


def test_a_bad_byte_in_a_text_type_gives_no_type(client: TestClient) -> None:
    body = b'net { op { type: "Re\xfflu" input: "x" } }'
    problem = assert_problem(client.post(NET, content=body, headers=TEXT), 400)
    (err,) = problem["errors"]
    assert (err["path"], err["op_index"], err["op_type"]) == ("net.op[0]", 0, None)


def test_a_character_cut_by_a_chunk_is_counted_from_its_first_byte(client: TestClient) -> None:
    body = b'{"net":{"op":[{"type":"Relu"},{"input":["x\xe2\x82(", "y"], "type":"Tanh"}]}}'
    for cut in (43, 44, 45, None):
        chunks = [body] if cut is None else [body[:cut], body[cut:]]
        problem = assert_problem(client.post(NET, content=iter(chunks), headers=JSON), 400)
        assert "(byte 42 in net.op[1].input[0]" in problem["detail"], (cut, problem["detail"])
    cut_off = b'{"net": {"op": []}, "ys": ["y\xe2\x82'
    for chunks in ([cut_off], [cut_off[:-1], cut_off[-1:]]):
        problem = assert_problem(client.post(NET, content=iter(chunks), headers=JSON), 400)
        assert f"(byte {len(cut_off) - 2} in ys[0]" in problem["detail"], problem["detail"]


def test_the_cli_reads_an_empty_or_bom_json_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text("  \n")
    out = _cli_grad(empty)
    assert out.returncode == 1 and "the file is empty" in out.stderr, out.stderr
    bom = tmp_path / "bom.json"
    bom.write_bytes(b'\xef\xbb\xbf{"op": [{"type": "Relu", "input": ["x"], "output": ["y"]}]}')
    out = _cli_grad(bom)
    assert out.returncode == 0 and "ReluGradient" in out.stdout, out.stderr


def test_a_prefix_of_many_tiny_tokens_is_not_walked(client: TestClient) -> None:
    """Within ``MAX_SCAN_CHARS`` but past ``MAX_SCAN_TOKENS``: told without a path."""
    few = '{"net": {"op": [' + "{}," * 100 + "x]}}"
    many = '{"net": {"op": [' + "{}," * (bodypaths.MAX_SCAN_TOKENS // 3 + 10) + "x]}}"
    assert len(many) < bodypaths.MAX_SCAN_CHARS
    paths = []
    for body in (few, many):
        problem = assert_problem(client.post(NET, content=body.encode(), headers=JSON), 400)
        paths.append(problem["errors"][0]["path"])
    assert paths == ["net.op[100]", None]


# Second review, stop 32.

@pytest.mark.parametrize(("body", "advice", "not_said"), [
    (b'{"net": {"op": []}, "ys" "y"}', "a colon is missing after the key", "comma"),
    (b"/tmp/net.json", "looks like a file name", "comments"),
    (b'{"net": {"op": [{"type": "A", "arg": [{"name": "x", "f": 1 / 2}]}]}}', "",
     "comments"),
    (b'{"ys": ["y"], // the output\n"net": {}}', "JSON has no comments", "comma"),
])
def test_json_advice_has_no_false_friends(client: TestClient, body: bytes, advice: str,
                                          not_said: str) -> None:
    detail = assert_problem(client.post(NET, content=body, headers=JSON), 400)["detail"]
    assert advice in detail and not_said not in detail, detail


@pytest.mark.parametrize(("body", "advice"), [
    (b'net { op { type: "A" } } ys { blob: "y" } skip:', "last field has its value"),
    (b'net { op { type: "A" }\n# the end', "last message is closed"),
    pytest.param(b'net { op { type: "A" input: "\\777" } }', "write a backslash itself",
                 marks=pytest.mark.filterwarnings(
                     "ignore:invalid octal escape:DeprecationWarning")),  # (Python's codec)
    (b'net { op { type: "A" input: "\\ud800" } }', "write a backslash itself"),
    (b'\xef\xbb\xbfnet { op { type: "A" } }', "byte-order mark (U+FEFF)"),
])
def test_text_advice_fits_the_slip(client: TestClient, body: bytes, advice: str) -> None:
    detail = assert_problem(client.post(NET, content=body, headers=TEXT), 400)["detail"]
    assert advice in detail, detail


def test_quoted_user_text_triggers_no_escape_advice(client: TestClient) -> None:
    body = b'net { op { type: "A" } } skip: "\'unicodeescape\' codec can\'t decode"'
    detail = assert_problem(client.post(NET, content=body, headers=TEXT), 400)["detail"]
    assert "backslash" not in detail, detail


def test_a_cut_off_text_past_the_token_bound_is_walked_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A walk that ran out of tokens is not run again to place a cut-off text."""
    from core.proto import codec, textproblems

    calls: list[int] = []
    walk = textproblems._walk

    def counting(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        return walk(*args, **kw)

    monkeypatch.setattr(textproblems, "_walk", counting)
    monkeypatch.setattr(textproblems, "MAX_LOCATE_TOKENS", 50)
    with pytest.raises(DecodeError, match="was it cut off"):
        codec.from_text('net { ' + 'op { type: "A" } ' * 40, netgrad_pb2.NetGradientRequest)
    assert len(calls) == 1
    calls.clear()
    with pytest.raises(DecodeError, match="was it cut off") as info:  # (a short one: twice)
        codec.from_text('net { op { type: "A" } op { type: ', netgrad_pb2.NetGradientRequest)
    assert info.value.problems[0].path == "net.op[1]" and len(calls) == 2


# Second walkthrough, stop 32.

@pytest.mark.parametrize(("body", "headers", "advice"), [
    (b'{"net": {"op": [{"type": "Relu", "input": ["x"], "out', JSON,
     "the body ends inside a string (was it cut off?)"),
    (b'net { op { type: "Sigmoid" input: "y', TEXT,
     "the text ends inside a string (was it cut off?)"),
    (b"do.json", JSON, "looks like a file name"),
    (b"C:\\nets\\x.json", JSON, "looks like a file name"),
])
def test_a_cut_string_or_a_file_name_is_told_so(client: TestClient, body: bytes,
                                               headers: dict[str, str], advice: str) -> None:
    detail = assert_problem(client.post(NET, content=body, headers=headers), 400)["detail"]
    assert advice in detail and "text/x-protobuf, written as" not in detail, detail


def test_a_missing_quote_mid_text_is_not_called_cut_off(client: TestClient) -> None:
    body = b'net { op { type: "Sigmoid" input: "y\n output: "z" } }'
    detail = assert_problem(client.post(NET, content=body, headers=TEXT), 400)["detail"]
    assert "String missing ending quote" in detail and "cut off" not in detail, detail
