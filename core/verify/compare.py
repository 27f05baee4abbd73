"""Comparing an analytic gradient with its finite differences: the verdict of one blob.

Source: Caffe2 ``gradient_checker.py`` compares with ``np.isclose``-style tolerances (spec
§6): an element passes when ``|analytic − numeric| <= atol + rtol·|numeric|``.

A comparison can be **blind**: when the tolerance band of every compared value holds both
zero and the analytic value, a gradient of zero, or of any size up to the band, would pass
as well as the right one, and the verdict says nothing. :func:`blind_scale` finds that. A
blind check with the default ``atol`` (or a tighter one) is a note on the blob's report: the
gradient is smaller than the absolute tolerance netgrad picked. With an ``atol`` looser than
the default, the request is refused (``tolerance_too_loose``): the caller widened the
tolerance until nothing could fail (walkthrough, stop 21: ``atol`` 1000 passed a gradient
five times too large).
"""

from __future__ import annotations

import numpy as np

from core.errors import InvalidRequestError
from core.types import Diagnostic
from core.verify.specs import BlobReport, VerifyOptions

#: The words a blind blob's note holds (:func:`blind_diagnostic` looks for them).
BLIND = "the check cannot tell this gradient from zero"
#: The default absolute tolerance (``VerifyOptions.atol``); a looser one must leave the
#: check able to fail.
DEFAULT_ATOL = VerifyOptions.atol


def errors(a: np.ndarray, n: np.ndarray, atol: float, rtol: float) -> tuple[
        np.ndarray, np.ndarray, np.ndarray]:
    """``(|a − n|, |a − n| / max(|a|, |n|), |a − n| − (atol + rtol·|n|))``, elementwise.

    Args:
        a, n: analytic and numeric values (float64, one shape).
    """
    abs_err = np.abs(a - n)
    denom = np.maximum(np.abs(a), np.abs(n))
    rel = np.divide(abs_err, denom, out=np.zeros_like(abs_err), where=denom > 0)
    excess = abs_err - (atol + rtol * np.abs(n))
    return abs_err, rel, excess


def blind_scale(a: np.ndarray, n: np.ndarray, atol: float, rtol: float) -> float | None:
    """The largest compared magnitude when the comparison cannot fail, else ``None``.

    Blind: some value is not zero, and for every element both ``0`` and ``a`` lie within
    ``atol + rtol·|n|`` of ``n`` (so a zero gradient would have passed too). All-zero
    values are not blind: any analytic value above ``atol`` fails there.

    Args:
        a, n: analytic and numeric values (float64, one shape; finite elements only).
    """
    if a.size == 0:
        return None
    scale = float(max(np.abs(a).max(), np.abs(n).max()))
    if scale == 0:
        return None
    band = atol + rtol * np.abs(n)
    if np.all(np.abs(n) <= band) and np.all(np.abs(a - n) <= band):
        return scale
    return None


def _blind_note(blob: str, scale: float, atol: float, what: str) -> str:
    if atol > DEFAULT_ATOL:
        raise InvalidRequestError.at(
            f"input '{blob}': atol {atol:g} is larger than every {what} compared (largest "
            f"{scale:.3g}), so any gradient up to that size passes, a zero one included; "
            f"give an atol below {scale / 10:.3g} (the default is {DEFAULT_ATOL:g}) or leave "
            "it out", path="tolerances.atol", blobs=[blob], code="tolerance_too_loose")
    return (f"every {what} compared is within atol {atol:g} of zero (largest {scale:.3g}): "
            f"{BLIND}; give a smaller atol to check it")


def blind_diagnostic(blobs: list[BlobReport]) -> Diagnostic | None:
    """A warning naming the blobs whose comparison was blind (see the module docstring),
    or ``None``: their ``passed`` says nothing about the gradient."""
    blind = [b.blob for b in blobs if BLIND in b.note]
    if not blind:
        return None
    return Diagnostic(
        "warning", "tolerance_blind",
        f"the gradient of {', '.join(blind)} is smaller than atol everywhere it was compared: "
        f"{BLIND}, so its 'passed' says nothing; give a smaller atol (see each blob's note)",
        blobs=tuple(blind))


def full_report(blob: str, x: np.ndarray, a: np.ndarray, numeric: np.ndarray, atol: float,
                rtol: float) -> BlobReport:
    """The full-mode report of ``blob`` from its analytic and numeric gradients.

    Args:
        x: the checked input (its shape is the gradient's).
        a, numeric: analytic gradient (``x``'s shape) and central differences (flat),
            float64.

    Raises:
        InvalidRequestError: ``tolerance_too_loose`` (see the module docstring).
    """
    if x.size == 0:
        return BlobReport(blob, True, 0.0, 0.0, None, None, None, None, 0)
    num = numeric.reshape(x.shape)
    abs_err, rel, excess = errors(a, num, atol, rtol)
    worst = int(np.argmax(excess))
    widx = [int(i) for i in np.unravel_index(worst, x.shape)]
    rep = BlobReport(
        blob, bool(np.all(excess <= 0)), float(abs_err.max()), float(rel.max()), widx,
        float(a.reshape(-1)[worst]), float(num.reshape(-1)[worst]), None, int(x.size),
    )
    scale = blind_scale(a, num, atol, rtol)
    if scale is not None:
        rep.note = _blind_note(blob, scale, atol, "gradient element")
    return rep


def fast_report(blob: str, size: int, an: list[float], nu: list[float], atol: float,
                rtol: float) -> BlobReport:
    """The fast-mode report of ``blob`` from the directional derivatives of its passes.

    Args:
        size: elements of the checked input (an empty input passes with nothing to check).
        an, nu: analytic ``<∇L, u>`` and numeric directional derivatives, one per pass.

    Raises:
        InvalidRequestError: ``tolerance_too_loose`` (see the module docstring).
    """
    if size == 0:
        return BlobReport(blob, True, 0.0, 0.0, None, None, None, None, 0)
    av, nv = np.array(an), np.array(nu)
    abs_err, rel, excess = errors(av, nv, atol, rtol)
    worst = int(np.argmax(excess))
    rep = BlobReport(
        blob, bool(np.all(excess <= 0)), float(abs_err.max()), float(rel.max()), None,
        an[worst], nu[worst], None, len(an),
    )
    scale = blind_scale(av, nv, atol, rtol)
    if scale is not None:
        rep.note = _blind_note(blob, scale, atol, "directional derivative")
    return rep
