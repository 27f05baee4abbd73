"""Request checks shared by the routes, made before any engine work.

``ys`` - the outputs to differentiate - is required and must name at least one blob on
every route where it is required (``/v1/gradients/net``, ``/v1/verify``): ``ys: []`` is a
400 naming the field, the same on both. On ``/v1/run`` ``ys`` is optional and ``[]`` means
the same as leaving it out (run the forward net only).
"""

from __future__ import annotations

from collections.abc import Sized

from core.errors import InvalidRequestError

YS_EMPTY = (
    "ys is empty: name at least one output to differentiate, e.g. \"ys\": [\"prob\"] in "
    "JSON or ys { blob: \"prob\" } in text format (all-ones seeds); the net's "
    "external_output is the usual choice"
)


def require_ys(ys: Sized) -> None:
    """Refuse an empty ``ys``.

    Raises:
        InvalidRequestError: code ``ys_empty``, path ``ys`` (400).
    """
    if not len(ys):
        raise InvalidRequestError.at(YS_EMPTY, path="ys", code="ys_empty")
