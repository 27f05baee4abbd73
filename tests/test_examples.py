"""Issue 12: the examples run against a live server (the TypeScript one where a TypeScript
compiler is on PATH: ``tsc``; Node 20 cannot run .ts itself)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.live_server import REPO_ROOT, live_server

EXAMPLES = REPO_ROOT / "examples"


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with live_server({"NETGRAD_WORKERS": "1", "NETGRAD_JOB_TIMEOUT_S": "120"}) as u:
        yield u


def _script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(EXAMPLES / "python" / "squeezenet_verify.py"),
                           *args], capture_output=True, text=True, timeout=600, check=False)


def test_python_script_builtin_squeezenet(url: str) -> None:
    out = _script("--url", url)
    assert out.returncode == 0, out.stderr
    assert "squeezenet: 66 ops" in out.stdout and out.stdout.strip().endswith("passed")


def test_python_script_model_zoo_net(url: str, shared_dir: Path) -> None:
    net = shared_dir / "realnets" / "caffe2_test_assets__squeeze_predict_net.pb"
    out = _script(str(net), "--url", url)
    assert out.returncode == 0, out.stderr
    assert "init_net: 52 fill ops" in out.stdout and out.stdout.strip().endswith("passed")


def test_typescript_client_posts_the_do_op(url: str, tmp_path: Path) -> None:
    tsc, node = shutil.which("tsc"), shutil.which("node")
    if tsc is None or node is None:
        pytest.skip("no TypeScript compiler (tsc) or node on PATH")
    src = EXAMPLES / "typescript"
    build = subprocess.run([tsc, "-p", str(src), "--outDir", str(tmp_path)],
                           capture_output=True, text=True, timeout=300, check=False)
    assert build.returncode == 0, build.stdout + build.stderr
    run = subprocess.run([node, str(tmp_path / "do_op.js")], capture_output=True, text=True,
                         timeout=60, check=False, env={**os.environ, "NETGRAD_URL": url})
    assert run.returncode == 0, run.stderr
    assert 'outer_X -> "outer_X_grad"' in run.stdout and "W -> null" in run.stdout
    assert run.stdout.splitlines()[3].startswith("Do(outer_Z_grad")
