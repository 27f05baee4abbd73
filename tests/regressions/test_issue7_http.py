"""Issue 7 regressions over HTTP: each net's gradient agrees with central differences.

Two independent checks per case: ``POST /v1/verify`` (full mode) must pass, and the
gradient values ``POST /v1/run`` returns must match central differences of ``loss``
computed here from forward-only ``/v1/run`` calls. A missing gradient counts as zero.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from core.proto import codec
from tests.regressions.issue7_nets import Case, all_cases

CASES = all_cases()
STEP = 1e-6


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(workers=1)), raise_server_exceptions=False) as c:
        yield c


def _inputs(feeds: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    return [
        {"blob": k, "tensor": {"shape": list(v.shape), "dtype": "float64",
                               "data": v.reshape(-1).tolist()}}
        for k, v in feeds.items()
    ]


def _run(client: TestClient, case: Case, feeds: dict[str, np.ndarray], fetch: list[str],
         ys: list[str] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "net": codec.to_json_obj(case.net),
        "inputs": _inputs(feeds),
        "fetch": fetch,
    }
    if ys is not None:
        body["ys"] = ys
        body["recompute"] = case.recompute
    r = client.post("/v1/run", json=body)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_verify_passes(client: TestClient, case: Case) -> None:
    r = client.post("/v1/verify", json={
        "net": codec.to_json_obj(case.net),
        "ys": ["loss"],
        "inputs": _inputs(case.all_feeds()),
        "check": case.check,
        "mode": "full",
        "recompute": case.recompute,
    })
    assert r.status_code == 200, r.text
    report = r.json()["report"]
    assert [b["blob"] for b in report["blobs"]] == case.check
    assert report["passed"], report


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_run_gradients_match_central_differences(client: TestClient, case: Case) -> None:
    gen = client.post("/v1/gradients/net", json={
        "net": codec.to_json_obj(case.net), "ys": ["loss"], "recompute": case.recompute,
    })
    assert gen.status_code == 200, gen.text
    grad_map = gen.json()["grad_map"]
    feeds = case.all_feeds()
    names = {x: grad_map[x] for x in case.check if isinstance(grad_map.get(x), str)}
    out = _run(client, case, feeds, sorted(set(names.values())), ys=["loss"])["outputs"]
    for x in case.check:
        analytic = (
            np.array(out[names[x]]["data"]) if x in names else np.zeros(feeds[x].size)
        )
        numeric = np.zeros(feeds[x].size)
        for i in range(feeds[x].size):
            losses = []
            for sign in (1.0, -1.0):
                shifted = dict(feeds)
                v = feeds[x].copy().reshape(-1)
                v[i] += sign * STEP
                shifted[x] = v.reshape(feeds[x].shape)
                res = _run(client, case, shifted, ["loss"])
                losses.append(float(np.sum(res["outputs"]["loss"]["data"])))
            numeric[i] = (losses[0] - losses[1]) / (2 * STEP)
        np.testing.assert_allclose(analytic, numeric, atol=1e-6, rtol=1e-4,
                                   err_msg=f"{case.name}: gradient of {x}")
