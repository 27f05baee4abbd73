"""``netgrad grad --densify``: Caffe2's error by default, a dense sum with the flag (issue 8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from api_schemas import caffe2_pb2
from app import cli
from core.proto import codec
from core.registry import make_arg, make_op
from tests.api.live_server import live_server


def _mixed(tmp_path: Path) -> Path:
    net = caffe2_pb2.NetDef(name="mixed")
    net.op.extend([
        make_op("Gather", ["E", "I"], ["G"]),
        make_op("Relu", ["E"], ["R"]),
        make_op("ReduceSum", ["G"], ["Gs"], [make_arg("keepdims", 0)]),
        make_op("ReduceSum", ["R"], ["Rs"], [make_arg("keepdims", 0)]),
        make_op("Add", ["Gs", "Rs"], ["loss"]),
    ])
    path = tmp_path / "mixed.pbtxt"
    path.write_text(codec.to_text(net))
    return path


def test_densify_flag_local_and_remote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _mixed(tmp_path)
    assert cli.main(["grad", str(path), "--ys", "loss"]) == 1
    err = capsys.readouterr().err
    assert "mixed_sparse_dense" in err and "op[0]:Gather" in err and "op[1]:Relu" in err
    assert cli.main(["grad", str(path), "--ys", "loss", "--densify"]) == 0
    local = capsys.readouterr().out
    assert 'type: "SparseToDense"' in local
    with live_server() as url:
        assert cli.main(["grad", str(path), "--ys", "loss", "--densify", "--url", url]) == 0
        remote = capsys.readouterr().out
    assert remote == local


def test_verify_and_run_take_densify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The README named ``--densify`` for the CLI, but only ``grad`` had it (walkthrough,
    stop 24); ``verify`` and ``run`` refused the flag."""
    import json

    path = _mixed(tmp_path)
    inputs = tmp_path / "inputs.json"
    inputs.write_text(json.dumps([
        {"blob": "E", "random": {"shape": [4, 3], "distribution": "away_from_zero"}},
        {"blob": "I", "tensor": {"shape": [3], "dtype": "int64", "data": [0, 2, 2]}}]))
    common = [str(path), "--ys", "loss", "--inputs", str(inputs)]
    assert cli.main(["verify", *common, "--check", "E"]) != 0  # mixed_sparse_dense
    assert "mixed_sparse_dense" in capsys.readouterr().err
    assert cli.main(["verify", *common, "--check", "E", "--mode", "full", "--densify"]) == 0
    assert "E" in capsys.readouterr().out
    assert cli.main(["run", *common, "--fetch", "E_grad", "--densify"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["E_grad"]["shape"] == [4, 3]
