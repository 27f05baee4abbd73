"""Run a NetDef on NumPy: the registry's kernels plus the executor-native control ops.

Source: Caffe2 ``SimpleNet`` (ops run one after another on one workspace) and the control
ops of spec §4, which :mod:`core.control.runtime` registers in the registry as native ops.
The entry point for callers is the pure function :func:`execute` ``(net, feeds, limits) ->
blobs``: it builds a fresh :class:`Workspace`, so it is safe to run in worker processes and
never touches global workspace state (house style, "What to avoid").

Every failure is a :class:`~core.errors.NetgradError` located at the op: op index (within
its sub-net), op type and sub-net path such as ``op[3]:If/then_net/op[0]:Do/net/op[1]:Add``.
Op types that would execute user code (Caffe2's ``Python`` ops) are refused before anything
runs; so are op types without a kernel.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from api_schemas import caffe2_pb2
from core.errors import ExecutionError, InvalidRequestError, LimitExceededError, NetgradError
from core.executor.limits import RunLimits, check_elements, default_limits, element_cap
from core.executor.workspace import Workspace, WorkspaceStack
from core.registry import (
    find_arg,
    get_entry,
    get_kernel,
    get_native,
    kernel_inputs_repr,
    nearest_op_types,
)

NetDef = caffe2_pb2.NetDef
OperatorDef = caffe2_pb2.OperatorDef

#: Op types that run arbitrary Python code in Caffe2: never executed.
REFUSED_OP_TYPES: tuple[str, ...] = (
    "Python",
    "PythonGradient",
    "PythonDLPack",
    "PythonDLPackGradient",
)

#: NumPy dtype kinds a blob may have: bool, signed/unsigned int, float.
_BLOB_KINDS = "biuf"

#: ``observer(op, inputs, path)``: called before each kernel op runs, with its input arrays.
#: Kernels never mutate inputs, so these are the values *before* an in-place op overwrites
#: them (bug-cases row 11); the checker uses this to find non-differentiable points.
Observer = Callable[[OperatorDef, list[np.ndarray], str], None]


def _ensure_loaded() -> None:
    """Import every op module once (tolerates a missing control-flow gradient module).

    The control ops' runtime (:mod:`core.control.runtime`) is among them: it registers the
    executor-native ops in the registry, where :class:`ExecContext` finds them.
    """
    from core import ops

    try:
        ops.load_all()
    except ModuleNotFoundError as exc:
        if exc.name != "core.control.gradients":
            raise


def locate(err: NetgradError, op_index: int, op_type: str, path: str) -> NetgradError:
    """A copy of ``err`` (same type) whose unlocated problems point at one op."""
    if all(p.op_index is not None for p in err.problems):
        return err
    problems = [
        p
        if p.op_index is not None
        else dataclasses.replace(p, op_index=op_index, op_type=op_type, path=path)
        for p in err.problems
    ]
    message = err.message if err.message.startswith(path) else f"{path}: {err.message}"
    if len(problems) == 1:
        problems[0] = dataclasses.replace(problems[0], message=message)
    new = type(err)(message, problems)
    new.__cause__ = err.__cause__ or err
    return new



def kernel_failure_text(op: OperatorDef, inputs: list[np.ndarray], exc: Exception) -> str:
    """The message of a kernel's unexpected exception: what the request can change.

    A kernel that NumPy stops on a bool tensor, an empty tensor or a 0-d tensor says so and
    what helps, without Python's text; anything else keeps ``Type: text`` (an input the
    kernel does not check, or a kernel bug). The caller locates the message at the op.
    """
    base = f"{op.type} failed on inputs ({kernel_inputs_repr(inputs)})"
    text = str(exc)
    names = list(op.input)

    def first(pred: Callable[[np.ndarray], bool]) -> int | None:
        return next((k for k, a in enumerate(inputs) if pred(a)), None)

    k = first(lambda a: a.dtype == np.bool_)
    if k is not None and isinstance(exc, (TypeError, ValueError)) and (
            "bool" in text or "'b'" in text or "input types" in text):
        return (f"{base}: input {k} ('{names[k]}') is bool, and {op.type} takes numbers: "
                "Cast it first (Cast with to: 1 for FLOAT)")
    k = first(lambda a: a.size == 0)
    if k is not None and isinstance(exc, (ValueError, IndexError)) and (
            "zero-size" in text or "out of bounds" in text or "index" in text):
        return (f"{base}: input {k} ('{names[k]}') is empty (shape {list(inputs[k].shape)}), "
                f"and {op.type} needs at least one element there")
    k = first(lambda a: a.ndim == 0)
    if k is not None and isinstance(exc, (IndexError, ValueError)) and (
            "tuple index" in text or "dimension" in text or "axis" in text):
        return (f"{base}: input {k} ('{names[k]}') is a scalar (0-d), and {op.type} needs "
                "at least one dimension there: Reshape it (e.g. to shape [1])")
    return f"{base}: {type(exc).__name__}: {text}"

class ExecContext:
    """State of one execution job: limits, deadline, observer.

    Args:
        limits: the job's limits.
        deadline: ``time.monotonic()`` value after which the job stops (default: now +
            ``limits.wall_clock_s``).
        observer: optional hook, see :data:`Observer`.
    """

    def __init__(
        self,
        limits: RunLimits,
        deadline: float | None = None,
        observer: Observer | None = None,
    ) -> None:
        _ensure_loaded()  # kernels and native ops are found in the registry
        self.limits = limits
        self.deadline = deadline if deadline is not None else limits.deadline()
        self.observer = observer

    def run_net(self, net: NetDef, ws: Workspace, prefix: str = "",
                positions: Sequence[int] | None = None) -> None:
        """Run every op of ``net`` in order on ``ws``; ``prefix`` is the sub-net path.

        ``positions``: the index each op has in the caller's list, for problems (the checker
        runs given gradient ops without the seed fills it adopted); by default its index in
        ``net.op``.
        """
        for index, op in enumerate(net.op):
            self.run_op(op, ws, index if positions is None else positions[index], prefix)

    def run_op(self, op: OperatorDef, ws: Workspace, index: int, prefix: str) -> None:
        """Run one op (kernel or native control op) on ``ws``.

        Raises:
            ExecutionError: missing input, kernel failure, wrong outputs.
            LimitExceededError: deadline, tensor size or loop iterations exceeded.
            InvalidNetError: malformed control op.
        """
        path = f"{prefix}op[{index}]:{op.type}"
        if time.monotonic() > self.deadline:
            raise LimitExceededError.at(
                f"{path}: wall-clock limit of {self.limits.wall_clock_s} s exceeded",
                op_index=index,
                op_type=op.type,
                path=path,
                code="wall_clock_exceeded",
            )
        native = get_native(op.type)
        try:
            if native is not None:
                native(self, op, ws, path)
            else:
                self._run_kernel(op, ws, path)
        except NetgradError as err:
            raise locate(err, index, op.type, path) from None
        except MemoryError:
            raise LimitExceededError.at(
                f"{path}: out of memory (address-space limit of "
                f"{self.limits.memory_bytes} bytes)",
                op_index=index,
                op_type=op.type,
                path=path,
                code="memory_exceeded",
            ) from None

    def _run_kernel(self, op: OperatorDef, ws: Workspace, path: str) -> None:
        kernel = get_kernel(op.type)
        if kernel is None:  # pre-checked by validate_net; kept for direct callers
            raise ExecutionError(f"no kernel for op type {op.type}")
        inputs: list[np.ndarray] = []
        for name in op.input:
            value = ws.get(name)
            if not isinstance(value, np.ndarray):
                kind = "a workspace stack" if isinstance(value, WorkspaceStack) else "no tensor"
                raise ExecutionError(f"input blob '{name}' of {op.type} holds {kind}")
            inputs.append(value)
        self._precheck_shape(op, inputs)
        if self.observer is not None:
            self.observer(op, inputs, path)
        try:
            outs = kernel(op, inputs)
        except (NetgradError, MemoryError):
            raise
        except Exception as exc:  # a kernel bug or an unchecked bad shape
            raise ExecutionError(kernel_failure_text(op, inputs, exc)) from exc
        outs = list(outs) if outs is not None else []
        if len(outs) < len(op.output):
            raise ExecutionError(
                f"{op.type} computes {len(outs)} output(s) from these inputs and arguments, but "
                f"the op lists {len(op.output)} output blobs; list at most {len(outs)}"
            )
        arrays = [np.asarray(val) for val in outs[:len(op.output)]]
        if op.type in _BROADCASTING:
            _refuse_growing_in_place(op, inputs, arrays)
        for name, arr in zip(op.output, arrays, strict=False):
            check_elements(arr.size, f"output '{name}' of {op.type}", self.limits)
            ws.set(name, arr)

    def _precheck_shape(self, op: OperatorDef, inputs: list[np.ndarray]) -> None:
        """Refuse a fill whose ``shape`` (argument or shape input) exceeds the element cap."""
        dims: list[int] | None = None
        as_shape = find_arg(op, "input_as_shape")
        if as_shape is not None and as_shape.i and inputs:
            if inputs[0].size <= 64 and inputs[0].dtype.kind in "iu":
                dims = [int(d) for d in inputs[0].reshape(-1)]
        else:
            shape = find_arg(op, "shape")
            if shape is not None and len(shape.ints):
                dims = [int(d) for d in shape.ints]
        if dims is None:
            return
        n = 1
        for d in dims:
            if d < 0:
                return  # the kernel reports negative dimensions itself
            n *= d
        extra = find_arg(op, "extra_shape")
        if extra is not None:
            for d in extra.ints:
                n *= max(int(d), 0)
        check_elements(n, f"{op.type} of shape {dims}", self.limits)


#: Broadcasting elementwise ops whose output may be larger than an input it overwrites.
_BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div"})


def _refuse_growing_in_place(op: OperatorDef, inputs: list[np.ndarray],
                             outs: list[np.ndarray]) -> None:
    """Refuse an in-place broadcasting op whose output is not the shape of the input it reuses.

    ``Add(a[3], b[2, 3]) -> a``: Caffe2 resizes ``a``'s tensor to the output shape before
    reading it (the values are gone), and the gradient, which reduces to ``a``'s shape read
    from the workspace, would keep the broadcast shape: a gradient of the wrong shape for
    ``a`` (adversarial review, stop 21).

    Raises:
        ExecutionError: the output shape differs from the overwritten input's shape.
    """
    for k, name in enumerate(op.output):
        for j, inp in enumerate(op.input):
            if inp == name and k < len(outs) and outs[k].shape != inputs[j].shape:
                raise ExecutionError(
                    f"{op.type} writes '{name}' in place, but its output has shape "
                    f"{list(outs[k].shape)} and the input '{name}' it overwrites has shape "
                    f"{list(inputs[j].shape)}: Caffe2 resizes that input before reading it, "
                    "and its gradient would have the wrong shape; write the output to a new "
                    "blob"
                )


def validate_net(net: NetDef, prefix: str = "", positions: Sequence[int] | None = None) -> None:
    """Refuse code-executing op types anywhere and unknown op types in executed nets.

    ``positions``: the index of each op in the caller's list, as for
    :meth:`ExecContext.run_net`.

    Raises:
        ExecutionError: code ``op_refused`` for ``Python``-family ops (checked in every
            nested NetDef argument), code ``unknown_op_type`` for an op type with neither a
            kernel nor a native implementation; each located by index, type and path.
    """
    _ensure_loaded()
    for k, op in enumerate(net.op):
        index = k if positions is None else positions[k]
        path = f"{prefix}op[{index}]:{op.type}"
        if op.type in REFUSED_OP_TYPES:
            raise ExecutionError.at(
                f"{path}: op type {op.type} executes arbitrary code and is refused",
                op_index=index,
                op_type=op.type,
                path=path,
                code="op_refused",
            )
        if get_native(op.type) is None and get_kernel(op.type) is None:
            known = get_entry(op.type) is not None
            near = [] if known else nearest_op_types(op.type)
            why = "has no NumPy kernel" if known else "is unknown" + (
                f" (did you mean {', '.join(near)}? GET /v1/operators lists every type)"
                if near else " (GET /v1/operators lists every type)"
            )
            raise ExecutionError.at(
                f"{path}: op type {op.type} {why}; it cannot be executed",
                op_index=index,
                op_type=op.type,
                path=path,
                code="unknown_op_type",
            )
        for arg in op.arg:
            if arg.HasField("n"):
                validate_net(arg.n, f"{path}/{arg.name}/")
            for k, sub in enumerate(arg.nets):
                validate_net(sub, f"{path}/{arg.name}[{k}]/")


def feed_blobs(ws: Workspace, feeds: Mapping[str, Any], limits: RunLimits) -> None:
    """Copy ``feeds`` into ``ws`` as NumPy arrays.

    Raises:
        InvalidRequestError: a value is not numeric/bool (e.g. strings or objects).
        LimitExceededError: a fed tensor exceeds ``limits.max_elements``.
    """
    for name, value in feeds.items():
        arr = np.array(value, copy=True)
        if arr.dtype.kind not in _BLOB_KINDS:
            raise InvalidRequestError(
                f"input blob '{name}' has dtype {arr.dtype}; expected bool, int or float"
            )
        check_elements(arr.size, f"input blob '{name}'", limits)
        ws.set(name, arr)


def run(
    net: NetDef,
    ws: Workspace,
    limits: RunLimits | None = None,
    *,
    observer: Observer | None = None,
    deadline: float | None = None,
) -> None:
    """Validate ``net`` and run it on an existing workspace ``ws``.

    Raises:
        ExecutionError, LimitExceededError, InvalidNetError: see :class:`ExecContext`.
    """
    limits = limits or default_limits()
    validate_net(net)
    ctx = ExecContext(limits, deadline, observer)
    with element_cap(limits):
        ctx.run_net(net, ws)


def collect(ws: Workspace, fetch: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """Tensors of ``ws``: the ``fetch`` names, or every written local tensor.

    Raises:
        ExecutionError: a fetched blob is missing or is not a tensor.
    """
    if fetch is None:
        return {k: v for k, v in ws.items() if isinstance(v, np.ndarray)}
    out: dict[str, np.ndarray] = {}
    for name in fetch:
        value = ws.get(name)
        if not isinstance(value, np.ndarray):
            raise ExecutionError(f"blob '{name}' does not hold a tensor")
        out[name] = value
    return out


def execute(
    net: NetDef,
    feeds: Mapping[str, Any],
    limits: RunLimits | None = None,
    *,
    fetch: Iterable[str] | None = None,
    observer: Observer | None = None,
    deadline: float | None = None,
) -> dict[str, np.ndarray]:
    """Run ``net`` on a fresh workspace holding ``feeds``; return the resulting tensors.

    A pure function (no global workspace), picklable for :class:`core.executor.pool.WorkerPool`.

    Args:
        net: the NetDef (control ops ``Do``/``If``/``While``/``CreateScope``/``HasScope``
            included, spec §4).
        feeds: blob name -> array-like (bool, int32, int64, float32, float64); copied.
        limits: job limits (default: the process default, see
            :func:`core.executor.limits.default_limits`).
        fetch: names to return (default: every tensor of the top-level workspace; blobs that
            lived only in a sub-net workspace are not there).
        observer: optional per-op hook (see :data:`Observer`).
        deadline: absolute ``time.monotonic()`` deadline overriding ``limits.wall_clock_s``.

    Returns:
        Blob name -> NumPy array.

    Raises:
        ExecutionError: refused or unknown op type, missing input, kernel failure (bad
            shapes included), located at the op.
        LimitExceededError: a tensor, loop or time limit was hit.
        InvalidRequestError: a feed is not a numeric/bool array.
        InvalidNetError: a malformed control op (bad ``Do`` bindings, missing sub-net).
    """
    limits = limits or default_limits()
    ws = Workspace()
    try:
        feed_blobs(ws, feeds, limits)
        run(net, ws, limits, observer=observer, deadline=deadline)
        return collect(ws, fetch)
    finally:
        ws.release()  # saved sub-workspaces form cycles: free their tensors now
