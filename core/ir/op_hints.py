"""Hints of ``/v1/gradients/op`` problems: which ``g_output`` entry to give.

The caller of ``GetGradientForOp`` chose ``g_output``, so a maker's "Gradient of output y is
not provided!" (Caffe2's words, spec §2.3) can say which entry to fill, and a sparse entry
given to a maker that takes only dense ones asks for a dense name (``densify`` and ``ys``,
which the net routes' message names, do not exist there).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from core.types import Diagnostic

#: Caffe2's words for a maker's missing output gradient (``GO``).
_GO_MISSING = re.compile(r"Gradient of output (?P<name>.*) is not provided!")


def with_g_output_hint(p: Diagnostic, op_type: str, outputs: Sequence[str],
                       empty: Sequence[bool]) -> Diagnostic:
    """Problem ``p`` of the op's gradient, located at ``op[0]`` and told which entry to give.

    Args:
        p: a problem raised while making the op's gradient.
        op_type: the op's type.
        outputs: the op's output names.
        empty: ``empty[k]``: ``g_output[k]`` was given as an empty name (Caffe2 reads it as
            no gradient).
    """
    if p.code == "sparse_output_gradient" and p.blobs and p.blobs[0] in outputs:
        k = outputs.index(p.blobs[0])
        message = (f"Gradient of output {p.blobs[0]} is sparse (expected dense): {op_type}'s "
                   f"gradient takes only a dense one. Give g_output[{k}] a dense gradient: a "
                   "blob name (a string).")
        return Diagnostic(p.severity, p.code, message, 0, op_type, f"op[0]:{op_type}",
                          p.blobs)
    if p.path is not None or p.op_index is not None:
        return p
    message = p.message
    found = _GO_MISSING.fullmatch(message)
    if found is not None and found["name"] in outputs:
        k = outputs.index(found["name"])
        message += (f" g_output[{k}] is an empty name, which means no gradient; give the "
                    "gradient's blob name (a string)." if empty[k] else
                    f" Give g_output[{k}] a dense gradient: a blob name (a string).")
    return Diagnostic(p.severity, p.code, message, 0, op_type, f"op[0]:{op_type}", p.blobs)
