"""Gradient maker of ``RecurrentNetwork``: ``backward_step_net`` by netgrad's own backward pass.

Source: Caffe2 ``recurrent_network_op.cc`` (``GetRecurrentNetworkGradient``: the gradient
op's inputs and outputs) and ``python/recurrent.py`` (``recurrent_net``: how the backward
step net, the backward links and ``param`` / ``param_grads`` are built). Caffe2 built the
backward step net in Python when the net was made; netgrad builds it here, with the
backward pass it uses for every sub-net (nested control flow in the step net included).

The emitted ``RecurrentNetworkGradient`` has Caffe2's layout:

* inputs: the gradients of the outputs listed in ``outputs_with_grads``, then every forward
  input, then every forward output (the step workspaces last);
* outputs: the gradient of input 0 (the sequence), of each ``param`` input (summed over
  the time steps), of each initial recurrent state;
* arguments: the forward op's, with ``backward_step_net``, ``backward_link_*``, ``param``,
  ``param_grads``, ``outputs_with_grads`` and ``recompute_blobs_on_backward`` regenerated.

A Caffe2 runtime reads ``backward_step_net`` from the *gradient* op's arguments; the
forward op only checks that it carries one, to keep one step workspace per time step
(``return_net`` puts the generated one there, see :func:`attach_backward_step_nets`).

Supported shape (anything else is a 4xx naming the op): links of window 1; per recurrent
state one link at offset 0 (the previous value, only read) and one at offset 1 (the new
value, written by the step net); input sequences linked at offset 0 (only input 0's gets a
gradient, as in Caffe2); output gradients only on ``<state>_all`` (offset 1) /
``<state>_last`` (offset -1) aliases. Also refused: a step net that writes what it reads
from outside the step (an op input, a state, a blob read before written: a value carried
between steps that the gradient cannot follow), a ``param`` the step net never reads, a
step net reading an outer blob that is not an input of the op and needs a gradient.

Param gradients: the runtime renames each ``param_grads`` blob to ``<name>_tmpstep`` in the
backward step net's top-level ops and sums it over the steps (Caffe2's
``AddParamGradientAccumulationOps``); a param gradient written inside a control op of the
step net is therefore renamed to a private blob and copied out by a plain ``Copy``.
"""

from __future__ import annotations

from collections import Counter

from api_schemas import caffe2_pb2
from core.control.rnn_args import BACKWARD_ARGS, Link, RnnSpec, parse_rnn
from core.control.subnets import gradient_control_op, invalid_net, io_names, reject_sparse
from core.control.subnets import subnet_gradient as _subnet_gradient
from core.errors import GradientError, InvalidNetError
from core.ir.env import GenEnv
from core.ir.renaming import rename_input, rename_output
from core.registry import (
    GradientMaker,
    find_arg,
    make_arg,
    make_op,
    register_gradient,
    register_renamers,
    register_return_net_hook,
    schema,
)

OperatorDef = caffe2_pb2.OperatorDef
NetDef = caffe2_pb2.NetDef

#: Op types whose sub-nets write the blobs they list as outputs.
CONTROL_TYPES = frozenset({"Do", "If", "While", "RecurrentNetwork", "RecurrentNetworkGradient"})

SUPPORTED = (
    "netgrad differentiates RecurrentNetwork ops as caffe2.python.recurrent.recurrent_net "
    "builds them: window-1 links, each recurrent state linked at offset 0 (read) and "
    "offset 1 (written), input sequences linked at offset 0"
)


def _fail(env: GenEnv, op: OperatorDef, problems: list[tuple[str, str]]) -> None:
    if not problems:
        return
    errs = [invalid_net(env, op, msg, code).problems[0] for msg, code in problems]
    raise InvalidNetError(errs[0].message, errs)


def _step_io(step: NetDef) -> tuple[list[str], set[str], set[str]]:
    """``(names read before written, names written, names whose first use is a write)``."""
    reads, _ = io_names(step.op)
    written: set[str] = set()
    first_written: set[str] = set()
    seen: set[str] = set()
    for o in step.op:
        seen.update(o.input)
        for name in o.output:
            if name not in seen:
                first_written.add(name)
            seen.add(name)
            written.add(name)
    return reads, written, first_written


class _Plan:
    """The checked roles of the forward op's blobs (see the module docstring)."""

    def __init__(self, m: GradientMaker, spec: RnnSpec) -> None:
        op, env = m.op, m.env
        problems: list[tuple[str, str]] = [(p, "invalid_rnn_arguments") for p in spec.problems]
        if len(op.input) < 1 or len(op.output) < 2:
            problems.append((f"RecurrentNetwork takes at least 1 input and 2 outputs (the "
                             f"last: the step workspaces), got {len(op.input)} and "
                             f"{len(op.output)}", "invalid_rnn"))
            _fail(env, op, problems)
        if spec.step_net is None:
            problems.append(("RecurrentNetwork op has no step_net argument", "invalid_rnn"))
            _fail(env, op, problems)
            raise invalid_net(env, op, problems[-1][0], "invalid_rnn")  # (not reached)
        self.step = spec.step_net
        inputs = list(op.input)
        self.inputs = inputs
        self.prev: dict[str, str] = {}
        self.new: dict[str, str] = {}
        self.seq: dict[int, str] = {}  # input index -> internal blob
        states = spec.states
        reads, written, first_written = _step_io(self.step)
        self.reads = reads
        self.written = written
        for link in spec.links:
            where = f"link {link.internal} <- {link.external} (offset {link.offset}, " \
                    f"window {link.window})"
            if link.window != 1 or link.offset < 0:
                problems.append((f"{where}: netgrad differentiates window-1 links at offsets "
                                 "0 and 1 only; a window reaching past the steps falls "
                                 "outside the sequence. " + SUPPORTED, "rnn_link_window"))
            elif link.external in states:
                if link.offset == 0:
                    self.prev.setdefault(link.external, link.internal)
                elif link.offset == 1:
                    self.new.setdefault(link.external, link.internal)
                else:
                    problems.append((f"{where}: the window falls outside the sequence (a "
                                     "state of T steps has T + 1 rows; links read offset 0 "
                                     "and write offset 1)", "rnn_link_window"))
            elif link.external in inputs:
                k = inputs.index(link.external)
                if link.offset != 0:
                    problems.append((f"{where}: the window falls outside the sequence at the "
                                     "last step (an input sequence of T rows is read at "
                                     "offset 0)", "rnn_link_window"))
                elif k in spec.initial_ids:
                    problems.append((f"{where}: the external blob is an initial state value, "
                                     "not a sequence or a recurrent state", "rnn_link_role"))
                else:
                    self.seq[k] = link.internal
            else:
                problems.append((f"{where}: {link.external} is not in recurrent_states: a "
                                 "recurrent state without an initial value (add it to "
                                 "recurrent_states with an initial_recurrent_state_ids entry), "
                                 "and not an input of the op", "rnn_state_without_initial"))
        dup = sorted(s for s, n in Counter(states).items() if n > 1)
        if dup:
            problems.append((f"recurrent_states names {', '.join(dup)} more than once",
                             "invalid_rnn_arguments"))
        internal = [lk.internal for lk in spec.links]
        dup = sorted(s for s, n in Counter(internal).items() if n > 1)
        if dup:
            problems.append((f"link_internal names {', '.join(dup)} more than once: one step "
                             "blob cannot be two windows", "invalid_rnn_arguments"))
        for s in states:
            if s not in self.prev or s not in self.new:
                problems.append((f"recurrent state {s} needs a link at offset 0 (previous "
                                 f"value) and one at offset 1 (new value). " + SUPPORTED,
                                 "rnn_unsupported_links"))
        for name, role in [*((i, "previous state") for i in self.prev.values()),
                           *((i, "input sequence") for i in self.seq.values())]:
            if name in written:
                problems.append((f"step_net writes {name}, the {role} it is linked to read "
                                 "only; write a new blob instead", "rnn_writes_read_link"))
        read_only = {*self.prev.values(), *self.seq.values()}
        carried = [n for n in dict.fromkeys([*reads, *inputs, *states, spec.timestep])
                   if n in written and n not in read_only and n not in self.new.values()]
        if carried:
            problems.append((f"step_net writes {', '.join(carried)}, which it also reads from "
                             "outside the step (an op input, a state or a blob read before "
                             "written): a value carried between steps outside the recurrent "
                             "states, which the gradient cannot follow; write new blobs",
                             "rnn_hidden_recurrence"))
        dup_ids = sorted(k for k, n in Counter(spec.initial_ids).items() if n > 1)
        if dup_ids or 0 in spec.initial_ids:
            problems.append((f"initial_recurrent_state_ids {spec.initial_ids}: each state "
                             "needs its own input position, other than input 0 (the sequence); "
                             "the same blob may appear at several positions",
                             "rnn_link_role"))
        for s, name in self.new.items():
            if name not in written:
                problems.append((f"step_net never writes {name}, the new value of recurrent "
                                 f"state {s}", "rnn_state_not_written"))
            elif name not in first_written:
                problems.append((f"step_net reads {name} (the new value of state {s}) before "
                                 "writing it", "rnn_state_read_before_written"))
        for k in spec.params or []:
            if not 0 <= k < len(inputs):
                problems.append((f"param index {k} is not an input of the op",
                                 "rnn_param_unread"))
            elif inputs[k] not in reads:
                problems.append((f"param {k} ({inputs[k]}) is never read by the step net",
                                 "rnn_param_unread"))
        self.out_grads: list[int] = []
        alias_of = dict(enumerate(spec.aliases))
        for j, g in enumerate(m.g_output):
            if g is None:
                continue
            reject_sparse(env, op, op.output[j], g, "output gradient")
            a = alias_of.get(j)
            if j == len(op.output) - 1:
                problems.append((f"output {op.output[j]} (the step workspaces) cannot take a "
                                 "gradient", "rnn_bad_output_gradient"))
            elif (a is None or a.dst != op.output[j] or a.src not in states
                  or a.offset not in (1, -1)):
                problems.append((f"output {j} ({op.output[j]}) has a gradient but is not the "
                                 "alias j of a recurrent state at offset 1 (_all) or -1 "
                                 "(_last)", "rnn_bad_output_gradient"))
            else:
                self.out_grads.append(j)
        if not self.out_grads and not problems:
            problems.append(("Empty initial gradient map for RecurrentNetwork op",
                             "empty_gradient_map"))
        _fail(env, op, problems)


def _rename_everywhere(ops: list[OperatorDef], old: str, new: str) -> None:
    """Rename every read and write of ``old`` in ``ops``, control-op sub-nets included."""
    for o in ops:
        for j, name in enumerate(o.input[:]):
            if name == old:
                rename_input(o, j, new)
        for j, name in enumerate(o.output[:]):
            if name == old:
                rename_output(o, j, new, ops)


def _fresh(base: str, taken: set[str]) -> str:
    name = base
    while name in taken:
        name += "_"
    taken.add(name)
    return name


@register_gradient("RecurrentNetwork", op_schema=schema((1, -1), (2, -1)), raw=True,
                   doc="step_net run once per time step over linked sequences and states")
def recurrent_network_gradient(m: GradientMaker) -> list[OperatorDef]:
    """Gradient of ``RecurrentNetwork`` (Caffe2 ``GetRecurrentNetworkGradient`` and
    ``recurrent_net``'s backward step net; see the module docstring).

    Raises:
        InvalidNetError: every unsupported or inconsistent part of the op, located at it.
        GradientError: sparse gradients; errors of the step net's backward pass (with the
            ``.../step_net/op[j]:Type`` path).
    """
    op, env = m.op, m.env
    spec = parse_rnn(op)
    plan = _Plan(m, spec)
    step = plan.step
    inputs = plan.inputs
    seeds = {plan.new[s]: plan.new[s] + "_grad" for s in spec.states}
    sub = _subnet_gradient(op, step, seeds, env, "step_net")
    gmap = sub.grad_map
    ops: list[OperatorDef] = list(sub.ops)
    taken = {n for o in [*step.op, *ops] for n in [*o.input, *o.output]}
    taken.update(inputs)
    made = {n for g in ops for n in g.output}
    claimed: set[str] = set(seeds.values())
    problems: list[tuple[str, str]] = []

    control = {n for g in ops if g.type in CONTROL_TYPES for n in g.output}

    def own(g: str | None, like: str, plain: bool = False) -> str:
        """A gradient blob written by the backward step net and used for nothing else.

        ``plain`` (param gradients): the runtime renames the blob to ``<name>_tmpstep`` in the
        top-level ops only, and the blob's name is the gradient op's output, which lives
        outside the step: a write inside a control op's sub-net would miss the rename and
        overwrite the sum over steps. Such a gradient is renamed to a private blob
        everywhere (sub-nets included) and copied out by a plain ``Copy``.
        """
        if g is not None and g in made and g not in claimed and not (plain and g in control):
            claimed.add(g)
            return g
        new = _fresh(like + "_grad_rnn", taken)
        claimed.add(new)
        if g is not None and plain and g in control and g not in claimed:
            private = _fresh(like + "_grad_rnn_inner", taken)
            _rename_everywhere(ops, g, private)
            g = private
        if g is None:
            ops.append(make_op("ConstantFill", [like], [new], [make_arg("value", 0.0)]))
        else:
            ops.append(make_op("Copy", [g], [new]))
        return new

    blinks: list[Link] = []
    for s in spec.states:
        blinks.append(Link(seeds[plan.new[s]], s + "_grad", 1))
        blinks.append(Link(own(gmap.get(plan.prev[s]), plan.prev[s]), s + "_grad", 0))
    x_grad = m.GI(0)
    if 0 in plan.seq:
        blinks.append(Link(own(gmap.get(plan.seq[0]), plan.seq[0]), inputs[0] + "_grad", 0))
    for k, internal in plan.seq.items():
        if k and internal in gmap:
            problems.append((f"input sequence {k} ({inputs[k]}) would get a gradient, but a "
                             "RecurrentNetworkGradient returns the gradient of input 0 only "
                             "(Caffe2 supports one input sequence)", "rnn_second_sequence"))
    linked = set(plan.seq) | set(spec.initial_ids)
    internals = {*plan.prev.values(), *plan.new.values(), *plan.seq.values(), spec.timestep}
    params: list[int] = []
    param_grads: list[str] = []
    for k, name in enumerate(inputs):
        if name in internals or name not in gmap:
            continue
        if k == 0 or k in linked or name in (inputs[j] for j in linked):
            problems.append((f"input {k} ({name}) is linked as a sequence or initial state "
                             "(or is input 0, the sequence) and also read directly by the step "
                             "net; its two gradients cannot both be returned",
                             "rnn_input_two_roles"))
            continue
        if k in params or name in (inputs[p] for p in params):
            continue
        params.append(k)
        param_grads.append(own(gmap[name], name, plain=True))
    outer = [n for n in gmap if n not in internals and n not in inputs]
    if outer:
        problems.append((f"the step net reads {', '.join(outer)} from the outer workspace "
                         "without it being an input of the RecurrentNetwork, so its gradient "
                         "would be lost; list it as an input (a param)",
                         "rnn_unlisted_outer_blob"))
    _fail(env, op, problems)
    pre: list[OperatorDef] = []
    if spec.recompute:
        want = set(spec.recompute)
        for f in step.op:
            if want & set(f.output):
                if not set(f.output) <= want:
                    problems.append((f"recompute_blobs_on_backward: the op writing "
                                     f"{', '.join(sorted(want & set(f.output)))} also writes "
                                     f"{', '.join(o for o in f.output if o not in want)}",
                                     "rnn_bad_recompute"))
                pre.append(f)
        _fail(env, op, problems)
    back = NetDef()
    back.CopyFrom(sub.header)
    back.name = "RecurrentBackwardStep" if step.name != "RecurrentBackwardStep" else (
        "RecurrentBackwardStep_1")
    back.op.extend([*pre, *ops])
    reads, _ = io_names(back.op)
    ext = dict.fromkeys([spec.timestep, *reads, *(lk.internal for lk in spec.links),
                         *(lk.internal for lk in blinks)])
    back.external_input.extend(ext)
    owg = plan.out_grads
    grad = gradient_control_op(op)
    grad.type = "RecurrentNetworkGradient"
    grad.input.extend([str(m.g_output[j]) for j in owg])
    grad.input.extend(inputs)
    grad.input.extend(op.output)
    grad.output.append(x_grad)
    grad.output.extend(m.GI(k) for k in params)
    grad.output.extend(m.GI(k) for k in spec.initial_ids)
    grad.arg.extend(a for a in op.arg if a.name not in BACKWARD_ARGS)
    grad.arg.extend([
        make_arg("backward_step_net", back),
        make_arg("backward_link_internal", [lk.internal for lk in blinks]),
        make_arg("backward_link_external", [lk.external for lk in blinks]),
        make_arg("backward_link_offset", [lk.offset for lk in blinks]),
        make_arg("outputs_with_grads", owg),
    ])
    if params:
        grad.arg.extend([make_arg("param", params), make_arg("param_grads", param_grads)])
    if spec.recompute:
        grad.arg.append(make_arg("recompute_blobs_on_backward", list(spec.recompute)))
    _diagnose(env, op, spec, back, params, owg, plan, len(pre))
    return [grad]


def _essence(o: OperatorDef) -> tuple[str, list[str], list[str], list[bytes]]:
    """What an op computes: type, inputs, outputs, arguments (names, flags ignored)."""
    return (o.type, list(o.input), list(o.output),
            [a.SerializeToString(deterministic=True) for a in o.arg])


def _diagnose(env: GenEnv, op: OperatorDef, spec: RnnSpec, back: NetDef, params: list[int],
              owg: list[int], plan: _Plan, n_pre: int) -> None:
    """Step-workspace, recompute and regeneration diagnostics (issue 9, "Diagnostics")."""
    idx = env.op_index
    recompute = set(spec.recompute)
    link_blobs = dict.fromkeys(lk.internal for lk in spec.links)  # ordered: same answer bytes
    kept = [n for n in dict.fromkeys([*link_blobs, *(o for f in plan.step.op for o in f.output)])
            if n not in recompute]
    env.warn(
        "rnn_step_workspaces",
        f"the forward RecurrentNetwork keeps one step workspace per time step for the "
        f"backward pass: T x {len(kept)} blobs (T = input 0's first dimension; elements "
        f"= T x the blobs' sizes): {', '.join(kept)}",
        blobs=kept, severity="info", op_index=idx, op_type=op.type,
    )
    produced = {o for f in plan.step.op for o in f.output}
    read_back = {n for g in back.op[n_pre:] for n in g.input}
    candidates = [n for n in dict.fromkeys(o for f in plan.step.op for o in f.output)
                  if n in read_back and n not in link_blobs and n in produced
                  and n not in recompute]
    env.warn(
        "rnn_recompute_candidates",
        "recompute_blobs_on_backward could save these forward blobs the backward step net "
        f"reads (recomputed instead of kept per step): {', '.join(candidates) or '(none)'}"
        + (f"; recomputed now: {', '.join(spec.recompute)}" if spec.recompute else ""),
        blobs=candidates, severity="info", op_index=idx, op_type=op.type,
    )
    if spec.backward_step_net is not None:
        given = spec.backward_step_net
        mine, theirs = [_essence(o) for o in back.op], [_essence(o) for o in given.op]
        if mine != theirs:
            first = next((i for i, (a, b) in enumerate(zip(theirs, mine, strict=False))
                          if a != b), min(len(theirs), len(mine)))
            env.warn(
                "backward_step_net_regenerated",
                f"the forward op carries a backward_step_net ({len(given.op)} ops) that "
                f"differs from the one netgrad generated ({len(back.op)} ops; first "
                f"difference at op {first}): the gradient op uses netgrad's",
                op_index=idx, op_type=op.type,
            )
    if spec.params is not None and list(spec.params) != params:
        env.warn("rnn_param_regenerated",
                 f"param {list(spec.params)} of the forward op differs from the inputs the "
                 f"step net's gradient reaches {params}: the gradient op lists the latter",
                 severity="info", op_index=idx, op_type=op.type)
    if spec.outputs_with_grads is not None and list(spec.outputs_with_grads) != owg:
        env.warn("rnn_outputs_with_grads_regenerated",
                 f"outputs_with_grads {list(spec.outputs_with_grads)} of the forward op "
                 f"differs from the outputs that have a gradient {owg}: the gradient op "
                 "lists the latter", severity="info", op_index=idx, op_type=op.type)


def attach_backward_step_nets(net: NetDef) -> None:
    """Give each forward ``RecurrentNetwork`` of ``net`` (sub-nets included) the backward
    arguments of its ``RecurrentNetworkGradient`` in ``net`` (matched by the step workspaces
    blob, the forward op's last output and the gradient op's last input).

    Used on ``return_net`` answers: a Caffe2 forward op keeps one step workspace per time
    step only when it carries ``backward_step_net``, so the pair then runs as it is.
    """
    fwd: dict[str, list[OperatorDef]] = {}
    grads: dict[str, list[OperatorDef]] = {}
    _collect(net, fwd, grads)
    for scratch, gops in grads.items():
        targets = fwd.get(scratch, [])
        if len(gops) != 1 or len(targets) != 1:
            continue  # ambiguous names: leave the forward op as the client sent it
        f, g = targets[0], gops[0]
        keep = [a for a in f.arg if a.name not in BACKWARD_ARGS]
        del f.arg[:]
        f.arg.extend(keep)
        f.arg.extend(a for a in g.arg if a.name in BACKWARD_ARGS)


def _collect(net: NetDef, fwd: dict[str, list[OperatorDef]],
             grads: dict[str, list[OperatorDef]]) -> None:
    for o in net.op:
        if o.type == "RecurrentNetwork" and len(o.output):
            fwd.setdefault(o.output[-1], []).append(o)
        elif o.type == "RecurrentNetworkGradient" and len(o.input):
            grads.setdefault(o.input[-1], []).append(o)
        for a in o.arg:
            if a.HasField("n"):
                _collect(a.n, fwd, grads)
            for sub in a.nets:
                _collect(sub, fwd, grads)


register_return_net_hook(attach_backward_step_nets)


def _n_go(op: OperatorDef) -> int:
    a = find_arg(op, "outputs_with_grads")
    return len(a.ints) if a is not None and len(a.ints) else 1


def rename_rnn_gradient_output(
    op: OperatorDef, idx: int, new_name: str, siblings: list[OperatorDef] | None = None
) -> None:
    """Make a ``RecurrentNetworkGradient`` write output ``idx`` as ``new_name``.

    Outputs are positional in Caffe2's runtime except the sequence gradient (output 0),
    which it finds as ``remappedName(<input 0>_grad)``: the argument
    ``<input 0>_grad.rename`` carries the new name (Caffe2's memonger renaming convention).
    """
    op.output[idx] = new_name
    if idx != 0:
        return
    key = f"{op.input[_n_go(op)]}_grad.rename"
    for a in op.arg:
        if a.name == key:
            a.s = new_name.encode("utf-8")
            return
    op.arg.append(make_arg(key, new_name))


def rename_rnn_gradient_input(op: OperatorDef, old: str, new: str) -> None:
    """Rebind an output-gradient input; refuse rebinding a forward value (``recompute``).

    The backward step net reads the forward inputs (the params) by name in the workspace,
    so a recomputed copy under another name would not be seen.

    Raises:
        GradientError: code ``rnn_recompute_input``.
    """
    n_go = _n_go(op)
    if old in op.input[n_go:]:
        raise GradientError.at(
            f"RecurrentNetworkGradient reads {old} by name inside its backward_step_net, so "
            "recompute cannot rebind it to a recomputed copy: write the later result to a new "
            f"blob instead of overwriting {old} in place",
            blobs=(old,), code="rnn_recompute_input",
        )
    for j in range(n_go):
        if op.input[j] == old:
            op.input[j] = new


register_renamers("RecurrentNetworkGradient", output=rename_rnn_gradient_output,
                  input=rename_rnn_gradient_input)
