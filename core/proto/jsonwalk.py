"""Every problem of a JSON Caffe2 message, on the error path of :mod:`core.proto.jsonmap`.

json_format stops at the first value it refuses. When it has refused one (or before it
parses a NetDef of many ops, ``jsonmap.WALK_FIRST_OPS``), the walk here goes over the whole
decoded body, so that an answer names each unknown key, each wrongly typed value and each
string where a message belongs, in body order, not only the first (one value per op). It
decides nothing on its own: a value is only called wrong after json_format refused that
very value (asked about it alone, ``{key: value}`` in its parent message), and
:mod:`core.proto.jsonmap` words each refusal as it words the first one. Values that
json_format certainly takes (a string for a string field, an int in range for an int
field...) are not asked about, so a large body with one bad value costs one Python walk
over its keys (about 10 µs per op), no more: at most :data:`MAX_VISITS` keys and array
items, :data:`MAX_ASKS` questions and :data:`MAX_LISTED` problems.

Source: the protobuf JSON mapping (``google.protobuf.json_format.ParseDict``), spec §1
(wire schema), and the house rule that a 4xx answer loses no problem.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from functools import cache
from typing import Any

from google.protobuf import descriptor, json_format, message_factory

from api_schemas import TEXT_BYTES_FIELDS
from core.errors import DecodeError
from core.types import Diagnostic

#: Most keys and array items one walk visits (then it reports what it found so far): far
#: above what a body within ``NETGRAD_MAX_OPS`` and ``NETGRAD_MAX_JSON_CONTAINERS`` holds,
#: so that the walk, cheaper than one parse, always reaches a body's last value.
MAX_VISITS = 20_000_000
#: Most problems one walk lists.
MAX_LISTED = 100
#: Most values one walk asks json_format about (about 17 µs each): then it stops, and
#: reports what it found (a body of many values it cannot be sure of costs no more).
MAX_ASKS = 2000
#: json_format's refusals of a value, as :func:`every_problem` catches them.
REFUSALS = (json_format.ParseError, ValueError, TypeError, AttributeError, OverflowError)

#: Python's type names as JSON kinds.
JSON_KINDS = {"list": "an array", "dict": "an object", "str": "a string", "int": "a number",
              "float": "a number", "bool": "true or false", "NoneType": "null"}

_FD = descriptor.FieldDescriptor
_INT_RANGES = {
    _FD.TYPE_INT32: (-2**31, 2**31 - 1), _FD.TYPE_SINT32: (-2**31, 2**31 - 1),
    _FD.TYPE_SFIXED32: (-2**31, 2**31 - 1), _FD.TYPE_UINT32: (0, 2**32 - 1),
    _FD.TYPE_FIXED32: (0, 2**32 - 1), _FD.TYPE_INT64: (-2**63, 2**63 - 1),
    _FD.TYPE_SINT64: (-2**63, 2**63 - 1), _FD.TYPE_SFIXED64: (-2**63, 2**63 - 1),
    _FD.TYPE_UINT64: (0, 2**64 - 1), _FD.TYPE_FIXED64: (0, 2**64 - 1),
}
#: Largest magnitude json_format takes for a float (float32) field, and for a double.
_FLOAT_MAX = 3.4028234663852886e38
_DOUBLE_MAX = 1.7976931348623157e308
#: Strings json_format reads as an integer / a float the way ``int()`` / ``float()`` do.
_DIGITS = re.compile(r"-?[0-9]+").fullmatch
_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?").fullmatch
_NON_FINITE = frozenset({"NaN", "Infinity", "-Infinity"})

#: Words a refusal of one value: ``(exception, {key: value}, message class)`` -> the error
#: json_format's first refusal would give (``core.proto.jsonmap._located``).
Locate = Callable[[Exception, Any, Any], DecodeError]
#: Reads one text field's value (``Argument.s`` / ``strings``): ``(field, value, path)`` ->
#: the value as base64, as json_format reads it; raises the DecodeError decoding would.
TextCheck = Callable[[Any, Any, str], Any]


def kind(value: Any) -> str:
    """A JSON value's kind in words (``an array``, ``a string``...)."""
    return JSON_KINDS.get(type(value).__name__, type(value).__name__)


@cache
def by_json_name(desc: Any) -> dict[str, Any]:
    """A message type's fields by their lowerCamelCase JSON names."""
    return {f.json_name: f for f in desc.fields}


@cache
def _plan(desc: Any) -> dict[str, tuple[Any, str, bool, Any, type | None]]:
    """Per JSON key of message type ``desc`` (proto and lowerCamelCase names): the field,
    its proto name, whether it is a text field, the message type the walk enters (``None``
    for scalars, maps and well-known types, which json_format is asked about), and the one
    Python type json_format surely takes (str for a string or a text field, bool for a
    bool), if any."""
    out = {}
    for f in desc.fields:
        m = f.message_type
        if m is not None and (m.GetOptions().map_entry
                              or m.full_name.startswith("google.protobuf.")):
            m = None
        is_text = (desc.full_name, f.name) in TEXT_BYTES_FIELDS
        plain = str if is_text else None if f.message_type is not None else {
            _FD.TYPE_STRING: str, _FD.TYPE_BOOL: bool}.get(f.type)
        out[f.name] = out[f.json_name] = (f, f.name, is_text, m, plain)
    return out


def _empty(value: Any) -> bool:
    """Whether ``value`` is ``""`` or ``[]``, which json_format takes for an empty message
    (it reads the keys of a message's value, and these have none)."""
    return (type(value) is str or type(value) is list) and not value


def _before(obj: dict[str, Any], a: str, b: str) -> bool:
    """Whether key ``a`` comes before key ``b`` in ``obj``."""
    for k in obj:
        if k == a or k == b:
            return k == a
    return False


def surely_taken(field: Any, value: Any) -> bool:
    """Whether json_format certainly takes ``value`` for one element of ``field`` (False:
    ask it). Only plain cases: a string for a string, an int in range (or its decimal
    digits), a finite number (or its plain digits, ``NaN``, ``Infinity``), an enum's name
    or number."""
    t, v = field.type, type(value)
    if t == _FD.TYPE_STRING:
        return v is str
    if t in _INT_RANGES:
        if v is str and len(value) <= 21 and _DIGITS(value):
            value, v = int(value), int
        lo, hi = _INT_RANGES[t]
        return v is int and lo <= value <= hi
    if t in (_FD.TYPE_DOUBLE, _FD.TYPE_FLOAT):
        if v is str:
            if value in _NON_FINITE:
                return True
            if len(value) > 40 or not _NUMBER(value):
                return False
            value, v = float(value), float
        top = _FLOAT_MAX if t == _FD.TYPE_FLOAT else _DOUBLE_MAX
        return (v is float or v is int) and abs(value) <= top
    if t == _FD.TYPE_BOOL:
        return v is bool
    if t == _FD.TYPE_ENUM:
        e = field.enum_type
        return (v is str and value in e.values_by_name) or (v is int and value in
                                                            e.values_by_number)
    return False  # (bytes: json_format decides)


def shape_problem(m: Any, value: Any, here: str) -> Diagnostic:
    """The problem of ``value``, not a JSON object, where message type ``m`` belongs
    (json_format reads a string or an array there key by key, and its words would name a
    "field" that is a letter)."""
    return Diagnostic("error", "invalid_field", f"{here}: expected a JSON object ({m.name}), "
                      f"got {kind(value)}", path=here)


def is_shape(p: Diagnostic) -> bool:
    """Whether ``p`` is a :func:`shape_problem`."""
    return p.code == "invalid_field" and ": expected a JSON object (" in p.message


def nearest(desc: Any, name: str) -> tuple[str | None, list[str]]:
    """The field of message type ``desc`` nearest to unknown ``name`` (``None``: none is
    close), and all its field names (none for ``desc`` ``None``)."""
    fields = [f.name for f in desc.fields] if desc is not None else []
    close = difflib.get_close_matches(name, fields, n=1)
    return (close[0] if close else None), fields


def field_hint(close: str | None, fields: list[str]) -> str:
    """``; did you mean 'x'? (its fields: ...)``, from :func:`nearest`."""
    hint = f"; did you mean {close!r}?" if close else ""
    return hint + (f" (its fields: {', '.join(fields)})" if fields else "")


def unknown_problem(desc: Any, key: str, here: str) -> Diagnostic:
    """The problem of unknown key ``key`` of message type ``desc`` at path ``here``."""
    text = f"{here}: unknown field of {desc.full_name}{field_hint(*nearest(desc, key))}"
    return Diagnostic("error", "unknown_field", text, path=here)


def every_problem(obj: Any, desc: Any, locate: Locate, text: TextCheck) -> list[Diagnostic]:
    """Every unknown key of JSON message ``obj`` (type ``desc``) and the first refused value
    of each OperatorDef in it (at any depth; of the message itself, outside any op), in
    body order, each with its field path (proto names; an unknown key as written). One
    value per op: the one json_format would name first were that op alone, as the
    engine's problems name each offending op.

    Args:
        obj: the decoded JSON body, text fields still as text.
        desc: its message descriptor.
        locate: words json_format's refusal of one ``{key: value}``.
        text: reads the value of a text field (``api_schemas.TEXT_BYTES_FIELDS``).

    Returns:
        The problems (at most :data:`MAX_LISTED`; ``[]`` past the recursion limit).
    """
    problems: list[Diagnostic] = []
    refused_in: set[str] = set()  # (paths of the ops that have a refused value)
    visits, asks = [0], [0]

    def full(d: Diagnostic | None, rel: str, here: str, err: DecodeError) -> Diagnostic:
        if d is None or not d.path or not d.path.startswith(rel):
            return Diagnostic("error", "invalid_field", f"{here}: {err.message}", path=here)
        path = here + d.path[len(rel):]
        msg = path + d.message[len(d.path):] if d.message.startswith(d.path) else d.message
        return Diagnostic(d.severity, d.code, msg, path=path)

    def ask(d: Any, key: str, value: Any, rel: str, here: str, op: str) -> None:
        """Ask json_format about ``{key: value}`` alone; a refusal joins the problems with
        its path ``rel`` (below ``{key: value}``) written as ``here``, unless op ``op``
        (its path) already has one."""
        if op in refused_in:
            return
        asks[0] += 1
        if asks[0] > MAX_ASKS:
            raise _Stop
        cls = message_factory.GetMessageClass(d)
        try:
            json_format.ParseDict({key: value}, cls())
        except REFUSALS as exc:
            err = locate(exc, {key: value}, cls)
            problems.append(full(err.problems[0] if err.problems else None, rel, here, err))
            refused_in.add(op)

    def walk(value: Any, d: Any, path: str, op: str) -> None:
        plan = _plan(d)
        if d.full_name == "caffe2.OperatorDef":
            op = path
        for key, inner in value.items():
            visits[0] += 1
            if visits[0] > MAX_VISITS or len(problems) >= MAX_LISTED:
                raise _Stop
            k_plan = plan.get(key)
            if k_plan is None:
                problems.append(unknown_problem(d, key, f"{path}.{key}" if path else key))
                continue
            f, name, is_text, m, plain = k_plan
            if key != name and name in value:  # (both spellings of one field)
                if value[name] != inner and op not in refused_in:
                    refused_in.add(op)
                    here = f"{path}.{name}" if path else name
                    first, second = (name, key) if _before(value, name, key) else (key, name)
                    problems.append(Diagnostic(
                        "error", "invalid_field", twice(here, first, second), path=here))
                continue  # (the value under the proto name is walked)
            if inner is None:
                continue  # (null: unset, as json_format reads it)
            repeated, t = f.is_repeated, type(inner)
            if plain is not None:  # (a string or bool field: its type is all json_format asks)
                if t is plain if not repeated else (
                        t is list and all(type(x) is plain for x in inner)):
                    visits[0] += len(inner) if repeated else 0
                    continue
            here = f"{path}.{name}" if path else name
            if is_text:
                try:
                    inner = text(f, inner, here)  # (as base64, as json_format reads it)
                except DecodeError as exc:
                    if op not in refused_in:
                        refused_in.add(op)
                        problems.extend(exc.problems[:1] or [Diagnostic(
                            "error", "invalid_field", exc.message, path=here)])
                    continue
                if type(inner) is str if not repeated else type(inner) is list:
                    continue  # (text made base64 by us: taken)
            if repeated and t is not list:
                ask(d, key, inner, name, here, op)  # (json_format words "a JSON array")
                continue
            if not repeated:
                if m is not None and t is dict:
                    walk(inner, m, here, op)
                elif m is not None:
                    if not _empty(inner):
                        problems.append(shape_problem(m, inner, here))
                elif not surely_taken(f, inner):
                    ask(d, key, inner, name, here, op)
                continue
            for k, item in enumerate(inner):
                visits[0] += 1
                if visits[0] > MAX_VISITS or len(problems) >= MAX_LISTED:
                    raise _Stop
                if m is not None and type(item) is dict:
                    walk(item, m, f"{here}[{k}]", op)
                elif m is not None:
                    if not _empty(item):
                        problems.append(shape_problem(m, item, f"{here}[{k}]"))
                elif not surely_taken(f, item):
                    ask(d, key, [item], f"{name}[0]", f"{here}[{k}]", op)

    if type(obj) is dict:
        try:
            walk(obj, desc, "", "")
        except _Stop:
            pass
        except RecursionError:  # (depth is checked before decoding; a locating aid only)
            return []
    return problems[:MAX_LISTED]


class _Stop(Exception):
    """The walk visited, asked or found as much as it may."""


def twice(here: str, first: str, second: str) -> str:
    """The words for a field given under both its spellings, with different values."""
    return (f"{here} is given twice with different values (as {first!r} and {second!r}); "
            "give it once")


def refusal(found: list[Diagnostic]) -> DecodeError:
    """The DecodeError of the problems ``found`` (not empty) by the walk alone; a list of
    :data:`MAX_LISTED` says there may be more."""
    found = found[:MAX_LISTED]
    if len(found) == 1:
        return DecodeError(found[0].message, found)
    return DecodeError(f"{counted(found)}; the first: {found[0].message}", found)


def counted(found: list[Diagnostic]) -> str:
    """``3 invalid fields``, ``2 unknown fields``, ``4 invalid or unknown fields``... for a
    list of problems; a list of :data:`MAX_LISTED` says there may be more."""
    unknown = sum(p.code == "unknown_field" for p in found)
    what = ("unknown fields" if unknown == len(found) else
            "values are not JSON objects" if all(map(is_shape, found)) else
            "invalid or unknown fields" if unknown else "invalid fields")
    if len(found) >= MAX_LISTED:
        return f"{len(found)} or more {what} (the first {len(found)} are listed)"
    return f"{len(found)} {what}"


def merged(first: DecodeError, found: list[Diagnostic]) -> DecodeError:
    """``first`` (json_format's first refusal, as worded) with the others ``found``.

    ``first`` in front if the walk did not find it (a refusal of two fields together, such
    as a key given in both spellings); ``first`` alone when that makes one problem, or when
    ``first`` has no path (json_format's words, kept as they are).
    """
    head = first.problems[0] if first.problems else None
    if head is None or not head.path:
        return first  # (json_format's own words, not located: nothing to list beside)
    if head.path not in {p.path for p in found}:
        found = [head, *found]
    if len(found) <= 1:
        return first
    return refusal(found)
