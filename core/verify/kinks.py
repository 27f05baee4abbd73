"""Where the issue-8b ops are not differentiable: distances of a forward run to their kinks.

``/v1/verify`` scans every forward op it runs (:class:`KinkScanner`, below);
for the op types listed in :data:`KINKS` it asks the function here for the distance of each
element to the nearest non-differentiable point. Within ``KINK_MARGIN · step`` of one, finite
differences straddle the kink and may disagree with the (one-sided) gradient, so the report
says so instead of failing silently (spec §6; issue 8 brief: ties of Max/Min, Clip at its
bounds, ReluN at 0 and n).

Each function takes the op and its input arrays and returns a flat float64 array of
distances (0 = on the kink or a tie), or ``None`` when it does not apply. Pure NumPy: no op
module is imported, so the import graph stays a DAG.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from api_schemas import caffe2_pb2
from core.types import Diagnostic

OperatorDef = caffe2_pb2.OperatorDef
Array = np.ndarray[Any, Any]
KinkFn = Callable[[OperatorDef, Sequence[Array]], "Array | None"]


def _arg_f(op: OperatorDef, name: str, default: float) -> float:
    for a in op.arg:
        if a.name == name:
            if a.HasField("f"):
                return float(a.f)
            if a.HasField("i"):
                return float(a.i)
    return default


def _arg_ints(op: OperatorDef, name: str) -> list[int]:
    for a in op.arg:
        if a.name == name:
            return [int(v) for v in a.ints]
    return []


def _x(inputs: Sequence[Array]) -> Array:
    return np.asarray(inputs[0], dtype=np.float64).reshape(-1)


def _to(points: Sequence[float]) -> KinkFn:
    """Distance of input 0 to the nearest of ``points``."""

    def fn(op: OperatorDef, inputs: Sequence[Array]) -> Array:
        x = _x(inputs)
        return np.min(np.abs(x[:, None] - np.asarray(points)[None, :]), axis=1)

    return fn


def _clip(op: OperatorDef, inputs: Sequence[Array]) -> Array | None:
    pts = [_arg_f(op, k, v) for k, v in (("min", -np.inf), ("max", np.inf))]
    return _to([p for p in pts if np.isfinite(p)] or [np.inf])(op, inputs)


def _relu_n(op: OperatorDef, inputs: Sequence[Array]) -> Array | None:
    return _to([0.0, _arg_f(op, "n", 6.0)])(op, inputs)


def _thresholded(op: OperatorDef, inputs: Sequence[Array]) -> Array | None:
    return _to([_arg_f(op, "alpha", 1.0)])(op, inputs)


def _hard_sigmoid(op: OperatorDef, inputs: Sequence[Array]) -> Array | None:
    a, b = _arg_f(op, "alpha", 0.2), _arg_f(op, "beta", 0.5)
    if a == 0:
        return None
    return _to([-b / a, (1 - b) / a])(op, inputs)


def _logit(op: OperatorDef, inputs: Sequence[Array]) -> Array | None:
    eps = _arg_f(op, "eps", 1e-6)
    return _to([eps, 1 - eps])(op, inputs)


def top2_gap(values: Array, axis: int = -1) -> Array | None:
    """Per group along ``axis``: largest minus second-largest (0 = a tie); ``None`` if the
    axis has fewer than two entries."""
    v = np.moveaxis(np.asarray(values, dtype=np.float64), axis, -1)
    if v.shape[-1] < 2:
        return None
    top = -np.partition(-v.reshape(-1, v.shape[-1]), 1, axis=1)[:, :2]
    gap = top[:, 0] - top[:, 1]
    return np.asarray(gap[np.isfinite(gap)])


def _variadic(sign: float) -> KinkFn:
    def fn(op: OperatorDef, inputs: Sequence[Array]) -> Array | None:
        # a blob read at several positions ties only with itself: counted once (the maker
        # passes it once to the gradient op)
        names = list(op.input)
        xs = [x for i, x in enumerate(inputs) if i >= len(names) or names.index(names[i]) == i]
        if len(xs) < 2 or len({np.shape(x) for x in xs}) != 1:
            return None
        return top2_gap(sign * np.stack([np.asarray(x, dtype=np.float64) for x in xs], -1))

    return fn


def _reduce_axes(sign: float) -> KinkFn:
    """ReduceMax/ReduceMin: ties among the elements reduced together (``axes``)."""

    def fn(op: OperatorDef, inputs: Sequence[Array]) -> Array | None:
        x = np.asarray(inputs[0], dtype=np.float64)
        axes = sorted({a % x.ndim for a in _arg_ints(op, "axes")}) if x.ndim else []
        axes = axes or list(range(x.ndim))
        moved = np.moveaxis(x, axes, list(range(x.ndim - len(axes), x.ndim)))
        keep = moved.shape[: x.ndim - len(axes)]
        return top2_gap(sign * moved.reshape(keep + (-1,)))

    return fn


def _front_back(front: bool) -> KinkFn:
    def fn(op: OperatorDef, inputs: Sequence[Array]) -> Array | None:
        x = np.asarray(inputs[0], dtype=np.float64)
        k = int(_arg_f(op, "num_reduce_dim", 1))
        split = k if front else x.ndim - k
        if not 0 <= split <= x.ndim:
            return None
        rows = int(np.prod(x.shape[:split], dtype=np.int64))
        x2 = x.reshape(rows, -1)
        return top2_gap(x2, axis=0 if front else 1)

    return fn


def _wise(axis: int) -> KinkFn:
    def fn(op: OperatorDef, inputs: Sequence[Array]) -> Array | None:
        x = np.asarray(inputs[0], dtype=np.float64)
        return top2_gap(x, axis) if x.ndim == 3 else None

    return fn


def _l1_distance(op: OperatorDef, inputs: Sequence[Array]) -> Array | None:
    if len(inputs) < 2 or np.shape(inputs[0]) != np.shape(inputs[1]):
        return None
    return np.abs(_x(inputs) - _x(inputs[1:]))


#: op type -> (distance function, what the distance measures, for the report)
KINKS: dict[str, tuple[KinkFn, str]] = {
    "Clip": (_clip, "inputs near a clip bound"),
    "ReluN": (_relu_n, "inputs near 0 or n"),
    "ThresholdedRelu": (_thresholded, "inputs near the threshold alpha"),
    "HardSigmoid": (_hard_sigmoid, "inputs near a corner of the hard sigmoid"),
    "Logit": (_logit, "inputs near the clip at eps or 1 - eps"),
    "Elu": (_to([0.0]), "inputs near the kink at 0"),
    "ELU": (_to([0.0]), "inputs near the kink at 0"),
    "Selu": (_to([0.0]), "inputs near the kink at 0"),
    "ReduceL1": (_to([0.0]), "inputs near the kink at 0"),
    "L1Distance": (_l1_distance, "elements where X and Y nearly coincide"),
    "Max": (_variadic(1.0), "elementwise ties among the inputs"),
    "Min": (_variadic(-1.0), "elementwise ties among the inputs"),
    "ReduceMax": (_reduce_axes(1.0), "ties among the reduced elements"),
    "ReduceMin": (_reduce_axes(-1.0), "ties among the reduced elements"),
    "ReduceFrontMax": (_front_back(True), "ties among the reduced elements"),
    "ReduceBackMax": (_front_back(False), "ties among the reduced elements"),
    "RowwiseMax": (_wise(2), "ties within a row"),
    "ColwiseMax": (_wise(1), "ties within a column"),
}


def kink_distances(op: OperatorDef, inputs: Sequence[Array]) -> tuple[Array, str] | None:
    """``(distances, description)`` for an op type listed in :data:`KINKS`, else ``None``.

    Never raises: bad arguments or shapes are the kernel's to report.
    """
    entry = KINKS.get(op.type)
    if entry is None:
        return None
    fn, what = entry
    try:
        dist = fn(op, inputs)
    except Exception:  # noqa: BLE001 - the kernel reports bad input, not the scanner
        return None
    if dist is None or not np.size(dist):
        return None
    return np.asarray(dist, dtype=np.float64).reshape(-1), what


# --- the scanner /v1/verify runs over the forward net (moved from checker.py) ---------------
#: A kink closer than ``KINK_MARGIN · step`` to the evaluation point is reported.
KINK_MARGIN = 10.0
_KINK_OPS = ("Relu", "LeakyRelu", "PRelu", "Abs")
_MAXPOOL_OPS = ("MaxPool", "MaxPool1D", "MaxPool2D", "MaxPool3D")
_COMPARISON_OPS = ("LT", "LE", "GT", "GE", "EQ", "NE")


@dataclass
class Kink:
    path: str
    op_type: str
    blob: str
    distances: np.ndarray  # smallest distances to the kink (at most 1000)


class KinkScanner:
    """Executor observer that records distances to kinks (before in-place overwrites)."""

    def __init__(self) -> None:
        self.found: list[Kink] = []

    def __call__(self, op: OperatorDef, inputs: list[np.ndarray], path: str) -> None:
        if not inputs or inputs[0].dtype.kind != "f" or inputs[0].size == 0:
            return
        dist: np.ndarray | None = None
        if op.type in _KINK_OPS:
            dist = np.abs(inputs[0]).reshape(-1)
        elif op.type in _MAXPOOL_OPS:
            dist = _maxpool_gaps(op, inputs[0])
        elif op.type in _COMPARISON_OPS and len(inputs) == 2:
            # a comparison on a tie (a loop counter reaching its limit, an If condition at
            # its threshold) jumps under any perturbation: the net is not differentiable there
            try:
                dist = np.abs(np.asarray(inputs[0], dtype=np.float64)
                              - np.asarray(inputs[1], dtype=np.float64)).reshape(-1)
            except ValueError:  # shapes the kernel itself will refuse
                dist = None
        elif (found := kink_distances(op, inputs)) is not None:  # issue-8b ops (kinks.py)
            dist = found[0]
        if dist is not None and dist.size:
            k = min(1000, dist.size)
            smallest = np.partition(dist, k - 1)[:k] if k < dist.size else dist
            self.found.append(Kink(path, op.type, op.input[0], np.asarray(smallest)))


def _maxpool_gaps(op: OperatorDef, x: np.ndarray) -> np.ndarray | None:
    """Per window: largest minus second-largest value (0 = a tie), or ``None`` if unknown."""
    try:
        from core.ops import nn
    except ImportError:  # pragma: no cover - kernels not present
        return None
    try:
        _order, xc, geo = nn._pool_setup(op, [x])
        cols = nn._windows(nn._pad(xc, geo, -np.inf), geo)
    except Exception:  # the kernel itself will report bad arguments
        return None
    nk = len(geo.kernel)
    shape = tuple(int(d) for d in np.shape(cols))
    win = np.reshape(cols, shape[:2] + (-1,) + shape[2 + nk:])
    if np.shape(win)[2] < 2:
        return None
    top2 = -np.partition(-win, 1, axis=2)[:, :, :2]
    gap = top2[:, :, 0] - top2[:, :, 1]
    return np.asarray(gap[np.isfinite(gap)]).reshape(-1)


def kink_diagnostics(found: list[Kink], tol: float, out: list[Diagnostic]) -> str:
    notes: list[str] = []
    for k in found:
        n = int(np.count_nonzero(k.distances <= tol))
        if n == 0:
            continue
        what = "window ties" if k.op_type in _MAXPOOL_OPS else "inputs near the kink at 0"
        if k.op_type in KINKS:
            what = KINKS[k.op_type][1]
        count = f"{n}+" if n == k.distances.size == 1000 else str(n)
        msg = (f"{k.path}: {count} {what} (within {tol:g}); the op is not differentiable "
               "there, so finite differences may disagree with the gradient")
        out.append(Diagnostic("warning", "nondifferentiable_point", msg,
                              op_type=k.op_type, path=k.path, blobs=(k.blob,)))
        notes.append(f"{k.path} ({count} {what})")
    if not notes:
        return ""
    return "non-differentiable points in the forward run: " + ", ".join(notes)
