"""Issue 12: ``netgrad verify`` / ``run`` / ``ops`` / ``--version``, locally and with ``--url``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from api_schemas import caffe2_pb2
from app import __version__, cli
from app.api import docs
from app.ui.examples import SQUEEZENET_VERIFY, random_init_net, weight_shapes
from core.proto import codec
from tests.api.live_server import live_server

MLP = codec.from_json_obj(docs.MLP_NET, caffe2_pb2.NetDef)
MLP_INPUTS = ["--random", "data:2,4", "fc_w:3,4", "fc_b:3"]


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with live_server({"NETGRAD_WORKERS": "1", "NETGRAD_JOB_TIMEOUT_S": "120"}) as u:
        yield u


@pytest.fixture
def mlp(tmp_path: Path) -> Path:
    path = tmp_path / "mlp.pb"
    path.write_bytes(codec.to_binary(MLP))
    return path


def _where(remote: bool, url: str) -> list[str]:
    return ["--url", url] if remote else []


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"netgrad {__version__}"


def test_every_option_help_names_its_default() -> None:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name in ("grad", "verify", "run", "ops"):
        for action in sub.choices[name]._actions:
            if action.option_strings and action.dest not in ("help",):
                assert "default" in (action.help or "") or "required" in (action.help or ""), \
                    (name, action.dest, action.help)


@pytest.mark.parametrize("remote", [False, True], ids=["local", "url"])
def test_verify_passes_and_fails_with_exit_status(
        mlp: Path, url: str, remote: bool, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["verify", str(mlp), *MLP_INPUTS, "--mode", "full", *_where(remote, url)]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "PASS fc_w" in out and "numeric check (full) passed: 3 blobs" in out
    # No tolerance at all: rounding alone makes the check fail, and the exit status says so.
    assert cli.main([*args, "--atol", "0", "--rtol", "0"]) == 1
    assert "FAILED" in capsys.readouterr().out


@pytest.mark.parametrize("remote", [False, True], ids=["local", "url"])
def test_missing_inputs_printed_once_with_the_flags_to_use(
        mlp: Path, url: str, remote: bool, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["verify", str(mlp), *_where(remote, url)]) == 1
    captured = capsys.readouterr()
    err = captured.err
    assert captured.out == ""
    assert err.count("netgrad: invalid_request:") == 1
    assert err.count("missing_input at op[0]:FC") == 3
    assert "--random BLOB:D1,D2" in err and "--init-net FILE" in err


@pytest.mark.parametrize("remote", [False, True], ids=["local", "url"])
def test_run_prints_fetched_blobs(mlp: Path, url: str, remote: bool, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    inputs = tmp_path / "inputs.json"
    inputs.write_text(json.dumps([
        {"blob": "data", "tensor": {"shape": [1, 4], "data": [1, 2, 3, 4]}},
        {"blob": "fc_w", "tensor": {"shape": [3, 4], "data": [0.0] * 12}},
        {"blob": "fc_b", "tensor": {"shape": [3], "data": [0.0, 0.0, 0.0]}}]))
    args = ["run", str(mlp), "--inputs", str(inputs), "--fetch", "prob", "fc_w_grad",
            "--ys", "prob", *_where(remote, url)]
    assert cli.main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["prob"]["shape"] == [1, 3]
    assert out["prob"]["data"] == pytest.approx([1 / 3] * 3)
    assert out["fc_w_grad"]["shape"] == [3, 4]


@pytest.mark.parametrize("remote", [False, True], ids=["local", "url"])
def test_ops_lists_and_filters(url: str, remote: bool,
                               capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["ops", "--format", "json", *_where(remote, url)]) == 0
    every = json.loads(capsys.readouterr().out)["operators"]
    assert cli.main(["ops", "--status", "gradient_op", "--format", "json",
                     *_where(remote, url)]) == 0
    grads = json.loads(capsys.readouterr().out)["operators"]
    assert grads and all(o["gradient"] == "gradient_op" for o in grads)
    assert {o["type"] for o in grads} < {o["type"] for o in every}
    assert cli.main(["ops", "--status", "no_gradient", *_where(remote, url)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and all("no_gradient" in line for line in lines)


def test_unreadable_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["verify", str(tmp_path / "absent.pb")]) == 2
    assert capsys.readouterr().err.count("netgrad: cannot read") == 1


@pytest.mark.parametrize("remote", [False, True], ids=["local", "url"])
def test_squeezenet_with_init_net(shared_dir: Path, tmp_path: Path, url: str, remote: bool,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    src = shared_dir / "realnets" / "caffe2_test_assets__squeeze_predict_net.pb"
    net = codec.from_binary(src.read_bytes(), caffe2_pb2.NetDef)
    init = tmp_path / "init_net.pb"
    init.write_bytes(codec.to_binary(random_init_net(weight_shapes(net))))
    sq = SQUEEZENET_VERIFY
    data = "data:" + ",".join(str(d) for d in sq["data_shape"])
    args = ["verify", str(src), "--init-net", str(init), "--random", data,
            "--ys", *sq["ys"], "--check", *sq["check"], "--passes", str(sq["passes"]),
            "--atol", str(sq["atol"]), "--rtol", str(sq["rtol"]), *_where(remote, url)]
    assert cli.main(args) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert all(f"PASS {b}:" in out for b in sq["check"])
    assert "numeric check (fast) passed: 4 blobs" in out


@pytest.mark.parametrize("remote", [False, True], ids=["local", "url"])
def test_ops_accepts_every_status_the_api_accepts(url: str, remote: bool,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from core.registry import GradientStatus

    for status in GradientStatus:
        assert cli.main(["ops", "--status", status.value, "--format", "json",
                         *_where(remote, url)]) == 0, status
        entries = json.loads(capsys.readouterr().out)["operators"]
        assert all(o["gradient"] == status.value for o in entries)
        if status is GradientStatus.NOT_IMPLEMENTED_IN_NETGRAD:
            assert entries, "no op type has that status any more: pick another example"


def test_random_may_be_repeated() -> None:
    # one --random with several blobs, or one --random per blob: the same inputs
    parser = cli.build_parser()
    listed = parser.parse_args(["verify", "net.pb", *MLP_INPUTS])
    repeated = parser.parse_args(
        ["verify", "net.pb", "--random", "data:2,4", "--random", "fc_w:3,4", "--random", "fc_b:3"]
    )
    assert listed.random == repeated.random == ["data:2,4", "fc_w:3,4", "fc_b:3"]
