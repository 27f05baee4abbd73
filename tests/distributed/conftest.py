"""A Ray cluster for the Ray tests: ``NETGRAD_RAY_ADDRESS`` (CI starts one), else a local one.

Without Ray installed the Ray tests skip, except under ``NETGRAD_CI=1`` (set by ``.ci/run``),
where a missing Ray is a failure. Ray workers import the test modules' job functions, so the
repository root is put on their ``PYTHONPATH`` (``.ci/run`` starts its head with it too).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def ray_or_skip() -> Any:
    """The ``ray`` module; skip (fail under ``NETGRAD_CI=1``) when it is not installed."""
    try:
        import ray
    except ImportError:
        if os.environ.get("NETGRAD_CI") == "1":
            pytest.fail("NETGRAD_CI=1 but Ray is not installed (pip install -e '.[ray]')")
        pytest.skip("Ray is not installed (pip install 'netgrad[ray]')")
    return ray


@pytest.fixture(scope="session")
def ray_address() -> Iterator[str]:
    """Address of a running Ray cluster this process is connected to (loopback only)."""
    ray = ray_or_skip()
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # keep Ray on loopback
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a loopback test cluster: no token
    address = os.environ.get("NETGRAD_RAY_ADDRESS")
    if address:
        if not ray.is_initialized():
            ray.init(address=address, namespace="netgrad", logging_level="ERROR",
                     log_to_driver=False, configure_logging=False)
        yield address
        return
    paths = [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    ctx = ray.init(num_cpus=2, namespace="netgrad", include_dashboard=False,
                   logging_level="ERROR", log_to_driver=False, configure_logging=False,
                   object_store_memory=200 * 1024**2,
                   _temp_dir=tempfile.mkdtemp(prefix="ngray-"))
    try:
        yield str(ctx.address_info["gcs_address"])
    finally:
        ray.shutdown()
