"""Renaming an input or output of an emitted gradient op, sub-nets included.

Source: Caffe2 ``core.py`` (accumulation renames a generator's output to
``_<name>_autosplit_<k>``, spec §2.7) and ``disambiguate_grad_if_op_output`` (spec §3.6).
Plain ops just get the new name in their ``input``/``output`` field. A gradient ``Do``,
``If`` or ``While`` reads and writes outer blobs from inside its sub-nets: the control ops
register how to rename those (:func:`core.registry.register_renamers`), and the backward pass
finds them in the registry rather than importing ``core.control``.
"""

from __future__ import annotations

from api_schemas import caffe2_pb2
from core.registry import REGISTRY
from core.types import GradientSlice, GradValue

OperatorDef = caffe2_pb2.OperatorDef


def rename_output(
    op: OperatorDef, idx: int, new_name: str, siblings: list[OperatorDef] | None = None
) -> None:
    """Rename output ``idx`` of an emitted gradient op, reaching into control-op sub-nets.

    Plain ops just get the new output name. A gradient ``If``, ``Do`` or ``While`` writes its
    outputs from inside sub-nets, so the rename is applied there too (Caffe2
    ``disambiguate_grad_if_op_output`` for If, spec §3.6; extended to Do/While, issue 3).
    ``siblings`` are the ops emitted with ``op`` (a gradient While adjusts its init copies).
    """
    e = REGISTRY.get(op.type)
    if e is not None and e.rename_output is not None:
        e.rename_output(op, idx, new_name, siblings)
        return
    op.output[idx] = new_name


def rename_input(op: OperatorDef, idx: int, new_name: str) -> None:
    """Make input ``idx`` of an emitted gradient op read ``new_name``, sub-nets included.

    A gradient ``Do``, ``If`` or ``While`` reads outer blobs from inside its sub-nets; every
    such read of the old name is redirected too (issue 7, B and C).
    """
    e = REGISTRY.get(op.type)
    if e is not None and e.rename_input is not None:
        e.rename_input(op, op.input[idx], new_name)
        return
    op.input[idx] = new_name


def g_name(g: GradValue, part: int) -> str:
    """The dense name (part 0), or the indices (1) or values (2) name of a GradientSlice."""
    if isinstance(g, GradientSlice):
        return g.indices if part == 1 else g.values
    return str(g)
