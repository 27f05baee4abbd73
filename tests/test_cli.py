"""The ``netgrad`` command: ``serve`` defaults, ``grad`` on .pb/.pbtxt/.json, local and remote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from api_schemas import caffe2_pb2
from app import cli
from app.api import docs
from app.settings import get_settings
from core.proto import codec
from tests.api.live_server import live_server

MLP = codec.from_json_obj(docs.MLP_NET, caffe2_pb2.NetDef)


def _write(tmp_path: Path, suffix: str, net: caffe2_pb2.NetDef = MLP) -> Path:
    path = tmp_path / f"net{suffix}"
    if suffix == ".pb":
        path.write_bytes(codec.to_binary(net))
    elif suffix == ".json":
        path.write_text(json.dumps(codec.to_json_obj(net)))
    else:
        path.write_text(codec.to_text(net))
    return path


def test_serve_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr("uvicorn.run", lambda app, **kw: seen.update(app=app, **kw))
    monkeypatch.delenv("NETGRAD_HOST", raising=False)
    monkeypatch.delenv("NETGRAD_PORT", raising=False)
    get_settings.cache_clear()
    try:
        assert cli.main(["serve"]) == 0
        assert (seen["host"], seen["port"]) == ("127.0.0.1", 8000)
        assert seen["app"] == "app.main:create_app" and seen["factory"] is True
        assert cli.main(["serve", "--host", "0.0.0.0", "--port", "9001"]) == 0
        assert (seen["host"], seen["port"]) == ("0.0.0.0", 9001)
    finally:
        get_settings.cache_clear()


@pytest.mark.parametrize("suffix", [".pb", ".pbtxt", ".json"])
def test_grad_reads_every_format(
    tmp_path: Path, suffix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["grad", str(_write(tmp_path, suffix))]) == 0
    out = capsys.readouterr().out
    assert "# grad_map: data -> data_grad" in out
    printed = codec.from_text(
        "\n".join(line for line in out.splitlines() if not line.startswith("#")),
        caffe2_pb2.NetDef,
    )
    types = [op.type for op in printed.op]
    assert types[0] == "ConstantFill" and "FCGradient" in types


def test_grad_json_output_and_explicit_ys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, ".pbtxt")
    assert cli.main(["grad", str(path), "--ys", "fc", "--format", "json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert [op["type"] for op in body["grad_ops"]][0] == "ConstantFill"
    assert "prob" not in body["grad_map"] and body["grad_map"]["fc_w"] == "fc_w_grad"
    assert all(op["type"] != "SoftmaxGradient" for op in body["grad_ops"])


def test_default_ys_falls_back_to_last_op_output() -> None:
    net = caffe2_pb2.NetDef()
    net.CopyFrom(MLP)
    del net.external_output[:]
    assert cli.default_ys(net) == ["prob"]
    assert cli.default_ys(MLP) == ["prob"]


def test_grad_reports_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, ".pbtxt")
    assert cli.main(["grad", str(path), "--ys", "nowhere"]) == 1
    assert "nowhere" in capsys.readouterr().err
    bad = tmp_path / "bad.pb"
    bad.write_bytes(b"\xff\xff\xff")
    assert cli.main(["grad", str(bad)]) == 1
    assert cli.main(["grad", str(tmp_path / "missing.pb")]) == 2


def test_grad_against_a_server_prints_the_same(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, ".pb")
    assert cli.main(["grad", str(path)]) == 0
    local = capsys.readouterr().out
    with live_server() as url:
        assert cli.main(["grad", str(path), "--url", url]) == 0
        remote = capsys.readouterr().out
        assert cli.main(["grad", str(path), "--url", url, "--ys", "nowhere"]) == 1
        remote_err = capsys.readouterr().err
    assert cli.main(["grad", str(path), "--ys", "nowhere"]) == 1
    local_err = capsys.readouterr().err
    assert remote == local
    # The same error report either way: headline, then one line per problem.
    assert remote_err.startswith("netgrad: invalid_request: ") and "(HTTP 400)" in remote_err
    assert remote_err.splitlines()[1:] == local_err.splitlines()[1:]
    assert "nowhere" in remote_err


def test_unreachable_server_is_a_clean_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    with socket.socket() as s:  # a free local port with nothing listening on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    net = tmp_path / "n.pbtxt"
    net.write_text('op { input: "x" output: "y" type: "Relu" }\n')
    rc = cli.main(["grad", str(net), "--url", f"http://127.0.0.1:{port}"])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.startswith("netgrad: cannot reach") and "Traceback" not in err


def test_serve_with_an_invalid_setting_says_which_and_exits_2(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from app import cli
    from app.settings import get_settings

    monkeypatch.setenv("NETGRAD_LOG_LEVEL", "loud")
    monkeypatch.setenv("NETGRAD_WORKERS", "-3")
    get_settings.cache_clear()
    try:
        assert cli.main(["serve"]) == 2
    finally:
        get_settings.cache_clear()
    err = capsys.readouterr().err
    assert "NETGRAD_LOG_LEVEL='LOUD' is not valid" in err
    assert "NETGRAD_WORKERS='-3' is not valid" in err
    assert "Traceback" not in err


def test_log_level_is_read_in_any_case(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.settings import Settings

    monkeypatch.setenv("NETGRAD_LOG_LEVEL", "debug")
    assert Settings().log_level == "DEBUG"
