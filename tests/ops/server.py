"""A real ``netgrad serve`` whose stderr (the JSON log) the test can read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.api.live_server import REPO_ROOT, free_port


@dataclass
class Server:
    """A running server: its base URL and the file its stderr goes to."""

    url: str
    log_path: Path

    def log_records(self) -> list[dict[str, Any]]:
        """Every JSON log line written so far (other lines skipped)."""
        out = []
        for line in self.log_path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out


@contextmanager
def serve(tmp: Path, env: dict[str, str] | None = None, args: tuple[str, ...] = (),
          timeout: float = 60.0) -> Iterator[Server]:
    """Run ``python -m app.cli serve`` on a free loopback port; always stop it."""
    port = free_port()
    full_env = {**os.environ, "NETGRAD_WORKERS": "0", **(env or {})}
    full_env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), full_env.get("PYTHONPATH", "")) if p
    )
    log_path = tmp / f"server-{port}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port",
             str(port), *args],
            cwd=REPO_ROOT, env=full_env, stdout=subprocess.DEVNULL, stderr=log,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited: {log_path.read_text()[-2000:]}")
            try:
                if httpx.get(url + "/livez", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"server did not answer within {timeout}s")
            time.sleep(0.1)
        yield Server(url, log_path)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
