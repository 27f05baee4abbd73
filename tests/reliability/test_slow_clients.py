"""Slow and vanishing clients (issue 14 §3, §4) against a live server on 127.0.0.1.

* slowloris: 2,000 connections trickle request-head bytes; ``/healthz`` stays under 100 ms,
  and the server closes each one once ``NETGRAD_HEADER_TIMEOUT_S`` has passed (the long
  form keeps 2,000 open for a minute by reopening what the server closed);
* a body that stops arriving is a 408 after ``NETGRAD_BODY_TIMEOUT_S``;
* a client that disconnects mid-body is one info line in the log, no traceback;
* past the connection cap a request is a 503 with ``Retry-After``.
"""

from __future__ import annotations

import multiprocessing
import socket
import time
from multiprocessing.connection import Connection
from urllib.parse import urlsplit

import httpx

from tests.reliability.common import LONG, live, percentiles, record

N_SLOW = 2_000
HEAD_START = b"POST /v1/gradients/op HTTP/1.1\r\nHost: 127.0.0.1\r\n"


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", int(parts.port or 80)


def _open_slow(addr: tuple[str, int]) -> socket.socket:
    s = socket.create_connection(addr, timeout=5)
    s.sendall(HEAD_START)
    s.setblocking(False)
    return s


def _closed_by_peer(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _attack(addr: tuple[str, int], n: int, seconds: float, reopen: bool,
            header_timeout: float, conn: Connection) -> None:
    """Slowloris in its own process (so its work does not slow the probes down): open ``n``
    connections, trickle one head byte each per half second for ``seconds`` (reopening what
    the server closes when ``reopen``), then report how many were still open, and - without
    reopening - how many the server left open once its head timeout had passed."""
    socks = [_open_slow(addr) for _ in range(n)]
    opened_at = time.monotonic()
    conn.send("open")
    reopened = 0
    end = time.monotonic() + seconds
    slices = 10  # like independent clients: spread over the half second, not one burst
    while time.monotonic() < end:
        for part in range(slices):
            time.sleep(0.5 / slices)
            for k in range(part, len(socks), slices):
                try:
                    socks[k].send(b"X")
                except OSError:
                    if reopen:
                        socks[k].close()
                        socks[k] = _open_slow(addr)
                        reopened += 1
    open_now = sum(not _closed_by_peer(s) for s in socks)
    still_open = -1
    if not reopen:
        time.sleep(max(0.0, opened_at + header_timeout + 1.5 - time.monotonic()))
        still_open = sum(not _closed_by_peer(s) for s in socks)
    for s in socks:
        s.close()
    conn.send((open_now, still_open, reopened))


def test_health_stays_fast_while_2000_slowloris_connections_are_open() -> None:
    header_timeout = 10.0 if LONG else 4.0
    hold_s = 60.0 if LONG else header_timeout - 1.0
    with live({"NETGRAD_HEADER_TIMEOUT_S": str(header_timeout)}) as server:
        ours, theirs = multiprocessing.Pipe()
        attacker = multiprocessing.get_context("spawn").Process(
            target=_attack,
            args=(_address(server.url), N_SLOW, hold_s, LONG, header_timeout, theirs),
            daemon=True,
        )
        attacker.start()
        try:
            assert ours.poll(60) and ours.recv() == "open"
            time.sleep(0.5)  # let the server finish accepting them
            latencies = []
            with httpx.Client(base_url=server.url, timeout=5.0) as client:
                client.get("/healthz")
                end = time.monotonic() + hold_s - 0.5
                while time.monotonic() < end:
                    t0 = time.perf_counter()
                    r = client.get("/healthz")
                    latencies.append((time.perf_counter() - t0) * 1000)
                    assert r.status_code == 200
                    time.sleep(0.05)
            assert ours.poll(hold_s + header_timeout + 30)
            open_now, still_open, reopened = ours.recv()
        finally:
            attacker.join(10)
            if attacker.is_alive():
                attacker.kill()
        log = server.log_text()
    figures = {"slow_connections": N_SLOW, "probes": len(latencies),
               "healthz_ms": percentiles(latencies), "reopened": reopened,
               "open_at_end_of_probing": open_now, "open_after_head_timeout": still_open,
               "log_bytes": len(log)}
    record("slowloris", figures)
    assert len(latencies) >= 20
    # Every probe under 100 ms: the CI form with 2,000 connections held open; the long form
    # also while the server closes them at each head timeout and the attacker reopens them
    # (10,000 reconnections a minute).
    assert figures["healthz_ms"]["p100"] < 100.0, figures
    if not LONG:
        assert open_now == N_SLOW  # they were really held open while probing
        assert still_open == 0  # and the server closed every one after its head timeout
    assert "Traceback" not in log
    assert len(log) < 200_000


def test_a_body_that_stops_arriving_is_a_408() -> None:
    with live({"NETGRAD_BODY_TIMEOUT_S": "1.5"}) as server:
        s = socket.create_connection(_address(server.url), timeout=10)
        s.sendall(b"POST /v1/gradients/op HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"op\":")
        t0 = time.monotonic()
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = s.recv(65536)
            if not chunk:
                break
            answer += chunk
        elapsed = time.monotonic() - t0
        s.close()
        log = server.log_text()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"body_timeout" in answer and b"connection: close" in answer.lower()
    assert 1.0 < elapsed < 5.0
    assert "Traceback" not in log


def test_a_client_disconnecting_mid_body_is_one_info_line() -> None:
    with live() as server:
        for _ in range(3):
            s = socket.create_connection(_address(server.url), timeout=10)
            s.sendall(b"POST /v1/gradients/net HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
                      b"{\"net\": {\"op\": [")
            time.sleep(0.2)
            s.close()
        time.sleep(0.5)
        assert httpx.get(server.url + "/healthz").status_code == 200
        log = server.log_text()
    lines = [ln for ln in log.splitlines() if "disconnected" in ln]
    assert len(lines) == 3, log[-3000:]
    # one INFO line each (JSON lines by default: NETGRAD_LOG_FORMAT=json; or text)
    assert all(ln.startswith("INFO") or '"level": "INFO"' in ln for ln in lines), lines
    assert "Traceback" not in log and "ERROR" not in log


def test_past_the_connection_cap_a_request_gets_503_with_retry_after() -> None:
    with live({"NETGRAD_MAX_CONNECTIONS": "8", "NETGRAD_HEADER_TIMEOUT_S": "30"}) as server:
        idle = [socket.create_connection(_address(server.url), timeout=5) for _ in range(10)]
        time.sleep(0.3)
        r = httpx.get(server.url + "/healthz", timeout=5)
        for s in idle:
            s.close()
        time.sleep(0.3)
        after = httpx.get(server.url + "/healthz", timeout=5)
    assert r.status_code == 503, r.text
    assert r.headers["retry-after"] == "2"
    assert r.json()["type"] == "urn:netgrad:problem:overloaded"
    assert after.status_code == 200
