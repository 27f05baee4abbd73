"""Request messages of the netgrad service, built from Caffe2 messages, dicts or names.

:mod:`netgrad.client` re-exports every public name here; its clients call these builders.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from google.protobuf.message import Message

from netgrad._json import from_json, to_json
from netgrad.errors import JobCancelledError, error_for
from netgrad.proto import caffe2_pb2, netgrad_pb2

M = TypeVar("M", bound=Message)
NetLike = caffe2_pb2.NetDef | Mapping[str, Any] | Message
OpLike = caffe2_pb2.OperatorDef | Mapping[str, Any] | Message
#: Outputs to differentiate: blob names (all-ones seeds), or blob -> seed gradient blob
#: (``None`` = all-ones seed).
YsLike = Sequence[str] | Mapping[str, str | None]
InputLike = netgrad_pb2.InputSpec | Mapping[str, Any]
#: A gradient entry: ``None``, a blob name, or ``{"indices": ..., "values": ...}``.
GradientLike = str | None | Mapping[str, str]
#: What an asynchronous job answers when done: a verification report or fetched blobs.
JobResult = netgrad_pb2.VerifyResponse | netgrad_pb2.RunResponse


def tensor_input(blob: str, shape: Sequence[int], data: Sequence[float],
                 dtype: str | None = None) -> netgrad_pb2.InputSpec:
    """An explicit input tensor (row-major ``data``; dtype default float64 on the server)."""
    spec = netgrad_pb2.InputSpec(blob=blob)
    spec.tensor.shape.extend(shape)
    spec.tensor.data.extend(data)
    if dtype is not None:
        spec.tensor.dtype = dtype
    return spec


def random_input(blob: str, shape: Sequence[int], *, dtype: str | None = None,
                 distribution: str | None = None, seed: int | None = None,
                 low: float | None = None, high: float | None = None) -> netgrad_pb2.InputSpec:
    """A random input tensor drawn by the server (see ``RandomSpec`` in the API docs)."""
    spec = netgrad_pb2.InputSpec(blob=blob)
    spec.random.shape.extend(shape)
    for name, value in (("dtype", dtype), ("distribution", distribution), ("seed", seed),
                        ("low", low), ("high", high)):
        if value is not None:
            setattr(spec.random, name, value)
    return spec


def as_message(value: Any, cls: type[M]) -> M:
    """``value`` as a ``cls`` message: itself, the same message of another generated module
    (re-parsed), or a dict in the JSON form.

    Raises:
        TypeError: anything else.
    """
    if isinstance(value, cls):
        return value
    if isinstance(value, Message) and value.DESCRIPTOR.full_name == cls.DESCRIPTOR.full_name:
        return cls.FromString(value.SerializeToString())
    if isinstance(value, Mapping):
        return from_json(dict(value), cls)
    raise TypeError(f"expected a {cls.DESCRIPTOR.full_name} message or a dict, "
                    f"got {type(value).__name__}")


def _set_gradient(g: Any, value: GradientLike) -> None:
    if value is None:
        return
    if isinstance(value, str):
        g.dense = value
    else:
        g.slice.indices = value["indices"]
        g.slice.values = value["values"]


def _add_ys(field: Any, ys: YsLike) -> None:
    if isinstance(ys, str):
        raise TypeError("ys is a list of blob names or a map blob -> seed gradient, not a str")
    items = ys.items() if isinstance(ys, Mapping) else ((y, None) for y in ys)
    for blob, seed in items:
        entry = field.add(blob=blob)
        _set_gradient(entry.gradient, seed)
        if seed is None:
            entry.ClearField("gradient")


def _add_inputs(field: Any, inputs: Sequence[InputLike]) -> None:
    for i in inputs:
        field.add().CopyFrom(as_message(i, netgrad_pb2.InputSpec))


# -- request builders (shared by both clients) ---------------------------------------------------
def op_request(op: OpLike, g_output: Sequence[GradientLike]) -> netgrad_pb2.OpGradientRequest:
    """``OpGradientRequest``: one gradient entry per output of ``op``."""
    req = netgrad_pb2.OpGradientRequest()
    req.op.CopyFrom(as_message(op, caffe2_pb2.OperatorDef))  # (keywords re-parse: depth 100)
    for g in g_output:
        _set_gradient(req.g_output.add(), g)
    return req


def net_request(net: NetLike, ys: YsLike, *, skip: int = 0, return_net: bool = False,
                recompute: bool = False, verify: Any = None,
                densify: bool = False) -> netgrad_pb2.NetGradientRequest:
    """``NetGradientRequest``; ``verify`` (a ``VerifyOptions`` or its JSON dict) also checks it;
    ``densify`` returns sparse gradients as dense blobs."""
    req = netgrad_pb2.NetGradientRequest()
    req.net.CopyFrom(as_message(net, caffe2_pb2.NetDef))  # (keywords re-parse: depth 100)
    if densify:
        req.densify = True
    _add_ys(req.ys, ys)
    if skip:
        req.skip = skip
    if return_net:
        req.return_net = True
    if recompute:
        req.recompute = True
    if verify is not None:
        req.verify.CopyFrom(as_message(verify, netgrad_pb2.VerifyOptions))
    return req


def verify_request(net: NetLike, ys: YsLike, *, inputs: Sequence[InputLike] = (),
                   init_net: NetLike | None = None, mode: str | None = None,
                   check: Sequence[str] = (), passes: int | None = None,
                   seed: int | None = None, step: float | None = None,
                   atol: float | None = None, rtol: float | None = None, skip: int = 0,
                   grad_ops: Sequence[OpLike] | None = None,
                   recompute: bool = False) -> netgrad_pb2.VerifyRequest:
    """``VerifyRequest``; ``init_net`` writes weights the net reads (run first)."""
    req = netgrad_pb2.VerifyRequest()
    req.net.CopyFrom(as_message(net, caffe2_pb2.NetDef))
    _add_ys(req.ys, ys)
    _add_inputs(req.verify.inputs, inputs)
    if init_net is not None:
        req.init_net.CopyFrom(as_message(init_net, caffe2_pb2.NetDef))
    options: dict[str, Any] = {"mode": mode, "passes": passes, "seed": seed}
    for name, value in options.items():
        if value is not None:
            setattr(req.verify, name, value)
    req.verify.check.extend(check)
    tolerances: dict[str, float | None] = {"step": step, "atol": atol, "rtol": rtol}
    for name, tol in tolerances.items():
        if tol is not None:
            setattr(req.verify.tolerances, name, tol)
    if skip:
        req.skip = skip
    for op in grad_ops or ():
        req.grad_ops.add().CopyFrom(as_message(op, caffe2_pb2.OperatorDef))
    if recompute:
        req.recompute = True
    return req


def run_request(net: NetLike, fetch: Sequence[str], *, inputs: Sequence[InputLike] = (),
                init_net: NetLike | None = None, ys: YsLike | None = None, skip: int = 0,
                recompute: bool = False, densify: bool = False) -> netgrad_pb2.RunRequest:
    """``RunRequest``; with ``ys`` the gradient ops are appended before running (``densify``
    as for :func:`net_request`)."""
    req = netgrad_pb2.RunRequest(fetch=list(fetch))
    req.net.CopyFrom(as_message(net, caffe2_pb2.NetDef))
    _add_inputs(req.inputs, inputs)
    if init_net is not None:
        req.init_net.CopyFrom(as_message(init_net, caffe2_pb2.NetDef))
    if ys:
        _add_ys(req.ys, ys)
    if skip:
        req.skip = skip
    if recompute:
        req.recompute = True
    if densify:
        req.densify = True
    return req


def job_request(req: netgrad_pb2.VerifyRequest | netgrad_pb2.RunRequest | Message
                | Mapping[str, Any]) -> netgrad_pb2.JobRequest:
    """A ``POST /v1/jobs`` body holding ``req`` (from :func:`verify_request` or
    :func:`run_request`, or any class of those messages), or a whole job request in the
    JSON form (``{"verify": {...}}`` or ``{"run": {...}}``).

    Raises:
        TypeError: ``req`` is neither a verify nor a run request.
    """
    if isinstance(req, Mapping):
        if len(req) != 1 or next(iter(req)) not in ("verify", "run"):
            raise TypeError('a job dict is {"verify": {...}} or {"run": {...}}')
        return as_message(req, netgrad_pb2.JobRequest)
    if not isinstance(req, Message):
        raise TypeError(f"a job is a VerifyRequest or a RunRequest, not {type(req).__name__}")
    name = req.DESCRIPTOR.full_name
    job = netgrad_pb2.JobRequest()
    if name == netgrad_pb2.VerifyRequest.DESCRIPTOR.full_name:
        job.verify.CopyFrom(as_message(req, netgrad_pb2.VerifyRequest))
        return job
    if name == netgrad_pb2.RunRequest.DESCRIPTOR.full_name:
        job.run.CopyFrom(as_message(req, netgrad_pb2.RunRequest))
        return job
    raise TypeError(f"a job is a VerifyRequest or a RunRequest, not {name}")


def job_outcome(status: netgrad_pb2.JobStatus) -> JobResult | None:
    """The result of a finished job; ``None`` while it is queued or running.

    Raises:
        ProblemError: the job failed (the subclass of the problem's status, as the
            synchronous route would have raised).
        JobCancelledError: the job was cancelled.
    """
    if status.status == "done":
        return status.verify if status.kind == "verify" else status.run
    if status.status == "failed":
        doc = to_json(status.error)
        raise error_for(int(status.error.status or 500), doc if isinstance(doc, dict) else {})
    if status.status == "cancelled":
        raise JobCancelledError(status.id)
    return None
