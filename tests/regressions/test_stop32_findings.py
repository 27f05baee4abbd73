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
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.api import bodypaths
from app.main import create_app
from app.settings import Settings
from tests.api.helpers import assert_problem, still_serving

JSON = {"content-type": "application/json"}
TEXT = {"content-type": "text/x-protobuf"}
NET = "/v1/gradients/net"


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(workers=0)), raise_server_exceptions=False) as c:
        yield c


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
    (b'{"type": "Tanh", "input": ["a"],}', "net.op[1]", "Tanh", "remove the comma before '}'"),
    (b'{"type": "Tanh", "input": ["a",]}', "net.op[1].input[1]", "Tanh",
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
    assert "the file holds JSON: name it .json" in out.stderr.splitlines()[0], out.stderr
