"""Memory after a burst of maximal requests (issue 14 §2) on a live server at 127.0.0.1.

The server's resident set is read in steady state (after a warm-up of ordinary requests),
then sampled through a burst of maximal requests - as many ops as ``NETGRAD_MAX_OPS``
allows, sent together, each client retrying a 503 after its ``Retry-After`` - plus junk JSON
and over-limit bodies, and must be back within 20 % of the steady state soon after.
The CI form scales the limits down (10,000 ops, 8 MiB bodies, large from 256 KiB); the
long form keeps the defaults (200,000 ops, 64 MiB bodies, large from 1 MiB).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.reliability.common import (
    LONG,
    NET_BODY,
    OP_BODY,
    big_net_body,
    live,
    record,
)

MAX_OPS = 200_000 if LONG else 10_000
CONCURRENT = 4 if LONG else 2
JUNK_MB = 60 if LONG else 4


def _post_retrying(url: str, body: bytes, deadline: float) -> tuple[int, int]:
    """POST until not 503 (waiting ``Retry-After``); ``(status, 503s seen)``."""
    refused = 0
    while True:
        r = httpx.post(url + "/v1/gradients/net", content=body, timeout=900.0,
                       headers={"content-type": "application/json"})
        if r.status_code != 503 or time.monotonic() > deadline:
            return r.status_code, refused
        refused += 1
        time.sleep(float(r.headers.get("retry-after", "1")))


def test_resident_memory_returns_to_steady_state_after_a_burst() -> None:
    env = {"NETGRAD_MAX_OPS": str(MAX_OPS)}
    if not LONG:  # the same shape, scaled down: 10,000-op bodies are large here
        env.update({"NETGRAD_MAX_BODY_BYTES": str(8 * 2**20),
                    "NETGRAD_LARGE_BODY_BYTES": str(256 * 1024),
                    "NETGRAD_MAX_JSON_CONTAINERS": "500000"})
    maximal = big_net_body(MAX_OPS)
    over = big_net_body(MAX_OPS + 1)
    junk = b'{"net": {"op": []}, "ys": ["y"], "junk": [' + b"{}," * (JUNK_MB * 2**20 // 3) + b"{}]}"
    with live(env) as server:
        with httpx.Client(base_url=server.url, timeout=60.0) as client:
            for _ in range(100):
                assert client.post("/v1/gradients/op", json=OP_BODY).status_code == 200
                assert client.post("/v1/gradients/net", json=NET_BODY).status_code == 200
        time.sleep(1.0)
        steady = server.rss_bytes()
        series: list[tuple[float, int]] = []
        stop = threading.Event()
        t0 = time.monotonic()

        def sample() -> None:
            while not stop.is_set():
                series.append((round(time.monotonic() - t0, 2), server.rss_bytes()))
                stop.wait(0.25)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        deadline = time.monotonic() + (1800 if LONG else 120)
        with ThreadPoolExecutor(CONCURRENT + 3) as ex:
            maximal_runs = [ex.submit(_post_retrying, server.url, maximal, deadline)
                            for _ in range(CONCURRENT)]
            junk_runs = [ex.submit(_post_retrying, server.url, junk, deadline)
                         for _ in range(2)]
            over_run = ex.submit(_post_retrying, server.url, over, deadline)
            results = [f.result() for f in maximal_runs]
            junk_results = [f.result() for f in junk_runs]
            over_result = over_run.result()
        burst_end = time.monotonic() - t0
        settle_deadline = time.monotonic() + 10.0
        after = server.rss_bytes()
        while after > 1.2 * steady and time.monotonic() < settle_deadline:
            time.sleep(0.25)
            after = server.rss_bytes()
        time.sleep(0.5)
        stop.set()
        sampler.join(5)
        log = server.log_text()
    peak = max(rss for _, rss in series)
    mb = 2**20
    figures = {
        "max_ops": MAX_OPS, "maximal_body_mb": round(len(maximal) / mb, 2),
        "junk_body_mb": round(len(junk) / mb, 1), "concurrent_maximal": CONCURRENT,
        "maximal_statuses": [s for s, _ in results],
        "maximal_503_retries": sum(n for _, n in results),
        "junk_statuses": [s for s, _ in junk_results], "over_limit_status": over_result[0],
        "burst_s": round(burst_end, 1),
        "steady_mb": round(steady / mb, 1), "peak_mb": round(peak / mb, 1),
        "after_mb": round(after / mb, 1), "after_over_steady": round(after / steady, 3),
        "rss_series_mb": [(t, round(r / mb, 1)) for t, r in series[:: max(1, len(series) // 40)]],
    }
    record("memory_burst", figures)
    assert [s for s, _ in results] == [200] * CONCURRENT, figures
    assert all(s == 413 for s, _ in junk_results), figures
    assert over_result[0] == 413
    assert after <= 1.2 * steady, figures
    assert "Traceback" not in log
