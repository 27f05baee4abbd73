"""Version checks of gradient op inputs, and ``recompute`` of overwritten forward values.

Source: Caffe2 ``core.py`` ``IR.CheckGradientOperatorInput`` (spec §2.6) and its "DEBUG
HELP" version history. A gradient op may read a forward value, or an output gradient, only
at the version its forward op saw. netgrad also: lets versions an in-place identity op left
unchanged pass; checks an in-place op's *input* value against the input version when the
maker asked for it (upstream checked the output version first); says in the error what would
help (issue 7, D); and, with ``recompute``, re-runs the producer(s) of an overwritten value
into fresh blobs instead of raising, rebinding the gradient op to them (issue 7, B and C:
sub-net reads of gradient control ops included, through :mod:`core.ir.renaming`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from typing import NoReturn

from api_schemas import caffe2_pb2
from core.errors import GradientError, NetgradError, VersionMismatchError
from core.ir.env import GenEnv
from core.ir.renaming import rename_input
from core.ir.ssa import CONTROL_OP_TYPES, ForwardSSA
from core.registry import is_identity
from core.types import GradientSlice, GradValue

OperatorDef = caffe2_pb2.OperatorDef


#: The advice to send ``recompute`` (followed by the other fix and ``)``).
_SUGGESTION = ("netgrad can re-run the op that produced it into a fresh blob: send "
               "recompute=true, or --recompute on the command line; or ")
_SUGGESTED = re.compile(r"\(" + re.escape(_SUGGESTION) + r"(?P<keep>[^)]*)\)")


def honest_advice(exc: NetgradError, retry: Callable[[], object]) -> NetgradError:
    """``exc``, whose advice to send ``recompute=true`` holds only if that works.

    The advice looks at one value's producers; a generation with ``recompute`` can still
    fail elsewhere (an RNN's gradient reads its overwritten output by name). When ``exc``
    advises it, ``retry`` generates with ``recompute``: if that fails too, the advice says
    why instead (review, stop 24: the advice sent users to a second refusal).

    Args:
        exc: the error of a generation without ``recompute``.
        retry: the same generation with ``recompute=true``; raises :class:`NetgradError`.

    Returns:
        ``exc`` itself, or an error of its type with the advice rewritten.
    """
    if not any(_SUGGESTED.search(p.message) for p in exc.problems):
        return exc
    try:
        retry()
    except NetgradError as again:
        why = again.problems[0].message.split("\n", 1)[0].rstrip(". ")
        if len(why) > 400:
            why = why[:400] + "..."

        def rewrite(text: str) -> str:
            return _SUGGESTED.sub(lambda m: f"(recompute=true does not help here: {why}. "
                                            f"To fix it, {m['keep']}.)", text)

        problems = [dataclasses.replace(p, message=rewrite(p.message)) for p in exc.problems]
        return type(exc)(rewrite(exc.message), problems)
    except Exception:  # noqa: BLE001 - a check of the advice only: the error stays the answer
        return exc
    return exc


class VersionedSSA(ForwardSSA):
    """A :class:`~core.ir.ssa.ForwardSSA` that checks the versions gradient ops read.

    Attributes:
        gradient_frontier: blob -> the version its current gradient belongs to.
    """

    def __init__(self, ops: Sequence[OperatorDef], env: GenEnv, index_offset: int = 0) -> None:
        super().__init__(ops, env, index_offset)
        self.gradient_frontier: dict[str, int] = {}
        # (blob, version) -> the fresh blob a recomputation writes it into
        self._recomputed: dict[tuple[str, int], str] = {}
        # recomputation ops to emit before the gradient ops being checked
        self._pending: list[OperatorDef] = []
        # names the current op's gradient reads both before and after its in-place write
        self.ambiguous: set[str] | frozenset[str] = frozenset()
        # (gradient-op count, If/While index, blobs its sub-nets write undeclared)
        self.hidden_writes: list[tuple[int, int, list[str]]] = []

    def _check_gradient_inputs(
        self,
        idx: int,
        ops: Sequence[OperatorDef],
        g_out_names: Mapping[str, int],
        wants_input: set[str] | frozenset[str],
    ) -> None:
        """Check every input of the gradient ops ``ops`` of forward op ``idx`` (spec §2.6).

        ``g_out_names`` maps each output gradient name to its output position (the first
        output wins a shared name); ``wants_input`` holds the names this in-place op reads and
        writes whose *input* value the maker asked for. The backward pass checks the common
        case inline first (``BackwardPass._gradients_for_op``) and calls this exact check
        when it meets anything else. With ``recompute``, gradient ops reading an overwritten
        value are rebound to the recomputed blob (:meth:`_overwritten`).

        Raises:
            VersionMismatchError: a value or output gradient at the wrong version that
                ``recompute`` cannot rebuild (or was not asked to).
            GradientError: a name that is neither in the op's scope nor written by an
                earlier op of the same maker.
        """
        op = self.ops[idx]
        op_outputs = self.op_outputs[idx]
        in_versions = self.in_versions[idx]
        out_versions = self.out_versions[idx]
        frontier = self.frontier
        grad_frontier = self.gradient_frontier
        for i, gop in enumerate(ops):
            # Equal versions pass at once; _same_value only looks behind in-place identity ops.
            for pos, name in enumerate(gop.input[:]):
                if name in g_out_names:
                    out = op_outputs[g_out_names[name]]
                    want = out_versions[out]
                    have = grad_frontier.get(out, want)
                    if have != want and not self._same_value(out, have, want):
                        self._version_error("gradient", idx, name, out)
                elif name in out_versions and name not in wants_input:
                    want, have = out_versions[name], frontier[name]
                    if (have != want and not self._same_value(name, have, want)
                            and not self._made_by_maker(idx, ops, i, name)):
                        self._overwritten(gop, pos, "output", idx, want)
                elif name in in_versions:
                    want, have = in_versions[name], frontier[name]
                    if (have != want and not self._same_value(name, have, want)
                            and not self._made_by_maker(idx, ops, i, name)):
                        self._overwritten(gop, pos, "input", idx, want)
                elif not any(name in earlier.output for earlier in ops[:i]):
                    raise GradientError.at(
                        f'Blob name "{name}" not in the scope of operator {op.type} and is not '
                        "generated by any of the local gradient operators.",
                        blobs=(name,),
                    )

    def _made_by_maker(self, idx: int, ops: Sequence[OperatorDef], i: int, name: str) -> bool:
        """Whether ``name``, read by gradient op ``i`` of forward op ``idx``, is the value an
        earlier gradient op of the same maker wrote (a partial result whose name is also a
        forward blob's: ``Sqrt(p) -> p_grad``, whose maker writes ``p_grad`` for ``p``).

        Upstream took it for the forward value; with ``recompute`` the read was rebound to
        the recomputed forward blob, a wrong gradient with a 200 (long fuzz, stop 24). Read
        as the maker's own, the write over the forward blob is then refused by
        :func:`core.ir.collisions.check_generated_names`. Control ops are left out: their
        gradients pass workspace blobs through.
        """
        if self.op_types[idx] in CONTROL_OP_TYPES:
            return False
        return any(name in earlier.output for earlier in ops[:i])

    def _check_slices(self, idx: int, g_input: list[GradValue]) -> list[GradValue]:
        """Version-check the forward blobs a GradientSlice of op ``idx`` names.

        A slice's indices (``Gather``'s ``I(1)``) are a forward blob, read by whoever uses
        the slice (the caller, ``EnsureDense``, a ``densify`` ``SparseToDense``) after the
        forward net, so at its last version. Upstream checked only the names gradient ops
        read, so an index blob overwritten after the op moved the gradient to other rows
        (adversarial review, stop 23). With ``recompute`` the value is rebuilt.

        Returns:
            ``g_input``, with slices rebound to recomputed blobs.

        Raises:
            VersionMismatchError: a named blob was overwritten and not rebuilt.
        """
        ins, outs, frontier = self.in_versions[idx], self.out_versions[idx], self.frontier
        out = list(g_input)
        for k, g in enumerate(g_input):
            if not isinstance(g, GradientSlice):
                continue
            names = []
            for name in g:
                want = ins.get(name, outs.get(name))
                have = frontier.get(name, -1)
                fresh = None
                if want is not None and have != want and not self._same_value(name, have, want):
                    if self.env.recompute:
                        try:
                            fresh = self._recompute(name, want)
                        except RecursionError:
                            fresh = None
                    if fresh is None:
                        raise VersionMismatchError.at(
                            f'The sparse gradient (GradientSlice) of input {k} names "{name}" '
                            f"at version {want}, and is read after the forward net, where "
                            f"we have version {have}. {self._recompute_advice(name, want)}\n"
                            f"Version history of {name}:\n{self.version_history(name)}",
                            blobs=(name,))
                names.append(fresh or name)
            out[k] = GradientSlice(*names)
        return out

    def _overwritten(
        self, gop: OperatorDef, pos: int, kind: str, idx: int, version: int
    ) -> None:
        """A gradient op input names a forward value overwritten later: recompute or raise."""
        name = gop.input[pos]
        fresh = None
        if self.env.recompute and name in self.ambiguous:
            # An in-place op whose gradient reads both the value it overwrote and the one it
            # wrote (e.g. Div(a, b -> b)): the two reads of one name cannot be told apart,
            # so neither can be redirected (issue 7, fuzzer F4).
            raise VersionMismatchError.at(
                f'Gradient operator reads "{name}" at several inputs, both the value the '
                f"in-place {self.where(idx)} overwrote and the one it wrote, so recompute "
                "cannot redirect one of them. Write the op's result to a new blob instead of "
                f"overwriting '{name}' in place.\n"
                f"Version history of {name}:\n{self.version_history(name)}",
                blobs=(name,),
            )
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
        p = self.producer(name, version)
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
            f"{self.where(p)} is re-run into {self._recomputed[key]}",
            op_index=p + self.offset,
            op_type=op.type,
            blobs=(name, self._recomputed[key]),
            severity="info",
        )
        return self._recomputed[key]

    def _recompute_obstacle(self, name: str, version: int) -> str | None:
        """Why ``recompute`` cannot rebuild ``name`` at ``version`` (``None``: it can).

        Mirrors :meth:`_recompute` without emitting anything. Memoized per (name, version):
        producers that share ancestors (``Mul(x, x -> x)`` repeated) would otherwise cost
        one call per path, exponential in the chain length.
        """
        if (name, version) in self._recomputed:
            return None
        memo = self.__dict__.setdefault("_obstacles", {})
        key = (name, version)
        if key not in memo:
            memo[key] = None  # a cycle cannot occur (versions only grow); guards re-entry
            memo[key] = self._find_obstacle(name, version)
        return memo[key]

    def _find_obstacle(self, name: str, version: int) -> str | None:
        """:meth:`_recompute_obstacle` without the memo."""
        p = self.producer(name, version)
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
        where = self.where(p)
        if op.type in self._NOT_RECOMPUTABLE or (op.type == "Dropout" and not is_identity(op)):
            kind = (
                "a control op" if op.type in CONTROL_OP_TYPES
                else "an op that cannot be re-run to the same value (random or stateful)"
            )
            return f"'{name}' (version {version}) was produced by {where}, {kind}"
        for nm in dict.fromkeys(self.op_inputs[p]):
            v = self.in_versions[p][nm]
            if not self._same_value(nm, self.frontier[nm], v):
                inner = self._recompute_obstacle(nm, v)
                if inner is not None:
                    return f"{inner} (re-running {where} needs it)"
        return None

    def _recompute_advice(self, name: str, version: int) -> str:
        """What would help a gradient op that needs an overwritten value (issue 7, D)."""
        try:
            obstacle = self._recompute_obstacle(name, version)
        except RecursionError:  # pragma: no cover - a replay chain too deep to follow
            obstacle = "the chain of in-place rewrites is too long to replay"
        later = self.producer(name, version + 1)
        overwriter = (
            "a later op" if later is None else self.where(later)
        )
        keep = (
            f"write the result of {overwriter} to a new blob instead of overwriting '{name}' "
            "in place"
        )
        if obstacle is None:
            if self.env.recompute:  # pragma: no cover - recompute succeeded, no error raised
                return f"({keep})"
            return f"({_SUGGESTION}{keep})"
        return f"(recompute cannot help: {obstacle}. To fix it, {keep}.)"

    def _version_error(self, kind: str, idx: int, name: str, blob: str) -> NoReturn:
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
