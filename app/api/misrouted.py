"""Bodies sent to the wrong route or as the wrong message: a bare NetDef / OperatorDef, an
OpGradientRequest on a net route, a net route's request on ``/v1/gradients/op``.

Each check runs on the error path only (the body already failed to decode, or decoded to
something the route cannot serve) and raises a 400 that names the message or the route to
use instead; it returns when the body is not such a mistake.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

from google.protobuf import message

from api_schemas import caffe2_pb2, netgrad_pb2
from core.errors import DecodeError
from core.proto import codec

M = TypeVar("M", bound=message.Message)

#: The parser's words for an unknown field at the top level of an OpGradientRequest.
_TOP_UNKNOWN = re.compile(r'Message type "netgrad\.v1\.OpGradientRequest" has no field named '
                          r'"(?P<name>\w+)"')
#: Top-level fields of the net routes' requests that OpGradientRequest does not have.
_NET_REQUEST_FIELDS = frozenset(
    f.name for d in (netgrad_pb2.NetGradientRequest, netgrad_pb2.VerifyRequest,
                     netgrad_pb2.RunRequest) for f in d.DESCRIPTOR.fields) - {"op", "g_output"}

#: A Caffe2 op type name (a bare NetDef's ops have them; bytes that merely parse do not).
_OP_TYPE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _is_type(t: object) -> bool:
    """Whether ``t`` is a Caffe2 op type name (upb hands a string of bad UTF-8 over as
    ``bytes``: not one)."""
    return isinstance(t, str) and _OP_TYPE.match(t) is not None


#: Ops whose types :func:`_typed_ops` reads (an error path: a 64 MiB body of 4.8 M ops took
#: 6 s to read them all; review, stop 26).
_OPS_LOOKED_AT = 100


def _typed_ops(net: caffe2_pb2.NetDef) -> bool:
    """Whether the first :data:`_OPS_LOOKED_AT` ops of ``net`` all have op type names."""
    ops = net.op
    return all(_is_type(ops[k].type) for k in range(min(len(ops), _OPS_LOOKED_AT)))


def refuse_bare_message(data: bytes, cls: type[M], exc: DecodeError) -> None:
    """Raise a 400 naming the wrapper when a binary body is a bare NetDef / OperatorDef.

    Raises:
        DecodeError: code ``bare_netdef`` or ``bare_operatordef``, with what to send instead.
    """
    from app.api.hints import bare_net_hint, join_hint

    is_op = cls is netgrad_pb2.OpGradientRequest
    op, net = caffe2_pb2.OperatorDef(), caffe2_pb2.NetDef()
    try:
        (op if is_op else net).ParseFromString(data)
    except message.DecodeError:
        if not is_op:
            _refuse_op_on_net(data, cls, exc)
        return
    # (a NetDef's ops have Caffe2 type names: a request missing `net` whose other fields
    # happen to parse as ops, type-less or with a type of control bytes, is not a bare NetDef)
    if not (_is_type(op.type) if is_op
            else len(net.op) and _typed_ops(net)):
        if not is_op:
            _refuse_op_on_net(data, cls, exc)
        return
    hint = bare_net_hint(_ROUTES.get(cls, ""))
    code = "bare_operatordef" if is_op else "bare_netdef"
    raise DecodeError.at(join_hint(exc.message, hint), code=code) from exc


_ROUTES: dict[Any, str] = {
    netgrad_pb2.OpGradientRequest: "/v1/gradients/op",
    netgrad_pb2.NetGradientRequest: "/v1/gradients/net",
    netgrad_pb2.VerifyRequest: "/v1/verify", netgrad_pb2.RunRequest: "/v1/run",
    netgrad_pb2.JobRequest: "/v1/jobs",
}


def refuse_net_on_op(data: bytes, exc: DecodeError) -> None:
    """Raise a 400 pointing to ``/v1/gradients/net`` when a binary body sent to
    ``/v1/gradients/op`` is a bare NetDef or a net route's request (its bytes often parse as
    an OpGradientRequest with a type-less op, or fail deep inside one).

    Raises:
        DecodeError: code ``bare_netdef`` or ``net_request_on_op_route``.
    """
    from app.api.hints import NET_ON_OP_HINT, join_hint

    def has_ops(net: caffe2_pb2.NetDef) -> bool:
        return len(net.op) > 0 and _typed_ops(net)

    kinds: tuple[Any, ...] = (netgrad_pb2.NetGradientRequest, netgrad_pb2.RunRequest)
    for kind in kinds:
        req = kind()
        try:
            req.ParseFromString(data)
        except message.DecodeError:
            continue
        if has_ops(req.net) and (len(req.ys) > 0 or len(getattr(req, "fetch", ())) > 0):
            raise DecodeError.at(join_hint(exc.message, NET_ON_OP_HINT),
                                 code="net_request_on_op_route") from exc
    net = caffe2_pb2.NetDef()
    try:
        net.ParseFromString(data)
    except message.DecodeError:
        return
    if has_ops(net):
        raise DecodeError.at(join_hint(exc.message, NET_ON_OP_HINT), code="bare_netdef") from exc


def _refuse_op_on_net(data: bytes, cls: type[M], exc: DecodeError) -> None:
    """Raise a 400 pointing to ``/v1/gradients/op`` when a binary body sent to a net route is
    an OpGradientRequest or a bare OperatorDef (as the JSON hints do).

    Raises:
        DecodeError: code ``op_request_on_net_route`` or ``bare_operatordef``.
    """
    from app.api.hints import OP_ON_JOBS_HINT, join_hint, op_on_net_hint

    route = _ROUTES.get(cls, "")
    if not route:
        return
    req, op = netgrad_pb2.OpGradientRequest(), caffe2_pb2.OperatorDef()
    try:
        req.ParseFromString(data)
        # (g_output may be missing: that is the next problem the right route names)
        wrapped = _is_type(req.op.type) and bool(
            len(req.g_output) or req.op.input or req.op.output)
    except message.DecodeError:
        wrapped = False
    if not wrapped:
        try:
            op.ParseFromString(data)
        except message.DecodeError:
            return
    if wrapped:
        hint = OP_ON_JOBS_HINT if route == "/v1/jobs" else op_on_net_hint(route, bare=False)
        raise DecodeError.at(join_hint(exc.message, hint),
                             code="op_request_on_net_route") from exc
    if route == "/v1/jobs":
        _refuse_unwrapped_job(data, exc)
        return
    if _is_type(op.type) and (op.input or op.output):
        raise DecodeError.at(join_hint(exc.message, op_on_net_hint(route, bare=True)),
                             code="bare_operatordef") from exc


def _refuse_unwrapped_job(data: bytes, exc: DecodeError) -> None:
    """Raise a 400 saying how to wrap it when a binary ``/v1/jobs`` body is a net route's
    request (a VerifyRequest, RunRequest or NetGradientRequest: ``net`` is field 1 of each).

    Raises:
        DecodeError: code ``unwrapped_job_request``, with the JobRequest to send instead.
    """
    from app.api.hints import JOB_HINT, join_hint

    req = netgrad_pb2.VerifyRequest()
    try:
        req.ParseFromString(data)
    except message.DecodeError:
        return
    if len(req.net.op) and _typed_ops(req.net):
        raise DecodeError.at(join_hint(exc.message, (
            "the body looks like a net route's request, not a JobRequest; "
            + JOB_HINT)), code="unwrapped_job_request") from exc


def refuse_bare_text(text: str, cls: type[M], exc: DecodeError) -> None:
    """Raise a 400 naming the wrapper when a text-format body is a bare NetDef / OperatorDef
    (as :func:`refuse_bare_message` does for binary bodies).

    Raises:
        DecodeError: code ``bare_netdef`` or ``bare_operatordef``, with what to send instead.
    """
    from app.api.hints import bare_text_hint, join_hint

    is_op = cls is netgrad_pb2.OpGradientRequest
    route = _ROUTES.get(cls, "")
    # (the parser's own problem: the other unknown fields listed beside it are the bare
    # message's own fields, which the wrapper's hint covers)
    first = exc.problems[0].message if exc.problems else exc.message
    # (nor is the field misspelt, as the parser's problem guesses: it is in the wrong message)
    first = _MISSPELT.sub("", first)
    if not is_op and route not in ("", "/v1/jobs"):
        from app.api.hints import op_on_net_hint

        for kind, bare in ((netgrad_pb2.OpGradientRequest, False), (caffe2_pb2.OperatorDef, True)):
            try:
                op_msg: Any = codec.from_text(text, kind, locate=False)
            except DecodeError:
                continue
            # (`op { ... }` alone is also a one-op NetDef: the request needs its g_output)
            if op_msg.type if bare else (op_msg.op.type and len(op_msg.g_output) > 0):
                raise DecodeError.at(join_hint(first, op_on_net_hint(route, bare)),
                                     code="bare_operatordef" if bare
                                     else "op_request_on_net_route") from exc
    if is_op:
        from app.api.hints import NET_ON_OP_HINT

        # A net route's request names a field OpGradientRequest lacks at its top level
        # (`net`, `ys`, `fetch`...): told by the parser's words, without parsing it again (a
        # megabyte of text takes seconds in the pure-Python parser; review, stop 25).
        top = _TOP_UNKNOWN.search(first)
        if top is not None and top["name"] in _NET_REQUEST_FIELDS:
            raise DecodeError.at(join_hint(first, NET_ON_OP_HINT),
                                 code="net_request_on_op_route") from exc
        try:
            bare_net = codec.from_text(text, caffe2_pb2.NetDef, locate=False)
        except DecodeError:
            bare_net = None
        if bare_net is not None and len(bare_net.op) > 0:
            raise DecodeError.at(join_hint(first, NET_ON_OP_HINT),
                                 code="bare_netdef") from exc
    try:
        if is_op:
            found = bool(codec.from_text(text, caffe2_pb2.OperatorDef, locate=False).type)
        else:
            found = len(codec.from_text(text, caffe2_pb2.NetDef, locate=False).op) > 0
    except DecodeError:
        return
    if not found:
        return
    code = "bare_operatordef" if is_op else "bare_netdef"
    raise DecodeError.at(join_hint(first, bare_text_hint(cls.DESCRIPTOR.name)),
                         code=code) from exc


#: The start of a JSON object or array (protobuf text format starts with a field name).
_MISSPELT = re.compile(r"\.? \(a field of [\w.]+ is misspelt, or the client's schema differs\)")
_JSON_START = re.compile(r'\s*(?:\{\s*(?:"|\}\s*\Z)|\[\s*(?:[\[{"\d\-\]]|true|false|null))')


def refuse_json_as_text(text: str, exc: DecodeError) -> None:
    """Raise a 400 naming the media type when a ``text/x-protobuf`` body is JSON.

    Raises:
        DecodeError: code ``json_as_text``, saying to send ``application/json``.
    """
    from app.api.hints import join_hint

    # (the prefix only: a text-format body never starts with `{` or `[`, and parsing the
    # whole body cost 8x its size in memory, or recursed too deeply; review, stop 26)
    if _JSON_START.match(text[:4096]) is None:
        return
    raise DecodeError.at(join_hint(exc.message, (
        "the body looks like JSON, sent as text/x-protobuf (protobuf text format): send it with "
        "Content-Type: application/json")), code="json_as_text") from exc
