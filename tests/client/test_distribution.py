"""The client distribution stays small: httpx + protobuf, package ``netgrad`` only, and it
imports nothing of the server (app, core, api_schemas) nor NumPy."""

from __future__ import annotations

import subprocess
import sys
import tomllib

from tests.client.conftest import CLIENT_SRC

BLOCKED = ("app", "core", "api_schemas", "numpy", "fastapi")


def test_dependencies_and_packages() -> None:
    meta = tomllib.loads((CLIENT_SRC.parent / "pyproject.toml").read_text())
    assert meta["project"]["name"] == "netgrad-client"
    deps = [d.split(">")[0].split("=")[0].split("<")[0] for d in meta["project"]["dependencies"]]
    assert deps == ["httpx", "protobuf"]
    assert meta["tool"]["setuptools"]["packages"]["find"]["include"] == ["netgrad*"]
    # (``pip install ./clients/python`` leaves its build metadata, ``*.egg-info``, here)
    assert sorted(p.name for p in CLIENT_SRC.iterdir()
                  if not p.name.startswith(".") and not p.name.endswith(".egg-info")) == \
        ["netgrad"]


def test_client_imports_without_the_server_or_numpy() -> None:
    code = (
        "import sys\n"
        f"for name in {BLOCKED!r}: sys.modules[name] = None\n"
        f"sys.path.insert(0, {str(CLIENT_SRC)!r})\n"
        "import netgrad.client, netgrad.errors\n"
        "req = netgrad.client.net_request({'op': [{'type': 'Relu', 'input': ['x'],"
        " 'output': ['y']}]}, ['y'])\n"
        "print(req.net.op[0].type)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "Relu"


def test_generated_copies_match_the_server_schema() -> None:
    root = CLIENT_SRC.parents[2]
    for name in ("caffe2_pb2.py", "netgrad_pb2.py"):
        server = (root / "api_schemas" / name).read_text()
        copy = (CLIENT_SRC / "netgrad" / "proto" / name).read_text()
        assert copy == server.replace("from api_schemas import caffe2_pb2",
                                      "from netgrad.proto import caffe2_pb2")
