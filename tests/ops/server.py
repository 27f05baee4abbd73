"""A real ``netgrad serve`` whose stderr (the JSON log) the test can read."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.api.live_server import server_process


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
    log_path = tmp / f"server-{os.getpid()}-{len(list(tmp.glob('server-*.log')))}.log"
    with open(log_path, "w+b") as log, server_process(
            log, env, args, timeout=timeout, probe="/livez",
            drop_env=("PROMETHEUS_MULTIPROC_DIR",)) as (url, _):
        yield Server(url, log_path)
