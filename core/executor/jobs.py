"""Run a net - and, on request, its generated gradient - in a worker and fetch blobs.

Source: Caffe2's ``workspace.FeedBlob`` / ``RunNetOnce`` / ``FetchBlob`` round trip, after
``net.AddGradientOperators(ys)`` when gradients are wanted (spec §2.8): the gradient ops are
appended to the forward net and the whole net runs on one workspace, so the gradient ops
see the forward values (and the saved workspaces of ``Do``/``If``/``While``, spec §4).

:func:`run_net` generates the gradient in the calling process (no numeric work) and sends
the numeric part, :func:`run_job`, to a :class:`core.executor.pool.WorkerPool`. The job
materializes the inputs (:func:`core.verify.materialize_inputs`, so fed blobs are validated
exactly as for verification), runs the net and returns the fetched arrays, after checking
that they exist and that together they stay under a cap (so a huge result is refused in the
worker instead of being shipped back).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from api_schemas import caffe2_pb2
from core.errors import ExecutionError, InvalidRequestError, LimitExceededError
from core.executor.executor import feed_blobs, run
from core.executor.limits import RunLimits, default_limits
from core.executor.workspace import Workspace, WorkspaceStack
from core.ir.env import GenLimits
from core.registry import with_gradient_ops
from core.types import Diagnostic, GradValue

NetDef = caffe2_pb2.NetDef
OperatorDef = caffe2_pb2.OperatorDef

#: Default cap on the elements returned by one run (all fetched blobs together).
DEFAULT_MAX_FETCH_ELEMENTS = 10**6


@dataclass
class RunResult:
    """Answer of :func:`run_net`.

    Attributes:
        outputs: fetched blob -> array, in ``fetch`` order.
        grad_ops: the gradient ops appended to the net (``None`` when no ``ys`` were given).
        grad_map: blob -> gradient from generation (``None`` when no ``ys`` were given).
        diagnostics: gradient-generation diagnostics.
    """

    outputs: dict[str, np.ndarray]
    grad_ops: list[OperatorDef] | None = None
    grad_map: dict[str, GradValue] | None = None
    diagnostics: list[Diagnostic] = field(default_factory=list)


def check_fetch_names(fetch: Sequence[str]) -> None:
    """Refuse an empty fetch list, an empty name and a name fetched twice.

    An empty list is refused in every encoding alike: JSON can tell a missing ``fetch``
    from ``[]``, binary and text cannot, and a run that returns nothing is never what the
    caller meant.

    Raises:
        InvalidRequestError: at ``fetch`` (empty list) or ``fetch[k]``.
    """
    if not fetch:
        raise InvalidRequestError.at(
            "fetch is empty: name the blobs to return, e.g. \"fetch\": [\"y\"] in JSON or "
            "fetch: \"y\" in text format",
            path="fetch", code="missing_field",
        )
    seen: set[str] = set()
    for k, name in enumerate(fetch):
        if not name:
            raise InvalidRequestError.at(f"fetch[{k}] is empty", path=f"fetch[{k}]")
        if name in seen:
            raise InvalidRequestError.at(
                f"fetch[{k}]: blob '{name}' is fetched twice", path=f"fetch[{k}]", blobs=[name]
            )
        seen.add(name)


def _nearest_blob(name: str, names: list[str]) -> str:
    """``; did you mean 'x'?`` for a fetch name the run did not produce: the all-ones seed
    of ``y`` is ``y_autogen_grad`` (not ``y_grad``), else the closest of the blob ``names``
    written."""
    import difflib

    if name.endswith("_grad") and name[:-5] + "_autogen_grad" in names:
        near: str | None = name[:-5] + "_autogen_grad"
        why = " (the all-ones seed of a ys output without a given gradient)"
    else:
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
        near, why = (close[0] if close else None), ""
    return f"; did you mean '{near}'{why}?" if near else ""


def _fetched(ws: Workspace, fetch: Sequence[str], max_fetch_elements: int) -> dict[str, np.ndarray]:
    """The ``fetch`` tensors of ``ws``, every missing one and the size cap checked at once.

    Raises:
        ExecutionError: code ``fetch_not_produced`` naming every fetched blob that the run did
            not leave as a tensor in the top-level workspace.
        LimitExceededError: code ``fetch_too_large`` when the fetched blobs together hold more
            than ``max_fetch_elements`` elements.
    """
    missing: list[Diagnostic] = []
    out: dict[str, np.ndarray] = {}
    names: list[str] | None = None  # (written blobs, listed once for the first misses)
    for k, name in enumerate(fetch):
        value = ws.get_or_unset(name)
        if isinstance(value, np.ndarray):
            out[name] = value
            continue
        if isinstance(value, WorkspaceStack):
            why = "holds a workspace stack, not a tensor"
        else:
            why = "was not produced by the run (nor fed)"
            if len(missing) < 5:
                if names is None:
                    names = [n for n, v in ws.items() if isinstance(v, np.ndarray)]
                why += _nearest_blob(name, names)
        missing.append(
            Diagnostic(
                "error", "fetch_not_produced", f"fetch[{k}]: blob '{name}' {why}",
                path=f"fetch[{k}]", blobs=(name,),
            )
        )
    if missing:
        head = missing[0].message if len(missing) == 1 else (
            f"cannot fetch {len(missing)} blobs; the first: {missing[0].message}")
        raise ExecutionError(head, missing)
    total = sum(int(a.size) for a in out.values())
    if total > max_fetch_elements:
        sizes = ", ".join(f"{n} ({a.size})" for n, a in out.items())
        msg = (
            f"the fetched blobs hold {total} elements, more than the limit of "
            f"{max_fetch_elements} (NETGRAD_MAX_FETCH_ELEMENTS): {sizes}"
        )
        raise LimitExceededError(
            msg, [Diagnostic("error", "fetch_too_large", msg, blobs=tuple(out))]
        )
    return out


def run_job(
    net_bytes: bytes,
    inputs: Sequence[Any],
    fetch: Sequence[str],
    max_fetch_elements: int = DEFAULT_MAX_FETCH_ELEMENTS,
    limits: RunLimits | None = None,
) -> dict[str, np.ndarray]:
    """Feed ``inputs``, run the serialized net once, return the ``fetch`` blobs (a pool job).

    A top-level function of picklable arguments, for
    :meth:`core.executor.pool.WorkerPool.submit`.

    Args:
        net_bytes: a serialized ``caffe2.NetDef`` (forward ops, then any gradient ops).
        inputs: :class:`core.verify.InputSpec` entries (literal tensors or seeded random
            tensors; dtypes float32/float64/int32/int64/bool, kept as given).
        fetch: blob names to return, in order.
        max_fetch_elements: cap on the elements of all fetched arrays together.
        limits: job limits (default: the worker's, see
            :func:`core.executor.limits.default_limits`).

    Returns:
        Blob name -> NumPy array, in ``fetch`` order.

    Raises:
        InvalidRequestError: a bad input spec (dtype, shape/data mismatch, duplicate blob)
            or fetch list (empty or repeated name).
        ExecutionError: refused (``Python``) or unknown op type, kernel failure, or a fetched
            blob that the run did not produce (code ``fetch_not_produced``).
        LimitExceededError: tensor, loop or time limits; ``fetch_too_large`` for the cap.
        InvalidNetError: a malformed control op.
    """
    from core.verify.specs import materialize_inputs

    limits = limits or default_limits()
    check_fetch_names(fetch)
    net = NetDef()
    net.ParseFromString(net_bytes)
    feeds = materialize_inputs(inputs, 0, limits)
    ws = Workspace()
    try:
        feed_blobs(ws, feeds, limits)
        run(net, ws, limits)
        return _fetched(ws, fetch, max_fetch_elements)
    finally:
        ws.release()  # saved sub-workspaces form cycles: free their tensors now


def run_net(
    net: NetDef,
    inputs: Sequence[Any],
    fetch: Sequence[str],
    *,
    ys: Sequence[str] | Mapping[str, GradValue] | None = None,
    skip: int = 0,
    recompute: bool = False,
    densify: bool = False,
    pool: Any = None,
    max_fetch_elements: int = DEFAULT_MAX_FETCH_ELEMENTS,
    gen_limits: GenLimits | None = None,
    limits: RunLimits | None = None,
) -> RunResult:
    """Run ``net`` (plus its gradient ops when ``ys`` is given) and fetch blobs.

    With ``ys``, the gradient ops of ``core.api.gradient_for_net(net, ys, skip,
    recompute=recompute)`` are appended to the net (``AddGradientOperators``); a ``y`` without
    an explicit seed gets the usual all-ones ``ConstantFill`` seed ``<y>_autogen_grad``.

    Args:
        net: the forward NetDef.
        inputs: fed blobs (:class:`core.verify.InputSpec`).
        fetch: blobs to return.
        ys: outputs to differentiate (list, or map y -> seed gradient); ``None`` or empty =
            forward only.
        skip: with ``ys``: ignore the first ``skip`` ops for the gradient (they still run).
        recompute: with ``ys``: see :func:`core.api.gradient_for_net`.
        densify: with ``ys``: see :func:`core.api.gradient_for_net`.
        pool: a :class:`core.executor.pool.WorkerPool` for the numeric work (else in-process).
        max_fetch_elements: cap on the returned elements.
        gen_limits: gradient-generation limits.
        limits: job limits (default: the pool's / process defaults).

    Raises:
        InvalidRequestError: ``skip``/``recompute``/``densify`` without ``ys``; bad inputs or
            fetch list.
        GradientError (and subclasses), InvalidNetError: gradient generation failed.
        ExecutionError, LimitExceededError: running or fetching failed (see :func:`run_job`).
    """
    from core.api import gradient_for_net

    check_fetch_names(fetch)
    full = net
    result = RunResult({})
    if ys:
        gen = gradient_for_net(net, ys, skip, limits=gen_limits, recompute=recompute,
                               densify=densify)
        full = with_gradient_ops(net, gen.grad_ops)
        result = RunResult({}, list(gen.grad_ops), dict(gen.grad_map), list(gen.diagnostics))
    elif skip or recompute:
        raise InvalidRequestError("skip and recompute apply only when ys is given")
    elif densify:
        raise InvalidRequestError("densify applies only when ys is given")
    args = (full.SerializeToString(), list(inputs), list(fetch), max_fetch_elements, limits)
    try:
        result.outputs = pool.submit(run_job, *args) if pool is not None else run_job(*args)
    except ExecutionError as exc:
        from core.ir.generators import explain_sparse_sum_failure

        explain_sparse_sum_failure(exc, result.diagnostics, result.grad_ops or [],
                                   offset=len(net.op))
        raise
    return result


__all__ = ["DEFAULT_MAX_FETCH_ELEMENTS", "RunResult", "run_job", "run_net"]
