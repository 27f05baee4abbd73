"""Benchmark: full-mode verification fanned out over 1 and 2 Ray worker nodes, and the pool.

Run from the repository root (needs ``pip install -e '.[ray]'``)::

    python bench/bench_ray.py              # 10^5 elements (~10 min on 2 idle cores)
    python bench/bench_ray.py --quick      # 10^4 elements (~20 s)

What it does, on this machine and on loopback only:

1. starts a Ray head with no CPUs (it only schedules) and one worker node of one CPU
   (``ray start --address=... --num-cpus 1``), then times ``verify_net`` in full mode on
   ``y = Tanh(Scale(x, 0.5))`` with ``x`` of ``--elements`` float64 elements, its numeric part
   fanned out by :func:`core.verify.fanout.numeric`;
2. adds a second one-CPU worker node and times the same check again;
3. times it on the embedded pool with 1 worker (one job, no fan-out: the single-process run)
   and with 2 workers (fanned out);
4. measures the overhead per task: ``--tasks`` no-op jobs through the Ray backend and through
   the pool, divided by their number (2 slots busy);
5. checks that every report is identical to the single-process one;
6. stops Ray (``ray stop --force``: every Ray process of this machine).

Speed-up = time(1 node) / time(2 nodes). The machine is shared: run it when the cores are
quiet, and read ratios measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from api_schemas import caffe2_pb2  # noqa: E402
from core.executor.backends import (  # noqa: E402
    PoolBackend,
    RayBackend,
    ray_driver_environment,
)
from core.executor.limits import RunLimits  # noqa: E402
from core.executor.pool import WorkerPool  # noqa: E402
from core.registry import make_arg, make_op  # noqa: E402
from core.verify import InputSpec, RandomSpec, VerifyOptions, fanout, verify_net  # noqa: E402

LIMITS = RunLimits(wall_clock_s=3600.0)
HEAD_IP = "127.0.0.2"
RAY = [str(Path(sys.executable).with_name("ray"))]


def _net() -> caffe2_pb2.NetDef:
    net = caffe2_pb2.NetDef(name="tanh_scale")
    net.op.extend([make_op("Scale", ["x"], ["h"], [make_arg("scale", 0.5)]),
                   make_op("Tanh", ["h"], ["y"])])
    return net


def _check(backend: object, n: int) -> tuple[float, object]:
    opts = VerifyOptions(inputs=[InputSpec("x", random=RandomSpec([n], seed=1))], mode="full")
    start = time.perf_counter()
    res = verify_net(_net(), ["y"], opts,
                     runner=lambda job: fanout.numeric(job, backend, progress=_count))
    return time.perf_counter() - start, res.report


JOBS = [0]


def _count(_done: int, total: int) -> None:
    JOBS[0] = total


def _per_task_ms(backend: object, tasks: int) -> float:
    b = backend
    # os.getpid: a no-op job importable by the workers (a function of this script is not)
    b.map(os.getpid, [()] * 4)  # type: ignore[attr-defined]  # warm the workers
    start = time.perf_counter()
    b.map(os.getpid, [()] * tasks)  # type: ignore[attr-defined]
    return (time.perf_counter() - start) / tasks * 1000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ray(*args: str, env: dict[str, str]) -> None:
    subprocess.run([*RAY, *args], check=True, env=env, stdout=subprocess.DEVNULL)


def _wait_cpus(ray: object, cpus: int) -> None:
    deadline = time.monotonic() + 60
    while ray.cluster_resources().get("CPU", 0) < cpus:  # type: ignore[attr-defined]
        if time.monotonic() > deadline:
            raise SystemExit(f"the Ray cluster never reached {cpus} CPUs")
        time.sleep(0.5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10^4 elements")
    ap.add_argument("--elements", type=int, default=None)
    ap.add_argument("--tasks", type=int, default=200, help="no-op tasks for the overhead")
    args = ap.parse_args()
    n = args.elements or (10**4 if args.quick else 10**5)

    # Several nodes on one machine, on loopback only: each node gets its own 127.0.0.x
    # address (Ray would swap 127.0.0.1 itself for the machine's outward address).
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH"))
                                         if p)}
    os.environ.update({k: env[k] for k in ("RAY_USAGE_STATS_ENABLED", "RAY_AUTH_MODE")})
    port = _free_port()
    address = f"{HEAD_IP}:{port}"
    tmp = tempfile.mkdtemp(prefix="ngbench-")
    rows: list[tuple[str, float, object]] = []
    print(f"full-mode verify of y = Tanh(Scale(x, 0.5)), x: {n} float64 elements "
          f"({2 * n + 2} net runs)")
    try:
        _ray("start", "--head", "--num-cpus", "0", "--node-ip-address", HEAD_IP,
             "--port", str(port), "--include-dashboard=false", "--disable-usage-stats",
             "--object-store-memory", "200000000", "--temp-dir", tmp, env=env)
        worker = ["start", "--address", address, "--num-cpus", "1",
                  "--object-store-memory", "100000000", "--disable-usage-stats"]
        _ray(*worker, "--node-ip-address", "127.0.0.3", env=env)
        import ray

        ray_driver_environment()  # as RayBackend does when it starts Ray itself
        ray.init(address=address, namespace="netgrad-bench", logging_level="ERROR",
                 log_to_driver=False, _node_ip_address=HEAD_IP)
        _wait_cpus(ray, 1)
        one = RayBackend(address, LIMITS, task_memory_bytes=64 * 1024**2)
        over_ray = _per_task_ms(one, args.tasks)
        t, rep = _check(one, n)
        rows.append(("Ray, 1 worker node (1 CPU)", t, rep))
        print(f"  {rows[-1][0]}: {t:.1f} s")
        _ray(*worker, "--node-ip-address", "127.0.0.4", env=env)
        _wait_cpus(ray, 2)
        two = RayBackend(address, LIMITS, task_memory_bytes=64 * 1024**2)
        over_ray2 = _per_task_ms(two, args.tasks)
        t, rep = _check(two, n)
        rows.append(("Ray, 2 worker nodes (1 CPU each)", t, rep))
        print(f"  {rows[-1][0]}: {t:.1f} s")
    finally:
        if "ray" in sys.modules and sys.modules["ray"].is_initialized():
            sys.modules["ray"].shutdown()
        subprocess.run([*RAY, "stop", "--force"], env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
    for workers in (1, 2):
        with WorkerPool(workers, LIMITS) as pool:
            backend = PoolBackend(pool)
            over_pool = _per_task_ms(backend, args.tasks) if workers == 2 else 0.0
            t, rep = _check(backend, n)
            label = ("pool, 1 worker (one job: the single-process run)" if workers == 1
                     else "pool, 2 workers (fanned out)")
            rows.append((label, t, rep))
            print(f"  {label}: {t:.1f} s")
    single = rows[2][2]
    print()
    print("| backend | time (s) | speed-up vs 1 Ray node | report identical to single-process |")
    print("|---|---:|---:|---|")
    for label, t, rep in rows:
        print(f"| {label} | {t:.1f} | {rows[0][1] / t:.2f}x | {rep == single} |")
    print()
    print(f"jobs of the last fanned-out check: {JOBS[0]} (one prepare job, then chunks sized "
          f"to about {fanout.TARGET_CHUNK_S:g} s each); overhead per no-op "
          f"task ({args.tasks} tasks, 2 slots busy): "
          f"Ray 1 node {over_ray:.2f} ms, Ray 2 nodes {over_ray2:.2f} ms, "
          f"pool 2 workers {over_pool:.2f} ms")


if __name__ == "__main__":
    main()
