"""The reliability suite (issue 14): short forms run with the rest of the tests in CI; the
long forms run on demand::

    NETGRAD_RELIABILITY_LONG=1 NETGRAD_RELIABILITY_OUT=bench/results \\
        .venv/bin/python -m pytest tests/reliability -s -p no:cacheprovider

and the schemathesis run of 10,000 cases with ``NETGRAD_SCHEMATHESIS=1`` (needs the
``schemathesis`` package). Long forms get a longer per-test timeout.
"""

from __future__ import annotations

import pytest

from tests.reliability.common import LONG


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if not LONG:
        return
    for item in items:
        if "tests/reliability" in str(item.fspath):
            item.add_marker(pytest.mark.timeout(3600))
