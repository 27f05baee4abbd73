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
import dataclasses
import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

from google.protobuf import descriptor, json_format, message, message_factory

from api_schemas import TEXT_BYTES_FIELDS
from core.errors import DecodeError
from core.proto import jsonfast, jsonwalk
from core.types import Diagnostic

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
        got = jsonwalk.kind(obj)
        raise DecodeError(f"expected a JSON object ({cls.DESCRIPTOR.name}), got {got}")
    ops = obj.get("op") if cls.DESCRIPTOR.full_name == "caffe2.NetDef" else None
    walked = _walk(obj, cls) if type(ops) is list and len(ops) > WALK_FIRST_OPS else None
    if walked:
        raise with_ops(jsonwalk.refusal(walked), obj, cls)
    work = None
    try:
        work = _walk_text_fields(obj, cls.DESCRIPTOR, _text_to_b64)
        return json_format.ParseDict(
            work, cls(), ignore_unknown_fields=False, max_recursion_depth=MAX_MESSAGE_DEPTH
        )
    except DecodeError as exc:  # (a text field's value, from _walk_text_fields)
        raise with_ops(_every(exc, obj, cls, walked), obj, cls) from exc
    except (json_format.ParseError, ValueError, TypeError, AttributeError,
            OverflowError) as exc:
        unknown = _unknown_field(exc, cls) if isinstance(exc, json_format.ParseError) else None
        first = unknown if unknown is not None else _located(exc, work, cls)
        raise with_ops(_every(first, obj, cls, walked), obj, cls) from exc
    except SystemError as exc:  # upb, on a key json_format takes from a string (lone surrogate)
        raise DecodeError(
            f"invalid JSON {cls.DESCRIPTOR.name}: a message is given as a string or array "
            "where a JSON object is expected"
        ) from exc


#: A NetDef of more ops than this is walked (:mod:`core.proto.jsonwalk`) before json_format
#: parses it: when the walk finds a problem, the body is refused in one Python pass over
#: its keys instead of json_format's parse and the bisection that locates its first refusal
#: (about three parses; 6.4 s for 200,000 ops); when it finds none, json_format's refusal
#: (if any) is not walked again.
WALK_FIRST_OPS = 1000


def _walk(obj: Any, cls: type[message.Message]) -> list[Diagnostic] | None:
    """:func:`core.proto.jsonwalk.every_problem` of ``obj``, or ``None`` if the walk itself
    failed (a listing aid only: never a reason to fail otherwise)."""
    try:
        return jsonwalk.every_problem(obj, cls.DESCRIPTOR, _located, _check_text)
    except Exception:  # noqa: BLE001
        return None


def _every(first: DecodeError, obj: Any, cls: type[message.Message],
           found: list[Diagnostic] | None = None) -> DecodeError:
    """``first`` (the first refusal) with every other problem of ``obj`` (json_format stops
    at the first; the walk finds the rest, or ``found`` is what it found already)."""
    if found is None:
        found = _walk(obj, cls)
    if found is None:
        return first
    if any(map(jsonwalk.is_shape, found)):
        # json_format reads a string or an array where a message belongs key by key (its
        # letters, its items): its first refusal names a "field" R; the walk's words only
        return jsonwalk.refusal(found)
    return jsonwalk.merged(first, found)


_SEGMENT = re.compile(r"(?P<name>[^.\[\]]+)(?:\[(?P<k>[0-9]{1,18})\])?")


def with_ops(err: DecodeError, obj: Any, cls: type[message.Message]) -> DecodeError:
    """``err`` with each problem inside an OperatorDef naming that op's index and type.

    A problem's field path (``net.op[2].arg[0].n.op[1].inptu``) is followed through ``obj``;
    the innermost OperatorDef on it gives ``op_index`` (its position in its net) and
    ``op_type`` (its ``type`` when that is a string), as engine problems name them.
    """
    out = []
    changed = False
    for p in err.problems:
        found = op_on_path(p.path, obj, cls) if p.path and p.op_index is None else None
        if found is not None:
            p = dataclasses.replace(p, op_index=found[0], op_type=found[1])
            changed = True
        out.append(p)
    return type(err)(err.message, out) if changed else err


def op_on_path(path: str, obj: Any, cls: type[message.Message]
               ) -> tuple[int, str | None] | None:
    """``(op index, op type)`` of the innermost OperatorDef on the field ``path`` of ``obj``,
    a JSON form (or skeleton) of a ``cls``; ``None`` when the path is in no op."""
    return _op_on_path(path, obj, cls.DESCRIPTOR)


def _op_on_path(path: str, obj: Any, desc: Any) -> tuple[int, str | None] | None:
    """The (index, type) of the innermost OperatorDef on ``path`` in ``obj``, if any (index
    0 for a single op, ``OpGradientRequest.op``)."""
    found = None
    value = obj
    for seg in path.split("."):
        m = _SEGMENT.fullmatch(seg)
        if m is None or desc is None or type(value) is not dict or not m["name"].isascii():
            break  # (a field name is ASCII; the descriptor pool refuses a lone surrogate)
        f = desc.fields_by_name.get(m["name"]) or jsonwalk.by_json_name(desc).get(m["name"])
        if f is None:
            break
        key = next((k for k in (m["name"], f.name, f.json_name) if k in value), None)
        if key is None:
            break
        value, desc = value[key], f.message_type
        if (m["k"] is None and desc is not None and desc.full_name == "caffe2.OperatorDef"
                and not f.is_repeated):
            # (a single op, OpGradientRequest.op: op 0, as the engine names it; a list of
            # ops named whole, net.op or grad_ops, is no one op of it)
            t = value.get("type") if type(value) is dict else None
            found = (0, t if isinstance(t, str) else None)
        elif m["k"] is not None:
            k = int(m["k"])
            if type(value) is not list or k >= len(value):
                break
            value = value[k]
            if desc is not None and desc.full_name == "caffe2.OperatorDef":
                t = value.get("type") if type(value) is dict else None
                found = (k, t if isinstance(t, str) else None)
    return found


#: json_format's prefix for the field whose value it could not parse, one per level.
_FAILED = "Failed to parse "
_AT = re.compile(r" at [\w.\[\]]+$")
#: Python's words for a JSON value's type, in json_format's reasons (``not 'list'``).
_REFUSED_TYPE = re.compile(r"(?:must be a string, a bytes-like object or a real number, not|"
                           r"must be a string or a real number, not|"
                           r"expected string or bytes-like object, got) '(?P<type>\w+)'")
_JSON_KINDS = jsonwalk.JSON_KINDS
#: json_format's reasons that quote Python or its own internals, with the value refused.
_REFUSED_VALUE = re.compile(
    r"^(?:invalid literal for int\(\) with base 10: |Couldn't parse \w+(?: value)?: "
    r"|repeated field \w+ must be in \[\] which is )(?P<value>.*)$", re.S)
#: Most questions :func:`_locate` asks json_format (then it gives up: the answer keeps
#: json_format's text, with the top field's path). An array of n values takes about log2(n).
MAX_LOCATE_CHECKS = 64
#: Longest array :func:`_locate` bisects (its questions reparse about the array once more);
#: a longer one is named without the index of its bad value.
MAX_BISECT = 65536
_FD = descriptor.FieldDescriptor
_INT_TYPES = {_FD.TYPE_INT32: "int32", _FD.TYPE_INT64: "int64", _FD.TYPE_UINT32: "uint32",
              _FD.TYPE_UINT64: "uint64", _FD.TYPE_SINT32: "sint32", _FD.TYPE_SINT64: "sint64",
              _FD.TYPE_FIXED32: "fixed32", _FD.TYPE_FIXED64: "fixed64",
              _FD.TYPE_SFIXED32: "sfixed32", _FD.TYPE_SFIXED64: "sfixed64"}


def _located(exc: Exception, work: Any, cls: type[message.Message]) -> DecodeError:
    """json_format's error as a problem with the path of the value it refused, when found.

    json_format names the chain of keys down to the field it failed on (``Failed to parse op
    field: Failed to parse arg field: Failed to parse i field: <reason>``), not which element
    of each array. :func:`_locate` follows that chain through ``work`` (what json_format
    parsed); in each array it asks json_format itself about halves until one element is
    left, the first that json_format refuses on its own (it parses in order), and it names a
    value only after json_format refused that very value. Anything unexpected, or too many
    questions, keeps json_format's own text with no path below the top.
    """
    text = str(exc)
    chain: list[str] = []
    rest = text
    while rest.startswith(_FAILED) and " field: " in rest:  # (anchored: values can't spoof it)
        name, _, rest = rest[len(_FAILED):].partition(" field: ")
        chain.append(name)
    try:
        found = _locate(work, cls.DESCRIPTOR, chain) if chain else None
    except Exception:  # noqa: BLE001 - a locating aid only: never a reason to fail otherwise
        found = None
    if found is None:
        return DecodeError(f"invalid JSON {cls.DESCRIPTOR.name}: {text}")
    path, field = found
    reason = _AT.sub("", rest.rstrip(".").strip())
    if field.is_repeated and not path.endswith("]") and type(_value_at(work, path)) is list:
        # (an array too long to bisect: one of its elements was refused)
        return DecodeError.at(f"{path}: every element must be {_wanted(field)}; one is not "
                              f"({reason[:200]})", path=path, code="invalid_field")
    want = "a JSON array" if field.is_repeated and not path.endswith("]") else _wanted(field)
    head = f"{path}: expected {want}" if want else path
    refused = _REFUSED_VALUE.match(reason)
    if refused is not None and want == "a JSON array":  # (json_format shows a Python repr)
        value = _value_at(work, path)
        got, one = _shown(value, refused["value"])
        if (field.message_type is None and field.type not in (_FD.TYPE_STRING, _FD.TYPE_BYTES)
                and type(value) in (str, int, float, bool)
                and not jsonwalk.surely_taken(field, value)):  # (["x"] is no list of ints)
            return DecodeError.at(f"{head} of {_wanted(field, plural=True)}, got {got}", path=path,
                                  code="invalid_field")
        return DecodeError.at(f"{head}, got {got}; for one value, a list of it: {one}",
                              path=path, code="invalid_field")
    if refused is not None:  # the value, not how the parser failed on it
        return DecodeError.at(f"{head}, got {refused['value'][:200]}", path=path,
                              code="invalid_field")
    typed = _REFUSED_TYPE.search(reason)
    if typed is not None:
        got = _JSON_KINDS.get(typed["type"], typed["type"])
        return DecodeError.at(f"{head}, got {got}", path=path, code="invalid_field")
    if reason.startswith("Value out of range: "):
        return DecodeError.at(f"{head}, got {reason[20:220]}, which is out of range",
                              path=path, code="invalid_field")
    return DecodeError.at(f"{head} ({reason})", path=path, code="invalid_field")


_MISSING = object()
_PATH_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _value_at(work: Any, path: str) -> Any:
    """The JSON value at ``path`` (``op[0].arg[1].ints``) of ``work``, or :data:`_MISSING`."""
    node = work
    for key, index in _PATH_STEP.findall(path):
        if key and type(node) is dict and key in node:
            node = node[key]
        elif index and type(node) is list and int(index) < len(node):
            node = node[int(index)]
        else:
            return _MISSING
    return node


def _shown(value: Any, repr_text: str) -> tuple[str, str]:
    """``(what was given, the one-item list of it)`` for a scalar given where a list goes,
    in JSON (``"1e5"`` quoted, ``true``); json_format's Python repr ``repr_text`` when the
    value cannot be found."""
    if type(value) is dict:
        return "an object", "[{...}]"
    if type(value) in (str, int, float, bool) or value is None:
        text = json.dumps(value)
        cut = "..." if len(text) > 200 else ""
        got = text[:200] + cut
        if type(value) is str:  # (unquoted, as json_format says it, unless it would read
            got = value[:200] + cut  # as another JSON value: "0", "true", "{x")
            if _reads_as_json(value):
                got = f"{text[:200]}{cut} (a string)"
        return got, f"[{text}]" if len(text) <= 40 else "[...]"
    if repr_text[:1] == "{":
        return "an object", "[{...}]"
    return repr_text[:200], "[...]"


def _reads_as_json(text: str) -> bool:
    """Whether ``text``, shown unquoted, would read as a JSON value other than a string."""
    stripped = text.strip()
    if not stripped or stripped[0] in "{[\"" or stripped in ("true", "false", "null"):
        return True
    try:
        float(stripped)
    except ValueError:
        return False
    return True


def _locate(work: Any, desc: Any, chain: list[str]) -> tuple[str, Any] | None:
    """``(path, field)`` of the first value along ``chain`` json_format refuses, or None."""
    checks = [0]

    def refused(parent: Any, key: str, value: Any) -> bool:
        checks[0] += 1
        if checks[0] > MAX_LOCATE_CHECKS:
            raise _GiveUp
        try:
            json_format.ParseDict({key: value}, message_factory.GetMessageClass(parent)(),
                                  max_recursion_depth=MAX_MESSAGE_DEPTH)
        except (json_format.ParseError, ValueError, TypeError, AttributeError, OverflowError):
            return True
        return False

    def first_refused(desc: Any, key: str, items: list[Any]) -> int:
        """Index of the first element of ``items`` (an array json_format refused) that it
        refuses on its own: bisection over slices, about log2(len) questions."""
        lo, hi = 0, len(items)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if refused(desc, key, items[lo:mid]):
                hi = mid
            else:
                lo = mid
        return lo

    def walk(obj: Any, desc: Any, level: int, where: str) -> tuple[str, Any] | None:
        key = chain[level]
        if not isinstance(obj, dict) or key not in obj:
            return None
        field = desc.fields_by_name.get(key) or desc.fields_by_camelcase_name.get(key)
        if field is None:
            return None
        here = f"{where}.{field.name}" if where else field.name
        value = obj[key]
        last = level == len(chain) - 1
        if field.is_repeated and isinstance(value, list) and len(value) > MAX_BISECT:
            return here, field  # (json_format named this field: the array, without an index)
        if field.is_repeated and isinstance(value, list) and value:
            k = first_refused(desc, key, value)
            here, value = f"{here}[{k}]", value[k]
            if not last and field.message_type is not None and isinstance(value, dict):
                return walk(value, field.message_type, level + 1, here)
            return (here, field) if refused(desc, key, [value]) else None
        if not last and field.message_type is not None and isinstance(value, dict):
            return walk(value, field.message_type, level + 1, here)
        # json_format failed on this value (or, not an object where one belongs, on it)
        return (here, field) if refused(desc, key, value) else None

    try:
        return walk(work, desc, 0, "")
    except _GiveUp:
        return None


class _GiveUp(Exception):
    """:func:`_locate` asked json_format about too many values."""


def _wanted(field: Any, plural: bool = False) -> str:
    """What a field's value is (``plural``: what its elements are), in words."""
    t = field.type
    if field.message_type is not None:
        one, many = f"a JSON object ({field.message_type.name})", "JSON objects"
    elif t in _INT_TYPES:
        one, many = f"an integer ({_INT_TYPES[t]})", f"integers ({_INT_TYPES[t]})"
    elif t in (_FD.TYPE_FLOAT, _FD.TYPE_DOUBLE):
        one, many = "a number", "numbers"
    elif t == _FD.TYPE_BOOL:
        one, many = "true or false, without quotes", "true or false values"
    elif t == _FD.TYPE_ENUM:
        names = ", ".join(v.name for v in field.enum_type.values)
        one, many = f"one of {names}", f"enum values ({names})"
    else:  # (bytes: base64, or text for Argument.s / strings)
        one, many = "a string", "strings"
    return many if plural else one


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
    hint = jsonwalk.field_hint(*nearest_field(cls, found["type"], name))
    text = f"{path}: unknown field of {found['type']}{hint}"
    return DecodeError.at(text, path=path, code="unknown_field")


def nearest_field(cls: type[message.Message], type_name: str, name: str
                  ) -> tuple[str | None, list[str]]:
    """The field of message type ``type_name`` nearest to unknown ``name`` (``None``: none
    is close), and all its field names; the type is looked up in ``cls``'s descriptor pool
    (an unknown type has no fields)."""
    try:
        desc = cls.DESCRIPTOR.file.pool.FindMessageTypeByName(type_name)
    except KeyError:
        desc = None
    return jsonwalk.nearest(desc, name)


def _b64_to_text(value: str, where: str) -> str:
    return _text(base64.b64decode(value), where)


def _text_to_b64(value: Any, where: str) -> str:
    if not isinstance(value, str):
        got = jsonwalk.kind(value)
        raise DecodeError.at(f"{where} must be a JSON string (UTF-8 text), got {got}",
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
            raise DecodeError.at(jsonwalk.twice(here, spelled[field.name], key),
                                 path=here, code="invalid_field")
        spelled[field.name] = key
        if val is None:
            continue
        if (desc.full_name, field.name) in TEXT_BYTES_FIELDS:
            out[key] = _text_value(field, val, here, fix)
        elif field.message_type is not None:
            if isinstance(val, list):
                out[key] = [_walk_text_fields(v, field.message_type, fix, f"{here}[{k}]")
                            for k, v in enumerate(val)]
            else:
                out[key] = _walk_text_fields(val, field.message_type, fix, here)
    return out


def _text_value(field: Any, val: Any, here: str, fix: Callable[[Any, str], Any]) -> Any:
    """``fix`` applied to the value of text field ``field`` (each element if repeated)."""
    if field.is_repeated and not isinstance(val, list):
        raise DecodeError.at(f"{here} must be a JSON array of strings (UTF-8 text), "
                             f"got {jsonwalk.kind(val)}",
                             path=here, code="invalid_field")
    return ([fix(v, f"{here}[{k}]") for k, v in enumerate(val)]
            if field.is_repeated else fix(val, here))


def _check_text(field: Any, val: Any, here: str) -> Any:
    """Text field ``field``'s value as base64 (json_format's reading of it); raises the
    DecodeError that decoding it would raise."""
    return _text_value(field, val, here, _text_to_b64)
