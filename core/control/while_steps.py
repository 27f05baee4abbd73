"""Gradients of what a ``While``'s ``cond_net`` counter steps add (``i = i + c``).

Caffe2's gradient While does not differentiate the forward ``cond_net`` (spec §3.5). netgrad
allows a counter step ``n = Add(n, c)`` / ``Sub(n, c)`` / ``Sum(n, c, ...)`` there, because
its derivative in ``n`` is 1, so the counter's gradient passes through exactly
(:func:`core.control.while_maker._refuse_cond_net_values`). The loss then depends on ``c`` as
well whenever the loop body differentiates ``n`` (control-flow-cases §10, the Control_Ops
tutorial with ``ONE`` fed): the forward runs the ``cond_net`` once more than the body, so

    dL/dc = sum over the T + 1 condition evaluations k of (sign) dL/dn_k,

where ``n_k`` is the value step ``k`` wrote. In the gradient While, the carry of ``n``
(``_<n>_grad_while_carry``) holds exactly that value each time its ``cond_net`` runs: the
incoming gradient on the first run, then the gradient of the value each forward iteration
found. :func:`accumulate` sums it there into ``_<c>_grad_while_step`` (zeros before the
loop); :func:`emit` hands the sum out as ``c``'s gradient, added to any gradient the body
gives ``c``. An operand the ``cond_net`` computes from an outer blob (``t = 2 * ONE``) is not
differentiated: a ``cond_net_no_gradient`` warning names that blob. A step operand the
``cond_net`` fills itself is a constant.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from api_schemas import caffe2_pb2
from core.control.subnets import check_do, net_argument
from core.errors import GradientError, NetgradError
from core.ir.env import GenEnv
from core.registry import GradientMaker, make_arg, make_op

OperatorDef = caffe2_pb2.OperatorDef
NetDef = caffe2_pb2.NetDef

#: (op type, inputs, outputs) of a cond_net op, names of the While's workspace; names local
#: to a Do wrapper carry a NUL-delimited tag, which no blob name of a request can match.
_Flat = tuple[str, list[str], list[str]]


def _flatten(cond_net: NetDef) -> list[_Flat]:
    """The cond_net's ops, a Do wrapper's inner ops in outer names (add_while_op's shape)."""
    flat: list[_Flat] = []
    for cop in cond_net.op:
        if cop.type != "Do":
            flat.append((cop.type, list(cop.input), list(cop.output)))
            continue
        try:
            b = check_do(cop, GenEnv())
        except NetgradError:
            continue
        to_outer, tag = b.inner_to_outer, f"\0{len(flat)}\0"
        flat.extend((o.type, [to_outer.get(i, tag + i) for i in o.input],
                     [to_outer.get(x, tag + x) for x in o.output]) for o in b.subnet.op)
    return flat


def step_operands(cond_net: NetDef,
                  stepped: Sequence[str]) -> tuple[list[tuple[str, str, int]], list[str]]:
    """What the steps of the counters ``stepped`` add.

    Returns:
        ``(direct, computed_from)``: ``(n, c, sign)`` for each operand ``c`` read from the
        While's workspace as it was before the cond_net ran (sign -1 for ``Sub``), and the
        outer blobs that operands computed inside the cond_net depend on.
    """
    flat = _flatten(cond_net)
    stepped_set = set(stepped)
    direct: list[tuple[str, str, int]] = []
    derived: set[str] = set()
    written: set[str] = set()
    for op_type, ins, outs in flat:
        for n in outs:
            if n not in stepped_set:
                continue
            operands = ([(ins[1], -1)] if op_type == "Sub" else [(ins[1], 1)]
                        if op_type == "Add" else [(c, 1) for c in ins if c != n])
            for c, sign in operands:
                if c in written or "\0" in c:
                    derived.add(c)
                else:
                    direct.append((n, c, sign))
        written.update(outs)
    needed = set(derived)
    for _, ins, outs in reversed(flat):
        if needed.intersection(outs):
            needed.update(ins)
    written.clear()
    computed_from: dict[str, None] = {}
    for _, ins, outs in flat:
        computed_from.update((c, None) for c in ins if c in needed and c not in written
                             and c not in stepped_set and "\0" not in c)
        written.update(outs)
    return direct, list(computed_from)


def accumulate(m: GradientMaker, stepped: Sequence[str], seeds: Mapping[str, object],
               grad_cond_net: NetDef, init_ops: list[OperatorDef]) -> dict[str, str]:
    """Sum each step operand's gradient in the gradient While's ``cond_net``.

    Args:
        stepped: counters with a gradient whose every cond_net write is a step.
        seeds: While output -> its gradient carried through the loop (a dense name: carried
            in ``_<blob>_grad_while_carry``).
        grad_cond_net: the gradient While's cond_net, appended to.
        init_ops: ops before the gradient While, appended to (the zero accumulators).

    Returns:
        Operand -> its accumulator blob.
    """
    fwd = net_argument(m.op, "cond_net")
    if fwd is None or not stepped:
        return {}
    direct, lost = step_operands(fwd, stepped)
    inputs = m.op.input[1:]
    sums: dict[str, str] = {}
    lost_set = dict.fromkeys(lost)
    for n, c, sign in direct:
        if not isinstance(seeds.get(n), str) or c not in inputs:
            lost_set[c] = None  # (no carry to sum, or a blob the While does not declare)
            continue
        acc = sums.get(c)
        if acc is None:
            acc = sums[c] = f"_{c}_grad_while_step"
            init_ops.append(make_op("ConstantFill", [c], [acc], [make_arg("value", 0.0)]))
        carry = f"_{n}_grad_while_carry"
        # (reduced to c's shape first: an Add/Sub step broadcasts a smaller c over n, and
        # summing the carry straight into c's accumulator could not run; review, stop 34)
        part, scratch = f"_{c}_grad_while_step_part", f"_{c}_grad_while_step_scratch"
        grad_cond_net.op.append(make_op("AddGradient", [carry, carry, c], [scratch, part]))
        grad_cond_net.op.append(make_op("Sum" if sign > 0 else "Sub", [acc, part], [acc]))
    if lost_set:
        shown = ", ".join(f"'{c}'" for c in lost_set)
        m.env.warn(
            "cond_net_no_gradient",
            f"the While's cond_net steps {', '.join(repr(n) for n in stepped)} by a value it "
            f"computes from {shown}: the loop body differentiates the counter, so the loss "
            f"depends on {shown}, but netgrad (like Caffe2) does not differentiate the "
            f"cond_net's computations, so the answer has no gradient for {shown} through "
            "this loop. Step the counter by a blob the While reads as it is, or compute the "
            "step in loop_net",
            op_index=m.env.op_index, op_type=m.op.type, blobs=list(lost_set))
    return sums


def emit(m: GradientMaker, sums: Mapping[str, str], after_ops: list[OperatorDef]) -> None:
    """Hand each accumulated operand gradient out of the loop (after ``after_ops``).

    ``m.g_input`` gets ``<c>_grad`` where the body gave ``c`` no gradient; otherwise the
    sum is added to the body's: in place into the blob an ``after_ops`` copy wrote, else
    into a fresh ``_<c>_grad_while_total`` (the body's may be a seed another blob shares).
    """
    inputs = list(m.op.input)
    for c, acc in sums.items():
        k = inputs.index(c, 1)
        have = m.g_input[k]
        if have is not None and not isinstance(have, str):  # (sparse: refused at the Do)
            raise GradientError(f"the While's step operand '{c}' has a sparse gradient")
        if have is None:
            name = c + "_grad"
            after_ops.append(make_op("Copy", [acc], [name]))
        elif any(have in o.output for o in after_ops):
            name = have
            after_ops.append(make_op("Sum", [name, acc], [name]))
        else:
            name = f"_{c}_grad_while_total"
            after_ops.append(make_op("Sum", [have, acc], [name]))
        m.g_input[k] = name
