"""Small value types shared by the whole engine.

Source: Caffe2 ``core.py`` value types (spec §2.1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


class GradientSlice(NamedTuple):
    """A sparse (row-slice) gradient: rows ``indices`` of the blob receive ``values``.

    Both fields are blob names. Caffe2 ``GradientSlice`` (spec §2.1).
    """

    indices: str
    values: str


#: A gradient value: ``None`` (no gradient), a dense blob name, or a GradientSlice.
GradValue = str | GradientSlice | None


def grad_names(g: GradValue) -> tuple[str, ...]:
    """Blob names a gradient value refers to (0, 1 or 2 names)."""
    if g is None:
        return ()
    if isinstance(g, GradientSlice):
        return (g.indices, g.values)
    return (g,)


@dataclass(frozen=True)
class Diagnostic:
    """One finding about a request: an error, a warning or a note.

    Attributes:
        severity: ``"error"``, ``"warning"`` or ``"info"``.
        code: stable machine-readable code, e.g. ``"version_mismatch"``.
        message: human-readable text.
        op_index: index of the op in its (sub-)net, or ``None`` when not about one op.
        op_type: the op's ``type``.
        path: sub-net path such as ``op[3]:If/then_net/op[0]:Do/net/op[1]:Add``.
        blobs: blob names involved, in first-appearance order.
    """

    severity: str
    code: str
    message: str
    op_index: int | None = None
    op_type: str | None = None
    path: str | None = None
    blobs: tuple[str, ...] = field(default_factory=tuple)
