"""Gradient maker of ``Do``: the inner backward pass, run in the saved forward workspace.

Source: Caffe2 ``control_ops_grad.py`` ``gen_do_gradient`` (spec §3.3), with the fixes of
spec §3.8 #4 (a Do whose inner net yields no gradient op keeps its dedupe copies and returns
one ``None`` per input), #5 (``g_input`` has one entry per forward input, the workspace blob
included), #6 (``reuse_workspace=0`` is accepted), #7 (a blob that the Do reads and writes
binds its outer gradient once) and #9 (a sparse gradient reaching the Do is a 4xx).
"""

from __future__ import annotations

from collections.abc import Mapping

from api_schemas import caffe2_pb2
from core.control.subnets import (
    INNER_GRAD,
    INNER_GRAD_COPY,
    bool_arg,
    check_do,
    dedupe_g_output,
    gradient_control_op,
    invalid_net,
    io_names,
    put_net,
    reject_sparse,
    subnet_gradient,
)
from core.errors import shown_names
from core.ir.env import GenEnv
from core.registry import GradientMaker, make_arg, make_op, register_gradient, schema
from core.types import Diagnostic, GradValue

OperatorDef = caffe2_pb2.OperatorDef


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
    bool_arg(op, "copy_external_blobs")  # (read as the runtime reads it: refused if not i)
    _refuse_reserved_names(op, b.subnet, b.inner_to_outer, env)
    _check_unbound_reads(op, b.subnet, set(b.inner_to_outer), env)
    copies, g_output = dedupe_g_output(op, m.g_output)
    m.g_input = [None] * len(op.input)
    seeds: dict[str, GradValue] = {}
    seed_outer: dict[str, str] = {}  # inner seed name -> outer gradient name
    for out, g in zip(op.output[:-1], g_output, strict=False):
        if g is None:
            continue
        reject_sparse(env, op, out, g, "output gradient")
        inner = b.outer_to_inner[out]
        seeds[inner] = inner + INNER_GRAD
        seed_outer[inner + INNER_GRAD] = str(g)
    if not seeds:
        raise invalid_net(env, op, "Empty initial gradient map for Do op", "empty_gradient_map")
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
    inner_ops = [*sub.ops, *_order_copies(copy_ops, set(seed_outer))]
    # Inputs (step 6): outer blobs and seeds read before written; other names come from
    # the saved forward workspace. A seed that receives the final copy is bound even if no
    # op reads it, so that the copy's value leaves the Do.
    in_bindings: dict[str, str] = {}
    saved: dict[str, None] = {}
    inputs: list[str] = []
    reads, _ = io_names(inner_ops)
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
    grad = gradient_control_op(op)
    grad.input.extend([*inputs, b.workspace_blob])
    grad.output.extend([*outputs, b.workspace_blob])
    bindings = {**out_bindings, **in_bindings}
    outer_list = inputs + outputs
    put_net(grad, "net", sub.header, inner_ops)
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


def _check_unbound_reads(op: OperatorDef, subnet: caffe2_pb2.NetDef, bound: set[str],
                         env: GenEnv) -> None:
    """Warn about a sub-net that reads a blob no binding provides and none of its ops wrote.

    Caffe2's Do runs its sub-net in a child workspace that sees only the bound names
    (spec §4.4): without ``reuse_workspace`` the workspace is new on every run, so such a
    read fails at run time ("blob does not exist") before any gradient runs; with
    ``reuse_workspace`` the blob may be left by an earlier run, and no gradient flows back
    through that run. Either way the blob's inner gradient leaves nowhere: a warning names
    each read (code ``unbound_subnet_read``), located at the reading sub-net op. An input
    that is also an output of the same op is created by that op (Caffe2 creates outputs
    first).
    """
    written = set(bound)
    reuse = bool_arg(op, "reuse_workspace")
    sub_path = f"{env.op_path(env.op_index, op.type)}/net/"
    for i, sub_op in enumerate(subnet.op):
        outs = set(sub_op.output)
        for name in dict.fromkeys(sub_op.input):
            if name in written or name in outs:
                continue
            text = (f"{sub_path}op[{i}]:{sub_op.type} reads '{name}', which no inner_blobs "
                    "binding of the Do provides and no earlier op of its sub-net writes")
            if reuse:
                text += ("; with reuse_workspace it can only be left by an earlier run of "
                         "this Do, and no gradient flows back through that run")
            else:
                text += ("; the Do runs its sub-net in a new workspace that holds only the "
                         "bound blobs, so the forward Do fails there at run time. Bind it: add "
                         f"the outer blob to the Do's inputs and '{name}' to inner_blobs (with "
                         "its index in outer_blobs_idx), or write it in the sub-net first")
            env.diagnostics.append(Diagnostic("warning", "unbound_subnet_read", text, i,
                                              sub_op.type, f"{sub_path}op[{i}]:{sub_op.type}",
                                              (name,)))
        written.update(outs)


def _refuse_reserved_names(op: OperatorDef, subnet: caffe2_pb2.NetDef,
                           inner_to_outer: Mapping[str, str], env: GenEnv) -> None:
    """Refuse sub-net blobs named like the gradient Do's own inner names.

    The gradient Do binds each seed as ``<y>/_DO_OPERATOR_INNER_GRAD_`` and copies input
    gradients out through ``<x>/_DO_OPERATOR_INNER_GRAD_COPY_`` (spec §3.3). A forward
    local of that name, at any depth of the sub-net, is shadowed by the binding: a gradient
    op that reads its forward value reads the seed instead, a wrong gradient with no error
    (adversarial review, stop 34).

    Raises:
        InvalidNetError: code ``gradient_name_collision``, naming the blobs.
    """
    names = dict.fromkeys(inner_to_outer)
    _all_names(subnet, names)
    bad = [n for n in names if n.endswith((INNER_GRAD, INNER_GRAD_COPY))]
    if bad:
        shown = shown_names(bad)
        raise invalid_net(
            env, op, f"the Do's sub-net names {shown} with a suffix the gradient Do reserves "
            f"for its own blobs ({INNER_GRAD}, {INNER_GRAD_COPY}): the gradient would read "
            "the wrong values; rename these blobs", "gradient_name_collision", blobs=bad)


def _all_names(net: caffe2_pb2.NetDef, into: dict[str, None]) -> None:
    """Every blob name of the workspace that runs ``net``: its ops' and those of the nets
    nested in their arguments (an If/While branch runs in the Do's own workspace; review,
    stop 34), but not a nested Do's sub-net, whose names live in its own workspace (and are
    checked when its gradient is made: each name is read once, not once per level)."""
    for o in net.op:
        into.update(dict.fromkeys(o.input))
        into.update(dict.fromkeys(o.output))
        if o.type == "Do":
            continue
        for a in o.arg:
            if a.HasField("n"):
                _all_names(a.n, into)
            for n in a.nets:
                _all_names(n, into)


def _order_copies(copy_ops: list[OperatorDef], seed_names: set[str]) -> list[OperatorDef]:
    """Order the final copies so that none reads a seed another copy already wrote.

    A copy into a seed's inner name (§3.8 #7) overwrites that seed; a pass-through op
    (``Sum``) may have given the same seed to another input, whose copy must read it first
    (review f1, finding 1). Copies into ``_DO_OPERATOR_INNER_GRAD_COPY_`` names go first;
    copies into seeds last, through temporaries when one of them reads a seed another
    writes.
    """
    into_seed = [c for c in copy_ops if c.output[0] in seed_names]
    if not into_seed:
        return copy_ops
    rest = [c for c in copy_ops if c.output[0] not in seed_names]
    written = {c.output[0] for c in into_seed}
    if not any(c.input[0] in written for c in into_seed):
        return [*rest, *into_seed]
    staged: list[OperatorDef] = []
    final: list[OperatorDef] = []
    for c in into_seed:
        tmp = f"_{c.output[0]}_staged"
        staged.append(make_op("Copy", [c.input[0]], [tmp], name=None))
        final.append(make_op("Copy", [tmp], [c.output[0]], name=None))
    return [*rest, *staged, *final]
