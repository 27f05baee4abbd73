"""What verification is asked and what it answers: input specs, options and reports.

Source: Caffe2 ``gradient_checker.py`` (spec §6) takes NumPy inputs directly; a service takes
them as literal tensors or seeded random specs, built here (:func:`materialize_inputs`,
deterministic for a given seed, within the job's tensor limits). The checker itself is
:mod:`core.verify.checker`; import both through :mod:`core.verify`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from api_schemas import caffe2_pb2
from core.errors import InvalidRequestError
from core.executor.limits import RunLimits, check_elements, default_limits
from core.types import Diagnostic, GradValue

OperatorDef = caffe2_pb2.OperatorDef

MODES = ("fast", "full")
DISTRIBUTIONS = ("uniform", "normal", "positive", "away_from_zero")
DTYPES: dict[str, Any] = {
    "float32": np.float32, "float": np.float32, "FLOAT": np.float32,
    "float64": np.float64, "double": np.float64, "DOUBLE": np.float64,
    "int32": np.int32, "INT32": np.int32, "int64": np.int64, "INT64": np.int64,
    "bool": np.bool_, "BOOL": np.bool_,
}

# --- request types --------------------------------------------------------------------------
@dataclass
class TensorSpec:
    """A literal input tensor.

    Attributes:
        shape: dimensions; ``prod(shape)`` values are required.
        dtype: ``float32``, ``float64``, ``int32``, ``int64`` or ``bool``.
        data: the values, row-major (a flat or nested list, or an array).
    """

    shape: list[int]
    dtype: str = "float64"
    data: Any = None


@dataclass
class RandomSpec:
    """A random input tensor.

    Attributes:
        shape: dimensions.
        dtype: as :class:`TensorSpec`.
        distribution: ``uniform`` (``[low, high)``, default ``[-1, 1)``); ``normal``
            (standard normal, clipped to ``[low, high]`` when given); ``positive`` (uniform
            in ``[low, high)``, default ``[0.5, 2)``, for Log/Sqrt/divisors); ``away_from_zero``
            (magnitude uniform in ``[low, high)``, default ``[0.2, 1.5)``, random sign: away
            from the kinks of Relu/Abs). Integer dtypes draw integers in ``[low, high)``
            (default ``[0, 10)``); bool draws fair coins.
        seed: seed of this tensor (default: derived from ``VerifyOptions.seed`` and the
            input's position).
        low, high: range parameters (see ``distribution``).
    """

    shape: list[int]
    dtype: str = "float64"
    distribution: str = "normal"
    seed: int | None = None
    low: float | None = None
    high: float | None = None


@dataclass
class InputSpec:
    """One fed blob: exactly one of ``tensor`` and ``random``.

    Attributes:
        path: where the spec sits in the request, for problems (``inputs[2]``; ``init_net``
            for a blob an init net wrote); ``None``: ``inputs[k]``, ``k`` its position in
            the list given to :func:`materialize_inputs`.
    """

    blob: str
    tensor: TensorSpec | None = None
    random: RandomSpec | None = None
    path: str | None = None

    @classmethod
    def from_array(cls, blob: str, value: Any) -> InputSpec:
        """An input given as a NumPy array (or anything ``np.asarray`` accepts)."""
        arr = np.asarray(value)
        return cls(blob, tensor=TensorSpec(list(arr.shape), str(arr.dtype), arr))


@dataclass
class VerifyOptions:
    """What to feed, what to check and how.

    Attributes:
        inputs: fed blobs.
        mode: ``"fast"`` (random projections) or ``"full"`` (every element).
        step: finite-difference step ``h`` (default ``1e-6``, or ``1e-3`` when an output is
            not float64).
        atol, rtol: tolerances of ``|analytic − numeric| <= atol + rtol·|numeric|``.
        check: input blobs whose gradient is checked (default: every fed float input but
            those with no gradient by design, see :mod:`core.verify.by_design`).
        passes: random directions per input in fast mode.
        seed: seed of the output weights, the fast-mode directions and unseeded inputs.
        cast_float64: cast fed float inputs to float64 (default true).
    """

    inputs: list[InputSpec] = field(default_factory=list)
    mode: str = "fast"
    step: float | None = None
    atol: float = 1e-5
    rtol: float = 1e-3
    check: list[str] | None = None
    passes: int = 3
    seed: int = 0
    cast_float64: bool = True


# --- report types ---------------------------------------------------------------------------
@dataclass
class BlobReport:
    """Comparison for one checked input blob.

    Attributes:
        blob: the input blob.
        passed: every compared value was within tolerance.
        max_abs_error, max_rel_error: over all elements (full) or passes (fast); the
            relative error is ``|a − n| / max(|a|, |n|)``.
        worst_index: element with the largest excess over the tolerance (full mode).
        analytic, numeric: values at the worst element (full) or the worst direction's
            directional derivatives (fast).
        gradient: name of the gradient blob (``indices,values`` for a sparse gradient), or
            ``None`` when none was generated (then the analytic gradient is zero).
        checked: elements compared (full) or directions (fast).
        nondifferentiable: the forward run met a non-differentiable point (see diagnostics).
        note: explanation when something is unusual.
    """

    blob: str
    passed: bool
    max_abs_error: float
    max_rel_error: float
    worst_index: list[int] | None
    analytic: float | None
    numeric: float | None
    gradient: str | None
    checked: int = 0
    nondifferentiable: bool = False
    note: str = ""


@dataclass
class VerifyReport:
    """The verification verdict: one :class:`BlobReport` per checked blob."""

    passed: bool
    mode: str
    step: float
    atol: float
    rtol: float
    blobs: list[BlobReport]


@dataclass
class VerifyResult:
    """Answer of :func:`verify_net`.

    Attributes:
        report: the verdict.
        grad_ops: the gradient ops that were checked (given ones as given, seed fills included).
        grad_map: blob -> gradient, from gradient generation.
        diagnostics: generation diagnostics, then the checker's warnings and notes.
    """

    report: VerifyReport
    grad_ops: list[OperatorDef]
    grad_map: dict[str, GradValue]
    diagnostics: list[Diagnostic]


# --- inputs ---------------------------------------------------------------------------------
def _dtype(name: str, blob: str, where: str) -> Any:
    dt = DTYPES.get(name)
    if dt is None:
        raise InvalidRequestError.at(
            f"input '{blob}': dtype {name!r} is not one of float32, float64, int32, int64, bool",
            path=f"{where}.dtype", blobs=[blob])
    return dt


def _shape(shape: Sequence[int], blob: str, limits: RunLimits, where: str) -> tuple[int, ...]:
    dims = tuple(int(d) for d in shape)
    if any(d < 0 for d in dims):
        raise InvalidRequestError.at(
            f"input '{blob}': negative dimension in shape {list(dims)}",
            path=f"{where}.shape", blobs=[blob])
    if any(d > limits.max_elements for d in dims):  # even when another dimension is 0
        raise InvalidRequestError.at(
            f"input '{blob}': dimension above the tensor limit of {limits.max_elements} "
            f"in shape {list(dims)}", path=f"{where}.shape", blobs=[blob])
    check_elements(math.prod(dims), f"input blob '{blob}' of shape {list(dims)}", limits,
                   path=f"{where}.shape", blobs=(blob,))
    return dims


def _random(spec: RandomSpec, blob: str, rng: np.random.Generator, shape: tuple[int, ...],
            dt: Any, where: str) -> np.ndarray:
    def bad(message: str, field: str = "low") -> InvalidRequestError:
        return InvalidRequestError.at(message, path=f"{where}.{field}", blobs=[blob])

    if spec.distribution not in DISTRIBUTIONS:
        raise bad(f"input '{blob}': distribution {spec.distribution!r} is not one of "
                  f"{', '.join(DISTRIBUTIONS)}", "distribution")
    kind = np.dtype(dt).kind
    for which, bound in (("low", spec.low), ("high", spec.high)):
        if bound is not None and not math.isfinite(bound):
            raise bad(f"input '{blob}': low and high must be finite numbers", which)
    if kind == "b":
        return rng.random(shape) < 0.5
    if kind in "iu":
        lo = int(spec.low) if spec.low is not None else 0
        hi = int(spec.high) if spec.high is not None else 10
        info = np.iinfo(dt)
        if hi <= lo or lo < info.min or hi - 1 > info.max:
            raise bad(
                f"input '{blob}': need low < high within {np.dtype(dt).name}, got [{lo}, {hi})",
                "low" if lo < info.min or spec.high is None else "high")
        return rng.integers(lo, hi, shape).astype(dt)
    d = spec.distribution
    if spec.low is not None and spec.high is not None and spec.low > spec.high:
        raise bad(f"input '{blob}': low {spec.low} is above high {spec.high}")
    defaults = {"uniform": (-1.0, 1.0), "positive": (0.5, 2.0), "away_from_zero": (0.2, 1.5)}
    if d == "normal":
        x = rng.standard_normal(shape)
        if spec.low is not None or spec.high is not None:
            x = np.clip(x, spec.low, spec.high)
        return x.astype(dt)
    lo_f = spec.low if spec.low is not None else defaults[d][0]
    hi_f = spec.high if spec.high is not None else defaults[d][1]
    if hi_f <= lo_f or (d != "uniform" and lo_f <= 0):
        raise bad(
            f"input '{blob}': {d} needs {'0 < ' if d != 'uniform' else ''}low < high, "
            f"got [{lo_f}, {hi_f})", "low" if spec.low is not None else "high")
    x = rng.uniform(lo_f, hi_f, shape)
    if d == "away_from_zero":
        x = x * rng.choice(np.array([-1.0, 1.0]), shape)
    return x.astype(dt)


def _non_finite(value: np.ndarray, dtype: str) -> str | None:
    """``"NaN at element i"`` / ``"an infinity at element i"`` for the first non-finite
    element of a float array, else ``None``; ``dtype``: the dtype the input was given as
    (a finite value too large for float32 becomes an infinity)."""
    flat = value.reshape(-1)
    if value.dtype.kind != "f" or np.isfinite(flat).all():
        return None
    at = int(np.flatnonzero(~np.isfinite(flat))[0])
    what = "NaN" if np.isnan(flat[at]) else "an infinity"
    return f"{what} at element {at}" + (f" (as {dtype})" if dtype != "float64" else "")


def _np_dtype(name: object) -> np.dtype[Any] | None:
    """The NumPy dtype of a dtype name in any spelling :data:`DTYPES` takes, or ``None``."""
    dt = DTYPES.get(str(name))
    return np.dtype(dt) if dt is not None else None


def is_float_dtype(name: object) -> bool:
    """Whether dtype name ``name`` (``float``, ``double``, ``DOUBLE``...) is a float type."""
    dt = _np_dtype(name)
    return dt is not None and dt.kind == "f"


def _given_dtype(spec: InputSpec) -> str:
    src = spec.tensor if spec.tensor is not None else spec.random
    dt = _np_dtype(src.dtype) if src is not None else None
    return dt.name if dt is not None else "float64"


def finite_check_list(feeds: dict[str, np.ndarray], check: list[str], explicit: bool,
                       specs: list[InputSpec]) -> tuple[list[str], list[Diagnostic]]:
    """``check`` without the inputs holding NaN or an infinity, whose finite differences
    (and so the report) would be NaN.

    The default list (``explicit`` false: every fed float input) leaves them out, each with
    an ``info`` diagnostic ``not_checked_non_finite`` (a ``-inf`` attention mask is a fine
    input, just not one to check). A blob the caller named in ``check`` is refused.

    Raises:
        InvalidRequestError: a blob named in ``check`` holds a non-finite value; path
            ``inputs[k].tensor.data`` (or ``check`` for a blob of the init net).
    """
    paths = {spec.blob: spec.path or f"inputs[{k}]" for k, spec in enumerate(specs)}
    dtypes = {spec.blob: _given_dtype(spec) for spec in specs}
    kept: list[str] = []
    notes: list[Diagnostic] = []
    for blob in check:
        found = _non_finite(feeds[blob], dtypes.get(blob, "float64"))
        if found is None:
            kept.append(blob)
        elif not explicit:
            notes.append(Diagnostic(
                "info", "not_checked_non_finite",
                f"input '{blob}' holds {found}: not checked (finite differences need finite "
                "values); its value is fed as given", blobs=(blob,)))
        else:  # (every fed blob has a spec: feeds are made from specs)
            where = paths[blob]
            raise InvalidRequestError.at(
                f"input '{blob}' holds {found}; the finite differences of a checked input "
                "need finite values: give finite values, or leave the blob out of `check`",
                path="check" if where == "init_net" else f"{where}.tensor.data",
                blobs=[blob])
    return kept, notes


def _check_exact(data: Any, dt: Any, blob: str, path: str) -> None:
    """Refuse tensor data an integer or bool dtype would change (``1.5`` as int32, ``2`` as
    bool, ``1e300`` as int64): the net would silently run on other values than given.

    Raises:
        InvalidRequestError: path ``inputs[k].tensor.data[i]``, naming the value and dtype.
    """
    kind = np.dtype(dt).kind
    if kind not in "iub" or data is None:
        return
    if isinstance(data, np.ndarray) and data.dtype == np.dtype(dt):
        return  # (an array of that very dtype: an init net's blob, InputSpec.from_array)
    try:
        raw = np.asarray(data, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError, OverflowError):
        return  # (the conversion below reports it)
    if kind == "b":
        bad = ~np.isin(raw, (0.0, 1.0))
        want = "0 or 1 (false or true)"
    else:
        low = float(np.iinfo(dt).min)  # (-2**31 or -2**63: exact in float64, as is -low)
        bad = ~np.isfinite(raw) | (raw != np.trunc(raw)) | (raw < low) | (raw >= -low)
        want = f"a whole number that fits {np.dtype(dt).name}"
    if bad.any():
        at = int(np.flatnonzero(bad)[0])
        raise InvalidRequestError.at(
            f"input '{blob}': value {float(raw[at])!r} at element {at} is not {want}; give exact "
            "values (or a float dtype)", path=f"{path}[{at}]", blobs=[blob])


def check_step_resolution(feeds: dict[str, np.ndarray], check: list[str], step: float) -> None:
    """Refuse a finite-difference step the checked inputs cannot resolve.

    Near a large value, ``x + step`` rounds back to ``x`` (or to a much larger or smaller
    step): the difference is then 0 (nothing compared, a false pass) or mostly rounding (a
    false failure). Each checked element must take the step within half of it.

    Raises:
        InvalidRequestError: code ``step_below_resolution``, path ``tolerances.step``,
            naming the blob, the element and a step that would work; code
            ``step_too_large`` when the perturbed input overflows its dtype.
    """
    for blob in check:
        x = feeds[blob]
        if x.dtype.kind != "f" or x.size == 0:
            continue
        flat = x.reshape(-1)
        with np.errstate(over="ignore", invalid="ignore"):
            up, down = flat + x.dtype.type(step), flat - x.dtype.type(step)
            taken = up.astype(np.float64) - down
        # (the perturbed input, or the difference of the two, is infinite)
        overflow = ~(np.isfinite(up) & np.isfinite(down) & np.isfinite(taken))
        if overflow.any():
            at = int(np.flatnonzero(overflow)[0])
            raise InvalidRequestError.at(
                f"input '{blob}': a finite-difference step of {step:g} overflows "
                f"{x.dtype.name} at element {at} ({float(flat[at]):g}): the perturbed input "
                "or the difference is infinite; give a tolerances.step far below the inputs' "
                "magnitude (the default is 1e-6 for float64 and 1e-3 otherwise)",
                path="tolerances.step", blobs=[blob], code="step_too_large")
        bad = ~(np.abs(taken * 0.5 - step) <= step * 0.5)  # (halves: 2 * step may overflow)
        if bad.any():
            at = int(np.flatnonzero(bad)[0])
            value = float(flat[at])
            need = float(np.spacing(np.abs(flat).max().astype(x.dtype))) * 1e4  # (accurate)
            raise InvalidRequestError.at(
                f"input '{blob}': a finite-difference step of {step:g} is below the resolution "
                f"of element {at} ({value:g}, {x.dtype.name}): the difference would be rounding, "
                f"not the gradient; give tolerances.step of at least {need:.3g}, or inputs of "
                "moderate size", path="tolerances.step", blobs=[blob], code="step_below_resolution")


#: A step above this fraction of the checked inputs' scale (their largest magnitude, at
#: least 1) gets the ``step_large`` warning.
LARGE_STEP = 1e-2


def large_step_warning(feeds: dict[str, np.ndarray], check: list[str],
                       step: float) -> Diagnostic | None:
    """A warning when ``step`` is large beside the checked float inputs: more than
    :data:`LARGE_STEP` of their largest magnitude (at least 1). A central difference then
    measures the curvature as well as the slope (its error grows with ``step**2``), so a
    failure may be the step's, not the gradient's.

    Returns:
        ``Diagnostic("warning", "step_large", ...)`` naming the inputs, or ``None``.
    """
    floats = [b for b in check if feeds[b].dtype.kind == "f" and feeds[b].size]
    if not floats:
        return None
    largest = max(float(np.max(np.abs(feeds[b]))) for b in floats)
    if not step > LARGE_STEP * max(1.0, largest):
        return None
    return Diagnostic(
        "warning", "step_large",
        f"tolerances.step {step:g} is large beside the checked inputs (largest magnitude "
        f"{largest:g}; the warning starts at 1% of that, or of 1): a central difference "
        "of that step measures the curvature as well as "
        "the slope, so a failure may be the step's; unless the net is linear there, give a "
        "smaller step (the default is 1e-6 for float64)", blobs=tuple(floats))


def materialize_inputs(
    specs: Sequence[InputSpec], seed: int = 0, limits: RunLimits | None = None
) -> dict[str, np.ndarray]:
    """Build the fed arrays of ``specs`` (deterministic for a given ``seed``).

    Raises:
        InvalidRequestError: duplicate blob, neither/both of tensor and random, unknown dtype
            or distribution, data size differing from the shape.
        LimitExceededError: a tensor above ``limits.max_elements``.
    """
    limits = limits or default_limits()
    out: dict[str, np.ndarray] = {}
    for k, spec in enumerate(specs):
        blob = spec.blob
        where = spec.path or f"inputs[{k}]"
        if blob in out:
            raise InvalidRequestError.at(f"input '{blob}' is given twice",
                                         path=f"{where}.blob", blobs=[blob])
        if (spec.tensor is None) == (spec.random is None):
            raise InvalidRequestError.at(
                f"input '{blob}': give exactly one of tensor and random", path=where,
                blobs=[blob])
        if spec.tensor is not None:
            t = spec.tensor
            where += ".tensor" if spec.path != "init_net" else ""
            dt = _dtype(t.dtype, blob, where)
            shape = _shape(t.shape, blob, limits, where)
            _check_exact(t.data, dt, blob, f"{where}.data")
            try:
                data = np.asarray(t.data if t.data is not None else [], dtype=dt).reshape(-1)
            except (TypeError, ValueError, OverflowError) as exc:
                raise InvalidRequestError.at(f"input '{blob}': bad data: {exc}",
                                             path=f"{where}.data", blobs=[blob]) from exc
            if data.size != math.prod(shape):
                raise InvalidRequestError.at(
                    f"input '{blob}': shape {list(shape)} needs {math.prod(shape)} values, "
                    f"got {data.size}", path=f"{where}.data", blobs=[blob])
            out[blob] = data.reshape(shape).copy()
        else:
            r = spec.random
            if r is None:  # unreachable: exactly one of the two was checked above
                raise InvalidRequestError(f"input '{blob}': give exactly one of tensor and random")
            where += ".random" if spec.path != "init_net" else ""
            dt = _dtype(r.dtype, blob, where)
            shape = _shape(r.shape, blob, limits, where)
            if r.seed is not None and r.seed < 0:
                raise InvalidRequestError.at(f"input '{blob}': seed must be >= 0, got {r.seed}",
                                             path=f"{where}.seed", blobs=[blob])
            rng = np.random.default_rng(r.seed if r.seed is not None else (seed, k))
            out[blob] = np.asarray(_random(r, blob, rng, shape, dt, where))
    return out
