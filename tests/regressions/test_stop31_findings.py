"""Stop 31: problems name what follows them too, and text bodies list every unknown field.

Before, a JSON body's ``invalid_utf8`` problem named the op's type only when ``type`` came
before the byte; ``{"input": ["x\\xff"], "type": "Relu"}`` gave ``op_type`` null. Now the text
after the byte (up to ``bodypaths.MAX_LOOKAHEAD_CHARS``) is read for the type of each open
object, and only at that object's own level. A text-format body named only its first
unknown field (the parser stops there); now every unknown field is listed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api import bodypaths
from tests.api.helpers import assert_problem

JSON = {"content-type": "application/json"}


@pytest.mark.parametrize(("route", "body", "path", "op_index", "op_type"), [
    ("/v1/gradients/net",
     b'{"net": {"op": [{"input": ["x\xff"], "type": "Relu", "output": ["y"]}]}, "ys": ["y"]}',
     "net.op[0].input[0]", 0, "Relu"),
    ("/v1/gradients/net",  # the second op, its type after its other lists
     b'{"net": {"op": [{"type": "Tanh", "input": ["a"], "output": ["x"]},'
     b' {"output": ["y"], "arg": [{"name": "k", "i": 1}], "input": ["x\xff", "b"],'
     b' "type": "Relu"}]}, "ys": ["y"]}',
     "net.op[1].input[0]", 1, "Relu"),
    ("/v1/gradients/net",  # in a sub-net: the inner op's type after the byte
     b'{"net": {"op": [{"arg": [{"name": "net", "n": {"op": [{"input": ["x\xff"],'
     b' "type": "Sigmoid"}]}}], "type": "Do"}]}, "ys": ["y"]}',
     "net.op[0].arg[0].n.op[0].input[0]", 0, "Sigmoid"),
    ("/v1/gradients/net",  # in an argument's string: the op's type after the argument list
     b'{"net": {"op": [{"arg": [{"name": "order", "s": "NC\xffHW"}], "type": "Relu"}]},'
     b' "ys": ["y"]}',
     "net.op[0].arg[0].s", 0, "Relu"),
    ("/v1/gradients/net",  # the next op's type is not this op's
     b'{"net": {"op": [{"input": ["x\xff"]}, {"type": "Relu"}]}, "ys": ["y"]}',
     "net.op[0].input[0]", 0, None),
    ("/v1/gradients/net",  # "type" as a value, or a key of an inner object, is no type
     b'{"net": {"op": [{"input": ["x\xff"], "arg": [{"name": "type", "s": "Relu"}],'
     b' "name": "type"}]}, "ys": ["y"]}',
     "net.op[0].input[0]", 0, None),
    ("/v1/gradients/op",
     b'{"g_output": ["gy"], "op": {"output": ["y\xfe"], "type": "Relu", "input": ["x"]}}',
     "op.output[0]", 0, "Relu"),
])
def test_a_bad_byte_names_the_type_given_after_it(
        client: TestClient, route: str, body: bytes, path: str, op_index: int | None,
        op_type: str | None) -> None:
    problem = assert_problem(client.post(route, content=body, headers=JSON), 400)
    (err,) = problem["errors"]
    assert (err["code"], err["path"], err["op_index"], err["op_type"]) == (
        "invalid_utf8", path, op_index, op_type), problem


def test_the_lookahead_is_bounded() -> None:
    """A type beyond ``MAX_LOOKAHEAD_CHARS`` of the byte is not looked for (a hostile body
    stays cheap to refuse); one within it is found."""
    prefix = '{"net": {"op": [{"input": ["x'
    near = '"], "name": "' + "n" * 100 + '", "type": "Relu"}]}}'
    far = '"], "name": "' + "n" * bodypaths.MAX_LOOKAHEAD_CHARS + '", "type": "Relu"}]}}'
    assert bodypaths.json_place(prefix, near) == (
        "net.op[0].input[0]", {"net": {"op": [{"type": "Relu", "input": [None]}]}})
    assert bodypaths.json_place(prefix, far) == (
        "net.op[0].input[0]", {"net": {"op": [{"input": [None]}]}})


TEXT = {"content-type": "text/x-protobuf"}


def _errors(client: TestClient, route: str, body: bytes) -> list[tuple[Any, ...]]:
    problem = assert_problem(client.post(route, content=body, headers=TEXT), 400)
    return [(e["code"], e["path"], e["op_index"], e["op_type"]) for e in problem["errors"]]


def test_a_text_body_lists_every_unknown_field(client: TestClient) -> None:
    """The parser stops at its first unknown field; the others are listed beside it, each
    with its path, op index and op type, as a JSON body's are (before: the first only)."""
    body = (b'net { op { inptu: "x" type: "Relu" output: "y" }\n'
            b'op { type: "Tanh" input: "y" outptu: "z" device_option { devic_type: 1 } }\n'
            b'op { arg { name: "a" f: -inf strngs: "q" } type: "Scale" } }\n'
            b'ys { blob: "z" } ys_typo: [A, B]')
    assert _errors(client, "/v1/gradients/net", body) == [
        ("unknown_field", "net.op[0].inptu", 0, "Relu"),
        ("unknown_field", "net.op[1].outptu", 1, "Tanh"),
        ("unknown_field", "net.op[1].device_option.devic_type", 1, "Tanh"),
        ("unknown_field", "net.op[2].arg[0].strngs", 2, "Scale"),
        ("unknown_field", "ys_typo", None, None),
    ]
    problem = client.post("/v1/gradients/net", content=body, headers=TEXT).json()
    assert problem["detail"].startswith("5 unknown fields; the first: ")
    assert "did you mean 'input'?" in problem["errors"][0]["message"]
    assert "2:" in problem["errors"][1]["message"]  # (each keeps its own line:column)


def test_an_unknown_fields_values_are_not_fields(client: TestClient) -> None:
    """What an unknown field holds (a message, a list of names, an enum-like value) is
    skipped whole: its names are not reported, nor its ``type`` taken for the op's."""
    body = (b'net { op { bogus { type: "X" zz: 1 } type: "Relu" input: "x" output: "y" }\n'
            b'op { type: "Tanh" more: [aa, bb] also: cc input: "y" output: "z" } }\n'
            b'ys { blob: "z" }')
    assert _errors(client, "/v1/gradients/net", body) == [
        ("unknown_field", "net.op[0].bogus", 0, "Relu"),
        ("unknown_field", "net.op[1].more", 1, "Tanh"),
        ("unknown_field", "net.op[1].also", 1, "Tanh"),
    ]


def test_an_op_route_text_body_lists_every_unknown_field(client: TestClient) -> None:
    body = b'op { outptu: "y" type: "Relu" input: "x" } g_output { dense: "gy" } g_outptu { }'
    assert _errors(client, "/v1/gradients/op", body) == [
        ("unknown_field", "op.outptu", 0, "Relu"),
        ("unknown_field", "g_outptu", None, None),
    ]


def test_a_text_body_with_one_unknown_field_is_one_problem(client: TestClient) -> None:
    body = b'net { op { type: "Relu" input: "x" output: "y" zz: 1 } } ys { blob: "y" }'
    assert _errors(client, "/v1/gradients/net", body) == [
        ("unknown_field", "net.op[0].zz", 0, "Relu")]


def test_the_cli_keeps_its_advice_beside_several_unknown_fields(tmp_path: Path) -> None:
    """The CLI's headline cut the message at "; the first: " and lost the advice after
    the first problem (a JSON request file given where a NetDef is read)."""
    for name, text in (("req.json", '{"net": {"op": []}, "ys": ["y"]}'),
                       ("req.pbtxt", 'net { op { type: "Relu" } } ys { blob: "y" }')):
        f = tmp_path / name
        f.write_text(text)
        out = subprocess.run([sys.executable, "-m", "app.cli", "grad", str(f)],
                             capture_output=True, text=True, timeout=120, check=False)
        assert out.returncode == 1
        head = out.stderr.splitlines()[0]
        assert head.startswith("netgrad: decode_error: 2 unknown fields; the file holds"), head
        assert "unknown_field at ys" in out.stderr
