"""Renaming the outer blobs a gradient ``Do``, ``If`` or ``While`` reads or writes.

Source: Caffe2 ``control_ops_grad.py`` ``disambiguate_grad_if_op_output`` (spec §3.6),
extended to Do and While (issue 3) and to inputs (issue 7, B and C). A gradient control op
reads and writes outer blobs from inside its sub-nets, so renaming its own ``input`` /
``output`` fields is not enough. The backward pass renames outputs when it accumulates
gradients and inputs when ``recompute`` rebinds an overwritten forward value; it finds these
functions in the registry (:func:`core.registry.register_renamers`, done below).
"""

from __future__ import annotations

from collections.abc import Sequence

from api_schemas import caffe2_pb2
from core.control.subnets import INNER_GRAD_COPY, net_argument
from core.registry import find_arg, make_arg, make_op, register_renamers

OperatorDef = caffe2_pb2.OperatorDef
NetDef = caffe2_pb2.NetDef


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


def rename_outer(op: OperatorDef, old: str, new: str) -> None:
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


for _control_type in ("Do", "If", "While"):
    register_renamers(
        _control_type,
        output=rename_control_output,
        input=rename_control_input,
    )
