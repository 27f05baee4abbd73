"""The client distribution (clients/python/src) is tested from the checkout, uninstalled."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.live_server import live_server

CLIENT_SRC = Path(__file__).resolve().parents[2] / "clients" / "python" / "src"
if str(CLIENT_SRC) not in sys.path:
    sys.path.insert(0, str(CLIENT_SRC))


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """A live ``netgrad serve`` with one execution worker."""
    with live_server({"NETGRAD_WORKERS": "1", "NETGRAD_JOB_TIMEOUT_S": "120"}) as url:
        yield url
