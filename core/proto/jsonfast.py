"""The common case of protobuf's JSON mapping at C speed, with ``json_format`` as its definition.

Why this exists: ``json_format.ParseDict`` / ``MessageToDict`` walk every scalar in Python
(13.7 ms to read ResNet-50's 175 ops, 3.5 ms to print their gradient ops, against 0.03 ms
for the binary parse), which made a JSON request three to five times a binary one (issue 10
asks for at most 1.5x). The definition stays protobuf's: :mod:`core.proto.jsonmap` runs
``json_format`` whenever this module is not *certain* to give the same result, and every
error message comes from it.

* :func:`from_json` turns the ``json.loads`` result into constructor keywords, message by
  message, and lets upb build the whole message in C (``cls(**kwargs)``; upb checks string
  and integer values and their ranges itself). Python only looks at what upb would accept
  but ``json_format`` would not, or would read differently: repeated fields that are not
  JSON arrays, non-``bool`` booleans, NaN / infinite / out-of-range floats, the text
  fields :data:`api_schemas.TEXT_BYTES_FIELDS` (encoded here), lowerCamelCase keys
  (renamed). Whatever else it meets - an enum, a base64 ``bytes`` field, a oneof, a key
  given twice under both spellings, a wrong type, anything upb refuses - it gives up
  (:class:`Fallback`) and the caller runs ``json_format``.
* :func:`to_json` prints a message from ``ListFields()`` (C) the way ``MessageToDict`` with
  proto field names does (int64 as strings, float32 by ``ToShortestFloat``, non-finite
  floats as strings), text fields as UTF-8 text; it gives up the same way.

``tests/core/test_jsonfast.py`` checks on random messages and random near-miss JSON that
whenever this module answers, ``json_format`` answers the same (equal messages, the same
dict key for key and in order), and that it falls back wherever ``json_format`` refuses.
"""

from __future__ import annotations

import base64
import math
import re
import sys
from functools import cache
from typing import Any

from google.protobuf import descriptor, message
from google.protobuf.internal import type_checkers

from api_schemas import TEXT_BYTES_FIELDS, caffe2_pb2

_FD = descriptor.FieldDescriptor

#: json_format's float32 bounds (``type_checkers._FLOAT_MAX``): beyond them it refuses.
_FLOAT_MAX = float.fromhex("0x1.fffffep+127")
_DOUBLE_MAX = sys.float_info.max
#: Integer strings read the same by ``int()`` and by json_format (no sign, space, ``_``...).
_DECIMAL = re.compile(r"-?[0-9]+").fullmatch
#: Message nesting json_format follows (``max_recursion_depth`` of the reference reader).
MAX_DEPTH = 1000

# Input kinds: what Python must check before upb builds the value.
_PLAIN = 0  # singular string: upb checks the type (and UTF-8)
_LIST = 1  # repeated string: must be a JSON array; upb checks the elements
_INT = 11  # singular integer: a JSON number (upb checks type and range) or a decimal string
_INTS = 12
_BOOL = 2
_BOOLS = 3
_FLOAT = 4
_FLOATS = 5
_TEXT = 6  # Argument.s: UTF-8 text, stored as its bytes
_TEXTS = 7
_MSG = 8
_MSGS = 9
_NO = 10  # a kind left to json_format (enum, base64 bytes, oneof, map, well-known type)


class Fallback(Exception):
    """This value needs ``json_format`` (it may be valid; it may be an error)."""


def _special_message(desc: Any) -> bool:
    """Well-known types and map entries: json_format reads and prints them its own way."""
    return desc.full_name.startswith("google.protobuf.") or desc.GetOptions().map_entry


def _kind(desc: Any, f: Any) -> int:
    rep = f.is_repeated
    if f.containing_oneof is not None:
        return _NO
    cpp = f.cpp_type
    if cpp == _FD.CPPTYPE_MESSAGE:
        if _special_message(f.message_type):
            return _NO
        return _MSGS if rep else _MSG
    if cpp == _FD.CPPTYPE_ENUM:
        return _NO
    if cpp == _FD.CPPTYPE_STRING and f.type == _FD.TYPE_BYTES:
        if (desc.full_name, f.name) in TEXT_BYTES_FIELDS:
            return _TEXTS if rep else _TEXT
        return _NO
    if cpp == _FD.CPPTYPE_BOOL:
        return _BOOLS if rep else _BOOL
    if cpp in (_FD.CPPTYPE_FLOAT, _FD.CPPTYPE_DOUBLE):
        return _FLOATS if rep else _FLOAT
    if cpp == _FD.CPPTYPE_STRING:
        return _LIST if rep else _PLAIN
    return _INTS if rep else _INT


@cache
def _reader(desc: Any) -> dict[str, tuple[str, int, Any, float, bool]]:
    """JSON key -> (proto field name, kind, message type, float bound, key is not the proto
    name), as json_format looks keys up: the JSON name first, then the proto name."""
    plan: dict[str, tuple[str, int, Any, float, bool]] = {}
    for by_json in (False, True):
        for f in desc.fields:
            bound = _FLOAT_MAX if f.cpp_type == _FD.CPPTYPE_FLOAT else _DOUBLE_MAX
            key = f.json_name if by_json else f.name
            plan[key] = (f.name, _kind(desc, f), f.message_type, bound, key != f.name)
    return plan


def _floats_ok(values: list[Any], bound: float) -> bool:
    """Numbers json_format takes unchanged: no NaN, none beyond the type's range (C speed)."""
    if not set(map(type, values)) <= {float, int, bool}:
        return False
    if not values:
        return True
    if any(map(math.isnan, values)):
        return False
    return bool(-bound <= min(values) and max(values) <= bound)


def _ints(values: list[Any]) -> list[Any]:
    """Integers of a JSON array: numbers as they are (upb checks them), decimal strings (the
    mapping's int64 form) as numbers; anything else needs json_format (C speed)."""
    if set(map(type, values)) <= {int}:
        return values
    text = list(map(str, values))  # str(True), str(1.0) do not match: json_format decides
    if not all(map(_DECIMAL, text)):
        raise Fallback
    return list(map(int, text))


def _keywords(obj: Any, desc: Any, depth: int) -> dict[str, Any]:
    """Constructor keywords for ``obj`` (``obj`` itself when nothing needs changing)."""
    if type(obj) is not dict or depth > MAX_DEPTH:
        raise Fallback
    plan = _reader(desc)
    out: dict[str, Any] | None = None
    for key, value in obj.items():
        entry = plan.get(key)
        if entry is None:
            raise Fallback  # unknown (or an extension): json_format words the error
        name, kind, sub, bound, renamed = entry
        new = value
        if value is None or kind == _PLAIN:
            pass  # null = unset, for upb as for json_format; upb checks strings
        elif kind == _LIST:
            if type(value) is not list:
                raise Fallback
        elif kind == _MSGS:
            if type(value) is not list:
                raise Fallback
            items = [_keywords(v, sub, depth + 1) for v in value]
            if any(a is not b for a, b in zip(items, value, strict=True)):
                new = items
        elif kind == _INT:
            if type(value) is str:
                if not _DECIMAL(value):
                    raise Fallback
                new = int(value)
            elif type(value) is not int:
                raise Fallback  # 3.0, true, ...: json_format's rules
        elif kind == _TEXT:
            if type(value) is not str:
                raise Fallback
            new = value.encode("utf-8")  # lone surrogates: UnicodeEncodeError, caught above
        elif kind == _MSG:
            new = _keywords(value, sub, depth + 1)
        elif kind == _INTS:
            if type(value) is not list:
                raise Fallback
            new = _ints(value)
        elif kind == _TEXTS:
            if type(value) is not list:
                raise Fallback
            new = list(map(str.encode, value))  # TypeError for a non-string: caught above
        elif kind == _BOOL:
            if type(value) is not bool:
                raise Fallback
        elif kind == _BOOLS:
            if type(value) is not list or not set(map(type, value)) <= {bool}:
                raise Fallback
        elif kind == _FLOAT:
            if type(value) not in (float, int, bool) or value != value or not (
                    -bound <= value <= bound):
                raise Fallback
        elif kind == _FLOATS:
            if type(value) is not list or not _floats_ok(value, bound):
                raise Fallback
        else:
            raise Fallback
        if renamed:
            if name in obj:
                raise Fallback  # both spellings of one field: json_format's merge rules
            if out is None:
                out = dict(obj)
            del out[key]
            out[name] = new
        elif new is not value:
            if out is None:
                out = dict(obj)
            out[name] = new
    return obj if out is None else out


def from_json(obj: Any, cls: type[message.Message]) -> message.Message:
    """``cls`` from a ``json.loads`` value, equal to what ``json_format.ParseDict`` builds
    (with :data:`~api_schemas.TEXT_BYTES_FIELDS` as text).

    ``obj`` must be what ``json.loads`` returns (dicts, lists, str, int, float, bool,
    None): upb would also take ``bytes`` for a string field, which JSON cannot hold.

    Raises:
        Fallback: ``json_format`` must decide (it may accept the value, or word an error).
    """
    try:
        return cls(**_keywords(obj, cls.DESCRIPTOR, 1))
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise Fallback from exc  # upb refused a value (UnicodeEncodeError is a ValueError)


# -- printing ------------------------------------------------------------------------------------

# Print codes: the field's kind, and whether it is repeated (R).
_P, _PR = 0, 1  # str, bool, int32 / uint32: as they are
_M, _MR = 2, 3  # messages
_MS, _MSR = 4, 5  # messages printed once per answer (see _SHARED)
_T, _TR = 6, 7  # text bytes
_I64, _I64R = 8, 9  # printed as strings
_F32, _F32R = 10, 11
_F64, _F64R = 12, 13
_B, _BR = 14, 15  # base64 bytes

#: Message types printed once per answer when they repeat (see :func:`to_json`), with the
#: byte that ends their memo keys (equal bytes of two types are different messages).
_SHARED = {caffe2_pb2.Argument.DESCRIPTOR: b"A", caffe2_pb2.DeviceOption.DESCRIPTOR: b"D"}


def _code(desc: Any, f: Any) -> int:
    cpp = f.cpp_type
    if f.containing_oneof is not None or cpp == _FD.CPPTYPE_ENUM:
        return -1
    if cpp == _FD.CPPTYPE_MESSAGE:
        if _special_message(f.message_type):
            return -1
        code = _MS if f.message_type in _SHARED else _M
    elif cpp == _FD.CPPTYPE_STRING and f.type == _FD.TYPE_BYTES:
        code = _T if (desc.full_name, f.name) in TEXT_BYTES_FIELDS else _B
    elif cpp in (_FD.CPPTYPE_INT64, _FD.CPPTYPE_UINT64):
        code = _I64
    elif cpp == _FD.CPPTYPE_FLOAT:
        code = _F32
    elif cpp == _FD.CPPTYPE_DOUBLE:
        code = _F64
    else:
        code = _P
    return code + 1 if f.is_repeated else code


@cache
def _printer(desc: Any) -> dict[Any, tuple[str, int]]:
    return {f: (f.name, _code(desc, f)) for f in desc.fields}


#: ``ToShortestFloat`` results (it formats up to four times per value): float32 values of
#: arguments repeat from op to op. Bounded: cleared when full.
_SHORTEST: dict[float, float] = {}
_SHORTEST_MAX = 4096


def _float(v: float) -> Any:
    """A float32 value as ``MessageToDict`` prints it."""
    found = _SHORTEST.get(v)
    if found is not None and v:  # 0.0 and -0.0 are one key, but print apart
        return found
    if not math.isfinite(v):
        return _double(v)
    short = type_checkers.ToShortestFloat(v)
    if len(_SHORTEST) >= _SHORTEST_MAX:
        _SHORTEST.clear()
    _SHORTEST[v] = short
    return short


def _double(v: float) -> Any:
    if math.isinf(v):
        return "-Infinity" if v < 0 else "Infinity"
    if v != v:
        return "NaN"
    return v


def _b64(v: bytes) -> str:
    return base64.b64encode(v).decode("utf-8")


def to_json(msg: message.Message, memo: dict[bytes, Any] | None = None) -> dict[str, Any]:
    """``MessageToDict(msg, preserving_proto_field_name=True)``, text fields as text.

    ``memo``: a dict kept for one answer; equal ``Argument`` / ``DeviceOption`` messages
    inside (most ops repeat a few) are printed once and share their dict, so serialize the
    result, do not modify it.

    Raises:
        Fallback: ``json_format`` must print it (an enum, a oneof, a well-known type, a text
            field that is not UTF-8).
    """
    plan = _printer(msg.DESCRIPTOR)
    out: dict[str, Any] = {}
    for f, value in msg.ListFields():
        name, code = plan.get(f) or ("", -1)  # not in the plan: an extension
        if code == _PR:
            out[name] = list(value)
        elif code == _P:
            out[name] = value
        elif code == _MSR:
            if memo is None:
                out[name] = [to_json(m, memo) for m in value]
                continue
            end = _SHARED[value[0].DESCRIPTOR] if value else b""
            items = []
            for m in value:  # _shared, inlined: most answers hold thousands of arguments
                key = m.SerializePartialToString(deterministic=True) + end
                found = memo.get(key)
                if found is None:
                    found = memo[key] = to_json(m, memo)
                items.append(found)
            out[name] = items
        elif code == _MS:
            out[name] = _shared(value, memo)
        elif code == _M:
            out[name] = to_json(value, memo)
        elif code == _MR:
            out[name] = [to_json(m, memo) for m in value]
        elif code == _T or code == _TR:
            try:
                out[name] = value.decode() if code == _T else list(map(bytes.decode, value))
            except UnicodeDecodeError as exc:
                raise Fallback from exc
        elif code == _I64:
            out[name] = str(value)
        elif code == _I64R:
            out[name] = list(map(str, value))
        elif code == _F32:
            out[name] = _float(value)
        elif code == _F32R:
            out[name] = list(map(_float, value))
        elif code == _F64:
            out[name] = _double(value)
        elif code == _F64R:
            out[name] = list(value) if all(map(math.isfinite, value)) else list(
                map(_double, value))
        elif code == _B:
            out[name] = _b64(value)
        elif code == _BR:
            out[name] = list(map(_b64, value))
        else:
            raise Fallback
    return out


def _shared(msg: message.Message, memo: dict[bytes, Any] | None) -> Any:
    if memo is None:
        return to_json(msg, memo)
    key = msg.SerializePartialToString(deterministic=True) + _SHARED[msg.DESCRIPTOR]
    found = memo.get(key)
    if found is None:
        found = memo[key] = to_json(msg, memo)
    return found
