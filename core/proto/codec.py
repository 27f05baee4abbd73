"""Load and dump Caffe2 (and netgrad) messages as binary protobuf, JSON and text format.

JSON is protobuf's JSON mapping with ``Argument.s``/``strings`` as UTF-8 text
(:mod:`core.proto.jsonmap`). Binary bytes are parsed by upb and checked without a Python
walk over them (:func:`decode_binary`): UTF-8 and the presence of sub-nets by the checking
twin of the message type (:mod:`core.proto.twin`), nesting by upb's own depth limit on a
thread whose stack holds it (:mod:`core.proto.stack`).

Text format accepts the legacy ``DeviceOption`` field name ``cuda_gpu_id`` (field 2,
renamed ``device_id`` later; spec §1.5).
"""

from __future__ import annotations

import re
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from google.protobuf import message, text_format

from core.errors import DecodeError, LimitExceededError
from core.proto import jsonmap, limits, stack, textproblems, twin

M = TypeVar("M", bound=message.Message)

#: Deepest message nesting the reference JSON parser follows (see ``core.proto.jsonmap``).
MAX_MESSAGE_DEPTH = jsonmap.MAX_MESSAGE_DEPTH

# json_format and the depth checks recurse a few Python frames per message level; 150
# levels of sub-nets (three messages each) need more than Python's default 1000 frames.
# Python 3.11+ keeps Python-to-Python calls off the C stack, so this is safe.
_RECURSION_LIMIT = 5_000
if sys.getrecursionlimit() < _RECURSION_LIMIT:
    sys.setrecursionlimit(_RECURSION_LIMIT)

_LEGACY_GPU_ID = re.compile(r"(^|[\s{;,])cuda_gpu_id(\s*:)", re.MULTILINE)
_STRING = 9  # FieldDescriptor.TYPE_STRING


@dataclass
class Decoded(Generic[M]):
    """A parsed and checked binary message.

    Attributes:
        msg: the message.
        nested: it may hold sub-nets (``Argument.n``/``nets``): check their depth.
    """

    msg: M
    nested: bool


def decode_binary(data: bytes, cls: type[M], max_ops: int | None = None) -> Decoded[M]:
    """Parse untrusted binary protobuf: well-formed, UTF-8 strings, required fields set.

    Parsing happens on a thread deep enough for upb's nesting limit (65 535 messages);
    deeper bytes are a decode error. ``max_ops``: refuse more top-level ops than this right
    after parsing, before any check that walks the message
    (:func:`core.proto.limits.check_op_count`).

    Raises:
        DecodeError: malformed or too deeply nested bytes, a string field that is not UTF-8
            (named), unset required fields (named), fields the schema does not define
            (code ``unknown_field``, each named).
        LimitExceededError: ``too_many_ops``.
    """
    return stack.call_deep(len(data), _decode, data, cls, max_ops)


def _decode(data: bytes, cls: type[M], max_ops: int | None = None) -> Decoded[M]:
    msg = cls()
    try:
        msg.ParseFromString(data)
    except message.DecodeError as exc:
        raise DecodeError(f"invalid binary {cls.DESCRIPTOR.name}: {exc}") from exc
    if max_ops is not None:
        limits.check_op_count(msg, max_ops)
    checker = twin.twin(cls)()
    try:
        checker.ParseFromString(data)
    except message.DecodeError as exc:  # the message parsed: a string is not UTF-8
        _check_utf8(msg)
        raise DecodeError(f"invalid binary {cls.DESCRIPTOR.name}: {exc}") from exc
    flat = checker.IsInitialized()
    if not flat:
        _check_complete(msg)
    # Unknown fields re-encode byte for byte, so only they make the two sizes differ; the
    # body's own length would not do (a packed field can save what an unknown one costs).
    kept = msg.ByteSize()
    msg.DiscardUnknownFields()
    if msg.ByteSize() != kept:
        probe = cls()
        probe.ParseFromString(data)
        _refuse_unknown(probe)
    return Decoded(msg, nested=not flat)


def from_binary(data: bytes, cls: type[M]) -> M:
    """Parse a binary protobuf message (see :func:`decode_binary`).

    Raises:
        DecodeError: malformed bytes, bad UTF-8, unset required fields.
    """
    return decode_binary(data, cls).msg


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


#: Most unknown fields one problem list names.
_MAX_UNKNOWN_LISTED = 100
_WIRE_TYPES = {0: "varint", 1: "64-bit", 2: "length-delimited", 3: "group", 5: "32-bit"}


def _refuse_unknown(msg: message.Message) -> None:
    """Refuse a binary message holding fields its schema does not define, naming each.

    JSON bodies refuse unknown keys; a binary body kept them silently (upb keeps unknown
    fields; walkthrough, stop 21), so a field of a newer schema, an argument value among
    them, was dropped without a word. A walk over the message, only when discarding its
    unknown fields changed its encoded size.

    Raises:
        DecodeError: code ``unknown_field``, one problem per unknown field number and place
            (``net.op[3].#103``), at most :data:`_MAX_UNKNOWN_LISTED`.
    """
    from google.protobuf.unknown_fields import UnknownFieldSet

    from core.types import Diagnostic

    problems: list[Diagnostic] = []
    todo: deque[tuple[message.Message, str]] = deque([(msg, "")])
    while todo and len(problems) < _MAX_UNKNOWN_LISTED:
        cur, where = todo.popleft()
        seen: set[int] = set()
        for entry in UnknownFieldSet(cur):  # type: ignore[attr-defined]
            number = entry.field_number
            if number in seen:
                continue
            if len(problems) >= _MAX_UNKNOWN_LISTED:
                break
            seen.add(number)
            kind = _WIRE_TYPES.get(entry.wire_type, f"wire type {entry.wire_type}")
            known = cur.DESCRIPTOR.fields_by_number.get(number)
            if known is not None:  # upb keeps a field of the wrong wire type as unknown
                at = f"{where}.{known.name}" if where else known.name
                problems.append(Diagnostic(
                    "error", "invalid_field",
                    f"{at}: field {number} of {cur.DESCRIPTOR.full_name} is sent as "
                    f"{kind}, which is not its wire type, so it would be ignored; the "
                    "client's .proto differs from netgrad's: use api_schemas/netgrad.proto "
                    "and caffe2.proto", path=at))
                continue
            at = f"{where}.#{number}" if where else f"#{number}"
            fields = ", ".join(f"{f.name} = {f.number}" for f in cur.DESCRIPTOR.fields)
            problems.append(Diagnostic(
                "error", "unknown_field",
                f"{at}: field number {number} ({kind}) is not a field of "
                f"{cur.DESCRIPTOR.full_name} (its fields: {fields}); the client's .proto "
                "differs from netgrad's: use api_schemas/netgrad.proto and caffe2.proto",
                path=at))
        for field, value in cur.ListFields():
            if field.message_type is None:
                continue
            here = f"{where}.{field.name}" if where else field.name
            if field.is_repeated:
                todo.extend((v, f"{here}[{k}]") for k, v in enumerate(value))
            else:
                todo.append((value, here))
    if not problems:  # (the sizes differ only when some field is unknown)
        return
    head = problems[0].message if len(problems) == 1 else (
        f"{len(problems)} fields the schema does not define; the first: "
        f"{problems[0].message}")
    raise DecodeError(head, problems)


def _check_utf8(msg: message.Message) -> None:
    """Name the first string field holding bytes that are not UTF-8 (upb hands them over
    as ``bytes``), and the innermost OperatorDef it sits in (its index in its list, 0 for
    a single op; its type unless that is the bad string). Only runs once the twin has found
    one, to say where.

    "First" in field order, depth first: a message's own strings (by field number), then its
    messages in order (``net.op[2]`` before ``net.op[5]``, the net before ``ys``), which is
    body order for every encoder that writes fields in number order.

    Raises:
        DecodeError: naming the offending field.
    """
    # (message, path, innermost op's (index, type) or None)
    stack_: list[tuple[message.Message, str, tuple[int, str | None] | None]] = [(msg, "", None)]
    while stack_:
        cur, where, op = stack_.pop()
        children: list[tuple[message.Message, str, tuple[int, str | None] | None]] = []
        for field, value in cur.ListFields():
            here = f"{where}.{field.name}" if where else field.name
            if field.type == _STRING:
                values = value if field.is_repeated else [value]
                for k, v in enumerate(values):
                    if isinstance(v, bytes):
                        at = f"{here}[{k}]" if field.is_repeated else here
                        raise DecodeError.at(
                            f"{msg.DESCRIPTOR.name} field {at} holds bytes that are not valid "
                            "UTF-8", path=at, code="invalid_utf8",  # (as in JSON and text)
                            op_index=op[0] if op else None, op_type=op[1] if op else None)
            elif field.message_type is not None:
                is_op = field.message_type.full_name == "caffe2.OperatorDef"
                if not field.is_repeated:
                    t = value.type if is_op else None
                    children.append((value, here, (0, t if isinstance(t, str) and t else None)
                                     if is_op else op))
                    continue
                # A long list is bisected in C; a short one is walked (bisecting every level
                # of a deep chain of sub-nets would copy its subtree once per level).
                found = (range(len(value)) if len(value) <= _SCAN_ITEMS else
                         [j for j in [_first_bad_item(cur, field.name)] if j is not None])
                for j in found:  # (before a bad one all are clean; those after come later)
                    v = value[j]
                    t = v.type if is_op else None
                    children.append((v, f"{here}[{j}]", (j, t if isinstance(t, str) and t
                                                         else None) if is_op else op))
        stack_.extend(reversed(children))  # (popped in order)


#: A repeated message field of at most this many items is searched item by item.
_SCAN_ITEMS = 16


def _first_bad_item(parent: message.Message, name: str) -> int | None:
    """The index of the first item of repeated message field ``name`` of ``parent`` whose
    strings are not all UTF-8, or ``None``.

    Bisection in C: a copy of ``parent`` holding only that field is parsed by its checking
    twin, then cut to the half holding the first bad item (``del`` of a slice), and so on;
    about two copies of the items in all, not a Python walk over every op of a big net.
    """
    checker = twin.twin(type(parent))

    def bad(m: message.Message) -> bool:
        try:
            checker().ParseFromString(m.SerializePartialToString())
        except message.DecodeError:
            return True
        return False

    probe = type(parent)()
    probe.CopyFrom(parent)  # (in C; extending the field from `items` builds a wrapper each)
    for f, _ in probe.ListFields():
        if f.name != name:
            probe.ClearField(f.name)
    if not bad(probe):
        return None
    offset = 0
    while len(getattr(probe, name)) > _SCAN_ITEMS:  # the first bad item is in probe
        mid = len(getattr(probe, name)) // 2
        head = type(parent)()
        head.CopyFrom(probe)
        del getattr(head, name)[mid:]
        if bad(head):
            probe = head
        else:
            del getattr(probe, name)[:mid]
            offset += mid
    left = getattr(probe, name)
    for j in range(len(left)):
        one = type(parent)()
        getattr(one, name).add().CopyFrom(left[j])
        if bad(one):
            return offset + j
    return None  # pragma: no cover - some item of a bad probe is bad


def to_binary(msg: message.Message) -> bytes:
    """Serialize to binary protobuf (deterministic: map-free schema, fields in number order)."""
    return msg.SerializeToString(deterministic=True)


def from_text(text: str, cls: type[M], *, locate: bool = True) -> M:
    """Parse protobuf text format (``.pbtxt``), accepting ``cuda_gpu_id`` for ``device_id``.

    ``locate=False`` skips naming the problem's field path and op, and listing the other
    unknown fields (:func:`core.proto.textproblems.text_problem`): for probes whose problem
    nobody reads (is the body perhaps another message?).

    Raises:
        DecodeError: the text does not parse, or nests too deeply for the parser.
    """
    msg = cls()
    parsed = _LEGACY_GPU_ID.sub(r"\1device_id\2", text)
    try:
        text_format.Parse(parsed, msg)
    except text_format.ParseError as exc:  # (located in the text the parser read)
        raise textproblems.text_problem(exc, cls, parsed if locate else "") from exc
    except RecursionError as exc:  # the pure-Python text parser recurses per nesting level
        raise LimitExceededError.at(
            f"text-format {cls.DESCRIPTOR.name} is nested too deeply for the text parser "
            "(about 1,000 levels); send it as binary protobuf", code="nesting_too_deep"
        ) from exc
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
    return jsonmap.to_json(msg)


def from_json_obj(
    obj: Any,
    cls: type[M],
    *,
    owned: bool = False,
    check_nested: Callable[[Any], None] | None = None,
) -> M:
    """Build a message from a JSON-decoded object (proto or lowerCamelCase field names).

    ``owned`` and ``check_nested``: see :func:`core.proto.jsonmap.from_json`.

    Raises:
        DecodeError: unknown fields, wrong types, a value that does not fit the schema, or
            unset required fields.
    """
    msg = jsonmap.from_json(obj, cls, owned=owned, check_nested=check_nested)
    _check_complete(msg)
    return msg
