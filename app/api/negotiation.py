"""Content negotiation and bounded body reading.

Requests: ``Content-Type`` picks the decoder - ``application/json`` (UTF-8) or binary protobuf
(``application/protobuf`` or ``application/x-protobuf``); anything else is 415.
Responses: ``Accept`` picks JSON (the default, also for ``*/*`` or no header) or binary
protobuf; an ``Accept`` that allows neither is 406. Errors are always
``application/problem+json``.

The body is read in chunks and refused with 413 as soon as it passes ``max_body_bytes``; a
``Content-Length`` above the limit is refused before reading anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from app.errors import ProblemError
from core.errors import DecodeError, LimitExceededError


class Media(StrEnum):
    """The two body encodings of the API."""

    JSON = "application/json"
    PROTOBUF = "application/protobuf"


PROTOBUF_TYPES = ("application/protobuf", "application/x-protobuf")
JSON_TYPES = ("application/json",)


@dataclass(frozen=True)
class Body:
    """A request body with its decoded media type and the negotiated response type.

    Attributes:
        data: the raw bytes (at most ``max_body_bytes``).
        media: encoding of ``data``.
        accept: encoding of the response.
        accept_type: the exact response Content-Type (echoes ``application/x-protobuf``).
    """

    data: bytes
    media: Media
    accept: Media
    accept_type: str


def _media_type(header: str) -> str:
    return header.split(";", 1)[0].strip().lower()


def _charset(content_type: str) -> str | None:
    """The ``charset`` parameter of a Content-Type header, lower-cased, or ``None``."""
    for param in content_type.split(";")[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset":
            return value.strip().strip('"').lower()
    return None


def request_media(content_type: str | None) -> Media:
    """Decoder for a ``Content-Type`` header.

    Raises:
        ProblemError: 415 for a missing or unsupported type.
    """
    mt = _media_type(content_type or "")
    if mt in JSON_TYPES:
        charset = _charset(content_type or "")
        if charset not in (None, "utf-8", "utf8"):
            raise ProblemError(
                415,
                "unsupported_media_type",
                f"JSON bodies must be UTF-8; charset={charset!r} is not supported",
            )
        return Media.JSON
    if mt in PROTOBUF_TYPES:
        return Media.PROTOBUF
    raise ProblemError(
        415,
        "unsupported_media_type",
        f"Content-Type {content_type or '(none)'!r} is not supported; send application/json, "
        "application/protobuf or application/x-protobuf",
    )


def response_media(accept: str | None) -> tuple[Media, str]:
    """Response encoding and exact Content-Type for an ``Accept`` header (JSON by default).

    The highest-q acceptable type wins; on a tie JSON is preferred. ``q=0`` excludes a type.

    Raises:
        ProblemError: 406 when neither JSON nor protobuf is acceptable.
    """
    if not accept or not accept.strip():
        return Media.JSON, Media.JSON.value
    best: tuple[float, int, Media, str] | None = None
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        mt = fields[0].lower()
        q = 1.0
        for f in fields[1:]:
            if f.lower().startswith("q="):
                try:
                    q = float(f[2:])
                except ValueError:
                    q = 0.0
        if q <= 0:
            continue
        if mt in JSON_TYPES or mt in ("*/*", "application/*"):
            cand = (q, 1, Media.JSON, Media.JSON.value)
        elif mt in PROTOBUF_TYPES:
            cand = (q, 0, Media.PROTOBUF, mt)
        else:
            continue
        if best is None or cand[:2] > best[:2]:
            best = cand
    if best is None:
        raise ProblemError(
            406,
            "not_acceptable",
            f"cannot answer with any of Accept: {accept!r}; accepted are application/json, "
            "application/protobuf and application/x-protobuf",
        )
    return best[2], best[3]


async def read_limited(request: Request, limit: int) -> bytes:
    """Read the body, refusing (413) a declared or actual length above ``limit`` bytes.

    Raises:
        LimitExceededError: code ``body_too_large``.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError as exc:
            raise DecodeError(f"invalid Content-Length header {declared!r}") from exc
        if size > limit:
            raise _too_large(limit, f"Content-Length {size}")
    chunks: list[bytes] = []
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise _too_large(limit, f"more than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(limit: int, what: str) -> LimitExceededError:
    return LimitExceededError.at(
        f"request body too large ({what}); the limit is {limit} bytes (NETGRAD_MAX_BODY_BYTES)",
        code="body_too_large",
    )


def parse_json(data: bytes) -> Any:
    """Decode a UTF-8 JSON body.

    Raises:
        DecodeError: the bytes are not UTF-8 or not JSON.
        LimitExceededError: the JSON nests deeper than the parser can follow.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError.at(
            f"JSON body is not valid UTF-8 (byte {exc.start}: {exc.reason}); names must be "
            "UTF-8 text",
            code="invalid_utf8",
        ) from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DecodeError.at(f"body is not valid JSON: {exc}", code="invalid_json") from exc
    except RecursionError as exc:
        raise LimitExceededError.at(
            "JSON body is nested too deeply to parse", code="nesting_too_deep"
        ) from exc


def json_bytes(obj: Any) -> bytes:
    """Compact, deterministic UTF-8 JSON (dict insertion order is kept)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def respond(body: Body, json_obj: Any, proto_bytes: bytes | None) -> Response:
    """Answer in the negotiated encoding: ``json_obj`` as JSON or ``proto_bytes`` as protobuf."""
    if body.accept is Media.PROTOBUF and proto_bytes is not None:
        return Response(proto_bytes, media_type=body.accept_type)
    return Response(json_bytes(json_obj), media_type=Media.JSON.value)
