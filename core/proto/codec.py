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
from core.proto import jsonmap, limits, stack, twin

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

    ``locate=False`` skips naming the problem's field path and op (:func:`_text_location`):
    for probes whose problem nobody reads (is the body perhaps another message?).

    Raises:
        DecodeError: the text does not parse, or nests too deeply for the parser.
    """
    msg = cls()
    parsed = _LEGACY_GPU_ID.sub(r"\1device_id\2", text)
    try:
        text_format.Parse(parsed, msg)
    except text_format.ParseError as exc:  # (located in the text the parser read)
        raise _text_problem(exc, cls, parsed if locate else "") from exc
    except RecursionError as exc:  # the pure-Python text parser recurses per nesting level
        raise LimitExceededError.at(
            f"text-format {cls.DESCRIPTOR.name} is nested too deeply for the text parser "
            "(about 1,000 levels); send it as binary protobuf", code="nesting_too_deep"
        ) from exc
    _check_complete(msg)
    return msg


#: Longest parser message a text-format problem repeats (the parser quotes whole tokens:
#: a 64 MiB line came back twice in a 147 MB answer; walkthrough, stop 21).
MAX_TEXT_ERROR_CHARS = 300
_NO_FIELD = re.compile(r'Message type "?(?P<type>[\w.]+)"? has no field named "?(?P<name>\w+)"?')


def _text_problem(exc: text_format.ParseError, cls: type[message.Message],
                  source: str = "") -> DecodeError:
    """A text-format parse error as a short problem: the parser's ``line:column`` and reason
    (cut to :data:`MAX_TEXT_ERROR_CHARS`), code ``unknown_field`` for an unknown name, and
    the field path, op index and op type where it is (:func:`_text_location`)."""
    text = str(exc)
    if len(text) > MAX_TEXT_ERROR_CHARS:
        text = text[:MAX_TEXT_ERROR_CHARS] + f"... ({len(text):,} characters in all)"
    found = _NO_FIELD.search(text)
    code = "unknown_field" if found else "invalid_field"
    msg = f"invalid text-format {cls.DESCRIPTOR.name}: {text}"
    if found:
        msg += f" (a field of {found['type']} is misspelt, or the client's schema differs)"
        close, _ = jsonmap.nearest_field(cls, found["type"], found["name"])
        if close is not None:
            msg += f"; did you mean {close!r}?"
    line, column = exc.GetLine(), exc.GetColumn()
    path, op_index, op_type = (_text_location(source, cls, line, column)
                               if source and line and column else (None, None, None))
    if found and close is None:
        msg += _misplaced_hint(cls, found["type"], found["name"], path)
    if found and path is not None:  # (the path names the unknown key, as JSON's does)
        path = f"{path}.{found['name']}" if path else found["name"]
    if text.endswith('Expected "{".') and source and line and column and path is not None:
        field, example = _scalar_for_message(source, cls, line, column, top=not path)
        if field is not None:
            msg = msg.rstrip(".") + f"; {field} holds a message, not a bare value: write {example}"
            path = f"{path}.{field}" if path else field
    path = path or None  # ("": the top level; None: not found)
    return DecodeError.at(msg, code=code, path=path, op_index=op_index, op_type=op_type)


def _misplaced_hint(cls: type[message.Message], type_name: str, name: str,
                    path: str | None) -> str:
    """``; ...`` for a text-format field written one level off: a field of a singular
    message field of ``type_name`` (top-level ``inputs`` of a VerifyRequest belongs in
    ``verify { }``), or a top-level field of ``cls`` written inside one of its messages
    (``verify { ys: ... }``); ``""`` when ``name`` is neither. ``path``: where the unknown key
    sits (``""`` at the top level, as :func:`_text_location` gives it)."""
    try:
        desc = cls.DESCRIPTOR.file.pool.FindMessageTypeByName(type_name)
    except KeyError:
        return ""
    for f in desc.fields:
        if (f.message_type is not None and not f.is_repeated
                and name in f.message_type.fields_by_name):
            inner = f.message_type.fields_by_name[name]
            value = "{ ... }" if inner.message_type is not None else ": ..."
            return (f"; {name} is a field of {f.message_type.name}: in text format and binary "
                    f"it sits inside {f.name} {{ }}, e.g. {f.name} {{ {name} {value} }}")
    top = cls.DESCRIPTOR
    if path and "." not in path and "[" not in path and name in top.fields_by_name:
        return (f"; {name} is a field of {top.name} itself: move it out of {path} {{ }} to the "
                "top level")
    return ""


#: How a top-level message field of a request is written in text format.
_TEXT_EXAMPLES = {
    "ys": 'ys { blob: "y" } for each y (an all-ones seed), or '
          'ys { blob: "y" gradient { dense: "y_grad" } }',
    "g_output": 'g_output { dense: "y_grad" } for each output of the op, in order '
                "(g_output { } for an output without a gradient)",
    "gradient": 'gradient { dense: "y_grad" } (or gradient { slice { indices: "i" values: '
                '"v" } })',
}


def _scalar_for_message(text: str, cls: type[message.Message], line: int, column: int,
                        top: bool = True) -> tuple[str | None, str]:
    """The message field given a bare value at ``line:column`` (the parser expected ``{``),
    e.g. ``ys: "y"``, and how to write it instead: a top-level field of ``cls`` (``top``), or
    deeper down one of :data:`_TEXT_EXAMPLES` (``ys { gradient: "g" }``)."""
    lines = text.split("\n")
    before = lines[line - 1][:column - 1] if 0 < line <= len(lines) else ""
    m = re.search(r"(\w+)\s*:?\s*\[?\s*\Z", before)  # (also the list form, ys: ["y"])
    if m is not None and not top:
        return (m[1], _TEXT_EXAMPLES[m[1]]) if m[1] in _TEXT_EXAMPLES else (None, "")
    f = cls.DESCRIPTOR.fields_by_name.get(m[1]) if m else None
    if f is None or f.message_type is None:
        return None, ""
    return f.name, _TEXT_EXAMPLES.get(f.name, f"{f.name} {{ ... }} ({f.message_type.name})")


def _type_after(tok: text_format.Tokenizer) -> str | None:
    """The ``type: "..."`` given later in the OperatorDef ``tok`` is in (same depth), if any
    (within :data:`MAX_TYPE_TOKENS` tokens)."""
    depth, prev = 0, ""
    for _ in range(MAX_TYPE_TOKENS):
        if tok.AtEnd():
            return None
        t = tok.token
        if t in ("{", "<"):
            depth += 1
        elif t in ("}", ">"):
            depth -= 1
            if depth < 0:
                return None
        elif depth == 0 and prev == "type" and t == ":":
            tok.NextToken()
            try:  # (a bad string after the problem: no type, but keep the location)
                return tok.ConsumeString() if tok.token[:1] in ('"', "'") else None
            except text_format.ParseError:
                return None
        prev = t
        tok.NextToken()
    return None


#: Most tokens :func:`_type_after` reads past the problem, looking for the op's ``type``.
MAX_TYPE_TOKENS = 10_000


#: Most tokens :func:`_text_location` reads, then it gives up (about 0.6 s of CPU here: the
#: error path costs at most about what parsing the text did).
MAX_LOCATE_TOKENS = 100_000


def _text_location(text: str, cls: type[message.Message], line: int, column: int
                   ) -> tuple[str | None, int | None, str | None]:
    """The field path, and the innermost OperatorDef's index and type, at ``line:column``
    (1-based, as :class:`text_format.ParseError` gives them) of a text-format ``cls``.

    Reads protobuf's own tokens up to that place, keeping the open messages: for each, its
    field (the descriptor says whether it repeats) and, for an OperatorDef, the ``type``
    given before the place. The path is ``""`` at the top level; ``(None, None, None)`` where
    the text cannot be followed (more than :data:`MAX_LOCATE_TOKENS` tokens, or a token the
    tokenizer refuses).
    """
    # (descriptor, path, counts of repeated fields seen, op index or None, op type or None,
    # the field of an open ``[...]`` list)
    frames: list[list[Any]] = [[cls.DESCRIPTOR, "", {}, None, None, None]]
    where = (line - 1, column - 1)
    tok = text_format.Tokenizer(text.split("\n"))  # (lines as text_format.Parse splits them)
    pending: Any = None  # the field named by the last identifier, awaiting its value
    last_ident = ""
    try:
        for _ in range(MAX_LOCATE_TOKENS):
            # (the tokenizer's position is private: a protobuf without it ends the walk)
            if tok.AtEnd() or (tok._line, tok._column) >= where:  # type: ignore[attr-defined]
                break
            t = tok.token
            desc, path, counts = frames[-1][0], frames[-1][1], frames[-1][2]
            field = pending if pending is not None else frames[-1][5]
            if t in ("{", "<") and field is not None and field.message_type is not None:
                pending = field
                name = pending.name
                here = f"{path}.{name}" if path else name
                index = None
                if pending.is_repeated:
                    index = counts.get(name, 0)
                    counts[name] = index + 1
                    here = f"{here}[{index}]"
                is_op = pending.message_type.full_name == "caffe2.OperatorDef"
                # (a single op, OpGradientRequest.op, is op 0, as the engine names it)
                frames.append([pending.message_type, here, {},
                               (0 if index is None else index) if is_op else None, None, None])
                pending = None
            elif t in ("}", ">"):
                if len(frames) > 1:
                    frames.pop()
                pending = None
            elif t in (":", ",", "[", "]"):
                if t == "[":
                    frames[-1][5] = pending
                elif t == "]":
                    frames[-1][5] = pending = None
            elif t[:1] in ('"', "'"):
                if (last_ident == "type" and desc.full_name == "caffe2.OperatorDef"
                        and frames[-1][4] is None):
                    frames[-1][4] = text_format.Tokenizer([t]).ConsumeString()
                pending = None
            else:
                f = desc.fields_by_name.get(t)
                if f is not None:
                    pending, last_ident = f, t
                else:
                    last_ident = ""
            tok.NextToken()
        else:
            return None, None, None
        ops = [f for f in frames if f[3] is not None]
        if ops and ops[-1][4] is None and ops[-1] is frames[-1]:
            ops[-1][4] = _type_after(tok)
    except (text_format.ParseError, AttributeError, ValueError):
        return None, None, None
    ops = [f for f in frames if f[3] is not None]
    path = frames[-1][1]  # ("" at the top level)
    if not ops:
        return path, None, None
    return path, ops[-1][3], ops[-1][4]


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
