"""Copy-on-write of gradient blobs that several blobs hold (review f1, finding 1).

Source: Caffe2 ``core.py`` ``GradientRegistry`` makers name an input gradient ``<input>_grad``
and pass-through makers (``Sum``, ``Copy``, in-place ops) hand one gradient blob to several
blobs (spec §2.5, §2.7). A gradient op writing into such a name overwrote the other blobs'
gradient; upstream shares the flaw. :class:`CopyOnWrite` renames those writes, for plain ops
and control ops alike (issue 7 did it for control ops only, ``_protect_incoming``).
"""

from __future__ import annotations

from collections.abc import Sequence

from api_schemas import caffe2_pb2
from core.ir.generators import GradientRecord, owners_of
from core.ir.renaming import rename_input, rename_output
from core.types import GradientSlice, GradValue

OperatorDef = caffe2_pb2.OperatorDef


class CopyOnWrite(GradientRecord):
    """A :class:`~core.ir.generators.GradientRecord` that never clobbers a held gradient.

    Attributes:
        protected: incoming gradient blobs no gradient op may write in place (the seeds of
            a sub-net pass, bound to outer blobs whose sharing the pass cannot see).
    """

    protected: set[str]

    def _shares_incoming(
        self, idx: int, op_outs: Sequence[Sequence[str]], g_output: Sequence[GradValue],
        g_input: Sequence[GradValue],
    ) -> bool:
        """Whether a gradient op of op ``idx`` may write a gradient blob another blob holds.

        ``op_outs``: the output names of each of op ``idx``'s gradient ops.

        Cheap pre-check for :meth:`_protect_incoming` on plain ops (the hot path). A written
        name is clear when nobody holds it and it is not protected, or when its one holder
        is an output of op ``idx`` (or, for a name that is not incoming, an input that op
        ``idx`` gives that very name); anything else goes to the exact :meth:`_clobbered`.
        """
        owners = self._owners
        protected = self.protected
        outputs = self.op_outputs[idx]
        for outs in op_outs:
            for n in outs:
                held = owners.get(n)
                if held is None:
                    if n in protected:
                        return True
                    continue
                if isinstance(held, str) and n not in protected:
                    if held in outputs:
                        continue
                    pairs = zip(self.op_inputs[idx], g_input, strict=False)
                    if n not in g_output and any(g == n and b == held for b, g in pairs):
                        continue
                return True
        return False

    def _clobbered(
        self, idx: int, ops: Sequence[OperatorDef], g_output: Sequence[GradValue],
        g_input: Sequence[GradValue],
    ) -> list[str]:
        """Names op ``idx``'s gradient ops write that hold another blob's gradient.

        An incoming gradient (``g_output``) may be overwritten in place only when every
        blob given it is an output of op ``idx`` (its gradient is consumed here) and the
        name is not protected. Any other name written may be held only by outputs of op
        ``idx`` and by the inputs op ``idx`` gives that very name (accumulation renames
        those, spec §2.7): a gradient Do writing ``<a>_grad`` for its input ``a`` clobbered
        its input ``b``, which a later in-place ``Sum(a, b) -> a`` had given ``<a>_grad``.
        Names of a GradientSlice input gradient are left alone.
        """
        outputs = set(self.op_outputs[idx])
        receivers: dict[str, set[str]] = {}
        for b, g in zip(self.op_inputs[idx], g_input, strict=False):
            if isinstance(g, str):
                receivers.setdefault(g, set()).add(b)
        incoming = {n for g in g_output if isinstance(g, str) for n in (g,)}
        sliced = {n for g in g_input if isinstance(g, GradientSlice) for n in g}
        out: list[str] = []
        for gop in ops:
            for n in gop.output:
                if n in out or n in sliced:
                    continue
                held = owners_of(self._owners, n)
                if n in incoming:
                    if n in self.protected or held - outputs:
                        out.append(n)
                elif held - outputs - receivers.get(n, set()):
                    out.append(n)
        return out

    def _protect_incoming(
        self,
        idx: int,
        ops: list[OperatorDef],
        g_output: Sequence[GradValue],
        g_input: Sequence[GradValue],
    ) -> list[GradValue]:
        """Keep a gradient op writing into a gradient blob another blob holds (copy-on-write).

        For every op type (review f1, finding 1): ``Sum``/``Copy``-like makers give one
        gradient blob to several inputs; an in-place forward op before them (``Scale``,
        ``Negative``, ``AffineChannel``... with input name = output name) has a gradient op
        writing its input gradient into a blob named like one of those (the incoming one, or
        another still-live gradient such as ``<x>_grad`` given to the Sum's other inputs
        through a later in-place Sum), so the other blobs ended up with this op's gradient
        (Caffe2 shares the flaw). A control op's gradient may write an input gradient into
        the blob of an incoming gradient (a Do updating a loop-carried gradient in place,
        spec §3.8 #7; an If zero-filling an input the taken branch overwrote); when a
        pass-through op handed that blob to other blobs too, the write clobbers their
        gradient (issue 7, fuzzer F1). The write goes to a fresh blob
        ``_<name>_<type><index>`` instead; reads of the name before the first write keep it.
        In a sub-net pass the seeds are bound to outer blobs whose sharing the pass cannot
        see, so they are always protected (fuzzer F5).
        """
        out = list(g_input)
        for n in self._clobbered(idx, ops, g_output, g_input):
            first = next((i for i, gop in enumerate(ops) if n in gop.output), None)
            if first is None:  # pragma: no cover - _clobbered lists written names only
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
