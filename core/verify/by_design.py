"""Fed inputs that get no gradient by design, left out of the checker's default check list.

Source: Caffe2's gradient makers give some inputs no gradient at all (``GradientMakerBase``
leaves ``GI(i)`` empty, spec §1.4): the labels of a loss (``SoftmaxWithLoss``, DLRM's
``label``), the targets of Detectron losses (``rpn_bbox_*``), the ``scale``/``bias`` of a
frozen ``AffineChannel``, the ``scales`` of ``UpsampleBilinear`` (a shape-determining float),
a ``StopGradient`` input. The checker used to perturb them by default and report a failure
(or die on a broadcast error). Review f1, finding 4 (a)/(b).

The test must not hide a real bug, so an input is left out only when all of these hold:

* the generated grad map has no entry for it;
* at least one top-level op (at or after ``skip``) reads it, and no op before ``skip`` does;
* every op that reads it is a plain op (no ``Do``/``If``/``While``/``RecurrentNetwork``,
  whose sub-nets could read it on a dense path) whose maker, asked with a gradient on every
  output (or, when that is refused, on each output alone), gives no gradient at any input
  position holding the blob.

An input on a dense path whose gradient went missing fails the first or the third rule and
is still checked (and fails). Explicitly requested inputs (``check``) are always checked.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from api_schemas import caffe2_pb2
from core.api import gradient_for_op
from core.errors import NetgradError
from core.types import GradValue

OperatorDef = caffe2_pb2.OperatorDef

#: Op types whose sub-nets may read an input on a dense path: never judged by their maker.
OPAQUE_TYPES = frozenset({"Do", "If", "While", "RecurrentNetwork", "AsyncIf", "Case"})


def _positions_with_gradient(op: OperatorDef) -> set[int] | None:
    """Input positions the maker of ``op`` can give a gradient; ``None`` = unknown.

    Asked with a gradient on every output, then (if the maker refuses that, e.g. a
    statistics output) on each output alone; the union of the answers.
    """
    every: list[GradValue] = [f"{o}_grad" for o in op.output]
    try:  # every output at once: the maximal set, and the common case
        res = gradient_for_op(op, every)
        return {k for k, g in enumerate(res.g_input) if g is not None}
    except NetgradError:
        pass
    found: set[int] = set()
    answered = False
    if len(op.output) > 1:  # one output at a time, built one try at a time
        for j in range(len(op.output)):
            g_output: list[GradValue] = [g if k == j else None for k, g in enumerate(every)]
            try:
                res = gradient_for_op(op, g_output)
            except NetgradError:
                continue
            answered = True
            found.update(k for k, g in enumerate(res.g_input) if g is not None)
    return found if answered else None


def no_gradient_by_design(
    ops: Sequence[OperatorDef],
    skip: int,
    grad_map: Mapping[str, GradValue],
    candidates: Collection[str],
) -> dict[str, str]:
    """Those of ``candidates`` that get no gradient by design, each with a note.

    Args:
        ops: the forward net's ops (all of them; ``skip`` as for gradient generation).
        skip: ops before this index are not differentiated.
        grad_map: the generated blob -> gradient map.
        candidates: fed float inputs of the default check list, in order.

    Returns:
        blob -> note naming the op(s) and input position(s), in ``candidates`` order.
    """
    readers: dict[str, list[tuple[int, OperatorDef]]] = {}
    early: set[str] = set()
    for i, op in enumerate(ops):
        for name in dict.fromkeys(op.input):
            if i < skip:
                early.add(name)
            else:
                readers.setdefault(name, []).append((i, op))
    known: dict[int, set[int] | None] = {}
    out: dict[str, str] = {}
    for blob in candidates:
        if blob in grad_map or blob in early or blob not in readers:
            continue
        where: list[str] = []
        for i, op in readers[blob]:
            if op.type in OPAQUE_TYPES:
                break
            if i not in known:
                known[i] = _positions_with_gradient(op)
            got = known[i]
            positions = [k for k, n in enumerate(op.input) if n == blob]
            if got is None or any(k in got for k in positions):
                break
            where.append(f"op[{i}]:{op.type} input {', '.join(map(str, positions))}")
        else:
            out[blob] = (
                f"not checked: input '{blob}' gets no gradient by design (the gradient "
                f"maker of {'; '.join(where)} gives it none, as Caffe2's); name it in "
                "'check' to check it anyway"
            )
    return out
