"""HTTP benchmarks of the wire layer (issue 10), side by side in one run.

Measured in one run, interleaved, medians:

* **Small requests.** Throughput of ``POST /v1/gradients/op`` with the README's ``Do`` op
  (JSON), 8 concurrent keep-alive clients, against a FastAPI echo of the same body
  (:mod:`bench.echo_app`) on the same uvicorn set-up and the same httpx client.
  Target: netgrad ≥ 0.7× the echo.
* **Real nets.** ``POST /v1/gradients/net`` of ResNet-50 and Inception-v2 (``ys`` = the first
  external output) end to end over HTTP, binary and JSON, against the same generation in
  process (a separate process asked for one generation between the HTTP requests).
  Targets: binary ÷ in-process ≤ 1.5×, JSON ÷ binary ≤ 1.5×.
* **Hostile bodies.** A net nested 150 sub-net levels deep (JSON and binary), 64 MiB of
  invalid UTF-8 in a name (JSON and binary), a binary message nested 100 000 levels
  deep, 4 000 000 ops in binary (the last not UTF-8) and 500 000 ops in text format: the
  status, and the server CPU one refusal costs (reading the body included).
  Target: ≤ 50 ms.

``--baseline DIR`` runs a second netgrad checkout (for example the last commit:
``mkdir /tmp/base && git archive HEAD | tar -x -C /tmp/base``) through the same
measurements, interleaved with this one, so "before" and "after" come from one run.

Run from the repository root: ``python -m bench.bench_http [--baseline DIR] [--quick]
[--only hostile]``.
Needs ``../shared/realnets`` for the real nets (skipped without it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "realnets"
NETS = ("model_zoo__resnet50__predict_net.pbtxt", "model_zoo__inception_v2__predict_net.pbtxt")
PB = "application/protobuf"
JSON = "application/json"
TEXT = "text/x-protobuf"
#: One uvicorn set-up for every server: the event loop and HTTP parser ``netgrad serve``
#: uses (uvloop and httptools, netgrad's dependencies), spelled out, without uvicorn's
#: access log. ``--http h11 --loop asyncio`` gives the figures of the pure-Python stack.
UVICORN = ["--host", "127.0.0.1", "--loop", "uvloop", "--http", "httptools",
           "--log-level", "warning", "--no-access-log"]
CLK_TCK = os.sysconf("SC_CLK_TCK")
MIB = 1024 * 1024


@dataclass
class Server:
    """A uvicorn process serving one app."""

    name: str
    url: str
    proc: subprocess.Popen[bytes]
    tree: Path

    def cpu_seconds(self) -> float:
        """User + system CPU time so far of the server process (every thread), of its
        children it has waited for, and of its live descendants (the workers a large body's
        decoding may be handed to)."""
        total, todo = 0, [self.proc.pid]
        while todo:
            pid = todo.pop()
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])
                if pid == self.proc.pid:  # (cutime, cstime: ended children, once reaped)
                    total += int(fields[13]) + int(fields[14])
                for task in Path(f"/proc/{pid}/task").iterdir():
                    todo.extend(int(c) for c in (task / "children").read_text().split())
            except (OSError, ValueError):  # (a descendant that ended meanwhile)
                continue
        return total / CLK_TCK


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(name: str, tree: Path, target: str, factory: bool) -> Iterator[Server]:
    """Run ``uvicorn target`` from ``tree`` (workers off) until the block ends."""
    port = _free_port()
    cmd = [sys.executable, "-m", "uvicorn", target, "--port", str(port), *UVICORN]
    if factory:
        cmd.append("--factory")
    env = {**os.environ, "NETGRAD_WORKERS": "0", "PYTHONPATH": str(tree)}
    proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}")
            try:
                if httpx.get(url + "/healthz", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start")
            time.sleep(0.1)
        yield Server(name, url, proc, tree)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- request bodies ------------------------------------------------------------------------------


def _ld(field: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field."""
    return _tag_len(field, len(payload)) + payload


def _tag_len(field: int, n: int) -> bytes:
    out = bytearray([(field << 3) | 2])
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def nested_binary(levels: int) -> bytes:
    """``NetGradientRequest{net}`` whose net nests ``levels`` Do sub-nets, built on the wire.

    Built inside out from the lengths alone, so 10^5 levels cost no quadratic copying.
    """
    inner = _ld(2, _ld(4, b"Add"))  # NetDef{op{type: "Add"}}
    prefixes: list[bytes] = []
    size = len(inner)
    for _ in range(levels):
        # NetDef{op{type: "Do", arg{name: "net", n: <size>}}}
        arg_head = _ld(1, b"net") + _tag_len(8, size)
        arg_size = len(arg_head) + size
        op_head = _ld(4, b"Do") + _tag_len(5, arg_size)
        op_size = len(op_head) + arg_size
        net_head = _tag_len(2, op_size)
        prefixes.append(net_head + op_head + arg_head)
        size = len(net_head) + op_size
    return b"".join([_tag_len(1, size), *reversed(prefixes), inner])


def nested_json(levels: int) -> bytes:
    """The same request as JSON: ``{"net": ..., "ys": ["Z"]}``."""
    net: dict[str, object] = {"op": [{"type": "Add", "input": ["X", "Y"], "output": ["Z"]}]}
    for _ in range(levels):
        net = {"op": [{"type": "Do", "input": ["X", "Y", "W"], "output": ["Z", "W"],
                       "arg": [{"name": "net", "n": net},
                               {"name": "inner_blobs", "strings": ["X", "Y", "Z"]},
                               {"name": "outer_blobs_idx", "ints": [0, 1, 2]}]}]}
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    return json.dumps({"net": net, "ys": ["Z"]}).encode()


def invalid_utf8_json(total: int) -> bytes:
    """A JSON request of exactly ``total`` bytes whose net name is bytes 0xFF."""
    head, tail = b'{"net": {"name": "', b'"}, "ys": ["y"]}'
    return head + b"\xff" * (total - len(head) - len(tail)) + tail


def invalid_utf8_binary(total: int) -> bytes:
    """A binary request of exactly ``total`` bytes whose net name is bytes 0xFF."""
    n = total - 10
    while True:
        name = b"\xff" * n
        body = _ld(1, _ld(1, name)) + _ld(2, _ld(1, b"y"))
        if len(body) == total:
            return body
        n += total - len(body)


def many_ops_binary(n: int, bad_last: bool = False) -> bytes:
    """A binary request whose net holds ``n`` ops ``{type: "R"}`` (5 bytes each), and with
    ``bad_last`` one more whose type is the byte 0xFF (invalid UTF-8 at the very end)."""
    op = _ld(4, b"R")
    net = _ld(2, op) * n + (_ld(2, _ld(4, b"\xff")) if bad_last else b"")
    return _ld(1, net) + _ld(2, _ld(1, b"y"))


def empty_subnets_binary(n: int) -> bytes:
    """A binary request of one ``Do`` op whose ``net`` argument lists ``n`` empty NetDefs
    (2 bytes each: field 9, length 0)."""
    arg = _ld(1, b"net") + b"\x4a\x00" * n  # (Argument.nets = 9, wire type 2)
    op = _ld(4, b"Do") + _ld(5, arg)
    return _ld(1, _ld(2, op)) + _ld(2, _ld(1, b"y"))


def many_ops_json(n: int) -> bytes:
    """A JSON request whose net holds ``n`` FC ops in a chain, the last one's output a
    number instead of a name (one bad value, at the very end)."""
    ops = [{"type": "FC", "input": [f"b{k}", "w", "b"], "output": [f"b{k + 1}"],
            "arg": [{"name": "axis", "i": 1}]} for k in range(n)]
    ops[-1]["output"] = [n]
    return json.dumps({"net": {"op": ops}, "ys": [f"b{n}"]}).encode()


def chain_json(n: int) -> bytes:
    """A valid JSON request whose net is a chain of ``n`` Relu / Tanh ops."""
    ops = [{"type": "Relu" if k % 2 else "Tanh", "input": [f"b{k}"], "output": [f"b{k + 1}"]}
           for k in range(n)]
    return json.dumps({"net": {"name": "chain", "op": ops}, "ys": [f"b{n}"]}).encode()


def many_ops_text(n: int) -> bytes:
    """A text-format request whose net holds ``n`` ops ``op { type: "R" }``."""
    return b"net { " + b'op { type: "R" } ' * n + b'} ys { blob: "y" }'


@dataclass
class RealNet:
    """A real net as the benchmark sends it."""

    name: str
    path: Path
    binary: bytes
    json: bytes


def load_real_nets() -> list[RealNet]:
    """ResNet-50 and Inception-v2 as binary and JSON ``NetGradientRequest`` bodies."""
    from api_schemas import caffe2_pb2, netgrad_pb2
    from core.proto import codec

    out = []
    for fname in NETS:
        path = SHARED / fname
        if not path.exists():
            continue
        net = codec.from_text(path.read_text(), caffe2_pb2.NetDef)
        y = net.external_output[0]
        req = netgrad_pb2.NetGradientRequest(net=net)
        req.ys.add(blob=y)
        body = json.dumps({"net": codec.to_json_obj(net), "ys": [y]}).encode()
        short = fname.split("__")[1]
        out.append(RealNet(short, path, req.SerializeToString(), body))
    return out


# -- measurements --------------------------------------------------------------------------------


async def _throughput(url: str, path: str, body: bytes, seconds: float, clients: int) -> float:
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    headers = {"Content-Type": JSON}
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60.0) as client:
        warm = [client.post(path, content=body, headers=headers) for _ in range(clients * 4)]
        for r in await asyncio.gather(*warm):
            if r.status_code != 200:
                raise RuntimeError(f"{url}{path}: {r.status_code} {r.text[:300]}")
        count = 0
        deadline = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal count
            while time.perf_counter() < deadline:
                r = await client.post(path, content=body, headers=headers)
                if r.status_code != 200:
                    raise RuntimeError(f"{url}{path}: {r.status_code}")
                count += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        return count / (time.perf_counter() - start)


def throughput(url: str, path: str, body: bytes, seconds: float, clients: int = 8) -> float:
    """Requests per second with ``clients`` concurrent keep-alive connections."""
    return asyncio.run(_throughput(url, path, body, seconds, clients))


def latency(client: httpx.Client, path: str, body: bytes, ctype: str) -> float:
    """Wall time of one request (seconds), answer read in full; must be a 200."""
    headers = {"Content-Type": ctype, "Accept": ctype}
    t = time.perf_counter()
    r = client.post(path, content=body, headers=headers)
    dt = time.perf_counter() - t
    if r.status_code != 200:
        raise RuntimeError(f"{path}: {r.status_code} {r.text[:300]}")
    return dt


INPROC = """
import sys, time
from pathlib import Path
from api_schemas import caffe2_pb2
from core.api import gradient_for_net
from core.proto import codec
nets = [codec.from_text(Path(p).read_text(), caffe2_pb2.NetDef) for p in sys.argv[1:]]
ys = [[net.external_output[0]] for net in nets]
for net, y in zip(nets, ys):
    gradient_for_net(net, y)
print("ready", flush=True)
for line in sys.stdin:
    k = int(line)
    t = time.perf_counter()
    gradient_for_net(nets[k], ys[k])
    print(time.perf_counter() - t, flush=True)
"""


class InProcess:
    """A process generating gradients with the engine of one checkout, one call at a time.

    The benchmark asks it for one generation between HTTP requests, so in-process and HTTP
    figures are taken under the same conditions (caches, other processes), side by side.
    """

    def __init__(self, tree: Path, nets: list[RealNet]) -> None:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        self.names = [n.name for n in nets]
        self.proc = subprocess.Popen(
            [sys.executable, "-c", INPROC, *(str(n.path) for n in nets)], cwd=tree, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def generate(self, name: str) -> float:
        """Seconds one ``gradient_for_net`` of net ``name`` took."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{self.names.index(name)}\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def close(self) -> None:
        """End the process."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def hostile(server: Server, body: bytes, ctype: str, repeats: int) -> tuple[int, float, float]:
    """``(status, server CPU ms per request, client wall ms per request)`` of a refusal."""
    statuses = set()
    with httpx.Client(base_url=server.url, timeout=600.0) as client:
        client.get("/healthz")
        cpu0, t0 = server.cpu_seconds(), time.perf_counter()
        for _ in range(repeats):
            statuses.add(client.post("/v1/gradients/net", content=body,
                                     headers={"Content-Type": ctype}).status_code)
        cpu, wall = server.cpu_seconds() - cpu0, time.perf_counter() - t0
        if client.get("/healthz").status_code != 200:
            raise RuntimeError(f"{server.name} stopped answering")
    if server.proc.poll() is not None:
        raise RuntimeError(f"{server.name} died")
    (status,) = statuses
    return status, cpu / repeats * 1e3, wall / repeats * 1e3


# -- the run -------------------------------------------------------------------------------------


def main() -> None:
    """Run every measurement and print Markdown tables (see the module doc)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--baseline", type=Path, help="a second netgrad checkout to compare")
    parser.add_argument("--quick", action="store_true", help="fewer and shorter rounds")
    parser.add_argument("--only", choices=("all", "hostile"), default="all",
                        help="every measurement, or the hostile bodies alone")
    parser.add_argument("--stack", choices=("c", "python"), default="c",
                        help="uvicorn's uvloop + httptools (netgrad serve's), or asyncio + h11")
    ns = parser.parse_args()
    if ns.stack == "python":
        UVICORN[UVICORN.index("uvloop")] = "asyncio"
        UVICORN[UVICORN.index("httptools")] = "h11"
    rounds, seconds, requests = (2, 1.5, 15) if ns.quick else (5, 3.0, 41)

    from app.api import docs

    do_body = json.dumps(docs.DO_REQUEST).encode()
    nets = load_real_nets()
    trees = [("netgrad", ROOT)]
    if ns.baseline is not None:
        trees.insert(0, ("netgrad (baseline)", ns.baseline.resolve()))

    with ExitStack() as stack:
        echo = stack.enter_context(serve("echo", ROOT, "bench.echo_app:app", factory=False))
        servers = [stack.enter_context(serve(n, t, "app.main:create_app", factory=True))
                   for n, t in trees]
        print(f"Python {sys.version.split()[0]}, {os.cpu_count()} cores; "
              f"{rounds} rounds, medians; uvicorn {' '.join(UVICORN[2:6])}.\n")

        # 1. Small requests: throughput against the echo, interleaved round by round.
        if ns.only == "all":
            rates: dict[str, list[float]] = {s.name: [] for s in [echo, *servers]}
            for _ in range(rounds):
                rates["echo"].append(throughput(echo.url, "/echo", do_body, seconds))
                for s in servers:
                    rates[s.name].append(throughput(s.url, "/v1/gradients/op", do_body, seconds))
            echo_rate = statistics.median(rates["echo"])
            print("## Small Do-op request, 8 concurrent keep-alive clients\n")
            print("| server | req/s | ÷ echo |")
            print("|---|---:|---:|")
            print(f"| FastAPI echo of the same body | {echo_rate:.0f} | 1.00× |")
            for s in servers:
                rate = statistics.median(rates[s.name])
                print(f"| {s.name} `POST /v1/gradients/op` | {rate:.0f} "
                      f"| {rate / echo_rate:.2f}× |")

        # 2. Real nets: binary and JSON end to end against in-process generation, interleaved.
        if nets and ns.only == "all":
            print("\n## Real nets: `POST /v1/gradients/net` end to end\n")
            print("| server | net | in-process ms | binary ms | JSON ms | binary ÷ in-process "
                  "| JSON ÷ binary |")
            print("|---|---|---:|---:|---:|---:|---:|")
            engines = {s.name: InProcess(s.tree, nets) for s in servers}
            clients = {s.name: stack.enter_context(httpx.Client(base_url=s.url, timeout=60.0))
                       for s in servers}
            for net in nets:
                times: dict[tuple[str, str], list[float]] = defaultdict(list)
                # Binary against in-process, then JSON against binary: each pair alternates
                # request by request.
                for _ in range(requests + 2):
                    for s in servers:
                        times[(s.name, "gen")].append(engines[s.name].generate(net.name))
                        times[(s.name, PB)].append(
                            latency(clients[s.name], "/v1/gradients/net", net.binary, PB))
                for _ in range(requests + 2):
                    for s in servers:
                        times[(s.name, PB + "2")].append(
                            latency(clients[s.name], "/v1/gradients/net", net.binary, PB))
                        times[(s.name, JSON)].append(
                            latency(clients[s.name], "/v1/gradients/net", net.json, JSON))
                for s in servers:
                    g, b, b2, j = (statistics.median(times[(s.name, k)][2:]) * 1e3
                                   for k in ("gen", PB, PB + "2", JSON))
                    print(f"| {s.name} | {net.name} | {g:.2f} | {b:.2f} | {j:.2f} | "
                          f"{b / g:.2f}× | {j / b2:.2f}× |")
            for engine in engines.values():
                engine.close()

        # 3. Hostile bodies: status and server CPU per refusal.
        print("\n## Hostile bodies: `POST /v1/gradients/net`\n")
        print("| server | body | bytes | status | server CPU ms | client wall ms |")
        print("|---|---|---:|---:|---:|---:|")
        bodies = [
            ("JSON, 150 nested sub-nets", nested_json(150), JSON),
            ("binary, 150 nested sub-nets", nested_binary(150), PB),
            ("JSON, 64 MiB of invalid UTF-8", invalid_utf8_json(64 * MIB), JSON),
            ("binary, 64 MiB of invalid UTF-8", invalid_utf8_binary(64 * MIB), PB),
            ("binary, 100 000 nested messages", nested_binary(33_334), PB),
            ("binary, 4 000 000 ops (max_ops 200 000), the last not UTF-8",
             many_ops_binary(4_000_000, bad_last=True), PB),
            ("text, 500 000 ops", many_ops_text(500_000), TEXT),
            ("JSON, 200 000 ops, the last output a number", many_ops_json(200_000), JSON),
            ("JSON, 20 000 ops, valid (not hostile: a large body's scan)",
             chain_json(20_000), JSON),
            ("binary, one op with 500 000 empty sub-nets", empty_subnets_binary(500_000), PB),
        ]
        reps = 2 if ns.quick else 5
        for label, body, ctype in bodies:
            for s in servers:
                status, cpu, wall = hostile(s, body, ctype, reps)
                print(f"| {s.name} | {label} | {len(body)} | {status} | {cpu:.1f} | {wall:.1f} |")


if __name__ == "__main__":
    main()
