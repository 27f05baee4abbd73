"""A verification whose tolerance cannot fail says so (walkthrough, stop 21).

``atol`` 1000 (or 1e300) passed a ``Relu`` gradient five times too large: the tolerance band
of every compared value held zero and the wrong value alike. An ``atol`` looser than the
default that leaves the check blind is refused; with the default, a gradient too small to
tell from zero passes with a warning and a note on its blob.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from core.verify.compare import DEFAULT_ATOL, blind_scale
from tests.api.helpers import assert_problem

#: Relu's gradient given as Scale(5): wrong wherever x > 0.
WRONG = {
    "net": {"op": [{"type": "Relu", "input": ["x"], "output": ["y"]}]},
    "ys": {"y": "y_grad"},
    "inputs": [{"blob": "x", "random": {"shape": [2, 3]}}],
    "grad_ops": [{"type": "Scale", "input": ["y_grad"], "output": ["x_grad"],
                  "arg": [{"name": "scale", "f": 5.0}]}],
}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(workers=1)), raise_server_exceptions=False) as c:
        yield c


def _verify(client: TestClient, **edits: Any) -> Any:
    return client.post("/v1/verify", json={**WRONG, **edits})


@pytest.mark.parametrize("mode", ["fast", "full"])
@pytest.mark.parametrize("atol", [1e300, 1000.0, 50.0])
def test_an_atol_that_passes_anything_is_refused(
    client: TestClient, mode: str, atol: float
) -> None:
    problem = assert_problem(_verify(client, mode=mode, tolerances={"atol": atol}), 400)
    err = problem["errors"][0]
    assert err["code"] == "tolerance_too_loose" and err["path"] == "tolerances.atol", err
    assert err["blobs"] == ["x"] and "a zero one included" in err["message"]


@pytest.mark.parametrize("mode", ["fast", "full"])
def test_a_loose_atol_that_can_still_fail_catches_the_wrong_gradient(
    client: TestClient, mode: str
) -> None:
    r = _verify(client, mode=mode, tolerances={"atol": 0.1})
    assert r.status_code == 200, r.text
    report = r.json()["report"]
    assert report["passed"] is False and report["blobs"][0]["passed"] is False


@pytest.mark.parametrize("mode", ["fast", "full"])
def test_a_gradient_below_the_default_atol_passes_with_a_warning(
    client: TestClient, mode: str
) -> None:
    tiny = {"net": {"op": [{"type": "Scale", "input": ["x"], "output": ["y"],
                            "arg": [{"name": "scale", "f": 1e-8}]}]},
            "ys": ["y"], "mode": mode, "inputs": [{"blob": "x", "random": {"shape": [2, 3]}}]}
    r = client.post("/v1/verify", json=tiny)
    assert r.status_code == 200, r.text
    report = r.json()["report"]
    assert report["passed"] is True
    assert "cannot tell this gradient from zero" in report["blobs"][0]["note"]
    warned = [d for d in report["diagnostics"] if d["code"] == "tolerance_blind"]
    assert len(warned) == 1 and warned[0]["blobs"] == ["x"], report["diagnostics"]
    tight = client.post("/v1/verify", json={**tiny, "tolerances": {"atol": 1e-14}})
    assert tight.status_code == 200, tight.text
    assert not [d for d in tight.json()["report"]["diagnostics"]
                if d["code"] == "tolerance_blind"]


def test_blind_scale() -> None:
    n = np.array([0.5, -1.0, 2.0])
    assert blind_scale(n, n, DEFAULT_ATOL, 1e-3) is None  # a normal check
    assert blind_scale(5 * n, n, 100.0, 1e-3) == 10.0  # 0 and 5n within 100 of n
    assert blind_scale(5 * n, n, 3.0, 1e-3) is None  # 5n is caught
    assert blind_scale(np.zeros(3), np.zeros(3), 100.0, 1e-3) is None  # nothing to tell
    assert blind_scale(np.zeros(0), np.zeros(0), 100.0, 1e-3) is None
