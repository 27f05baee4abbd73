"""Checking twins of the wire schemas: upb validates UTF-8 and flags sub-nets, in C.

proto2 ``string`` fields are not checked for UTF-8 by the parser, and finding sub-nets
(``Argument.n``/``nets``) takes a walk over every op. A *twin* of a message type is built
at run time from the same descriptors, in a private pool, with three changes:

* the files are edition 2023 with ``utf8_validation = VERIFY``, so parsing bytes with the
  twin fails on any string field that is not UTF-8 (``bytes`` fields stay unchecked);
* ``Argument.n`` and ``Argument.nets`` hold a ``SubNetDef``: a NetDef with one extra
  *required* field that never occurs on the wire, so ``IsInitialized()`` of a parsed twin
  is false when the message holds a sub-net (or misses a required field, as the original);
* options (``packed``, custom ones) are dropped: they change neither parsing nor the wire.

Parsing with the twin costs what parsing costs (tens of µs for ResNet-50); nothing walks the
message in Python unless one of the two checks says there is something to look at.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory

_FDP = descriptor_pb2.FieldDescriptorProto
_FEATURES = descriptor_pb2.FeatureSet
#: The sentinel field of ``SubNetDef`` (the largest field number protobuf allows).
SUBNET_MARKER = 536_870_911
_ARGUMENT = "Argument"
_NET_FIELDS = ("n", "nets")


def _files(desc: Any) -> list[descriptor_pb2.FileDescriptorProto]:
    """The file of ``desc`` and its dependencies, dependencies first."""
    out: list[descriptor_pb2.FileDescriptorProto] = []
    seen: set[str] = set()

    def add(f: Any) -> None:
        if f.name in seen:
            return
        seen.add(f.name)
        for dep in f.dependencies:
            add(dep)
        fdp = descriptor_pb2.FileDescriptorProto()
        f.CopyToProto(fdp)
        out.append(fdp)

    add(desc.file)
    return out


def _convert_fields(fields: Any) -> None:
    for f in fields:
        required = f.label == _FDP.LABEL_REQUIRED
        f.ClearField("options")
        if required:
            f.label = _FDP.LABEL_OPTIONAL
            f.options.features.field_presence = _FEATURES.LEGACY_REQUIRED


def _convert_messages(msgs: Any) -> None:
    for m in msgs:
        m.ClearField("options")
        _convert_fields(m.field)
        del m.extension[:]
        _convert_messages(m.nested_type)
        for e in m.enum_type:
            e.ClearField("options")


def _twin_file(fdp: descriptor_pb2.FileDescriptorProto) -> descriptor_pb2.FileDescriptorProto:
    out = descriptor_pb2.FileDescriptorProto()
    out.CopyFrom(fdp)
    if out.name.startswith("google/protobuf/"):
        return out
    out.syntax = "editions"
    out.edition = descriptor_pb2.EDITION_2023
    out.ClearField("options")
    out.options.features.utf8_validation = _FEATURES.VERIFY
    out.options.features.enum_type = _FEATURES.CLOSED
    out.options.features.repeated_field_encoding = _FEATURES.EXPANDED
    del out.extension[:]
    _convert_messages(out.message_type)
    for e in out.enum_type:
        e.ClearField("options")
    for m in out.message_type:
        if m.name != _ARGUMENT:
            continue
        for f in m.field:
            if f.name in _NET_FIELDS:
                f.type_name = f".{out.package}.SubNetDef"
    if any(m.name == _ARGUMENT for m in out.message_type):
        netdef = next(m for m in out.message_type if m.name == "NetDef")
        sub = out.message_type.add()
        sub.CopyFrom(netdef)
        sub.name = "SubNetDef"
        marker = sub.field.add(name="subnet_marker", number=SUBNET_MARKER, type=_FDP.TYPE_BOOL,
                               label=_FDP.LABEL_OPTIONAL)
        marker.options.features.field_presence = _FEATURES.LEGACY_REQUIRED
    return out


@cache
def _pool_for(file_name: str, desc: Any) -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    for fdp in _files(desc):
        pool.Add(_twin_file(fdp))
    return pool


def twin(cls: type[message.Message]) -> type[message.Message]:
    """The checking twin of message class ``cls`` (same wire format; see the module doc)."""
    return _twin(cls.DESCRIPTOR)


@cache
def _twin(desc: Any) -> type[message.Message]:
    pool = _pool_for(desc.file.name, desc)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(desc.full_name))
