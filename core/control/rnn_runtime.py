"""Runtime of ``RecurrentNetwork`` and ``RecurrentNetworkGradient`` (executor-native).

Source: Caffe2 ``recurrent_network_op.h`` (``RecurrentNetworkOp::DoRunWithType``,
``RecurrentNetworkGradientOp::DoRunWithType``, ``initializeRecurrentInput``,
``applyOffsetAlias``, ``rnn_internal_apply_link``, ``rnn_internal_accumulate_gradient_input``)
and the plain-net path (no RNN executor: every step runs as a simple net; results are the
same). Importing this module registers both ops as native runtimes
(:func:`core.registry.register_native`).

Forward, for an input sequence ``X = input 0`` of shape ``[T, N, ...]``:

1. each recurrent state ``s`` becomes ``[T + L0, N, D]`` with rows ``[0, L0)`` its initial
   value (a 1-D initial value is repeated over the batch; ``L0`` is the first dimension of
   a 3-D initial value, else 1);
2. for ``t = 0 .. T-1`` a step workspace is made (a child of a shared-blobs workspace, a
   child of the op's workspace: names it lacks are read from and written to the parents,
   as Caffe2's shared workspaces do), ``timestep`` is set to int32 ``[t]``, each link's
   internal blob gets rows ``[t + offset, t + offset + window)`` of its external blob, the
   step net runs, and each internal blob the step net wrote is copied back into those rows
   (Caffe2 shares the memory; the copies give the same values);
3. each alias output is ``src[offset:]``.

The step workspaces are kept in the last output (Caffe2's ``step_workspaces``): one per
step when the op carries a ``backward_step_net``, else two used in turn - so a gradient op
needs a forward op that carries ``backward_step_net`` (Caffe2 behaves the same).
``recompute_blobs_on_backward`` blobs live in the shared workspace (overwritten each step).
Steps count against ``max_loop_iterations``, as While iterations do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from api_schemas import caffe2_pb2
from core.control.rnn_args import Link, RnnSpec, parse_rnn, remapped, require_ok
from core.control.runtime import RunContext
from core.errors import ExecutionError, InvalidNetError, LimitExceededError
from core.executor.workspace import UNSET, Workspace
from core.registry import GradientStatus, register_native, register_op, schema
from core.types import Diagnostic

OperatorDef = caffe2_pb2.OperatorDef
NetDef = caffe2_pb2.NetDef


class StepWorkspace(Workspace):
    """A Caffe2 child workspace with a shared parent: a name it does not hold is read from,
    and written to, the parent when the parent has it (Caffe2 ``Workspace(shared)``)."""

    def __init__(self, parent: Workspace) -> None:
        super().__init__()
        self.parent = parent

    def _resolve(self, name: str) -> tuple[Workspace, str]:
        if name in self._blobs or name in self._forwarded or not self.parent.has(name):
            return super()._resolve(name)
        return self.parent._resolve(name)

    def has(self, name: str) -> bool:
        """Whether ``name`` exists here or in a parent."""
        return super().has(name) or self.parent.has(name)

    def set_local(self, name: str, value: Any) -> None:
        """Write ``name`` in this workspace itself (link blobs are per step)."""
        self._blobs[name] = value


@dataclass
class StepWorkspaces:
    """Value of a RecurrentNetwork's last output (Caffe2 ``detail::ScratchWorkspaces``).

    Attributes:
        steps: step workspaces (one per time step when a backward pass follows).
        shared: the shared-blobs workspace the steps are children of.
    """

    steps: list[StepWorkspace] = field(default_factory=list)
    shared: StepWorkspace | None = None
    summary: str = ""

    def __repr__(self) -> str:
        return f"StepWorkspaces({len(self.steps)} steps)"

    def saved_report(self) -> str:
        """What the saved step workspaces held after the forward run: steps x blobs,
        elements (issue 9)."""
        return self.summary

    def summarize(self) -> None:
        """Record :meth:`saved_report` (called at the end of the forward run)."""
        blobs = sum(len(sw.items()) for sw in self.steps)
        elements = sum(int(v.size) for sw in self.steps for _, v in sw.items()
                       if isinstance(v, np.ndarray))
        per = blobs // len(self.steps) if self.steps else 0
        self.summary = (f"the RecurrentNetwork kept {len(self.steps)} step workspace(s) for the "
                f"backward pass: {len(self.steps)} x {per} blobs, {elements} elements in all")


def _tensor(ws: Workspace, name: str, what: str) -> np.ndarray:
    value = ws.get(name)
    if not isinstance(value, np.ndarray):
        raise ExecutionError(f"{what} '{name}' does not hold a tensor")
    return value


def _check_steps(ctx: RunContext, seq_len: int, op_type: str) -> None:
    cap = ctx.limits.max_loop_iterations
    if seq_len > cap:
        msg = (f"{op_type} would run {seq_len} steps, more than max_loop_iterations ({cap}); "
               "time steps count as loop iterations")
        raise LimitExceededError(msg, [Diagnostic("error", "loop_limit_exceeded", msg)])


def _rows(ext: np.ndarray, link: Link, t: int) -> tuple[int, int]:
    lo = t + link.offset
    hi = lo + link.window
    if link.window < 1 or lo < 0 or hi > ext.shape[0]:
        raise ExecutionError(
            f"link {link.internal} <- {link.external} (offset {link.offset}, window "
            f"{link.window}) at step {t} needs rows [{lo}, {hi}) of a blob with "
            f"{ext.shape[0]} rows: the window falls outside the sequence"
        )
    return lo, hi


def run_step(
    ctx: RunContext, net: NetDef, sw: StepWorkspace, links: list[Link], timestep: str, t: int,
    prefix: str,
) -> None:
    """Apply ``links`` at step ``t``, run ``net`` on ``sw``, copy written link blobs back.

    Raises:
        ExecutionError: a window outside its external blob, a written link blob whose size
            differs from its rows.
    """
    sw.set_local(timestep, np.array([t], dtype=np.int32))
    given: dict[str, Any] = {}
    for link in links:
        ext = _tensor(sw, link.external, "link external blob")
        lo, hi = _rows(ext, link, t)
        value = np.array(ext[lo:hi], copy=True)
        sw.set_local(link.internal, value)
        given[link.internal] = value
    ctx.run_net(net, sw, prefix)
    for link in links:
        value = sw.get_or_unset(link.internal)
        if value is given[link.internal] or value is None or value is UNSET:
            continue
        ext = _tensor(sw, link.external, "link external blob")
        lo, hi = _rows(ext, link, t)
        arr = np.asarray(value)
        if arr.size != ext[lo:hi].size:
            raise ExecutionError(
                f"step {t}: blob {link.internal} has shape {list(arr.shape)} but its link "
                f"rows [{lo}, {hi}) of {link.external} have shape {list(ext[lo:hi].shape)}"
            )
        if not ext.flags.writeable:  # a fed (read-only) blob: Caffe2 writes it in place
            ext = np.array(ext, copy=True)
            sw.set(link.external, ext)
        ext[lo:hi] = arr.reshape(ext[lo:hi].shape).astype(ext.dtype, copy=False)


def _seq_dims(ws: Workspace, op: OperatorDef, k: int) -> tuple[np.ndarray, int, int]:
    x = _tensor(ws, op.input[k], f"{op.type} input sequence")
    if x.ndim < 2:
        raise ExecutionError(
            f"{op.type}: input sequence '{op.input[k]}' must be [T, N, ...], got shape "
            f"{list(x.shape)}"
        )
    return x, int(x.shape[0]), int(x.shape[1])


def _init_state(ws: Workspace, state: str, init: np.ndarray, seq_len: int, n: int) -> None:
    """Caffe2 ``initializeRecurrentInput``: ``[T + L0, N, D]`` with the initial rows set."""
    if not 1 <= init.ndim <= 3:
        raise ExecutionError(f"initial value of recurrent state {state} must be 1-D to 3-D, "
                             f"got shape {list(init.shape)}")
    d = int(init.shape[-1])
    l0 = int(init.shape[0]) if init.ndim == 3 else 1
    dtype = init.dtype if init.dtype.kind == "f" else np.dtype(np.float32)
    arr = np.zeros((seq_len + l0, n, d), dtype=dtype)
    if init.ndim >= 2:
        if int(init.shape[-2]) != n:
            raise ExecutionError(
                f"initial value of recurrent state {state} has batch size {init.shape[-2]}, "
                f"the input sequence {n}"
            )
        arr[:l0] = init.reshape(l0, n, d)
    else:
        arr[0] = init.reshape(1, d)
    ws.set(state, arr)


def run_recurrent_network(ctx: RunContext, op: OperatorDef, ws: Workspace, path: str) -> None:
    """``RecurrentNetwork`` forward (Caffe2 ``RecurrentNetworkOp``; see the module docstring).

    Raises:
        InvalidNetError: missing ``step_net``, inconsistent arguments.
        ExecutionError: bad shapes, windows outside the sequence, step-net failures
            (located at ``op[i]:RecurrentNetwork/step_net/op[j]:...``).
        LimitExceededError: more steps than ``max_loop_iterations``.
    """
    spec = parse_rnn(op)
    require_ok(spec, op)
    if spec.step_net is None:
        raise InvalidNetError("RecurrentNetwork op requires a 'step_net' argument")
    if len(op.output) < 1 or len(op.input) < 1:
        raise InvalidNetError("RecurrentNetwork needs an input sequence (input 0) and the step "
                              "workspaces blob as last output")
    _, seq_len, n = _seq_dims(ws, op, 0)
    _check_steps(ctx, seq_len, op.type)
    for state, k in zip(spec.states, spec.initial_ids, strict=True):
        _init_state(ws, state, _tensor(ws, op.input[k], "initial state"), seq_len, n)
    scratch = ws.get_or_unset(op.output[-1])
    if not isinstance(scratch, StepWorkspaces):
        scratch = StepWorkspaces()
    keep_all = spec.backward_step_net is not None
    scratch.shared = StepWorkspace(ws)
    for blob in spec.recompute:
        scratch.shared.create(blob)
    if keep_all:
        _check_step_locals(spec, ws, scratch.shared)
    scratch.steps = []
    cycle = 2
    for t in range(seq_len):
        if keep_all or len(scratch.steps) < cycle:
            scratch.steps.append(StepWorkspace(scratch.shared))
        sw = scratch.steps[t if keep_all else t % cycle]
        run_step(ctx, spec.step_net, sw, spec.links, spec.timestep, t, f"{path}/step_net/")
    for alias in spec.aliases:
        src = _tensor(ws, alias.src, "alias source")
        start = alias.offset if alias.offset >= 0 else src.shape[0] + alias.offset
        if not 0 <= start <= src.shape[0]:
            raise ExecutionError(f"alias {alias.dst} = {alias.src}[{alias.offset}:] is out of "
                                 f"range for {src.shape[0]} rows")
        ws.set(alias.dst, np.array(src[start:], copy=True))
    scratch.summarize()
    ws.set(op.output[-1], scratch)


def _check_step_locals(spec: RnnSpec, ws: Workspace, shared: Workspace) -> None:
    """Refuse a step net whose blobs exist outside the step (when a backward pass follows).

    Such a name is read from and written to the outer workspace, as in Caffe2, so every step
    overwrites it: the backward pass of an earlier step would read a later step's value.

    Raises:
        ExecutionError: naming the blobs.
    """
    if spec.step_net is None:
        return
    links = {lk.internal for lk in spec.links} | {spec.timestep}
    clash = [n for n in dict.fromkeys(o for op in spec.step_net.op for o in op.output)
             if n not in links and n not in spec.recompute and shared.has(n)
             and not isinstance(ws.get_or_unset(n), StepWorkspaces)]
    if clash:
        raise ExecutionError(
            f"the step net writes {', '.join(clash)}, which already exist outside the step: "
            "each step would overwrite them and the backward pass of earlier steps would read "
            "the last step's values; rename the step net's blobs"
        )


def _gradient_layout(op: OperatorDef, spec: RnnSpec) -> tuple[int, list[int], list[int]]:
    """``(number of output gradients fed first, param input indices, outputs_with_grads)``."""
    owg = spec.outputs_with_grads if spec.outputs_with_grads is not None else [0]
    params = spec.params or []
    n_go = len(owg)
    need = 1 + len(params) + len(spec.initial_ids)
    if len(op.output) != need:
        raise InvalidNetError(
            f"RecurrentNetworkGradient has {len(op.output)} outputs; its arguments ask for "
            f"{need} (input 0, {len(params)} param(s), {len(spec.initial_ids)} initial state(s))"
        )
    if len(op.input) < n_go + 2:
        raise InvalidNetError(
            f"RecurrentNetworkGradient has {len(op.input)} inputs: it needs the {n_go} output "
            "gradient(s), then the forward op's inputs and outputs"
        )
    for k in [*params, *spec.initial_ids]:
        if not 0 <= k + n_go < len(op.input):
            raise InvalidNetError(f"RecurrentNetworkGradient: input index {k} out of range")
    return n_go, params, owg


def run_recurrent_network_gradient(
    ctx: RunContext, op: OperatorDef, ws: Workspace, path: str
) -> None:
    """``RecurrentNetworkGradient`` (Caffe2 ``RecurrentNetworkGradientOp``).

    Inputs: the gradients of the outputs listed in ``outputs_with_grads``, then every input
    and every output of the forward op (the step workspaces last). Outputs: the gradient of
    input 0, of each ``param`` input, of each initial recurrent state. The backward step net
    runs in the saved step workspaces from the last step to the first; ``param`` gradients
    sum over the steps (the step net's ``param_grads`` blob, renamed ``<name>_tmpstep``);
    output gradients of ``<state>_all`` outputs are added into the state gradient at the
    step that produced them, that of a ``_last`` output at the last row.

    Raises:
        InvalidNetError: missing ``backward_step_net``, arguments that do not match the
            op's inputs and outputs.
        ExecutionError: fewer saved step workspaces than steps (the forward op carried no
            ``backward_step_net``), bad shapes, failures in the backward step net.
    """
    spec = parse_rnn(op)
    require_ok(spec, op)
    if spec.backward_step_net is None:
        raise InvalidNetError("RecurrentNetworkGradient op requires a 'backward_step_net'")
    n_go, params, owg = _gradient_layout(op, spec)
    x, seq_len, _ = _seq_dims(ws, op, n_go)
    _check_steps(ctx, seq_len, op.type)
    scratch = ws.get_or_unset(op.input[-1])
    if not isinstance(scratch, StepWorkspaces):
        raise ExecutionError(f"blob '{op.input[-1]}' does not hold RecurrentNetwork step "
                             "workspaces (run the forward RecurrentNetwork first)")
    if len(scratch.steps) < seq_len:
        raise ExecutionError(
            f"the forward RecurrentNetwork kept {len(scratch.steps)} step workspaces for "
            f"{seq_len} steps: a forward op keeps one per step only when it carries "
            "backward_step_net (netgrad's return_net puts it there)"
        )
    net = NetDef()
    net.CopyFrom(spec.backward_step_net)
    accum: list[tuple[str, int]] = []
    tmpsteps: list[tuple[str, str]] = []
    for k in spec.initial_ids:
        init = _tensor(ws, op.input[k + n_go], "initial state")
        if init.ndim == 3 and init.shape[0] != 1:
            raise ExecutionError(
                f"initial state '{op.input[k + n_go]}' holds {init.shape[0]} initial steps; "
                "the gradient supports one (window-1 links)"
            )
    for i, k in enumerate(params):
        pgrad = op.output[1 + i]
        ws.set(pgrad, np.zeros_like(_tensor(ws, op.input[k + n_go], "param")))
        cell = remapped(op, spec.param_grads[i]) if spec.param_grads else pgrad
        tmp = cell + "_tmpstep"
        for g in net.op:
            for j, name in enumerate(g.input):
                if name == cell:
                    g.input[j] = tmp
            for j, name in enumerate(g.output):
                if name == cell:
                    g.output[j] = tmp
        tmpsteps.append((pgrad, tmp))
    for state in spec.states:
        sgrad = remapped(op, state + "_grad")
        ws.set(sgrad, np.zeros_like(_tensor(ws, state, "recurrent state")))
        for j, alias in enumerate(spec.aliases):
            if alias.src != state or j not in owg:
                continue
            go = _tensor(ws, op.input[owg.index(j)], "output gradient")
            if alias.offset == 1:
                accum.append((sgrad, owg.index(j)))
            elif alias.offset == -1:
                last = ws.get(sgrad)
                if go.size != last[-1].size:
                    raise ExecutionError(f"gradient of {alias.dst} has shape {list(go.shape)}, "
                                         f"one state row is {list(last[-1].shape)}")
                last[-1] += go.reshape(last[-1].shape)
            else:
                raise InvalidNetError(f"alias {alias.dst} of {state} has offset {alias.offset}; "
                                      "a gradient needs offset 1 or -1")
    xgrad = remapped(op, op.input[n_go] + "_grad")
    ws.set(xgrad, np.zeros_like(x))
    links = [Link(remapped(op, lk.internal), remapped(op, lk.external), lk.offset, lk.window)
             for lk in [*spec.links, *spec.backward_links]]
    shared = scratch.shared if scratch.shared is not None else StepWorkspace(ws)
    internals = {lk.internal for lk in links}
    clash = [n for n in dict.fromkeys(o for g in net.op for o in g.output)
             if n not in internals and (ws.has(n) or n in op.output)]
    if clash:
        raise ExecutionError(
            f"the backward step net writes {', '.join(clash)}, which exist outside the step "
            "(the gradient op's outputs or the workspace's blobs): every step would overwrite "
            "them; regenerate the gradient with netgrad"
        )
    for g in net.op if seq_len else ():  # (no steps, nothing to run: gradients stay zero)
        for name in g.output:
            if not scratch.steps[0].has(name) and name not in internals:
                shared.create(name)
    for t in range(seq_len - 1, -1, -1):
        sw = scratch.steps[t]
        for sgrad, k in accum:
            dst, src = ws.get(sgrad), _tensor(ws, op.input[k], "output gradient")
            if t >= src.shape[0] or src[t].size != dst[t + 1].size:
                raise ExecutionError(f"gradient '{op.input[k]}' does not match the states")
            dst[t + 1] += src[t].reshape(dst[t + 1].shape)
        run_step(ctx, net, sw, links, spec.timestep, t, f"{path}/backward_step_net/")
        for pgrad, tmp in tmpsteps:
            step_g = _tensor(sw, tmp, "step gradient of a param")
            total = ws.get(pgrad)
            if step_g.size != total.size:
                raise ExecutionError(f"step gradient {tmp} has shape {list(step_g.shape)}, its "
                                     f"param gradient {pgrad} {list(total.shape)}")
            ws.set(pgrad, total + step_g.reshape(total.shape))
    if op.output[0] != xgrad:
        ws.set(op.output[0], np.array(ws.get(xgrad), copy=True))
    for i, k in enumerate(spec.initial_ids):
        init = _tensor(ws, op.input[k + n_go], "initial state")
        g = ws.get(remapped(op, spec.states[i] + "_grad"))
        if init.ndim >= 2:
            out = g[: (init.shape[0] if init.ndim == 3 else 1)].reshape(init.shape)
        else:
            out = g[0].sum(axis=0).reshape(init.shape)
        ws.set(op.output[1 + len(params) + i], np.array(out, dtype=init.dtype, copy=True))


def _guarded(fn: Any) -> Any:
    """Report NumPy shape/index errors of a runtime as :class:`ExecutionError` (never a 500)."""

    def run(ctx: RunContext, op: OperatorDef, ws: Workspace, path: str) -> None:
        try:
            fn(ctx, op, ws, path)
        except (ValueError, IndexError, TypeError) as exc:
            raise ExecutionError(f"{op.type} failed: {type(exc).__name__}: {exc}") from exc

    return run


register_op(
    "RecurrentNetworkGradient",
    schema((2, -1), (1, -1)),
    GradientStatus.GRADIENT_OP,
    doc="gradient of RecurrentNetwork: backward_step_net over the saved step workspaces "
    "(executor-native)",
)
register_native("RecurrentNetwork", _guarded(run_recurrent_network))
register_native("RecurrentNetworkGradient", _guarded(run_recurrent_network_gradient))
