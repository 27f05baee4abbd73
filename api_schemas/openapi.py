"""JSON Schemas of the API messages, built from the ``.proto`` descriptors and their comments.

:func:`component_schemas` turns a ``FileDescriptorSet`` compiled with source info (comments)
into OpenAPI components: one schema per ``netgrad.v1`` message (named by its short name) and
per Caffe2 message they reach (named ``caffe2.<Message>``). Each property's description is
the comment above the field in the ``.proto`` file; a field without one is an error, so every
field stays documented. The schemas follow the JSON form of the messages described at the
top of ``netgrad.proto`` (the ``(json)`` options): protobuf's JSON mapping for Caffe2
messages with ``Argument.s``/``strings`` as UTF-8 text, strict types for ``netgrad.v1``.

Used by ``python -m api_schemas.generate``, which writes the result to
``api_schemas/openapi_schemas.py``; the service reads that file, so it needs no compiler at run
time.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from api_schemas import TEXT_BYTES_FIELDS

PREFIX = "#/components/schemas/"
NETGRAD = "netgrad.v1"
#: Field and message option numbers of ``netgrad.proto`` (``json``, ``json_bare_oneof``).
JSON_FIELD_OPTION = 50710
BARE_ONEOF_OPTION = 50711
#: Caffe2 fields whose bytes travel as UTF-8 text in JSON.
TEXT_BYTES = TEXT_BYTES_FIELDS
#: Messages that only configure the schema itself.
OPTION_MESSAGES = {"netgrad.v1.JsonField"}

_FDP = descriptor_pb2.FieldDescriptorProto
_INT64 = {_FDP.TYPE_INT64, _FDP.TYPE_UINT64, _FDP.TYPE_SINT64, _FDP.TYPE_FIXED64,
          _FDP.TYPE_SFIXED64}
_INT32 = {_FDP.TYPE_INT32, _FDP.TYPE_UINT32, _FDP.TYPE_SINT32, _FDP.TYPE_FIXED32,
          _FDP.TYPE_SFIXED32}
_FLOAT = {_FDP.TYPE_FLOAT, _FDP.TYPE_DOUBLE}
_NON_FINITE = {"enum": ["NaN", "Infinity", "-Infinity"]}
# Path components of SourceCodeInfo (descriptor.proto field numbers).
_MESSAGE_TYPE, _NESTED_TYPE, _FIELD = 4, 3, 2


class SchemaError(ValueError):
    """The descriptors cannot be turned into documented schemas (e.g. a field lacks a comment)."""


class _Options:
    """Reads the ``(json)`` options of fields and messages, whatever pool parsed them."""

    def __init__(self, fds: descriptor_pb2.FileDescriptorSet) -> None:
        pool = descriptor_pool.DescriptorPool()
        for f in fds.file:
            pool.Add(f)
        view = descriptor_pb2.FileDescriptorProto(
            name="netgrad_options_view.proto", package="view", syntax="proto2",
            dependency=["api_schemas/netgrad.proto"],
        )
        msg = view.message_type.add(name="View")
        msg.field.add(name="json", number=JSON_FIELD_OPTION, type=_FDP.TYPE_MESSAGE,
                      label=_FDP.LABEL_OPTIONAL, type_name=".netgrad.v1.JsonField")
        msg.field.add(name="bare_oneof", number=BARE_ONEOF_OPTION, type=_FDP.TYPE_BOOL,
                      label=_FDP.LABEL_OPTIONAL)
        pool.Add(view)
        self._view = message_factory.GetMessageClass(pool.FindMessageTypeByName("view.View"))

    def field(self, f: _FDP) -> Any:
        return self._view.FromString(f.options.SerializeToString()).json

    def bare_oneof(self, m: descriptor_pb2.DescriptorProto) -> bool:
        return bool(self._view.FromString(m.options.SerializeToString()).bare_oneof)


def _comments(fds: descriptor_pb2.FileDescriptorSet) -> dict[tuple[str, ...], str]:
    """Leading (else trailing) comment of every message and field.

    Keyed by ``(package, message, ..., field)``; whitespace is collapsed.
    """
    out: dict[tuple[str, ...], str] = {}
    for f in fds.file:
        by_path = {
            tuple(loc.path): (loc.leading_comments or loc.trailing_comments)
            for loc in f.source_code_info.location
        }
        _walk_comments(f.message_type, (), (f.package,), _MESSAGE_TYPE, by_path, out)
    return {k: " ".join(v.split()) for k, v in out.items()}


def _walk_comments(msgs: Any, path: tuple[int, ...], names: tuple[str, ...], tag: int,
                   by_path: dict[tuple[int, ...], str],
                   out: dict[tuple[str, ...], str]) -> None:
    for i, m in enumerate(msgs):
        mpath, mnames = (*path, tag, i), (*names, m.name)
        out[mnames] = by_path.get(mpath, "")
        for j, fld in enumerate(m.field):
            out[(*mnames, fld.name)] = by_path.get((*mpath, _FIELD, j), "")
        _walk_comments(m.nested_type, mpath, mnames, _NESTED_TYPE, by_path, out)


def _component_name(full_name: str) -> str:
    package, _, rest = full_name.partition(".")
    if full_name.startswith(NETGRAD + "."):
        return full_name[len(NETGRAD) + 1:]
    return f"{package}.{rest}"


class _Builder:
    def __init__(self, fds: descriptor_pb2.FileDescriptorSet) -> None:
        self.opts = _Options(fds)
        self.comments = _comments(fds)
        self.messages: dict[str, descriptor_pb2.DescriptorProto] = {}
        self.enums: dict[str, descriptor_pb2.EnumDescriptorProto] = {}
        for f in fds.file:
            self._index(f.package, f.message_type, f.enum_type)
        self.out: dict[str, dict[str, Any]] = {}

    def _index(self, prefix: str, msgs: Any, enums: Any) -> None:
        for e in enums:
            self.enums[f"{prefix}.{e.name}"] = e
        for m in msgs:
            name = f"{prefix}.{m.name}"
            self.messages[name] = m
            self._index(name, m.nested_type, m.enum_type)

    def describe(self, full_name: str, field: str | None = None) -> str:
        """The comment of a message (``field`` None) or of one of its fields."""
        package = NETGRAD if full_name.startswith(NETGRAD + ".") else full_name.split(".")[0]
        names = full_name[len(package) + 1:].split(".")
        key = (package, *names, *([field] if field else []))
        text = self.comments.get(key, "")
        if field is not None and not text:
            raise SchemaError(f"field {full_name}.{field} has no comment in its .proto file")
        return text

    def message(self, full_name: str) -> None:
        name = _component_name(full_name)
        if name in self.out:
            return
        m = self.messages[full_name]
        self.out[name] = {}  # placeholder against recursion
        if full_name.startswith(NETGRAD + ".") and self.opts.bare_oneof(m):
            self.out[name] = self._bare_oneof(full_name, m)
            return
        props: dict[str, Any] = {}
        required: list[str] = []
        self._properties(full_name, m, props, required)
        schema: dict[str, Any] = {"type": "object", "title": name}
        text = self.describe(full_name)
        if text:
            schema["description"] = text
        schema["properties"] = props
        if required:
            schema["required"] = required
        schema["additionalProperties"] = False
        self.out[name] = schema

    def _properties(self, full_name: str, m: descriptor_pb2.DescriptorProto,
                    props: dict[str, Any], required: list[str]) -> None:
        ours = full_name.startswith(NETGRAD + ".")
        for f in m.field:
            opts = self.opts.field(f) if ours else None
            if opts is not None and opts.inline:
                sub = f.type_name.lstrip(".")
                self._properties(sub, self.messages[sub], props, required)
                continue
            s = self._field(full_name, f, opts)
            s["description"] = self.describe(full_name, f.name)
            props[f.name] = s
            if opts is not None and opts.required:
                required.append(f.name)

    def _bare_oneof(self, full_name: str, m: descriptor_pb2.DescriptorProto) -> dict[str, Any]:
        variants: list[dict[str, Any]] = [{"type": "null", "description": "none"}]
        for f in m.field:
            s = self._scalar(full_name, f, ours=True)
            s["description"] = self.describe(full_name, f.name)
            variants.append(s)
        return {"title": _component_name(full_name), "description": self.describe(full_name),
                "anyOf": variants}

    def _field(self, full_name: str, f: _FDP, opts: Any) -> dict[str, Any]:
        ours = full_name.startswith(NETGRAD + ".")
        repeated = f.label == _FDP.LABEL_REPEATED
        if opts is not None and opts.object:
            entry = self.messages[f.type_name.lstrip(".")]
            value = self._scalar(f.type_name.lstrip("."), entry.field[1], ours=True)
            obj = {"type": "object", "additionalProperties": value}
            if opts.or_keys:
                return {"anyOf": [obj, {"type": "array", "items": {"type": "string"}}]}
            return obj
        item = self._scalar(full_name, f, ours)
        if repeated:
            return {"type": "array", "items": item}
        if ours and not (opts is not None and opts.required):
            return _nullable(item)
        return item

    def _scalar(self, full_name: str, f: _FDP, ours: bool) -> dict[str, Any]:
        t = f.type
        if t in (_FDP.TYPE_MESSAGE, _FDP.TYPE_GROUP):
            sub = f.type_name.lstrip(".")
            self.message(sub)
            return {"$ref": PREFIX + _component_name(sub)}
        if t == _FDP.TYPE_ENUM:
            names = [v.name for v in self.enums[f.type_name.lstrip(".")].value]
            return {"anyOf": [{"enum": names}, {"type": "integer"}]}
        if t == _FDP.TYPE_BOOL:
            return {"type": "boolean"}
        if t in _INT64 or t in _INT32:
            fmt = "int64" if t in _INT64 else "int32"
            if ours or t in _INT32:
                return {"type": "integer", "format": fmt}
            return {"anyOf": [{"type": "integer"}, {"type": "string"}], "format": fmt}
        if t in _FLOAT:
            fmt = "float" if t == _FDP.TYPE_FLOAT else "double"
            return {"anyOf": [{"type": "number", "format": fmt}, dict(_NON_FINITE)]}
        if t == _FDP.TYPE_BYTES and (full_name, f.name) not in TEXT_BYTES:
            return {"type": "string", "contentEncoding": "base64"}
        return {"type": "string"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` or JSON null (answers show unset netgrad.v1 fields as null)."""
    if set(schema) == {"anyOf"}:
        return {"anyOf": [*schema["anyOf"], {"type": "null"}]}
    if "anyOf" in schema:  # e.g. a float with its format: keep the format outside
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        return {"anyOf": [*schema["anyOf"], {"type": "null"}], **rest}
    return {"anyOf": [schema, {"type": "null"}]}


def component_schemas(fds: descriptor_pb2.FileDescriptorSet) -> dict[str, dict[str, Any]]:
    """OpenAPI component schemas of every ``netgrad.v1`` message and the messages they reach.

    Raises:
        SchemaError: a field has no comment.
    """
    b = _Builder(fds)
    for full_name in b.messages:
        if full_name.startswith(NETGRAD + ".") and full_name not in OPTION_MESSAGES:
            b.message(full_name)
    # Every field of both files is documented, reachable or not.
    for full_name, m in b.messages.items():
        if full_name.startswith("google."):
            continue
        for f in m.field:
            b.describe(full_name, f.name)
    return dict(sorted(b.out.items()))
