"""Net-level numeric gradient verification: generated gradients vs central differences.

Source: Caffe2 ``gradient_checker.py`` (``GradientChecker``, ``NetGradientChecker``, spec
§6), reworked for a service:

* the loss is ``L = Σ_y <v_y, y>`` for fixed random float64 weights ``v_y``; each ``y`` gets
  an explicit seed gradient blob (``<y>_grad`` when free) fed with ``v_y``, so the generated
  net computes ``∇x L`` directly (upstream used all-ones seeds and ``Σ y``);
* float64 by default (fed float inputs are cast), step ``1e-6``; when a ``y`` is not float64
  (e.g. the net fills float32 constants) the default step is ``1e-3`` and a warning says so;
* **full** mode: every element of every checked input, ``(L(x+h·e_i) − L(x−h·e_i)) / 2h``;
* **fast** mode: a few random unit directions ``u`` per input (``passes``, default 3),
  comparing ``<∇x L, u>`` with ``(L(x+h·u) − L(x−h·u)) / 2h``: the cost does not grow with
  the input size (in the spirit of gradcheck's fast mode);
* an element passes when ``|analytic − numeric| <= atol + rtol·|numeric|`` (``np.isclose``);
* points where the net is not differentiable (a ``Relu``/``LeakyRelu``/``PRelu``/``Abs``
  input within ``10·step`` of 0, a ``MaxPool`` window whose two largest values are within
  ``10·step``; for the issue-8b ops, Clip bounds, Max/Min ties and the others listed in
  :mod:`core.verify.kinks`) are found by scanning the forward run and reported as a warning
  and a note on each blob report - a mismatch there is expected, not a silent failure;
* inputs are snapshotted before anything runs and fed read-only, so in-place ops such as
  ``Relu(X -> X)`` cannot corrupt the values the checker perturbs (bug-cases row 11).

Defaults: ``atol = 1e-5``, ``rtol = 1e-3``, ``step = 1e-6`` (float64). Central differences
have truncation error ``O(h²)`` and rounding error about ``ε·|L| / h`` ≈ ``1e-10·|L|`` in
float64, far below ``atol`` for losses of moderate size.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from api_schemas import caffe2_pb2
from core.api import gradient_for_net
from core.errors import ExecutionError, InvalidRequestError
from core.executor.executor import ExecContext, feed_blobs, validate_net
from core.executor.limits import RunLimits, default_limits, element_cap
from core.executor.workspace import Workspace
from core.ir.dataflow import written_before_read
from core.ir.generators import explain_sparse_sum_failure
from core.registry import with_gradient_ops
from core.types import Diagnostic, GradientSlice, GradValue
from core.verify.by_design import no_gradient_by_design
from core.verify.compare import fast_report, full_report
from core.verify.kinks import KINK_MARGIN, KinkScanner, kink_diagnostics
from core.verify.seeding import adopt_auto_seeds, seed_names
from core.verify.specs import (  # the request and report types are re-exported (__all__)
    MODES,
    BlobReport,
    InputSpec,
    RandomSpec,
    TensorSpec,
    VerifyOptions,
    VerifyReport,
    VerifyResult,
    check_step_resolution,
    finite_check_list,
    is_float_dtype,
    large_step_warning,
    materialize_inputs,
)

NetDef = caffe2_pb2.NetDef
OperatorDef = caffe2_pb2.OperatorDef

#: Most random directions one fast-mode check may take per input.
MAX_PASSES = 1000


# --- the job --------------------------------------------------------------------------------
@dataclass
class _Job:
    """Everything the numeric check needs; picklable for the worker pool."""

    net: bytes
    grad_ops: list[bytes]
    grad_map: dict[str, GradValue]
    seeds: dict[str, str]
    options: VerifyOptions
    limits: RunLimits | None
    #: the caller named ``options.check`` (else netgrad chose it: see _default_check)
    check_given: bool = True
    #: each gradient op's index in the caller's list (seed fills adopted: adopt_auto_seeds)
    positions: list[int] | None = None


def _run(ctx: ExecContext, net: NetDef, feeds: Mapping[str, np.ndarray], prefix: str = "",
         then: NetDef | None = None, positions: list[int] | None = None) -> Workspace:
    ws = Workspace()
    for name, arr in feeds.items():
        ws.set(name, arr)  # read-only arrays: no copy needed, kernels cannot mutate them
    ctx.run_net(net, ws, prefix)
    if then is not None:
        ctx.run_net(then, ws, "grad_ops/", positions)
    return ws


def _loss(ctx: ExecContext, net: NetDef, feeds: Mapping[str, np.ndarray],
          weights: Mapping[str, np.ndarray]) -> float:
    ws = _run(ctx, net, feeds)
    total = 0.0
    for y, v in weights.items():
        yv = np.asarray(ws.get(y), dtype=np.float64)
        with np.errstate(invalid="ignore"):
            # weight 0 marks an element non-finite in the unperturbed run: left out (±inf·0)
            total += float(np.sum(np.where(v != 0, v * yv, 0.0)))
    ws.release()  # one run per perturbation: free saved sub-workspaces (cycles) at once
    return total


def _readonly(arr: np.ndarray) -> np.ndarray:
    """A read-only view: a kernel that mutated its input would fail instead of corrupting it."""
    view = np.asarray(arr).view()  # asarray: a 0-d input arrives as a NumPy scalar
    view.flags.writeable = False
    return view


def _analytic(ws: Workspace, blob: str, g: GradValue, x: np.ndarray) -> np.ndarray:
    """The analytic gradient of ``blob`` as a dense float64 array shaped like ``x``.

    A GradientSlice is made dense as Caffe2's consumers of one read it: every index must name
    a row (NumPy would wrap a negative one, which no Caffe2 consumer does; review, stop 24).

    Raises:
        ExecutionError: gradient blob missing or of a different shape, or a slice index out
            of ``[0, rows)``.
    """
    if isinstance(g, GradientSlice):
        idx = np.asarray(ws.get(g.indices)).astype(np.int64).reshape(-1)
        vals = np.asarray(ws.get(g.values), dtype=np.float64)
        rows = x.shape[0] if x.ndim else 0
        if idx.size and (idx.min() < 0 or idx.max() >= rows):
            raise ExecutionError(
                f"the sparse gradient of '{blob}' names rows {sorted(set(idx.tolist()))[:8]}, "
                f"outside [0, {rows}): it does not apply to '{blob}'")
        dense = np.zeros(x.shape, dtype=np.float64)
        np.add.at(dense, idx, vals.reshape((idx.size,) + x.shape[1:]))
        return dense
    if g is None:
        raise ExecutionError(f"input '{blob}' has no gradient")
    a = np.asarray(ws.get(g), dtype=np.float64)
    if a.shape != x.shape:
        raise ExecutionError(
            f"Mismatched gradient shapes: input '{blob}' has shape {list(x.shape)}, its "
            f"gradient '{g}' has shape {list(a.shape)}"
        )
    return a


@dataclass
class _Prepared:
    """The state every numeric check of a job starts from (see :func:`_prepare`)."""

    net: NetDef
    feeds: dict[str, np.ndarray]
    check: list[str]
    ctx: ExecContext
    weights: dict[str, np.ndarray]
    step: float
    diagnostics: list[Diagnostic]
    kink_note: str
    grad_ws: Workspace | None


def _feeds(job: _Job, limits: RunLimits) -> dict[str, np.ndarray]:
    """The fed inputs of ``job``: materialized, cast to float64 if asked, read-only."""
    opts = job.options
    feeds = materialize_inputs(opts.inputs, opts.seed, limits)
    if opts.cast_float64:
        feeds = {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in feeds.items()}
    return {k: _readonly(v) for k, v in feeds.items()}  # snapshot (bug-cases row 11)


def _prepare(job: _Job, limits: RunLimits, rng: np.random.Generator,
             with_gradient: bool = True) -> _Prepared:
    """Validate, feed, run the forward net (kink scan), draw the loss weights, pick the step
    and (``with_gradient``) run the gradient net. Call inside ``element_cap(limits)``."""
    opts = job.options
    net = NetDef.FromString(job.net)
    grad_net = NetDef(name=f"{net.name}_grad")
    for raw in job.grad_ops:
        grad_net.op.append(OperatorDef.FromString(raw))
    validate_net(net)
    validate_net(grad_net, "grad_ops/", job.positions)
    diagnostics: list[Diagnostic] = []

    feeds = _feeds(job, limits)
    ws_probe = Workspace()
    feed_blobs(ws_probe, feeds, limits)  # validates dtypes and sizes
    check = list(opts.check) if opts.check is not None else [
        k for k, v in feeds.items() if v.dtype.kind == "f"
    ]
    if len(set(check)) != len(check):
        twice = sorted({b for b in check if check.count(b) > 1})
        raise InvalidRequestError.at(
            f"check names {', '.join(repr(b) for b in twice)} more than once; give each "
            "input blob once", path="check")
    for i, blob in enumerate(check):
        if blob not in feeds:
            raise InvalidRequestError.at(f"check names '{blob}', which is not a fed input",
                                         path=f"check[{i}]", blobs=[blob])
        if feeds[blob].dtype.kind != "f":
            raise InvalidRequestError.at(f"check names '{blob}', which is not a float input",
                                         path=f"check[{i}]", blobs=[blob])
    check, skipped = finite_check_list(feeds, check, job.check_given, list(opts.inputs))
    diagnostics += skipped

    ctx = ExecContext(limits)
    scanner = KinkScanner()
    base_ctx = ExecContext(limits, ctx.deadline, scanner)
    base = _run(base_ctx, net, feeds)
    weights: dict[str, np.ndarray] = {}
    all_f64 = True
    for y in job.seeds:
        yv = base.get(y)
        if not isinstance(yv, np.ndarray) or yv.dtype.kind != "f":
            kind = getattr(yv, "dtype", type(yv).__name__)
            raise InvalidRequestError(f"y '{y}' is {kind}, not a float tensor")
        all_f64 = all_f64 and bool(yv.dtype == np.float64)
        weights[y] = np.asarray(rng.standard_normal(yv.shape))
        finite = np.isfinite(yv)
        if not finite.all():  # e.g. SequenceMask's default fill -inf (review f1, 4c)
            weights[y] = np.where(finite, weights[y], 0.0)
            diagnostics.append(Diagnostic(
                "warning", "non_finite_output",
                f"{int(finite.size - finite.sum())} element(s) of y '{y}' are infinite or NaN "
                "in the unperturbed run; they are left out of the loss (weight 0, zero seed "
                "gradient), so the check covers the finite elements only",
                blobs=(y,),
            ))
    if job.seeds and not any(np.any(w != 0) for w in weights.values()):
        # Every output element left out: the loss is constant, so any gradient would "pass"
        # (e.g. a float32 input that overflowed to inf). Never a pass from nothing compared.
        names = ", ".join(f"'{y}'" for y in job.seeds)
        shapes = ", ".join(f"shape {list(np.shape(w))}" for w in weights.values())
        empty = all(np.size(w) == 0 for w in weights.values())  # (an empty batch: N = 0)
        raise InvalidRequestError.at(
            f"{names} {'has' if len(job.seeds) == 1 else 'have'} no elements ({shapes}): the "
            "loss is empty, so there is nothing to compare; give inputs with a non-empty batch"
            if empty else f"no element of {names} is finite (or has a nonzero weight) in the "
            "unperturbed run: there is nothing to compare; give inputs for which some output "
            "element is finite", path="ys", blobs=list(job.seeds), code="no_finite_output")
    step = opts.step if opts.step is not None else (1e-6 if all_f64 else 1e-3)
    if not check:  # (never a pass from nothing checked)
        why = [d for d in diagnostics if d.code.startswith("not_checked")][:5]
        ints = sorted(b for b, v in feeds.items() if v.dtype.kind != "f")[:5]
        said = "; ".join([d.message for d in why]
                         + ([f"not float inputs: {', '.join(map(repr, ints))}"] if ints else []))
        raise InvalidRequestError.at(
            "no input is left to check (none fed, or all non-finite or without a gradient by "
            f"design{': ' + said if said else ''}): name float inputs in `check`",
            path="check", blobs=[*(b for d in why for b in d.blobs), *ints],
            code="nothing_to_check")
    check_step_resolution(feeds, check, step)
    large = large_step_warning(feeds, check, step)
    if large is not None:
        diagnostics.append(large)
    if not all_f64:
        diagnostics.append(Diagnostic(
            "warning", "low_precision_output",
            "an output is not float64 (the net computes in lower precision): finite "
            f"differences use step {step} and may be inexact",
            blobs=tuple(y for y in job.seeds if base.get(y).dtype != np.float64),
        ))
    diagnostics.extend(_half_precision(base, step))
    kink_note = kink_diagnostics(scanner.found, KINK_MARGIN * step, diagnostics)
    grad_ws = None
    if with_gradient:
        seeds = {
            job.seeds[y]: _readonly(w.astype(base.get(y).dtype)) for y, w in weights.items()
        }
        grad_ws = _run(ctx, net, {**feeds, **seeds}, then=grad_net, positions=job.positions)
        for name, value in grad_ws.items():  # e.g. RecurrentNetwork step workspaces (issue 9)
            saved = getattr(value, "saved_report", None)
            if callable(saved):
                diagnostics.append(Diagnostic("info", "saved_step_workspaces", saved(),
                                              blobs=(name,)))
    return _Prepared(net, feeds, check, ctx, weights, step, diagnostics, kink_note, grad_ws)


def _analytic_or_report(p: _Prepared, job: _Job, blob: str) -> tuple[
        np.ndarray | None, str, BlobReport | None]:
    """The analytic gradient of ``blob`` and a note, or the failed report when it is missing."""
    x = p.feeds[blob]
    g = job.grad_map.get(blob)
    gname = ",".join(g) if isinstance(g, GradientSlice) else g
    if g is None:
        note = "no gradient was generated: the analytic gradient is taken as zero"
        return np.zeros(x.shape, dtype=np.float64), note, None
    try:
        if p.grad_ws is None:
            raise ExecutionError("the gradient net was not run")
        return _analytic(p.grad_ws, blob, g, x), "", None
    except ExecutionError as exc:
        return None, "", BlobReport(blob, False, math.inf, math.inf, None, None, None,
                                    gname, 0, bool(p.kink_note), exc.message + _unwritten(job, g))


def _half_precision(base: Workspace, step: float) -> list[Diagnostic]:
    """A warning naming the float16 blobs of the unperturbed run, if any.

    A value rounded to float16 (relative spacing 2^-10) takes a step of ``step`` only on the
    float16 grid: elsewhere ``x + h`` and ``x - h`` round to the same or to a neighbouring
    value, so the central difference is mostly rounding and a correct gradient can fail.
    """
    names = sorted(n for n, v in base.items()
                   if isinstance(v, np.ndarray) and v.dtype == np.float16)
    if not names:
        return []
    shown = ", ".join(f"'{n}'" for n in names[:5]) + (" ..." if len(names) > 5 else "")
    return [Diagnostic(
        "warning", "half_precision_blob",
        f"the net computes {shown} in float16: a finite difference of step {step:g} through "
        "them is mostly rounding, so a correct gradient may fail the check. Where the float16 "
        "cast reads a fed input, use mode \"full\" (one input element at a time), inputs on "
        "the float16 grid (e.g. multiples of 2^-8 in [0.25, 1)), tolerances.step 2^-8 "
        "(0.00390625) and rtol 2e-3 for an exact check; where it reads a computed value no "
        "step is exact: judge a failure against float16's relative precision (about 1e-3)",
        blobs=tuple(names[:5]))]


def _unwritten(job: _Job, g: GradValue) -> str:
    """``; ...`` when ``job`` checks given gradient ops and none of them writes ``g``."""
    if job.positions is None or g is None:
        return ""
    names = {g.indices, g.values} if isinstance(g, GradientSlice) else {g}
    for data in job.grad_ops:
        op = OperatorDef()
        op.ParseFromString(data)
        if names & set(op.output):
            return ""
    return ("; no op of the given grad_ops writes it (the gradient map comes from "
            "generation): the gradient op that writes it is missing, or lost that output")


def _finish(rep: BlobReport, job: _Job, blob: str, note: str, kink_note: str,
            shape: Sequence[int]) -> BlobReport:
    g = job.grad_map.get(blob)
    rep.gradient = ",".join(g) if isinstance(g, GradientSlice) else g
    rep.nondifferentiable = bool(kink_note)
    empty = (f"the input has no elements (shape {list(shape)}): nothing of it was checked"
             if math.prod(shape) == 0 else "")
    notes = [n for n in (rep.note, note, empty, kink_note if not rep.passed else "") if n]
    rep.note = "; ".join(notes)
    return rep


def run_check(job: _Job) -> tuple[VerifyReport, list[Diagnostic]]:
    """The numeric part of :func:`verify_net` (runs in a worker or in-process).

    Raises:
        InvalidRequestError: bad inputs, a checked blob that is not fed, a non-float ``y``.
        ExecutionError, LimitExceededError, InvalidNetError: from running the nets.
    """
    opts = job.options
    limits = job.limits or default_limits()
    rng = np.random.default_rng(opts.seed)
    with element_cap(limits):
        p = _prepare(job, limits, rng)
        reports: list[BlobReport] = []
        analytic: list[np.ndarray] = []
        for blob in p.check:
            x = p.feeds[blob]
            a, note, failed = _analytic_or_report(p, job, blob)
            if failed is not None:
                reports.append(failed)
                continue
            if a is None:  # pragma: no cover - a report is given whenever a is None
                continue

            def loss_at(xv: np.ndarray, name: str = blob) -> float:
                return _loss(p.ctx, p.net, {**p.feeds, name: _readonly(xv)}, p.weights)

            if opts.mode == "full":
                num = full_numeric(x, loss_at, p.step, 0, x.size)
                rep = full_report(blob, x, a, num, opts.atol, opts.rtol)
            else:
                rep = _fast(blob, x, a, loss_at, p.step, opts, rng)
            reports.append(_finish(rep, job, blob, note, p.kink_note, x.shape))
            analytic.append(a)
    report = VerifyReport(all(r.passed for r in reports), opts.mode, p.step, opts.atol,
                          opts.rtol, reports)
    return report, p.diagnostics + vacuous_pass(reports, analytic)


def vacuous_pass(reports: Sequence[BlobReport], analytic: Sequence[np.ndarray]
                 ) -> list[Diagnostic]:
    """A warning when the check passed only because every gradient it compared is 0.

    The loss then does not vary with any checked input at these values (an empty batch, a
    Relu whose inputs are all negative, an output that does not depend on the inputs): the
    pass shows only that the gradient is 0 there (a nonzero one would fail; a maker wrong
    at other values passes). :func:`core.verify.compare.blind_scale` leaves this case out.

    Args:
        reports: the blob reports of the check.
        analytic: the analytic gradient of each blob that was compared (any shape).
    """
    if not reports or not all(r.passed for r in reports):
        return []
    if any(r.max_abs_error != 0 for r in reports) or any(np.any(a != 0) for a in analytic):
        return []
    names = ", ".join(r.blob for r in reports)
    return [Diagnostic(
        "warning", "vacuous_check",
        f"every gradient compared ({names}) is exactly 0, analytic and numeric: the loss does "
        "not vary with the checked inputs at these values (an empty batch, inputs where every "
        "path is cut off), so the pass only shows the gradient is 0 here, and a gradient that "
        "is wrong at other values would pass as well; give inputs the loss depends on",
        blobs=tuple(r.blob for r in reports))]


def full_numeric(x: np.ndarray, loss_at: Any, step: float, lo: int, hi: int) -> np.ndarray:
    """Central differences ``(L(x+h·e_i) − L(x−h·e_i)) / (x_i⁺ − x_i⁻)`` for flat ``lo <= i <
    hi`` (float64, ``hi - lo`` values); each element is perturbed alone, so any split of the
    range into chunks gives the same values (full-mode fan-out)."""
    out = np.zeros(hi - lo, dtype=np.float64)
    work = np.array(x, dtype=x.dtype, copy=True)
    flat = work.reshape(-1)
    for i in range(lo, hi):
        orig = flat[i]
        flat[i] = orig + step
        hi_v = float(flat[i])  # the step actually taken (rounded in low precision)
        plus = loss_at(work)
        flat[i] = orig - step
        lo_v = float(flat[i])
        minus = loss_at(work)
        flat[i] = orig
        if hi_v == lo_v:  # (check_step_resolution refuses it before any chunk runs)
            raise InvalidRequestError.at(f"a step of {step:g} is lost at element {i}",
                                         path="tolerances.step", code="step_below_resolution")
        out[i - lo] = (plus - minus) / (hi_v - lo_v)
    return out


def _fast(blob: str, x: np.ndarray, a: np.ndarray, loss_at: Any, step: float,
          opts: VerifyOptions, rng: np.random.Generator) -> BlobReport:
    an: list[float] = []
    nu: list[float] = []
    for _ in range(opts.passes):
        u = rng.standard_normal(x.shape)
        norm = float(np.linalg.norm(u))
        u = u / norm if norm > 0 else u
        xp = (x + step * u).astype(x.dtype)
        xm = (x - step * u).astype(x.dtype)
        # directional derivatives along the step actually taken: <∇L, xp − xm> / 2h
        an.append(float(np.sum(a * (xp.astype(np.float64) - xm))) / (2 * step))
        nu.append((loss_at(xp) - loss_at(xm)) / (2 * step))
    return fast_report(blob, x.size, an, nu, opts.atol, opts.rtol)


def _validate(opts: VerifyOptions) -> None:
    if opts.mode not in MODES:
        raise InvalidRequestError.at(f"mode must be 'fast' or 'full', got {opts.mode!r}",
                                     path="mode")
    if opts.step is not None and not (opts.step > 0 and math.isfinite(opts.step)):
        raise InvalidRequestError.at(f"step must be a positive number, got {opts.step}",
                                     path="tolerances.step")
    if not (0 <= opts.atol < math.inf and 0 <= opts.rtol < 1):  # (else a wrong one passes)
        bad = "atol" if not 0 <= opts.atol < math.inf else "rtol"
        raise InvalidRequestError.at(
            f"atol must be finite and >= 0 and rtol in [0, 1), got atol {opts.atol}, rtol "
            f"{opts.rtol} (looser passes a wrong gradient)", path=f"tolerances.{bad}")
    if not 1 <= opts.passes <= MAX_PASSES:
        raise InvalidRequestError.at(f"passes must be in 1..{MAX_PASSES}, got {opts.passes}",
                                     path="passes")
    if opts.seed < 0:
        raise InvalidRequestError.at(f"seed must be >= 0, got {opts.seed}", path="seed")


def verify_net(
    net: NetDef,
    ys: Sequence[str] | Mapping[str, GradValue],
    options: VerifyOptions,
    *,
    skip: int = 0,
    grad_ops: Sequence[OperatorDef] | None = None,
    pool: Any = None,
    limits: RunLimits | None = None,
    recompute: bool = False,
    densify: bool = False,
    runner: Callable[[_Job], tuple[VerifyReport, list[Diagnostic]]] | None = None,
) -> VerifyResult:
    """Generate the gradient of ``net`` and check it against central differences.

    Gradient generation (``core.api.gradient_for_net`` with an explicit seed name per ``y``)
    runs in the calling process; the numeric work runs in ``pool`` when given (a
    :class:`core.executor.pool.WorkerPool`), else in-process.

    Args:
        net: forward NetDef.
        ys: outputs of the loss ``L = Σ_y <v_y, y>`` (list, or map y -> seed gradient name).
        options: inputs, mode, tolerances (see :class:`VerifyOptions`).
        skip: ignore the first ``skip`` ops for gradient generation (they still run).
        grad_ops: check these gradient ops instead of the generated ones (the grad map still
            comes from generation) - e.g. to prove that a tampered op is caught. Leading
            all-ones seed ops, as ``/v1/gradients/net`` emits for list ``ys``, are adopted.
        pool: worker pool for the numeric work.
        limits: job limits (default: the pool's / process defaults).
        recompute: generate with ``recompute`` (see :func:`core.api.gradient_for_net`).
        densify: generate with ``densify`` (see :func:`core.api.gradient_for_net`).
        runner: runs the numeric job instead of ``pool`` (e.g. the fan-out of
            :func:`core.verify.fanout.numeric`).

    Returns:
        The report, the gradient ops checked, the grad map and diagnostics.

    Raises:
        InvalidRequestError: bad options, inputs or ys.
        GradientError (and subclasses): gradient generation failed.
        ExecutionError, LimitExceededError, InvalidNetError: running the nets failed.
    """
    _validate(options)
    seeds = seed_names(net, ys, [s.blob for s in options.inputs])
    ops, positions = (None, None) if grad_ops is None else adopt_auto_seeds(list(grad_ops), seeds)
    gen = gradient_for_net(net, dict(seeds), skip, recompute=recompute, densify=densify)
    if ops is None:
        ops = list(gen.grad_ops)
    # A fed blob the net overwrites before reading it has no gradient, whatever the map
    # says of the blob's later versions.
    overwritten = written_before_read(net.op)
    checked_map = {b: g for b, g in gen.grad_map.items() if b not in overwritten}
    # The forward ops as return_net gives them (a RecurrentNetwork carries its generated
    # backward_step_net, so it keeps the step workspaces its gradient op needs).
    fwd = with_gradient_ops(net, ops)
    del fwd.op[len(net.op):]
    check_given = options.check is not None
    options, skipped = _default_check(net, skip, checked_map, options)
    job = _Job(
        fwd.SerializeToString(),
        [op.SerializeToString() for op in ops],
        checked_map,
        seeds,
        dataclasses.replace(options),
        limits,
        check_given,
        positions,
    )
    given = ops if grad_ops is None else list(grad_ops)  # (problems index the caller's list)
    try:
        if runner is not None:
            report, diags = runner(job)
        elif pool is not None:
            report, diags = pool.submit(run_check, job)
        else:
            report, diags = run_check(job)
    except ExecutionError as exc:
        explain_sparse_sum_failure(exc, gen.diagnostics, given, prefix="grad_ops/")
        raise
    return VerifyResult(report, given, dict(gen.grad_map),
                        list(gen.diagnostics) + skipped + diags)


def _default_check(
    net: NetDef, skip: int, grad_map: Mapping[str, GradValue], options: VerifyOptions
) -> tuple[VerifyOptions, list[Diagnostic]]:
    """Leave inputs without a gradient by design out of the default check list.

    Only when ``options.check`` is not given; see :mod:`core.verify.by_design` for the
    rules. Each input left out gets an ``info`` diagnostic ``not_checked_no_gradient``.
    """
    if options.check is not None:
        return options, []
    floats: list[str] = []
    for spec in options.inputs:
        src = spec.tensor if spec.tensor is not None else spec.random
        if src is not None and is_float_dtype(src.dtype):  # (double, DOUBLE, FLOAT too)
            floats.append(spec.blob)
    by_design = no_gradient_by_design(net.op, skip, grad_map, floats)
    if not by_design:
        return options, []
    notes = [Diagnostic("info", "not_checked_no_gradient", note, blobs=(blob,))
             for blob, note in by_design.items()]
    check = [b for b in dict.fromkeys(floats) if b not in by_design]
    return dataclasses.replace(options, check=check), notes


__all__ = [
    "BlobReport",
    "InputSpec",
    "RandomSpec",
    "TensorSpec",
    "VerifyOptions",
    "VerifyReport",
    "VerifyResult",
    "materialize_inputs",
    "run_check",
    "seed_names",
    "verify_net",
]
