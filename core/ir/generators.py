"""Gradient generators and accumulation: who writes each gradient, and summing them.

Source: Caffe2 ``core.py`` ``IR.BuildGradientGenerators``, ``GradGenMeta`` /
``SparseGradGenMeta`` and ``DoGradientAccumulation`` (``_MakeDenseSumOps``,
``_MakeSparseSumOps``, ``_SetSumOpsDeviceOption``; spec §2.7). netgrad records generators only
for blob versions read more than once (only those are ever summed), treats a maker whose
gradient is several ops chained through one name as one generator and renames the whole
chain when it splits names for a ``Sum`` (issue 7, E), and never sums into a pass-through
gradient that other blobs share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from api_schemas import caffe2_pb2
from core.errors import ExecutionError, GradientError
from core.ir.densify import densify_slices
from core.ir.env import GenEnv
from core.ir.renaming import g_name, rename_input, rename_output
from core.ir.versions import VersionedSSA
from core.registry import make_arg, make_op
from core.types import Diagnostic, GradientSlice, GradValue

OperatorDef = caffe2_pb2.OperatorDef
DeviceOption = caffe2_pb2.DeviceOption

IS_AUTO_GEN_SUM_OPS_TAG = "is_auto_gen_sum_ops"
ONLY_KEEP_IS_AUTO_GEN_SUM_OPS_TAG = "only_keep_is_auto_gen_sum_ops_tag"


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


def own(owners: dict[str, str | set[str]], grad: str | GradientSlice, blob: str) -> None:
    """Record that the pass gave gradient ``grad`` (its blob names) to ``blob``.

    ``owners`` maps a gradient blob name to its one owner, or to a set once it has several:
    most gradient names have one owner, and a string costs less than a set.
    """
    for name in (grad,) if isinstance(grad, str) else grad:
        held = owners.get(name)
        if held is None:
            owners[name] = blob
        elif isinstance(held, str):
            if held != blob:
                owners[name] = {held, blob}
        else:
            held.add(blob)


def owners_of(owners: dict[str, str | set[str]], name: str) -> set[str]:
    """The blobs gradient blob ``name`` was given to (see :func:`own`)."""
    held = owners.get(name)
    if held is None:
        return set()
    return {held} if isinstance(held, str) else held


class GradientRecord(VersionedSSA):
    """A :class:`~core.ir.versions.VersionedSSA` recording gradient generators and sums.

    Attributes:
        generators: (blob, version) -> the generators of that version's gradient, in
            emission order.
    """

    def __init__(self, ops: Sequence[OperatorDef], env: GenEnv, index_offset: int = 0) -> None:
        super().__init__(ops, env, index_offset)
        self.generators: dict[tuple[str, int], list[GradGen]] = {}
        # every gradient op emitted so far (a renamed gradient While adjusts its siblings)
        self._grad_ops: list[OperatorDef] = []
        # gradient blob name -> the blob, or the blobs, the pass gave it to (pass-through
        # ops share one; see own() and owners_of()); kept only in nets with control ops,
        # the only ones that ask (BackwardPass._protect_incoming)
        self._owners: dict[str, str | set[str]] = {}

    def _record_generators(
        self,
        idx: int,
        ops: Sequence[OperatorDef],
        g_input: Sequence[GradValue],
        tracked: Sequence[tuple[int, str | GradientSlice]],
    ) -> None:
        """Record which gradient op writes each ``tracked`` input gradient of op ``idx``.

        Caffe2 ``BuildGradientGenerators`` (spec §2.7). ``tracked`` lists ``(input position,
        gradient)`` for the inputs whose version more than one op reads: only their gradients
        are ever summed (:meth:`_accumulate`), so only they need generators. A gradient that
        no gradient op writes is passed through (a generator without an op).
        """
        op = self.ops[idx]
        op_inputs = self.op_inputs[idx]
        in_versions = self.in_versions[idx]
        # gradient name -> [(input position k, part)] with part 0 dense, 1 indices, 2 values
        wanted: dict[str, list[tuple[int, int]]] = {}
        for k, g in tracked:
            if isinstance(g, str):
                if g in wanted:
                    wanted[g].append((k, 0))
                else:
                    wanted[g] = [(k, 0)]
            else:
                wanted.setdefault(g.indices, []).append((k, 1))
                wanted.setdefault(g.values, []).append((k, 2))
        produced: set[str] = set()
        # (input position k, part) -> (first writer, last writer, output index of the last)
        writers: dict[tuple[int, int], list[list[int]]] = {}
        for i, gop in enumerate(ops):
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

    def _add_gen(self, blob: str, version: int, gen: GradGen) -> None:
        """Record ``gen`` as a generator of the gradient of ``blob`` at ``version``."""
        gens = self.generators.get((blob, version))
        if gens is None:
            self.generators[blob, version] = [gen]
        else:
            gens.append(gen)

    def _accumulate(
        self, idx: int, input_to_grad: dict[str, GradValue], grad_ops: list[OperatorDef]
    ) -> None:
        """Sum (dense) or Concat (sparse) multiple gradients of one blob version (spec §2.7)."""
        in_versions = self.in_versions[idx]
        for name, v in in_versions.items():
            usage = self.readers(name, v)
            if len(usage) < 2 or usage[0] != idx:
                continue
            gens = self.generators.get((name, v), [])
            if not gens:
                continue
            dense = [not g.sparse for g in gens]
            if any(dense) and not all(dense):
                if not self.env.densify:
                    raise GradientError.at(
                        f"Gradients for param ''{name}'' failed to verify: Automatic "
                        "aggregation of a mix of sparse and dense gradients is not supported "
                        f"yet (consumers of {name}: {self._consumers(usage)}); ask for "
                        '"densify": true to sum them densely',
                        blobs=(name,),
                        code="mixed_sparse_dense",
                    )
                like = self._shape_source(gens)
                sparse = self._split_slices(gens)
                made = iter(densify_slices(name, sparse, like, grad_ops, self.env, self.ops))
                gens = [g if not g.sparse else GradGen(None, 0, next(made), g.device)
                        for g in gens]
                dense = [True] * len(gens)
            if len(gens) < 2:
                continue
            self._verify_devices(name, gens)
            if all(dense):
                sum_op, dense_grad = self._dense_sum(name, gens)
                grad_ops.append(sum_op)
                input_to_grad[name] = dense_grad
                own(self._owners, dense_grad, name)
            else:
                concat_ops, sparse_grad = self._sparse_concat(name, gens)
                grad_ops.extend(concat_ops)
                input_to_grad[name] = sparse_grad
                self._warn_index_ranks(name, usage, concat_ops)

    def _warn_index_ranks(self, name: str, usage: Sequence[int],
                          concat_ops: Sequence[OperatorDef]) -> None:
        """Note that a sparse sum with a ``Gather``'s indices runs only for agreeing shapes.

        Caffe2's sparse sum (spec §2.7) concatenates the slices' indices and values along
        axis 0. ``Gather`` takes indices of any rank and passes them on as its slice's
        indices, so two Gathers of one table with a ``[N]`` and a ``[B, K]`` index blob (or a
        0-d one) give a ``Concat`` that fails at run time. The shapes are not known when the
        net is generated, so the sum stays Caffe2's and this says what to change. The
        segment ops (``SparseLengthsSum``...) take 1-D indices only and need no warning.
        """
        gathers = [i for i in usage if i < len(self.op_types) and self.op_types[i] == "Gather"]
        if not gathers:
            return
        i = gathers[0]
        concat = concat_ops[0]
        concat_outputs = [o.output[0] for o in concat_ops]
        index_blobs = ", ".join(dict.fromkeys(concat.input))
        self.env.warn(
            "sparse_sum_index_shapes",
            f"the sparse gradients of {name} are summed by Concat along axis 0 of their "
            f"indices ({index_blobs}) and of their values (Caffe2's sparse sum): the gradient "
            "net runs only if every index blob is at least 1-D and all agree in the dims "
            "after the first (1-D indices always do). If a Gather of it takes indices of "
            "another rank (a [B, K] batch beside an [N] list, or a 0-d index), that Concat "
            "fails at run time: flatten the indices in the forward net (FlattenToVec before "
            "the Gather, Reshape after it) or give the Gathers dense_gradient=1 for a dense "
            "sum",
            op_index=i + self.offset,
            op_type="Gather",
            blobs=(name, *dict.fromkeys(concat.input), *concat_outputs),
            severity="info",
        )

    def _consumers(self, usage: Sequence[int]) -> str:
        """``op[i]:Type`` of each reader (sub-net path included), for error messages."""
        n = len(self.op_types)  # a reader at index n is the seed of a gradient asked for
        return ", ".join(
            self.env.op_path(i + self.offset, self.op_types[i]) if i < n
            else "the gradient asked for in ys" for i in usage
        )

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

    @staticmethod
    def _shape_source(gens: Sequence[GradGen]) -> str:
        """A dense gradient among ``gens`` whose name :meth:`_dense_sum` keeps.

        A pass-through gradient is never renamed; with none, ``_dense_sum`` keeps the name
        of the first dense gradient an op writes.
        """
        dense = [g for g in gens if not g.sparse]
        for g in dense:
            if g.op is None:
                return str(g.gradient)
        first = dense[0]
        return first.op.output[first.idx] if first.op is not None else str(first.gradient)

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
        split = self._split_slices(gens)
        idx_inputs = [gs.indices for gs, _ in split]
        val_inputs = [gs.values for gs, _ in split]
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

    def _split_slices(
        self, gens: Sequence[GradGen]
    ) -> list[tuple[GradientSlice, DeviceOption | None]]:
        """The sparse gradients of ``gens``, each written to names of its own.

        The makers of several sparse readers of one blob name their slices alike
        (``E_grad_indices`` / ``E_grad_values``): each writer's halves are renamed
        ``_<name>_autosplit_<k>`` (Caffe2 ``_MakeSparseSumOps``), so that one reader's
        values do not overwrite another's before the sum reads them. A half no op writes
        (a pass-through) keeps its name. Returns each slice with its writer's device.
        """
        out: list[tuple[GradientSlice, DeviceOption | None]] = []
        ki = kv = 0
        for g in gens:
            gs = g.gradient
            if not isinstance(gs, GradientSlice):
                continue
            indices, values = gs.indices, gs.values
            if g.op is not None:
                indices = f"_{g.op.output[g.idx]}_autosplit_{ki}"
                ki += 1
                self._rename_chain(g.op, g.idx, g.chain, indices)
            if g.op_v is not None:
                values = f"_{g.op_v.output[g.idx_v]}_autosplit_{kv}"
                kv += 1
                self._rename_chain(g.op_v, g.idx_v, g.chain_v, values)
            out.append((GradientSlice(indices, values), g.device))
        return out

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


def explain_sparse_sum_failure(exc: ExecutionError, generated: Sequence[Diagnostic],
                               grad_ops: Sequence[OperatorDef], prefix: str = "",
                               offset: int = 0) -> None:
    """Add to ``exc`` the generation note that foretold a failing sparse-sum ``Concat``.

    A sparse sum of Gathers' slices (``sparse_sum_index_shapes``, spec §2.7) runs only when
    their index blobs agree in shape after the first dim; when the op that failed is that
    generated ``Concat`` (``<prefix>op[offset + k]`` with ``grad_ops[k]`` writing
    ``<blob>_indices_concat`` / ``_values_concat``), the note says what to change in the
    forward net. Used by the checker (``prefix`` ``grad_ops/``) and by ``run_net``
    (``offset``: the forward ops before the gradient ops), which know the shapes
    generation did not.
    """
    failed: set[str] = set()
    for p in exc.problems:  # (the executor locates the failing op: index, type and path)
        if p.op_index is None or p.path != f"{prefix}op[{p.op_index}]:Concat":
            continue  # (a Concat inside a sub-net is none of the sum's)
        k = p.op_index - offset
        if 0 <= k < len(grad_ops) and grad_ops[k].type == "Concat" and grad_ops[k].output:
            failed.add(grad_ops[k].output[0])
    if not failed:
        return
    for d in generated:
        if d.code == "sparse_sum_index_shapes" and failed & set(d.blobs):
            exc.problems.append(replace(d, severity="error"))
