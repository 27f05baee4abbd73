"""Gradient makers as data: one gradient op whose names are the forward op's, picked by position.

Source: Caffe2 ``GradientMakerBase`` makers of the form ``SingleGradientDef(type, "",
{I(0), O(0), GO(0)}, {GI(0)})`` (``operator_gradient.h``; spec §2.3). Most of Caffe2's makers
are that one line. :class:`GradTemplate` states it once, as data, and is itself the maker: run
with a :class:`core.maker.GradientMaker` it calls ``I``/``O``/``GO``/``GI`` and ``make_op`` in
the order the line reads, like a hand-written maker. The backward pass also asks it for the
same op directly (:meth:`GradTemplate.build`), without a maker object and without reading the
op's names back out of the protobuf: a hot path (issue 10, generation speed). ``build``
declines (returns ``None``) whenever the maker could end in an error, so every refusal keeps
the maker's wording; ``tests/core/test_template.py`` checks that both give the same answer.
"""

from __future__ import annotations

import linecache
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, final

from api_schemas import caffe2_pb2
from core.types import GradValue

if TYPE_CHECKING:
    from core.maker import GradientMaker

OperatorDef = caffe2_pb2.OperatorDef

#: What a template input names: a forward input's value (``I``), a forward output (``O``) or
#: an output's dense gradient (``GO``).
Kind = Literal["I", "O", "GO"]


class Ref(NamedTuple):
    """One input name of a template's gradient op: ``kind`` and the forward position."""

    kind: Kind
    pos: int


def I(i: int) -> Ref:  # noqa: E743, N802 - Caffe2's name
    """Forward input ``i`` (its value: the pass checks its version, see ``GradientMaker.I``)."""
    return Ref("I", i)


def O(i: int) -> Ref:  # noqa: E743, N802 - Caffe2's name
    """Forward output ``i``."""
    return Ref("O", i)


def GO(i: int) -> Ref:  # noqa: N802 - Caffe2's name
    """Dense gradient of forward output ``i``."""
    return Ref("GO", i)


_BuildResult = tuple[OperatorDef, list[GradValue], list[int], list[str], list[str]]


@final
class GradTemplate:
    """A maker that emits one op ``grad_type(inputs) -> [GI(i) for i in outputs]``.

    Args:
        grad_type: the gradient op's type; ``"{type}"`` in it stands for the forward op's
            type (``"{type}Gradient"`` serves ``MaxPool`` and ``AveragePool`` alike).
        inputs: the gradient op's inputs, in order (:func:`I`, :func:`O`, :func:`GO`).
        outputs: forward input positions whose gradient ``GI(i)`` the op writes, in order.
        module: the registering module (for the registry's duplicate check); the caller's
            by default.

    Calling it with a :class:`~core.maker.GradientMaker` is the maker (a one-element list of
    OperatorDefs). ``build(op_type, g_output, input_names, output_names)`` makes the same op
    without one, from the forward op's type and names (sequences of str) and one gradient
    per forward output. It returns ``(gradient op, g_input, input_reads, its input names,
    its output names)`` as :func:`core.registry.gradient_for_op_read` hands them on
    (unmarked: the caller sets ``is_gradient_op`` and copies what the entry asks), or
    ``None`` when the maker would raise (a missing or sparse output gradient, a position
    past the op's names), so that the maker runs and words the error. Its body is
    generated once per template (:func:`_compile`): straight-line code for this template's
    positions, the way :mod:`dataclasses` writes ``__init__``.
    """

    grad_type: str
    inputs: tuple[Ref, ...]
    outputs: tuple[int, ...]
    build: Callable[
        [str, Sequence[GradValue], Sequence[str], Sequence[str]], _BuildResult | None
    ]
    _prefix: str | None
    _suffix: str
    _n_in: int
    _n_out: int
    _go: tuple[int, ...]
    #: how many forward outputs' gradients the op reads (``reads_every_output_gradient``)
    go_count: int

    def __init__(
        self, grad_type: str, inputs: Sequence[Ref], outputs: Sequence[int],
        module: str | None = None,
    ) -> None:
        refs = tuple(Ref(*r) for r in inputs)
        outs = tuple(outputs)
        for r in refs:
            if r.kind not in ("I", "O", "GO") or type(r.pos) is not int or r.pos < 0:
                raise ValueError(f"template input {r!r}: want I(i), O(i) or GO(i), i >= 0")
        for i in outs:
            if type(i) is not int or i < 0:
                raise ValueError(f"template output {i!r}: want an input position >= 0")
        head, sep, tail = grad_type.partition("{type}")
        fields = {
            "grad_type": grad_type,
            "inputs": refs,
            "outputs": outs,
            "_prefix": head if sep else None,
            "_suffix": tail if sep else grad_type,
            # forward arity the refs need, and the outputs whose gradient the op reads
            "_n_in": 1 + max([r.pos for r in refs if r.kind == "I"] + list(outs), default=-1),
            "_n_out": 1 + max([r.pos for r in refs if r.kind != "I"], default=-1),
            "_go": tuple(dict.fromkeys(r.pos for r in refs if r.kind == "GO")),
            "go_count": len(dict.fromkeys(r.pos for r in refs if r.kind == "GO")),
            "__module__": module or sys._getframe(1).f_globals.get("__name__", __name__),
        }
        for name, value in fields.items():
            object.__setattr__(self, name, value)
        #: ``build(op_type, g_output, input_names, output_names)``: see the class docstring
        object.__setattr__(self, "build", _compile(self))

    def __setattr__(self, name: str, value: object) -> None:
        # Immutable: ``build`` is compiled from the fields once, and must stay their code.
        raise AttributeError(f"a GradTemplate is immutable (setting {name!r})")

    def __reduce__(self) -> tuple[type[GradTemplate], tuple[object, ...]]:
        return GradTemplate, (self.grad_type, self.inputs, self.outputs, self.__module__)

    def __repr__(self) -> str:
        ins = ", ".join(f"{r.kind}({r.pos})" for r in self.inputs)
        outs = ", ".join(f"GI({i})" for i in self.outputs)
        return f"GradTemplate({self.grad_type!r}, [{ins}], [{outs}])"

    def op_type_for(self, op_type: str) -> str:
        """The gradient op's type for a forward op of ``op_type``."""
        return self._suffix if self._prefix is None else self._prefix + op_type + self._suffix

    def reads_every_output_gradient(self, n_outputs: int) -> bool:
        """Whether the op reads the gradient of each of ``n_outputs`` forward outputs."""
        return self.go_count == n_outputs

    def __call__(self, m: GradientMaker) -> list[OperatorDef]:
        """The maker: ``m.make_op(type, [m.I(..)/m.O(..)/m.GO(..)], [m.GI(..)])``."""
        names = []
        for r in self.inputs:
            kind = r.kind
            names.append(m.I(r.pos) if kind == "I" else m.O(r.pos) if kind == "O"
                         else m.GO(r.pos))  # (kinds are checked in __init__)
        outs = [m.GI(i) for i in self.outputs]
        return [m.make_op(self.op_type_for(m.op_type), names, outs)]


def _compile(t: GradTemplate) -> Callable[..., Any]:
    """Straight-line code of ``t.build``: what ``t(maker)`` makes, in the same order.

    ``I(i)`` records ``i`` as read, ``O(i)`` records ``n_in + i`` when the output is also
    an input (in place), ``GO(i)`` must be a dense name (else ``None``: the maker raises),
    and ``GI(i)`` is ``<input>_grad``, or ``_<input>_grad_input_<i>`` for a later position
    of a repeated input (see ``GradientMaker.GI``).
    """
    lines = ["def build(op_type, g_output, input_names, output_names):",
             "    n_in = len(input_names)"]
    need = [f"n_in < {t._n_in}"] if t._n_in else []
    if t._n_out:
        need.append(f"len(output_names) < {t._n_out}")
    if t._go:
        need.append(f"len(g_output) < {max(t._go) + 1}")
    if need:
        lines.append(f"    if {' or '.join(need)}:")
        lines.append("        return None")
    for i in t._go:
        lines.append(f"    go{i} = g_output[{i}]")
        lines.append(f"    if type(go{i}) is not str:")
        lines.append("        return None")
    names: list[str] = []
    # the I(i) reads before any O(i) are a list literal; later ones are appended in order
    first_o = next((k for k, r in enumerate(t.inputs) if r.kind == "O"), len(t.inputs))
    lead = [str(r.pos) for r in t.inputs[:first_o] if r.kind == "I"]
    lines.append(f"    reads = [{', '.join(lead)}]")
    for k, (kind, i) in enumerate(t.inputs):
        if kind == "GO":
            names.append(f"go{i}")
        elif kind == "I":
            if k > first_o:
                lines.append(f"    reads.append({i})")
            names.append(f"input_names[{i}]")
        else:
            lines.append(f"    o{i} = output_names[{i}]")
            lines.append(f"    if o{i} in input_names:")
            lines.append(f"        reads.append(n_in + {i})")
            names.append(f"o{i}")
    lines.append(f"    names = [{', '.join(names)}]")
    lines.append("    g_input = [None] * n_in")
    outs: list[str] = []
    for k, i in enumerate(t.outputs):
        lines.append(f"    b = input_names[{i}]")
        if i == 0:
            lines.append(f"    gi{k} = g_input[0] = b + '_grad'")
        else:
            lines.append(
                f"    gi{k} = g_input[{i}] = (b + '_grad' if input_names.index(b) == {i} "
                f"else '_' + b + '_grad_input_{i}')"
            )
        outs.append(f"gi{k}")
    lines.append(f"    outs = [{', '.join(outs)}]")
    # core.maker.make_op(type, names, outs), inlined (one call less per op: a hot path)
    lines.append("    op = OperatorDef()")
    if t._prefix is None:
        lines.append("    op.type = grad_type")
    else:
        lines.append("    op.type = prefix + op_type + suffix")
    lines.append("    op.name = ''")
    lines.append("    op.input.extend(names)")
    lines.append("    op.output.extend(outs)")
    lines.append("    return op, g_input, reads, names, outs")
    scope: dict[str, Any] = {"OperatorDef": OperatorDef, "grad_type": t._suffix,
                             "prefix": t._prefix, "suffix": t._suffix}
    # Named, and kept in linecache, so that a traceback through ``build`` shows its lines.
    source = "\n".join(lines) + "\n"
    filename = f"<GradTemplate {t!r}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), scope)  # noqa: S102 - ints and fixed text only
    fn: Callable[..., Any] = scope["build"]
    return fn


def template(grad_type: str, inputs: Sequence[Ref], outputs: Sequence[int]) -> GradTemplate:
    """Shorthand for :class:`GradTemplate`, registered by the calling module."""
    return GradTemplate(
        grad_type, inputs, outputs, sys._getframe(1).f_globals.get("__name__", __name__)
    )
