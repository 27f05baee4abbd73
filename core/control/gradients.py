"""Gradient makers of the control ops ``Do``, ``If`` and ``While``, and output renaming.

Source: Caffe2 ``control_ops_grad.py`` (``gen_do_gradient``, ``gen_if_gradient``,
``gen_while_gradient``, ``dedupe_g_output``, ``disambiguate_grad_if_op_output``), spec
§3.2-§3.6. Corrected upstream defects (spec §3.8):

* #1 disagreeing branch gradients raise a real :class:`~core.errors.GradientError`;
* #2 the condition blob is removed from the If gradient's inputs by name;
* #3 every list is in first-appearance order, never set order;
* #4 a Do whose inner net yields no gradient op keeps its dedupe copies and returns one
  ``None`` per input;
* #5 ``g_input`` has one entry per forward input, the workspace blob included (``None``);
* #6 ``reuse_workspace=0`` is accepted;
* #7 a blob that a Do reads and writes (loop-carried, in place) binds its outer gradient
  once: the final copy writes into the inner name already bound to it;
* #8 names read by zero-fill ops are declared on the gradient If;
* #9 a sparse gradient reaching a control op is a 4xx naming the op and the blob.

Renaming (spec §3.6, issue 3): when accumulation renames an output of a gradient Do, If or
While, :func:`rename_control_output` makes the sub-nets and bindings really write the new
name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from api_schemas import caffe2_pb2
from core.errors import GradientError, InvalidNetError, NetgradError
from core.ir.env import GenEnv
from core.registry import (
    GradientMaker,
    find_arg,
    make_arg,
    make_op,
    register_gradient,
    schema,
)
from core.types import GradientSlice, GradValue

OperatorDef = caffe2_pb2.OperatorDef
NetDef = caffe2_pb2.NetDef

INNER_GRAD = "/_DO_OPERATOR_INNER_GRAD_"
INNER_GRAD_COPY = "/_DO_OPERATOR_INNER_GRAD_COPY_"

SUPPORTED_LOOP_SHAPE = (
    "netgrad differentiates a While whose loop_net holds exactly one Do op without "
    "reuse_workspace (the shape Caffe2's add_while_op / brew.loop / NetBuilder.WhileNet "
    "produce, with copy_external_blobs=1)"
)


# ---------------------------------------------------------------------------------------
# shared helpers (spec §3.2)
# ---------------------------------------------------------------------------------------


def _err(env: GenEnv, op: OperatorDef, message: str, code: str, blobs: Sequence[str] = ()) -> (
    NetgradError
):
    return InvalidNetError.at(
        message,
        op_index=env.op_index,
        op_type=op.type,
        path=env.op_path(env.op_index, op.type),
        blobs=blobs,
        code=code,
    )


def net_argument(op: OperatorDef, name: str) -> NetDef | None:
    """The NetDef held in argument ``name`` of ``op`` (Caffe2 ``_get_net_argument``)."""
    a = find_arg(op, name)
    if a is None or not a.HasField("n"):
        return None
    return a.n


def _bool_arg(op: OperatorDef, name: str) -> bool:
    a = find_arg(op, name)
    return bool(a.i) if a is not None and a.HasField("i") else False


@dataclass
class DoBindings:
    """Parsed and checked blob bindings of a ``Do`` op.

    Attributes:
        subnet: the inner NetDef (arg ``net``).
        outer_to_inner: outer blob name -> inner name, in binding order.
        inner_to_outer: inner name -> outer blob name, in binding order.
        workspace_blob: the last input (= last output), holding the workspace stack.
    """

    subnet: NetDef
    outer_to_inner: dict[str, str]
    inner_to_outer: dict[str, str]
    workspace_blob: str


def check_do(op: OperatorDef, env: GenEnv) -> DoBindings:
    """Validate a ``Do`` op's bindings (Caffe2 ``_do_op_sanity_check_and_process``, spec §3.2).

    Raises:
        InvalidNetError: listing every binding problem of the op at once.
    """
    problems: list[str] = []
    if op.type != "Do":
        problems.append("Expected Do op")
    subnet = net_argument(op, "net")
    if subnet is None:
        problems.append("No net argument found in Do op")
    inner_args = [a for a in op.arg if a.name == "inner_blobs"]
    idx_args = [a for a in op.arg if a.name == "outer_blobs_idx"]
    inner: list[str] = []
    idx: list[int] = []
    for args, label in ((inner_args, "inner_blobs"), (idx_args, "outer_blobs_idx")):
        if len(args) > 1:
            problems.append(f"{label} redefinition")
        if not args:
            problems.append(f"No {label} argument found in Do op")
    if inner_args:
        try:
            inner = [s.decode("utf-8") for s in inner_args[0].strings]
        except UnicodeDecodeError:
            problems.append("inner_blobs holds names that are not UTF-8")
        if not inner:
            problems.append("Empty inner_blobs argument in Do op")
    if idx_args:
        idx = list(idx_args[0].ints)
        if not idx:
            problems.append("Empty outer_blobs_idx argument in Do op")
    if inner and idx and len(inner) != len(idx):
        problems.append(
            f"Invalid blob bindings: different inner/outer blobs lengths "
            f"(inner_blobs has {len(inner)}, outer_blobs_idx has {len(idx)})"
        )
    dup_inner = [n for i, n in enumerate(inner) if n in inner[:i]]
    if dup_inner:
        problems.append(f"Invalid blob bindings: redefinition of inner blob {dup_inner[0]}")
    if not len(op.input) or not len(op.output):
        problems.append("Expected at least one input blob and one output blob (the workspace)")
    ws = op.input[-1] if len(op.input) else ""
    if len(op.input) and len(op.output) and op.input[-1] != op.output[-1]:
        problems.append(
            f"Expected same input/output workspace blob (last input '{op.input[-1]}', "
            f"last output '{op.output[-1]}')"
        )
    ins = list(op.input[:-1])
    outs = list(op.output[:-1])
    if len(set(ins)) != len(ins):
        problems.append("Duplicate input blobs")
    if len(set(outs)) != len(outs):
        problems.append("Duplicate output blobs")
    outer_list = ins + outs
    outer_to_inner: dict[str, str] = {}
    inner_to_outer: dict[str, str] = {}
    for name, k in zip(inner, idx, strict=False):
        if k < 0 or k >= len(outer_list):
            problems.append(
                f"Invalid blob bindings: outer blob index ({k}, inner name: {name}) is out of "
                f"bounds [0, {len(outer_list) - 1}]"
            )
            continue
        outer = outer_list[k]
        if outer in outer_to_inner:
            problems.append(f"Reusage of outer blob name {outer} in Do op")
            continue
        outer_to_inner[outer] = name
        inner_to_outer[name] = outer
    if inner and idx and len(inner) == len(idx):
        unbound = [n for n in dict.fromkeys(outer_list) if n not in outer_to_inner]
        if unbound and not any("out of bounds" in p or "Reusage" in p for p in problems):
            problems.append(
                "Not all outer blob names are used in blob bindings in Do op "
                f"(unbound: {', '.join(unbound)})"
            )
    if problems:
        raise InvalidNetError(
            problems[0],
            [
                _err(env, op, p, "invalid_do_bindings").problems[0]
                for p in problems
            ],
        )
    if subnet is None:  # unreachable: reported above; keeps the type checker precise
        raise _err(env, op, "No net argument found in Do op", "invalid_do_bindings")
    return DoBindings(subnet, outer_to_inner, inner_to_outer, ws)


def dedupe_g_output(
    op: OperatorDef, g_output: Sequence[GradValue]
) -> tuple[list[OperatorDef], list[GradValue]]:
    """Give each output its own gradient blob (Caffe2 ``dedupe_g_output``, spec §3.2).

    A later output reusing a gradient name already claimed by an earlier, different output
    gets ``<output>_<grad>_DEDUP`` filled by a raw ``Copy``. Bindings must be one-to-one.
    """
    copies: list[OperatorDef] = []
    claimed: dict[str, str] = {}
    out: list[GradValue] = []
    for name, g in zip(op.output, g_output, strict=False):
        if isinstance(g, str) and g in claimed and claimed[g] != name:
            new = f"{name}_{g}_DEDUP"
            copies.append(make_op("Copy", [g], [new], name=None))
            out.append(new)
            continue
        if isinstance(g, str):
            claimed.setdefault(g, name)
        out.append(g)
    return copies, out


def _reject_sparse(env: GenEnv, op: OperatorDef, blob: str, g: GradValue, where: str) -> None:
    if isinstance(g, GradientSlice):
        raise GradientError.at(
            f"A sparse gradient (GradientSlice indices={g.indices}, values={g.values}) of blob "
            f"'{blob}' would cross {op.type} op ({where}); sparse gradients through control "
            "ops are not supported. Densify it first (EnsureDense / SparseToDense, or Gather "
            "with dense_gradient=1).",
            op_index=env.op_index,
            op_type=op.type,
            path=env.op_path(env.op_index, op.type),
            blobs=(blob,),
            code="sparse_through_control_op",
        )


@dataclass
class SubnetGradient:
    """Result of differentiating one sub-net (Caffe2 ``_gen_subnet_gradient``).

    The gradient NetDef is ``header`` (the forward sub-net's fields but ops and external
    lists, name + ``_grad``) plus ``ops``; :func:`_put_net` builds it in place inside the
    gradient op's argument, so nested sub-nets are copied once, not three times.

    Attributes:
        header: NetDef fields of the gradient net, without ops.
        ops: gradient ops of the sub-net (more may be appended, e.g. zero fills).
        grad_map: forward blob -> gradient name (dense only).
        inputs: names read by a gradient op before any gradient op wrote them.
        outputs: names written by gradient ops (first-appearance order).
    """

    header: NetDef
    ops: list[OperatorDef]
    grad_map: dict[str, str]
    inputs: list[str]
    outputs: list[str]


def _put_net(
    op: OperatorDef, arg_name: str, header: NetDef, ops: Sequence[OperatorDef]
) -> NetDef:
    """Append argument ``arg_name`` holding ``header`` + ``ops`` to ``op``, built in place."""
    arg = op.arg.add()
    arg.name = arg_name
    arg.n.CopyFrom(header)
    arg.n.op.extend(ops)
    return arg.n


def _io_names(ops: Sequence[OperatorDef]) -> tuple[list[str], list[str]]:
    written: dict[str, None] = {}
    read: dict[str, None] = {}
    for gop in ops:
        for name in gop.input:
            if name not in written:
                read.setdefault(name, None)
        for name in gop.output:
            written.setdefault(name, None)
    return list(read), list(written)


def subnet_gradient(
    op: OperatorDef,
    subnet: NetDef,
    seeds: Mapping[str, GradValue],
    env: GenEnv,
    arg_name: str,
) -> SubnetGradient:
    """Backward pass over a sub-net with the given seeds (spec §3.2 ``_gen_subnet_gradient``).

    Raises:
        LimitExceededError: nesting deeper than the limit.
        GradientError: a sparse gradient would leave the sub-net.
        NetgradError subclasses from the inner pass, with nested sub-net paths.
    """
    from core.ir.backward import backward

    child = env.child(env.op_index, op.type, arg_name)
    grad_ops, gmap = backward(subnet.op, seeds, child, entry=True)
    dense: dict[str, str] = {}
    for blob, g in gmap.items():
        _reject_sparse(env, op, blob, g, f"{arg_name} gradient")
        if isinstance(g, str):
            dense[blob] = g
    header = _copy_except(subnet, NetDef(), ("op", "external_input", "external_output"))
    if header.name:
        header.name += "_grad"
    ins, outs = _io_names(grad_ops)
    return SubnetGradient(header, grad_ops, dense, ins, outs)


# ---------------------------------------------------------------------------------------
# Do (spec §3.3)
# ---------------------------------------------------------------------------------------


@register_gradient("Do", op_schema=schema((1, -1), (1, -1)), raw=True,
                   doc="sub-net in its own workspace; gradient Do pops the saved workspace")
def do_gradient(m: GradientMaker) -> list[OperatorDef]:
    """Gradient of ``Do`` (Caffe2 ``gen_do_gradient``, spec §3.3, fixes §3.8 #4 #5 #6 #7 #9).

    The gradient op is a ``Do`` on the same workspace blob: its sub-net is the inner
    backward pass plus copies out of ``<x>/_DO_OPERATOR_INNER_GRAD_COPY_``; args ``net``,
    ``inner_blobs``, ``outer_blobs_idx``, ``saved_fwd_blobs``; ``is_gradient_op`` set.

    Raises:
        InvalidNetError: bad bindings (every problem listed).
        GradientError: sparse gradients at the boundary, empty seed map.
    """
    op, env = m.op, m.env
    b = check_do(op, env)
    copies, g_output = dedupe_g_output(op, m.g_output)
    m.g_input = [None] * len(op.input)
    seeds: dict[str, GradValue] = {}
    seed_outer: dict[str, str] = {}  # inner seed name -> outer gradient name
    for out, g in zip(op.output[:-1], g_output, strict=False):
        if g is None:
            continue
        _reject_sparse(env, op, out, g, "output gradient")
        inner = b.outer_to_inner[out]
        seeds[inner] = inner + INNER_GRAD
        seed_outer[inner + INNER_GRAD] = str(g)
    if not seeds:
        raise _err(env, op, "Empty initial gradient map for Do op", "empty_gradient_map")
    sub = subnet_gradient(op, b.subnet, seeds, env, "net")
    # Outputs (spec §3.3 step 5): one outer gradient per forward input that got an inner
    # gradient, copied out through <x>/_DO_OPERATOR_INNER_GRAD_COPY_. An inner gradient may
    # be a seed itself (pass-through ops such as Sum): the copy then reads the seed.
    seed_by_outer = {outer: inner for inner, outer in seed_outer.items()}
    out_bindings: dict[str, str] = {}
    outputs: list[str] = []
    copy_ops: list[OperatorDef] = []
    for k, x in enumerate(op.input[:-1]):
        x_in = b.outer_to_inner[x]
        gx = sub.grad_map.get(x_in)
        if gx is None:
            continue
        outer_grad = x + "_grad"
        # §3.8 #7: when the outer gradient is also an incoming gradient (a blob the Do reads
        # and writes), bind it once: the final copy writes into the seed's inner name.
        target = seed_by_outer.get(outer_grad)
        if target is None:
            target = x_in + INNER_GRAD_COPY
            out_bindings[target] = outer_grad
        if gx != target:
            copy_ops.append(make_op("Copy", [gx], [target], name=None))
        if outer_grad not in outputs:
            outputs.append(outer_grad)
        m.g_input[k] = outer_grad
    if not outputs:  # §3.8 #4: no input gets a gradient; keep the dedupe copies
        return copies
    inner_ops = [*sub.ops, *copy_ops]
    # Inputs (step 6): outer blobs and seeds read before written; other names come from
    # the saved forward workspace. A seed that receives the final copy is bound even if no
    # op reads it, so that the copy's value leaves the Do.
    in_bindings: dict[str, str] = {}
    saved: dict[str, None] = {}
    inputs: list[str] = []
    reads, _ = _io_names(inner_ops)
    targets = [seed_by_outer[g] for g in outputs if g in seed_by_outer]
    for name in dict.fromkeys([*reads, *targets]):
        if name in b.inner_to_outer:
            outer = b.inner_to_outer[name]
        elif name in seed_outer:
            outer = seed_outer[name]
        else:
            saved.setdefault(name, None)
            continue
        in_bindings[name] = outer
        if outer not in inputs:
            inputs.append(outer)
    grad = _gradient_control_op(op)
    grad.input.extend([*inputs, b.workspace_blob])
    grad.output.extend([*outputs, b.workspace_blob])
    bindings = {**out_bindings, **in_bindings}
    outer_list = inputs + outputs
    _put_net(grad, "net", sub.header, inner_ops)
    grad.arg.extend(
        [
            make_arg("inner_blobs", list(bindings)),
            make_arg("outer_blobs_idx", [outer_list.index(v) for v in bindings.values()]),
            make_arg("saved_fwd_blobs", list(saved)),
        ]
    )
    check_do(grad, env)
    env.warn(
        "saved_fwd_blobs",
        f"gradient Do reads {len(saved)} forward-local blob(s) from the saved forward "
        f"workspace: {', '.join(saved) if saved else '(none)'}",
        op_index=env.op_index,
        op_type=op.type,
        blobs=list(saved),
        severity="info",
    )
    return [*copies, grad]


def _gradient_control_op(op: OperatorDef) -> OperatorDef:
    """Copy of a forward control op with I/O, args and control_input cleared (name + _grad)."""
    grad = _copy_except(op, OperatorDef(), ("input", "output", "arg", "control_input"))
    if grad.name:
        grad.name += "_grad"
    grad.is_gradient_op = True
    return grad


def _copy_except(src: Any, dst: Any, skip: tuple[str, ...]) -> Any:
    """Copy every set field of ``src`` into ``dst`` but those named in ``skip``.

    Cheaper than ``CopyFrom`` + clearing when the skipped fields hold large sub-nets.
    """
    for field, value in src.ListFields():
        if field.name in skip:
            continue
        if field.is_repeated:
            getattr(dst, field.name).extend(value)
        elif field.message_type is not None:
            getattr(dst, field.name).CopyFrom(value)
        else:
            setattr(dst, field.name, value)
    return dst


def _conditional_seeds(m: GradientMaker) -> tuple[list[OperatorDef], dict[str, GradValue]]:
    """Dedupe copies and the output -> gradient seed map of an If/While (spec §3.4, §3.5).

    Raises:
        InvalidNetError: no condition input, or no output has a gradient.
        GradientError: a sparse output gradient (§3.8 #9).
    """
    op, env = m.op, m.env
    if not len(op.input):
        raise _err(env, op, f"{op.type} op needs a condition input", f"invalid_{op.type.lower()}")
    copies, g_output = dedupe_g_output(op, m.g_output)
    seeds: dict[str, GradValue] = {}
    for out, g in zip(op.output, g_output, strict=False):
        if g is not None:
            _reject_sparse(env, op, out, g, "output gradient")
            seeds[out] = g
    if not seeds:
        raise _err(env, op, f"Empty initial gradient map for {op.type} op", "empty_gradient_map")
    return copies, seeds


# ---------------------------------------------------------------------------------------
# If (spec §3.4)
# ---------------------------------------------------------------------------------------


@register_gradient("If", op_schema=schema((1, -1), (0, -1)), raw=True,
                   doc="then_net/else_net chosen by a bool condition blob")
def if_gradient(m: GradientMaker) -> list[OperatorDef]:
    """Gradient of ``If`` (Caffe2 ``gen_if_gradient``, spec §3.4, fixes §3.8 #1 #2 #3 #8 #9).

    Raises:
        InvalidNetError: no ``then_net``.
        GradientError: branches disagree on a gradient name in a way that cannot be merged;
            sparse gradients at the boundary.
    """
    op, env = m.op, m.env
    copies, seeds = _conditional_seeds(m)
    then_net = net_argument(op, "then_net")
    if then_net is None:
        raise _err(env, op, "Expected then subnet in If op (argument then_net)", "invalid_if")
    else_net = net_argument(op, "else_net")
    then_g = subnet_gradient(op, then_net, seeds, env, "then_net")
    else_g = subnet_gradient(op, else_net, seeds, env, "else_net") if else_net else None
    # A missing else branch leaves every blob as it is: its gradient map is the identity
    # on the incoming gradients.
    dense_seeds = {b: g for b, g in seeds.items() if isinstance(g, str)}
    else_map = else_g.grad_map if else_g is not None else dense_seeds
    grad_map = dict(then_g.grad_map)
    for blob, eg in else_map.items():
        tg = grad_map.get(blob)
        if tg is None or tg == eg:
            grad_map[blob] = eg
            continue
        incoming = seeds.get(blob)
        if tg == incoming:
            grad_map[blob] = eg
        elif eg == incoming:
            continue
        else:
            raise GradientError.at(
                f"Unexpected grad blob name {blob}, {eg}, {tg}: the then and else branches "
                "name the gradient of this blob differently and neither is the incoming "
                "gradient, so the gradient If cannot define one name for it",
                op_index=env.op_index,
                op_type=op.type,
                path=env.op_path(env.op_index, op.type),
                blobs=(blob, tg, eg),
                code="if_branch_gradient_conflict",
            )
    g_input: list[GradValue] = [grad_map.get(i) if k else None for k, i in enumerate(op.input)]
    wanted = {str(op.input[k]): str(g) for k, g in enumerate(g_input) if g is not None}
    then_ops = [*then_g.ops, *_branch_fill_ops(then_g.grad_map, wanted)]
    else_ops = [*(else_g.ops if else_g else []), *_branch_fill_ops(else_map, wanted)]
    else_header: NetDef | None = None
    if else_g is not None:
        else_header = else_g.header
    elif else_ops:
        else_header = NetDef()
        else_header.CopyFrom(then_g.header)
        if else_header.name:
            else_header.name += "_auto_else_zero_blobs_"
    t_in, t_out = _io_names(then_ops)
    e_in, e_out = _io_names(else_ops)
    cond = op.input[0]
    inputs = [cond, *(n for n in dict.fromkeys(t_in + e_in) if n != cond)]
    outputs = list(dict.fromkeys(t_out + e_out))
    grad = _gradient_control_op(op)
    grad.input.extend(inputs)
    grad.output.extend(outputs)
    _put_net(grad, "then_net", then_g.header, then_ops)
    if else_header is not None:
        _put_net(grad, "else_net", else_header, else_ops)
    m.g_input = g_input
    return [*copies, grad]


def _branch_fill_ops(
    branch_map: Mapping[str, GradValue], wanted: Mapping[str, str]
) -> list[OperatorDef]:
    """Ops making one branch define every input gradient the gradient If outputs (§3.4 step 4).

    ``wanted`` maps each forward input of the If to the gradient name the If gives it. When
    the branch's own gradient of the blob's entry value (``branch_map``, see
    :meth:`core.ir.backward.BackwardPass.entry_map`) has that name, nothing is needed. When
    it has another name (the incoming gradient, passed through a branch that does not touch
    the blob), it is copied. When the branch has none (it overwrites the blob without
    reading it, or does not read it at all), the gradient is zeros shaped like the blob,
    even when the name already exists, e.g. as the incoming gradient the other branch
    passes through: upstream copied the incoming gradient there, a wrong input gradient.
    Copies come first, so they read incoming gradients before any fill overwrites them.
    """
    copies: list[OperatorDef] = []
    fills: list[OperatorDef] = []
    for blob, g in wanted.items():
        have = branch_map.get(blob)
        if have == g:
            continue
        if isinstance(have, str):
            copies.append(make_op("Copy", [have], [g], name=None))
        else:
            fills.append(make_op("ConstantFill", [blob], [g], [make_arg("value", 0.0)], name=None))
    return [*copies, *fills]


# ---------------------------------------------------------------------------------------
# While (spec §3.5)
# ---------------------------------------------------------------------------------------


@register_gradient("While", op_schema=schema((1, -1), (0, -1)), raw=True,
                   doc="loop_net repeated while the condition blob holds; optional cond_net")
def while_gradient(m: GradientMaker) -> list[OperatorDef]:
    """Gradient of ``While`` (Caffe2 ``gen_while_gradient``, spec §3.5, fixes §3.8 #3 #7 #9).

    Emits ``HasScope`` + loop-gradient ``Copy`` init ops and a gradient ``While`` whose
    ``cond_net`` is ``HasScope`` over the body's workspace stack (one saved workspace per
    forward iteration, popped last first) and whose ``loop_net`` is the body Do's gradient.

    Raises:
        InvalidNetError: the loop body is not a single Do without ``reuse_workspace``.
        GradientError: sparse gradients at the boundary; empty seed map.
    """
    op, env = m.op, m.env
    copies, seeds = _conditional_seeds(m)
    loop_net = net_argument(op, "loop_net")
    if loop_net is None:
        raise _err(env, op, "While op has no loop_net argument. " + SUPPORTED_LOOP_SHAPE,
                   "unsupported_loop")
    if len(loop_net.op) != 1 or loop_net.op[0].type != "Do":
        kinds = ", ".join(o.type for o in loop_net.op) or "no ops"
        raise _err(
            env,
            op,
            f"Gradient While op requires single Do op as a loop body (found: {kinds}). "
            + SUPPORTED_LOOP_SHAPE,
            "unsupported_loop",
        )
    body = loop_net.op[0]
    if _bool_arg(body, "reuse_workspace"):
        raise _err(
            env,
            op,
            "The loop body Do has reuse_workspace set, so the forward pass keeps no workspace "
            "per iteration and the gradient cannot be computed. " + SUPPORTED_LOOP_SHAPE,
            "unsupported_loop",
        )
    if not len(body.output):
        raise _err(env, op, "The loop body Do has no outputs (workspace blob missing)",
                   "unsupported_loop")
    workspace = body.output[-1]
    diag_mark, counters = len(env.diagnostics), dict(env.counters)
    sub = subnet_gradient(op, loop_net, seeds, env, "loop_net")
    # A loop-carried blob (read and written by the loop) with no incoming gradient still
    # carries gradient from one iteration to the one before once the body's gradient
    # reaches it. Upstream seeded only blobs with an incoming gradient and dropped that
    # part; netgrad gives such blobs zero seeds and differentiates the body again.
    inputs_after_cond = set(op.input[1:])
    zero_seeds = [
        o
        for o in op.output
        if o != workspace and o in inputs_after_cond and o not in seeds and o in sub.grad_map
    ]
    pre_ops: list[OperatorDef] = []
    if zero_seeds:
        for o in zero_seeds:
            seeds[o] = f"_{o}_grad_while_zero"
            pre_ops.append(
                make_op("ConstantFill", [o], [str(seeds[o])], [make_arg("value", 0.0)])
            )
        del env.diagnostics[diag_mark:]
        env.counters.clear()
        env.counters.update(counters)
        sub = subnet_gradient(op, loop_net, seeds, env, "loop_net")
    cond_name = env.unique_net_name("gradient_loop_cond_net")
    cond_blob = cond_name + "/cond"
    cond_net = NetDef()
    cond_net.name = cond_name
    cond_net.op.append(make_op("HasScope", [workspace], [cond_blob]))
    init_ops = [*pre_ops, make_op("HasScope", [workspace], [cond_blob])]
    # Each iteration's output gradient is fed to the body in a private blob
    # ``_<blob>_grad_while_carry``, never in the incoming gradient blob itself: that name
    # may be shared with other blobs' gradients (a pass-through such as Sum hands one blob
    # to several inputs), and upstream's feedback copy overwrote it (issue 7, fuzzer F1).
    # Before the loop the carry holds the incoming gradient; after each gradient iteration
    # it holds the gradient of the value that iteration found (the body's input gradient),
    # or zeros when the body overwrites the blob without reading it (issue 7, A: upstream
    # fed the same incoming gradient to every iteration). A zero-trip loop passes the
    # incoming gradient through.
    loop_ops = list(sub.ops)
    loop_map: dict[str, str] = dict(sub.grad_map)
    entry_zero: list[OperatorDef] = []
    for blob, g in seeds.items():
        if not isinstance(g, str):
            continue
        carry_blob = f"_{blob}_grad_while_carry"
        body_grad = sub.grad_map.get(blob)
        for gop in loop_ops:
            _rename_outer(gop, g, carry_blob)
        if body_grad == g:  # the body updates the gradient in place (§3.8 #7)
            body_grad = carry_blob
        if body_grad is None:
            init_ops.append(make_op("Copy", [g], [carry_blob]))
            entry_zero.append(
                make_op("ConstantFill", [carry_blob], [carry_blob], [make_arg("value", 0.0)])
            )
            body_grad = carry_blob
        elif body_grad == carry_blob:
            init_ops.append(make_op("Copy", [g], [carry_blob]))
        else:
            cond_net.op.append(make_op("Copy", [body_grad], [carry_blob]))
            init_ops.append(make_op("Copy", [g], [body_grad]))
            init_ops.append(make_op("Copy", [g], [carry_blob]))  # defined before the loop
        if blob in inputs_after_cond:
            loop_map[blob] = body_grad
        else:
            loop_map.pop(blob, None)
    loop_ops.extend(entry_zero)
    # Loop-invariant inputs (read by every iteration, never written by the loop) receive
    # one gradient contribution per iteration. Upstream's gradient body overwrote them, so
    # only the first iteration's contribution survived. netgrad sums them into a private
    # accumulator (zeros before the loop, Sum after each iteration's gradient Do) and
    # copies it out after the loop, so accumulation with other consumers sees a plain op.
    carried = set(op.output)
    seed_names = {str(g) for g in seeds.values()}
    after_ops: list[OperatorDef] = []
    for blob in dict.fromkeys(op.input[1:]):
        lg = sub.grad_map.get(blob)
        if lg is None or blob in carried or lg in seed_names:
            continue
        step, acc = f"_{lg}_while_iteration", f"_{lg}_while_sum"
        for gop in loop_ops:
            for j, out in enumerate(gop.output):
                if out == lg:
                    rename_control_output(gop, j, step)
        init_ops.append(make_op("ConstantFill", [blob], [acc], [make_arg("value", 0.0)]))
        loop_ops.append(make_op("Sum", [acc, step], [acc]))
        after_ops.append(make_op("Copy", [acc], [lg]))
    loop_in, loop_out = _io_names(loop_ops)
    grad = _gradient_control_op(op)
    grad.input.extend([cond_blob, *loop_in])
    grad.output.extend(loop_out)
    _put_net(grad, "loop_net", sub.header, loop_ops)
    grad.arg.append(make_arg("cond_net", cond_net))
    m.g_input = [loop_map.get(i) if k else None for k, i in enumerate(op.input)]
    env.warn(
        "while_keeps_workspaces",
        "the gradient While pops one saved forward workspace per iteration: the forward "
        "pass keeps every iteration's workspace alive until the backward pass has run",
        op_index=env.op_index,
        op_type=op.type,
        blobs=[workspace],
    )
    return [*copies, *init_ops, grad, *after_ops]


# ---------------------------------------------------------------------------------------
# renaming outputs of gradient control ops (spec §3.6)
# ---------------------------------------------------------------------------------------


def rename_control_output(
    op: OperatorDef, idx: int, new_name: str, siblings: list[OperatorDef] | None = None
) -> None:
    """Rename output ``idx`` of a gradient Do/If/While so that its sub-nets write ``new_name``.

    If (Caffe2 ``disambiguate_grad_if_op_output``): every branch op writing the old name is
    renamed (gradient Do ops recursively). Do: outputs are bound by position, so renaming
    the output is enough, except when the old name is also an input (§3.8 #7 binding), in
    which case the final copy is re-targeted to a fresh inner name bound to the output.
    While: the body Do is renamed and the loop-gradient copies (``cond_net`` and the init
    copies emitted just before the While in ``siblings``) follow the new name.
    """
    old = op.output[idx]
    if old == new_name:
        return
    if op.type == "If":
        if net_argument(op, "else_net") is None:  # an empty else passes the name through
            empty = NetDef()
            then_net = net_argument(op, "then_net")
            if then_net is not None and then_net.name:
                empty.name = then_net.name + "_auto_else_zero_blobs_"
            op.arg.append(make_arg("else_net", empty))
        for arg in op.arg:
            if arg.name in ("then_net", "else_net") and arg.HasField("n"):
                if any(old in inner.output for inner in arg.n.op):
                    _rename_in_net(arg.n, old, new_name)
                else:  # the branch passes the incoming gradient through under the old name
                    arg.n.op.append(make_op("Copy", [old], [new_name], name=None))
                    if old not in op.input:
                        op.input.append(old)
        op.output[idx] = new_name
    elif op.type == "Do":
        _rename_do_output(op, idx, new_name)
    elif op.type == "While":
        _rename_while_output(op, idx, new_name, siblings)
    else:
        op.output[idx] = new_name


def _rename_in_net(net: NetDef, old: str, new: str) -> None:
    for inner in net.op:
        for j, out in enumerate(inner.output):
            if out == old:
                if inner.type in ("Do", "If", "While"):
                    rename_control_output(inner, j, new)
                else:
                    inner.output[j] = new


def _rename_do_output(op: OperatorDef, idx: int, new: str) -> None:
    old = op.output[idx]
    ins = list(op.input[:-1])
    if old not in ins:
        op.output[idx] = new
        return
    # The old outer name is bound once, at its input position (§3.8 #7). Give the output
    # its own inner name: the copy that wrote the shared inner name now writes a new one.
    inner_arg = find_arg(op, "inner_blobs")
    idx_arg = find_arg(op, "outer_blobs_idx")
    net = net_argument(op, "net")
    if inner_arg is None or idx_arg is None or net is None:
        op.output[idx] = new
        return
    pos_in = ins.index(old)
    shared = None
    for name, k in zip(inner_arg.strings, idx_arg.ints, strict=False):
        if k == pos_in:
            shared = name.decode("utf-8")
            break
    op.output[idx] = new
    if shared is None:
        return
    fresh = shared + "_RENAMED" + INNER_GRAD_COPY
    for inner in reversed(net.op):
        if shared in inner.output:
            j = list(inner.output).index(shared)
            if inner.type in ("Do", "If", "While"):
                rename_control_output(inner, j, fresh)
            else:
                inner.output[j] = fresh
            break
    else:  # the seed itself is the gradient: copy it out explicitly
        net.op.append(make_op("Copy", [shared], [fresh], name=None))
    inner_arg.strings.append(fresh.encode("utf-8"))
    idx_arg.ints.append(len(ins) + idx)


def _rename_while_output(
    op: OperatorDef, idx: int, new: str, siblings: list[OperatorDef] | None
) -> None:
    old = op.output[idx]
    loop = net_argument(op, "loop_net")
    cond = net_argument(op, "cond_net")
    if loop is not None:
        _rename_in_net(loop, old, new)
    op.output[idx] = new
    if cond is None:
        return
    # The body now writes `new`; the copy feeding it back as the next iteration's output
    # gradient must read `new`, and the init copy before the loop must fill `new`.
    fed_back = False
    for c in cond.op:
        if c.type == "Copy" and len(c.input) and c.input[0] == old:
            c.input[0] = new
            fed_back = True
    pos = _position(siblings, op)
    if siblings is not None and pos is not None:
        for s in siblings[:pos]:
            if s.type == "Copy" and len(s.output) and s.output[0] == old:
                s.output[0] = new
    if not fed_back and old in op.input:
        # The loop read its own output gradient under the old name: route it through `new`.
        cond.op.append(make_op("Copy", [new], [old]))
        if siblings is not None and pos is not None:
            siblings.insert(pos, make_op("Copy", [old], [new]))
        if new not in op.input:
            op.input.append(new)


def rename_control_input(op: OperatorDef, old: str, new: str) -> None:
    """Make a gradient Do/If/While read outer blob ``new`` wherever it read ``old``.

    Used when ``recompute`` replaces an overwritten forward value by a recomputed blob
    (issue 7, B and C). If and While sub-nets run in the op's workspace: their reads of
    ``old`` are redirected, nested control ops included. A Do's sub-net runs in the saved
    forward workspace, where the inner name is still forwarded to the (overwritten) outer
    blob and cannot be bound again ("Redefinition of blob"): the inner reads move to a new
    inner name, ``new`` itself, bound to the new outer blob.
    """
    positions = [j for j, name in enumerate(op.input) if name == old]
    for j in positions:
        op.input[j] = new
    if op.type == "Do":
        _rebind_do_input(op, positions, new)
        return
    for arg in op.arg:
        if arg.name in ("then_net", "else_net", "loop_net", "cond_net") and arg.HasField("n"):
            _rename_reads_in_net(arg.n, old, new)


def _rename_reads_in_net(net: NetDef, old: str, new: str) -> None:
    """Redirect the reads of ``old`` in ``net`` that come before any op writes ``old``."""
    for inner in net.op:
        if old in inner.input:
            if inner.type in ("Do", "If", "While"):
                rename_control_input(inner, old, new)
            else:
                for j, name in enumerate(inner.input):
                    if name == old:
                        inner.input[j] = new
        if old in inner.output:
            return


def _rebind_do_input(op: OperatorDef, positions: Sequence[int], new: str) -> None:
    inner_arg = find_arg(op, "inner_blobs")
    idx_arg = find_arg(op, "outer_blobs_idx")
    net = net_argument(op, "net")
    if inner_arg is None or idx_arg is None or net is None:
        return
    for i, k in enumerate(idx_arg.ints):
        if k in positions:
            inner = inner_arg.strings[i].decode("utf-8")
            inner_arg.strings[i] = new.encode("utf-8")
            _rename_reads_in_net(net, inner, new)


def _rename_outer(op: OperatorDef, old: str, new: str) -> None:
    """Rename every read and write of blob ``old`` by ``op`` in the workspace it runs in.

    A Do binds its sub-net to outer blobs by position, so renaming its outer inputs and
    outputs is enough; If and While sub-nets run in the op's workspace and are renamed too.
    """
    if op.type in ("If", "While") and old in op.input:
        rename_control_input(op, old, new)
    for j, name in enumerate(op.input):
        if name == old:
            op.input[j] = new
    for j, name in enumerate(op.output):
        if name == old:
            if op.type in ("If", "While"):
                rename_control_output(op, j, new)
            else:
                op.output[j] = new


def _position(ops: list[OperatorDef] | None, op: OperatorDef) -> int | None:
    """Index of ``op`` in ``ops`` by identity (protobuf ``==`` compares content)."""
    if ops is None:
        return None
    for i, s in enumerate(ops):
        if s is op:
            return i
    return None
