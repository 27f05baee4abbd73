"""Start a real ``netgrad serve`` process on a free local port, for end-to-end tests.

:func:`server_process` is the one way the suites start a server (this module's
:func:`live_server`, ``tests/ops/server.py`` with a readable JSON log, and
``tests/reliability/common.py`` with the process and its workers).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def server_process(log: IO[bytes], env: dict[str, str] | None = None,
                   args: Sequence[str] = (), *, timeout: float = 30.0,
                   probe: str = "/healthz", drop_env: Sequence[str] = (),
                   ready: Callable[[subprocess.Popen[bytes]], bool] | None = None,
                   stdout_to_log: bool = False,
                   ) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Run ``python -m app.cli serve`` on a free 127.0.0.1 port; yield ``(url, process)``.

    Args:
        log: file the server's stderr goes to (and stdout, with ``stdout_to_log``).
        env: extra environment variables (``NETGRAD_WORKERS`` defaults to 0).
        args: extra ``serve`` arguments.
        timeout: seconds to wait for ``probe`` to answer 200 (and ``ready`` to hold).
        drop_env: variables of this process's environment not passed on.
        ready: a further condition on the process before the server counts as up.

    Raises:
        RuntimeError: the server exited, or did not come up in ``timeout`` seconds (with
            the end of its log).

    The server is always terminated (then killed) when the block ends.
    """
    port = free_port()
    full_env = {**os.environ, "NETGRAD_WORKERS": "0", **(env or {})}
    for name in drop_env:
        full_env.pop(name, None)
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), full_env.get("PYTHONPATH", "")) if p
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
         *args],
        cwd=REPO_ROOT, env=full_env, stderr=log,
        stdout=log if stdout_to_log else subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"

    def tail() -> str:
        log.flush()
        log.seek(0)
        return log.read().decode(errors="replace")[-2000:]

    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}: {tail()}")
            try:
                if (httpx.get(url + probe, timeout=1.0).status_code == 200
                        and (ready is None or ready(proc))):
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"server on port {port} did not come up in {timeout} s: "
                                   f"{tail()}")
            time.sleep(0.1)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextmanager
def live_server(env: dict[str, str] | None = None, timeout: float = 30.0) -> Iterator[str]:
    """Run ``python -m app.cli serve`` and yield its base URL; always terminates it.

    Args:
        env: extra environment variables (e.g. ``PYTHONHASHSEED``).
        timeout: seconds to wait for ``/healthz`` before failing.
    """
    with tempfile.TemporaryFile() as log, server_process(log, env, timeout=timeout) as (url, _):
        yield url
