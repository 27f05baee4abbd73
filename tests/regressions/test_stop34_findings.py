"""Stop 34: problems of text-format bodies keep their reason on a long line, name the string
a bad escape stands in and say when the text ends inside a name; the CLI names the file
of each problem of ``--init-net`` and ``--inputs`` and says each problem once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app import cli
from tests.api.helpers import assert_problem

NET = "/v1/gradients/net"
TEXT = {"content-type": "text/x-protobuf"}


def _relus(n: int) -> bytes:
    return b" ".join(b'op { type: "Relu" input: "x%d" output: "x%d" }' % (i, i + 1)
                     for i in range(n))


@pytest.mark.parametrize(("tail", "reason"), [
    (b'op { type: "Relu" input: 7 output: "z" }', "Expected string but found: '7'"),
    (b'op { type: "Relu" input: "y" output: "z\\377" }', "Couldn't parse string"),
    (b'op { type: "Relu" arg { name: "a" i: "q" } }', "Couldn't parse integer"),
])
def test_the_parsers_reason_survives_a_long_one_line_body(client: TestClient, tail: bytes,
                                                          reason: str) -> None:
    """The parser quotes the whole line; a one-line body of 20,000 ops used to push the
    reason past the cut (the message ended in the quoted ops)."""
    body = b"net { " + _relus(20_000) + b" " + tail + b' } ys { blob: "z" }'
    problem = assert_problem(client.post(NET, content=body, headers=TEXT), 400)
    (err,) = problem["errors"]
    assert reason in err["message"], err["message"]
    assert len(err["message"]) < 800, len(err["message"])
    assert "..." in err["message"].split(reason)[0]  # (the quoted line, cut around the token)


def test_a_short_line_is_quoted_whole(client: TestClient) -> None:
    body = b'net { op { type: "Relu" input: 7 output: "z" } } ys { blob: "z" }'
    err = assert_problem(client.post(NET, content=body, headers=TEXT), 400)["errors"][0]
    assert f"'{body.decode()}': Expected string but found: '7'" in err["message"], err


@pytest.mark.parametrize(("body", "string", "not_utf8"), [
    (b'net { op { type: "Relu" input: "y" output: "w" output: "z\\377" } } ys: "z"',
     "net.op[0].output[1]", True),
    (b'net { op { type: "Relu" input: ["x", "q\\xff"] output: "y" } }', "net.op[0].input[1]",
     True),
    (b'net {\n op {\n type: "Relu"\n input: "C:\\xdata"\n output: "z" } }',
     "net.op[0].input[0]", True),
    (b'net { op { type: "Relu" input: "C:\\data\\x" output: "y" } }', "net.op[0].input[0]",
     False),
    pytest.param(b'net { op { type: "A" arg { name: "a" strings: "ok" strings: "\\777" } } }',
                 "net.op[0].arg[0].strings[1]", False, marks=pytest.mark.filterwarnings(
                     "ignore:invalid octal escape:DeprecationWarning")),  # (Python's codec)
    (b'net { name: "\\377" }', "net.name", True),
])
def test_a_bad_escape_names_its_string(client: TestClient, body: bytes, string: str,
                                       not_utf8: bool) -> None:
    """The problem stays at its message (as stop 32 placed it), and its words name the
    string; escapes that give bytes that are not UTF-8 are told so."""
    err = assert_problem(client.post(NET, content=body, headers=TEXT), 400)["errors"][0]
    assert f"; the string is {string};" in err["message"] or err["message"].endswith(
        f"; the string is {string}"), err["message"]
    assert ("the bytes its escapes give are not UTF-8" in err["message"]) is not_utf8, err
    assert "write a backslash itself as \\\\" in err["message"]


@pytest.mark.parametrize(("body", "cut"), [
    (b'net { op { type: "Relu" input: "x" out', True),
    (b'net { op { type: "Relu" input: "x" output: "y" } } ys { blo  \n# a comment\n', True),
    (b'net {\n op {\n  type: "Relu"\n  outpt', True),
    (b'net { op { type: "Relu" inputs: "x" output: "y" } } ys { blob: "y" }', False),
])
def test_a_text_ending_in_a_name_is_told_it_may_be_cut(client: TestClient, body: bytes,
                                                       cut: bool) -> None:
    err = assert_problem(client.post(NET, content=body, headers=TEXT), 400)["errors"][0]
    assert err["code"] == "unknown_field" and "did you mean" in err["message"], err
    assert ("(was it cut off?)" in err["message"]) is cut, err["message"]


# -- the CLI -------------------------------------------------------------------------------


def _net_file(tmp_path: Path) -> Path:
    f = tmp_path / "net.json"
    f.write_text(json.dumps({"op": [{"type": "Relu", "input": ["x"], "output": ["y"]}]}))
    return f


def test_a_misspelt_field_of_the_net_file_is_said_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "typo.json"
    f.write_text(json.dumps({"op": [{"type": "Relu", "inputs": ["x"], "output": ["y"]}]}))
    assert cli.main(["grad", str(f)]) == 1
    err = capsys.readouterr().err
    assert err.count("unknown field of caffe2.OperatorDef") == 1, err
    assert "  - unknown_field at op[0].inputs (op 0, Relu)" in err.splitlines(), err


def test_a_problem_of_the_init_net_file_names_that_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    init = tmp_path / "init.json"
    init.write_text(json.dumps({"op": [], "bad": 1}))
    assert cli.main(["verify", str(_net_file(tmp_path)), "--init-net", str(init)]) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[0].startswith(f"netgrad: decode_error: {init}: bad: unknown"), err
    assert "  - unknown_field at bad" in err.splitlines(), err


@pytest.mark.parametrize(("entries", "lines"), [
    ('[{"blob": "x", "shap": [2]}]',
     ["netgrad: decode_error: {f}: [0].shap: unknown field; did you mean `tensor.shape`?",
      "  - unknown_field at [0].shap"]),
    ('[{"blob": "x", "shap": [2]}, {"blob": 3}]',
     ["netgrad: decode_error: {f}: 2 invalid or unknown fields in its entries",
      "  - unknown_field at [0].shap: unknown field; did you mean `tensor.shape`?",
      "  - invalid_field at [1].blob: must be a string, got 3"]),
    ('[{"blob": "x"}', ["netgrad: decode_error: {f}: not valid JSON: Expecting ',' delimiter: "
                        "line 1 column 15 (char 14); the body ends before its last object or "
                        "array is closed (was it cut off?)"]),
    ("[{'blob': 'x'}]", ["netgrad: decode_error: {f}: not valid JSON: Expecting property name "
                         "enclosed in double quotes: line 1 column 3 (char 2); JSON strings "
                         "and keys take double quotes (\"), not single ones"]),
])
def test_a_problem_of_the_inputs_file_is_pathed_in_that_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], entries: str,
        lines: list[str]) -> None:
    f = tmp_path / "inputs.json"
    f.write_text(entries)
    assert cli.main(["verify", str(_net_file(tmp_path)), "--inputs", str(f)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[:len(lines)] == [line.replace("{f}", str(f)) for line in lines], err
    assert not any("RunRequest" in line for line in err), err


def test_an_inputs_file_with_a_byte_order_mark_is_read(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "inputs.json"
    f.write_bytes(b'\xef\xbb\xbf[{"blob": "x", "random": {"shape": [2]}}]')
    assert cli.main(["verify", str(_net_file(tmp_path)), "--inputs", str(f)]) == 0
    assert "passed" in capsys.readouterr().out


def test_an_inputs_file_that_is_not_utf8_says_which_byte(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "inputs.json"
    f.write_bytes(b'[{"blob": "x\xff"}]')
    assert cli.main(["verify", str(_net_file(tmp_path)), "--inputs", str(f)]) == 1
    head = capsys.readouterr().err.splitlines()[0]
    assert head == (f"netgrad: decode_error: {f}: not UTF-8 (byte 12: invalid start byte); "
                    "save it as UTF-8 text"), head


def test_verify_names_its_main_net_file_too(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """(second walkthrough) With --init-net there are two NetDef files: each problem names
    the one it is in."""
    f = tmp_path / "typo.json"
    f.write_text(json.dumps({"op": [{"type": "Relu", "inputs": ["x"], "output": ["y"]}]}))
    init = tmp_path / "init.json"
    init.write_text(json.dumps({"op": []}))
    assert cli.main(["verify", str(f), "--init-net", str(init)]) == 1
    head = capsys.readouterr().err.splitlines()[0]
    assert head.startswith(f"netgrad: decode_error: {f}: op[0].inputs: unknown field"), head
