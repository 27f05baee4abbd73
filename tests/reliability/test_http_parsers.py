"""Both HTTP parsers of ``netgrad serve`` keep the same guards (``NETGRAD_HTTP``).

httptools is the default (``auto``); h11 stays selectable. Against a live server on
127.0.0.1, for each: an ordinary request is answered; a request head that grows past
``app.server.MAX_HEADER_BYTES`` is refused (httptools: a 431 problem document; h11:
uvicorn's 400) and the connection closes; a connection that sends
no complete head is closed after ``NETGRAD_HEADER_TIMEOUT_S``; keep-alive requests after
the first are answered on the same connection.
"""

from __future__ import annotations

import json
import re
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
    """What the server sends until it closes (or resets) the connection, then ``<closed>``;
    or what it sent in ``seconds``."""
    s.settimeout(0.2)
    out = b""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            chunk = s.recv(65536)
        except TimeoutError:
            continue
        except OSError:  # reset: the server closed with our bytes still unread
            return out + b"<closed>"
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
        # httptools: a 431 problem document; h11: uvicorn's own 400
        assert answer.startswith(b"HTTP/1.1 431" if impl == "httptools" else b"HTTP/1.1 400"), (
            answer[:200])
        assert answer.endswith(b"<closed>")

        with socket.create_connection(addr, timeout=5) as s:  # a head that never completes
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            started = time.monotonic()
            answer = _read_all(s, HEADER_TIMEOUT_S + 10)
            waited = time.monotonic() - started
        assert answer == b"<closed>"
        assert HEADER_TIMEOUT_S - 0.5 <= waited <= HEADER_TIMEOUT_S + 5

        assert httpx.get(server.url + "/healthz", timeout=5).status_code == 200


def _statuses(answer: bytes) -> list[int]:
    """Status codes of the HTTP/1.1 answers in ``answer``, in order."""
    return [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", answer)]


@pytest.mark.parametrize("impl", ["httptools", "h11"])
def test_pipelined_and_early_answered_requests_are_not_taken_for_long_heads(impl: str) -> None:
    """Review findings F2, F3 and F1: a large body followed, in the same read, by the start
    of the next request's head; a body sent after the app already answered; a JSON number
    of 5 000 digits (a 400, never a 500)."""
    big = json.dumps({"net": {"name": "n" * 100_000, "op": [
        {"type": "Relu", "input": ["x"], "output": ["y"]}]}, "ys": ["y"]}).encode()
    post = (b"POST /v1/gradients/net HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(big)).encode() + b"\r\n\r\n" + big)
    with live({"NETGRAD_HTTP": impl}) as server:
        addr = _address(server.url)
        with socket.create_connection(addr, timeout=5) as s:
            s.sendall(post + b"GET /livez HTTP/1.1\r\nHost: x\r\n")
            time.sleep(0.5)
            s.sendall(b"\r\n")
            answer = _read_all(s, 3.0)
        assert _statuses(answer) == [200, 200], answer[:300]

        with socket.create_connection(addr, timeout=5) as s:  # answered before the body
            s.sendall(b"POST /no-such-route HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n")
            time.sleep(0.5)
            s.sendall(b"z" * 200_000 + b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = _read_all(s, 3.0)
        assert _statuses(answer) == [404, 200], answer[:300]

        huge = b'{"net": {"op": [{"type": "Relu", "input": ["x"], "output": ["y"], "arg": [' \
               b'{"name": "a", "i": ' + b"1" * 5000 + b'}]}]}, "ys": ["y"]}'
        with httpx.Client(base_url=server.url, timeout=10) as client:
            r = client.post("/v1/gradients/net", content=huge,
                            headers={"Content-Type": "application/json"})
            assert r.status_code == 400, r.text
            assert r.json()["errors"][0]["code"] == "invalid_json"
            assert client.get("/livez").status_code == 200  # the connection is still served


def test_httptools_counts_a_long_head_sent_in_one_piece() -> None:
    """With httptools the cap holds however the head arrives: 70 KB of headers in one send
    is a 400 (h11 only caps a head still incomplete after its buffer)."""
    with live({"NETGRAD_HTTP": "httptools"}) as server:
        head = b"GET /livez HTTP/1.1\r\nHost: x\r\n" + b"".join(
            b"X-F%d: " % k + b"a" * 990 + b"\r\n" for k in range(70)) + b"\r\n"
        with socket.create_connection(_address(server.url), timeout=5) as s:
            s.sendall(head)
            answer = _read_all(s, 5.0)
        assert _statuses(answer) == [431], answer[:200]
        assert b"application/problem+json" in answer
        assert b"urn:netgrad:problem:request_head_too_large" in answer
        short = b"GET /livez HTTP/1.1\r\nHost: x\r\n" + b"X-F: " + b"a" * 60_000 + b"\r\n\r\n"
        with socket.create_connection(_address(server.url), timeout=5) as s:
            s.sendall(short)  # under the cap: answered
            assert _statuses(_read_all(s, 1.5)) == [200]
