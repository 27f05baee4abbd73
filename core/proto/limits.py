"""Nesting-depth checks for NetDefs whose ops hold sub-nets (``Argument.n`` / ``Argument.nets``).

Control-flow ops (``Do``, ``If``, ``While``) keep their bodies as NetDefs inside arguments, so a
request can nest nets arbitrarily deep. The service refuses requests nested deeper than a
configured limit *before* generating gradients, with an error naming the sub-net path, e.g.
``op[3]:If/then_net/op[0]:Do/net``. Depth counts sub-net levels: the top-level net (or the
op of a single-op request, treated as ``op[0]``) is depth 0, a net in one of its arguments is
depth 1, and so on (the same convention as :class:`core.ir.env.GenEnv`).

The decoders have caps of their own: upb follows 65 535 nested messages (its oversize
limit, set in ``core``; :mod:`core.proto.stack` gives it the stack for that), each sub-net
level costs three (NetDef -> OperatorDef -> Argument), and Python's JSON parser follows
about 5 000 nested containers (``core.proto.codec`` raises the recursion limit), about six
per level. :data:`DECODER_MAX_DEPTH` is the deepest nesting that always decodes;
:func:`effective_max_depth` caps the configured limit with it, so a too-deep request is
reported with its path instead of an anonymous decoder failure.

The walks run only when a net may hold sub-nets at all: the checking twin of the binary
message says so without a walk (:mod:`core.proto.twin`), and JSON text without an ``"n"`` or
``"nets"`` key cannot hold any.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from api_schemas import caffe2_pb2
from core.errors import LimitExceededError

#: Deepest sub-net nesting that every decoder accepts with room to spare: JSON costs about
#: six containers per level (the reference JSON parser follows 1 000 messages, binary
#: protobuf 65 535).
DECODER_MAX_DEPTH = 150

_NET_ARG_FIELDS = ("n", "nets")
#: A sub-net found by a walk: ``(sub-net, path, op index, op type)`` (no op: a NetDef's own
#: argument).
Child = tuple[Any, str, int | None, str | None]


def effective_max_depth(max_depth: int) -> int:
    """The configured depth limit, capped at :data:`DECODER_MAX_DEPTH`."""
    return max(0, min(max_depth, DECODER_MAX_DEPTH))


def _check_nesting(
    start: list[Child],
    children: Callable[[Any, str], Iterable[Child]],
    max_depth: int,
    visit: Callable[[Any], None] | None = None,
) -> None:
    """Depth-first walk of sub-nets from ``start`` (level 1); raise at the first too deep.

    ``children(node, prefix)`` yields ``(sub-net, path, op index, op type)`` for the sub-nets
    of one net, whatever its form (decoded message, JSON object, wire bytes); ``visit`` is
    called with each sub-net reached (e.g. to count its ops).
    """
    stack = [(node, path, idx, typ, 1) for node, path, idx, typ in reversed(start)]
    while stack:
        node, path, idx, typ, depth = stack.pop()
        if depth > max_depth:
            raise _too_deep(path, idx, typ, max_depth)
        if visit is not None:
            visit(node)
        below = list(children(node, path + "/"))
        stack.extend((n, p, i, t, depth + 1) for n, p, i, t in reversed(below))


def _too_deep(path: str, op_index: int | None, op_type: str | None,
              max_depth: int) -> LimitExceededError:
    return LimitExceededError.at(
        f"sub-nets are nested deeper than the limit of {max_depth} levels at {path}; each "
        "sub-net of a Do, If, While or RecurrentNetwork op is one level: flatten the net, or "
        "ask the operator to raise the limit (setting NETGRAD_MAX_DEPTH)",
        op_index=op_index,
        op_type=op_type,
        path=path,
        code="nesting_too_deep",
    )


# -- decoded messages ------------------------------------------------------------------------


#: Counts newly found sub-nets against a request's :class:`OpBudget` (``OpBudget.subnets``).
Charge = Callable[[int], None]


def _msg_children(
    net: caffe2_pb2.NetDef, prefix: str, charge: Charge | None = None
) -> Iterator[Child]:
    for i, op in enumerate(net.op):
        yield from _op_children(op, i, f"{prefix}op[{i}]:{op.type}", charge)
    # the net's own arguments nest NetDefs too (no op: a decoder limit all the same)
    for arg in net.arg:
        if charge is not None:
            _charge_arg(arg, charge)
        if arg.HasField("n"):
            yield arg.n, f"{prefix}arg:{arg.name}", None, None
        for k, sub in enumerate(arg.nets):
            yield sub, f"{prefix}arg:{arg.name}[{k}]", None, None


def _charge_arg(arg: caffe2_pb2.Argument, charge: Charge) -> None:
    """Charge the sub-nets of ``arg`` before any is visited: a list of a million empty nets
    is refused at once, not after a walk over it."""
    found = len(arg.nets) + arg.HasField("n")
    if found:
        charge(found)


def _op_children(
    op: caffe2_pb2.OperatorDef, index: int, op_path: str, charge: Charge | None = None
) -> Iterator[Child]:
    for arg in op.arg:
        if charge is not None:
            _charge_arg(arg, charge)
        if arg.HasField("n"):
            yield arg.n, f"{op_path}/{arg.name}", index, op.type
        for k, sub in enumerate(arg.nets):
            yield sub, f"{op_path}/{arg.name}[{k}]", index, op.type


#: Arguments a request may hold per op that ``max_ops`` allows (on average: one op may hold
#: many). An empty ``Argument`` costs two bytes of binary and, parsed, walked and
#: differentiated, about what an op costs (ten million of them ran a worker out of memory).
ARGS_PER_OP = 4


class OpBudget:
    """The ops a request may still hold: ``max_ops`` less the top-level ops of ``msg``
    (:func:`top_level_ops`), less each sub-net's ops as :meth:`take` counts them; and the
    sub-nets it may still hold, as many (:meth:`subnets`). An empty sub-net costs the walks
    about what an op costs, so a body of a million ``nets {}`` is refused as soon as its
    argument is reached, not after a walk over them.

    Raises (on creation, and from :meth:`take`, :meth:`charge`, :meth:`subnets` and
    :meth:`arguments`):
        LimitExceededError: code ``too_many_ops``, ``too_many_subnets`` or
            ``too_many_args``.
    """

    def __init__(self, max_ops: int, msg: Any = None) -> None:
        self.max_ops = max_ops
        self.nets_left = max_ops
        self.args_left = ARGS_PER_OP * max_ops
        self.left = max_ops - (top_level_ops(msg) if msg is not None else 0)
        if self.left < 0:
            raise too_many_ops(max_ops)

    def charge(self, ops: int) -> None:
        """Count ``ops`` more ops."""
        self.left -= ops
        if self.left < 0:
            raise too_many_ops(self.max_ops)

    def subnets(self, found: int) -> None:
        """Count ``found`` more sub-nets."""
        self.nets_left -= found
        if self.nets_left < 0:
            raise too_many_subnets(self.max_ops)

    def take(self, net: Any) -> None:
        """Count the ops of sub-net ``net`` (a decoded NetDef), and their arguments."""
        self.charge(len(net.op))
        self.arguments(len(net.arg) + sum(len(op.arg) for op in net.op))

    def arguments(self, found: int) -> None:
        """Count ``found`` more arguments (``Argument`` messages) against
        :data:`ARGS_PER_OP` per allowed op."""
        self.args_left -= found
        if self.args_left < 0:
            raise too_many_args(self.max_ops)


def check_depth(msg: caffe2_pb2.NetDef | caffe2_pb2.OperatorDef, max_depth: int,
                budget: OpBudget | None = None) -> None:
    """Refuse a NetDef or OperatorDef whose sub-nets nest deeper than ``max_depth``.

    Args:
        msg: a decoded NetDef, or one OperatorDef (then treated as ``op[0]`` of a net).
        max_depth: deepest allowed sub-net level (top level = 0).
        budget: count every sub-net, and its ops, against it on the way (the top-level
            ops are counted by the caller), as the JSON scan counts them; a sub-net is
            counted when its argument is reached, before the walk enters any.

    Raises:
        LimitExceededError: code ``nesting_too_deep``, located at the first too-deep sub-net
            (depth-first, in op and argument order), e.g. ``op[3]:If/then_net/op[0]:Do/net``;
            code ``too_many_ops`` or ``too_many_subnets`` when the budget runs out.
    """
    charge = budget.subnets if budget is not None else None
    if isinstance(msg, caffe2_pb2.OperatorDef):
        start = list(_op_children(msg, 0, f"op[0]:{msg.type}", charge))
    else:
        start = list(_msg_children(msg, "", charge))

    def children(net: caffe2_pb2.NetDef, prefix: str) -> Iterator[Child]:
        return _msg_children(net, prefix, charge)

    _check_nesting(start, children, max_depth, budget.take if budget else None)


# -- JSON objects (before decoding) ----------------------------------------------------------


def _json_op_children(op: Any, index: int, op_path: str,
                      charge: Charge | None = None) -> Iterator[Child]:
    args = op.get("arg") if isinstance(op, dict) else None
    if not isinstance(args, list):
        return
    op_type = str(op.get("type", ""))
    for arg in args:
        if not isinstance(arg, dict):
            continue
        name = str(arg.get("name", ""))
        nets = arg.get("nets")
        if charge is not None:
            found = (len(nets) if isinstance(nets, list) else 0) + isinstance(arg.get("n"), dict)
            if found:
                charge(found)
        if isinstance(arg.get("n"), dict):
            yield arg["n"], f"{op_path}/{name}", index, op_type
        if isinstance(nets, list):
            for k, sub in enumerate(nets):
                if isinstance(sub, dict):
                    yield sub, f"{op_path}/{name}[{k}]", index, op_type


def _json_net_children(net: Any, prefix: str, charge: Charge | None = None) -> Iterator[Child]:
    if not isinstance(net, dict):
        return
    ops = net.get("op")
    if isinstance(ops, list):
        for i, op in enumerate(ops):
            if isinstance(op, dict):
                yield from _json_op_children(op, i, f"{prefix}op[{i}]:{op.get('type', '')}",
                                             charge)
    own = {"arg": net.get("arg"), "type": ""}  # the net's own arguments, as an op's
    for sub, path, _, _ in _json_op_children(own, 0, f"{prefix}arg", charge):
        yield sub, path.replace(f"{prefix}arg/", f"{prefix}arg:", 1), None, None


def check_json_depth(obj: Any, max_depth: int, *, is_op: bool = False,
                     budget: OpBudget | None = None) -> None:
    """Like :func:`check_depth`, on a JSON-decoded NetDef (or OperatorDef when ``is_op``).

    Runs before the protobuf JSON parser, whose own recursion limit would otherwise reject a
    deep request without saying where. Malformed parts are skipped (the parser reports them).
    ``budget``: count the net's ops (the op itself when ``is_op``), every sub-net and its
    ops against it, before anything is decoded.

    Raises:
        LimitExceededError: code ``nesting_too_deep`` with the sub-net path;
            ``too_many_ops`` or ``too_many_subnets`` when the budget runs out.
    """
    charge = budget.subnets if budget is not None else None
    visit = None
    if budget is not None:
        def visit(net: Any) -> None:
            ops = net.get("op") if isinstance(net, dict) else None
            budget.charge(len(ops) if isinstance(ops, list) else 0)

        if is_op:
            budget.charge(1)
        else:
            visit(obj)
    if is_op:
        op_type = obj.get("type", "") if isinstance(obj, dict) else ""
        start = list(_json_op_children(obj, 0, f"op[0]:{op_type}", charge))
    else:
        start = list(_json_net_children(obj, "", charge))

    def children(net: Any, prefix: str) -> Iterator[Child]:
        return _json_net_children(net, prefix, charge)

    _check_nesting(start, children, max_depth, visit)


# -- binary wire format (when the decoder gave up) -------------------------------------------

# Field numbers of caffe2.proto used to follow sub-nets through the wire format.
_NETDEF_OP = 2
_OP_TYPE = 4
_OP_ARG = 5
_NETDEF_ARG = 6
_ARG_NAME = 1
_ARG_N = 8
_ARG_NETS = 9


class WireTruncated(Exception):
    """The wire bytes end early (or the walk's budget ran out); no verdict."""


#: Fields the wire walk of the running :func:`check_wire_depth` may still visit (per thread).
_budget = threading.local()


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise WireTruncated
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def wire_fields(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """Walk the protobuf wire format of ``data[start:end]`` without decoding it.

    Yield ``(field_number, wire_type, value_start, value_end)``; varints give value in start."""
    pos = start
    left: list[int] | None = getattr(_budget, "left", None)
    while pos < end:
        if left is not None:
            left[0] -= 1
            if left[0] < 0:
                raise WireTruncated
        tag, pos = _varint(data, pos, end)
        number, wtype = tag >> 3, tag & 7
        if wtype == 0:
            value, pos = _varint(data, pos, end)
            yield number, wtype, value, pos
        elif wtype == 1:
            pos += 8
        elif wtype == 2:
            length, pos = _varint(data, pos, end)
            if pos + length > end:
                raise WireTruncated
            yield number, wtype, pos, pos + length
            pos += length
        elif wtype == 5:
            pos += 4
        else:  # groups are not used by caffe2.proto
            raise WireTruncated
        if pos > end:
            raise WireTruncated


def _wire_string(data: bytes, start: int, end: int, number: int) -> str:
    for num, wtype, s, e in wire_fields(data, start, end):
        if num == number and wtype == 2:
            return data[s:e].decode("utf-8", "replace")
    return ""


def _wire_net_children(
    data: bytes, start: int, end: int, prefix: str
) -> Iterator[tuple[int, int, str, int | None, str | None]]:
    index = 0
    for num, wtype, s, e in wire_fields(data, start, end):
        if num != _NETDEF_OP or wtype != 2:
            continue
        op_type = _wire_string(data, s, e, _OP_TYPE)
        op_path = f"{prefix}op[{index}]:{op_type}"
        yield from _wire_op_children(data, s, e, index, op_path, op_type)
        index += 1
    # the net's own arguments (NetDef.arg), as :func:`_msg_children` follows them
    for s_, e_, path, _, _ in _wire_op_children(data, start, end, 0, f"{prefix}arg", "",
                                                arg_field=_NETDEF_ARG):
        yield s_, e_, path.replace(f"{prefix}arg/", f"{prefix}arg:", 1), None, None


def _wire_op_children(
    data: bytes, start: int, end: int, index: int, op_path: str, op_type: str,
    arg_field: int = 0,
) -> Iterator[tuple[int, int, str, int | None, str | None]]:
    arg_field = arg_field or _OP_ARG
    for num, wtype, s, e in wire_fields(data, start, end):
        if num != arg_field or wtype != 2:
            continue
        name = _wire_string(data, s, e, _ARG_NAME)
        k = 0
        for anum, awtype, as_, ae in wire_fields(data, s, e):
            if awtype != 2:
                continue
            if anum == _ARG_N:
                yield as_, ae, f"{op_path}/{name}", index, op_type
            elif anum == _ARG_NETS:
                yield as_, ae, f"{op_path}/{name}[{k}]", index, op_type
                k += 1


def check_wire_depth(
    data: bytes, max_depth: int, *, is_op: bool = False, max_fields: int | None = None
) -> None:
    """Like :func:`check_depth`, on the binary bytes of a NetDef (OperatorDef when ``is_op``).

    Used when the protobuf decoder refused a message, to tell a too-deep net (named by its
    path) from plain corruption. Returns silently when the bytes are malformed or not too
    deep, or when finding out would take visiting more than ``max_fields`` fields.

    Raises:
        LimitExceededError: code ``nesting_too_deep`` with the sub-net path.
    """
    _budget.left = None if max_fields is None else [max_fields]
    try:
        _check_wire_depth(data, max_depth, is_op)
    finally:
        _budget.left = None


def _check_wire_depth(data: bytes, max_depth: int, is_op: bool) -> None:
    def children(node: Any, prefix: str) -> Iterator[Child]:
        for s, e, path, idx, typ in _wire_net_children(data, node[0], node[1], prefix):
            yield (s, e), path, idx, typ

    try:
        if is_op:
            op_type = _wire_string(data, 0, len(data), _OP_TYPE)
            found = _wire_op_children(data, 0, len(data), 0, f"op[0]:{op_type}", op_type)
        else:
            found = _wire_net_children(data, 0, len(data), "")
        start = [((s, e), path, idx, typ) for s, e, path, idx, typ in found]
        _check_nesting(start, children, max_depth)
    except WireTruncated:
        return


def wire_submessages(data: bytes, number: int, limit: int | None = None) -> list[bytes]:
    """Bytes of the length-delimited fields ``number`` at the top level of ``data``.

    Lets the service locate the NetDef/OperatorDef inside a netgrad request message without
    decoding it. Returns what it found before any malformed bytes, or before ``limit``
    top-level fields.
    """
    out: list[bytes] = []
    try:
        for k, (num, wtype, s, e) in enumerate(wire_fields(data, 0, len(data))):
            if limit is not None and k >= limit:
                break
            if num == number and wtype == 2:
                out.append(data[s:e])
    except WireTruncated:
        pass
    return out


# -- op counts (before any walk) -------------------------------------------------------------
_NET = caffe2_pb2.NetDef.DESCRIPTOR
_OP = caffe2_pb2.OperatorDef.DESCRIPTOR
#: An ``op`` field opening a message in text format (``op {``, ``op <``, ``op: {``).
_TEXT_OP = re.compile(r'(?<![\w"])(?:op|nets|n)\s*:?\s*[{<]')


def too_many_subnets(max_ops: int) -> LimitExceededError:
    """The 413 problem of a request holding more than ``max_ops`` sub-nets (``Argument.n``
    and ``Argument.nets`` values, at any depth): NETGRAD_MAX_OPS bounds them as it bounds
    ops."""
    return LimitExceededError.at(
        f"the request holds more than {max_ops} sub-nets (the nets in the n and nets "
        "arguments of Do, If, While and other ops, at any depth; NETGRAD_MAX_OPS bounds "
        "sub-nets as it bounds ops): send fewer, or ask the operator to raise the limit",
        code="too_many_subnets")


def too_many_args(max_ops: int) -> LimitExceededError:
    """The 413 problem of a request holding more than :data:`ARGS_PER_OP` arguments per op
    that ``max_ops`` allows."""
    return LimitExceededError.at(
        f"the request holds more than {ARGS_PER_OP * max_ops} arguments ({ARGS_PER_OP} per "
        "op that NETGRAD_MAX_OPS allows, sub-nets included): send fewer, or ask the operator "
        "to raise the limit", code="too_many_args")


def too_many_ops(max_ops: int) -> LimitExceededError:
    """The 413 problem of a request holding more than ``max_ops`` ops (as the JSON scan's)."""
    return LimitExceededError.at(
        f"the request holds more than {max_ops} ops (sub-nets included; NETGRAD_MAX_OPS)",
        code="too_many_ops")


def _top_level(msg: Any) -> Iterator[tuple[Any, Any]]:
    """``(ops, net arguments)`` of every NetDef field of ``msg`` (``(ops, ())`` of every
    OperatorDef field), and of its set netgrad.v1 message fields; sub-nets not entered."""
    for f, value in msg.ListFields():
        if f.message_type is _NET:
            for net in value if f.is_repeated else [value]:
                yield net.op, net.arg
        elif f.message_type is _OP:
            yield (value if f.is_repeated else [value]), ()
        elif (f.message_type is not None and not f.is_repeated
              and f.message_type.full_name.startswith("netgrad.v1.")):
            yield from _top_level(value)


def top_level_ops(msg: Any) -> int:
    """The ops of every NetDef (and OperatorDef) field of ``msg`` and of its set netgrad.v1
    message fields, sub-nets not counted: a lower bound of what the engine counts, read
    without a walk over the ops (``len`` of a repeated field)."""
    return sum(len(ops) for ops, _ in _top_level(msg))


def check_op_count(msg: Any, max_ops: int) -> None:
    """Refuse a decoded request whose top-level ops alone pass ``max_ops``, whose top-level
    arguments pass :data:`ARGS_PER_OP` per allowed op (``len`` of each repeated field), or
    whose top-level ops' arguments alone hold more than ``max_ops`` sub-nets: what a binary
    body of a million empty ``nets {}`` costs to refuse is then one parse, not every later
    pass over the message (the checking twin's parse, ``IsInitialized``, ``ByteSize``:
    about 50 ms each per 500 000 sub-nets).

    Raises:
        LimitExceededError: code ``too_many_ops``, ``too_many_args`` or ``too_many_subnets``.
    """
    budget = OpBudget(max_ops, msg)
    args = nets = 0
    for ops, own in _top_level(msg):
        args += len(own)
        for op in ops:
            args += len(op.arg)
            nets += sum(len(arg.nets) for arg in op.arg)
    budget.arguments(args)
    if nets > max_ops:
        raise too_many_subnets(max_ops)


def check_text_op_count(text: str, max_ops: int) -> None:
    """Refuse a text-format body with more than ``max_ops`` ``op { ... }`` messages, or
    more than ``max_ops`` ``nets { ... }`` and ``n { ... }`` (sub-nets, as :class:`OpBudget`
    counts them), before the pure-Python text parser (about 30 µs per op) reads it.

    A regular-expression count in C. Such an opening inside a quoted string or a comment
    counts too (only a body of ``max_ops`` of them could be refused for it). The list form
    ``op: [{...}, ...]`` is not counted here; :class:`OpBudget` counts it once parsed.

    Raises:
        LimitExceededError: code ``too_many_ops`` or ``too_many_subnets``.
    """
    if len(text) // 3 <= max_ops:  # (one costs at least three characters: "n{}")
        return
    ops = nets = 0
    for m in _TEXT_OP.finditer(text):
        if m.group()[0] == "o":
            ops += 1
            if ops > max_ops:
                raise too_many_ops(max_ops)
        else:
            nets += 1
            if nets > max_ops:
                raise too_many_subnets(max_ops)
