"""Start a real ``netgrad serve`` process on a free local port, for end-to-end tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def live_server(env: dict[str, str] | None = None, timeout: float = 30.0) -> Iterator[str]:
    """Run ``python -m app.cli serve`` and yield its base URL; always terminates it.

    Args:
        env: extra environment variables (e.g. ``PYTHONHASHSEED``).
        timeout: seconds to wait for ``/healthz`` before failing.
    """
    port = free_port()
    full_env = {**os.environ, "NETGRAD_WORKERS": "0", **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), full_env.get("PYTHONPATH", "")) if p
    )
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=REPO_ROOT,
        env=full_env,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                log.seek(0)
                err = log.read().decode(errors="replace")
                raise RuntimeError(f"server exited with {proc.returncode}: {err[-2000:]}")
            try:
                if httpx.get(url + "/healthz", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"server on port {port} did not answer within {timeout}s")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
