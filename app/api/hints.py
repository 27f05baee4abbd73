"""Say what to do: a hint appended to the problems of common client mistakes.

Each rule looks at one problem (its code, path and message) and the request's route, and
appends the fix in words: the wrapper message a bare NetDef needs, the field a misspelt one
should be, the shape of ``inputs``, ``ys``, how to get a
partial gradient past an op without one, the route without its trailing slash. Problems are
never dropped or reordered; only their messages grow. ``tests/api/test_common_mistakes.py``
asserts the hint of each of the ten common mistakes.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Iterable, Sequence
from functools import cache
from typing import Any, TypeVar

from google.protobuf.descriptor import FieldDescriptor

from api_schemas import caffe2_pb2, netgrad_pb2
from api_schemas.openapi_schemas import SCHEMAS
from app.api.jsonmap import bare_oneof, json_options
from core.errors import DecodeError, NetgradError
from core.types import Diagnostic

E = TypeVar("E", bound=NetgradError)

#: The request message of each POST route.
ROUTE_MESSAGES: dict[str, Any] = {
    "/v1/gradients/op": netgrad_pb2.OpGradientRequest.DESCRIPTOR,
    "/v1/gradients/net": netgrad_pb2.NetGradientRequest.DESCRIPTOR,
    "/v1/verify": netgrad_pb2.VerifyRequest.DESCRIPTOR,
    "/v1/run": netgrad_pb2.RunRequest.DESCRIPTOR,
    "/v1/jobs": netgrad_pb2.JobRequest.DESCRIPTOR,
}

#: Routes whose request has a net, `ys` and `skip`.
NET_ROUTES = frozenset({"/v1/gradients/net", "/v1/verify", "/v1/run", "/v1/jobs"})

_NET_FIELDS = {f.name for f in caffe2_pb2.NetDef.DESCRIPTOR.fields}
_OP_FIELDS = {f.name for f in caffe2_pb2.OperatorDef.DESCRIPTOR.fields}
_OP_REQUEST = {f.name for f in netgrad_pb2.OpGradientRequest.DESCRIPTOR.fields}


@dataclasses.dataclass(frozen=True)
class _Body:
    """What :func:`_hint` knows of the whole body from all its problems."""

    #: the unknown top-level (and deeper) keys, by path
    unknown: frozenset[str]
    #: `net` is missing (a net route's bare NetDef has none)
    no_net: bool
    #: `op` holds a list (on /v1/gradients/op: the body is a NetDef, or its op list)
    op_list: bool


BARE_NET = (
    "the body looks like a bare caffe2.NetDef; send the request message {kind} that wraps it: "
    "{{\"net\": <your NetDef>, \"ys\": [\"<output blob>\"]{extra}}} (in binary: a "
    "netgrad.v1.{kind} whose field `net` holds the NetDef)"
)
BARE_OP = (
    "the body looks like a bare caffe2.OperatorDef; send the request message OpGradientRequest "
    "that wraps it: {\"op\": <your OperatorDef>, \"g_output\": [\"<output>_grad\", ...]} "
    "(one gradient entry, or null, per output of the op)"
)
NET_ON_OP_HINT = (
    "/v1/gradients/op takes one op: {\"op\": <OperatorDef>, \"g_output\": [...]}; for the "
    "gradient of a whole net send {\"net\": ..., \"ys\": [...]} to POST /v1/gradients/net"
)
OP_ON_NET_HINT = (
    "the body looks like an OpGradientRequest ({{\"op\": ..., \"g_output\": [...]}}): POST it "
    "to /v1/gradients/op, or send the op as a one-op net to {route}: "
    "{{\"net\": {{\"op\": [<your OperatorDef>]}}, {rest}}}"
)
BARE_OP_ON_NET_HINT = (
    "the body looks like a bare caffe2.OperatorDef; {route} takes a net: send "
    "{{\"net\": {{\"op\": [<your OperatorDef>]}}, {rest}}}, or POST {{\"op\": <your "
    "OperatorDef>, \"g_output\": [\"<output>_grad\", ...]}} to /v1/gradients/op"
)
JOB_HINT = (
    "a /v1/jobs body wraps a /v1/verify or a /v1/run request: {\"verify\": {\"net\": ..., "
    "\"ys\": [...], \"inputs\": [...]}} or {\"run\": {\"net\": ..., \"fetch\": [...]}} "
    "(in binary: a netgrad.v1.JobRequest)"
)
OP_ON_JOBS_HINT = (
    "the body looks like an OpGradientRequest ({\"op\": ..., \"g_output\": [...]}): one op's "
    "gradient needs no job, POST it to /v1/gradients/op, which answers at once; "
) + JOB_HINT
YS_HINT = (
    "name the outputs to differentiate in `ys`, e.g. \"ys\": [\"prob\"] (all-ones seeds) or "
    "\"ys\": {\"loss\": \"loss_grad\"} (a given seed blob); the net's external_output is the "
    "usual choice"
)
INPUTS_HINT = (
    "`inputs` is a list with one entry per fed blob: [{\"blob\": \"data\", \"tensor\": "
    "{\"shape\": [2, 4], \"data\": [...]}}, {\"blob\": \"fc_w\", \"random\": {\"shape\": "
    "[3, 4]}}], not an object keyed by blob"
)
VERIFY_NESTED_HINT = (
    "on /v1/verify the options (inputs, mode, tolerances, check, passes, seed) sit at the top "
    "level of the body: move them out of `verify` (the nested form is /v1/gradients/net's)"
)
PARTIAL_HINT = (
    "for a partial gradient, differentiate only outputs that do not depend on this op "
    "(`ys`), or leave the ops before the part you need out with `skip` (the first N ops)"
)
G_OUTPUT_HINT = (
    "give one entry per output of the op, in output order: a gradient blob name (the "
    "output's gradient, e.g. \"y_grad\"), or null for an output without one, e.g. "
    "\"g_output\": [\"y_grad\"]"
)
UNKNOWN_YS_HINT = "`ys` must name blobs that ops of the net write, e.g. its external_output"
PBTXT_HINT = (
    "the body looks like protobuf text format (.pbtxt); send it with Content-Type "
    "text/x-protobuf, written as the request message (e.g. `net { op { ... } } ys { blob: "
    "\"prob\" }`), or convert it to JSON"
)


ONE_COMMENT_LINE_HINT = (
    "the body is one line that starts with # (a comment), so all of it is a comment: were "
    "its newlines dropped? (curl --data @FILE drops them: send the file with --data-binary "
    "@FILE)"
)
JSON_AS_BINARY_HINT = (
    "the body looks like JSON; send it with Content-Type application/json"
)
TEXT_AS_BINARY_HINT = (
    "the body looks like protobuf text format; send it with Content-Type text/x-protobuf"
)


def media_hint(data: bytes) -> str | None:
    """What to send instead, for a body sent as binary protobuf that failed to parse as one
    but reads as JSON (``{`` or ``[`` first) or text format (a field name, then ``{``/``:``)."""
    head = data[:64]
    if any(b < 0x20 and b not in (9, 10, 13) for b in head):  # (binary: tags, lengths)
        return None
    head = head.lstrip()
    if head[:1] in (b"{", b"["):
        return JSON_AS_BINARY_HINT
    word = head.split(b" ", 1)[0].split(b"{", 1)[0].split(b":", 1)[0]
    if word and word.replace(b"_", b"").isalnum() and head[:1].isalpha() and (
            b"{" in head or b":" in head):
        return TEXT_AS_BINARY_HINT
    return None


#: Field types a binary protobuf writes as a varint (wire type 0); the others we expect
#: first in a request (messages, strings, bytes) are length-delimited (wire type 2).
_VARINT_TYPES = frozenset({
    FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_BOOL, FieldDescriptor.TYPE_ENUM,
})


_JSON_NEXT = frozenset(bytes([b]) for b in b'{["\' \t\r\n')


def binary_as_json_hint(head: bytes, desc: Any) -> str | None:
    """What to send instead, for a body sent as JSON or text that starts like binary
    protobuf of the route's request message ``desc``: its first byte is the tag of one of
    ``desc``'s fields, with that field's wire type (``0x0a`` for a ``net`` in field 1).

    The first byte may be a newline (``0x0a`` is both): a body whose second byte could
    continue JSON (``{``, ``[``, a quote, white space) is not taken for binary. Callers that
    hold the whole body check that it parses, too.
    """
    if len(head) < 2 or head[0] >= 0x80 or head[1:2] in _JSON_NEXT:
        return None
    field = desc.fields_by_number.get(head[0] >> 3)
    if field is None:
        return None
    wire = 0 if field.type in _VARINT_TYPES else 2 if field.type in (
        FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_STRING,
        FieldDescriptor.TYPE_BYTES) else None
    if wire is None or head[0] & 7 != wire:
        return None
    return (f"the body looks like binary protobuf (a {desc.name}); send it with Content-Type "
            "application/x-protobuf")


def refuse_other_media(data: bytes, exc: DecodeError) -> None:
    """Re-raise ``exc`` saying which Content-Type to use when a body sent as binary protobuf
    is JSON or text format (:func:`media_hint`); return otherwise.

    Raises:
        DecodeError: ``exc``'s code, the hint appended.
    """
    hint = media_hint(data)
    if hint is not None:
        code = exc.problems[0].code if exc.problems else None
        raise DecodeError.at(join_hint(exc.message, hint), code=code) from exc


@cache
def _top_fields(desc: Any) -> frozenset[str]:
    """The keys of ``desc``'s JSON object (an ``(json).inline`` field gives its own)."""
    out: set[str] = set()
    for f in desc.fields:
        if f.message_type is not None and json_options(f).inline:
            out |= _top_fields(f.message_type)
        else:
            out.add(f.name)
    return frozenset(out)


def nested_under(exc: E, prefix: str, desc: Any) -> E:
    """``exc`` with every problem whose path is a field path of ``desc`` (``mode``,
    ``inputs[2].tensor.data``) moved under ``prefix`` (``verify.mode``): the engine names
    fields of the request it was given, which a route may have taken from inside another
    (``/v1/gradients/net``'s ``verify``; a ``/v1/jobs`` error stays the synchronous route's
    problem). Sub-net paths (``op[0]:Do/...``) stay as they are."""
    fields = _top_fields(desc)
    exc.problems = [dataclasses.replace(p, path=f"{prefix}.{p.path}")
                    if p.path and re.split(r"[.\[]", p.path, maxsplit=1)[0] in fields else p
                    for p in exc.problems]
    return exc


def _json_field(desc: Any, name: str) -> Any:
    """The field a JSON key ``name`` of ``desc``'s object is (inline fields' own included)."""
    f = desc.fields_by_name.get(name)
    if f is not None:
        return f
    for g in desc.fields:
        if g.message_type is not None and json_options(g).inline:
            found = _json_field(g.message_type, name)
            if found is not None:
                return found
    return None


def _parent_message(route: str, path: str) -> Any:
    """The netgrad.v1 message whose JSON object holds the last key of ``path``
    (``run.inputs[0].tensor.type`` -> ``Tensor``), or ``None`` (a Caffe2 message, or a path
    that does not follow the request's fields)."""
    desc = ROUTE_MESSAGES.get(route)
    for seg in path.split(".")[:-1]:
        f = _json_field(desc, seg.split("[")[0]) if desc is not None else None
        if f is None or f.message_type is None:
            return None
        desc = f.message_type
        if bare_oneof(desc):  # (a Gradient object is its slice member's object)
            desc = next((m.message_type for m in desc.fields if m.message_type), None)
    if desc is None or not desc.full_name.startswith("netgrad."):
        return None
    return desc


@cache
def _known_fields(route: str) -> tuple[str, ...]:
    """Every field name of ``route``'s request, at any depth (a bare oneof's member names,
    never JSON keys, left out)."""
    return tuple(sorted(_field_paths(route)))


@cache
def _job_inner_fields() -> frozenset[str]:
    """Every field name a /v1/verify or /v1/run request has, at any depth."""
    return frozenset(_known_fields("/v1/verify")) | frozenset(_known_fields("/v1/run"))


@cache
def _field_paths(route: str) -> dict[str, str]:
    """Field name -> where it sits in the JSON request of ``route`` (dotted, shallowest first;
    a field with ``(json).inline`` has its fields at its parent's level)."""
    desc = ROUTE_MESSAGES.get(route)
    return _paths_from(desc) if desc is not None else {}


@cache
def _paths_from(desc: Any) -> dict[str, str]:
    """Field name -> where it sits in the JSON object of ``desc`` (see :func:`_field_paths`)."""
    out: dict[str, str] = {}
    queue: list[tuple[Any, str]] = [(desc, "")] if desc is not None else []
    seen: set[str] = set()
    while queue:
        d, prefix = queue.pop(0)
        if d.full_name in seen:
            continue
        seen.add(d.full_name)
        bare = bare_oneof(d)
        for f in d.fields:
            if not bare:
                out.setdefault(f.name, prefix + f.name)
            if f.message_type is None or f.message_type.GetOptions().map_entry:
                continue
            inline = bare or (d.full_name.startswith("netgrad.v1.")
                              and f.GetOptions().Extensions[netgrad_pb2.json].inline)
            queue.append((f.message_type, prefix if inline else f"{prefix}{f.name}."))
    return out


def article(name: str) -> str:
    """``a`` or ``an`` before a message name (``an OpGradientRequest``)."""
    return "an" if name[:1] in "AEIOU" else "a"


def _did_you_mean(name: str, route: str, top_level: bool) -> str | None:
    """``did you mean `x`?`` for an unknown field ``name``; at the top level of the request,
    a field that belongs deeper is named by its dotted path (``tolerances.atol``)."""
    field = suggest_field(name, route, top_level)
    if field is None:
        return None
    where = _field_paths(route).get(field, field) if top_level else field
    if not top_level and field == name:  # the right name in the wrong message
        where = _field_paths(route).get(field, field)
    if where == name:
        return None
    return f"did you mean `{where}`?"


def _norm(name: str) -> str:
    return name.replace("_", "").replace("-", "").lower()


def suggest_field(name: str, route: str, top_level: bool = False) -> str | None:
    """The field a misspelt or wrongly cased ``name`` most likely means, or ``None``.

    At the top level of the request its own fields come first: ``input`` means ``inputs``,
    not ``OperatorDef.input`` deep in the net; a name that is none of them may belong deeper
    (``atol``: ``tolerances.atol``)."""
    desc = ROUTE_MESSAGES.get(route)
    if top_level and desc is not None:
        for known in (_top_fields(desc), _own_fields(route)):
            found = _nearest(name, known)
            if found is not None:
                return found
    return _nearest(name, _known_fields(route))


@cache
def _own_fields(route: str) -> frozenset[str]:
    """Field names of the netgrad.v1 messages of ``route``'s request, at any depth, not
    those of the Caffe2 messages inside (``inputs`` before ``OperatorDef.input``)."""
    return frozenset(name for name, where in _field_paths(route).items()
                     if _via_netgrad(ROUTE_MESSAGES[route], where))


def _via_netgrad(desc: Any, where: str) -> bool:
    """Whether dotted path ``where`` names a field of a netgrad.v1 message, through
    netgrad.v1 messages only."""
    for seg in where.split("."):
        if desc is None or not desc.full_name.startswith("netgrad."):
            return False
        f = _json_field(desc, seg)
        if f is None:
            return False
        desc = f.message_type
    return True


def _nearest(name: str, known: Iterable[str]) -> str | None:
    by_norm = {_norm(k): k for k in sorted(known)}
    n = _norm(name)
    for candidate in (n, n.rstrip("s"), n + "s"):
        if candidate in by_norm:
            return by_norm[candidate]
    close = difflib.get_close_matches(n, list(by_norm), n=1, cutoff=0.8)
    return by_norm[close[0]] if close else None


def bare_net_hint(route: str) -> str:
    """What to send instead of a bare NetDef to ``route``."""
    desc = ROUTE_MESSAGES.get(route)
    if desc is None or desc.name == "OpGradientRequest":
        return BARE_OP
    if desc.name == "JobRequest":
        return JOB_HINT
    extra = ', "inputs": [...]' if desc.name in ("VerifyRequest", "RunRequest") else ""
    if desc.name == "RunRequest":
        return BARE_NET.format(kind=desc.name, extra=extra).replace(
            '"ys": ["<output blob>"]', '"fetch": ["<blob>"]')
    return BARE_NET.format(kind=desc.name, extra=extra)


def op_on_net_hint(route: str, bare: bool) -> str:
    """What to send to the net route ``route`` instead of an OpGradientRequest (``bare``:
    instead of a bare OperatorDef)."""
    desc = ROUTE_MESSAGES.get(route)
    name = desc.name if desc is not None else ""
    rest = {"RunRequest": '"fetch": ["<blob>"], "inputs": [...]',
            "VerifyRequest": '"ys": ["<output blob>"], "inputs": [...]'}.get(
        name, '"ys": ["<output blob>"]')
    return (BARE_OP_ON_NET_HINT if bare else OP_ON_NET_HINT).format(route=route, rest=rest)


def bare_text_hint(message_name: str) -> str:
    """What to send instead of a bare NetDef / OperatorDef in text format, for the request
    message ``message_name`` (e.g. ``NetGradientRequest``)."""
    route = next((r for r, d in ROUTE_MESSAGES.items() if d.name == message_name), "")
    return f"{bare_net_hint(route)}; in text format (text/x-protobuf): {text_example(message_name)}"


def text_example(message_name: str) -> str:
    """The request message ``message_name`` in text format, in outline."""
    if message_name == "OpGradientRequest":
        return 'op { <your OperatorDef> } g_output { dense: "<output>_grad" }'
    if message_name == "RunRequest":
        return 'net { <your NetDef> } fetch: "<blob>"'
    if message_name == "JobRequest":
        return 'verify { net { <your NetDef> } ys { blob: "<output blob>" } }'
    return 'net { <your NetDef> } ys { blob: "<output blob>" }'


def _stem(message: str) -> str:
    """``message`` without its closing full stop (kept: an ellipsis)."""
    text = message.rstrip()
    return text[:-1] if text.endswith(".") and not text.endswith("..") else text


def join_hint(message: str, hint: str) -> str:
    """``message; hint`` - one sentence, never ``.;``."""
    return f"{_stem(message)}; {hint}"


def _append(p: Diagnostic, hint: str) -> Diagnostic:
    if hint in p.message:
        return p
    return dataclasses.replace(p, message=join_hint(p.message, hint))


#: Keys clients write for a netgrad.v1 field under another word: (message, key) -> field.
_SYNONYMS = {
    ("InputSpec", "name"): "blob",
    ("InputSpec", "value"): "tensor",
    ("InputSpec", "data"): "tensor.data",
    ("GradientMapEntry", "name"): "blob",
    ("RandomSpec", "dims"): "shape",
    ("Tensor", "dims"): "shape",
    ("Tensor", "values"): "data",
    ("Tolerances", "abs"): "atol",
    ("Tolerances", "rel"): "rtol",
    ("Tolerances", "eps"): "step",
    ("Tolerances", "delta"): "step",
}


def _hint(p: Diagnostic, route: str, body: _Body) -> str | None:
    path = p.path or ""
    unknown = body.unknown
    if p.code == "unknown_field" and "did you mean" in p.message:
        return None  # the engine named the nearest field already (Caffe2 messages)
    if p.code == "unknown_field" and path and "." not in path and "[" not in path:
        if route == "/v1/jobs" and "op" in unknown and unknown <= _OP_REQUEST:
            return OP_ON_JOBS_HINT
        if route == "/v1/jobs" and unknown <= _job_inner_fields():  # a bare verify/run body
            return JOB_HINT
        bare_net = route in ROUTE_MESSAGES and route != "/v1/gradients/op"
        if bare_net and "op" in unknown and unknown <= _NET_FIELDS and body.no_net:
            return bare_net_hint(route)
        if (bare_net and route != "/v1/jobs" and "op" in unknown and unknown <= _OP_REQUEST
                and body.no_net):
            return op_on_net_hint(route, bare=False)
        if (bare_net and route != "/v1/jobs" and "type" in unknown and unknown <= _OP_FIELDS
                and unknown & {"input", "output"}):
            return op_on_net_hint(route, bare=True)
        if route == "/v1/gradients/op" and "type" in unknown and unknown <= _OP_FIELDS:
            return BARE_OP
        if route == "/v1/gradients/op" and ("net" in unknown or body.op_list):
            return NET_ON_OP_HINT
        if route == "/v1/verify" and path == "verify":
            return VERIFY_NESTED_HINT
        return _did_you_mean(path, route, top_level=True)
    if p.code == "unknown_field":
        leaf = path.rsplit(".", 1)[-1].split("[")[0]
        parent = _parent_message(route, path)
        if parent is None:
            return _did_you_mean(leaf, route, top_level=False)
        # the message the key sits in knows best (run.input -> inputs), then its own deeper
        # fields (verify.atol -> tolerances.atol); never a field of another branch (run.seed
        # is not verify.seed)
        near = _nearest(leaf, _top_fields(parent)) or _SYNONYMS.get((parent.name, leaf))
        if near is None:
            deeper = {k: v for k, v in _paths_from(parent).items() if _via_netgrad(parent, v)}
            found = _nearest(leaf, deeper)
            near = deeper[found] if found is not None else None
        return f"did you mean `{near}`?" if near is not None and near != leaf else None
    if route == "/v1/gradients/op" and path == "op" and body.op_list:
        return NET_ON_OP_HINT
    if p.code == "invalid_field" and path == "ys" and "required" in p.message:
        return YS_HINT
    if (p.code == "invalid_field" and path == "g_output" and "required" in p.message
            and route == "/v1/gradients/op"):
        return G_OUTPUT_HINT
    if (p.code == "invalid_field" and re.fullmatch(r"(verify\.|run\.)?inputs", path)
            and "array" in p.message):  # (not a field inside an entry: inputs[0].tensor.shape)
        return INPUTS_HINT
    # (an unknown op type's nearest names come from the engine: code unknown_operator)
    if (p.code in ("gradient_not_defined", "not_implemented_in_netgrad") and p.op_type
            and route in NET_ROUTES):  # (/v1/gradients/op has neither `ys` nor `skip`)
        return PARTIAL_HINT
    if p.code == "unknown_ys_blob" and p.message.endswith("'"):  # (core gave no reason)
        return UNKNOWN_YS_HINT
    if p.code == "invalid_field" and p.message.endswith(": field required"):
        return _required_hint(route, path)
    return None


def _required_hint(route: str, path: str) -> str | None:
    """``what it holds: Blobs to return, in this order.``: a required field's description,
    from its ``.proto`` comment (the generated schemas)."""
    parent = _parent_message(route, path)
    if parent is None:
        return None
    leaf = path.rsplit(".", 1)[-1]
    schema = SCHEMAS.get(parent.full_name.removeprefix("netgrad.v1."), {})
    text = schema.get("properties", {}).get(leaf, {}).get("description")
    return f"what it holds: {text.rstrip('.')}" if text else None


def with_hints(route: str, problems: Sequence[Diagnostic]) -> list[Diagnostic]:
    """``problems`` with the fix appended to each that a rule recognizes (same order)."""
    body = _Body(
        frozenset(p.path for p in problems if p.code == "unknown_field" and p.path),
        # (a body with `net` given is not a bare NetDef)
        any(p.path == "net" and "required" in p.message for p in problems),
        route == "/v1/gradients/op" and any(p.path == "op" and "got an array" in p.message
                                            for p in problems),
    )
    out = []
    for p in problems:
        hint = _hint(p, route, body)
        out.append(_append(p, hint) if hint else p)
    return out


def detail_with_hints(detail: str, problems: Iterable[Diagnostic], before: Iterable[Diagnostic]
                      ) -> str:
    """``detail`` plus the first hint added to ``problems`` (compared with ``before``), put
    right after that problem's own words where the detail quotes them (``gOutputs: unknown
    field; did you mean `g_output`?; g_output: field required``), else at the end."""
    for new, old in zip(problems, before, strict=False):
        if new.message != old.message:
            hint = new.message[len(_stem(old.message)) + 2:]
            own = _stem(old.message)
            at = detail.find(own)
            if own and at >= 0 and detail[at + len(own):at + len(own) + 1] in (";", ""):
                end = at + len(own)
                return f"{detail[:end]}; {hint}{detail[end:]}"
            return join_hint(detail, hint)
    return detail


def not_found_hint(path: str, method: str, routes: Iterable[tuple[str, set[str]]]) -> str | None:
    """For a 404/405: the route meant (trailing slash dropped) or the method it takes."""
    table = dict(routes)
    stripped = path.rstrip("/")
    if stripped != path and stripped in table:
        methods = "/".join(sorted(table[stripped]))
        return f"no route at {path}; drop the trailing slash: {methods} {stripped}"
    if path in table and method not in table[path]:
        methods = "/".join(sorted(table[path]))
        msg = ROUTE_MESSAGES.get(path)
        what = f" with {article(msg.name)} {msg.name} body" if msg is not None else ""
        return f"{method} {path} is not served; use {methods} {path}{what}"
    # a misspelt route (`/v1/gradient/op`, `/v1/verfy`): the nearest one of the method
    served = sorted(p for p, m in table.items() if method in m and "{" not in p)
    best = [p for p in served if p.startswith(stripped + "/")]  # a route's parent
    if not best and served:
        ratio = {p: difflib.SequenceMatcher(None, stripped, p).ratio() for p in served}
        top = max(ratio.values())
        best = [p for p in served if ratio[p] == top >= 0.85]
    if best:  # (each of a tie, or of a parent: `/v1/gradients` is .../net or .../op)
        return f"no route at {path}; did you mean {' or '.join(f'{method} {p}' for p in best)}?"
    return None
