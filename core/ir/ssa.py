"""Forward bookkeeping of the backward pass: SSA versions of every blob and who reads them.

Source: Caffe2 ``core.py`` ``class IR`` (``Play``, ``SanityCheck``; spec §2.4). Upstream keeps
the same records; netgrad also keeps the op types and names read out of the protobuf once,
the versions an in-place identity op leaves unchanged (``value_roots``) and the names whose
first appearance is a write. Control ops are recorded with the outputs they may leave
unchanged added to their inputs (:func:`core.ir.dataflow.with_implicit_inputs`, issue 7, A).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from api_schemas import caffe2_pb2
from core.errors import InvalidNetError
from core.ir.dataflow import with_implicit_inputs
from core.ir.env import GenEnv
from core.registry import get_entry
from core.types import Diagnostic

OperatorDef = caffe2_pb2.OperatorDef

#: Op types that run sub-nets: the SSA adds their implicit reads; their gradients are
#: renamed through the registry (:mod:`core.ir.renaming`).
CONTROL_OP_TYPES = ("Do", "If", "While")


#: Lines of a version history a message shows at most.
_HISTORY_LINES = 20


class ForwardSSA:
    """SSA record of a forward op list (Caffe2 ``IR`` after ``Play``, spec §2.4).

    Args:
        ops: forward OperatorDefs, in order.
        env: generation environment (limits, diagnostics, sub-net path).
        index_offset: added to op indices in messages (the ``skip`` of ``AddGradientOperators``).

    Attributes:
        ops: the ops (control ops replaced by copies with their implicit reads).
        in_versions, out_versions: per op, blob -> the version it reads / writes.
        frontier: blob -> its latest version, blobs in first-appearance order.
        input_usages: blob -> the index of the only op that reads it (at the version in that
            op's ``in_versions``), or, once it has several readers, version -> the index of
            the only op reading that version, or the list of them (see :meth:`readers`).
        op_types, op_inputs, op_outputs: per op, its type and names, read once.
        value_roots: name -> version -> the oldest version with the same value, only for
            versions written by an in-place identity op (``Dropout`` with ``is_test``...).
        first_written: names whose first appearance is a write (their entry value is
            never read).
        blind_writers: indices of the ops that overwrite a blob without reading it.

    Raises:
        InvalidNetError: a ``StopGradient`` output is read by nobody ("orphan", spec §2.4).
        LimitExceededError: the request's ops (sub-nets included) exceed ``max_ops``.
    """

    def __init__(self, ops: Sequence[OperatorDef], env: GenEnv, index_offset: int = 0) -> None:
        env.count_ops(len(ops))
        self.ops = list(ops)
        self.env = env
        self.offset = index_offset
        # Per op: the version of each name it reads and writes; op types and names read out
        # of the protobuf once (every read of a protobuf field builds new Python strings;
        # slicing copies a repeated field into a list in one call, about twice as fast as
        # list() or iterating it).
        self.in_versions: list[dict[str, int]] = []
        self.out_versions: list[dict[str, int]] = []
        self.op_types: list[str] = []
        self.op_inputs: list[tuple[str, ...]] = []
        self.op_outputs: list[tuple[str, ...]] = []
        # name -> latest version; new blobs enter in first-appearance order (the gradient
        # map's order relies on it)
        self.frontier: dict[str, int] = {}
        # Most blobs (and versions) have one reader: an int instead of {version: [index]}
        # keeps this small, and leaves the garbage collector fewer containers to walk.
        self.input_usages: dict[str, int | dict[int, int | list[int]]] = {}
        # value_roots[name][v]: the oldest version with the same value as version v, kept
        # only for versions written by an in-place identity op (is_test Dropout...).
        self.value_roots: dict[str, dict[int, int]] = {}
        # names whose first appearance is a write: the net never reads their entry value
        self.first_written: set[str] = set()
        # ops that overwrite a blob without reading it (the older version's gradient stops)
        self.blind_writers: set[int] = set()
        self._producers: dict[tuple[str, int], int] | None = None  # see producer()
        self._play_all()
        if "" in self.frontier:  # (one lookup: the frontier holds every name read or written)
            self._refuse_empty_names()
        self._check_stop_gradients()
        self._warn_undeclared_branch_writes()

    def _play_all(self) -> None:
        """Record every op of :attr:`ops` (Caffe2 ``IR.Play``, one loop for all: a hot path)."""
        ops = self.ops
        frontier = self.frontier
        usages = self.input_usages
        first_written = self.first_written
        blind_writers = self.blind_writers
        in_versions = self.in_versions
        out_versions = self.out_versions
        op_types = self.op_types
        op_inputs = self.op_inputs
        op_outputs = self.op_outputs
        # one string object per op type (a net repeats a few types many times)
        type_names: dict[str, str] = {}
        # op type -> its identity predicate (registry.register_identity) or None, read once
        identities: dict[str, Callable[[OperatorDef], bool] | None] = {}
        for idx in range(len(ops)):
            op = ops[idx]
            op_type = op.type
            op_type = type_names.setdefault(op_type, op_type)
            if op_type in CONTROL_OP_TYPES:
                op = ops[idx] = with_implicit_inputs(op)
            # Tuples: the garbage collector stops tracking a tuple of strings.
            op_in = tuple(op.input[:])
            op_out = tuple(op.output[:])
            op_types.append(op_type)
            op_inputs.append(op_in)
            op_outputs.append(op_out)
            ins: dict[str, int] = {}
            for name in op_in:
                v = frontier.setdefault(name, 0)
                ins[name] = v
                by_version = usages.get(name)
                if by_version is None:
                    usages[name] = idx
                elif isinstance(by_version, int):  # a second reader
                    first = by_version
                    first_v = ins[name] if first == idx else in_versions[first][name]
                    if first_v == v:
                        usages[name] = {v: [first, idx]}
                    else:
                        usages[name] = {first_v: first, v: idx}
                else:
                    readers = by_version.get(v)
                    if readers is None:
                        by_version[v] = idx
                    elif isinstance(readers, int):
                        by_version[v] = [readers, idx]
                    else:
                        readers.append(idx)
            outs: dict[str, int] = {}
            for name in op_out:
                last = frontier.get(name)
                if last is None:
                    first_written.add(name)
                    v = 0
                else:
                    v = last + 1
                    if name not in ins:
                        blind_writers.add(idx)
                frontier[name] = outs[name] = v
            if op_in and op_out and op_in[0] == op_out[0]:
                if op_type in identities:
                    pred = identities[op_type]
                else:
                    e = get_entry(op_type)
                    pred = identities[op_type] = None if e is None else e.identity
                if pred is not None and pred(op):
                    name = op_out[0]
                    roots = self.value_roots.setdefault(name, {})
                    roots[outs[name]] = roots.get(ins[name], ins[name])
            in_versions.append(ins)
            out_versions.append(outs)

    def _refuse_empty_names(self) -> None:
        """Refuse ops that read or write a blob named ``""`` (no workspace blob has that name,
        and Caffe2 reads an empty gradient name as no gradient: the answer would be wrong).

        Raises:
            InvalidNetError: code ``empty_blob_name``, one problem per offending op.
        """
        problems = []
        for idx, op_type in enumerate(self.op_types):
            where = [w for w, names in (("input", self.op_inputs[idx]),
                                        ("output", self.op_outputs[idx])) if "" in names]
            if where:
                msg = (f"{op_type} has an empty blob name among its {' and '.join(where)}s; "
                       "give every input and output a name")
                problems.append(self._problem("empty_blob_name", msg, idx))
        raise InvalidNetError(problems[0].message, problems)

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
        no gradient flows through them; netgrad does the same and says so. The names are
        kept in :attr:`undeclared_writes` (op index -> blobs) for the backward pass, which
        refuses a gradient they would make wrong.
        """
        self.undeclared_writes: dict[int, list[str]] = {}
        for idx, op_type in enumerate(self.op_types):
            if op_type not in ("If", "While", "Do"):
                continue
            op = self.ops[idx]
            declared = set(op.output)
            undeclared: dict[str, None] = {}
            if op_type == "Do":  # (its own workspace: only input-only bindings leak)
                undeclared.update(dict.fromkeys(hidden_do_writes(op, self.env.memo)))
            else:
                for arg in op.arg:
                    if arg.HasField("n"):
                        _direct_writes(arg.n, undeclared, self.env.memo)
            names = [n for n in undeclared if n not in declared]
            if names:
                self.undeclared_writes[idx] = names
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

    def where(self, idx: int) -> str:
        """Op ``idx`` as messages name it, from the top net: ``op[0]:If/then_net/op[1]:Mul``."""
        return self.env.op_path(idx + self.offset, self.op_types[idx])

    def version_history(self, name: str) -> str:
        """Readable version history of blob ``name`` (upstream's "DEBUG HELP")."""
        lines: list[str] = []
        for idx in range(len(self.ops)):
            if len(lines) >= _HISTORY_LINES:  # (one error per op of a long net: keep it linear)
                lines.append("  ...")
                break
            where = self.where(idx)
            if name in self.in_versions[idx]:
                lines.append(f"  version (in) {self.in_versions[idx][name]} <-- {where}")
            if name in self.out_versions[idx]:
                lines.append(f"  version (out) {self.out_versions[idx][name]} <-- {where}")
        return "\n".join(lines)

    def readers(self, name: str, version: int) -> list[int]:
        """Indices of the ops that read ``name`` at ``version``, in op order."""
        usage = self.input_usages.get(name)
        if usage is None:
            return []
        if isinstance(usage, int):
            return [usage] if self.in_versions[usage][name] == version else []
        readers = usage.get(version)
        if readers is None:
            return []
        return [readers] if isinstance(readers, int) else readers

    def producer(self, name: str, version: int) -> int | None:
        """Index of the op that writes ``name`` at ``version``, or ``None`` (a fed value).

        The index of producers is built on first use (recompute, version errors and
        dead-write warnings ask; most passes never do), in one walk over the ops.
        """
        producers = self._producers
        if producers is None:
            producers = self._producers = {}
            for i, outs in enumerate(self.out_versions):
                for blob, v in outs.items():
                    producers.setdefault((blob, v), i)
        return producers.get((name, version))

    def _add_reader(self, name: str, version: int, idx: int) -> None:
        """Record one more reader ``idx`` of ``name`` at ``version`` (e.g. a ``ys`` seed)."""
        usage = self.input_usages.get(name)
        if usage is None:
            by_version: dict[int, int | list[int]] = {}
        elif isinstance(usage, int):
            by_version = {self.in_versions[usage][name]: usage}
        else:
            by_version = usage
        readers = by_version.get(version)
        if readers is None:
            by_version[version] = idx
        elif isinstance(readers, int):
            by_version[version] = [readers, idx]
        else:
            readers.append(idx)
        self.input_usages[name] = by_version

    def _same_value(self, name: str, have: int, want: int) -> bool:
        """Versions ``have`` and ``want`` of ``name`` hold the same value (spec §2.6 check)."""
        if have == want:
            return True
        roots = self.value_roots.get(name)
        if not roots:
            return False
        return roots.get(have, have) == roots.get(want, want)

    def _warn_dead_write(self, idx: int, name: str, version: int) -> None:
        """Warn when op ``idx`` overwrites a version of ``name`` that no op read (bug row 2).

        Caffe2 raised a version error for such a dead write (e.g. an op added twice); its
        gradient is simply zero, so netgrad answers and says so.
        """
        if self.readers(name, version):
            return
        if version == 0 and name not in self.first_written:
            return  # version 0 of an input: fed, not written
        writer = self.producer(name, version)  # (an earlier op: op idx writes version + 1)
        if writer is None:
            return
        w_type = self.op_types[writer]
        self.env.warn(
            "dead_write",
            f"{self.where(writer)} writes '{name}' (version {version}) but no op reads it "
            f"before {self.where(idx)} overwrites it, "
            "so that write gets no gradient (harmless when meant; if the value was meant to be "
            "read, check the blob names, or whether an op was added twice)",
            op_index=writer + self.offset,
            op_type=w_type,
            blobs=[name],
        )


def hidden_do_writes(op: caffe2_pb2.OperatorDef,
                     memo: dict[Any, Any] | None = None) -> list[str]:
    """Outer blobs a ``Do`` writes without listing them as outputs: its sub-net writes an
    inner name bound to an outer blob that is only among the Do's inputs. The binding
    forwards to the outer blob (spec §4.1), so the write lands there, unseen by the SSA
    (adversarial review, stop 34). ``[]`` for bindings that do not parse (refused when the
    Do's gradient is made).

    ``memo`` (:attr:`core.ir.env.GenEnv.memo`) keeps each Do's answer for the request: every
    nesting level above a Do asks for it, and without it a deep net costs Python time
    quadratic in its depth. The key is the op's bytes (each level works on its own copies of
    the ops, :func:`core.ir.dataflow.with_implicit_inputs`): serializing runs in C.
    """
    if memo is None:
        return _hidden_do_writes(op, memo)
    key = ("hidden_do_writes", op.SerializeToString(deterministic=True))
    found = memo.get(key)
    if found is None:
        found = memo[key] = _hidden_do_writes(op, memo)
    return list(found)


def _hidden_do_writes(op: caffe2_pb2.OperatorDef, memo: dict[Any, Any] | None) -> list[str]:
    inner = outer_idx = subnet = None
    for a in op.arg:
        if a.name == "inner_blobs" and inner is None:
            inner = [s.decode("utf-8", "replace") for s in a.strings]
        elif a.name == "outer_blobs_idx" and outer_idx is None:
            outer_idx = list(a.ints)
        elif a.name == "net" and subnet is None and a.HasField("n"):
            subnet = a.n
    if not inner or outer_idx is None or subnet is None or len(inner) != len(outer_idx):
        return []
    outer = [*op.input[:-1], *op.output[:-1]]
    if any(not 0 <= k < len(outer) for k in outer_idx):
        return []
    bound = dict(zip(inner, (outer[k] for k in outer_idx), strict=True))
    declared = set(op.output)
    written: dict[str, None] = {}
    _direct_writes(subnet, written, memo)
    return list(dict.fromkeys(bound[n] for n in written
                              if n in bound and bound[n] not in declared))


def _direct_writes(net: caffe2_pb2.NetDef, into: dict[str, None],
                   memo: dict[Any, Any] | None = None) -> None:
    """Blobs written in the workspace that runs ``net``: Do sub-nets have their own, but
    write through their input-only bindings (:func:`hidden_do_writes`)."""
    for op in net.op:
        if op.type == "Do":
            into.update(dict.fromkeys(op.output[:-1]))
            into.update(dict.fromkeys(hidden_do_writes(op, memo)))
            continue
        into.update(dict.fromkeys(op.output))
        if op.type in ("If", "While"):
            for arg in op.arg:
                if arg.HasField("n"):
                    _direct_writes(arg.n, into, memo)

