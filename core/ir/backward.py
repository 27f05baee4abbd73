"""The whole-net backward pass, and the answers it makes for a net and for one op.

Source: Caffe2 ``core.py`` ``class IR`` / ``GetBackwardPass`` / ``AddGradientOperators`` and
``GradientRegistry.GetGradientForOp`` (spec §2.2, §2.4-§2.9). The pass is built in layers:
:mod:`core.ir.ssa` (forward SSA versions), :mod:`core.ir.versions` (version checks of
gradient op inputs, ``recompute``), :mod:`core.ir.generators` (gradient generators and
accumulation) and, here, the reverse walk itself; :mod:`core.ir.seeds` checks what the
caller seeds it with. Control-op makers differentiate their sub-nets with :func:`backward`,
which this module registers in :mod:`core.registry`.
Differences from upstream, all deliberate:

* every place upstream iterates a Python ``set`` uses first-appearance order (§3.8 #3);
* errors are typed (:mod:`core.errors`), carry the op index, op type and sub-net path, and
  the pass keeps going after an op without a gradient so that one answer lists every
  offending op;
* a seed given by the caller for a blob that other ops also consume is accumulated with
  their gradients (upstream silently lost it, or raised when the names collided);
* ``ys`` naming a blob that no op writes is rejected instead of silently seeding version 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from api_schemas import caffe2_pb2
from core.errors import (
    GradientError,
    GradientNotDefinedError,
    InvalidNetError,
    InvalidRequestError,
    NetgradError,
    VersionMismatchError,
)
from core.ir import collisions
from core.ir.cow import CopyOnWrite
from core.ir.densify import densify_outputs
from core.ir.env import GenEnv, GenLimits
from core.ir.generators import GradGen, own
from core.ir.op_hints import with_g_output_hint
from core.ir.seeds import check_seed_names, check_ys_written, seed_map
from core.ir.ssa import CONTROL_OP_TYPES
from core.ir.versions import honest_advice
from core.ops import load_all
from core.registry import (
    get_gradient_for_op,
    gradient_for_op_read,
    make_arg,
    make_op,
    register_subnet_pass,
    return_net_hooks,
)
from core.types import Diagnostic, GradientSlice, GradValue, grad_names

OperatorDef = caffe2_pb2.OperatorDef


@dataclass
class OpGradientResult:
    """Answer of :func:`op_gradient` (``core.api.gradient_for_op``).

    Attributes:
        grad_ops: gradient OperatorDefs, in execution order.
        g_input: one entry per forward input (``None`` = no gradient).
        diagnostics: warnings and notes.
    """

    grad_ops: list[caffe2_pb2.OperatorDef]
    g_input: list[GradValue]
    diagnostics: list[Diagnostic] = field(default_factory=list)


@dataclass
class NetGradientResult:
    """Answer of :func:`net_gradient` (``core.api.gradient_for_net``).

    Attributes:
        grad_ops: gradient OperatorDefs (seeds, gradient ops, Sum/Concat accumulation).
        grad_map: blob -> gradient for every blob that ended with a gradient, in
            first-appearance order of the blob in the forward net (deterministic).
        diagnostics: warnings and notes.
        net: forward plus gradient ops when ``return_net`` was asked (``AddGradientOperators``).
    """

    grad_ops: list[caffe2_pb2.OperatorDef]
    grad_map: dict[str, GradValue]
    diagnostics: list[Diagnostic] = field(default_factory=list)
    net: caffe2_pb2.NetDef | None = None


_NO_NAMES: frozenset[str] = frozenset()


class BackwardPass(CopyOnWrite):
    """SSA record of a forward op list and the backward pass over it (Caffe2 ``IR``, spec §2.4).

    Args:
        ops: forward OperatorDefs, in order.
        env: generation environment (limits, diagnostics, sub-net path).
        index_offset: added to op indices in messages (the ``skip`` of ``AddGradientOperators``).

    Raises:
        InvalidNetError: a ``StopGradient`` output is read by nobody ("orphan", spec §2.4).
        LimitExceededError: the request's ops (sub-nets included) exceed ``max_ops``.
    """

    def __init__(self, ops: Sequence[OperatorDef], env: GenEnv, index_offset: int = 0) -> None:
        super().__init__(ops, env, index_offset)
        self._input_to_grad: dict[str, GradValue] = {}
        # incoming gradient blobs no gradient control op may write (see _protect_incoming)
        self.protected: set[str] = set()
        # gradient of the oldest version reached, of blobs overwritten without being read
        self._erased: dict[str, GradValue] = {}
        # ops reading a blob version that other ops (or a seed) read too; None = not known
        self._reads_shared: set[int] | None = None

    def run(
        self, ys: Mapping[str, GradValue]
    ) -> tuple[list[OperatorDef], dict[str, GradValue]]:
        """Backward pass for the seeds ``ys`` (Caffe2 ``GetBackwardPass``, spec §2.5).

        Args:
            ys: blob -> seed gradient (``None`` = all-ones ``<y>_autogen_grad``).

        Returns:
            ``(gradient ops, blob -> gradient)``; the map keeps only blobs with a gradient,
            ordered by first appearance in the forward net.

        Raises:
            NetgradError subclasses collecting every offending op (see module docstring).
        """
        n = len(self.ops)
        for y in ys:
            v = self.frontier.get(y, 0)
            self.frontier.setdefault(y, 0)
            self.gradient_frontier[y] = v
            self._add_reader(y, v, n)
        grad_ops: list[OperatorDef] = []
        self._grad_ops = grad_ops
        input_to_grad: dict[str, GradValue] = {}
        self._input_to_grad = input_to_grad
        seed_ops = []
        for y, g in ys.items():
            v = self.frontier[y]
            if g is None:
                seed = make_op("ConstantFill", [y], [y + "_autogen_grad"], [make_arg("value", 1.0)])
                grad_ops.append(seed)
                seed_ops.append(seed)
                g = seed.output[0]
                gen = GradGen(seed, 0, g, None)
            else:
                gen = GradGen(None, 0, g, None)
            self.generators.setdefault((y, v), []).append(gen)
            input_to_grad[y] = g
            if g is not None:
                own(self._owners, g, y)
        # Gradients are summed at the first reader of a blob version read more than once
        # (spec §2.7); only used as filters, so the sets' order does not matter.
        many = [
            readers
            for by_version in self.input_usages.values()
            if not isinstance(by_version, int)  # one reader
            for readers in by_version.values()
            if not isinstance(readers, int) and len(readers) > 1
        ]
        first_of_many = {readers[0] for readers in many}
        self._reads_shared = {i for readers in many for i in readers}
        problems: list[Diagnostic] = []
        error_types: list[type[NetgradError]] = []
        blind_writers = self.blind_writers
        undeclared = self.undeclared_writes
        for idx in range(n - 1, -1, -1):
            try:
                if idx in undeclared:
                    collisions.refuse_hidden_writes(self, idx, undeclared, input_to_grad)
                self._gradients_for_op(idx, input_to_grad, grad_ops)
                if idx in undeclared:  # (its own gradient ops end here)
                    collisions.mark_hidden(self, idx, undeclared, grad_ops)
            except NetgradError as exc:
                problems.extend(self._locate(exc, idx))
                error_types.append(type(exc))
                self._after_failure(idx, exc, input_to_grad)
            if idx in blind_writers:
                self._erase_overwritten(idx, input_to_grad)
            if idx not in first_of_many:
                continue
            try:
                self._accumulate(idx, input_to_grad, grad_ops)
            except NetgradError as exc:
                problems.extend(self._locate(exc, idx))
                error_types.append(type(exc))
        if problems:
            cls = error_types[0] if len(set(error_types)) == 1 else GradientError
            first = problems[0].message
            n_ops = len({(p.path, p.op_index) for p in problems})
            head = first if len(problems) == 1 else (
                f"{len(problems)} problems at {n_ops} op(s) on the backward path; the first: "
                + first.split("\n", 1)[0]
            )
            raise cls(head, problems)
        collisions.after_pass(self, ys, grad_ops, seed_ops, CONTROL_OP_TYPES, input_to_grad)
        return grad_ops, self._ordered_map(input_to_grad)

    def _first_touch(self, name: str) -> tuple[int, str, str]:
        """``(op index, op type, sub-net path)`` of the first op reading or writing ``name``."""
        idx = next((i for i in range(len(self.ops))
                    if name in self.op_inputs[i] or name in self.op_outputs[i]), 0)
        p = self._problem("", "", idx)
        return idx + self.offset, p.op_type or "", p.path or ""

    def entry_map(self) -> dict[str, GradValue]:
        """Gradients of the values the ops find on entry, after :meth:`run` (issue 7, A).

        A sub-net's input gradient is the gradient of the value its ops *read* before any of
        them writes the name: version 0 of a blob read before written, or the seed of a blob
        no op touches (it passes through). A blob whose first appearance is a write has no
        entry value the ops read, and a gradient that stopped at a later version does not
        reach the entry value: neither is in the map. Upstream matched names instead, so a
        sub-net that only wrote an outer blob passed its output gradient through as the
        input gradient.

        Returns:
            blob -> gradient, in first-appearance order (dense names or GradientSlices).
        """
        out: dict[str, GradValue] = {}
        for name in self.frontier:
            g = self._input_to_grad.get(name)
            if g is None or name in self.first_written:
                continue
            if self.gradient_frontier.get(name, 0) == 0:
                out[name] = g
        return out

    def _erase_overwritten(self, idx: int, input_to_grad: dict[str, GradValue]) -> None:
        """Forget the gradient of blobs op ``idx`` overwrites without reading them.

        The gradient of the version an op writes is consumed by that op; the older version of
        the name, if any, gets no gradient through it. Upstream kept the newer version's
        gradient under the name, so an earlier writer or the sub-net boundary saw a stale
        gradient (a version error at best, a wrong input gradient at worst).
        """
        inputs = self.op_inputs[idx]
        versions = self.out_versions[idx]
        for name in self.op_outputs[idx]:  # (only ops in ``blind_writers`` write any)
            if versions[name] > 0 and name not in inputs:
                self._warn_dead_write(idx, name, versions[name] - 1)
                g = input_to_grad.get(name)
                if g is not None:
                    self._erased[name] = g
                input_to_grad[name] = None

    def _after_failure(
        self, idx: int, exc: NetgradError, input_to_grad: dict[str, GradValue]
    ) -> None:
        """Keep the pass going after op ``idx`` failed, so one answer names every bad op.

        An op without a gradient passes a stand-in gradient to each input, so ops further up
        the path are still asked for theirs and every one of them that has none is reported
        too (e.g. GenerateProposals behind BBoxTransform behind BoxWithNMSLimit). Control ops
        are excluded: their inputs include workspace and condition blobs, which no gradient
        ever reaches. After other failures (version errors, malformed ops) the op counts as
        having no gradient: a blob it rewrote in place loses its stale entry, so no derived
        error follows. The stand-ins never reach an answer: the pass raises at the end.
        """
        inputs = self.op_inputs[idx]
        control = self.op_types[idx] in CONTROL_OP_TYPES
        if isinstance(exc, GradientNotDefinedError) and not control:
            versions = self.in_versions[idx]
            for name in inputs:
                input_to_grad[name] = name + "_grad"
                self.gradient_frontier[name] = versions[name]
            return
        outputs = self.op_outputs[idx]
        for name in inputs:
            if name in outputs:
                input_to_grad[name] = None

    def _locate(self, exc: NetgradError, idx: int) -> list[Diagnostic]:
        """Fill op index/type/path into problems that do not say where they happened."""
        out = []
        for p in exc.problems:
            if p.path is None and p.op_index is None:
                loc = self._problem(p.code, p.message, idx, p.blobs)
                out.append(loc)
            else:
                out.append(p)
        return out

    def _ordered_map(self, input_to_grad: Mapping[str, GradValue]) -> dict[str, GradValue]:
        """The blobs with a gradient, in order of first appearance in the forward net.

        The frontier holds every blob in that order: an op's inputs, then its outputs, op by
        op (:meth:`_play_all`), then the ``ys`` that no op touches (:meth:`run`). Every key of
        ``input_to_grad`` is an op input or a ``ys`` blob, so none is left out.

        A blob the net writes before it reads it (an intermediate or an output) keeps, as in
        Caffe2, the gradient of the oldest version the pass reached, even when an older
        version exists without one. A blob the net reads first (an input) is listed only
        with the gradient of the value it was fed.
        """
        erased = self._erased
        if not erased:  # (the common case, as one comprehension)
            return {k: g for k in self.frontier if (g := input_to_grad.get(k)) is not None}
        out: dict[str, GradValue] = {}
        for k in self.frontier:
            g = input_to_grad.get(k)
            if g is None and k in erased and k in self.first_written:
                g = erased[k]
            if g is not None:
                out[k] = g
        return out

    def _gradients_for_op(
        self, idx: int, input_to_grad: dict[str, GradValue], grad_ops: list[OperatorDef]
    ) -> None:
        """One forward op's gradient ops (Caffe2 ``_GenerateGradientsForForwardOp``).

        Then ``BuildGradientGenerators`` and ``CheckGradientOperatorInput`` for them (spec
        §2.6, §2.7). This is the hot path of the pass, one call per forward op: the common
        case (one output, gradients nobody else shares, every name at its version) runs
        inline here, and anything else goes to the exact methods
        (:meth:`~core.ir.versions.VersionedSSA._check_gradient_inputs`,
        :meth:`~core.ir.generators.GradientRecord._record_generators`).
        """
        outputs = self.op_outputs[idx]
        op_type = self.op_types[idx]
        if len(outputs) == 1:
            g = input_to_grad.get(outputs[0])
            if g is None and op_type != "ZeroGradient":
                return
            g_output: list[GradValue] = [g]
        else:
            g_output = [input_to_grad.get(o) for o in outputs]
            if g_output.count(None) == len(g_output) and op_type != "ZeroGradient":
                return
            if len(set(outputs)) < len(outputs) and op_type not in CONTROL_OP_TYPES:
                collisions.refuse_duplicate_outputs(op_type, outputs)
        env = self.env
        env.op_index = idx + self.offset
        inputs = self.op_inputs[idx]
        try:
            ops, g_input, input_reads, op_ins, op_outs = gradient_for_op_read(
                self.ops[idx], g_output, env, inputs, outputs, op_type
            )
        except GradientError as exc:  # densify: dense for a maker that refused a slice
            if not (env.densify and exc.problems[0].code in _DENSE_ONLY
                    and any(isinstance(g, GradientSlice) for g in g_output)):
                raise
            g_output = densify_outputs(self, idx, g_output, grad_ops)
            ops, g_input, input_reads, op_ins, op_outs = gradient_for_op_read(
                self.ops[idx], g_output, env, inputs, outputs, op_type
            )
        if env.slices:  # (a GradientSlice names forward blobs, read after the forward net)
            env.slices, g_input = False, self._check_slices(idx, g_input)
        in_versions = self.in_versions[idx]
        out_versions = self.out_versions[idx]
        # Names this in-place op reads and writes whose *input* value the maker asked for
        # (I(i)): checked against the input version (upstream's output-first check let an
        # in-place Mul's gradient read the overwritten value silently).
        wants_input: set[str] | frozenset[str] = _NO_NAMES
        self.ambiguous = _NO_NAMES
        n_in = len(inputs)
        for i in input_reads:
            if i < n_in and inputs[i] in out_versions:
                wants_input = {
                    inputs[j] for j in input_reads if j < n_in and inputs[j] in out_versions
                }
                # read as the overwritten input and as the output: see VersionedSSA._overwritten
                self.ambiguous = wants_input & {
                    outputs[j - n_in] for j in input_reads if j >= n_in
                }
                break
        if op_type in CONTROL_OP_TYPES or self._shares_incoming(idx, op_outs, g_output, g_input):
            g_input = self._protect_incoming(idx, ops, g_output, g_input)
            op_ins = [gop.input[:] for gop in ops]  # (it may have renamed some)
        # Generators are recorded only for blob versions that more than one op reads: only
        # their gradients are ever summed (_accumulate), the others are never looked up.
        usages = self.input_usages
        tracked: list[tuple[int, str | GradientSlice]] = []
        shared = self._reads_shared
        k = 0
        for g in g_input if shared is None or idx in shared else ():  # (else: none is)
            if g is not None:
                blob = inputs[k]
                usage = usages[blob]  # an int: one reader, nothing to sum
                if not isinstance(usage, int):
                    readers = usage[in_versions[blob]]
                    if not isinstance(readers, int) and len(readers) > 1:
                        tracked.append((k, g))
            k += 1
        if len(g_output) == 1:
            g = g_output[0]
            g_out_names: dict[str, int] = (
                {g: 0} if isinstance(g, str) else {} if g is None else {g.indices: 0, g.values: 0}
            )
        else:
            g_out_names = {}
            for j in range(len(g_output) - 1, -1, -1):  # the first output wins a shared name
                g = g_output[j]
                if isinstance(g, str):
                    g_out_names[g] = j
                elif g is not None:
                    g_out_names[g.indices] = j
                    g_out_names[g.values] = j
        # CheckGradientOperatorInput, fast path: every name a gradient op reads is an output
        # gradient at its version, or a forward input/output at the version the op saw.
        # Anything else (another version, a name an earlier gradient op of the maker writes,
        # an unknown name) runs the side-effect-free exact check from the start.
        frontier = self.frontier
        grad_frontier = self.gradient_frontier
        exact = False
        for gop_ins in op_ins:
            for name in gop_ins:
                at = g_out_names.get(name)
                if at is not None:
                    out = outputs[at]
                    want = out_versions[out]
                    if grad_frontier.get(out, want) == want:
                        continue
                elif name in out_versions and name not in wants_input:
                    if frontier[name] == out_versions[name]:
                        continue
                elif name in in_versions:
                    if frontier[name] == in_versions[name]:
                        continue
                exact = True
                break
            if exact:
                self._check_gradient_inputs(idx, ops, g_out_names, wants_input)
                break
        if tracked:
            self._record_generators(idx, ops, g_input, tracked)
        if self._pending:  # recomputed forward values, emitted before the gradient ops
            grad_ops.extend(self._pending)
            self._pending = []
        # who got which gradient blob: _protect_incoming asks
        owners: dict[str, str | set[str]] | None = self._owners
        if len(inputs) == 1:
            name, grad = inputs[0], g_input[0]
            if grad is None:
                if name not in input_to_grad or name in outputs:
                    input_to_grad[name] = None
            else:
                grad_frontier[name] = in_versions[name]
                input_to_grad[name] = grad
                if owners is not None:
                    if type(grad) is not str:
                        own(owners, grad, name)
                    else:  # own(), inlined for its common cases: no holder, or this blob
                        held = owners.get(grad)
                        if held is None:
                            owners[grad] = name
                        elif held != name:
                            own(owners, grad, name)
        else:
            new_map: dict[str, GradValue] = {}
            k = 0
            for grad in g_input:
                name = inputs[k]
                k += 1
                if grad is not None:
                    grad_frontier[name] = in_versions[name]
                    new_map[name] = grad
                elif name not in new_map and (name not in input_to_grad or name in outputs):
                    new_map[name] = grad  # (a later position's None keeps an earlier grad)
            input_to_grad.update(new_map)
            if owners is not None:
                for name, grad in new_map.items():
                    if grad is None:
                        continue
                    if type(grad) is str and grad not in owners:  # own(), its common case
                        owners[grad] = name
                    else:
                        own(owners, grad, name)
        grad_ops.extend(ops)


def backward(
    ops: Sequence[OperatorDef],
    ys: Mapping[str, GradValue],
    env: GenEnv,
    index_offset: int = 0,
    entry: bool = False,
) -> tuple[list[OperatorDef], dict[str, GradValue]]:
    """Backward pass over ``ops`` with seeds ``ys`` (``GradientRegistry.GetBackwardPass``).

    Used for the top-level net and, by the control-flow makers, for sub-nets.

    Args:
        entry: return :meth:`BackwardPass.entry_map` (gradients of the values the ops read
            on entry, what a sub-net boundary needs) instead of Caffe2's map of every blob.

    Returns:
        ``(gradient ops, blob -> gradient)``.

    Raises:
        NetgradError subclasses naming every offending op.
    """
    bp = BackwardPass(ops, env, index_offset)
    if entry:  # a sub-net: its seeds are bound to outer blobs others may share
        bp.protected = {n for g in ys.values() for n in grad_names(g)}
    grad_ops, gmap = bp.run(ys)
    return grad_ops, bp.entry_map() if entry else gmap


#: Codes of a maker refusing a sparse output gradient, which ``densify`` makes dense.
_DENSE_ONLY = frozenset({"sparse_output_gradient", "sparse_through_control_op"})


def net_gradient(
    net: caffe2_pb2.NetDef,
    ys: Sequence[str] | Mapping[str, GradValue],
    skip: int,
    return_net: bool,
    limits: GenLimits,
    recompute: bool = False,
    densify: bool = False,
) -> NetGradientResult:
    """Implementation of :func:`core.api.gradient_for_net` (see there)."""
    load_all()
    seeds = seed_map(ys)
    if skip < 0 or skip > len(net.op):
        raise InvalidRequestError.at(
            f"skip={skip} is outside 0..{len(net.op)} (the net's op count)", path="skip"
        )
    ops = net.op[skip:]
    env = GenEnv(limits, recompute=recompute, densify=densify)
    # The pass reads every op's outputs once; the ys check reuses them. A bad ys is
    # reported before any error the forward net has.
    try:
        bp = BackwardPass(ops, env, skip)
    except NetgradError as exc:
        if exc.problems and exc.problems[0].code == "too_many_ops":
            raise  # (no walk over all those ops for the ys check)
        check_ys_written(seeds, {name for op in ops for name in op.output}.__contains__,
                         net.op, skip)
        raise
    # Some op writes a name iff its first appearance is a write or it has a later version.
    frontier, first = bp.frontier, bp.first_written
    check_ys_written(seeds, lambda y: y in first or frontier.get(y, 0) > 0, net.op, skip)
    check_seed_names(seeds, frontier)  # the frontier holds every name an op reads or writes
    try:
        grad_ops, grad_map = bp.run(seeds)
    except VersionMismatchError as exc:
        if recompute:
            raise
        raise honest_advice(exc, lambda: net_gradient(net, ys, skip, False, limits, True,
                                                      densify)) from None
    out_net = None
    if return_net:
        out_net = caffe2_pb2.NetDef()
        out_net.CopyFrom(net)
        out_net.op.extend(grad_ops)
        for hook in return_net_hooks():
            hook(out_net)
    return NetGradientResult(grad_ops, grad_map, list(env.diagnostics), out_net)


def op_gradient(
    op: OperatorDef, g_output: Sequence[GradValue], limits: GenLimits
) -> OpGradientResult:
    """Implementation of :func:`core.api.gradient_for_op` (see there)."""
    load_all()
    if len(g_output) != len(op.output):
        raise InvalidRequestError.at(
            f"g_output has {len(g_output)} entries but op {op.type} has {len(op.output)} "
            "outputs; give one entry (a name, a slice or null) per output",
            op_index=0,
            op_type=op.type,
            path=f"op[0]:{op.type}",
            code="g_output_length",
        )
    if "" in op.input or "" in op.output:
        raise InvalidNetError.at(
            f"{op.type} has an empty blob name among its inputs or outputs; give every input "
            "and output a name",
            op_index=0, op_type=op.type, path=f"op[0]:{op.type}", code="empty_blob_name",
        )
    env = GenEnv(limits)
    env.op_index = 0
    # Caffe2's GradientWrapper: an empty name is no gradient (IsEmpty), not a blob called "".
    empty = [g is not None and not any(grad_names(g)) for g in g_output]
    g_output = [None if e else g for g, e in zip(g_output, empty, strict=True)]
    for i, g in enumerate(g_output):
        if isinstance(g, GradientSlice) and not all(grad_names(g)):
            raise InvalidRequestError.at(
                f"g_output[{i}] is a GradientSlice with an empty name (indices "
                f"'{g.indices}', values '{g.values}'); give both names, or null for no gradient",
                path=f"g_output[{i}]", code="invalid_field",
            )
    try:
        grad_ops, g_input = get_gradient_for_op(op, g_output, env)
    except NetgradError as exc:
        problems = [with_g_output_hint(p, op.type, op.output[:], empty) for p in exc.problems]
        message = problems[0].message if len(exc.problems) == 1 else exc.message
        raise type(exc)(message, problems) from exc
    return OpGradientResult(grad_ops, list(g_input), list(env.diagnostics))


register_subnet_pass(backward)
