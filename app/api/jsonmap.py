"""JSON form of the ``netgrad.v1`` messages, driven by their descriptors and ``(json)`` options.

The rules are stated once, at the top of ``api_schemas/netgrad.proto``; this module applies
them to any ``netgrad.v1`` message, so no field of a request or answer is written down here.
Caffe2 messages inside (``op``, ``net``, ``grad_ops``) go through :mod:`core.proto.jsonmap`
(protobuf's JSON mapping, ``Argument.s``/``strings`` as text).

* :func:`decode` builds a request message from a JSON object: unknown fields, wrong JSON
  types (no string-to-number coercion) and missing required fields are all reported at
  once, each with its field path, as one :class:`~core.errors.DecodeError`.
* :func:`encode` turns an answer message into a JSON-ready dict.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

from google.protobuf import descriptor, message, message_factory

from api_schemas import netgrad_pb2
from core.errors import DecodeError
from core.proto import jsonmap as caffe2_json
from core.proto import jsonwalk
from core.types import Diagnostic

M = TypeVar("M", bound=message.Message)

_FD = descriptor.FieldDescriptor
_INT_RANGES = {
    _FD.CPPTYPE_INT32: (-(2**31), 2**31 - 1),
    _FD.CPPTYPE_UINT32: (0, 2**32 - 1),
    _FD.CPPTYPE_INT64: (-(2**63), 2**63 - 1),
    _FD.CPPTYPE_UINT64: (0, 2**64 - 1),
}
_FLOATS = (_FD.CPPTYPE_FLOAT, _FD.CPPTYPE_DOUBLE)
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_NETGRAD = "netgrad.v1."
_NO_OPTIONS = netgrad_pb2.JsonField()
#: Memo of the Caffe2 printer for the answer being encoded (see :func:`encode`).
_memo: ContextVar[dict[Any, Any] | None] = ContextVar("netgrad_json_memo", default=None)

#: Decodes one Caffe2 message found at a JSON path: ``(obj, message class, path) -> message``.
Caffe2Reader = Callable[[Any, type[message.Message], str], message.Message]


class _Invalid(Exception):
    """One problem with the value at a path (collected, then reported together)."""

    def __init__(self, code: str, path: str, text: str) -> None:
        super().__init__(text)
        self.diagnostic = Diagnostic("error", code, f"{path}: {text}" if path else text,
                                     path=path or None)


def json_options(f: Any) -> Any:
    """The ``(json)`` options of field ``f`` (all unset when it has none)."""
    opts = f.GetOptions()
    return opts.Extensions[netgrad_pb2.json] if opts.HasExtension(netgrad_pb2.json) else (
        _NO_OPTIONS
    )


def _cls(desc: Any) -> type[message.Message]:
    return message_factory.GetMessageClass(desc)


def _is_caffe2(desc: Any) -> bool:
    return not desc.full_name.startswith(_NETGRAD)


@cache
def bare_oneof(desc: Any) -> bool:
    """Whether ``desc`` has option ``json_bare_oneof`` (its JSON is one member, bare)."""
    return bool(desc.GetOptions().Extensions[netgrad_pb2.json_bare_oneof])


@dataclass(frozen=True)
class _Field:
    field: Any
    opts: Any
    inline_in: str | None  # proto name of the inlined message field that holds it


@cache
def _keys(desc: Any) -> dict[str, _Field]:
    """JSON key (proto name or lowerCamelCase) -> field, inlined messages' fields included."""
    out: dict[str, _Field] = {}
    for f in desc.fields:
        opts = json_options(f)
        if opts.inline:
            for sub in f.message_type.fields:
                entry = _Field(sub, json_options(sub), f.name)
                out[sub.name] = out[sub.camelcase_name] = entry
            continue
        out[f.name] = out[f.camelcase_name] = _Field(f, opts, None)
    return out


# -- decoding ------------------------------------------------------------------------------------


def decode(obj: Any, cls: type[M], caffe2: Caffe2Reader) -> M:
    """Build a ``cls`` message from a JSON-decoded request body.

    Args:
        obj: the decoded JSON value.
        cls: a ``netgrad.v1`` message class.
        caffe2: decodes the Caffe2 messages inside (with the caller's depth checks).

    Raises:
        DecodeError: every unknown field, wrongly typed value and missing required field,
            each a problem with its path (codes ``unknown_field``, ``invalid_field``).
        LimitExceededError: from ``caffe2``.
    """
    problems: list[Diagnostic] = []
    kwargs = _message(obj, cls.DESCRIPTOR, "", caffe2, problems)
    if problems:
        shown = "; ".join(p.message for p in problems[:10])
        more = f"; and {len(problems) - 10} more" if len(problems) > 10 else ""
        raise DecodeError(
            f"request body does not match {cls.DESCRIPTOR.name}: {shown}{more}", problems)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:  # pragma: no cover - values are checked above
        raise DecodeError(f"request body does not match {cls.DESCRIPTOR.name}: {exc}") from exc


def _message(obj: Any, desc: Any, path: str, caffe2: Caffe2Reader,
             problems: list[Diagnostic]) -> dict[str, Any]:
    if type(obj) is not dict:
        problems.append(_Invalid("invalid_field", path, "must be a JSON object").diagnostic)
        return {}
    keys = _keys(desc)
    kwargs: dict[str, Any] = {}
    inlined: dict[str, dict[str, Any]] = {}
    given: set[str] = set()
    spelled: dict[str, str] = {}  # field name -> the JSON key that gave it
    sole: DecodeError | None = None
    for key, value in obj.items():
        entry = keys.get(key)
        here = f"{path}.{key}" if path else key
        if entry is None:
            problems.append(_Invalid("unknown_field", here, "unknown field").diagnostic)
            continue
        if entry.field.name in spelled:  # e.g. g_output and gOutput
            if obj[spelled[entry.field.name]] != value:  # the same value twice is no doubt
                problems.append(_Invalid(
                    "invalid_field", here,
                    f"given twice with different values (also as "
                    f"{spelled[entry.field.name]!r}); give it once",
                ).diagnostic)
            continue
        spelled[entry.field.name] = key
        if value is None:
            continue  # null = unset, as in protobuf's JSON mapping
        given.add(entry.field.name)
        try:
            converted = _value(entry, value, here, caffe2, problems)
        except _Invalid as bad:
            problems.append(bad.diagnostic)
            continue
        except DecodeError as bad:  # a Caffe2 message inside: its problems join the others
            if not problems and _rest_is_clean(obj, key, keys):
                sole = bad  # (the only problem, if no other follows: as its reader worded it)
            problems.extend(bad.problems or [_Invalid("invalid_field", here,
                                                      bad.message).diagnostic])
            continue
        target = kwargs if entry.inline_in is None else inlined.setdefault(entry.inline_in, {})
        target[entry.field.name] = converted
    chosen: dict[str, str] = {}
    for key, value in obj.items():  # at most one member of a oneof (e.g. tensor | random)
        entry = keys.get(key)
        if entry is None or value is None:
            continue
        oneof = entry.field.containing_oneof
        if oneof is None or len(oneof.fields) < 2:
            continue
        if oneof.name in chosen and chosen[oneof.name] != entry.field.name:
            here = f"{path}.{key}" if path else key
            problems.append(_Invalid(
                "invalid_field", here,
                f"give only one of {', '.join(f.name for f in oneof.fields)} "
                f"(also given: {chosen[oneof.name]})",
            ).diagnostic)
        chosen.setdefault(oneof.name, entry.field.name)
    for entry in keys.values():
        name = entry.field.name
        if entry.opts.required and name not in given:
            here = f"{path}.{name}" if path else name
            problems.append(_Invalid("invalid_field", here, "field required").diagnostic)
            given.add(name)
    if sole is not None and len(problems) == len(sole.problems or [None]):
        del problems[:]  # (nothing else was wrong: the Caffe2 reader's own words)
        raise sole
    for name, sub in inlined.items():
        kwargs[name] = _cls(desc.fields_by_name[name].message_type)(**sub)
    return kwargs


def _rest_is_clean(obj: dict[str, Any], key: str, keys: Mapping[str, _Field]) -> bool:
    """Whether every key after ``key`` of ``obj`` is a known field (a cheap look ahead)."""
    after = False
    for k in obj:
        if after and k not in keys:
            return False
        after = after or k == key
    return True


def _value(entry: _Field, value: Any, path: str, caffe2: Caffe2Reader,
           problems: list[Diagnostic]) -> Any:
    f, opts = entry.field, entry.opts
    if opts.object:
        return _entries(f, opts, value, path, caffe2, problems)
    if f.is_repeated:
        if type(value) is not list:
            # (`inputs` given as an object gets its own hint: app.api.hints.INPUTS_HINT)
            # (a list of messages: a scalar is no item of it, only an object may be)
            item = (_is_item(f, value) if f.message_type is None
                    else type(value) is dict and f.name != "inputs")
            one = _one_item(value) if item else ""
            raise _Invalid("invalid_field", path, "must be a JSON array" + one)
        fast = _scalars(f, value)
        if fast is not None:
            return fast
        if f.message_type is not None and _is_caffe2(f.message_type):
            return _caffe2_list(f, value, path, caffe2, problems)
        return [_single(f, v, f"{path}[{k}]", caffe2, problems) for k, v in enumerate(value)]
    return _single(f, value, path, caffe2, problems)


def _caffe2_list(f: Any, value: list[Any], path: str, caffe2: Caffe2Reader,
                 problems: list[Diagnostic]) -> list[Any]:
    """Each Caffe2 message of a list (``grad_ops``), every bad one named: one bad message
    raises its reader's own error, several one error of all their problems."""
    out, bad = [], []
    for k, v in enumerate(value):
        try:
            out.append(_single(f, v, f"{path}[{k}]", caffe2, problems))
        except DecodeError as exc:
            bad.append(exc)
    if len(bad) == 1:
        raise bad[0]
    if bad:
        raise jsonwalk.refusal([p for exc in bad for p in exc.problems])
    return out


def _is_item(f: Any, value: Any) -> bool:
    """Whether scalar ``value`` is of the type of repeated scalar field ``f``'s elements (a
    one-item list of it would be taken: worth suggesting)."""
    cpp, t = f.cpp_type, type(value)
    if cpp == _FD.CPPTYPE_STRING:
        return t is str
    if cpp in _FLOATS:
        return t is float or t is int or (t is str and value in ("NaN", "Infinity", "-Infinity"))
    if cpp in _INT_RANGES:
        return t is int
    return cpp == _FD.CPPTYPE_BOOL and t is bool


def _one_item(value: Any) -> str:
    """`` (for one value, a list of it: ["y"])`` for a short scalar, or an object
    (``[{...}]``), given where a list goes."""
    if type(value) is dict:
        return " (for one value, a list of it: [{...}])"
    if type(value) in (str, int, float, bool) and len(text := json.dumps(value)) <= 40:
        return f" (for one value, a list of it: [{text}])"
    return ""


def _scalars(f: Any, value: list[Any]) -> list[Any] | None:
    """A list of well-typed scalars checked at C speed (tensor data can be long), or
    ``None`` to check it element by element (naming the offending one)."""
    if f.message_type is not None or not value:
        return None
    types = set(map(type, value))
    cpp = f.cpp_type
    if cpp in _FLOATS and types <= {float, int, bool}:
        try:
            out = list(map(float, value))
        except OverflowError:
            return None
        # (a non-finite float came from a bare NaN/Infinity or an overflowing literal)
        if float in types and not all(map(math.isfinite, out)):
            return None
        return out
    if cpp in _INT_RANGES and types == {int}:
        lo, hi = _INT_RANGES[cpp]
        return value if lo <= min(value) and max(value) <= hi else None
    if cpp == _FD.CPPTYPE_STRING and types == {str} and all(map(str.isascii, value)):
        return value
    return None


def _entries(f: Any, opts: Any, value: Any, path: str, caffe2: Caffe2Reader,
             problems: list[Diagnostic]) -> list[Any]:
    """A ``(json).object`` field: {key: value} (or a list of keys) to entry messages."""
    entry_desc = f.message_type
    key_field, value_field = entry_desc.fields[0], entry_desc.fields[1]
    cls = _cls(entry_desc)
    if opts.or_keys and type(value) is list:
        out = []
        for k, key in enumerate(value):
            _string(key, f"{path}[{k}]")
            out.append(cls(**{key_field.name: key}))
        return out
    if type(value) is not dict:
        kinds = "a JSON object or a list of names" if opts.or_keys else "a JSON object"
        if opts.or_keys and type(value) is str:  # one name: a list of it
            kinds += f" (for one name, a list of it: {json.dumps([value[:60]])})"
        raise _Invalid("invalid_field", path, f"must be {kinds}")
    out = []
    for key, v in value.items():
        _string(key, path)
        kwargs = {key_field.name: key}
        if v is not None:
            kwargs[value_field.name] = _single(value_field, v, f"{path}.{key}", caffe2, problems)
        out.append(cls(**kwargs))
    return out


def _single(f: Any, value: Any, path: str, caffe2: Caffe2Reader,
            problems: list[Diagnostic]) -> Any:
    sub = f.message_type
    if value is None and not (sub is not None and bare_oneof(sub)):
        raise _Invalid("invalid_field", path, "must not be null")
    if sub is not None:
        if _is_caffe2(sub):
            return caffe2(value, _cls(sub), path)
        if bare_oneof(sub):
            return _bare(sub, value, path, caffe2, problems)
        return _cls(sub)(**_message(value, sub, path, caffe2, problems))
    cpp = f.cpp_type
    if cpp in _INT_RANGES:
        if type(value) is not int:
            raise _Invalid("invalid_field", path,
                           f"must be an integer (a JSON number such as 3), {_got(value)}")
        lo, hi = _INT_RANGES[cpp]
        if not lo <= value <= hi:
            raise _Invalid("invalid_field", path, f"integer out of range [{lo}, {hi}]")
        return value
    if cpp in _FLOATS:
        if type(value) in (int, float, bool):  # bools: tensor data of bool tensors (0/1)
            try:
                number = float(value)
            except OverflowError as exc:
                raise _Invalid("invalid_field", path, "number out of range") from exc
            if not math.isfinite(number):  # JSON numbers are finite; json.loads is lenient
                raise _Invalid("invalid_field", path, _NOT_FINITE)
            return number
        if type(value) is str and value in _NON_FINITE:
            return _NON_FINITE[value]
        raise _Invalid("invalid_field", path,
                       f'must be a number (or "NaN", "Infinity", "-Infinity"), {_got(value)}')
    if cpp == _FD.CPPTYPE_BOOL:
        if type(value) is not bool:
            raise _Invalid("invalid_field", path, f"must be true or false, {_got(value)}")
        return value
    return _string(value, path)


_NOT_FINITE = (
    "is not a finite number (a bare NaN or Infinity, or a number beyond the double range "
    'such as 1e400); send a non-finite value as the string "NaN", "Infinity" or "-Infinity"')


def _got(value: Any) -> str:
    """What a wrongly typed JSON value was, short: ``got "1"``, ``got 1.5``, ``got an array``."""
    if isinstance(value, dict):
        return "got an object"
    if isinstance(value, list):
        return "got an array"
    text = json.dumps(value)
    return f"got {text if len(text) <= 60 else text[:57] + '...'}"


def _string(value: Any, path: str) -> str:
    if type(value) is not str:
        raise _Invalid("invalid_field", path, f"must be a string, {_got(value)}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _Invalid("invalid_utf8", path, f"is not valid UTF-8 ({exc.reason})") from exc
    return value


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _bare(desc: Any, value: Any, path: str, caffe2: Caffe2Reader,
          problems: list[Diagnostic]) -> Any:
    """A ``json_bare_oneof`` message: the member whose JSON type matches ``value``."""
    cls = _cls(desc)
    if value is None:
        return cls()
    if type(value) is dict and len(value) == 1:  # {"dense": "y_grad"}: a member by its name
        (key, inner), = value.items()
        member = desc.fields_by_name.get(key)
        if member is not None and (member.message_type is None) != (type(inner) is dict):
            if member.message_type is not None:
                bare = "{" + ", ".join(f'"{f.name}": ...' for f in member.message_type.fields) + "}"
            elif type(inner) is str and len(inner) <= 200 and _utf8(inner):
                bare = json.dumps(inner, ensure_ascii=False)
            else:
                bare = "a string"
            raise _Invalid("invalid_field", path, (
                f'names the member {key}; in JSON the member is written bare: {bare}, not '
                f'{{"{key}": ...}}'))
    for f in desc.fields:
        is_message = f.message_type is not None
        if is_message == (type(value) is dict) and (is_message or type(value) is str):
            return cls(**{f.name: _single(f, value, path, caffe2, problems)})
    names = " or ".join(f"{f.name} ({'an object' if f.message_type else 'a string'})"
                        for f in desc.fields)
    raise _Invalid("invalid_field", path, f"must be null, {names}")


# -- encoding ------------------------------------------------------------------------------------


def _json_float(v: float) -> float | str:
    if v != v:
        return "NaN"
    if v in (math.inf, -math.inf):
        return "Infinity" if v > 0 else "-Infinity"
    return v


def _scalar_printer(f: Any) -> Callable[[Any], Any] | None:
    sub = f.message_type
    if sub is not None:
        if _is_caffe2(sub):
            return lambda m: caffe2_json.to_json(m, _memo.get())
        if sub not in _building:  # bound now (answers hold thousands of entries) ...
            return _printer(sub)
        return lambda m: _printer(sub)(m)  # ... unless it contains itself: bound lazily
    if f.cpp_type in _FLOATS:
        return _json_float
    return None


_Printer = Callable[[message.Message, dict[str, Any]], None]


def _field_printer(f: Any, opts: Any) -> _Printer:
    name = f.name
    if opts.inline:
        sub = _printer(f.message_type)

        def inline(msg: message.Message, out: dict[str, Any]) -> None:
            out.update(sub(getattr(msg, name)))

        return inline
    omit = bool(opts.omit_unset)
    if opts.object:
        key_name = f.message_type.fields[0].name
        value_field = f.message_type.fields[1]
        value_name, conv = value_field.name, _scalar_printer(value_field)

        def entries(msg: message.Message, out: dict[str, Any]) -> None:
            items = getattr(msg, name)
            if items or not omit:
                out[name] = {getattr(e, key_name): (conv(getattr(e, value_name))
                             if conv is not None and e.HasField(value_name)
                             else None) for e in items}

        return entries
    conv = _scalar_printer(f)
    if f.is_repeated:
        def repeated(msg: message.Message, out: dict[str, Any]) -> None:
            items = getattr(msg, name)
            if items or not omit:
                out[name] = list(items) if conv is None else [conv(v) for v in items]

        return repeated

    def single(msg: message.Message, out: dict[str, Any]) -> None:
        if msg.HasField(name):
            v = getattr(msg, name)
            out[name] = v if conv is None else conv(v)
        elif not omit:
            out[name] = None

    return single


#: Message types whose printer is being built (a type that contains itself binds lazily).
_building: set[Any] = set()


@cache
def _printer(desc: Any) -> Callable[[message.Message], Any]:
    _building.add(desc)
    try:
        return _make_printer(desc)
    finally:
        _building.discard(desc)


def _make_printer(desc: Any) -> Callable[[message.Message], Any]:
    if bare_oneof(desc):
        oneof = desc.oneofs[0].name
        convs = {f.name: _scalar_printer(f) for f in desc.fields}

        def bare(msg: message.Message) -> Any:
            member = msg.WhichOneof(oneof)
            if member is None:
                return None
            conv = convs[member]
            v = getattr(msg, member)
            return v if conv is None else conv(v)

        return bare
    printers = [_field_printer(f, json_options(f)) for f in desc.fields]

    def to_dict(msg: message.Message) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for p in printers:
            p(msg, out)
        return out

    return to_dict


def encode(msg: message.Message) -> Any:
    """JSON-ready form of a ``netgrad.v1`` answer message (see the module doc).

    Equal Caffe2 sub-messages that repeat (arguments, device options) share one dict in the
    result: serialize it, do not modify it.

    Raises:
        DecodeError: an ``Argument.s``/``strings`` inside holds bytes that are not UTF-8.
    """
    token = _memo.set({})
    try:
        return _printer(msg.DESCRIPTOR)(msg)
    finally:
        _memo.reset(token)
