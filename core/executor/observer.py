"""What a worker pool reports about itself, for whoever watches it (metrics, readiness).

The pool calls a :class:`PoolObserver` at a few points of a job's life and when it replaces
a worker; it knows nothing of what the observer does with the calls (``app/`` turns them
into Prometheus metrics). The observer is called on the thread that ran
:meth:`~core.executor.pool.WorkerPool.submit` and must return quickly and never raise.

:func:`limit_of` names the job limit an error reports, from the problem codes the limits of
:mod:`core.executor.limits`, :mod:`core.control.runtime` and the pool itself raise.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import LimitExceededError

#: Problem code -> the job limit it reports (the label values of "jobs ended by a limit").
LIMIT_CODES: dict[str, str] = {
    "wall_clock_exceeded": "wall_clock",
    "memory_exceeded": "memory",
    "tensor_too_large": "elements",
    "loop_limit_exceeded": "iterations",
}
#: Every limit name :func:`limit_of` can return, in a fixed order.
LIMITS: tuple[str, ...] = ("wall_clock", "memory", "elements", "iterations")
#: Why a worker was replaced: it died (crash, kill, OOM killer), ran past the wall clock,
#: exhausted its memory limit, or could not load jobs.
REPLACE_REASONS: tuple[str, ...] = ("crashed", "wall_clock", "memory", "broken", "recycled")


def limit_of(exc: BaseException | None) -> str | None:
    """The job limit ``exc`` reports (one of :data:`LIMITS`), or ``None``.

    Only :class:`~core.errors.LimitExceededError` counts; its own code and its problems'
    codes are looked up in :data:`LIMIT_CODES` (the first known one wins).
    """
    if not isinstance(exc, LimitExceededError):
        return None
    for code in (exc.code, *(p.code for p in exc.problems)):
        if code in LIMIT_CODES:
            return LIMIT_CODES[code]
    return None


def outcome_of(exc: BaseException | None) -> str:
    """``"ok"``, ``"limit"`` (a job limit stopped it, see :func:`limit_of`) or ``"error"``
    (anything else: an error the job raised, a crashed worker, a closed pool)."""
    if exc is None:
        return "ok"
    return "limit" if limit_of(exc) is not None else "error"


@dataclass(frozen=True)
class PoolStatus:
    """A snapshot of a pool.

    Attributes:
        size: configured worker processes.
        alive: worker processes running now.
        ready: of those, the ones that finished starting (imports done) or run a job.
        busy: workers running a job.
        waiting: :meth:`submit` calls waiting for an idle worker (the queue depth).
    """

    size: int
    alive: int
    ready: int
    busy: int
    waiting: int


class PoolObserver:
    """Receives a pool's events; every method does nothing here (subclass what you need)."""

    def job_started(self) -> None:
        """A job was handed to a worker."""

    def job_ended(self, seconds: float, exc: BaseException | None) -> None:
        """A job that :meth:`job_started` reported ended after ``seconds`` (wall clock, s);
        ``exc`` is what :meth:`submit` raises (``None`` on success); see :func:`limit_of`."""

    def worker_replaced(self, reason: str) -> None:
        """A worker was replaced by a new process; ``reason`` is one of
        :data:`REPLACE_REASONS`."""

    def waiting_changed(self, delta: int) -> None:
        """The number of submits waiting for an idle worker changed by ``delta`` (+1/-1)."""
