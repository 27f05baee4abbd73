"""Which blobs a control op reads and surely writes: the SSA view of Do/If/While.

Caffe2's lowering (``add_if_op``, ``add_do_op``; spec §3.1) lists as inputs only the names a
sub-net reads before writing them. A name a sub-net writes only on some runs (an ``If``
branch that is not taken, a ``While`` that runs zero times, a ``Do`` whose sub-net holds
such an op) keeps its old value on the other runs: the op reads it. Caffe2's SSA missed
that read, so the old value got no gradient. The backward pass works on copies of the
control ops with those names added to their inputs (issue 7, A); forward nets are never
changed.
"""

from __future__ import annotations

from collections.abc import Sequence

from api_schemas import caffe2_pb2

OperatorDef = caffe2_pb2.OperatorDef
NetDef = caffe2_pb2.NetDef


def _net_arg(op: OperatorDef, name: str) -> NetDef | None:
    for a in op.arg:
        if a.name == name and a.HasField("n"):
            return a.n
    return None


def sure_writes(net: NetDef) -> set[str]:
    """Names every run of ``net`` writes (in the workspace that runs it)."""
    out: set[str] = set()
    for op in net.op:
        out |= sure_outputs(op)
    return out


def sure_outputs(op: OperatorDef) -> set[str]:
    """Outputs ``op`` writes on every run.

    Plain ops write all their outputs. An ``If`` writes what both branches surely write
    (nothing without ``else_net``); a ``While`` surely writes nothing (zero trips); a ``Do``
    writes the outer blobs bound to names its sub-net surely writes, and its workspace blob.
    Malformed bindings count as writing everything: the gradient maker reports them.
    """
    if op.type == "If":
        then_net, else_net = _net_arg(op, "then_net"), _net_arg(op, "else_net")
        if then_net is None or else_net is None:
            return set()
        both = sure_writes(then_net) & sure_writes(else_net)
        return {o for o in op.output if o in both}
    if op.type == "While":
        return set()
    if op.type == "Do":
        bound = _do_output_bindings(op)
        net = _net_arg(op, "net")
        if bound is None or net is None:
            return set(op.output)
        inner_sure = sure_writes(net)
        out = {outer for inner, outer in bound if inner in inner_sure}
        out.add(op.output[-1])
        return out
    return set(op.output)


def _do_output_bindings(op: OperatorDef) -> list[tuple[str, str]] | None:
    """(inner, outer output) pairs of a Do, or ``None`` when the bindings are malformed."""
    if not len(op.input) or not len(op.output):
        return None
    inner_arg = next((a for a in op.arg if a.name == "inner_blobs"), None)
    idx_arg = next((a for a in op.arg if a.name == "outer_blobs_idx"), None)
    if inner_arg is None or idx_arg is None or len(inner_arg.strings) != len(idx_arg.ints):
        return None
    outer = [*op.input[:-1], *op.output[:-1]]
    outputs = set(op.output[:-1])
    pairs = []
    for raw, k in zip(inner_arg.strings, idx_arg.ints, strict=True):
        if not 0 <= k < len(outer):
            return None
        try:
            inner = raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
        if outer[k] in outputs:
            pairs.append((inner, outer[k]))
    return pairs


def with_implicit_inputs(op: OperatorDef) -> OperatorDef:
    """``op`` with the outputs it may leave unchanged added to its inputs (issue 7, A).

    A ``Do`` copy gets them before its workspace blob, with ``outer_blobs_idx`` shifted so
    every binding still names the same outer blob. Returns ``op`` itself when nothing is
    implicit.
    """
    if op.type not in ("Do", "If", "While") or not len(op.input):
        # (an If/While without its condition input is refused by its maker, review f1 #3)
        return op
    sure = sure_outputs(op)
    if op.type == "Do":
        ins = op.input[:-1]
    else:
        ins = op.input[:]
    seen = set(ins)
    implicit = [o for o in dict.fromkeys(op.output) if o not in seen and o not in sure]
    if not implicit:
        return op
    copy = OperatorDef()
    copy.CopyFrom(op)
    if op.type != "Do":
        copy.input.extend(implicit)
        return copy
    del copy.input[:]
    copy.input.extend([*ins, *implicit, op.input[-1]])
    for a in copy.arg:
        if a.name == "outer_blobs_idx":
            shifted = [k + len(implicit) if k >= len(ins) else k for k in a.ints]
            del a.ints[:]
            a.ints.extend(shifted)
    return copy


def written_before_read(ops: Sequence[OperatorDef]) -> set[str]:
    """Names whose first appearance in ``ops`` is a write (implicit reads included).

    A value fed under such a name never reaches an op, so it has no gradient.
    """
    seen: set[str] = set()
    first_written: set[str] = set()
    for op in ops:
        op = with_implicit_inputs(op)
        seen.update(op.input)
        for name in op.output:
            if name not in seen:
                first_written.add(name)
                seen.add(name)
    return first_written
