"""Both HTTP parsers of ``netgrad serve`` keep the same guards (``NETGRAD_HTTP``).

httptools is the default (``auto``); h11 stays selectable. Against a live server on
127.0.0.1, for each: an ordinary request is answered; a request head that grows past
``app.server.MAX_HEADER_BYTES`` is a 400 and the connection closes; a connection that sends
no complete head is closed after ``NETGRAD_HEADER_TIMEOUT_S``; keep-alive requests after
the first are answered on the same connection.
"""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

from app.server import MAX_HEADER_BYTES, http_implementation
from tests.reliability.common import live

HEADER_TIMEOUT_S = 1.5


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", int(parts.port or 80)


def _read_all(s: socket.socket, seconds: float) -> bytes:
    """What the server sends until it closes the connection (or ``seconds`` pass)."""
    s.settimeout(0.2)
    out = b""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            chunk = s.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            break
        if not chunk:
            return out + b"<closed>"
        out += chunk
    return out


def test_auto_picks_httptools() -> None:
    assert http_implementation("auto") == "httptools"
    assert http_implementation("h11") == "h11"


@pytest.mark.parametrize("impl", ["httptools", "h11"])
def test_guards_hold_for_each_parser(impl: str) -> None:
    env = {"NETGRAD_HTTP": impl, "NETGRAD_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S)}
    with live(env) as server:
        addr = _address(server.url)
        body = {"op": {"type": "Relu", "input": ["x"], "output": ["y"]}, "g_output": ["y_g"]}
        with httpx.Client(base_url=server.url, timeout=10) as client:
            for _ in range(3):  # keep-alive: one connection, several answers
                r = client.post("/v1/gradients/op", json=body)
                assert r.status_code == 200, r.text
                assert r.json()["g_input"] == ["x_grad"]

        with socket.create_connection(addr, timeout=5) as s:  # an oversized head
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            filler = b"X-Filler: " + b"a" * 1000 + b"\r\n"
            sent = 0
            try:
                while sent <= MAX_HEADER_BYTES + 8 * len(filler):
                    s.sendall(filler)
                    sent += len(filler)
            except OSError:
                pass  # the server may close while we still send
            answer = _read_all(s, 5.0)
        assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
        assert answer.endswith(b"<closed>")

        with socket.create_connection(addr, timeout=5) as s:  # a head that never completes
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            started = time.monotonic()
            answer = _read_all(s, HEADER_TIMEOUT_S + 10)
            waited = time.monotonic() - started
        assert answer == b"<closed>"
        assert HEADER_TIMEOUT_S - 0.5 <= waited <= HEADER_TIMEOUT_S + 5

        assert httpx.get(server.url + "/healthz", timeout=5).status_code == 200
