"""Hypothesis profiles for the fuzz tests (see :mod:`tests.fuzz.profiles`).

Importing :mod:`tests.fuzz.profiles` registers ``fuzz-ci`` and ``long``. When ``tests/fuzz``
is named on the command line, pytest imports this conftest before ``pytest_configure``, so the
hypothesis plugin finds ``--hypothesis-profile=long`` registered. The hook below records
whether a profile was named; the fuzz tests use it (``profiles.fuzz_settings``) and fall back
to ``fuzz-ci`` only when none was, so an explicit profile is never overridden and nothing is
loaded for the rest of the session.
"""

from __future__ import annotations

import pytest

from tests.fuzz import profiles


def pytest_configure(config: pytest.Config) -> None:
    """Remember the ``--hypothesis-profile`` option (``None`` when not given)."""
    profiles.explicit_profile = config.getoption("--hypothesis-profile", None)
