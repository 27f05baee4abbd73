"""Runtime of the control ops: ``Do``, ``If``, ``While``, ``CreateScope``, ``HasScope``.

Source: Caffe2 ``do_op.h``, ``if_op.h``, ``while_op.h``, ``create_scope_op.h`` (spec §4).
These ops are executor-native: they run sub-nets on workspaces rather than computing arrays,
so they have no registry kernel. Importing this module registers each of :data:`NATIVE_OPS`
as its type's native runtime (:func:`core.registry.register_native`); the executor finds
them there and hands them its context (:class:`RunContext`), never importing this module.

Timeline (spec §4.7): ``CreateScope`` clears a workspace stack before each forward
``If``/``While``; every forward ``Do`` pushes a child workspace on its stack (a ``While``
body once per iteration); a gradient ``Do`` pops them again, last first, and runs the inner
gradient net in the saved forward workspace, where the forward's local blobs (and the
``copy_external_blobs`` snapshots of loop bodies) are still present.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from api_schemas import caffe2_pb2
from core.errors import ExecutionError, InvalidNetError, LimitExceededError
from core.executor.limits import RunLimits
from core.executor.workspace import Workspace, WorkspaceStack
from core.registry import (
    GradientStatus,
    bad_argument,
    find_arg,
    register_native,
    register_op,
    schema,
)
from core.types import Diagnostic

OperatorDef = caffe2_pb2.OperatorDef
NetDef = caffe2_pb2.NetDef


class RunContext(Protocol):
    """What a native op needs of the executor (``core.executor.executor.ExecContext``).

    Attributes:
        limits: the job's limits (``max_loop_iterations`` bounds one While run).
    """

    limits: RunLimits

    def run_net(self, net: NetDef, ws: Workspace, prefix: str = "") -> None:
        """Run every op of ``net`` on ``ws``; ``prefix`` is the sub-net path of its ops."""


NativeFn = Callable[[RunContext, OperatorDef, Workspace, str], None]


def _net_arg(op: OperatorDef, name: str) -> NetDef | None:
    """The NetDef held by argument ``name``, or ``None`` when absent."""
    a = find_arg(op, name)
    return a.n if a is not None and a.HasField("n") else None


def _required_net(op: OperatorDef, name: str) -> NetDef:
    """The NetDef held by argument ``name``.

    Raises:
        InvalidNetError: the argument is missing or holds no net.
    """
    net = _net_arg(op, name)
    if net is None:
        raise InvalidNetError(f"{op.type} op requires a '{name}' net argument")
    return net


def _flag(op: OperatorDef, name: str) -> bool:
    """A flag argument (``False`` when absent), read as generation reads it.

    Raises:
        InvalidNetError: code ``invalid_argument``, the argument holds no integer.
    """
    a = find_arg(op, name)
    if a is None:
        return False
    if not a.HasField("i"):
        raise bad_argument(op.type, name, a, "an integer (field i)")
    return bool(a.i)


def _condition(ws: Workspace, name: str, op_type: str) -> bool:
    """Read a one-element condition tensor (spec §4.5, §4.6).

    Raises:
        ExecutionError: the blob is not a tensor or does not hold exactly one element.
    """
    value = ws.get(name)
    if not isinstance(value, np.ndarray):
        raise ExecutionError(f"Invalid condition in {op_type} operator: tensor expected")
    if value.size != 1:
        raise ExecutionError(
            f"Invalid condition tensor in {op_type} operator: single value expected, "
            f"got shape {list(value.shape)}"
        )
    return bool(value.reshape(-1)[0])


def _stack(ws: Workspace, name: str, op_type: str) -> WorkspaceStack:
    value = ws.get_or_unset(name)
    if not isinstance(value, WorkspaceStack):
        raise ExecutionError(
            f"{op_type}: blob '{name}' does not hold a workspace stack (is the CreateScope "
            "that should create it missing or after this op?)"
        )
    return value


# --- CreateScope / HasScope ----------------------------------------------------------------
# CreateScope([] -> [ws]): ws holds an empty WorkspaceStack (children kept for re-use).
# HasScope([ws] -> [b]): b = bool[1] "stack not empty". Neither may be differentiated.
register_op(
    "CreateScope",
    schema(0, 1),
    GradientStatus.SHOULD_NOT_DIFFERENTIATE,
    doc="Create or clear a workspace stack (control flow runtime; executor-native).",
)
register_op(
    "HasScope",
    schema(1, 1),
    GradientStatus.SHOULD_NOT_DIFFERENTIATE,
    doc="Whether a workspace stack is non-empty (control flow runtime; executor-native).",
)


def run_create_scope(ctx: RunContext, op: OperatorDef, ws: Workspace, path: str) -> None:
    """``CreateScope``: make the output hold an empty :class:`WorkspaceStack` (spec §4.3)."""
    if len(op.input) != 0 or len(op.output) != 1:
        raise InvalidNetError("CreateScope takes 0 inputs and 1 output")
    current = ws.get_or_unset(op.output[0])
    if isinstance(current, WorkspaceStack):
        current.clear()
    else:
        ws.set(op.output[0], WorkspaceStack())


def run_has_scope(ctx: RunContext, op: OperatorDef, ws: Workspace, path: str) -> None:
    """``HasScope``: bool tensor of shape [1], true iff the stack is non-empty (spec §4.3)."""
    if len(op.input) != 1 or len(op.output) != 1:
        raise InvalidNetError("HasScope takes 1 input and 1 output")
    stack = _stack(ws, op.input[0], "HasScope")
    ws.set(op.output[0], np.array([not stack.empty()], dtype=np.bool_))


# --- Do ------------------------------------------------------------------------------------
def do_bindings(op: OperatorDef) -> dict[str, str]:
    """Validate a Do op's blob bindings and return inner name -> outer name (spec §4.4).

    The outer list is ``inputs[:-1] + outputs[:-1]`` (the workspace blob excluded);
    ``outer_blobs_idx[k]`` indexes into it.

    Raises:
        InvalidNetError: with Caffe2's messages ("Invalid blob bindings: ...", "Expected same
            input/output workspace blob", "Duplicate input blobs", ...).
    """
    if len(op.input) < 1:
        raise InvalidNetError("Expected at least one input blob")
    if len(op.output) < 1:
        raise InvalidNetError("Expected at least one output blob")
    if op.input[-1] != op.output[-1]:
        raise InvalidNetError("Expected same input/output workspace blob")
    ins, outs = list(op.input[:-1]), list(op.output[:-1])
    if len(set(ins)) != len(ins):
        raise InvalidNetError("Duplicate input blobs")
    if len(set(outs)) != len(outs):
        raise InvalidNetError("Duplicate output blobs")
    a_inner, a_idx = find_arg(op, "inner_blobs"), find_arg(op, "outer_blobs_idx")
    inner = [s.decode("utf-8", "replace") for s in a_inner.strings] if a_inner else []
    idx = [int(i) for i in a_idx.ints] if a_idx else []
    if len(inner) != len(idx):
        raise InvalidNetError("Invalid blob bindings: different inner/outer blobs lengths")
    outer_list = ins + outs
    bindings: dict[str, str] = {}
    used: set[str] = set()
    for name, k in zip(inner, idx, strict=True):
        if name in bindings:
            raise InvalidNetError(f"Invalid blob bindings: redefinition of inner blob {name}")
        if not 0 <= k < len(outer_list):
            raise InvalidNetError(
                f"Invalid blob bindings: outer blob index ({k}, inner name: {name}) is out "
                f"of bounds [0, {len(outer_list) - 1}]"
            )
        outer = outer_list[k]
        if outer in used:
            raise InvalidNetError(f"Invalid blob bindings: Reusage of outer name: {outer}")
        used.add(outer)
        bindings[name] = outer
    if any(o not in used for o in outer_list):
        raise InvalidNetError(
            "Invalid blob bindings: Not all outer names are used in blob bindings"
        )
    return bindings


def run_do(ctx: RunContext, op: OperatorDef, ws: Workspace, path: str) -> None:
    """``Do``: run ``net`` in a child workspace taken from the stack in the last output.

    Forward: push a workspace (or, with ``reuse_workspace``, re-use the top one); after the
    run, ``copy_external_blobs`` snapshots every bound name into the child. Gradient
    (``is_gradient_op``): pop the matching forward workspace, LIFO, binding the gradient
    names with ``skip_defined`` (spec §4.2, §4.4).

    Raises:
        InvalidNetError: bad bindings or flag combination, missing ``net``.
        ExecutionError: no workspace stack, or an empty stack for a gradient Do
            ("Failed to initialize Do op workspace").
    """
    net = _required_net(op, "net")
    is_grad = bool(op.is_gradient_op)
    reuse = _flag(op, "reuse_workspace")
    copy_ext = _flag(op, "copy_external_blobs")
    if is_grad and reuse:
        raise InvalidNetError("Gradient Do op requires use of stacked workspaces")
    if copy_ext and reuse:
        raise InvalidNetError(
            "Reuse workspace and copy external blobs simultaneously in Do op"
        )
    bindings = do_bindings(op)
    stack = _stack(ws, op.output[-1], "Do")
    for name in op.input[:-1]:
        if not ws.has(name):
            raise ExecutionError(f"Do: input blob '{name}' does not exist")
    for name in op.output[:-1]:
        ws.create(name)  # Caffe2 creates output blobs when the op is constructed
    child: Workspace | None
    if is_grad:
        child = stack.pop_gradient_workspace(ws, bindings)
    elif reuse and not stack.empty():
        child = stack.reuse_last_forward_workspace(ws, bindings)
    else:
        child = stack.push_forward_workspace(ws, bindings)
    if child is None:
        raise ExecutionError(
            "Failed to initialize Do op workspace: the workspace stack "
            f"'{op.output[-1]}' is empty (a gradient Do needs a forward run first)"
        )
    ctx.run_net(net, child, f"{path}/net/")
    if copy_ext and not is_grad:
        child.copy_forwarded_tensors(list(bindings))


# --- If ------------------------------------------------------------------------------------
def run_if(ctx: RunContext, op: OperatorDef, ws: Workspace, path: str) -> None:
    """``If``: run ``then_net`` or ``else_net`` in the If's own workspace (spec §4.5).

    Raises:
        InvalidNetError: no input or no ``then_net``.
        ExecutionError: the condition is not a one-element tensor.
    """
    if len(op.input) < 1:
        raise InvalidNetError("If op requires at least one input (the condition)")
    then_net = _required_net(op, "then_net")
    else_net = _net_arg(op, "else_net")
    cond = _condition(ws, op.input[0], "If")
    for name in op.output:
        ws.create(name)
    if cond:
        ctx.run_net(then_net, ws, f"{path}/then_net/")
    elif else_net is not None:
        ctx.run_net(else_net, ws, f"{path}/else_net/")


# --- While ---------------------------------------------------------------------------------
def run_while(ctx: RunContext, op: OperatorDef, ws: Workspace, path: str) -> None:
    """``While``: ``cond_net``, test input 0, ``loop_net``, repeat (spec §4.6).

    The condition is evaluated before the first and after every iteration. One run stops
    with an error after ``limits.max_loop_iterations`` iterations.

    Raises:
        InvalidNetError: no input or no ``loop_net``.
        ExecutionError: the condition is not a one-element tensor.
        LimitExceededError: code ``loop_limit_exceeded``.
    """
    if len(op.input) < 1:
        raise InvalidNetError("While op requires at least one input (the condition)")
    loop_net = _required_net(op, "loop_net")
    cond_net = _net_arg(op, "cond_net")
    for name in op.output:
        ws.create(name)
    cap = ctx.limits.max_loop_iterations
    iterations = 0
    while True:
        if cond_net is not None:
            ctx.run_net(cond_net, ws, f"{path}/cond_net/")
        if not _condition(ws, op.input[0], "While"):
            return
        if iterations >= cap:
            msg = f"While loop did not stop after {cap} iterations (max_loop_iterations)"
            raise LimitExceededError(msg, [Diagnostic("error", "loop_limit_exceeded", msg)])
        iterations += 1
        ctx.run_net(loop_net, ws, f"{path}/loop_net/")


#: Executor-native op types and their runtime functions.
NATIVE_OPS: dict[str, NativeFn] = {
    "CreateScope": run_create_scope,
    "HasScope": run_has_scope,
    "Do": run_do,
    "If": run_if,
    "While": run_while,
}

for _op_type, _fn in NATIVE_OPS.items():
    register_native(_op_type, _fn)
