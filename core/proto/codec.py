"""Load and dump Caffe2 messages as binary protobuf, JSON and protobuf text format.

JSON uses protobuf's own JSON mapping (``google.protobuf.json_format``) with proto field
names on output; lowerCamelCase names are accepted on input. One deliberate deviation:
``Argument.s`` and ``Argument.strings`` are UTF-8 *text* in JSON, not base64, because they
hold blob names and strings such as ``"NCHW"`` (the canonical base64 mapping would silently
turn a name like ``data`` into junk bytes). Bytes that are not valid UTF-8 cannot be shown
as JSON text; asking for such a message as JSON is a :class:`~core.errors.DecodeError`.

Text format accepts the legacy ``DeviceOption`` field name ``cuda_gpu_id`` (field 2,
renamed ``device_id`` later; spec §1.5).
"""

from __future__ import annotations

import base64
import re
import sys
from collections.abc import Iterator
from typing import Any, TypeVar

from google.protobuf import json_format, message, text_format

from api_schemas import caffe2_pb2
from core.errors import DecodeError, LimitExceededError
from core.proto.limits import WireTruncated, wire_fields

#: Deepest message nesting accepted from clients, in protobuf message levels. One level
#: of control-flow nesting costs three (OperatorDef.arg -> Argument.n -> NetDef.op), so
#: this admits well over the default ``max_depth`` of 64 sub-net levels; the finer,
#: configurable check runs on the decoded NetDef (``core.proto.limits``).
MAX_MESSAGE_DEPTH = 1000

M = TypeVar("M", bound=message.Message)

# json_format converts messages recursively, several Python frames per message level; 64
# levels of Do/If/While nesting (three messages each) need more than Python's default 1000
# frames. Python 3.11+ keeps Python-to-Python calls off the C stack, so this is safe.
_RECURSION_LIMIT = 5_000
if sys.getrecursionlimit() < _RECURSION_LIMIT:
    sys.setrecursionlimit(_RECURSION_LIMIT)

_ARGUMENT = caffe2_pb2.Argument.DESCRIPTOR.full_name
_BYTES_AS_TEXT = {"s", "strings"}
_LEGACY_GPU_ID = re.compile(r"(^|[\s{;,])cuda_gpu_id(\s*:)", re.MULTILINE)


def from_binary(data: bytes, cls: type[M]) -> M:
    """Parse a binary protobuf message.

    Raises:
        DecodeError: truncated or otherwise malformed bytes.
    """
    # Every nesting level costs at least two bytes, so short bodies cannot nest deeply
    # enough to matter; only longer ones are walked.
    short = len(data) <= 2 * MAX_MESSAGE_DEPTH
    if not short and wire_depth(data, cls.DESCRIPTOR, MAX_MESSAGE_DEPTH) > MAX_MESSAGE_DEPTH:
        raise LimitExceededError(
            f"{cls.DESCRIPTOR.name} is nested deeper than {MAX_MESSAGE_DEPTH} message levels"
        )
    msg = cls()
    try:
        msg.ParseFromString(data)
    except message.DecodeError as exc:
        raise DecodeError(f"invalid binary {cls.DESCRIPTOR.name}: {exc}") from exc
    _check_complete(msg)
    _check_utf8(msg)
    return msg


def _check_complete(msg: message.Message) -> None:
    """Refuse a message whose proto2 ``required`` fields are unset (it could not be sent on).

    Raises:
        DecodeError: naming every missing field.
    """
    if not msg.IsInitialized():
        missing = msg.FindInitializationErrors()  # type: ignore[attr-defined]
        raise DecodeError(
            f"{msg.DESCRIPTOR.name} is missing required fields: {', '.join(missing)}"
        )


_STRING = 9  # FieldDescriptor.TYPE_STRING


def _check_utf8(msg: message.Message) -> None:
    """Refuse string fields holding bytes that are not UTF-8 (proto2 does not check them).

    upb hands such values over as ``bytes``; blob names and op types must be text.

    Raises:
        DecodeError: naming the first offending field.
    """
    stack: list[tuple[message.Message, str]] = [(msg, msg.DESCRIPTOR.name)]
    while stack:
        cur, where = stack.pop()
        for field, value in cur.ListFields():
            here = f"{where}.{field.name}"
            if field.type == _STRING:
                values = value if field.is_repeated else [value]
                if any(isinstance(v, bytes) for v in values):
                    raise DecodeError(f"{here} holds bytes that are not valid UTF-8")
            elif field.message_type is not None:
                if field.is_repeated:
                    stack.extend((v, f"{here}[{k}]") for k, v in enumerate(value))
                else:
                    stack.append((value, here))


def to_binary(msg: message.Message) -> bytes:
    """Serialize to binary protobuf (deterministic: map-free schema, fields in number order)."""
    return msg.SerializeToString(deterministic=True)


def from_text(text: str, cls: type[M]) -> M:
    """Parse protobuf text format (``.pbtxt``), accepting ``cuda_gpu_id`` for ``device_id``.

    Raises:
        DecodeError: the text does not parse.
    """
    msg = cls()
    try:
        text_format.Parse(_LEGACY_GPU_ID.sub(r"\1device_id\2", text), msg)
    except text_format.ParseError as exc:
        raise DecodeError(f"invalid text-format {cls.DESCRIPTOR.name}: {exc}") from exc
    _check_complete(msg)
    return msg


def to_text(msg: message.Message) -> str:
    """Protobuf text format of ``msg``."""
    return text_format.MessageToString(msg)


def to_json_obj(msg: message.Message) -> dict[str, Any]:
    """JSON-ready dict with proto field names; Argument ``s``/``strings`` as UTF-8 text.

    Raises:
        DecodeError: an Argument string holds bytes that are not valid UTF-8.
    """
    obj = json_format.MessageToDict(msg, preserving_proto_field_name=True)
    _walk(obj, msg.DESCRIPTOR, _b64_to_text)
    return obj


def from_json_obj(obj: Any, cls: type[M]) -> M:
    """Build a message from a JSON-decoded object (proto or lowerCamelCase field names).

    Raises:
        DecodeError: unknown fields, wrong types, or a value that does not fit the schema.
    """
    if not isinstance(obj, dict):
        raise DecodeError(f"{cls.DESCRIPTOR.name} must be a JSON object")
    try:
        import copy

        if _json_depth(obj, MAX_MESSAGE_DEPTH * 2 + 2) > MAX_MESSAGE_DEPTH * 2:
            raise LimitExceededError(
                f"{cls.DESCRIPTOR.name} is nested deeper than {MAX_MESSAGE_DEPTH} message levels"
            )
        work = copy.deepcopy(obj)
        _walk(work, cls.DESCRIPTOR, _text_to_b64)
        msg = json_format.ParseDict(
            work, cls(), ignore_unknown_fields=False, max_recursion_depth=MAX_MESSAGE_DEPTH
        )
    except (json_format.ParseError, ValueError, TypeError, AttributeError, OverflowError) as exc:
        raise DecodeError(f"invalid JSON {cls.DESCRIPTOR.name}: {exc}") from exc
    _check_complete(msg)
    return msg


def _b64_to_text(value: str, where: str) -> str:
    raw = base64.b64decode(value)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(
            f"{where} holds bytes that are not UTF-8 and cannot be shown as JSON text; "
            "ask for application/protobuf instead"
        ) from exc


def _text_to_b64(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise DecodeError(f"{where} must be a JSON string (UTF-8 text), got {type(value).__name__}")
    return base64.b64encode(value.encode("utf-8")).decode("ascii")


def _walk(obj: Any, desc: Any, fix: Any, where: str = "") -> None:
    """Apply ``fix`` to every Argument ``s``/``strings`` value inside ``obj`` (in place)."""
    if not isinstance(obj, dict):
        return
    for key in list(obj):
        field = desc.fields_by_name.get(key) or desc.fields_by_camelcase_name.get(key)
        if field is None:
            continue
        val = obj[key]
        here = f"{where}.{field.name}" if where else field.name
        if desc.full_name == _ARGUMENT and field.name in _BYTES_AS_TEXT:
            if isinstance(val, list):
                obj[key] = [fix(v, here) for v in val]
            elif val is not None:
                obj[key] = fix(val, here)
            continue
        if field.message_type is not None:
            items = val if isinstance(val, list) else [val]
            for item in items:
                _walk(item, field.message_type, fix, here)


def _json_depth(obj: Any, cap: int) -> int:
    """Nesting depth of JSON containers (iterative; stops counting at ``cap``)."""
    deepest = 0
    stack = [(obj, 1)]
    while stack:
        cur, d = stack.pop()
        if d > deepest:
            deepest = d
            if deepest >= cap:
                return deepest
        if isinstance(cur, dict):
            stack.extend((v, d + 1) for v in cur.values() if isinstance(v, dict | list))
        elif isinstance(cur, list):
            stack.extend((v, d + 1) for v in cur if isinstance(v, dict | list))
    return deepest


def wire_depth(data: bytes, desc: Any, cap: int) -> int:
    """Deepest message nesting in binary protobuf ``data`` of message type ``desc``.

    Walks the wire format iteratively, following only fields the schema declares as
    messages, and stops as soon as ``cap`` is exceeded, so a hostile body cannot exhaust
    the C stack of the parser. Malformed bytes end the walk early; the real parser then
    reports them.
    """
    deepest = 1
    stack: list[tuple[Any, Iterator[tuple[int, int, int, int]]]] = [
        (desc, wire_fields(data, 0, len(data)))
    ]
    try:
        while stack:
            cur, fields = stack[-1]
            for number, wire, start, end in fields:
                field = cur.fields_by_number.get(number)
                if wire == 2 and field is not None and field.message_type is not None:
                    stack.append((field.message_type, wire_fields(data, start, end)))
                    deepest = max(deepest, len(stack))
                    if deepest > cap:
                        return deepest
                    break
            else:
                stack.pop()
    except WireTruncated:
        return deepest
    return deepest
