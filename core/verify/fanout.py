"""Full-mode verification fanned out over an executor backend, assembled deterministically.

A full-mode check costs two net runs per input element (spec §6, ``(L(x+h·e_i) −
L(x−h·e_i)) / 2h``), and each element is independent of the others. So the check splits into

1. one *prepare* job: the forward run (kink scan), the loss weights, the step and the
   gradient run, giving the analytic gradient of every checked blob
   (:func:`core.verify.checker._prepare`, the same code as the single-process check);
2. one *chunk* job per range of flat element indices of a checked blob, each computing the
   central differences of its range (:func:`core.verify.checker.full_numeric`, the same
   loop as the single-process check, so each value is bit-for-bit the same);
3. assembly in the server: the chunks are concatenated in blob and index order and reported
   by :func:`core.verify.checker.full_report`, exactly as the single-process check does.

The answer is therefore byte-identical to :func:`core.verify.checker.run_check` run in one
process, whatever the number of chunks or the order they finish in. On a
:class:`~core.executor.backends.RayBackend` the chunks spread over every CPU of the cluster;
on the pool, over its workers. Each job (prepare or chunk) has the full per-job limits.
Fast mode and small checks run as one job (:func:`numeric` decides).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from core.executor.backends import Cancelled, Progress, as_backend
from core.executor.executor import ExecContext
from core.executor.limits import default_limits, element_cap
from core.types import Diagnostic
from core.verify.checker import (
    NetDef,
    _feeds,
    _finish,
    _Job,
    _loss,
    _prepare,
    _readonly,
    full_numeric,
    full_report,
    run_check,
    vacuous_pass,
)
from core.verify.specs import BlobReport, VerifyReport, is_float_dtype

#: Full checks of fewer elements than this run as one job (the fan-out costs a few jobs).
FANOUT_MIN_ELEMENTS = 512
#: Chunks per slot of the backend, so a slow chunk does not leave the other slots idle.
CHUNKS_PER_SLOT = 4
#: Seconds of net runs one chunk aims at (from the prepare job's timing of one run): long
#: enough that a task's fixed cost (about 1-2 ms on Ray, plus shipping the inputs) is small,
#: short enough that a cancel or the progress count does not wait long.
TARGET_CHUNK_S = 1.0
#: Fewest elements of one chunk (each chunk re-materializes the inputs).
MIN_CHUNK = 16
#: Most elements of one chunk, whatever the timing says.
MAX_CHUNK = 4096


@dataclass
class _BlobPlan:
    blob: str
    shape: tuple[int, ...]
    analytic: np.ndarray | None
    note: str
    failed: BlobReport | None


@dataclass
class FullPlan:
    """What the prepare job returns: everything but the central differences.

    Attributes:
        step: finite-difference step.
        weights: loss weights ``v_y`` (float64), as drawn by the single-process check.
        diagnostics: low-precision and non-differentiability diagnostics.
        kink_note: the note for blobs that fail near a kink.
        blobs: per checked blob, in check order: shape, analytic gradient (float64) and
            note, or the failed report when the analytic gradient is missing.
        run_seconds: wall-clock seconds of one loss evaluation (one forward run) in the
            prepare job, the faster of two; sizes the chunks (0: unknown).
        chunk_s: seconds of runs a chunk aims at: :data:`TARGET_CHUNK_S`, or a quarter of
            the per-job wall-clock limit when that is shorter.
    """

    step: float
    weights: dict[str, np.ndarray]
    diagnostics: list[Diagnostic]
    kink_note: str
    blobs: list[_BlobPlan]
    run_seconds: float = 0.0
    chunk_s: float = TARGET_CHUNK_S


def prepare_full(job: _Job) -> FullPlan:
    """Prepare job of a fanned-out full check (runs in a worker; errors as for run_check)."""
    from core.verify.checker import _analytic_or_report

    limits = job.limits or default_limits()
    rng = np.random.default_rng(job.options.seed)
    with element_cap(limits):
        p = _prepare(job, limits, rng)
        blobs = []
        for blob in p.check:
            a, note, failed = _analytic_or_report(p, job, blob)
            blobs.append(_BlobPlan(blob, tuple(p.feeds[blob].shape), a, note, failed))
        run_seconds = math.inf
        for _ in range(2):
            start = time.perf_counter()
            _loss(p.ctx, p.net, p.feeds, p.weights)
            run_seconds = min(run_seconds, time.perf_counter() - start)
    return FullPlan(p.step, p.weights, p.diagnostics, p.kink_note, blobs, run_seconds,
                    min(TARGET_CHUNK_S, limits.wall_clock_s / 4))


def full_chunk(job: _Job, weights: Mapping[str, np.ndarray], step: float, blob: str, lo: int,
               hi: int) -> np.ndarray:
    """Chunk job: central differences of flat elements ``lo:hi`` of ``blob`` (float64)."""
    limits = job.limits or default_limits()
    with element_cap(limits):
        net = NetDef.FromString(job.net)
        feeds = _feeds(job, limits)
        ctx = ExecContext(limits)

        def loss_at(xv: np.ndarray) -> float:
            return _loss(ctx, net, {**feeds, blob: _readonly(xv)}, weights)

        return full_numeric(feeds[blob], loss_at, step, lo, hi)


def estimated_elements(job: _Job) -> int:
    """Elements a full check of ``job`` perturbs, from the input specs' shapes (no data)."""
    opts = job.options
    total = 0
    for spec in opts.inputs:
        t = spec.tensor or spec.random
        if t is None or not is_float_dtype(t.dtype):
            continue
        if opts.check is not None and spec.blob not in opts.check:
            continue
        total += math.prod(int(d) for d in t.shape)
    return total


def chunk_size(plan: FullPlan, slots: int) -> int:
    """Elements per chunk: about ``plan.chunk_s`` of runs (two per element), at least
    :data:`CHUNKS_PER_SLOT` chunks per slot, within ``MIN_CHUNK..MAX_CHUNK``.

    Any size gives the same report (each element is perturbed alone); only the number of
    jobs, and so the progress count, depends on the timing.
    """
    total = sum(math.prod(b.shape) for b in plan.blobs if b.failed is None)
    by_slots = -(-total // max(1, slots * CHUNKS_PER_SLOT))
    by_time = (int(plan.chunk_s / (2 * plan.run_seconds)) if plan.run_seconds > 0
               else MAX_CHUNK)
    return max(MIN_CHUNK, min(by_slots, by_time, MAX_CHUNK))


def chunk_ranges(plan: FullPlan, slots: int) -> list[tuple[str, int, int]]:
    """``(blob, lo, hi)`` ranges covering every checked element, in blob and index order."""
    sizes = [(b.blob, math.prod(b.shape)) for b in plan.blobs if b.failed is None]
    size = chunk_size(plan, slots)
    return [(blob, lo, min(lo + size, n)) for blob, n in sizes for lo in range(0, n, size)]


def numeric(job: _Job, executor: object, *, progress: Progress | None = None,
            cancelled: Cancelled | None = None,
            min_elements: int = FANOUT_MIN_ELEMENTS) -> tuple[VerifyReport, list[Diagnostic]]:
    """The numeric part of a verification on ``executor`` (a backend or a WorkerPool).

    Full checks of at least ``min_elements`` elements on a backend of more than one slot fan
    out (see the module docstring); anything else is one :func:`run_check` job.
    ``progress(done, total)`` counts jobs; ``cancelled()`` stops between jobs. Each job
    (prepare or chunk) has the backend's per-job limits.

    Raises:
        JobCancelledError: ``cancelled()`` became true.
        NetgradError: as :func:`core.verify.checker.run_check`.
    """
    backend = as_backend(executor)
    opts = job.options
    if opts.mode != "full" or backend.size < 2 or estimated_elements(job) < min_elements:
        report, diags = backend.map(run_check, [(job,)], on_done=progress,
                                    cancelled=cancelled)[0]
        return report, diags
    plan: FullPlan = backend.submit(prepare_full, job)
    ranges = chunk_ranges(plan, backend.size)
    total = len(ranges) + 1
    if progress is not None:
        progress(1, total)

    def step_done(done: int, _n: int) -> None:
        if progress is not None:
            progress(done + 1, total)

    parts = backend.map(full_chunk, [(job, plan.weights, plan.step, b, lo, hi)
                                     for b, lo, hi in ranges],
                        on_done=step_done, cancelled=cancelled)
    by_blob: dict[str, list[np.ndarray]] = {}
    for (blob, _lo, _hi), part in zip(ranges, parts, strict=True):
        by_blob.setdefault(blob, []).append(part)
    reports: list[BlobReport] = []
    analytic: list[np.ndarray] = []
    for b in plan.blobs:
        if b.failed is not None or b.analytic is None:
            if b.failed is not None:
                reports.append(b.failed)
            continue
        num = (np.concatenate(by_blob[b.blob]) if b.blob in by_blob
               else np.zeros(0, dtype=np.float64))
        x = np.broadcast_to(np.float64(0.0), b.shape)  # shape only
        rep = full_report(b.blob, x, b.analytic, num, opts.atol, opts.rtol)
        reports.append(_finish(rep, job, b.blob, b.note, plan.kink_note, b.shape))
        analytic.append(b.analytic)
    report = VerifyReport(all(r.passed for r in reports), opts.mode, plan.step, opts.atol,
                          opts.rtol, reports)
    return report, plan.diagnostics + vacuous_pass(reports, analytic)


__all__ = ["FullPlan", "chunk_ranges", "chunk_size", "estimated_elements", "full_chunk", "numeric",
           "prepare_full"]
