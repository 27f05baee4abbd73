"""Gradient maker of ``If``: both branches differentiated, merged into one gradient If.

Source: Caffe2 ``control_ops_grad.py`` ``gen_if_gradient`` (spec §3.4), with the fixes of
spec §3.8 #1 (disagreeing branch gradients raise a real
:class:`~core.errors.GradientError`), #2 (the condition blob is removed from the gradient's
inputs by name), #3 (first-appearance order), #8 (names read by zero-fill ops are declared
on the gradient If) and #9 (a sparse gradient reaching the If is a 4xx).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from api_schemas import caffe2_pb2
from core.control.subnets import (
    conditional_seeds,
    gradient_control_op,
    invalid_net,
    io_names,
    net_argument,
    put_net,
    subnet_gradient,
)
from core.errors import GradientError, NetgradError
from core.registry import GradientMaker, make_arg, make_op, register_gradient, schema
from core.types import GradValue

OperatorDef = caffe2_pb2.OperatorDef
NetDef = caffe2_pb2.NetDef


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
    copies, seeds = conditional_seeds(m)
    then_net = net_argument(op, "then_net")
    if then_net is None:
        nets = [a.name for a in op.arg if a.HasField("n") and a.name != "else_net"]
        close = difflib.get_close_matches("then_net", nets, n=1, cutoff=0.6)
        hint = (f"; the argument '{close[0]}' looks like a misspelt then_net" if close
                else "; add the argument then_net holding the NetDef run when the condition holds")
        raise invalid_net(
            env, op, "Expected then subnet in If op (argument then_net)" + hint, "invalid_if"
        )
    else_net = net_argument(op, "else_net")
    failed: list[NetgradError] = []  # both branches are differentiated: every problem at once
    try:
        then_g = subnet_gradient(op, then_net, seeds, env, "then_net")
    except NetgradError as exc:
        failed.append(exc)
    try:
        else_g = subnet_gradient(op, else_net, seeds, env, "else_net") if else_net else None
    except NetgradError as exc:
        failed.append(exc)
    if failed:
        if len(failed) == 1:
            raise failed[0]
        first, second = failed
        cls = type(first) if type(first) is type(second) else GradientError
        problems = [*first.problems, *second.problems]
        raise cls(f"{len(problems)} problems in both branches of the If; the first: "
                  + first.message.split("\n", 1)[0], problems) from first
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
    g_input = _unshare(g_input, env.op_index)
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
    t_in, t_out = io_names(then_ops)
    e_in, e_out = io_names(else_ops)
    cond = op.input[0]
    inputs = [cond, *(n for n in dict.fromkeys(t_in + e_in) if n != cond)]
    outputs = list(dict.fromkeys(t_out + e_out))
    grad = gradient_control_op(op)
    grad.input.extend(inputs)
    grad.output.extend(outputs)
    put_net(grad, "then_net", then_g.header, then_ops)
    if else_header is not None:
        put_net(grad, "else_net", else_header, else_ops)
    m.g_input = g_input
    return [*copies, grad]


def _unshare(g_input: list[GradValue], op_index: int | None) -> list[GradValue]:
    """Give every forward input of the If its own gradient name (issue f1 #1).

    Both branch maps may hand one incoming gradient to several blobs (a ``Sum`` in a branch
    passes it to all its inputs), while the other branch zero-fills or copies that name for
    one of them: one shared name cannot hold both values, so the later fill overwrote the
    other blob's gradient. The first input keeps the name; each later one sharing it gets
    ``_<name>_if<op index>_<input position>``, filled by a ``Copy`` or zeros in each branch
    (:func:`_branch_fill_ops`; copies run before fills).
    """
    seen: set[str] = set()
    out: list[GradValue] = []
    for k, g in enumerate(g_input):
        if isinstance(g, str):
            if g in seen:
                g = f"_{g}_if{op_index}_{k}"
            seen.add(g)
        out.append(g)
    return out


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
