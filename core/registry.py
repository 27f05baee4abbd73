"""The op registry: op type -> schema, gradient status/maker and NumPy kernel.

Source: Caffe2 ``operator_gradient.h`` / ``operator.cc`` (``GetGradientForOp``) and the
Python ``GradientRegistry`` (spec §2.2, §2.3). Each op module in ``core/ops`` registers its
ops with the decorators below; :func:`core.ops.load_all` imports them all.

A forward op type has exactly one :class:`GradientStatus`:

* ``GRADIENT`` - a maker exists;
* ``NO_GRADIENT`` - gradients stop silently (fill ops, ``StopGradient``);
* ``SHOULD_NOT_DIFFERENTIATE`` - an error if the backward pass reaches it with a gradient;
* ``NOT_IMPLEMENTED`` - an error if reached (Caffe2's ``GRADIENT_NOT_IMPLEMENTED_YET`` and
  the Int8 ops, which register nothing upstream).

Gradient-only op types (``ReluGradient``...) are registered with ``gradient_op=True``: they
have kernels but are never differentiated.

The registry is also how the control ops (``core/control``) plug into the engine without the
engine importing them: an op type may register an executor-native runtime
(:func:`register_native`, what ``Do``/``If``/``While`` run instead of a kernel) and renamers
for its emitted gradient ops (:func:`register_renamers`, used by accumulation and
``recompute``), and the backward pass registers itself (:func:`register_subnet_pass`) for
the control-op makers to differentiate their sub-nets with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from api_schemas import caffe2_pb2
from core.errors import GradientError, GradientNotDefinedError, InvalidNetError

# The maker's view lives in core.maker; op modules and clients import it from here.
from core.maker import GradientMaker, warn_dropped
from core.maker import bad_argument as bad_argument
from core.maker import find_arg as find_arg
from core.maker import make_arg as make_arg
from core.maker import make_op as make_op
from core.template import GradTemplate
from core.types import GradientSlice, GradValue

if TYPE_CHECKING:
    import numpy as np

OperatorDef = caffe2_pb2.OperatorDef
Argument = caffe2_pb2.Argument


class GradientStatus(StrEnum):
    """Gradient status of a forward op type (Caffe2 registration macros, spec §2.3)."""

    GRADIENT = "gradient"
    NO_GRADIENT = "no_gradient"
    SHOULD_NOT_DIFFERENTIATE = "should_not_differentiate"
    NOT_IMPLEMENTED = "not_implemented"
    GRADIENT_OP = "gradient_op"  # a gradient op type; has a kernel, never differentiated
    #: Caffe2 differentiates the type but netgrad has no maker for it (core.caffe2_statuses)
    NOT_IMPLEMENTED_IN_NETGRAD = "not_implemented_in_netgrad"


_GRADIENT = GradientStatus.GRADIENT  # (a module global: looked up once per op, hot path)
_SAME_00 = (0, 0)  # the in-place pair input 0 -> output 0


@dataclass(frozen=True, slots=True)
class OpSchema:
    """Input/output arity and allowed in-place pairs of an op type (Caffe2 ``OpSchema``).

    Attributes:
        min_inputs, max_inputs, min_outputs, max_outputs: arity bounds (``-1`` = unbounded).
        allow_inplace: pairs ``(input_index, output_index)`` that may share a blob name, or
            ``True`` for any pairing.
    """

    min_inputs: int = 0
    max_inputs: int = -1
    min_outputs: int = 0
    max_outputs: int = -1
    allow_inplace: bool | frozenset[tuple[int, int]] = True

    def verify(
        self,
        op: OperatorDef,
        inputs: Sequence[str] | None = None,
        outputs: Sequence[str] | None = None,
    ) -> str | None:
        """Return a reason why ``op`` fails this schema, or ``None`` when it passes.

        ``inputs``/``outputs``, when given, are ``op``'s input/output names already read
        out of the protobuf (the backward pass keeps them), so they are not read again.
        """
        ins = op.input[:] if inputs is None else inputs
        outs = op.output[:] if outputs is None else outputs
        n_in, n_out = len(ins), len(outs)
        if n_in < self.min_inputs or (self.max_inputs >= 0 and n_in > self.max_inputs):
            return f"{op.type} takes {_arity(self.min_inputs, self.max_inputs)} inputs, got {n_in}"
        if n_out < self.min_outputs or (self.max_outputs >= 0 and n_out > self.max_outputs):
            return (
                f"{op.type} takes {_arity(self.min_outputs, self.max_outputs)} outputs, "
                f"got {n_out}"
            )
        if self.allow_inplace is True:
            return None
        for out in outs:  # (a few names: cheaper than building a set on this hot path)
            if out in ins:
                break
        else:
            return None
        allowed = self.allow_inplace or frozenset()
        for i, name in enumerate(ins):
            for o, out in enumerate(outs):
                if name == out and (i, o) not in allowed:
                    return (
                        f"input {i} and output {o} are both '{name}': set to be in-place "
                        f"but this is not supported by op {op.type}"
                    )
        return None


def _arity(lo: int, hi: int) -> str:
    if hi < 0:
        return f"at least {lo}"
    return str(lo) if lo == hi else f"{lo} to {hi}"


def schema(
    inputs: int | tuple[int, int] = (0, -1),
    outputs: int | tuple[int, int] = (0, -1),
    inplace: bool | Sequence[tuple[int, int]] = True,
) -> OpSchema:
    """Shorthand: ``schema(2, 1)`` = exactly 2 inputs, 1 output; tuples give (min, max)."""
    lo_i, hi_i = (inputs, inputs) if isinstance(inputs, int) else inputs
    lo_o, hi_o = (outputs, outputs) if isinstance(outputs, int) else outputs
    allow: bool | frozenset[tuple[int, int]] = (
        inplace if isinstance(inplace, bool) else frozenset(inplace)
    )
    return OpSchema(lo_i, hi_i, lo_o, hi_o, allow)


MakerFn = Callable[[GradientMaker], list[OperatorDef]]
KernelFn = Callable[..., Any]
#: Runtime of an executor-native op: ``fn(ctx, op, workspace, path)`` (see
#: :mod:`core.control.runtime`; the executor passes its context and the op's workspace).
NativeFn = Callable[[Any, OperatorDef, Any, str], None]
#: ``fn(grad_op, idx, new_name, siblings)``: make an emitted gradient op of this type write
#: output ``idx`` as ``new_name`` (``siblings``: the ops emitted with it, which it may adjust).
OutputRenamer = Callable[[OperatorDef, int, str, "list[OperatorDef] | None"], None]
#: ``fn(grad_op, old, new)``: make an emitted gradient op of this type read ``new`` wherever
#: it read blob ``old``.
InputRenamer = Callable[[OperatorDef, str, str], None]
#: The backward pass over a list of ops: ``fn(ops, seeds, env, index_offset=0, entry=False)
#: -> (gradient ops, blob -> gradient)``; see :func:`register_subnet_pass`.
SubnetPass = Callable[..., tuple[list[OperatorDef], dict[str, GradValue]]]


@dataclass
class OpEntry:
    """Everything the registry knows about one op type.

    Attributes:
        op_type: Caffe2 op type name.
        status: gradient status (see :class:`GradientStatus`).
        schema: arity / in-place schema checked before a maker runs.
        maker: gradient maker (status ``GRADIENT``).
        raw_maker: if true the maker builds its ops fully itself (Python-registered makers
            such as Do/If/While): no schema check, no copying of device option, engine or
            args, no ``is_gradient_op`` marking.
        copy_arguments, copy_device_option, copy_engine: Caffe2's ``CopyArguments`` etc.
        kernel: NumPy kernel ``kernel(op, inputs) -> list[np.ndarray]``.
        doc: one line for ``GET /v1/operators``.
        identity: predicate telling that, for this op, output 0 equals input 0 value for
            value (``Dropout`` with ``is_test``, ``StopGradient``...). Run in place, such an
            op leaves the blob's value unchanged, so the backward pass does not treat the
            earlier version as overwritten.
        native: executor-native runtime (control ops), run instead of a kernel.
        rename_output, rename_input: how to rename an output or an input blob of an emitted
            gradient op of this type whose sub-nets read or write it (control ops); ``None``
            = plain ops, whose ``output``/``input`` fields are renamed directly.
    """

    op_type: str
    status: GradientStatus = GradientStatus.NOT_IMPLEMENTED
    schema: OpSchema = field(default_factory=OpSchema)
    maker: MakerFn | None = None
    raw_maker: bool = False
    copy_arguments: bool = True
    copy_device_option: bool = True
    copy_engine: bool = True
    kernel: KernelFn | None = None
    doc: str = ""
    identity: Callable[[OperatorDef], bool] | None = None
    native: NativeFn | None = None
    rename_output: OutputRenamer | None = None
    rename_input: InputRenamer | None = None


REGISTRY: dict[str, OpEntry] = {}


def _entry(op_type: str) -> OpEntry:
    e = REGISTRY.get(op_type)
    if e is None:
        e = OpEntry(op_type)
        REGISTRY[op_type] = e
    return e


def register_op(
    op_type: str,
    op_schema: OpSchema | None = None,
    status: GradientStatus | None = None,
    doc: str = "",
) -> OpEntry:
    """Declare an op type's schema and (optionally) a gradient status without a maker."""
    e = _entry(op_type)
    if op_schema is not None:
        e.schema = op_schema
    if status is not None:
        e.status = status
    if doc:
        e.doc = doc
    return e


def register_gradient(
    op_type: str,
    *,
    op_schema: OpSchema | None = None,
    copy_arguments: bool = True,
    copy_device_option: bool = True,
    copy_engine: bool = True,
    raw: bool = False,
    doc: str = "",
) -> Callable[[MakerFn], MakerFn]:
    """Decorator: register ``fn(maker) -> list[OperatorDef]`` as ``op_type``'s gradient maker."""

    def deco(fn: MakerFn) -> MakerFn:
        if op_type in REGISTRY and REGISTRY[op_type].maker is not None:
            prior = REGISTRY[op_type].maker
            if getattr(prior, "__module__", None) != fn.__module__:  # a module may refine its own
                raise RuntimeError(
                    f"two gradient makers registered for {op_type}: "
                    f"{getattr(prior, '__module__', '?')} and {fn.__module__}"
                )
        e = register_op(op_type, op_schema, GradientStatus.GRADIENT, doc)
        e.maker = fn
        e.raw_maker = raw
        e.copy_arguments = copy_arguments
        e.copy_device_option = copy_device_option
        e.copy_engine = copy_engine
        return fn

    return deco


def register_kernel(
    op_type: str, *, gradient_op: bool = False, op_schema: OpSchema | None = None
) -> Callable[[KernelFn], KernelFn]:
    """Decorator: register a NumPy kernel ``fn(op, inputs) -> list[np.ndarray]`` for ``op_type``.

    ``gradient_op=True`` marks a gradient op type (status ``GRADIENT_OP`` unless it also has a
    forward status of its own, e.g. ``Mul`` used as a gradient op).
    """

    def deco(fn: KernelFn) -> KernelFn:
        e = _entry(op_type)
        if e.kernel is not None:
            raise RuntimeError(
                f"two kernels registered for {op_type}: {e.kernel.__module__} and {fn.__module__}"
            )
        if op_schema is not None:
            e.schema = op_schema
        if gradient_op and e.maker is None and e.status == GradientStatus.NOT_IMPLEMENTED:
            e.status = GradientStatus.GRADIENT_OP
        e.kernel = fn
        return fn

    return deco


def register_identity(op_type: str, predicate: Callable[[OperatorDef], bool]) -> None:
    """Declare when ``op_type``'s output 0 is value-identical to its input 0 (see OpEntry)."""
    _entry(op_type).identity = predicate


def is_identity(op: OperatorDef, op_type: str | None = None) -> bool:
    """Whether ``op`` copies input 0 to output 0 unchanged (see :func:`register_identity`).

    ``op_type``: ``op.type`` when the caller already read it.
    """
    e = REGISTRY.get(op.type if op_type is None else op_type)
    return e is not None and e.identity is not None and e.identity(op)


def register_native(op_type: str, fn: NativeFn) -> None:
    """Declare ``fn`` the executor-native runtime of ``op_type`` (run instead of a kernel)."""
    _entry(op_type).native = fn


def get_native(op_type: str) -> NativeFn | None:
    """Executor-native runtime of ``op_type``, or ``None`` (ops with kernels, unknown types)."""
    e = REGISTRY.get(op_type)
    return e.native if e is not None else None


def register_renamers(op_type: str, *, output: OutputRenamer, input: InputRenamer) -> None:
    """Declare how the backward pass renames outputs / inputs of gradient ops of ``op_type``.

    Gradient ``Do``/``If``/``While`` ops read and write outer blobs from inside their
    sub-nets, so renaming the op's own field is not enough (spec §3.6; issue 7, B and C).
    """
    e = _entry(op_type)
    e.rename_output = output
    e.rename_input = input


_SUBNET_PASS: list[SubnetPass] = []


def register_subnet_pass(fn: SubnetPass) -> None:
    """Declare the backward pass the control-op makers run over their sub-nets.

    :mod:`core.ir.backward` registers itself when imported (every way into gradient
    generation imports it), so the makers never import the pass they are called from.
    """
    _SUBNET_PASS[:] = [fn]


def subnet_pass() -> SubnetPass:
    """The registered backward pass (see :func:`register_subnet_pass`).

    Raises:
        RuntimeError: no pass is registered (``core.ir.backward`` was never imported).
    """
    if not _SUBNET_PASS:
        raise RuntimeError("no backward pass is registered: import core.ir.backward first")
    return _SUBNET_PASS[0]


_RETURN_NET_HOOKS: list[Callable[[Any], None]] = []


def register_return_net_hook(fn: Callable[[Any], None]) -> None:
    """Declare ``fn(net)``, run on the forward + gradient NetDef that ``return_net`` gives.

    ``RecurrentNetwork`` uses it to put the generated ``backward_step_net`` on the forward op
    (Caffe2 keeps one step workspace per time step only then; issue 9).
    """
    if fn not in _RETURN_NET_HOOKS:
        _RETURN_NET_HOOKS.append(fn)


def return_net_hooks() -> list[Callable[[Any], None]]:
    """The hooks of :func:`register_return_net_hook`, in registration order."""
    return list(_RETURN_NET_HOOKS)


def with_gradient_ops(net: Any, grad_ops: Sequence[OperatorDef]) -> Any:
    """A copy of NetDef ``net`` with ``grad_ops`` appended and the return-net hooks applied:
    the forward + gradient net that ``return_net`` answers, and that /v1/run and /v1/verify
    execute."""
    out = type(net)()
    out.CopyFrom(net)
    out.op.extend(grad_ops)
    for hook in _RETURN_NET_HOOKS:
        hook(out)
    return out


def get_entry(op_type: str) -> OpEntry | None:
    """Registry entry of ``op_type``, or ``None`` when the type is unknown."""
    return REGISTRY.get(op_type)


def get_kernel(op_type: str) -> KernelFn | None:
    """NumPy kernel for ``op_type``, or ``None``."""
    e = REGISTRY.get(op_type)
    return e.kernel if e is not None else None


def get_gradient_for_op(
    op: OperatorDef, g_output: Sequence[GradValue], env: Any = None
) -> tuple[list[OperatorDef], list[GradValue]]:
    """Gradient ops and ``g_input`` of one forward op; see :func:`gradient_for_op_read`."""
    ops, g_input, _, _, _ = gradient_for_op_read(op, g_output, env)
    return ops, g_input


def gradient_for_op_read(
    op: OperatorDef,
    g_output: Sequence[GradValue],
    env: Any = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    op_type: str | None = None,
) -> tuple[list[OperatorDef], list[GradValue], list[int], list[list[str]], list[list[str]]]:
    """Gradient ops and ``g_input`` of one forward op (Caffe2 ``GetGradientForOp``, spec §2.2-2.3).

    Args:
        op: forward OperatorDef.
        g_output: one entry per ``op.output``: ``None``, a dense name or a GradientSlice.
        env: generation environment passed to the maker (``core.ir.env.GenEnv``).
        input_names, output_names, op_type: ``op.input`` / ``op.output`` as sequences and
            ``op.type`` when the caller already has them (the backward pass does); read
            from ``op`` otherwise.

    Returns:
        ``(grad_ops, g_input, input_reads, op_ins, op_outs)``: ``len(g_input) ==
        len(op.input)``; ``input_reads`` lists the forward input positions whose values the
        gradient ops read (the maker asked for ``I(i)``); ``op_ins``/``op_outs``: each
        gradient op's input/output names as read once after the maker (a read of a protobuf
        field builds new strings), valid until something renames them.

    Raises:
        GradientNotDefinedError: no maker, ``SHOULD_NOT_DIFFERENTIATE`` or ``NOT_IMPLEMENTED``.
        InvalidNetError: the op fails its schema check (message contains "schema").
        GradientError: the maker itself failed (e.g. a required output gradient is missing).
    """
    if op_type is None:
        op_type = op.type
    e = REGISTRY.get(op_type)
    if input_names is None:
        input_names = op.input[:]
    if output_names is None:
        output_names = op.output[:]
    if e is None or e.status is not _GRADIENT or e.maker is None:
        _raise_no_gradient(op, e)
        return [], [None] * len(input_names), [], [], []  # NO_GRADIENT
    if len(g_output) != len(output_names):
        raise GradientError(
            f"g_output has {len(g_output)} entries but {op.type} has {len(output_names)} outputs"
        )
    maker = e.maker
    if e.raw_maker:
        m = GradientMaker(op, g_output, env, input_names, output_names, op_type)
        ops = maker(m)
        g_input, input_reads = m.g_input, m.input_reads
    else:
        sch = e.schema
        n_in, n_out = len(input_names), len(output_names)
        allow = sch.allow_inplace
        # (verify's common passing cases inlined: arity within bounds, and any in-place
        # pairing allowed, or a single output that is no input or is the allowed x -> x)
        if (n_in < sch.min_inputs or n_out < sch.min_outputs or 0 <= sch.max_inputs < n_in
                or 0 <= sch.max_outputs < n_out or (allow is not True and (
                    n_out != 1 or (output_names[0] in input_names and (
                        n_in != 1 or allow is False or _SAME_00 not in allow))))):
            reason = sch.verify(op, input_names, output_names)
            if reason is not None:
                raise InvalidNetError(
                    f"(GradientMaker) Operator def did not pass schema checking: {reason}"
                )
        tmpl = maker if type(maker) is GradTemplate else None
        built = tmpl.build(op_type, g_output, input_names, output_names) if tmpl else None
        if tmpl is not None and built is not None:  # a one-line maker, made directly
            gop, g_input, input_reads, ins, outs = built
            ops = [gop]
            if ((e.copy_device_option and op.HasField("device_option"))
                    or (e.copy_engine and op.HasField("engine"))
                    or (e.copy_arguments and len(op.arg))):
                _mark_gradient_ops(op, e, ops)
            else:  # (its common case, inlined: only the mark)
                gop.is_gradient_op = True
            if env is not None and len(g_output) != tmpl.go_count:
                warn_dropped(op_type, g_output, output_names, [ins], g_input, env)
            # (g_input has one dense name or None per input: the checks below hold)
            return ops, g_input, input_reads, [ins], [outs]
        m = GradientMaker(op, g_output, env, input_names, output_names, op_type)
        ops = maker(m)
        g_input, input_reads = m.g_input, m.input_reads
        _mark_gradient_ops(op, e, ops, m.read_args)
    op_ins: list[list[str]] = []
    op_outs: list[list[str]] = []
    for gop in ops:
        op_ins.append(gop.input[:])
        op_outs.append(gop.output[:])
    if env is not None:  # (the status is GRADIENT here)
        warn_dropped(op_type, g_output, output_names, op_ins, g_input, env)
    if len(g_input) != len(input_names):
        raise GradientError(
            f"gradient of {op.type} returned {len(g_input)} input gradients for "
            f"{len(input_names)} inputs"
        )
    for gi in g_input:
        if isinstance(gi, GradientSlice):
            if not gi.indices or not gi.values:
                raise GradientError(
                    "For sparse gradient, one should set both indices and values. "
                    f"Currently we have: ({gi.indices}, {gi.values})."
                )
            if env is not None:
                env.slices = True
    return ops, g_input, input_reads, op_ins, op_outs


def _mark_gradient_ops(
    op: OperatorDef, e: OpEntry, ops: list[OperatorDef], read_args: list[Argument] | None = None
) -> None:
    """Mark a maker's ops as gradient ops and copy the forward op's device option, engine
    and arguments into them, as the entry asks (Caffe2 ``GradientMakerBase::Get``).

    ``read_args``: ``op.arg[:]`` when the maker already read it (``GradientMaker.read_args``).
    """
    device = op.device_option if e.copy_device_option and op.HasField("device_option") else None
    engine = op.engine if e.copy_engine and op.HasField("engine") else None
    # (a list: extending from a list of the Argument messages is about twice as fast as
    # from the repeated field itself)
    args = None if not e.copy_arguments else (read_args or None) if read_args is not None else (
        op.arg[:] if len(op.arg) else None)
    if device is None and engine is None and args is None:  # the common case: only the mark
        for g in ops:
            g.is_gradient_op = True
        return
    for g in ops:
        g.is_gradient_op = True
        if device is not None:
            g.device_option.CopyFrom(device)
        if engine is not None:
            g.engine = engine
        if args is not None:
            g.arg.extend(args)


def _raise_no_gradient(op: OperatorDef, e: OpEntry | None) -> None:
    """Raise the error for a type without a usable maker; return for ``NO_GRADIENT``.

    An unknown type (code ``unknown_operator``) is told apart from a Caffe2 op netgrad does
    not differentiate yet (code ``not_implemented_in_netgrad``); the first names the nearest
    known types and points to ``GET /v1/operators``.
    """
    if e is not None and e.status is GradientStatus.NO_GRADIENT:
        return
    if e is None and not op.type:
        raise GradientNotDefinedError.at(
            "the op has no type (`type` is empty or missing); give every op its Caffe2 "
            "type, e.g. \"Relu\"; GET /v1/operators lists every known type.",
            code="unknown_operator",
        )
    if e is None:
        near = nearest_op_types(op.type)
        hint = f" Did you mean {', '.join(near)}?" if near else ""
        raise GradientNotDefinedError.at(
            f"Unknown operator type '{op.type}': neither a Caffe2 operator nor one netgrad "
            f"registers.{hint} GET /v1/operators lists every known type.",
            code="unknown_operator",
        )
    if e.status is GradientStatus.NOT_IMPLEMENTED_IN_NETGRAD:
        raise GradientNotDefinedError.at(
            f"Operator {op.type} is a Caffe2 operator netgrad does not differentiate yet "
            "(Caffe2 has a gradient for it); GET /v1/operators?status=gradient lists the "
            "types netgrad differentiates.",
            code="not_implemented_in_netgrad",
        )
    if e.status in (GradientStatus.GRADIENT_OP, GradientStatus.GRADIENT):
        raise GradientNotDefinedError(f"Gradient maker for operator {op.type} not implemented.")
    if e.status is GradientStatus.SHOULD_NOT_DIFFERENTIATE:
        raise GradientNotDefinedError(f"One should not call gradient for operator {op.type}.")
    raise GradientNotDefinedError(
        f"Operator {op.type} should have a gradient but is not implemented yet."
    )


def nearest_op_types(op_type: str, n: int = 3) -> list[str]:
    """Up to ``n`` registered op types closest to ``op_type`` (for "did you mean").

    A case-insensitive exact match comes first, then the Caffe2 name of another framework's
    op (``FullyConnected``, ``BatchNorm2d``), then :func:`difflib.get_close_matches`'s
    candidates ranked by edit distance (a swap of two neighbours counts half), difflib's
    ratio breaking ties (``Reluu``: ``Relu`` before ``ReluN``). Only called on the error path.
    """
    import difflib

    from core.typos import OTHER_NAMES, edit_distance

    names = sorted(REGISTRY)
    low = op_type.lower()
    folded = [t for t in names if t.lower() == low and t != op_type]
    alias = OTHER_NAMES.get(low)
    other = [alias] if alias in REGISTRY else []
    close = difflib.get_close_matches(op_type, names, n=max(n, 10), cutoff=0.6)
    ratio = {t: difflib.SequenceMatcher(None, op_type, t).ratio() for t in close}
    if len(op_type) <= 64:  # (quadratic: a typo is short)
        close.sort(key=lambda t: (edit_distance(low, t.lower()), -ratio[t], t))
    return list(dict.fromkeys(folded + other + close))[:n]


def known_op_types() -> list[str]:
    """All registered op types, sorted."""
    return sorted(REGISTRY)


def kernel_inputs_repr(inputs: Sequence[np.ndarray]) -> str:
    """Short ``dtype[shape]`` description of kernel inputs, for error messages."""
    return ", ".join(f"{a.dtype}{list(a.shape)}" for a in inputs)
