"""A server with API keys (``NETGRAD_API_KEYS_FILE``), asked by the Python client and by the
CLI's remote mode: ``api_key=`` / ``--api-key`` / ``NETGRAD_API_KEY`` are sent as
``Authorization: Bearer``; 401, 403 and 429 are typed errors (429 with ``Retry-After``)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from api_schemas import caffe2_pb2 as server_caffe2_pb2
from app import auth, cli
from app.api import docs
from core.control.lowering import add_while_op
from core.proto import codec
from core.registry import make_arg, make_op
from tests.api.live_server import live_server
from tests.client.conftest import CLIENT_SRC  # noqa: F401  (puts the client on sys.path)

from netgrad import errors  # noqa: E402  isort: skip
from netgrad.client import AsyncClient, Client, tensor_input  # noqa: E402  isort: skip


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A live server with a keys file and key ``alice`` (one job in flight at most)."""
    path = tmp_path_factory.mktemp("keys") / "keys.txt"
    alice = auth.add_key(path, "alice", max_jobs=1)
    env = {"NETGRAD_API_KEYS_FILE": str(path), "NETGRAD_WORKERS": "1",
           "NETGRAD_JOB_TIMEOUT_S": "3", "NETGRAD_JOB_MAX_ITERATIONS": str(10**12)}
    with live_server(env) as url:
        yield url, alice


@pytest.fixture(autouse=True)
def _no_key_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NETGRAD_API_KEY", raising=False)


def test_client_without_key_wrong_key_right_key(keyed: tuple[str, str]) -> None:
    url, alice = keyed
    with Client(url) as c, pytest.raises(errors.AuthenticationError) as missing:
        c.gradients_op(docs.DO_OP, ["outer_Z_grad", None])
    assert missing.value.status == 401 and missing.value.code == "api_key_missing"
    with Client(url, api_key="ng_wrong") as c, \
            pytest.raises(errors.PermissionDeniedError) as wrong:
        c.operators()
    assert wrong.value.status == 403 and wrong.value.code == "api_key_invalid"
    for encoding in ("protobuf", "json"):
        with Client(url, api_key=alice, encoding=encoding) as c:  # type: ignore[arg-type]
            res = c.gradients_op(docs.DO_OP, ["outer_Z_grad", None])
            assert [g.dense for g in res.g_input[:2]] == ["outer_X_grad", "outer_Y_grad"]
            assert len(c.operators("gradient").operators) > 50
    with Client(url, headers={"X-API-Key": alice, "X-Request-ID": "keyed-1"}) as c:
        assert c.gradients_net(docs.MLP_NET, ["prob"]).grad_ops


def test_client_reads_netgrad_api_key(keyed: tuple[str, str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    url, alice = keyed
    monkeypatch.setenv("NETGRAD_API_KEY", alice)
    with Client(url) as c:
        assert c.run(docs.IF_TUTORIAL_NET, ["z"],
                     inputs=[tensor_input("x", [], [0.5], "float32")]).outputs
    with Client(url, api_key="") as c, pytest.raises(errors.AuthenticationError):
        c.operators()  # "" sends no key, whatever the environment says


def test_async_client_sends_the_key(keyed: tuple[str, str]) -> None:
    url, alice = keyed

    async def go() -> tuple[int, str]:
        async with AsyncClient(url, api_key=alice) as c:
            ops = await c.operators()
        async with AsyncClient(url, api_key="ng_wrong") as c:
            try:
                await c.operators()
            except errors.PermissionDeniedError as exc:
                return len(ops.operators), exc.code
        return len(ops.operators), "no error"

    count, code = asyncio.run(go())
    assert count > 100 and code == "api_key_invalid"


def _endless_run() -> dict[str, Any]:
    body = server_caffe2_pb2.NetDef(name="body")
    body.op.append(make_op("Scale", ["x"], ["x"], [make_arg("scale", 1.0)]))
    net = server_caffe2_pb2.NetDef(name="forever")
    add_while_op(net, "cond", ["cond", "x"], body)
    return {"net": codec.to_json_obj(net), "fetch": ["x"], "inputs": [
        {"blob": "cond", "tensor": {"shape": [], "dtype": "bool", "data": [1]}},
        {"blob": "x", "tensor": {"shape": [1], "dtype": "float64", "data": [0.5]}}]}


def test_too_many_jobs_is_rate_limited_with_retry_after(keyed: tuple[str, str]) -> None:
    """alice may have one job in flight: another one meanwhile is a RateLimitedError."""
    url, alice = keyed
    endless = _endless_run()
    first: list[BaseException | None] = []

    def hold() -> None:
        with Client(url, api_key=alice, encoding="json") as c:
            try:
                c.run(endless["net"], ["x"], inputs=endless["inputs"])
                first.append(None)
            except errors.ProblemError as exc:
                first.append(exc)

    t = threading.Thread(target=hold)
    t.start()
    # Probe only once the endless job holds the worker: a probe that came first would hold
    # alice's slot itself and turn the endless job into the 429.
    wait_until = time.monotonic() + 30
    while time.monotonic() < wait_until and t.is_alive():
        text = httpx.get(url + "/metrics", timeout=10).text
        if any(line.startswith("netgrad_pool_workers_busy") and not line.endswith(" 0.0")
               for line in text.splitlines()):
            break
        time.sleep(0.02)
    limited: errors.RateLimitedError | None = None
    # Until the first job ends (its wall-clock limit) or 30 s: on a loaded machine the first
    # request may take a while to reach the server, and until then the others get 200s.
    deadline = time.monotonic() + 30
    with Client(url, api_key=alice) as c:
        while limited is None and time.monotonic() < deadline and t.is_alive():
            try:
                c.run(docs.IF_TUTORIAL_NET, ["z"],
                      inputs=[tensor_input("x", [], [0.5], "float32")])
            except errors.RateLimitedError as exc:
                limited = exc
            time.sleep(0.05)
    t.join(timeout=60)
    assert limited is not None, "no 429 while alice's first job ran"
    assert limited.status == 429 and limited.code == "too_many_jobs"
    assert limited.retry_after == 1.0
    assert len(first) == 1 and isinstance(first[0], errors.UnprocessableError)  # time limit


def _mlp_file(tmp_path: Path) -> Path:
    path = tmp_path / "mlp.json"
    path.write_text(json.dumps(docs.MLP_NET))
    return path


def test_cli_remote_mode_sends_the_key(keyed: tuple[str, str], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    url, alice = keyed
    net = str(_mlp_file(tmp_path))
    assert cli.main(["ops", "--url", url]) == 1
    err = capsys.readouterr().err
    assert "api_key_missing" in err and "--api-key" in err and "NETGRAD_API_KEY" in err
    assert cli.main(["grad", net, "--url", url, "--api-key", "ng_wrong"]) == 1
    assert "api_key_invalid" in capsys.readouterr().err
    assert cli.main(["ops", "--url", url, "--api-key", alice, "--status", "gradient"]) == 0
    assert "Relu" in capsys.readouterr().out
    assert cli.main(["grad", net, "--url", url, "--api-key", alice]) == 0
    assert "fc_w_grad" in capsys.readouterr().out
    monkeypatch.setenv("NETGRAD_API_KEY", alice)
    inputs = tmp_path / "inputs.json"
    inputs.write_text(json.dumps(docs.VERIFY_REQUEST["inputs"]))
    assert cli.main(["verify", net, "--url", url, "--inputs", str(inputs)]) == 0
    assert "fc_w" in capsys.readouterr().out
    assert cli.main(["run", net, "--url", url, "--inputs", str(inputs), "--fetch", "prob"]) == 0
    assert '"prob"' in capsys.readouterr().out
