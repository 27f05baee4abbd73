"""Request bodies to ``netgrad.v1`` messages to engine values, and engine results back.

Both encodings decode into the same messages of ``api_schemas/netgrad.proto``: binary bodies
through :func:`core.proto.codec.decode_binary`, JSON bodies through :mod:`app.api.jsonmap`.
Nets nested deeper than the configured limit are refused with their sub-net path before
anything else reads them. Answers are built as ``netgrad.v1`` messages and written in the
negotiated encoding by :func:`respond`. The helpers below only translate between messages
and the engine's own types (gradient values, verification options, reports, tensors).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from functools import cache
from typing import Any, TypeVar

import numpy as np
from fastapi.responses import Response
from google.protobuf import message

from api_schemas import caffe2_pb2, netgrad_pb2
from app import observability
from app.api import jsonmap, misrouted
from app.api.hints import refuse_other_media
from app.api.negotiation import (
    TEXT_TYPES,
    Body,
    Media,
    json_bytes,
    json_only,
    protobuf_fallback,
)
from core.errors import DecodeError, InvalidRequestError, LimitExceededError
from core.proto import codec, jsonwalk, limits
from core.proto import jsonmap as core_jsonmap
from core.types import Diagnostic, GradientSlice, GradValue
from core.verify import InputSpec, RandomSpec, TensorSpec, VerifyOptions, VerifyReport

M = TypeVar("M", bound=message.Message)

Ys = list[str] | dict[str, GradValue]

_NET_TYPES = (caffe2_pb2.NetDef.DESCRIPTOR, caffe2_pb2.OperatorDef.DESCRIPTOR)
#: Fields the wire walk may visit to name the path of a net nested beyond the parser.
_PATH_FIELDS = 20_000


# -- decoding ------------------------------------------------------------------------------------


def decode(body: Body, cls: type[M], max_depth: int, max_ops: int | None = None) -> M:
    """The request message of ``body`` (JSON, text or binary), nesting and all checked.

    ``max_ops``: a body with more ops than this (sub-nets included), or more sub-nets, is
    refused: text and binary before anything walks their ops, large JSON bodies as they
    arrive (``app.api.admission``), small ones once decoded (their sub-nets before).

    Raises:
        DecodeError: malformed body, unknown field, wrong type, bad UTF-8, unset required
            field (every problem at once, with its field path).
        LimitExceededError: sub-nets nested deeper than ``max_depth`` (named by their path);
            ``too_many_ops`` or ``too_many_subnets`` (413).
    """
    if body.media is Media.JSON:
        return observability.request_ops(_decode_json(body, cls, max_depth, max_ops))
    if body.media is Media.TEXT:
        return observability.request_ops(_decode_text(body, cls, max_depth, max_ops))
    try:
        decoded = codec.decode_binary(body.data, cls, max_ops)
    except DecodeError as exc:
        if cls is netgrad_pb2.OpGradientRequest:
            misrouted.refuse_net_on_op(body.data, exc)
        if not (exc.problems and exc.problems[0].path):  # (a located problem: not bare)
            misrouted.refuse_bare_message(body.data, cls, exc)
            refuse_other_media(body.data, exc)
        if "MaxDepth" in exc.message:  # deeper than upb follows: say where, if cheap to find
            is_op = cls is netgrad_pb2.OpGradientRequest
            for sub in limits.wire_submessages(body.data, 1, limit=_PATH_FIELDS):
                limits.check_wire_depth(sub, max_depth, is_op=is_op, max_fields=_PATH_FIELDS)
            raise LimitExceededError.at(exc.message, code="nesting_too_deep") from exc
        raise
    if isinstance(decoded.msg, netgrad_pb2.OpGradientRequest) and not decoded.msg.op.type:
        misrouted.refuse_net_on_op(body.data, DecodeError.at("the op has no type", path="op.type"))
    if decoded.nested:  # (sub-nets: their depth, and their ops against max_ops)
        budget = (None if max_ops is None
                  else limits.OpBudget(max_ops, decoded.msg))
        _check_net_depths(decoded.msg, max_depth, budget)
    try:
        _check_required(decoded.msg, "")
    except DecodeError as exc:
        misrouted.refuse_bare_message(body.data, cls, exc)
        if not body.data:  # (an empty body is an empty message: say so, keep the paths)
            raise _empty_body(exc, cls, "in binary protobuf (or as JSON with Content-Type "
                              "application/json; see GET /docs)") from exc
        raise
    return observability.request_ops(decoded.msg)


def _decode_text(body: Body, cls: type[M], max_depth: int, max_ops: int | None) -> M:
    """A ``text/x-protobuf`` body: the request message in protobuf text format."""
    if max_ops is not None:
        limits.check_text_op_count(body.text or "", max_ops)
    try:
        msg = codec.from_text(body.text or "", cls)
    except DecodeError as exc:
        misrouted.refuse_bare_text(body.text or "", cls, exc)
        misrouted.refuse_json_as_text(body.text or "", exc)
        raise
    budget = None
    if max_ops is not None:
        limits.check_op_count(msg, max_ops)  # (arguments and sub-nets too, as binary)
        budget = limits.OpBudget(max_ops, msg)
    _check_net_depths(msg, max_depth, budget)
    try:
        _check_required(msg, "")
    except DecodeError as exc:
        if msg.ListFields():  # (a body of comments or blanks only is empty too)
            raise
        from app.api.hints import ONE_COMMENT_LINE_HINT, join_hint, text_example

        text = (body.text or "").strip()
        if text.startswith("#") and "\n" not in text and "{" in text:  # (newlines lost)
            raise DecodeError(join_hint(exc.message, ONE_COMMENT_LINE_HINT), [
                dataclasses.replace(p, message=join_hint(p.message, ONE_COMMENT_LINE_HINT))
                for p in exc.problems]) from exc
        raise _empty_body(exc, cls, "in text format, e.g. "
                          + text_example(cls.DESCRIPTOR.name)) from exc
    return msg


def _empty_body(exc: DecodeError, cls: type[message.Message], how: str) -> DecodeError:
    """``exc`` (the required fields an empty body lacks) with "the body is empty: send a
    <message> <how>" after each problem, the paths kept."""
    from app.api.hints import article, join_hint

    name = cls.DESCRIPTOR.name
    empty = f"the body is empty: send {article(name)} {name} {how}"
    return DecodeError(join_hint(exc.message, empty), [
        dataclasses.replace(p, message=join_hint(p.message, empty)) for p in exc.problems])


def _check_net_depths(msg: message.Message, max_depth: int,
                      budget: limits.OpBudget | None = None) -> None:
    """Depth-check every NetDef / OperatorDef field of ``msg``, also those inside its set
    netgrad.v1 message fields (a JobRequest's ``run.net``, ``verify.init_net``), counting
    the ops of their sub-nets against ``budget``.

    Raises:
        LimitExceededError: sub-nets nested deeper than ``max_depth``; ``too_many_ops``,
            ``too_many_subnets``.
    """
    for f, value in msg.ListFields():
        if f.message_type in _NET_TYPES:
            for net in value if f.is_repeated else [value]:
                limits.check_depth(net, max_depth, budget)
        elif (f.message_type is not None and not f.is_repeated
              and f.message_type.full_name.startswith("netgrad.v1.")):
            _check_net_depths(value, max_depth, budget)


class _DuplicateKey(Exception):
    """A JSON object gives one key twice (its value would be silently lost)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook``: the object, or :class:`_DuplicateKey` (as protobuf's own
    ``json_format.Parse`` refuses duplicated keys)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


def _parses_as(text: str, cls: type[M]) -> bool:
    """Whether ``text``'s UTF-8 bytes are a binary ``cls`` (on the error path only)."""
    try:
        cls.FromString(text.encode("utf-8", "surrogatepass"))
    except (message.DecodeError, UnicodeError):
        return False
    return True


def _decode_json(body: Body, cls: type[M], max_depth: int, max_ops: int | None = None) -> M:
    text = body.text or ""
    if not text.strip():
        from app.api.hints import article

        raise DecodeError.at(
            f"the body is empty: send {article(cls.DESCRIPTOR.name)} {cls.DESCRIPTOR.name} "
            "JSON object (see GET /docs)",
            code="invalid_json")
    try:
        obj = json.loads(text, object_pairs_hook=_unique_pairs)
    except _DuplicateKey as exc:
        from app.api.bodypaths import duplicate_key_problems

        problems = duplicate_key_problems(text)
        head = problems[0].message if problems else (
            f"body gives the key {exc.key!r} twice in one JSON object; give each field once")
        if len(problems) > 1:
            head = f"keys are given twice in {len(problems)} places; the first: {head}"
        if not problems:
            raise DecodeError.at(head, code="duplicate_key") from exc
        raise DecodeError(head, problems) from exc
    except json.JSONDecodeError as exc:
        from app.api.hints import PBTXT_HINT, binary_as_json_hint

        head = text.lstrip()[:64]
        hint = f"; {PBTXT_HINT}" if head[:1].isalpha() and ("{" in head or ":" in head) else ""
        as_binary = binary_as_json_hint(text[:2].encode("utf-8"), cls.DESCRIPTOR)
        if as_binary is not None and _parses_as(text, cls):
            hint = f"; {as_binary}"
        if exc.msg == "Extra data" and not hint:
            hint = ("; the body holds more after its JSON value (a second object, or trailing "
                    "text): send one JSON object and nothing after it")
        from app.api.bodypaths import syntax_place

        (path, op_index, op_type), advice = syntax_place(text, exc, cls)
        where = f" in {path}" if path else ""
        if "looks like a file name" in advice:  # (not text format, whatever its colon)
            hint = ""
        raise DecodeError.at(f"body is not valid JSON: {exc}{where}{advice}{hint}",
                             code="invalid_json", path=path, op_index=op_index,
                             op_type=op_type) from exc
    except RecursionError as exc:
        raise LimitExceededError.at(
            "JSON body is nested too deeply to parse (deeper than about 5,000 levels of arrays "
            "and objects); a request's sub-nets nest at most NETGRAD_MAX_DEPTH levels: flatten "
            "the body", code="nesting_too_deep"
        ) from exc
    except ValueError as exc:  # an integer of more digits than Python converts (4 300)
        raise DecodeError.at(
            "body holds an integer of more than 4300 digits, which no field can take",
            code="invalid_json") from exc

    if "\\u" in text:
        from app.api.bodypaths import SURROGATE_ESCAPE, lone_surrogate_problems

        lone = lone_surrogate_problems(obj) if SURROGATE_ESCAPE.search(text) else []
        if lone:
            head = lone[0].message if len(lone) == 1 else (
                f"{len(lone)} strings hold a lone surrogate; the first: {lone[0].message}")
            raise core_jsonmap.with_ops(DecodeError(head, lone), obj, cls)
    # A sub-net is the value of an "n" key or in a "nets" array: a body whose text holds
    # neither key (nor a \u escape, which could spell one) has none to depth-check.
    may_nest = '"n"' in text or '"nets"' in text or "\\u" in text
    # (ops and sub-nets counted before decoding: a small body of many empty sub-nets)
    pre_budget = limits.OpBudget(max_ops) if max_ops is not None and may_nest else None

    def caffe2(value: Any, msg_cls: type[message.Message], path: str) -> message.Message:
        is_op = msg_cls is caffe2_pb2.OperatorDef

        def check(obj: Any) -> None:
            limits.check_json_depth(obj, max_depth, is_op=is_op, budget=pre_budget)

        try:
            return codec.from_json_obj(value, msg_cls, owned=True,
                                       check_nested=check if may_nest else None)
        except DecodeError as exc:
            # (inside an op: OpGradientRequest.op is op 0, as the engine names it, and
            # grad_ops[k] is op k)
            t = value.get("type") if is_op and type(value) is dict else None
            at: dict[str, Any] = {"op_index": int(path[path.rfind("[") + 1:-1])
                                  if path.endswith("]") else 0,
                                  "op_type": t if isinstance(t, str) else None}
            located = [p if p.op_index is not None or not is_op else replace(p, **at)
                       for p in exc.problems if p.path]
            if len(located) > 1:  # every unknown key and refused value below the field
                problems = [replace(p, message=f"{path}.{p.message}", path=f"{path}.{p.path}")
                            for p in located]
                raise jsonwalk.refusal(problems) from exc
            inner = located[0] if located else None
            if inner is not None:  # located below the field (unknown key)
                message = f"{path}.{exc.message}"
                raise DecodeError(message, [replace(inner, message=message,
                                                    path=f"{path}.{inner.path}")]) from exc
            shape = exc.message.startswith("expected a JSON object")  # (as net.op[k] says)
            raise DecodeError.at(f"{path}: {exc.message}", path=path,
                                 code="invalid_field" if shape else "invalid_message",
                                 **(at if is_op else {})) from exc

    msg = jsonmap.decode(obj, cls, caffe2)
    if max_ops is not None:  # (a large body was counted as it arrived; a small one was not)
        limits.check_op_count(msg, max_ops)  # (arguments and sub-nets too, as binary)
        budget = limits.OpBudget(max_ops, msg)
        if may_nest:
            _check_net_depths(msg, max_depth, budget)
    return msg


@cache
def _required_plan(desc: Any) -> tuple[tuple[str, ...], tuple[tuple[str, bool], ...]]:
    """``(required singular fields, netgrad.v1 message fields (name, repeated))``."""
    required = tuple(f.name for f in desc.fields
                     if not f.is_repeated and jsonmap.json_options(f).required)
    inner = tuple((f.name, f.is_repeated) for f in desc.fields
                  if f.message_type is not None and f.message_type.full_name.startswith("netgrad."))
    return required, inner


def _check_required(msg: message.Message, path: str) -> None:
    """Binary requests: singular ``(json).required`` netgrad.v1 fields must be set."""
    required, inner = _required_plan(msg.DESCRIPTOR)
    problems = []
    for name in required:
        if not msg.HasField(name):
            here = f"{path}.{name}" if path else name
            problems.append(Diagnostic("error", "invalid_field", f"{here}: field required",
                                       path=here))
    if problems:
        raise DecodeError("; ".join(p.message for p in problems), problems)
    for name, repeated in inner:
        here = f"{path}.{name}" if path else name
        if repeated:
            for k, sub in enumerate(getattr(msg, name)):
                _check_required(sub, f"{here}[{k}]")
        elif msg.HasField(name):
            _check_required(getattr(msg, name), here)


# -- messages to engine values -------------------------------------------------------------------


def grad_value(g: netgrad_pb2.Gradient) -> GradValue:
    """The engine's gradient value of a ``Gradient`` entry."""
    kind = g.WhichOneof("kind")
    if kind == "dense":
        return g.dense
    if kind == "slice":
        return GradientSlice(g.slice.indices, g.slice.values)
    return None


def _seed(g: GradValue) -> str:
    if g is None:
        return "null (all ones)"
    if isinstance(g, GradientSlice):
        return f"{{indices: '{g.indices}', values: '{g.values}'}}"
    return f"'{g}'"


def ys_value(entries: Sequence[netgrad_pb2.GradientMapEntry]) -> Ys:
    """``ys`` as the engine takes it: a list of blobs when no entry names a gradient.

    A blob listed twice with the same seed counts once. Listed with two different seeds
    (only a binary or text-format body can: JSON refuses a repeated key), it is refused;
    the last entry used to win silently.

    Raises:
        InvalidRequestError: code ``duplicate_ys``, one problem per repeated entry, path
            ``ys[k]``.
    """
    values = [grad_value(e.gradient) for e in entries]
    first: dict[str, int] = {}
    problems: list[Diagnostic] = []
    for k, e in enumerate(entries):
        j = first.setdefault(e.blob, k)
        if j != k and values[j] != values[k]:
            problems.append(Diagnostic(
                "error", "duplicate_ys",
                f"ys[{k}]: blob '{e.blob}' is listed again with seed {_seed(values[k])} (ys[{j}] "
                f"gives {_seed(values[j])}); a blob has one seed: keep one entry",
                path=f"ys[{k}]",
                blobs=(e.blob,)))
    if problems:
        raise InvalidRequestError(problems[0].message, problems)
    if all(v is None for v in values):
        return [e.blob for e in entries]
    return {e.blob: values[first[e.blob]] for e in entries}


def _opt(msg: message.Message, name: str) -> Any:
    return getattr(msg, name) if msg.HasField(name) else None


#: The dtype names inputs may give, with the Caffe2 / NumPy spellings the engine also takes.
DTYPE_NAMES = ("float32 (or float, FLOAT), float64 (or double, DOUBLE), int32 (or INT32), "
               "int64 (or INT64), bool (or BOOL)")


def _check_dtype(i: netgrad_pb2.InputSpec, kind: str, n: int) -> None:
    from core.verify.specs import DTYPES

    dtype = getattr(i, kind).dtype
    if dtype and dtype not in DTYPES:
        raise InvalidRequestError.at(
            f"input '{i.blob}': dtype {dtype!r} is not one of {DTYPE_NAMES}",
            path=f"inputs[{n}].{kind}.dtype", blobs=[i.blob], code="invalid_dtype")


def input_specs(specs: Iterable[netgrad_pb2.InputSpec]) -> list[InputSpec]:
    """Fed blobs as the engine takes them (dtype default float64, distribution normal).

    Raises:
        InvalidRequestError: a dtype name that is not one of :data:`DTYPE_NAMES`.
    """
    out = []
    for n, i in enumerate(specs):
        kind = i.WhichOneof("kind")
        tensor = random = None
        if kind is not None:
            _check_dtype(i, kind, n)
        if kind == "tensor":
            t = i.tensor
            tensor = TensorSpec(list(t.shape), t.dtype or "float64", list(t.data))
        elif kind == "random":
            r = i.random
            random = RandomSpec(list(r.shape), r.dtype or "float64", r.distribution or "normal",
                                _opt(r, "seed"), _opt(r, "low"), _opt(r, "high"))
        out.append(InputSpec(i.blob, tensor, random))
    return out


def verify_options(v: netgrad_pb2.VerifyOptions) -> VerifyOptions:
    """Verification options with the engine's defaults for unset fields."""
    defaults = VerifyOptions()
    tol = v.tolerances
    return VerifyOptions(
        inputs=input_specs(v.inputs),
        mode=v.mode or "fast",
        step=_opt(tol, "step"),
        atol=tol.atol if tol.HasField("atol") else defaults.atol,
        rtol=tol.rtol if tol.HasField("rtol") else defaults.rtol,
        check=list(v.check) or None,
        passes=v.passes if v.HasField("passes") else defaults.passes,
        seed=v.seed if v.HasField("seed") else defaults.seed,
    )


# -- engine values to messages -------------------------------------------------------------------
# Built as keyword dicts: the protobuf constructor turns nested dicts into messages in C,
# several times faster than building each entry message from Python.


def gradient_kw(g: GradValue) -> dict[str, Any]:
    """A ``Gradient`` entry of an engine gradient value, as constructor keywords."""
    if type(g) is str:
        return {"dense": g}
    if isinstance(g, GradientSlice):
        return {"slice": {"indices": g.indices, "values": g.values}}
    return {}


def grad_map_kw(grad_map: Mapping[str, GradValue]) -> list[dict[str, Any]]:
    """``GradientMapEntry`` keywords blob -> gradient, in the engine's order."""
    return [{"blob": b, "gradient": {"dense": g}} if type(g) is str
            else {"blob": b, "gradient": gradient_kw(g)} for b, g in grad_map.items()]


def diagnostic_kw(d: Diagnostic) -> dict[str, Any]:
    """``Diagnostic`` keywords (``op_index`` left unset, i.e. -1, when not about one op)."""
    return {"severity": d.severity, "code": d.code, "message": d.message,
            "op_index": d.op_index, "op_type": d.op_type, "path": d.path, "blobs": d.blobs}


def report_pb(report: VerifyReport, diagnostics: Sequence[Diagnostic]) -> netgrad_pb2.VerifyReport:
    """A ``VerifyReport`` message of the engine's report, with ``diagnostics``."""
    blobs = [
        netgrad_pb2.BlobReport(
            blob=b.blob, passed=bool(b.passed), max_abs_error=b.max_abs_error,
            max_rel_error=b.max_rel_error,
            worst_index=[int(i) for i in (b.worst_index or ())],
            analytic=b.analytic, numeric=b.numeric, gradient=b.gradient, note=b.note or None,
            checked=b.checked,
            nondifferentiable=None if b.nondifferentiable is None else bool(b.nondifferentiable),
        )
        for b in report.blobs
    ]
    return netgrad_pb2.VerifyReport(
        passed=bool(report.passed), mode=report.mode, blobs=blobs,
        diagnostics=[diagnostic_kw(d) for d in diagnostics],
        step=report.step, atol=report.atol, rtol=report.rtol,
    )


def tensor_pb(arr: np.ndarray) -> netgrad_pb2.Tensor:
    """A fetched array as a ``Tensor`` (row-major float64 data, NumPy dtype name)."""
    return netgrad_pb2.Tensor(shape=[int(d) for d in arr.shape], dtype=str(arr.dtype),
                              data=arr.reshape(-1).astype(np.float64).tolist())


# -- answers -------------------------------------------------------------------------------------


def respond(body: Body, msg: message.Message, vary: bool = False) -> Response:
    """``msg`` in the negotiated encoding: binary protobuf, protobuf text format (UTF-8,
    fields in number order, as ``codec.to_text`` writes them), or its JSON form.

    An answer that cannot be JSON (an ``Argument.s`` of bytes that are not UTF-8, which only
    a binary or text-format request can send) is binary protobuf or text format instead
    when the client's ``Accept`` names one (:func:`~app.api.negotiation.protobuf_fallback`);
    otherwise a problem names every such field: a 406 for an ``Accept`` that names JSON
    only, a 400 for none or ``*/*`` (the default, JSON, was asked for). ``vary``: the
    answer says ``Vary: Accept`` whatever its encoding (a ``GET``, which caches may keep).

    Raises:
        ProblemError: 406 ``not_acceptable``; DecodeError: 400.
    """
    if vary:
        resp = respond(body, msg)
        resp.headers["Vary"] = "Accept"
        return resp
    observability.response_ops(msg)
    if body.accept is Media.PROTOBUF:
        return Response(codec.to_binary(msg), media_type=body.accept_type)
    if body.accept is Media.TEXT:
        return _text_response(msg, body.accept_type)
    try:
        obj = jsonmap.encode(msg)
    except DecodeError as exc:
        fallback = protobuf_fallback(body.accept_header, body.content_type)
        if fallback in TEXT_TYPES:
            return _text_response(msg, fallback, {"Vary": "Accept"})
        if fallback is not None:
            return Response(codec.to_binary(msg), media_type=fallback,
                            headers={"Vary": "Accept"})
        raise _not_json(msg, json_only(body.accept_header)) from exc
    return Response(json_bytes(obj, size_hint=msg.ByteSize()), media_type=Media.JSON.value)


def _text_response(msg: message.Message, media_type: str,
                   headers: dict[str, str] | None = None) -> Response:
    """``msg`` in protobuf text format: bytes that are not UTF-8 written as escapes."""
    return Response(codec.to_text(msg).encode("utf-8"),
                    media_type=f"{media_type}; charset=utf-8", headers=headers)


def _not_json(msg: message.Message, refused: bool) -> Exception:
    from app.api.bodypaths import undecodable_text_paths
    from app.errors import ProblemError

    paths = undecodable_text_paths(msg)
    shown = ", ".join(paths[:10]) + (f" and {len(paths) - 10} more" if len(paths) > 10 else "")
    verb = "hold" if len(paths) > 1 else "holds"
    detail = (f"the answer cannot be JSON: {shown or 'a text field'} {verb} bytes that are not "
              "UTF-8 (an Argument.s the request sent as bytes), which JSON cannot show as "
              "text; ask for binary protobuf (Accept: application/x-protobuf or "
              "application/protobuf) or text format (Accept: text/x-protobuf)")
    code = "not_acceptable" if refused else "answer_not_json"
    problems = [Diagnostic("error", code, f"{p}: holds bytes that are not UTF-8; ask for "
                           "Accept: application/x-protobuf (or application/protobuf, or text "
                           "format: text/x-protobuf)", path=p)
                for p in paths]
    if not refused:  # (no Accept, or */*: the default, JSON, was asked for)
        return DecodeError(detail, problems)
    return ProblemError(406, code, detail, problems)
