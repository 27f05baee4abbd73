"""What a gradient maker sees, and the OperatorDef / Argument builders makers use.

Source: Caffe2 ``GradientMakerBase`` (``operator_gradient.h``: ``I``, ``O``, ``GO``, ``GI``,
``SetDense``, ``SetSparse``), ``CreateOperatorDef`` and ``MakeArgument`` (spec §1.4, §2.3).
:mod:`core.registry` runs the makers it holds with a :class:`GradientMaker` and re-exports
these names, so op modules keep importing them from there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from api_schemas import caffe2_pb2
from core.errors import GradientError, InvalidNetError
from core.types import Diagnostic, GradientSlice, GradValue, grad_names

OperatorDef = caffe2_pb2.OperatorDef
Argument = caffe2_pb2.Argument


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
        input_names, output_names, op_type: ``op.input`` / ``op.output`` as sequences and
            ``op.type``, read once (every read of a protobuf field builds new Python strings).
    """

    __slots__ = (
        "op", "op_type", "g_output", "g_input", "env", "input_reads", "input_names",
        "output_names", "_args",
    )

    def __init__(
        self,
        op: OperatorDef,
        g_output: Sequence[GradValue],
        env: Any,
        input_names: Sequence[str] | None = None,
        output_names: Sequence[str] | None = None,
        op_type: str | None = None,
    ) -> None:
        self.op = op
        self.op_type = op.type if op_type is None else op_type
        self.input_names = op.input[:] if input_names is None else input_names
        self.output_names = op.output[:] if output_names is None else output_names
        self.g_output: Sequence[GradValue] = g_output
        #: forward input positions whose *value* the gradient ops read (via ``I``)
        self.input_reads: list[int] = []
        self.g_input: list[GradValue] = [None] * len(self.input_names)
        self.env = env
        self._args: list[Argument] | None = None

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
        """Name of forward output ``i``.

        Records the read as position ``len(input_names) + i`` of ``input_reads`` when the
        output is in place (also an input): the backward pass then knows the gradient reads
        both values of that name (see ``core.ir.versions``).
        """
        name = self.output_names[i]
        if name in self.input_names:
            self.input_reads.append(len(self.input_names) + i)
        return name

    def has_go(self, i: int) -> bool:
        """Whether output ``i`` has any gradient (Caffe2 ``GradOut(i).IsEmpty()`` negated)."""
        return i < len(self.g_output) and self.g_output[i] is not None

    def refuse_output_gradients(self, positions: Sequence[int], what: str) -> None:
        """Refuse a gradient reaching outputs ``positions``, which Caffe2's gradient ignores.

        For real-valued outputs that depend on the inputs (normalisation statistics, an
        LRN's scale, a loss op's probabilities): dropping their gradient would make the
        input gradients wrong, so it is a 4xx instead of a ``dropped_output_gradient``
        warning (review f1, finding 2). Index/mask outputs keep the warning.

        Raises:
            GradientError (code ``output_gradient_unsupported``): one of those outputs has
                a gradient; the backward pass adds the op index, type and sub-net path.
        """
        hit = [self.output_names[i] for i in positions if self.has_go(i)]
        if hit:
            names = ", ".join(f"'{n}'" for n in hit)
            raise GradientError.at(
                f"{self.op_type}'s gradient (as Caffe2's) does not take a gradient for its "
                f"{what} output(s) {names}, but one reaches them: it would be dropped and the "
                "input gradients would be wrong. Compute that value with separate ops "
                "(e.g. ReduceMean) for the use that needs its gradient.",
                blobs=hit,
                code="output_gradient_unsupported",
            )

    def GO(self, i: int) -> str:
        """Dense gradient of output ``i``.

        A sparse gradient (a GradientSlice: a later ``Gather`` or ``SparseLengths*`` read
        the output) is refused, as Caffe2 does; with ``densify`` the backward pass then makes
        it dense and asks again (:func:`core.ir.densify.densify_outputs`).

        Raises:
            GradientError: the gradient is missing, or sparse (code
                ``sparse_output_gradient``).
        """
        g = self.g_output[i] if i < len(self.g_output) else None
        if g is None:
            raise GradientError(f"Gradient of output {self.O(i)} is not provided!")
        if isinstance(g, GradientSlice):
            out = self.O(i)
            raise GradientError.at(
                f"Gradient of output {out} is sparse (expected dense): it is a GradientSlice "
                "(from a sparse reader such as Gather or SparseLengths*, or a sparse seed in "
                f"ys), and {self.op_type}'s gradient takes only a dense one. Ask for "
                '"densify": true to make it dense with SparseToDense, or let the sparse '
                f"reader read EnsureDense({out}) instead.",
                blobs=(out,),
                code="sparse_output_gradient",
            )
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
        names = self.input_names
        base = names[i]
        name = base + "_grad" if names.index(base) == i else f"_{base}_grad_input_{i}"
        if isinstance(self.g_input[i], GradientSlice):  # set_dense, inlined: a hot path
            raise GradientError(f"Input {base} already set to sparse.")
        self.g_input[i] = name
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
    @property
    def read_args(self) -> list[Argument] | None:
        """``op.arg[:]`` if :meth:`arg` has read it (the registry reuses it), else ``None``."""
        return self._args

    def arg(self, name: str) -> Argument | None:
        """First forward argument called ``name``, or ``None``."""
        args = self._args
        if args is None:  # the Argument messages, read once (a list scans ~2x faster)
            args = self._args = self.op.arg[:]
        for a in args:
            if a.name == name:
                return a
        return None

    def arg_i(self, name: str, default: int) -> int:
        """Integer argument ``name`` (field ``i``), or ``default`` when absent.

        Read as the kernels read it (:func:`core.ops._args.get_int`) and as Caffe2's
        ``GetSingleArgument<int>`` does (spec §1.4): a value in another field is refused,
        never read as the default (adversarial review, stop 34: ``axis`` given as
        ``f = 1`` ran forward on axis 1 and got the gradient of axis 0).

        Raises:
            InvalidNetError: code ``invalid_argument``, the argument holds no integer.
        """
        a = self.arg(name)
        if a is None:
            return default
        if a.HasField("i"):
            return int(a.i)
        raise bad_argument(self.op_type, name, a, "an integer (field i)")

    def arg_f(self, name: str, default: float) -> float:
        """Float argument ``name`` (``f``, or ``i`` widened), or ``default`` when absent.

        Raises:
            InvalidNetError: code ``invalid_argument``, the argument holds no number.
        """
        a = self.arg(name)
        if a is None:
            return default
        if a.HasField("f"):
            return float(a.f)
        if a.HasField("i"):
            return float(a.i)
        raise bad_argument(self.op_type, name, a, "a number (field f)")

    def warn_no_gradient(self, inputs: Sequence[int], why: str, severity: str = "info"
                         ) -> None:
        """Say that forward inputs ``inputs`` (indices) get no gradient, and ``why`` (an
        argument turns it off, as in Caffe2: ``grad_on_weights``, ``is_learnable``...), so
        a missing gradient is never silent (review, stop 34). Code ``input_gradient_off``;
        ``severity`` ``"info"`` where that is the op's usual use (Detectron's frozen
        AffineChannel), ``"warning"`` where it is likely a slip."""
        names = [self.input_names[i] for i in inputs if i < len(self.input_names)]
        if names and self.env is not None:  # (None: a maker called on its own, no answer)
            shown = ", ".join(f"'{n}'" for n in names)
            self.env.warn("input_gradient_off", f"{self.op_type}: {shown} get no gradient: "
                          f"{why}", op_index=self.env.op_index, op_type=self.op_type,
                          blobs=names, severity=severity)

    # -- building ops ----------------------------------------------------------
    # ``m.make_op(type, inputs, outputs, args=(), name="")``: a new gradient OperatorDef,
    # built like C++ ``CreateOperatorDef`` (name present). The module function itself, not
    # a wrapper: one call per op on the hot path.
    make_op = staticmethod(make_op)


def field_kind(a: Argument) -> str:
    """The value an Argument holds, in words (``f = 1``, ``a string``, ``no value``)."""
    if a.HasField("f"):
        return f"f = {a.f:g}"
    if a.HasField("i"):
        return f"i = {a.i}"
    if a.HasField("s"):
        return "a string (s)"
    for field in ("ints", "floats", "strings", "nets", "tensors"):
        if len(getattr(a, field)):
            return f"a list ({field})"
    if a.HasField("n"):
        return "a net (n)"
    return "no value"


def bad_argument(op_type: str, name: str, a: Argument, want: str) -> InvalidNetError:
    """The problem of argument ``name`` of a ``op_type`` op holding no ``want`` (Caffe2:
    "Argument <name> does not have the right field"); the pass fills in where the op is."""
    msg = (f"{op_type}: argument '{name}' must be {want}, not {field_kind(a)}: Caffe2 refuses "
           f"it (\"Argument {name} does not have the right field\"), and netgrad will not "
           "guess which value was meant")
    return InvalidNetError(msg, [Diagnostic("error", "invalid_argument", msg)])


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


def _used(name: str, op_ins: Sequence[Sequence[str]], g_input: Sequence[GradValue]) -> bool:
    """Whether a gradient op reads ``name`` (``op_ins``: their input names) or an input
    gradient is (or holds) ``name``."""
    for ins in op_ins:
        if name in ins:
            return True
    for gi in g_input:
        if gi == name or (isinstance(gi, GradientSlice) and name in (gi.indices, gi.values)):
            return True
    return False


def warn_dropped(
    op_type: str,
    g_output: Sequence[GradValue],
    output_names: Sequence[str],
    op_ins: Sequence[Sequence[str]],
    g_input: Sequence[GradValue],
    env: Any,
) -> None:
    """Warn when a gradient reaching an output is not used by the op's gradient at all.

    ``op_ins``: the input names of each gradient op. Run by :mod:`core.registry` after a
    maker.

    Caffe2's makers ignore the gradients of some outputs (SpatialBN's running statistics,
    LRN's scale, index outputs such as Dropout's mask). A gradient that reaches such an
    output does not flow further; the answer says so instead of dropping it silently.
    """
    for g in g_output:  # a quick look first (a hot path): is any output gradient unread?
        if g is None or g in g_input:
            continue
        for ins in op_ins:
            if g in ins:
                break
        else:
            break
    else:
        return
    dropped = [
        out for out, g in zip(output_names, g_output, strict=False)
        if g is not None and not any(_used(n, op_ins, g_input) for n in grad_names(g))
    ]
    if dropped and hasattr(env, "warn"):
        env.warn(
            "dropped_output_gradient",
            f"{op_type}'s gradient does not use the gradient of output(s) "
            f"{', '.join(dropped)}: nothing flows back through them",
            op_index=getattr(env, "op_index", None),
            op_type=op_type,
            blobs=dropped,
        )
