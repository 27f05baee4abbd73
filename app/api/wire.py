"""Convert request bodies (JSON or binary protobuf) to engine values, and results back.

JSON requests are validated against :mod:`api_schemas.models` (unknown fields refused), then
their Caffe2 parts go through :mod:`core.proto.codec`. Binary requests are ``netgrad.v1``
messages. Both paths check sub-net nesting (:mod:`core.proto.limits`) before anything else
looks at the net.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from google.protobuf import message
from pydantic import BaseModel, ValidationError

from api_schemas import caffe2_pb2, models, netgrad_pb2
from app.api.negotiation import Body, Media, parse_json
from app.errors import diagnostic_json, validation_problems
from core.errors import DecodeError, InvalidRequestError, LimitExceededError
from core.proto import codec, limits
from core.types import Diagnostic, GradientSlice, GradValue
from core.verify import InputSpec, RandomSpec, TensorSpec, VerifyOptions

M = TypeVar("M", bound=message.Message)
P = TypeVar("P", bound=BaseModel)

Ys = list[str] | dict[str, GradValue]


@dataclass
class OpRequest:
    """Decoded ``POST /v1/gradients/op``."""

    op: caffe2_pb2.OperatorDef
    g_output: list[GradValue]


@dataclass
class NetRequest:
    """Decoded ``POST /v1/gradients/net`` (and the net part of ``POST /v1/verify``)."""

    net: caffe2_pb2.NetDef
    ys: Ys
    skip: int = 0
    return_net: bool = False
    verify: VerifyOptions | None = None
    grad_ops: list[caffe2_pb2.OperatorDef] | None = None
    recompute: bool = False


@dataclass
class RunCall:
    """Decoded ``POST /v1/run`` (``ys`` is ``None`` for a forward-only run)."""

    net: caffe2_pb2.NetDef
    inputs: list[InputSpec]
    fetch: list[str]
    ys: Ys | None = None
    skip: int = 0
    recompute: bool = False


# -- decoding helpers --------------------------------------------------------------------------


def _json_model(data: bytes, model: type[P]) -> P:
    obj = parse_json(data)
    try:
        # Lone surrogates (JSON "\udc80") are not UTF-8: refuse them before they become names.
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise DecodeError.at(
            f"JSON body holds a string that is not valid UTF-8 ({exc.reason})",
            code="invalid_utf8",
        ) from exc
    except RecursionError as exc:
        raise LimitExceededError.at(
            "JSON body is nested too deeply", code="nesting_too_deep"
        ) from exc
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        problems = validation_problems(exc.errors())
        raise DecodeError(
            "request body does not match " + model.__name__ + ": "
            + "; ".join(p.message for p in problems),
            problems,
        ) from exc


def _json_message(obj: dict[str, Any], cls: type[M], where: str, max_depth: int) -> M:
    is_op = cls is caffe2_pb2.OperatorDef
    limits.check_json_depth(obj, max_depth, is_op=is_op)
    try:
        return codec.from_json_obj(obj, cls)
    except DecodeError as exc:
        raise DecodeError.at(f"{where}: {exc.message}", path=where, code="invalid_message") from exc


def _binary_request(data: bytes, cls: type[M], net_field: int, max_depth: int, is_op: bool) -> M:
    try:
        return codec.from_binary(data, cls)
    except DecodeError:
        # A too-deep net also fails to decode: say where it is too deep, if that is the cause.
        for sub in limits.wire_submessages(data, net_field):
            limits.check_wire_depth(sub, max_depth, is_op=is_op)
        raise


def _grad_from_json(g: str | models.GradientSliceModel | None) -> GradValue:
    if isinstance(g, models.GradientSliceModel):
        return GradientSlice(g.indices, g.values)
    return g


def _grad_from_pb(g: netgrad_pb2.Gradient) -> GradValue:
    kind = g.WhichOneof("kind")
    if kind == "dense":
        return g.dense
    if kind == "slice":
        return GradientSlice(g.slice.indices, g.slice.values)
    return None


def _ys_from_json(ys: list[str] | dict[str, Any]) -> Ys:
    if isinstance(ys, list):
        return list(ys)
    return {k: _grad_from_json(v) for k, v in ys.items()}


def _ys_from_pb(entries: Sequence[netgrad_pb2.GradientMapEntry]) -> Ys:
    for k, e in enumerate(entries):
        if not e.blob:
            raise InvalidRequestError.at(f"ys[{k}] names no blob", path=f"ys[{k}]")
    if all(e.gradient.WhichOneof("kind") is None for e in entries):
        return [e.blob for e in entries]
    return {e.blob: _grad_from_pb(e.gradient) for e in entries}


def _options(
    inputs: list[InputSpec],
    mode: str,
    step: float | None,
    atol: float | None,
    rtol: float | None,
    check: list[str],
    passes: int | None,
    seed: int | None,
) -> VerifyOptions:
    defaults = VerifyOptions()
    return VerifyOptions(
        inputs=inputs,
        mode=mode,
        step=step,
        atol=defaults.atol if atol is None else atol,
        rtol=defaults.rtol if rtol is None else rtol,
        check=list(check) or None,
        passes=defaults.passes if passes is None else passes,
        seed=defaults.seed if seed is None else seed,
    )


def _inputs_from_json(specs: Sequence[models.InputSpecModel]) -> list[InputSpec]:
    return [
        InputSpec(
            i.blob,
            TensorSpec(list(i.tensor.shape), i.tensor.dtype, list(i.tensor.data))
            if i.tensor
            else None,
            RandomSpec(**i.random.model_dump()) if i.random else None,
        )
        for i in specs
    ]


def _verify_from_json(v: models.VerifyOptionsModel | models.VerifyRequest) -> VerifyOptions:
    inputs = _inputs_from_json(v.inputs)
    tol = v.tolerances or models.TolerancesModel()
    return _options(inputs, v.mode, tol.step, tol.atol, tol.rtol, v.check, v.passes, v.seed)


def _opt(msg: message.Message, name: str) -> Any:
    return getattr(msg, name) if msg.HasField(name) else None


def _inputs_from_pb(specs: Sequence[netgrad_pb2.InputSpec]) -> list[InputSpec]:
    inputs = []
    for i in specs:
        kind = i.WhichOneof("kind")
        tensor = random = None
        if kind == "tensor":
            t = i.tensor
            tensor = TensorSpec(list(t.shape), t.dtype or "float64", list(t.data))
        elif kind == "random":
            r = i.random
            random = RandomSpec(
                list(r.shape),
                r.dtype or "float64",
                r.distribution or "normal",
                _opt(r, "seed"),
                _opt(r, "low"),
                _opt(r, "high"),
            )
        inputs.append(InputSpec(i.blob, tensor, random))
    return inputs


def _verify_from_pb(v: netgrad_pb2.VerifyOptions) -> VerifyOptions:
    inputs = _inputs_from_pb(v.inputs)
    tol = v.tolerances
    return _options(
        inputs,
        v.mode or "fast",
        _opt(tol, "step"),
        _opt(tol, "atol"),
        _opt(tol, "rtol"),
        list(v.check),
        _opt(v, "passes"),
        _opt(v, "seed"),
    )


# -- requests ----------------------------------------------------------------------------------


def op_request(body: Body, max_depth: int) -> OpRequest:
    """Decode ``{op, g_output}``.

    Raises:
        DecodeError: malformed body, unknown field, bad UTF-8, truncated protobuf.
        LimitExceededError: sub-nets nested deeper than ``max_depth``.
    """
    if body.media is Media.JSON:
        m = _json_model(body.data, models.OpGradientRequest)
        op = _json_message(m.op, caffe2_pb2.OperatorDef, "op", max_depth)
        return OpRequest(op, [_grad_from_json(g) for g in m.g_output])
    msg = _binary_request(body.data, netgrad_pb2.OpGradientRequest, 1, max_depth, True)
    limits.check_depth(msg.op, max_depth)
    return OpRequest(msg.op, [_grad_from_pb(g) for g in msg.g_output])


def net_request(body: Body, max_depth: int) -> NetRequest:
    """Decode ``{net, ys, skip, return_net, recompute, verify?}``.

    Raises:
        DecodeError, InvalidRequestError, LimitExceededError: as for :func:`op_request`.
    """
    if body.media is Media.JSON:
        m = _json_model(body.data, models.NetGradientRequest)
        net = _json_message(m.net, caffe2_pb2.NetDef, "net", max_depth)
        verify = _verify_from_json(m.verify) if m.verify is not None else None
        ys = _ys_from_json(m.ys)
        return NetRequest(net, ys, m.skip, m.return_net, verify, recompute=m.recompute)
    msg = _binary_request(body.data, netgrad_pb2.NetGradientRequest, 1, max_depth, False)
    limits.check_depth(msg.net, max_depth)
    verify = _verify_from_pb(msg.verify) if msg.HasField("verify") else None
    ys = _ys_from_pb(msg.ys)
    return NetRequest(msg.net, ys, msg.skip, msg.return_net, verify, recompute=msg.recompute)


def verify_request(body: Body, max_depth: int) -> NetRequest:
    """Decode ``POST /v1/verify`` (``verify`` always set; ``grad_ops`` optional).

    Raises:
        DecodeError, InvalidRequestError, LimitExceededError: as for :func:`op_request`.
    """
    if body.media is Media.JSON:
        m = _json_model(body.data, models.VerifyRequest)
        net = _json_message(m.net, caffe2_pb2.NetDef, "net", max_depth)
        grad_ops = None
        if m.grad_ops is not None:
            grad_ops = [
                _json_message(g, caffe2_pb2.OperatorDef, f"grad_ops[{k}]", max_depth)
                for k, g in enumerate(m.grad_ops)
            ]
        return NetRequest(
            net,
            _ys_from_json(m.ys),
            m.skip,
            False,
            _verify_from_json(m),
            grad_ops,
            recompute=m.recompute,
        )
    msg = _binary_request(body.data, netgrad_pb2.VerifyRequest, 1, max_depth, False)
    limits.check_depth(msg.net, max_depth)
    for g in msg.grad_ops:
        limits.check_depth(g, max_depth)
    return NetRequest(
        msg.net,
        _ys_from_pb(msg.ys),
        msg.skip,
        False,
        _verify_from_pb(msg.verify),
        list(msg.grad_ops) or None,
        recompute=msg.recompute,
    )


def run_request(body: Body, max_depth: int) -> RunCall:
    """Decode ``POST /v1/run``: ``{net, inputs, fetch, ys?, skip?, recompute?}``.

    An empty ``ys`` (JSON ``[]``/``{}``, or no binary entries) means a forward-only run.

    Raises:
        DecodeError, InvalidRequestError, LimitExceededError: as for :func:`op_request`.
    """
    if body.media is Media.JSON:
        m = _json_model(body.data, models.RunRequest)
        net = _json_message(m.net, caffe2_pb2.NetDef, "net", max_depth)
        ys = _ys_from_json(m.ys) if m.ys else None
        return RunCall(
            net, _inputs_from_json(m.inputs), list(m.fetch), ys, m.skip, m.recompute
        )
    msg = _binary_request(body.data, netgrad_pb2.RunRequest, 1, max_depth, False)
    limits.check_depth(msg.net, max_depth)
    ys = _ys_from_pb(msg.ys) if len(msg.ys) else None
    return RunCall(
        msg.net, _inputs_from_pb(msg.inputs), list(msg.fetch), ys, msg.skip, msg.recompute
    )


# -- responses ---------------------------------------------------------------------------------


def json_float(x: float | None) -> float | str | None:
    """A float as JSON: non-finite values spelled as protobuf's JSON mapping does."""
    if x is None:
        return None
    x = float(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def tensor_json(arr: np.ndarray) -> dict[str, Any]:
    """JSON form ``{shape, dtype, data}`` of a fetched tensor (row-major ``data``).

    Floats are Python floats (shortest repr that round-trips the float64 value, so a float32
    value prints as its exact float64 widening), non-finite ones ``"NaN"``/``"Infinity"``/
    ``"-Infinity"``; integers stay exact integers; bools are 0/1.
    """
    flat = arr.reshape(-1)
    data: list[Any]
    if flat.dtype.kind in "iu":
        data = flat.tolist()
    elif flat.dtype.kind == "b":
        data = flat.astype(np.int64).tolist()
    else:
        data = flat.astype(np.float64).tolist()
        if not bool(np.isfinite(flat).all()):
            data = [json_float(v) for v in data]
    return {"shape": [int(d) for d in arr.shape], "dtype": str(arr.dtype), "data": data}


def _tensor_pb(arr: np.ndarray, out: netgrad_pb2.Tensor) -> None:
    out.shape.extend(int(d) for d in arr.shape)
    out.dtype = str(arr.dtype)
    out.data.extend(arr.reshape(-1).astype(np.float64).tolist())


def grad_json(g: GradValue) -> str | dict[str, str] | None:
    """JSON form of a gradient entry."""
    if isinstance(g, GradientSlice):
        return {"indices": g.indices, "values": g.values}
    return g


def _grad_pb(g: GradValue, out: netgrad_pb2.Gradient) -> None:
    if isinstance(g, GradientSlice):
        out.slice.indices = g.indices
        out.slice.values = g.values
    elif g is not None:
        out.dense = g
    else:
        out.Clear()


def _diagnostic_pb(d: Diagnostic, out: netgrad_pb2.Diagnostic) -> None:
    out.severity = d.severity
    out.code = d.code
    out.message = d.message
    out.op_index = -1 if d.op_index is None else d.op_index
    if d.op_type is not None:
        out.op_type = d.op_type
    if d.path is not None:
        out.path = d.path
    out.blobs.extend(d.blobs)


def grad_map_json(grad_map: Mapping[str, GradValue]) -> dict[str, Any]:
    """JSON object blob -> gradient entry, in the engine's order."""
    return {k: grad_json(v) for k, v in grad_map.items()}


def _grad_map_pb(grad_map: Mapping[str, GradValue], out: Any) -> None:
    for blob, g in grad_map.items():
        e = out.add()
        e.blob = blob
        _grad_pb(g, e.gradient)


def op_response(
    grad_ops: Sequence[caffe2_pb2.OperatorDef],
    g_input: Sequence[GradValue],
    diagnostics: Sequence[Diagnostic],
    media: Media,
) -> tuple[dict[str, Any] | None, bytes | None]:
    """``(json_obj, None)`` or ``(None, protobuf bytes)`` of an op-gradient answer."""
    if media is Media.PROTOBUF:
        msg = netgrad_pb2.OpGradientResponse()
        msg.grad_ops.extend(grad_ops)
        for g in g_input:
            _grad_pb(g, msg.g_input.add())
        for d in diagnostics:
            _diagnostic_pb(d, msg.diagnostics.add())
        return None, codec.to_binary(msg)
    return {
        "grad_ops": [codec.to_json_obj(op) for op in grad_ops],
        "g_input": [grad_json(g) for g in g_input],
        "diagnostics": [diagnostic_json(d) for d in diagnostics],
    }, None


def net_response(
    grad_ops: Sequence[caffe2_pb2.OperatorDef],
    grad_map: Mapping[str, GradValue],
    diagnostics: Sequence[Diagnostic],
    net: caffe2_pb2.NetDef | None,
    report: dict[str, Any] | None,
    media: Media,
) -> tuple[dict[str, Any] | None, bytes | None]:
    """``(json_obj, None)`` or ``(None, protobuf bytes)`` of a net-gradient answer.

    ``report`` is the JSON form of a verification report (see :func:`report_pb`).
    """
    if media is Media.PROTOBUF:
        msg = netgrad_pb2.NetGradientResponse()
        msg.grad_ops.extend(grad_ops)
        _grad_map_pb(grad_map, msg.grad_map)
        for d in diagnostics:
            _diagnostic_pb(d, msg.diagnostics.add())
        if net is not None:
            msg.net.CopyFrom(net)
        if report is not None:
            report_pb(report, msg.verify_report)
        return None, codec.to_binary(msg)
    obj: dict[str, Any] = {
        "grad_ops": [codec.to_json_obj(op) for op in grad_ops],
        "grad_map": grad_map_json(grad_map),
        "diagnostics": [diagnostic_json(d) for d in diagnostics],
    }
    if net is not None:
        obj["net"] = codec.to_json_obj(net)
    if report is not None:
        obj["verify_report"] = report
    return obj, None


def verify_response(
    report: dict[str, Any],
    grad_ops: Sequence[caffe2_pb2.OperatorDef],
    grad_map: Mapping[str, GradValue],
    diagnostics: Sequence[Diagnostic],
    media: Media,
) -> tuple[dict[str, Any] | None, bytes | None]:
    """``(json_obj, None)`` or ``(None, protobuf bytes)`` of a verify answer."""
    if media is Media.PROTOBUF:
        msg = netgrad_pb2.VerifyResponse()
        report_pb(report, msg.report)
        msg.grad_ops.extend(grad_ops)
        _grad_map_pb(grad_map, msg.grad_map)
        for d in diagnostics:
            _diagnostic_pb(d, msg.diagnostics.add())
        return None, codec.to_binary(msg)
    return {
        "report": report,
        "grad_ops": [codec.to_json_obj(op) for op in grad_ops],
        "grad_map": grad_map_json(grad_map),
        "diagnostics": [diagnostic_json(d) for d in diagnostics],
    }, None


def report_pb(report: Mapping[str, Any], out: netgrad_pb2.VerifyReport) -> None:
    """Fill a ``VerifyReport`` message from the JSON form of a report."""
    out.passed = bool(report.get("passed"))
    out.mode = str(report.get("mode", ""))
    for key in ("step", "atol", "rtol"):
        if isinstance(report.get(key), int | float):
            setattr(out, key, float(report[key]))
    for b in report.get("blobs", ()):
        e = out.blobs.add()
        e.blob = b["blob"]
        e.passed = bool(b["passed"])
        for key in ("max_abs_error", "max_rel_error", "analytic", "numeric"):
            if b.get(key) is not None:
                setattr(e, key, float(b[key]))
        e.worst_index.extend(int(i) for i in b.get("worst_index", ()))
        if b.get("checked") is not None:
            e.checked = int(b["checked"])
        if b.get("nondifferentiable") is not None:
            e.nondifferentiable = bool(b["nondifferentiable"])
        for key in ("gradient", "note"):
            if b.get(key) is not None:
                setattr(e, key, str(b[key]))
    for d in report.get("diagnostics", ()):
        diag = Diagnostic(**{**d, "blobs": tuple(d.get("blobs", ()))})
        _diagnostic_pb(diag, out.diagnostics.add())


def run_response(
    outputs: Mapping[str, np.ndarray],
    grad_ops: Sequence[caffe2_pb2.OperatorDef] | None,
    grad_map: Mapping[str, GradValue] | None,
    diagnostics: Sequence[Diagnostic],
    media: Media,
) -> tuple[dict[str, Any] | None, bytes | None]:
    """``(json_obj, None)`` or ``(None, protobuf bytes)`` of a run answer.

    ``grad_ops`` and ``grad_map`` are left out (JSON) or empty (binary) when ``None``.
    """
    if media is Media.PROTOBUF:
        msg = netgrad_pb2.RunResponse()
        for blob, arr in outputs.items():
            v = msg.outputs.add()
            v.blob = blob
            _tensor_pb(arr, v.tensor)
        msg.grad_ops.extend(grad_ops or ())
        _grad_map_pb(grad_map or {}, msg.grad_map)
        for d in diagnostics:
            _diagnostic_pb(d, msg.diagnostics.add())
        return None, codec.to_binary(msg)
    obj: dict[str, Any] = {"outputs": {b: tensor_json(a) for b, a in outputs.items()}}
    if grad_ops is not None:
        obj["grad_ops"] = [codec.to_json_obj(op) for op in grad_ops]
    if grad_map is not None:
        obj["grad_map"] = grad_map_json(grad_map)
    obj["diagnostics"] = [diagnostic_json(d) for d in diagnostics]
    return obj, None
