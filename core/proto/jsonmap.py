"""JSON form of Caffe2 messages: protobuf's JSON mapping, ``Argument.s``/``strings`` as text.

The mapping is ``google.protobuf.json_format`` (``MessageToDict`` / ``ParseDict``) with proto
field names on output (lowerCamelCase accepted on input) and one deviation,
:data:`api_schemas.TEXT_BYTES_FIELDS`: those ``bytes`` fields are UTF-8 text instead of
base64, because they hold blob names. It is implemented here, once, for the reference
path: the text fields are turned into base64 before parsing and back after printing.

:mod:`core.proto.jsonfast` answers first where it is certain to give json_format's own
result (the common case, at C speed: upb builds the message from the decoded JSON);
anything else - other kinds of field, any error - goes to json_format, which stays the
definition of the mapping and words every error.
"""

from __future__ import annotations

import base64
import difflib
import re
from collections.abc import Callable
from typing import Any, TypeVar

from google.protobuf import descriptor, json_format, message

from api_schemas import TEXT_BYTES_FIELDS
from core.errors import DecodeError
from core.proto import jsonfast

M = TypeVar("M", bound=message.Message)

#: Deepest message nesting the reference parser follows (client bytes are depth-checked
#: before; see ``core.proto.limits``).
MAX_MESSAGE_DEPTH = 1000

def _text(b: bytes, where: str) -> str:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(
            f"{where} holds bytes that are not UTF-8 and cannot be shown as JSON text; "
            "ask for application/protobuf instead"
        ) from exc


def to_json(msg: message.Message, memo: Any = None) -> dict[str, Any]:
    """JSON-ready dict of ``msg`` with proto field names; text fields as UTF-8 text.

    ``memo``: a dict kept for one answer (equal arguments are printed once and share their
    dict: serialize the result, do not modify it), or ``None``. Printed by
    :func:`core.proto.jsonfast.to_json`, or by json_format where that gives up.

    Raises:
        DecodeError: a text field holds bytes that are not valid UTF-8.
    """
    try:
        return jsonfast.to_json(msg, memo)
    except jsonfast.Fallback:
        return reference_to_json(msg)


def from_json(
    obj: Any,
    cls: type[M],
    *,
    owned: bool = False,
    check_nested: Callable[[Any], None] | None = None,
) -> M:
    """Build a ``cls`` message from a JSON-decoded object (proto or lowerCamelCase names).

    Args:
        obj: the decoded JSON value (left unchanged; ``owned`` is accepted and unused).
        cls: the message class.
        check_nested: called with ``obj`` before the message is built when ``obj`` may
            hold a sub-net (``Argument.n``/``nets``), e.g. to refuse too deep a nesting.

    Raises:
        DecodeError: not a JSON object, unknown fields, wrong types, values that do not fit.
        Whatever ``check_nested`` raises.
    """
    if check_nested is not None and _may_nest(cls.DESCRIPTOR):
        check_nested(obj)
    try:
        return jsonfast.from_json(obj, cls)  # type: ignore[return-value]
    except jsonfast.Fallback:
        pass
    try:
        return reference_from_json(obj, cls)
    except RecursionError as exc:
        raise DecodeError(f"{cls.DESCRIPTOR.name} is nested too deeply") from exc


def _may_nest(desc: Any) -> bool:
    return desc.full_name in ("caffe2.NetDef", "caffe2.OperatorDef", "caffe2.Argument")


def reference_to_json(msg: message.Message) -> dict[str, Any]:
    """:func:`to_json` by json_format (``MessageToDict``); the definition of the output.

    Raises:
        DecodeError: a text field holds bytes that are not valid UTF-8.
    """
    obj = json_format.MessageToDict(msg, preserving_proto_field_name=True)
    return dict(_walk_text_fields(obj, msg.DESCRIPTOR, _b64_to_text))


def reference_from_json(obj: Any, cls: type[M]) -> M:
    """:func:`from_json` by json_format (``ParseDict``); the definition of the input.

    Raises:
        DecodeError: as for :func:`from_json`.
    """
    if not isinstance(obj, dict):
        raise DecodeError(f"{cls.DESCRIPTOR.name} must be a JSON object")
    try:
        work = _walk_text_fields(obj, cls.DESCRIPTOR, _text_to_b64)
        return json_format.ParseDict(
            work, cls(), ignore_unknown_fields=False, max_recursion_depth=MAX_MESSAGE_DEPTH
        )
    except json_format.ParseError as exc:
        unknown = _unknown_field(exc, cls)
        if unknown is not None:
            raise unknown from exc
        raise _located(exc, obj, cls) from exc
    except (ValueError, TypeError, AttributeError, OverflowError) as exc:
        raise _located(exc, obj, cls) from exc
    except SystemError as exc:  # upb, on a key json_format takes from a string (lone surrogate)
        raise DecodeError(
            f"invalid JSON {cls.DESCRIPTOR.name}: a message is given as a string or array "
            "where a JSON object is expected"
        ) from exc


#: json_format's words for the field whose value it could not parse ("Failed to parse i
#: field: ..."), innermost last, and the reason after the last of them.
_FAILED = re.compile(r"Failed to parse (\w+) field: ")
_INT_TEXT = re.compile(r"-?\d+")
_AT = re.compile(r" at [\w.\[\]]+$")
_TYPE_NAMES = {
    descriptor.FieldDescriptor.TYPE_INT32: "int32", descriptor.FieldDescriptor.TYPE_INT64: "int64",
    descriptor.FieldDescriptor.TYPE_UINT32: "uint32",
    descriptor.FieldDescriptor.TYPE_UINT64: "uint64",
}
_FD = descriptor.FieldDescriptor
_INT_RANGES = {
    _FD.CPPTYPE_INT32: (-(2**31), 2**31 - 1), _FD.CPPTYPE_UINT32: (0, 2**32 - 1),
    _FD.CPPTYPE_INT64: (-(2**63), 2**63 - 1), _FD.CPPTYPE_UINT64: (0, 2**64 - 1),
}


def _located(exc: Exception, obj: Any, cls: type[message.Message]) -> DecodeError:
    """json_format's error as a problem with the path of the value it refused, when found.

    json_format names only the chain of field names (``Failed to parse op field: Failed to
    parse arg field: Failed to parse i field: ...``). :func:`_bad_value` walks the JSON for
    the first value of a type its field cannot take; the path is used only when that field
    is the one json_format names last, so a wrong guess never names the wrong field.
    """
    text = str(exc)
    names = _FAILED.findall(text)
    found = _bad_value(obj, cls.DESCRIPTOR, "")
    if found is not None and names and found[1] == names[-1]:
        path, _, want = found
        reason = _AT.sub("", _FAILED.split(text)[-1].strip()).rstrip(".")
        return DecodeError.at(f"{path}: expected {want} ({reason})", path=path,
                              code="invalid_field")
    return DecodeError(f"invalid JSON {cls.DESCRIPTOR.name}: {text}")


def _bad_value(obj: Any, desc: Any, where: str) -> tuple[str, str, str] | None:
    """``(path, field name, what it takes)`` of the first value in ``obj`` its field cannot
    take, or None."""
    if not isinstance(obj, dict):
        return None
    for key, val in obj.items():
        field = desc.fields_by_name.get(key) or desc.fields_by_camelcase_name.get(key)
        if field is None or val is None:
            continue
        here = f"{where}.{field.name}" if where else field.name
        items = [(f"{here}[{k}]", v) for k, v in enumerate(val)] if (
            field.is_repeated and isinstance(val, list)) else [(here, val)]
        if field.is_repeated and not isinstance(val, list):
            return here, field.name, "a JSON array"
        text = (desc.full_name, field.name) in TEXT_BYTES_FIELDS
        for at, v in items:
            if field.message_type is not None:
                if not isinstance(v, dict):
                    return at, field.name, f"a JSON object ({field.message_type.name})"
                inner = _bad_value(v, field.message_type, at)
                if inner is not None:
                    return inner
            elif not _fits(field, v, text):
                return at, field.name, _wanted(field, text)
    return None


def _wanted(field: Any, text: bool) -> str:
    """What a scalar field takes, in words."""
    t = field.type
    if field.cpp_type in _INT_RANGES:
        return f"an integer ({_TYPE_NAMES.get(t, 'int')})"
    if t in (_FD.TYPE_FLOAT, _FD.TYPE_DOUBLE):
        return "a number"
    if t == _FD.TYPE_BOOL:
        return "true or false, without quotes"
    if t == _FD.TYPE_ENUM:
        return "one of " + ", ".join(v.name for v in field.enum_type.values)
    if t == _FD.TYPE_BYTES and not text:
        return "a base64 string"
    return "a string"


def _fits(field: Any, v: Any, text: bool) -> bool:
    """Whether scalar JSON value ``v`` is of a kind ``field`` takes (protobuf's mapping)."""
    kind = field.cpp_type
    if kind in _INT_RANGES:
        if isinstance(v, str) and _INT_TEXT.fullmatch(v.strip()):
            v = int(v)
        elif isinstance(v, float) and v.is_integer():
            v = int(v)
        if type(v) is not int:
            return False
        lo, hi = _INT_RANGES[kind]
        return lo <= v <= hi
    if kind in (_FD.CPPTYPE_FLOAT, _FD.CPPTYPE_DOUBLE):
        if isinstance(v, str):
            try:
                float(v)
            except ValueError:
                return False
            return True
        return type(v) in (int, float)
    if kind == _FD.CPPTYPE_BOOL:
        return type(v) is bool
    if kind == _FD.CPPTYPE_ENUM:
        if type(v) is int:
            return True
        return isinstance(v, str) and field.enum_type.values_by_name.get(v) is not None
    if kind == _FD.CPPTYPE_STRING:
        if not isinstance(v, str):
            return False
        if text or field.type != _FD.TYPE_BYTES:
            return True
        try:
            base64.b64decode(v.encode("ascii"), validate=False)
        except (ValueError, UnicodeEncodeError):
            return False
        return True
    return True


#: json_format's words for an unknown key, with the path of the message that holds it.
_UNKNOWN = re.compile(r'Message type "(?P<type>[\w.]+)" has no field named "(?P<name>[^"]*)" '
                      r'at "(?P<at>[^"]*)"')


def _unknown_field(exc: Exception, cls: type[message.Message]) -> DecodeError | None:
    """An unknown key as a problem with its path below ``cls`` (``op[0].arg[0].n.op[0].foo``)
    and the message type's field names (json_format names the path inside its text)."""
    found = _UNKNOWN.search(str(exc))
    if found is None:
        return None
    name, at = found["name"], found["at"]
    inner = at.split(".", 1)[1] if "." in at else ""  # drop the top type's name
    path = f"{inner}.{name}" if inner else name
    try:
        desc = cls.DESCRIPTOR.file.pool.FindMessageTypeByName(found["type"])
        fields = [f.name for f in desc.fields]
    except KeyError:
        fields = []
    close = difflib.get_close_matches(name, fields, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    text = f"{path}: unknown field of {found['type']}{hint}"
    if fields:
        text += f" (its fields: {', '.join(fields)})"
    return DecodeError.at(text, path=path, code="unknown_field")


def _b64_to_text(value: str, where: str) -> str:
    return _text(base64.b64decode(value), where)


def _text_to_b64(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise DecodeError.at(
            f"{where} must be a JSON string (UTF-8 text), got {type(value).__name__}",
            path=where, code="invalid_field")
    return base64.b64encode(value.encode("utf-8")).decode("ascii")


def _walk_text_fields(obj: Any, desc: Any, fix: Callable[[Any, str], Any], where: str = "") -> Any:
    """A copy of ``obj`` with ``fix`` applied to every text field (the input is not changed)."""
    if not isinstance(obj, dict):
        return obj
    out = dict(obj)
    spelled: dict[str, str] = {}
    for key, val in obj.items():
        field = desc.fields_by_name.get(key) or desc.fields_by_camelcase_name.get(key)
        if field is None:
            continue
        here = f"{where}.{field.name}" if where else field.name
        if field.name in spelled and obj[spelled[field.name]] != val:
            # json_format would let the later one win (or merge): refuse the doubt
            raise DecodeError.at(f"{here} is given twice with different values (as "
                                 f"{spelled[field.name]!r} and {key!r}); give it once",
                                 path=here, code="invalid_field")
        spelled[field.name] = key
        if val is None:
            continue
        if (desc.full_name, field.name) in TEXT_BYTES_FIELDS:
            out[key] = [fix(v, here) for v in val] if isinstance(val, list) else fix(val, here)
        elif field.message_type is not None:
            if isinstance(val, list):
                out[key] = [_walk_text_fields(v, field.message_type, fix, f"{here}[{k}]")
                            for k, v in enumerate(val)]
            else:
                out[key] = _walk_text_fields(val, field.message_type, fix, here)
    return out
