"""The whole-net backward pass: SSA versions, gradient generators and accumulation.

Source: Caffe2 ``core.py`` ``class IR`` / ``GetBackwardPass`` (spec §2.4-§2.9). Differences
from upstream, all deliberate:

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
from dataclasses import dataclass

from api_schemas import caffe2_pb2
from core.api import NetGradientResult, OpGradientResult
from core.errors import (
    GradientError,
    GradientNotDefinedError,
    InvalidNetError,
    InvalidRequestError,
    NetgradError,
    VersionMismatchError,
)
from core.ir.dataflow import with_implicit_inputs
from core.ir.env import GenEnv, GenLimits
from core.registry import (
    get_gradient_for_op,
    gradient_for_op_detailed,
    is_identity,
    make_arg,
    make_op,
)
from core.types import Diagnostic, GradientSlice, GradValue, grad_names

OperatorDef = caffe2_pb2.OperatorDef
DeviceOption = caffe2_pb2.DeviceOption

IS_AUTO_GEN_SUM_OPS_TAG = "is_auto_gen_sum_ops"
ONLY_KEEP_IS_AUTO_GEN_SUM_OPS_TAG = "only_keep_is_auto_gen_sum_ops_tag"
CONTROL_OP_TYPES = ("Do", "If", "While")


@dataclass(slots=True)
class GradGen:
    """Who writes one gradient of one blob version (Caffe2 ``GradGenMeta``/``SparseGradGenMeta``).

    Dense: ``op`` writes output ``idx`` named ``gradient`` (``op`` is ``None`` for a
    pass-through gradient). Sparse: ``op``/``idx`` write the indices half and
    ``op_v``/``idx_v`` the values half of the GradientSlice ``gradient``.
    """

    op: OperatorDef | None
    idx: int
    gradient: GradValue
    device: DeviceOption | None
    op_v: OperatorDef | None = None
    idx_v: int = 0
    # The maker's ops from the first that writes the gradient name to ``op`` (its last
    # writer): renaming for accumulation renames the whole chain (issue 7, E).
    chain: Sequence[OperatorDef] = ()
    chain_v: Sequence[OperatorDef] = ()

    @property
    def sparse(self) -> bool:
        """Whether this generator writes a GradientSlice."""
        return isinstance(self.gradient, GradientSlice)


class BackwardPass:
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
        env.count_ops(len(ops))
        self.ops = list(ops)
        self.env = env
        self.offset = index_offset
        self.in_versions: list[dict[str, int]] = []
        self.out_versions: list[dict[str, int]] = []
        self.frontier: dict[str, int] = {}
        self.input_usages: dict[str, dict[int, list[int]]] = {}
        self.gradient_frontier: dict[str, int] = {}
        # (blob, version) -> the generators of that version's gradient, in emission order
        self.generators: dict[tuple[str, int], list[GradGen]] = {}
        self._grad_ops: list[OperatorDef] = []
        self.op_inputs: list[list[str]] = []
        # value_roots[name][v]: the oldest version with the same value as version v, kept
        # only for versions written by an in-place identity op (is_test Dropout...).
        self.value_roots: dict[str, dict[int, int]] = {}
        self._recomputed: dict[tuple[str, int], str] = {}
        self._pending: list[OperatorDef] = []
        self.op_outputs: list[list[str]] = []
        # names whose first appearance is a write: the net never reads their entry value
        self.first_written: set[str] = set()
        self._input_to_grad: dict[str, GradValue] = {}
        # gradient blob name -> the blobs the pass gave it to (pass-through ops share one)
        self._owners: dict[str, set[str]] = {}
        # gradient of the oldest version reached, of blobs overwritten without being read
        self._erased: dict[str, GradValue] = {}
        # op types, inputs and outputs read out of the protobuf once: every read of a
        # protobuf field builds new Python strings.
        self.op_types: list[str] = []
        for i, op in enumerate(self.ops):
            if op.type in CONTROL_OP_TYPES:
                op = self.ops[i] = with_implicit_inputs(op)
            self._play(op)
        self._check_stop_gradients()
        self._warn_undeclared_branch_writes()

    # -- forward SSA -------------------------------------------------------------
    def _play(self, op: OperatorDef) -> None:
        idx = len(self.in_versions)
        frontier = self.frontier
        usages = self.input_usages
        # Slicing copies a repeated field into a list in one call, about twice as fast as
        # list() or iterating it (each element read goes through the protobuf runtime).
        op_in, op_out = op.input[:], op.output[:]
        self.op_inputs.append(op_in)
        self.op_outputs.append(op_out)
        self.op_types.append(op.type)
        ins: dict[str, int] = {}
        # New blobs enter the frontier in first-appearance order (_ordered_map relies on it).
        for name in op_in:
            v = frontier.setdefault(name, 0)
            ins[name] = v
            by_version = usages.get(name)
            if by_version is None:
                usages[name] = {v: [idx]}
            elif v in by_version:
                by_version[v].append(idx)
            else:
                by_version[v] = [idx]
        outs: dict[str, int] = {}
        for name in op_out:
            if name not in frontier:
                self.first_written.add(name)
            v = frontier[name] + 1 if name in frontier else 0
            frontier[name] = v
            outs[name] = v
        if op_in and op_out and op_in[0] == op_out[0] and is_identity(op):
            name = op_out[0]
            roots = self.value_roots.setdefault(name, {})
            roots[outs[name]] = roots.get(ins[name], ins[name])
        self.in_versions.append(ins)
        self.out_versions.append(outs)

    def _check_stop_gradients(self) -> None:
        problems = []
        for idx, op_type in enumerate(self.op_types):
            if op_type != "StopGradient":
                continue
            outs = self.op_outputs[idx]
            if outs and outs[0] not in self.input_usages:
                msg = (
                    f"StopGradient's output '{outs[0]}' is orphan. You typically want to "
                    "specify same input and output for StopGradient."
                )
                problems.append(self._problem("stop_gradient_orphan", msg, idx, (outs[0],)))
        if problems:
            raise InvalidNetError(problems[0].message, problems)

    def _warn_undeclared_branch_writes(self) -> None:
        """Warn when an If/While sub-net op writes an outer blob the op does not declare.

        Sub-nets that are not wrapped in a ``Do`` run in the outer workspace (the Mask
        R-CNN2Go ``If``, control-flow-cases §1). Caffe2's SSA does not see those writes, so
        no gradient flows through them; netgrad does the same and says so.
        """
        for idx, op_type in enumerate(self.op_types):
            if op_type not in ("If", "While"):
                continue
            op = self.ops[idx]
            declared = set(op.output)
            undeclared: dict[str, None] = {}
            for arg in op.arg:
                if arg.HasField("n"):
                    _direct_writes(arg.n, undeclared)
            names = [n for n in undeclared if n not in declared]
            if names:
                shown = ", ".join(names[:10]) + (" ..." if len(names) > 10 else "")
                self.env.warn(
                    "undeclared_branch_write",
                    f"{op.type} sub-nets write {len(names)} outer blob(s) that the op does not "
                    f"declare as outputs ({shown}); the backward pass does not see these "
                    "writes, so no gradient flows through them",
                    op_index=idx + self.offset,
                    op_type=op.type,
                    blobs=names,
                )

    def _problem(
        self, code: str, message: str, idx: int, blobs: Sequence[str] = ()
    ) -> Diagnostic:
        op_type = self.ops[idx].type if 0 <= idx < len(self.ops) else None
        index = idx + self.offset
        return Diagnostic(
            "error",
            code,
            message,
            index,
            op_type,
            self.env.op_path(index, op_type or ""),
            tuple(blobs),
        )

    def version_history(self, name: str) -> str:
        """Readable version history of blob ``name`` (upstream's "DEBUG HELP")."""
        lines = []
        for idx, op in enumerate(self.ops):
            where = f"op[{idx + self.offset}]:{op.type}"
            if name in self.in_versions[idx]:
                lines.append(f"  version (in) {self.in_versions[idx][name]} <-- {where}")
            if name in self.out_versions[idx]:
                lines.append(f"  version (out) {self.out_versions[idx][name]} <-- {where}")
        return "\n".join(lines)

    # -- backward ------------------------------------------------------------------
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
            self.input_usages.setdefault(y, {}).setdefault(v, []).append(n)
        grad_ops: list[OperatorDef] = []
        self._grad_ops = grad_ops
        input_to_grad: dict[str, GradValue] = {}
        self._input_to_grad = input_to_grad
        for y, g in ys.items():
            v = self.frontier[y]
            if g is None:
                seed = make_op("ConstantFill", [y], [y + "_autogen_grad"], [make_arg("value", 1.0)])
                grad_ops.append(seed)
                g = seed.output[0]
                gen = GradGen(seed, 0, g, None)
            else:
                gen = GradGen(None, 0, g, None)
            self.generators.setdefault((y, v), []).append(gen)
            input_to_grad[y] = g
            for gname in grad_names(g):
                self._owners.setdefault(gname, set()).add(y)
        # Gradients are summed at the first reader of a blob version read more than once
        # (spec §2.7); only used as a filter, so the set's order does not matter.
        first_of_many = {
            usage[0]
            for by_version in self.input_usages.values()
            for usage in by_version.values()
            if len(usage) > 1
        }
        problems: list[Diagnostic] = []
        error_types: list[type[NetgradError]] = []
        for idx in range(n - 1, -1, -1):
            try:
                self._gradients_for_op(idx, input_to_grad, grad_ops)
            except NetgradError as exc:
                problems.extend(self._locate(exc, idx))
                error_types.append(type(exc))
                self._after_failure(idx, exc, input_to_grad)
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
            head = first if len(problems) == 1 else (
                f"{len(problems)} ops on the backward path failed; the first: "
                + first.split("\n", 1)[0]
            )
            raise cls(head, problems)
        return grad_ops, self._ordered_map(input_to_grad)

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
        for name in self.op_outputs[idx]:
            if versions[name] > 0 and name not in inputs:
                self._warn_dead_write(idx, name, versions[name] - 1)
                g = input_to_grad.get(name)
                if g is not None:
                    self._erased[name] = g
                input_to_grad[name] = None

    def _warn_dead_write(self, idx: int, name: str, version: int) -> None:
        """Warn when op ``idx`` overwrites a version of ``name`` that no op read (bug row 2).

        Caffe2 raised a version error for such a dead write (e.g. an op added twice); its
        gradient is simply zero, so netgrad answers and says so.
        """
        if self.input_usages.get(name, {}).get(version):
            return
        if version == 0 and name not in self.first_written:
            return  # version 0 of an input: fed, not written
        writer = next(
            (i for i in range(idx - 1, -1, -1) if self.out_versions[i].get(name) == version),
            None,
        )
        if writer is None:
            return
        w_type = self.op_types[writer]
        self.env.warn(
            "dead_write",
            f"op[{writer + self.offset}]:{w_type} writes '{name}' (version {version}) but no "
            f"op reads it before op[{idx + self.offset}]:{self.op_types[idx]} overwrites it, "
            "so that write gets no gradient (was an op added twice?)",
            op_index=writer + self.offset,
            op_type=w_type,
            blobs=[name],
        )

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
        op (:meth:`_play`), then the ``ys`` that no op touches (:meth:`run`). Every key of
        ``input_to_grad`` is an op input or a ``ys`` blob, so none is left out.

        A blob the net writes before it reads it (an intermediate or an output) keeps, as in
        Caffe2, the gradient of the oldest version the pass reached, even when an older
        version exists without one. A blob the net reads first (an input) is listed only
        with the gradient of the value it was fed.
        """
        erased = self._erased
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
        """One forward op's gradient ops (Caffe2 ``_GenerateGradientsForForwardOp``)."""
        outputs = self.op_outputs[idx]
        g_output = [input_to_grad.get(o) for o in outputs]
        if g_output.count(None) == len(g_output) and self.op_types[idx] != "ZeroGradient":
            return
        self.env.op_index = idx + self.offset
        inputs = self.op_inputs[idx]
        ops, g_input, input_reads = gradient_for_op_detailed(
            self.ops[idx], g_output, self.env, inputs, outputs
        )
        # Names this in-place op both reads and writes, whose *input* value the gradient
        # wants (the maker asked for I(i)): check them against the input version. Upstream
        # checks the output version first and so lets e.g. an in-place Mul's gradient read
        # the overwritten value silently.
        wants_input: set[str] | frozenset[str] = frozenset()
        if input_reads:
            wants_input = {inputs[i] for i in input_reads if inputs[i] in outputs}
        if self.op_types[idx] in CONTROL_OP_TYPES:
            g_input = self._protect_incoming(idx, ops, g_output, g_input)
        self._build_generators(idx, ops, g_output, g_input, wants_input)
        if self._pending:
            grad_ops.extend(self._pending)
            self._pending = []
        new_map: dict[str, GradValue] = {}
        for name, grad in zip(inputs, g_input, strict=True):
            if grad is not None or name not in input_to_grad or name in outputs:
                new_map[name] = grad
        input_to_grad.update(new_map)
        owners = self._owners
        for name, grad in new_map.items():
            for gname in grad_names(grad):
                owners.setdefault(gname, set()).add(name)
        grad_ops.extend(ops)

    def _protect_incoming(
        self,
        idx: int,
        ops: list[OperatorDef],
        g_output: Sequence[GradValue],
        g_input: Sequence[GradValue],
    ) -> list[GradValue]:
        """Keep a gradient Do/If writing into an incoming gradient another blob shares.

        A control op's gradient may write an input gradient into the blob of an incoming
        gradient (a Do updating a loop-carried gradient in place, spec §3.8 #7; an If
        zero-filling an input the taken branch overwrote). When a pass-through op (Sum,
        Copy...) handed that blob to other blobs too, the write clobbers their gradient
        (issue 7, fuzzer F1). The write goes to a fresh blob instead; reads of the incoming
        gradient before it keep their name.
        """
        outputs = set(self.op_outputs[idx])
        out = list(g_input)
        for n in dict.fromkeys(g for g in g_output if isinstance(g, str)):
            if not (self._owners.get(n, set()) - outputs):
                continue
            first = next((i for i, gop in enumerate(ops) if n in gop.output), None)
            if first is None:
                continue
            new = f"_{n}_{self.op_types[idx].lower()}{idx + self.offset}"
            for pos, gop in enumerate(ops[first:]):
                if pos:
                    for j, name in enumerate(gop.input[:]):
                        if name == n:
                            rename_input(gop, j, new)
                for j, name in enumerate(gop.output[:]):
                    if name == n:
                        rename_output(gop, j, new, ops)
            out = [new if g == n else g for g in out]
        return out

    def _build_generators(
        self,
        idx: int,
        ops: Sequence[OperatorDef],
        g_output: Sequence[GradValue],
        g_input: Sequence[GradValue],
        wants_input: set[str] | frozenset[str] = frozenset(),
    ) -> None:
        """Record which gradient op writes each input gradient (``BuildGradientGenerators``).

        Also checks the versions of every gradient op input (``CheckGradientOperatorInput``).
        Generators are recorded only for blob versions that more than one op reads: only
        their gradients are ever summed (:meth:`_accumulate`), the others are never looked up.
        """
        op = self.ops[idx]
        op_inputs = self.op_inputs[idx]
        op_outputs = self.op_outputs[idx]
        in_versions = self.in_versions[idx]
        out_versions = self.out_versions[idx]
        frontier = self.frontier
        grad_frontier = self.gradient_frontier
        usages = self.input_usages
        # (input position k, its gradient) for the gradients that need generators (see above)
        tracked: list[tuple[int, str | GradientSlice]] = []
        # gradient name -> [(input position k, part)] with part 0 dense, 1 indices, 2 values
        wanted: dict[str, list[tuple[int, int]]] = {}
        for k, g in enumerate(g_input):
            if g is None:
                continue
            blob = op_inputs[k]
            if len(usages[blob][in_versions[blob]]) < 2:
                continue
            tracked.append((k, g))
            if isinstance(g, str):
                if g in wanted:
                    wanted[g].append((k, 0))
                else:
                    wanted[g] = [(k, 0)]
            else:
                wanted.setdefault(g.indices, []).append((k, 1))
                wanted.setdefault(g.values, []).append((k, 2))
        g_out_names: dict[str, int] = {}
        for j in range(len(g_output) - 1, -1, -1):  # the first output wins a shared name
            g = g_output[j]
            if isinstance(g, str):
                g_out_names[g] = j
            elif g is not None:
                g_out_names[g.indices] = j
                g_out_names[g.values] = j
        produced: set[str] = set()
        # (input position k, part) -> (first writer, last writer, output index of the last)
        writers: dict[tuple[int, int], list[list[int]]] = {}
        for i, gop in enumerate(ops):
            # CheckGradientOperatorInput, inlined: this loop is the hot path. Equal versions
            # pass at once; _same_value only looks behind in-place identity ops.
            for pos, name in enumerate(gop.input[:]):
                if name in g_out_names:
                    out = op_outputs[g_out_names[name]]
                    want = out_versions[out]
                    have = grad_frontier.get(out, want)
                    if have != want and not self._same_value(out, have, want):
                        self._version_error("gradient", idx, name, out)
                elif name in out_versions and name not in wants_input:
                    want, have = out_versions[name], frontier[name]
                    if have != want and not self._same_value(name, have, want):
                        self._overwritten(gop, pos, "output", idx, want)
                elif name in in_versions:
                    want, have = in_versions[name], frontier[name]
                    if have != want and not self._same_value(name, have, want):
                        self._overwritten(gop, pos, "input", idx, want)
                elif not any(name in earlier.output for earlier in ops[:i]):
                    raise GradientError.at(
                        f'Blob name "{name}" not in the scope of operator {op.type} and is not '
                        "generated by any of the local gradient operators.",
                        blobs=(name,),
                    )
            if not wanted:
                continue
            for out_i, out in enumerate(gop.output[:]):
                # Like upstream's ``g_input.index(out)``, an output counts once, for the first
                # input whose gradient it is: an op reading one blob twice (Mul(w, w)) gets one
                # generator per output, and accumulation sums the two.
                for k, part in wanted.get(out, ())[:1]:
                    produced.add(out)
                    slots = writers.setdefault((k, part), [])
                    if slots and len(wanted[out]) == 1:
                        # the maker writes the gradient of one input again (a chain through
                        # the name, or the name used as scratch first): one generator
                        slots[-1][1:] = [i, out_i]
                    else:  # a first write, or one of several inputs sharing the name
                        slots.append([i, i, out_i])
        # One generator per gradient write that survives: a maker whose gradient is several
        # ops chained through one name (Pow, Sqrt...) is one generator (its last writer),
        # not one per op; an op writing the name at two outputs (Mul(w, w)) is two.
        sparse_parts: dict[int, GradGen] = {}
        flat = [(kp, slot) for kp, slots in writers.items() for slot in slots]
        for (k, part), (first, last, out_i) in sorted(flat, key=lambda e: (e[1][1], e[1][2])):
            gop = ops[last]
            dev = gop.device_option if gop.HasField("device_option") else None
            chain = ops[first:] if len(wanted[g_name(g_input[k], part)]) == 1 else ()
            blob = op_inputs[k]
            if part == 0:
                gen = GradGen(gop, out_i, g_input[k], dev, chain=chain)
                self._add_gen(blob, in_versions[blob], gen)
                continue
            partial = sparse_parts.setdefault(k, GradGen(None, 0, g_input[k], dev))
            if part == 1:
                partial.op, partial.idx, partial.chain = gop, out_i, chain
            else:
                partial.op_v, partial.idx_v, partial.chain_v = gop, out_i, chain
        for k, gen in sparse_parts.items():
            blob = op_inputs[k]
            self._add_gen(blob, in_versions[blob], gen)
        fwd_dev: DeviceOption | None = None
        for k, g in tracked:  # gradients that no gradient op writes are passed through
            if (g not in produced) if isinstance(g, str) else not (
                g.indices in produced or g.values in produced
            ):
                if fwd_dev is None and op.HasField("device_option"):
                    fwd_dev = op.device_option
                blob = op_inputs[k]
                self._add_gen(blob, in_versions[blob], GradGen(None, 0, g, fwd_dev))
        for k, g in enumerate(g_input):
            if g is not None:
                blob = op_inputs[k]
                grad_frontier[blob] = in_versions[blob]

    def _add_gen(self, blob: str, version: int, gen: GradGen) -> None:
        """Record ``gen`` as a generator of the gradient of ``blob`` at ``version``."""
        gens = self.generators.get((blob, version))
        if gens is None:
            self.generators[blob, version] = [gen]
        else:
            gens.append(gen)

    def _overwritten(
        self, gop: OperatorDef, pos: int, kind: str, idx: int, version: int
    ) -> None:
        """A gradient op input names a forward value overwritten later: recompute or raise."""
        name = gop.input[pos]
        fresh = None
        if self.env.recompute:
            try:
                fresh = self._recompute(name, version)
            except RecursionError:  # a chain of in-place rewrites too long to replay
                fresh = None
        if fresh is None:
            self._version_error(kind, idx, name, name)
        else:
            rename_input(gop, pos, fresh)

    _NOT_RECOMPUTABLE = frozenset(
        {"Do", "If", "While", "UniformFill", "GaussianFill", "XavierFill", "MSRAFill",
         "CreateScope", "HasScope", "Python", "PythonGradient"}
    )

    def _recompute(self, name: str, version: int) -> str | None:
        """A fresh blob holding ``name`` at ``version``, re-running its producer(s).

        Producer ops are cloned with every output renamed ``_<blob>_v<version>_recompute``,
        so the recomputation never touches a real forward blob. Inputs that were
        overwritten too are recomputed recursively. Returns ``None`` when the value cannot be
        rebuilt (an external input, a random or control op, a training Dropout).
        """
        key = (name, version)
        if key in self._recomputed:
            return self._recomputed[key]
        p = next(
            (i for i, outs in enumerate(self.out_versions) if outs.get(name) == version), None
        )
        if p is None:
            return None
        op = self.ops[p]
        if op.type in self._NOT_RECOMPUTABLE or (op.type == "Dropout" and not is_identity(op)):
            return None
        inputs = []
        for nm in self.op_inputs[p]:
            v = self.in_versions[p][nm]
            if self._same_value(nm, self.frontier[nm], v):
                inputs.append(nm)
                continue
            sub = self._recompute(nm, v)
            if sub is None:
                return None
            inputs.append(sub)
        clone = OperatorDef()
        clone.CopyFrom(op)
        del clone.input[:]
        del clone.output[:]
        del clone.control_input[:]
        clone.input.extend(inputs)
        for o in self.op_outputs[p]:
            fresh = f"_{o}_v{self.out_versions[p][o]}_recompute"
            clone.output.append(fresh)
            self._recomputed[(o, self.out_versions[p][o])] = fresh
        self._pending.append(clone)
        self.env.warn(
            "recomputed_forward_value",
            f"{name} (version {version}) was overwritten in place before the backward pass; "
            f"op[{p + self.offset}]:{op.type} is re-run into {self._recomputed[key]}",
            op_index=p + self.offset,
            op_type=op.type,
            blobs=(name, self._recomputed[key]),
            severity="info",
        )
        return self._recomputed[key]

    def _same_value(self, name: str, have: int, want: int) -> bool:
        """Versions ``have`` and ``want`` of ``name`` hold the same value (spec §2.6 check)."""
        if have == want:
            return True
        roots = self.value_roots.get(name)
        if not roots:
            return False
        return roots.get(have, have) == roots.get(want, want)

    def _recompute_obstacle(self, name: str, version: int) -> str | None:
        """Why ``recompute`` cannot rebuild ``name`` at ``version`` (``None``: it can).

        Mirrors :meth:`_recompute` without emitting anything.
        """
        if (name, version) in self._recomputed:
            return None
        p = next(
            (i for i, outs in enumerate(self.out_versions) if outs.get(name) == version), None
        )
        if p is None:
            if self.env.path:
                return (
                    f"'{name}' (version {version}) is the value the sub-net {self.env.path} "
                    "finds on entry, not produced by an op in it, so there is nothing to "
                    "re-run there"
                )
            return (
                f"'{name}' (version {version}) is a value fed to the net, not produced by an "
                "op, so there is nothing to re-run"
            )
        op = self.ops[p]
        where = f"op[{p + self.offset}]:{op.type}"
        if op.type in self._NOT_RECOMPUTABLE or (op.type == "Dropout" and not is_identity(op)):
            kind = (
                "a control op" if op.type in CONTROL_OP_TYPES
                else "an op that cannot be re-run to the same value (random or stateful)"
            )
            return f"'{name}' (version {version}) was produced by {where}, {kind}"
        for nm in self.op_inputs[p]:
            v = self.in_versions[p][nm]
            if not self._same_value(nm, self.frontier[nm], v):
                inner = self._recompute_obstacle(nm, v)
                if inner is not None:
                    return f"re-running {where} needs {inner}"
        return None

    def _recompute_advice(self, name: str, version: int) -> str:
        """What would help a gradient op that needs an overwritten value (issue 7, D)."""
        try:
            obstacle = self._recompute_obstacle(name, version)
        except RecursionError:  # pragma: no cover - a replay chain too deep to follow
            obstacle = "the chain of in-place rewrites is too long to replay"
        overwriter = next(
            (
                f"op[{i + self.offset}]:{self.op_types[i]}"
                for i, outs in enumerate(self.out_versions)
                if outs.get(name) == version + 1
            ),
            "a later op",
        )
        keep = (
            f"write the result of {overwriter} to a new blob instead of overwriting '{name}' "
            "in place"
        )
        if obstacle is None:
            if self.env.recompute:  # pragma: no cover - recompute succeeded, no error raised
                return f"({keep})"
            return (
                "(netgrad can re-run the op that produced it into a fresh blob: send "
                f"recompute=true, or --recompute on the command line; or {keep})"
            )
        return f"(recompute cannot help: {obstacle}. To fix it, {keep}.)"

    def _version_error(self, kind: str, idx: int, name: str, blob: str) -> None:
        """Raise the version error of ``CheckGradientOperatorInput`` (spec §2.6)."""
        outs, ins = self.out_versions[idx], self.in_versions[idx]
        hist = f"Version history of {blob}:\n{self.version_history(blob)}"
        if kind == "gradient":
            want, have = outs[blob], self.gradient_frontier[blob]
            msg = (
                f'Gradient name "{name}" is expected to correspond to version {want} of '
                f'"{blob}", but currently we have version {have}.'
            )
        else:
            want = outs[name] if kind == "output" else ins[name]
            have = self.frontier[name]
            msg = (
                f'Gradient operator needs {kind} "{name}" at version {want}, but currently '
                f"we have version {have}."
            )
            msg += " " + self._recompute_advice(name, want)
        raise VersionMismatchError.at(f"{msg}\n{hist}", blobs=tuple(dict.fromkeys((name, blob))))

    # -- accumulation -----------------------------------------------------------
    def _accumulate(
        self, idx: int, input_to_grad: dict[str, GradValue], grad_ops: list[OperatorDef]
    ) -> None:
        """Sum (dense) or Concat (sparse) multiple gradients of one blob version (spec §2.7)."""
        in_versions = self.in_versions[idx]
        for name, v in in_versions.items():
            usage = self.input_usages[name][v]
            if len(usage) < 2 or usage[0] != idx:
                continue
            gens = self.generators.get((name, v), [])
            if not gens:
                continue
            dense = [not g.sparse for g in gens]
            if any(dense) and not all(dense):
                raise GradientError.at(
                    f"Gradients for param ''{name}'' failed to verify: Automatic aggregation of "
                    "a mix of sparse and dense gradients is not supported yet",
                    blobs=(name,),
                )
            if len(gens) < 2:
                continue
            self._verify_devices(name, gens)
            if all(dense):
                sum_op, dense_grad = self._dense_sum(name, gens)
                grad_ops.append(sum_op)
                input_to_grad[name] = dense_grad
                self._owners.setdefault(dense_grad, set()).add(name)
            else:
                concat_ops, sparse_grad = self._sparse_concat(name, gens)
                grad_ops.extend(concat_ops)
                input_to_grad[name] = sparse_grad

    @staticmethod
    def _verify_devices(name: str, gens: Sequence[GradGen]) -> None:
        first: DeviceOption | None = None
        for g in gens:
            d = g.device if g.device is not None else DeviceOption()
            if first is None:
                first = d
                continue
            same_type = d.device_type == first.device_type
            if not same_type or (d.device_type != 0 and d.device_id != first.device_id):
                raise GradientError.at(
                    f"Gradients for param ''{name}'' failed to verify: Unexpected behavior: "
                    "not all grad ops have the same device option.",
                    blobs=(name,),
                )

    def _dense_sum(self, name: str, gens: Sequence[GradGen]) -> tuple[OperatorDef, str]:
        with_op = [g for g in gens if g.op is not None]
        passthrough = [str(g.gradient) for g in gens if g.op is None]
        base = with_op[0].op.output[with_op[0].idx] if with_op and with_op[0].op else name + "_grad"
        inputs: list[str] = []
        k = 0
        for g in gens:
            if g.op is None:
                inputs.append(str(g.gradient))
                continue
            old = g.op.output[g.idx]
            keep = g is with_op[0] and old not in passthrough
            if keep:
                inputs.append(old)
                continue
            new = f"_{old}_autosplit_{k}"
            k += 1
            self._rename_chain(g.op, g.idx, g.chain, new)
            inputs.append(new)
        if base in passthrough:
            # The name is a pass-through gradient, which other blobs may share (Sum, Copy,
            # in-place ops pass it on): summing into it in place would change their
            # gradients too. Upstream raised here ("The gradient output of empty gradient op
            # can not be the same as the normal name..."); netgrad sums into a fresh blob.
            base = f"_{base}_accumulated"
        if base in inputs:
            inputs.remove(base)
            inputs.insert(0, base)
        sum_op = make_op("Sum", inputs, [base])
        self._tag_sum_device(sum_op, gens)
        return sum_op, base

    def _sparse_concat(
        self, name: str, gens: Sequence[GradGen]
    ) -> tuple[list[OperatorDef], GradientSlice]:
        base = name + "_grad"
        for g in gens:
            src = g.op or g.op_v
            if src is not None:
                out = (g.op.output[g.idx] if g.op is not None else g.op_v.output[g.idx_v])  # type: ignore[union-attr]
                for suffix in ("_indices", "_values"):
                    if out.endswith(suffix):
                        out = out[: -len(suffix)]
                        break
                base = out
                break
        idx_inputs: list[str] = []
        val_inputs: list[str] = []
        ki = kv = 0
        for g in gens:
            gs = g.gradient
            if not isinstance(gs, GradientSlice):  # pragma: no cover - checked by caller
                continue
            if g.op is not None:
                new = f"_{g.op.output[g.idx]}_autosplit_{ki}"
                ki += 1
                self._rename_chain(g.op, g.idx, g.chain, new)
                idx_inputs.append(new)
            else:
                idx_inputs.append(gs.indices)
            if g.op_v is not None:
                new = f"_{g.op_v.output[g.idx_v]}_autosplit_{kv}"
                kv += 1
                self._rename_chain(g.op_v, g.idx_v, g.chain_v, new)
                val_inputs.append(new)
            else:
                val_inputs.append(gs.values)
        axis = [make_arg("axis", 0)]
        ops = [
            make_op(
                "Concat",
                idx_inputs,
                [base + "_indices_concat", base + "_indices_concat_split"],
                axis,
            ),
            make_op(
                "Concat",
                val_inputs,
                [base + "_values_concat", base + "_values_concat_split"],
                axis,
            ),
        ]
        for o in ops:
            self._tag_sum_device(o, gens)
        return ops, GradientSlice(base + "_indices_concat", base + "_values_concat")

    def _rename_chain(
        self, op: OperatorDef, idx: int, chain: Sequence[OperatorDef], new: str
    ) -> None:
        """Rename gradient output ``idx`` of ``op`` and every use of it in its maker's chain.

        ``chain`` runs from the first op of the maker that writes the name to the maker's
        last op. Every write in it is renamed, and every read after the first write (it
        reads the maker's own partial or final value); a read in the first op is left (it
        is the incoming gradient when a maker reuses that name, spec §3.8 #11). An empty
        chain (several inputs share the name, e.g. ``MatMul(w, w)``) renames ``op`` only.
        """
        old = op.output[idx]
        for pos, c in enumerate(chain or (op,)):
            if pos:
                for j, name in enumerate(c.input[:]):
                    if name == old:
                        rename_input(c, j, new)
            if c is op:  # the last writer: only this output (Mul(w, w) writes it twice)
                rename_output(c, idx, new, self._grad_ops)
                continue
            for j, name in enumerate(c.output[:]):
                if name == old:
                    rename_output(c, j, new, self._grad_ops)

    @staticmethod
    def _tag_sum_device(op: OperatorDef, gens: Sequence[GradGen]) -> None:
        """Device option of accumulation ops (newest Caffe2 ``_SetSumOpsDeviceOption``)."""
        tag = f"{ONLY_KEEP_IS_AUTO_GEN_SUM_OPS_TAG}:1"
        only_tag = any(g.device is not None and tag in g.device.extra_info for g in gens)
        if not only_tag and gens[0].device is not None:
            op.device_option.CopyFrom(gens[0].device)
        op.device_option.extra_info.append(f"{IS_AUTO_GEN_SUM_OPS_TAG}:1")


def _direct_writes(net: caffe2_pb2.NetDef, into: dict[str, None]) -> None:
    """Blobs written in the workspace that runs ``net``: Do sub-nets have their own."""
    for op in net.op:
        if op.type == "Do":
            into.update(dict.fromkeys(op.output[:-1]))
            continue
        into.update(dict.fromkeys(op.output))
        if op.type in ("If", "While"):
            for arg in op.arg:
                if arg.HasField("n"):
                    _direct_writes(arg.n, into)


def rename_output(
    op: OperatorDef, idx: int, new_name: str, siblings: list[OperatorDef] | None = None
) -> None:
    """Rename output ``idx`` of an emitted gradient op, reaching into control-op sub-nets.

    Plain ops just get the new output name. A gradient ``If``, ``Do`` or ``While`` writes its
    outputs from inside sub-nets, so the rename is applied there too (Caffe2
    ``disambiguate_grad_if_op_output`` for If, spec §3.6; extended to Do/While, issue 3).
    """
    if op.type in CONTROL_OP_TYPES:
        from core.control.gradients import rename_control_output

        rename_control_output(op, idx, new_name, siblings)
        return
    op.output[idx] = new_name


def g_name(g: GradValue, part: int) -> str:
    """The dense name (part 0), or the indices (1) or values (2) name of a GradientSlice."""
    if isinstance(g, GradientSlice):
        return g.indices if part == 1 else g.values
    return str(g)


def rename_input(op: OperatorDef, idx: int, new_name: str) -> None:
    """Make input ``idx`` of an emitted gradient op read ``new_name``, sub-nets included.

    A gradient ``Do``, ``If`` or ``While`` reads outer blobs from inside its sub-nets; every
    such read of the old name is redirected too (issue 7, B and C).
    """
    if op.type in CONTROL_OP_TYPES:
        from core.control.gradients import rename_control_input

        rename_control_input(op, op.input[idx], new_name)
        return
    op.input[idx] = new_name


def _as_seed_map(ys: Sequence[str] | Mapping[str, GradValue]) -> dict[str, GradValue]:
    if isinstance(ys, Mapping):
        return dict(ys)
    if isinstance(ys, str | bytes) or not isinstance(ys, Sequence):
        raise InvalidRequestError("ys should either be a list or a dict.")
    return {str(y): None for y in ys}


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
    grad_ops, gmap = bp.run(ys)
    return grad_ops, bp.entry_map() if entry else gmap


def _check_ys_written(seeds: Mapping[str, GradValue], op_outputs: Sequence[list[str]]) -> None:
    """Raise InvalidRequestError when a ``ys`` blob is an output of none of the ops."""
    written: set[str] = set()
    for outs in op_outputs:
        written.update(outs)
    missing = [y for y in seeds if y not in written]
    if missing:
        raise InvalidRequestError(
            f"ys names blobs that no op writes: {', '.join(missing)}",
            [
                Diagnostic("error", "unknown_ys_blob", f"no op writes blob '{y}'", blobs=(y,))
                for y in missing
            ],
        )


def _check_seed_names(
    seeds: Mapping[str, GradValue],
    op_inputs: Sequence[list[str]],
    op_outputs: Sequence[list[str]],
) -> None:
    """Refuse caller-chosen seed names that generation would overwrite or confuse.

    A seed named like a forward blob, or like the gradient netgrad gives another blob
    (``<x>_grad``), would be overwritten by a forward or gradient op before it is read, and
    the answer would be silently wrong (upstream accepted such names).

    Raises:
        InvalidRequestError: listing every offending seed.
    """
    names: set[str] = set()
    for group in (op_inputs, op_outputs):
        for blobs in group:
            names.update(blobs)
    problems = []
    for y, g in seeds.items():
        for seed in grad_names(g):
            other = seed[: -len("_grad")] if seed.endswith("_grad") else None
            if seed in names:
                why = "is also a forward blob"
            elif other is not None and other != y and other in names:
                why = f"is the name netgrad gives the gradient of blob '{other}'"
            else:
                continue
            problems.append(
                Diagnostic(
                    "error",
                    "seed_name_collision",
                    f"the seed gradient '{seed}' given for '{y}' {why}; choose another name "
                    f"(e.g. '{y}_grad') or let netgrad seed it (null)",
                    blobs=(y, seed),
                )
            )
    if problems:
        raise InvalidRequestError(problems[0].message, problems)


def net_gradient(
    net: caffe2_pb2.NetDef,
    ys: Sequence[str] | Mapping[str, GradValue],
    skip: int,
    return_net: bool,
    limits: GenLimits,
    recompute: bool = False,
) -> NetGradientResult:
    """Implementation of :func:`core.api.gradient_for_net`."""
    from core.ops import load_all

    load_all()
    seeds = _as_seed_map(ys)
    if skip < 0 or skip > len(net.op):
        raise InvalidRequestError(f"skip={skip} is outside 0..{len(net.op)} (the net's op count)")
    ops = net.op[skip:]
    env = GenEnv(limits, recompute=recompute)
    # The pass reads every op's outputs once; the ys check reuses them. A bad ys is
    # reported before any error the forward net has.
    try:
        bp = BackwardPass(ops, env, skip)
    except NetgradError:
        _check_ys_written(seeds, [op.output[:] for op in ops])
        raise
    _check_ys_written(seeds, bp.op_outputs)
    _check_seed_names(seeds, bp.op_inputs, bp.op_outputs)
    grad_ops, grad_map = bp.run(seeds)
    out_net = None
    if return_net:
        out_net = caffe2_pb2.NetDef()
        out_net.CopyFrom(net)
        out_net.op.extend(grad_ops)
    return NetGradientResult(grad_ops, grad_map, list(env.diagnostics), out_net)


def op_gradient(
    op: OperatorDef, g_output: Sequence[GradValue], limits: GenLimits
) -> OpGradientResult:
    """Implementation of :func:`core.api.gradient_for_op`."""
    from core.ops import load_all

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
    env = GenEnv(limits)
    env.op_index = 0
    try:
        grad_ops, g_input = get_gradient_for_op(op, g_output, env)
    except NetgradError as exc:
        problems = [
            p
            if p.path is not None or p.op_index is not None
            else Diagnostic(p.severity, p.code, p.message, 0, op.type, f"op[0]:{op.type}", p.blobs)
            for p in exc.problems
        ]
        raise type(exc)(exc.message, problems) from exc
    return OpGradientResult(grad_ops, list(g_input), list(env.diagnostics))
