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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from api_schemas import caffe2_pb2
from core.errors import GradientError, GradientNotDefinedError, InvalidNetError
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


@dataclass(frozen=True)
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
        if self.allow_inplace is True or set(ins).isdisjoint(outs):
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


class GradientMaker:
    """What a gradient maker sees: the forward op, ``g_output`` and Caffe2's helpers.

    Mirrors ``GradientMakerBase`` (spec §2.3): ``I``/``O`` name forward inputs/outputs,
    ``GO`` reads output gradients, ``GI`` names (and records) input gradients, and
    ``set_dense``/``set_sparse`` record pass-through gradients without an op.

    Attributes:
        op: the forward OperatorDef (read-only by convention).
        g_output: one gradient value per forward output.
        g_input: one gradient value per forward input, filled by the maker.
        env: the generation environment (limits, diagnostics, sub-net path); see
            :class:`core.ir.env.GenEnv`. Control-flow makers recurse through it.
        input_names, output_names: ``op.input`` / ``op.output`` as lists, read once (every
            read of a protobuf repeated field builds new Python strings).
    """

    __slots__ = ("op", "g_output", "g_input", "env", "input_reads", "input_names", "output_names")

    def __init__(
        self,
        op: OperatorDef,
        g_output: Sequence[GradValue],
        env: Any,
        input_names: list[str] | None = None,
        output_names: list[str] | None = None,
    ) -> None:
        self.op = op
        self.input_names = op.input[:] if input_names is None else input_names
        self.output_names = op.output[:] if output_names is None else output_names
        self.g_output: Sequence[GradValue] = g_output
        #: forward input positions whose *value* the gradient ops read (via ``I``)
        self.input_reads: list[int] = []
        self.g_input: list[GradValue] = [None] * len(self.input_names)
        self.env = env

    # -- names -----------------------------------------------------------------
    def I(self, i: int) -> str:  # noqa: E743 - Caffe2's name
        """Name of forward input ``i``; records that the gradient reads its input value.

        For an in-place op the same name is also an output, and the backward pass must know
        which version the gradient op wants (see ``core.ir.backward``).
        """
        self.input_reads.append(i)
        return self.input_names[i]

    def I_shape(self, i: int) -> str:  # noqa: N802 - Caffe2-style helper name
        """Name of forward input ``i`` for a gradient op that reads only its shape.

        Unlike :meth:`I`, this does not ask the backward pass for the input's *value*: an
        in-place op (``Add(x, b -> x)``) keeps the shape, so its later version will do, as
        upstream accepts.
        """
        return self.input_names[i]

    def O(self, i: int) -> str:  # noqa: E743 - Caffe2's name
        """Name of forward output ``i``."""
        return self.output_names[i]

    def has_go(self, i: int) -> bool:
        """Whether output ``i`` has any gradient (Caffe2 ``GradOut(i).IsEmpty()`` negated)."""
        return i < len(self.g_output) and self.g_output[i] is not None

    def GO(self, i: int) -> str:
        """Dense gradient of output ``i``.

        Raises:
            GradientError: the gradient is missing or sparse.
        """
        g = self.g_output[i] if i < len(self.g_output) else None
        if g is None:
            raise GradientError(f"Gradient of output {self.O(i)} is not provided!")
        if isinstance(g, GradientSlice):
            raise GradientError(f"Gradient of output {self.O(i)} is sparse (expected dense).")
        return g

    def GO_I(self, i: int) -> str:
        """Indices blob of a sparse output gradient."""
        return self._go_sparse(i).indices

    def GO_V(self, i: int) -> str:
        """Values blob of a sparse output gradient."""
        return self._go_sparse(i).values

    def _go_sparse(self, i: int) -> GradientSlice:
        g = self.g_output[i] if i < len(self.g_output) else None
        if not isinstance(g, GradientSlice):
            raise GradientError(f"Gradient of output {self.O(i)} is not sparse.")
        return g

    def GI(self, i: int) -> str:
        """Record and return the dense gradient name ``<input>_grad`` of input ``i``.

        When the op reads the same blob at several positions (``Mul(w, w)``), each later
        position gets its own name ``_<input>_grad_input_<i>``: a maker that uses one input
        gradient as scratch (tensor-exponent Pow) would otherwise overwrite the other, and
        the backward pass sums the per-position gradients anyway (spec §2.7). Upstream gave
        both positions one name.
        """
        base = self.input_names[i]
        first = self.input_names.index(base)
        name = base + "_grad" if first == i else f"_{base}_grad_input_{i}"
        self.set_dense(i, name)
        return name

    def set_dense(self, i: int, name: str) -> None:
        """Record a dense gradient name for input ``i`` (pass-through when no op writes it)."""
        if isinstance(self.g_input[i], GradientSlice):
            raise GradientError(f"Input {self.input_names[i]} already set to sparse.")
        self.g_input[i] = name

    def set_sparse(self, i: int, indices: str, values: str) -> None:
        """Record a sparse gradient ``GradientSlice(indices, values)`` for input ``i``."""
        if isinstance(self.g_input[i], str):
            raise GradientError(f"Input {self.input_names[i]} already set to dense.")
        self.g_input[i] = GradientSlice(indices, values)

    # -- arguments -------------------------------------------------------------
    def arg(self, name: str) -> Argument | None:
        """First forward argument called ``name``, or ``None``."""
        return find_arg(self.op, name)

    def arg_i(self, name: str, default: int) -> int:
        """Integer argument ``name`` (field ``i``), or ``default``."""
        a = self.arg(name)
        return int(a.i) if a is not None and a.HasField("i") else default

    def arg_f(self, name: str, default: float) -> float:
        """Float argument ``name`` (``f``, or ``i`` widened), or ``default``."""
        a = self.arg(name)
        if a is None:
            return default
        if a.HasField("f"):
            return float(a.f)
        if a.HasField("i"):
            return float(a.i)
        return default

    # -- building ops ----------------------------------------------------------
    def make_op(
        self,
        op_type: str,
        inputs: Sequence[str],
        outputs: Sequence[str],
        args: Sequence[Argument] = (),
        name: str = "",
    ) -> OperatorDef:
        """A new gradient OperatorDef, built like C++ ``CreateOperatorDef`` (name present)."""
        return make_op(op_type, inputs, outputs, args, name=name)


def make_op(
    op_type: str,
    inputs: Sequence[str],
    outputs: Sequence[str],
    args: Sequence[Argument] = (),
    name: str | None = "",
) -> OperatorDef:
    """Build an OperatorDef. ``name=None`` leaves ``name`` unset (a raw ``OperatorDef()``)."""
    op = OperatorDef()
    op.type = op_type
    if name is not None:
        op.name = name
    op.input.extend(inputs)
    op.output.extend(outputs)
    if args:
        op.arg.extend(args)
    return op


def make_arg(name: str, value: Any) -> Argument:
    """Build an Argument with Caffe2's ``MakeArgument`` typing rules (spec §1.4).

    float -> ``f``; int/bool -> ``i``; str/bytes -> ``s``; NetDef -> ``n``; a list of floats ->
    ``floats``, of ints -> ``ints``, of str/bytes -> ``strings``, of NetDefs -> ``nets``.

    Raises:
        TypeError: the value has no Argument encoding.
    """
    a = Argument()
    a.name = name
    if isinstance(value, bool | int):
        a.i = int(value)
    elif isinstance(value, float):
        a.f = value
    elif isinstance(value, str):
        a.s = value.encode("utf-8")
    elif isinstance(value, bytes):
        a.s = value
    elif isinstance(value, caffe2_pb2.NetDef):
        a.n.CopyFrom(value)
    elif isinstance(value, list | tuple):
        items = list(value)
        if all(isinstance(v, float) for v in items):
            a.floats.extend(items)
        elif all(isinstance(v, bool | int) for v in items):
            a.ints.extend(int(v) for v in items)
        elif all(isinstance(v, str | bytes) for v in items):
            a.strings.extend(v.encode("utf-8") if isinstance(v, str) else v for v in items)
        elif all(isinstance(v, caffe2_pb2.NetDef) for v in items):
            a.nets.extend(items)
        else:
            raise TypeError(f"argument {name}: mixed list has no Argument encoding")
    else:
        raise TypeError(f"argument {name}: {type(value).__name__} has no Argument encoding")
    return a


def find_arg(op: OperatorDef | caffe2_pb2.NetDef, name: str) -> Argument | None:
    """First argument of ``op`` named ``name`` (Caffe2 ``ArgumentHelper``), or ``None``."""
    for a in op.arg:
        if a.name == name:
            return a
    return None


MakerFn = Callable[[GradientMaker], list[OperatorDef]]
KernelFn = Callable[..., Any]


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


def is_identity(op: OperatorDef) -> bool:
    """Whether ``op`` copies input 0 to output 0 unchanged (see :func:`register_identity`)."""
    e = REGISTRY.get(op.type)
    return e is not None and e.identity is not None and e.identity(op)


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
    """Gradient ops and ``g_input`` of one forward op; see :func:`gradient_for_op_detailed`."""
    ops, g_input, _ = gradient_for_op_detailed(op, g_output, env)
    return ops, g_input


def gradient_for_op_detailed(
    op: OperatorDef,
    g_output: Sequence[GradValue],
    env: Any = None,
    input_names: list[str] | None = None,
    output_names: list[str] | None = None,
) -> tuple[list[OperatorDef], list[GradValue], list[int]]:
    """Gradient ops and ``g_input`` of one forward op (Caffe2 ``GetGradientForOp``, spec §2.2-2.3).

    Args:
        op: forward OperatorDef.
        g_output: one entry per ``op.output``: ``None``, a dense name or a GradientSlice.
        env: generation environment passed to the maker (``core.ir.env.GenEnv``).
        input_names, output_names: ``op.input`` / ``op.output`` as lists when the caller
            already has them (the backward pass does); read from ``op`` otherwise.

    Returns:
        ``(grad_ops, g_input, input_reads)``: ``len(g_input) == len(op.input)``;
        ``input_reads`` lists the forward input positions whose values the gradient ops
        read (the maker asked for ``I(i)``).

    Raises:
        GradientNotDefinedError: no maker, ``SHOULD_NOT_DIFFERENTIATE`` or ``NOT_IMPLEMENTED``.
        InvalidNetError: the op fails its schema check (message contains "schema").
        GradientError: the maker itself failed (e.g. a required output gradient is missing).
    """
    e = REGISTRY.get(op.type)
    if input_names is None:
        input_names = op.input[:]
    if output_names is None:
        output_names = op.output[:]
    if e is None or e.status is not GradientStatus.GRADIENT or e.maker is None:
        _raise_no_gradient(op, e)
        return [], [None] * len(input_names), []  # NO_GRADIENT
    if len(g_output) != len(output_names):
        raise GradientError(
            f"g_output has {len(g_output)} entries but {op.type} has {len(output_names)} outputs"
        )
    m = GradientMaker(op, g_output, env, input_names, output_names)
    if e.raw_maker:
        ops = e.maker(m)
    else:
        reason = e.schema.verify(op, input_names, output_names)
        if reason is not None:
            raise InvalidNetError(
                f"(GradientMaker) Operator def did not pass schema checking: {reason}"
            )
        ops = e.maker(m)
        device = op.device_option if e.copy_device_option and op.HasField("device_option") else None
        engine = op.engine if e.copy_engine and op.HasField("engine") else None
        args = op.arg if e.copy_arguments and len(op.arg) else None
        for g in ops:
            g.is_gradient_op = True
            if device is not None:
                g.device_option.CopyFrom(device)
            if engine is not None:
                g.engine = engine
            if args is not None:
                g.arg.extend(args)
    g_input = m.g_input
    if len(g_input) != len(input_names):
        raise GradientError(
            f"gradient of {op.type} returned {len(g_input)} input gradients for "
            f"{len(input_names)} inputs"
        )
    for gi in g_input:
        if isinstance(gi, GradientSlice) and (not gi.indices or not gi.values):
            raise GradientError(
                "For sparse gradient, one should set both indices and values. "
                f"Currently we have: ({gi.indices}, {gi.values})."
            )
    return ops, g_input, m.input_reads


def _raise_no_gradient(op: OperatorDef, e: OpEntry | None) -> None:
    """Raise the error for a type without a usable maker; return for ``NO_GRADIENT``."""
    if e is not None and e.status is GradientStatus.NO_GRADIENT:
        return
    if e is None or e.status in (GradientStatus.GRADIENT_OP, GradientStatus.GRADIENT):
        raise GradientNotDefinedError(f"Gradient maker for operator {op.type} not implemented.")
    if e.status is GradientStatus.SHOULD_NOT_DIFFERENTIATE:
        raise GradientNotDefinedError(f"One should not call gradient for operator {op.type}.")
    raise GradientNotDefinedError(
        f"Operator {op.type} should have a gradient but is not implemented yet."
    )


def known_op_types() -> list[str]:
    """All registered op types, sorted."""
    return sorted(REGISTRY)


def kernel_inputs_repr(inputs: Sequence[np.ndarray]) -> str:
    """Short ``dtype[shape]`` description of kernel inputs, for error messages."""
    return ", ".join(f"{a.dtype}{list(a.shape)}" for a in inputs)
