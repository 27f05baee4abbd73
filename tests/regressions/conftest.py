"""The regression tests' default app: in-process generation (no worker pool), server
exceptions answered as 500s so that a test sees what a client would. A test module that
needs other settings defines its own ``client``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(workers=0)), raise_server_exceptions=False) as c:
        yield c
