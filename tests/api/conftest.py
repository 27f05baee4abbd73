"""Fixtures of the HTTP tests: an app with small limits and a TestClient running its lifespan."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings

#: Limits small enough that the size/depth tests stay fast.
TEST_MAX_BODY = 256 * 1024
TEST_MAX_DEPTH = 8


@pytest.fixture(scope="module")
def settings() -> Settings:
    return Settings(workers=0, max_body_bytes=TEST_MAX_BODY, max_depth=TEST_MAX_DEPTH)


@pytest.fixture(scope="module")
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c
