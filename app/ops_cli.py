"""The operator's side of the ``netgrad`` command: ``serve`` options, ``keys add``, ``probe``.

Kept apart from :mod:`app.operations` so that building the parser imports nothing heavy,
and so that ``PROMETHEUS_MULTIPROC_DIR`` is set before any process imports
:mod:`prometheus_client` (it reads the variable once, at import).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from app.settings import Settings, get_settings

#: prometheus-client's multiprocess directory variable (see :mod:`app.metrics`).
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """Extra ``uvicorn.run`` options of ``netgrad serve``: logging, HTTP worker processes.

    With more than one HTTP worker, ``PROMETHEUS_MULTIPROC_DIR`` is pointed at a fresh
    directory (or the operator's, emptied of stale files) before any worker starts.
    """
    from app.observability import logging_config

    opts: dict[str, Any] = {
        "log_config": logging_config(settings.log_format, settings.log_level),
        "access_log": False,  # netgrad.access logs every request, with more fields
    }
    if settings.http_workers > 1:
        opts["workers"] = settings.http_workers
        directory = os.environ.get(MULTIPROC_ENV)
        if directory:
            for stale in Path(directory).glob("*.db"):
                stale.unlink()
        else:
            os.environ[MULTIPROC_ENV] = tempfile.mkdtemp(prefix="netgrad-metrics-")
    return opts


def _cmd_keys_add(ns: argparse.Namespace) -> int:
    path = ns.file or get_settings().api_keys_file
    if not path:
        print("netgrad keys add: set NETGRAD_API_KEYS_FILE or pass --file", file=sys.stderr)
        return 2
    from app.auth import add_key

    try:
        key = add_key(path, ns.name, ns.max_jobs)
    except (ValueError, OSError) as exc:
        print(f"netgrad keys add: {exc}", file=sys.stderr)
        return 1
    print(key)
    print(f"(stored only as its SHA-256 in {path}; this is the only time it is shown)",
          file=sys.stderr)
    return 0


def probe(path: str, host: str, port: int, timeout_s: float = 4.0) -> int:
    """Exit status of ``netgrad probe``: 0 when ``GET http://host:port/path`` is 200, else 1.

    The image's HEALTHCHECK runs this (a slim image has no curl); it imports only httpx, so
    a check every 30 s costs little.
    """
    import httpx

    url = f"http://{host}:{port}/{path.lstrip('/')}"
    try:
        status = httpx.get(url, timeout=timeout_s).status_code
    except httpx.HTTPError as exc:
        print(f"netgrad probe: {url}: {exc}")
        return 1
    print(f"netgrad probe: {url}: {status}")
    return 0 if status == 200 else 1


def _cmd_probe(ns: argparse.Namespace) -> int:
    settings = get_settings()
    return probe(ns.path, ns.host, ns.port if ns.port is not None else settings.port)


def add_commands(sub: Any) -> None:
    """Add ``keys add`` and ``probe`` to the ``netgrad`` command's subparsers."""
    keys = sub.add_parser("keys", help="manage API keys (NETGRAD_API_KEYS_FILE)")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    add = keys_sub.add_parser("add", help="make a key NAME, print it, store only its hash")
    add.add_argument("name", help="name of the key's holder (letters, digits, . _ @ -)")
    add.add_argument("--file", help="keys file (default NETGRAD_API_KEYS_FILE)")
    add.add_argument("--max-jobs", type=int, default=None,
                     help="this key's limit of jobs in flight (default NETGRAD_KEY_MAX_JOBS)")
    add.set_defaults(func=_cmd_keys_add)
    probe = sub.add_parser("probe", help="exit 0 if GET /PATH on the local server is 200")
    probe.add_argument("path", nargs="?", default="livez", help="livez (default) or readyz")
    probe.add_argument("--host", default="127.0.0.1")
    probe.add_argument("--port", type=int, default=None, help="default NETGRAD_PORT")
    probe.set_defaults(func=_cmd_probe)
