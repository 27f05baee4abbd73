"""The service's JSON form of its messages, both ways (for ``encoding="json"``).

The rules are those stated at the top of the server's ``netgrad.proto``: protobuf's JSON
mapping with proto field names, except that ``caffe2.Argument.s``/``strings`` are UTF-8 text
(not base64); a ``Gradient`` is ``null``, a blob name or ``{"indices", "values"}``; a
repeated field with ``(json).object`` is one JSON object ``{field 1: field 2}``; a field with
``(json).inline`` has its fields at the top level. Read from the descriptors and the
``(json)`` options, so the client follows the schema it was generated from.
"""

from __future__ import annotations

import base64
import math
from typing import Any, TypeVar

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from netgrad.proto import netgrad_pb2

M = TypeVar("M", bound=Message)

TEXT_BYTES = {("caffe2.Argument", "s"), ("caffe2.Argument", "strings")}
_INTS = {FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT32,
         FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SINT64,
         FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_FIXED64,
         FieldDescriptor.TYPE_SFIXED32, FieldDescriptor.TYPE_SFIXED64}
_FLOATS = {FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE}
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _opts(f: Any) -> Any:
    if not f.containing_type.full_name.startswith("netgrad.v1."):
        return None
    return f.GetOptions().Extensions[netgrad_pb2.json]


def _bare(desc: Any) -> bool:
    if not desc.full_name.startswith("netgrad.v1."):
        return False
    return bool(desc.GetOptions().Extensions[netgrad_pb2.json_bare_oneof])


def _is_repeated(f: Any) -> bool:
    return bool(f.is_repeated)


# -- message -> JSON ---------------------------------------------------------------------------
def _scalar_out(f: Any, value: Any) -> Any:
    if f.type == FieldDescriptor.TYPE_BYTES:
        if (f.containing_type.full_name, f.name) in TEXT_BYTES:
            return value.decode("utf-8")
        return base64.b64encode(value).decode("ascii")
    if f.type == FieldDescriptor.TYPE_ENUM:
        v = f.enum_type.values_by_number.get(value)
        return v.name if v is not None else value
    if f.type in _FLOATS and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def _value_out(f: Any, value: Any) -> Any:
    if f.type == FieldDescriptor.TYPE_MESSAGE:
        return to_json(value)
    return _scalar_out(f, value)


def to_json(msg: Message) -> Any:
    """The JSON form of ``msg`` (set fields only, as a request needs)."""
    desc: Any = msg.DESCRIPTOR
    if _bare(desc):
        kind = msg.WhichOneof(desc.oneofs[0].name)
        return None if kind is None else _value_out(desc.fields_by_name[kind],
                                                     getattr(msg, kind))
    out: dict[str, Any] = {}
    f: Any
    for f, value in msg.ListFields():
        opts = _opts(f)
        if opts is not None and opts.inline:
            out.update(to_json(value))
        elif opts is not None and opts.object:
            key_f, val_f = f.message_type.fields[0], f.message_type.fields[1]
            out[f.name] = {
                getattr(e, key_f.name): (_value_out(val_f, getattr(e, val_f.name))
                                         if e.HasField(val_f.name) else None)
                for e in value
            }
        elif _is_repeated(f):
            out[f.name] = [_value_out(f, v) for v in value]
        else:
            out[f.name] = _value_out(f, value)
    for f in desc.fields:  # a required repeated field is sent even when empty (shape [])
        opts = _opts(f)
        if opts is not None and opts.required and f.is_repeated and f.name not in out:
            out[f.name] = {} if opts.object else []
    return out


# -- JSON -> message ---------------------------------------------------------------------------
def _scalar_in(f: Any, value: Any) -> Any:
    if f.type == FieldDescriptor.TYPE_BYTES:
        if (f.containing_type.full_name, f.name) in TEXT_BYTES:
            return value.encode("utf-8")
        return base64.b64decode(value)
    if f.type == FieldDescriptor.TYPE_ENUM and isinstance(value, str):
        return f.enum_type.values_by_name[value].number
    if f.type in _INTS and isinstance(value, str):
        return int(value)
    if f.type in _FLOATS and isinstance(value, str):
        return _NON_FINITE[value]
    return value


def _fill(msg: Message, obj: Any) -> None:
    desc: Any = msg.DESCRIPTOR
    if _bare(desc):
        if obj is None:
            return
        for f in desc.fields:
            if f.type == FieldDescriptor.TYPE_MESSAGE and isinstance(obj, dict):
                _fill(getattr(msg, f.name), obj)
                return
            if f.type != FieldDescriptor.TYPE_MESSAGE and not isinstance(obj, dict):
                setattr(msg, f.name, _scalar_in(f, obj))
                return
        raise ValueError(f"{desc.full_name}: unexpected JSON value {obj!r}")
    if not isinstance(obj, dict):
        raise ValueError(f"{desc.full_name}: expected a JSON object, got {obj!r}")
    inline = {f.name: f for f in desc.fields
              if (o := _opts(f)) is not None and o.inline}
    inline_fields = {sub.name: f for f in inline.values() for sub in f.message_type.fields}
    for key, value in obj.items():
        if key in inline_fields:
            _fill(getattr(msg, inline_fields[key].name), {key: value})
            continue
        f = desc.fields_by_name.get(key) or _by_camel(desc, key)
        if f is None:
            raise ValueError(f"{desc.full_name}: unknown field {key!r}")
        if value is None:
            continue
        opts = _opts(f)
        target = getattr(msg, f.name)
        if opts is not None and opts.object:
            key_f, val_f = f.message_type.fields[0], f.message_type.fields[1]
            items = value.items() if isinstance(value, dict) else ((k, None) for k in value)
            for k, v in items:
                entry = target.add()
                setattr(entry, key_f.name, k)
                if v is None:
                    continue
                if val_f.type == FieldDescriptor.TYPE_MESSAGE:
                    _fill(getattr(entry, val_f.name), v)
                else:
                    setattr(entry, val_f.name, _scalar_in(val_f, v))
        elif _is_repeated(f):
            for v in value:
                if f.type == FieldDescriptor.TYPE_MESSAGE:
                    _fill(target.add(), v)
                else:
                    target.append(_scalar_in(f, v))
        elif f.type == FieldDescriptor.TYPE_MESSAGE:
            _fill(target, value)
            if not target.ListFields() and not _bare(f.message_type):
                target.SetInParent()
        else:
            setattr(msg, f.name, _scalar_in(f, value))


def _by_camel(desc: Any, key: str) -> Any:
    for f in desc.fields:
        if f.json_name == key:
            return f
    return None


def from_json(obj: Any, cls: type[M]) -> M:
    """A ``cls`` message from its JSON form (``null`` fields are left unset).

    Raises:
        ValueError: an unknown field or a value of the wrong kind.
    """
    msg = cls()
    _fill(msg, obj)
    return msg
