"""Content negotiation and bounded body reading.

Requests: ``Content-Type`` picks the decoder - ``application/json`` (UTF-8) or binary protobuf
(``application/protobuf`` or ``application/x-protobuf``); anything else is 415.
Responses: ``Accept`` picks JSON (the default, also for ``*/*`` or no header) or binary
protobuf; an ``Accept`` that allows neither is 406. Errors are always
``application/problem+json``.

The body is read in chunks (:func:`read_body`) and refused as soon as it passes
``max_body_bytes`` (413), or shows bytes that cannot be decoded (400); a ``Content-Length``
above the limit is refused before reading anything. Either way the rest is not read.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson
from fastapi import Request

from app.api.hints import refuse_other_media
from app.errors import ProblemError
from core.errors import DecodeError, LimitExceededError


class Media(StrEnum):
    """The two body encodings of the API."""

    JSON = "application/json"
    PROTOBUF = "application/protobuf"
    TEXT = "text/x-protobuf"


PROTOBUF_TYPES = ("application/protobuf", "application/x-protobuf")
JSON_TYPES = ("application/json",)
#: The message in protobuf text format (a ``.pbtxt`` body, or an answer ``Accept`` names).
TEXT_TYPES = ("text/x-protobuf", "text/x-pbtxt")


@dataclass(frozen=True)
class Body:
    """A request body with its decoded media type and the negotiated response type.

    Attributes:
        data: the raw bytes of a binary body (at most ``max_body_bytes``).
        media: encoding of ``data``.
        accept: encoding of the response.
        accept_type: the exact response Content-Type (echoes ``application/x-protobuf``).
        text: a JSON body, decoded from UTF-8 (its ``data`` is then empty); ``None`` for a
            binary body.
        accept_header, content_type: the request's ``Accept`` and ``Content-Type``
            headers, for an answer that cannot be JSON (:func:`protobuf_fallback`).
    """

    data: bytes
    media: Media
    accept: Media
    accept_type: str
    text: str | None = None
    accept_header: str | None = None
    content_type: str | None = None


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
    if mt in TEXT_TYPES:
        return Media.TEXT
    raise ProblemError(
        415,
        "unsupported_media_type",
        f"Content-Type {content_type or '(none)'!r} is not supported; send application/json "
        "(a JSON body), application/protobuf or application/x-protobuf (binary), or "
        "text/x-protobuf (a .pbtxt body: the request message in text format), e.g. "
        "curl -H 'Content-Type: application/json' --data @request.json",
    )


def check_content_encoding(encoding: str | None) -> None:
    """Refuse a compressed body: requests are read as they are (``identity`` only).

    Raises:
        ProblemError: 415 ``unsupported_media_type`` for any other ``Content-Encoding``.
    """
    codings = [c.strip().lower() for c in (encoding or "").split(",") if c.strip()]
    if any(c != "identity" for c in codings):
        raise ProblemError(
            415,
            "unsupported_media_type",
            f"Content-Encoding {encoding!r} is not supported; send identity (an uncompressed "
            "body, no Content-Encoding header)",
        )


def protobuf_fallback(accept: str | None, content_type: str | None = None) -> str | None:
    """The protobuf Content-Type an answer may fall back to when it cannot be JSON.

    Only an ``Accept`` header that names a protobuf type (binary or text format, or
    ``text/*``) with ``q > 0`` allows it: the one of highest ``q`` (the first on a tie), or
    the request's own Content-Type, ``content_type``, when it is of the same kind. Without
    ``Accept``, or with ``*/*``, an answer is JSON (the API's default).

    Returns:
        The Content-Type, or ``None``.
    """
    if not accept:
        return None
    best: tuple[float, str] | None = None  # (q, type): the highest q; on a tie the first
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
                q = min(q, 1.0) if q == q else 0.0  # (RFC 9110: 0..1; inf as 1, NaN as 0)
        if mt == "text/*":  # (text format is the text type the API answers in)
            mt = Media.TEXT.value
        if q > 0 and (mt in PROTOBUF_TYPES or mt in TEXT_TYPES) and (
                best is None or q > best[0]):
            best = (q, mt)
    if best is None:
        return None
    named = best[1]
    sent = _media_type(content_type) if content_type else None
    family = PROTOBUF_TYPES if named in PROTOBUF_TYPES else TEXT_TYPES
    return sent if sent in family else named


def json_only(accept: str | None) -> bool:
    """Whether ``accept`` names JSON and nothing else the API could answer in (no ``*/*``)."""
    if not accept:
        return False
    kinds = {p.split(";", 1)[0].strip().lower() for p in accept.split(",")}
    return not kinds & {"*/*", "application/*"}


def response_media(accept: str | None) -> tuple[Media, str]:
    """Response encoding and exact Content-Type for an ``Accept`` header (JSON by default).

    The highest-q acceptable type wins; on a tie JSON is preferred, then binary protobuf,
    then text format (``text/x-protobuf``, ``text/x-pbtxt``): ``*/*`` means JSON, ``text/*``
    text format. ``q=0`` excludes a type.

    Raises:
        ProblemError: 406 when neither JSON nor protobuf (binary or text) is acceptable.
    """
    if not accept or not accept.strip():
        return Media.JSON, Media.JSON.value
    named: dict[str, float] = {}  # media range -> q (the first mention of each counts)
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
                q = min(q, 1.0) if q == q else 0.0  # (RFC 9110: 0..1; inf as 1, NaN as 0)
        named.setdefault(mt, q)

    def quality(mt: str) -> float:
        # the most specific range decides (RFC 9110 §12.5.1): application/json;q=0 excludes
        # JSON even when */* is acceptable
        for rng in (mt, mt.split("/", 1)[0] + "/*", "*/*"):
            if rng in named:
                return named[rng]
        return 0.0

    best: tuple[float, int, Media, str] | None = None
    cands = [(quality(Media.JSON.value), 1, Media.JSON, Media.JSON.value)]
    explicit = [t for t in PROTOBUF_TYPES if t in named]
    for t in explicit or [Media.PROTOBUF.value]:
        cands.append((quality(t), 0, Media.PROTOBUF, t))
    # (text format last on a tie: */* means JSON, text/* alone text format)
    cands.extend((quality(t), -1, Media.TEXT, t) for t in TEXT_TYPES)
    for cand in cands:
        if cand[0] > 0 and (best is None or cand[:2] > best[:2]):
            best = cand
    if best is None:
        raise ProblemError(
            406,
            "not_acceptable",
            f"cannot answer with any of Accept: {accept!r}; accepted are application/json, "
            "application/protobuf, application/x-protobuf and text/x-protobuf (or "
            "text/x-pbtxt)",
        )
    return best[2], best[3]


def answer_body(accept: str | None, lenient: bool = False) -> Body:
    """The empty :class:`Body` of a ``GET``: only its answer's encoding, from ``Accept``.

    ``lenient`` (the health probes): an ``Accept`` that allows neither JSON nor protobuf
    gets JSON rather than a 406, so that a probe sending ``Accept: text/plain`` still sees
    the service up.

    Raises:
        ProblemError: 406 from :func:`response_media` (unless ``lenient``).
    """
    try:
        media, media_type = response_media(accept)
    except ProblemError:
        if not lenient:
            raise
        media, media_type = Media.JSON, Media.JSON.value
    return Body(b"", Media.JSON, media, media_type, None, accept)


async def read_body(
    request: Request, limit: int, media: Media, message: Any = None,
    watch: Callable[[bytes], None] | None = None, text_limit: bool = False,
    ended: Callable[[], None] | None = None,
) -> tuple[bytes, str | None]:
    """Read the body as it streams in: ``(bytes, None)`` for binary bodies, ``(b"", text)``
    for JSON ones (decoded from UTF-8 chunk by chunk; the bytes are not kept).

    Refuses as soon as the part read so far shows the body cannot be served: a declared or
    actual length above ``limit`` bytes (413), JSON bytes that are not UTF-8, binary bytes
    that do not start like a protobuf message, or whose first chunk cuts a string field
    whose start is not UTF-8 (400; ``message`` is the descriptor of the request message).
    The rest of such a body is not read:
    the answer asks to close the connection (``request.state.close_connection``), so a
    64 MiB hostile body costs the server one chunk, not 64 MiB of parsing. ``watch`` sees
    every chunk as it arrives and may refuse the body the same way (admission control and
    the streaming op count, :mod:`app.api.admission`). ``text_limit``: ``limit`` is the
    text-format one (``NETGRAD_MAX_TEXT_BODY_BYTES``), and the 413 says so. ``ended`` is
    called once the last chunk has been seen, before the chunks are joined (the streaming
    scan drops what it kept: one copy of the body less at the peak).

    Raises:
        LimitExceededError: code ``body_too_large``.
        DecodeError: code ``invalid_utf8`` (JSON) or ``decode_error`` (binary).
    """
    declared = request.headers.get("content-length")
    size: int | None = None
    if declared is not None:
        try:
            size = int(declared)
        except ValueError as exc:
            raise DecodeError(f"invalid Content-Length header {declared!r}") from exc
        if size > limit:
            request.state.close_connection = True
            raise _too_large(limit, f"Content-Length {size}", text_limit)
    text_body = media is Media.JSON or media is Media.TEXT
    decoder = codecs.getincrementaldecoder("utf-8")() if text_body else None
    chunks: list[bytes] = []
    texts: list[str] = []
    total = 0
    try:
        async for chunk in request.stream():
            if not chunk:
                continue
            total += len(chunk)
            if total > limit:
                raise _too_large(limit, f"more than {limit} bytes", text_limit)
            if watch is not None:
                watch(chunk)
            if decoder is None and not chunks:
                try:
                    _check_binary_start(chunk, size)
                except DecodeError as exc:
                    refuse_other_media(chunk, exc)
                    raise
                if message is not None and size is not None and size > len(chunk):
                    _check_cut_string(chunk, message)
            if decoder is None:
                chunks.append(chunk)
                continue
            # (bytes of a character the last chunk cut, held by the decoder: the error's
            # offsets count from them)
            held = len(decoder.getstate()[0])
            try:
                texts.append(decoder.decode(chunk))
            except UnicodeDecodeError as exc:
                err = _not_utf8(total - len(chunk) - held + exc.start, exc.reason, media,
                                _bad_byte_place(texts, exc, media, message))
                if not texts and message is not None:
                    from app.api.hints import binary_as_json_hint, join_hint

                    hint = binary_as_json_hint(chunk, message)
                    if hint is not None:
                        err = DecodeError.at(join_hint(err.message, hint), code="invalid_utf8")
                raise err from exc
        if ended is not None:
            ended()
        if decoder is not None:
            held = len(decoder.getstate()[0])
            try:
                texts.append(decoder.decode(b"", final=True))
            except UnicodeDecodeError as exc:
                raise _not_utf8(total - held + exc.start, exc.reason, media,
                                _bad_byte_place(texts, exc, media, message)) from exc
    except (LimitExceededError, DecodeError):
        if size is None or total < size:  # unread bytes left: do not read them
            request.state.close_connection = True
        raise
    if decoder is not None:
        return b"", "".join(texts)
    return (chunks[0] if len(chunks) == 1 else b"".join(chunks)), None


def _bad_byte_place(texts: list[str], exc: UnicodeDecodeError, media: Media,
                    message: Any = None) -> tuple[str | None, int | None, str | None]:
    """Where a byte that is not UTF-8 stands in a JSON or text-format body of ``message`` (a
    descriptor): :func:`app.api.bodypaths.bad_byte_place` of the text decoded so far."""
    from app.api.bodypaths import bad_byte_place

    if media is Media.PROTOBUF:
        return None, None, None
    from google.protobuf import message_factory

    cls = message_factory.GetMessageClass(message) if message is not None else None
    return bad_byte_place("".join(texts), exc, cls, text_format=media is Media.TEXT)


def _not_utf8(
    position: int, reason: str, media: Media = Media.JSON,
    place: tuple[str | None, int | None, str | None] = (None, None, None),
) -> DecodeError:
    what = "text-format (text/x-protobuf) body" if media is Media.TEXT else "JSON body"
    path, op_index, op_type = place
    where = f" in {path}" if path else ""
    return DecodeError.at(
        f"{what} is not valid UTF-8 (byte {position}{where}: {reason}); names must be UTF-8 "
        "text", code="invalid_utf8", path=path, op_index=op_index, op_type=op_type,
    )


def _varint(data: bytes, pos: int) -> tuple[int, int] | None:
    """``(value, next position)``, or ``None`` when ``data`` ends inside the varint."""
    value = shift = 0
    while pos < len(data):
        b = data[pos]
        value |= (b & 0x7F) << shift
        pos += 1
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise DecodeError("invalid binary protobuf body: malformed varint at the start")
    return None


def _check_binary_start(chunk: bytes, size: int | None) -> None:
    """Refuse a binary body whose first field no protobuf parser would accept.

    Only what is certain from the first bytes: a malformed tag, field number 0 or above
    2^29 - 1, wire type 6 or 7, or a first length-delimited field longer than the body.
    """
    tag = _varint(chunk, 0)
    if tag is None:
        return
    value, pos = tag
    number, wire = value >> 3, value & 7
    if number == 0 or number >= 1 << 29 or wire in (6, 7):
        raise DecodeError(f"invalid binary protobuf body: field {number}, wire type {wire} "
                          "at the start")
    if wire == 2 and size is not None:
        length = _varint(chunk, pos)
        if length is not None and length[1] + length[0] > size:
            raise DecodeError("invalid binary protobuf body: the first field is longer than "
                              "the body (truncated)")


def _check_cut_string(chunk: bytes, desc: Any) -> None:
    """Refuse a first chunk that cuts a string field whose bytes so far are not UTF-8.

    Follows the field that runs past the end of the chunk, level by level (complete fields
    are checked once the message is parsed); gives up after a few hundred fields.
    """
    data, path, pos = chunk, desc.name, 0
    for _ in range(256):
        tag = _varint(data, pos)
        if tag is None:
            return
        number, wire = tag[0] >> 3, tag[0] & 7
        pos = tag[1]
        if wire in (1, 5):
            pos += 8 if wire == 1 else 4
            continue
        head = _varint(data, pos) if wire in (0, 2) else None
        if head is None:
            return
        pos = head[1]
        if wire == 0:
            continue
        if pos + head[0] <= len(data):  # complete: checked once parsed
            pos += head[0]
            continue
        field = desc.fields_by_number.get(number)
        if field is None:
            return
        path += f".{field.name}"
        if field.message_type is None:
            if field.type == field.TYPE_STRING:
                try:
                    codecs.getincrementaldecoder("utf-8")().decode(data[pos:])
                except UnicodeDecodeError as exc:
                    raise DecodeError.at(f"{path} holds bytes that are not valid UTF-8",
                                         path=path.partition(".")[2],
                                         code="invalid_utf8") from exc
            return
        desc, data, pos = field.message_type, data[pos:], 0


def _too_large(limit: int, what: str, text: bool = False) -> LimitExceededError:
    if text:
        return LimitExceededError.at(
            f"text-format body too large ({what}); the limit for protobuf text format is "
            f"{limit} bytes (NETGRAD_MAX_TEXT_BODY_BYTES), since its parser is pure Python: "
            "send a body this large as binary protobuf (application/x-protobuf) or JSON",
            code="body_too_large")
    return LimitExceededError.at(
        f"request body too large ({what}); the limit is {limit} bytes (NETGRAD_MAX_BODY_BYTES)",
        code="body_too_large",
    )


#: Answers whose binary form is larger go to ``json.dumps``: orjson reserves about 260
#: bytes of address space per list element while it writes (8 M integers: 2.1 GB), and a
#: failed reservation crashes the process instead of raising ``MemoryError``.
ORJSON_MAX_BYTES = 1024 * 1024


def json_bytes(obj: Any, size_hint: int = 0) -> bytes:
    """Compact, deterministic UTF-8 JSON (dict insertion order is kept), by orjson.

    ``obj`` is built from messages: it may share dicts but never holds a cycle, and its
    floats are finite (the encoders write non-finite ones as the strings "NaN",
    "Infinity", "-Infinity", as protobuf's JSON mapping does). orjson writes in C what
    ``json.dumps`` writes in 0.36 ms for ResNet-50's answer in 0.03 ms; numbers may be
    spelled differently (``1e-05`` as ``0.00001``), never valued differently. What orjson
    does not write - nesting deeper than its fixed limit of 255 levels (sub-nets inside
    sub-nets), integers beyond 64 bits - ``json.dumps`` writes, with the same separators;
    the same ``obj`` always takes the same way, so answers stay byte-identical.

    ``size_hint``: the binary size of the message ``obj`` was printed from (its
    ``ByteSize()``); above :data:`ORJSON_MAX_BYTES` ``json.dumps`` writes it.

    Raises:
        ValueError: a non-finite float reached ``json.dumps``.
        MemoryError: from ``json.dumps``, for an answer too large to write.
    """
    if size_hint <= ORJSON_MAX_BYTES:
        try:
            return orjson.dumps(obj)
        except TypeError:
            pass
    return json.dumps(obj, ensure_ascii=False, check_circular=False, separators=(",", ":"),
                      allow_nan=False).encode()
