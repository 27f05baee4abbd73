"""Shared parts of the reliability suite: a live server with its process, request bodies,
resident-memory readings and percentiles.

Traffic goes only to 127.0.0.1. Long forms run when ``NETGRAD_RELIABILITY_LONG=1`` (see
``tests/reliability/conftest.py``); figures are printed and, when
``NETGRAD_RELIABILITY_OUT`` names a directory, written there as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from api_schemas import caffe2_pb2
from core.control.lowering import add_while_op
from core.proto import codec
from core.registry import make_arg, make_op
from tests.api.live_server import server_process

LONG = os.environ.get("NETGRAD_RELIABILITY_LONG") == "1"


@dataclass
class Server:
    """A running ``netgrad serve``: its URL, process and log file."""

    url: str
    proc: subprocess.Popen[bytes]
    log: IO[bytes]

    def log_text(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def rss_bytes(self) -> int:
        """Resident set of the server process itself (workers excluded)."""
        return rss_bytes(self.proc.pid)

    def worker_pids(self) -> list[int]:
        """Process ids of the server's execution workers (multiprocessing's resource
        tracker, also a child, left out)."""
        out = []
        for pid in children(self.proc.pid):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"resource_tracker" not in cmd:
                out.append(pid)
        return out


def rss_bytes(pid: int) -> int:
    """``VmRSS`` of process ``pid`` in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (from ``/proc/*/stat``), ordered."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            out.append(int(entry.name))
    return sorted(out)


@contextmanager
def live(env: dict[str, str] | None = None, timeout: float = 60.0) -> Iterator[Server]:
    """Start ``python -m app.cli serve`` on a free 127.0.0.1 port, up once its execution
    workers run; always stop it."""
    workers = int({"NETGRAD_WORKERS": "0", **(env or {})}["NETGRAD_WORKERS"])
    with tempfile.TemporaryFile() as log:
        def workers_up(proc: subprocess.Popen[bytes]) -> bool:
            return len(Server("", proc, log).worker_pids()) >= workers

        with server_process(log, env, timeout=timeout, ready=workers_up,
                            stdout_to_log=True) as (url, proc):
            yield Server(url, proc, log)


# -- bodies ------------------------------------------------------------------------------------

OP_BODY: dict[str, Any] = {
    "op": {"type": "Relu", "input": ["x"], "output": ["y"]}, "g_output": ["y_grad"],
}


def mlp_net(n_layers: int = 3) -> dict[str, Any]:
    """A small FC/Relu chain ending in Softmax, as JSON."""
    ops: list[dict[str, Any]] = []
    x = "data"
    for k in range(n_layers):
        ops.append({"type": "FC", "input": [x, f"w{k}", f"b{k}"], "output": [f"fc{k}"]})
        ops.append({"type": "Relu", "input": [f"fc{k}"], "output": [f"r{k}"]})
        x = f"r{k}"
    ops.append({"type": "Softmax", "input": [x], "output": ["prob"]})
    return {"name": "mlp", "op": ops}


NET_BODY: dict[str, Any] = {"net": mlp_net(3), "ys": ["prob"]}

VERIFY_BODY: dict[str, Any] = {
    "net": {"name": "v", "op": [{"type": "Tanh", "input": ["x"], "output": ["y"]}]},
    "ys": ["y"],
    "inputs": [{"blob": "x", "random": {"shape": [2, 3], "seed": 1}}],
}

RUN_BODY: dict[str, Any] = {
    "net": {"name": "r", "op": [{"type": "Relu", "input": ["x"], "output": ["y"]}]},
    "inputs": [{"blob": "x", "tensor": {"shape": [2], "data": [1.0, -1.0]}}],
    "fetch": ["y"],
}


def slow_run_body() -> dict[str, Any]:
    """``/v1/run`` of a ``While`` that never ends: the job runs until the wall-clock limit
    stops it (422), keeping one worker busy that long."""
    body = caffe2_pb2.NetDef(name="body")
    body.op.append(make_op("Add", ["n", "one"], ["n"], []))
    net = caffe2_pb2.NetDef(name="forever")
    bool_type = caffe2_pb2.TensorProto.BOOL
    for name, value, extra in (("cond", 1, [make_arg("dtype", bool_type)]),
                               ("n", 0.0, []), ("one", 1.0, [])):
        args = [make_arg("shape", [1]), make_arg("value", value), *extra]
        net.op.append(make_op("ConstantFill", [], [name], args))
    add_while_op(net, "cond", ["cond", "n", "one"], body)
    return {"net": codec.to_json_obj(net), "fetch": ["n"]}


def big_net_body(n_ops: int) -> bytes:
    """``/v1/gradients/net`` of a chain of ``n_ops`` elementwise ops, as JSON bytes."""
    ops = [{"type": "Relu" if k % 2 else "Tanh", "input": [f"b{k}"], "output": [f"b{k + 1}"]}
           for k in range(n_ops)]
    return json.dumps({"net": {"name": "chain", "op": ops}, "ys": [f"b{n_ops}"]}).encode()


# -- figures -----------------------------------------------------------------------------------

def percentiles(
    values: Sequence[float], qs: Sequence[float] = (50, 90, 99, 100)
) -> dict[str, float]:
    """Nearest-rank percentiles (milliseconds in, milliseconds out), keys ``p50``..."""
    if not values:
        return {f"p{q:g}": float("nan") for q in qs}
    s = sorted(values)
    out = {}
    for q in qs:
        k = max(0, min(len(s) - 1, int(round(q / 100 * len(s) + 0.5)) - 1))
        out[f"p{q:g}"] = round(s[k], 2)
    return out


def record(name: str, figures: dict[str, Any]) -> None:
    """Print ``figures`` and, with ``NETGRAD_RELIABILITY_OUT``, save them as JSON."""
    text = json.dumps(figures, indent=2, sort_keys=True)
    print(f"\n[reliability] {name}{' (long)' if LONG else ''}:\n{text}")
    out = os.environ.get("NETGRAD_RELIABILITY_OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        suffix = "long" if LONG else "ci"
        (Path(out) / f"{name}-{suffix}.json").write_text(text + "\n")
