"""Shared fixtures. Tests that read ``../shared`` (real nets, specs) skip cleanly without it."""

from __future__ import annotations

from pathlib import Path

import pytest

# Registers the fuzz tests' hypothesis profiles early enough for a root
# `pytest --hypothesis-profile=long` (the plugin resolves the name at start-up).
from tests.fuzz import profiles  # noqa: F401

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = REPO_ROOT.parent / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """``<repo>/../shared``; skips the test when the directory is absent."""
    if not SHARED_DIR.is_dir():
        pytest.skip(f"{SHARED_DIR} is absent (shared test assets are not part of the repo)")
    return SHARED_DIR
