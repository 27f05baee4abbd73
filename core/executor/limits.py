"""Per-job execution limits: wall clock, address space, tensor size and loop iterations.

The limits exist so that a request can never hang or exhaust the service (issue 4,
"Isolation"). They are enforced in layers:

* ``max_elements`` - every tensor an op produces (and every ``shape`` argument it is given,
  checked *before* the kernel allocates) is capped, so ``ConstantFill(shape=[10**12])`` fails
  at once with a clear :class:`~core.errors.LimitExceededError`;
* ``max_loop_iterations`` - one run of a ``While`` op stops with an error at this many
  iterations (an infinite loop is stopped by the limit, not by luck);
* ``wall_clock_s`` - checked between ops in-process (a cooperative deadline) and enforced
  hard by :class:`core.executor.pool.WorkerPool`, which kills the worker;
* ``memory_bytes`` - the worker's address space (``RLIMIT_AS``), set in each worker process.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from core.errors import InvalidRequestError, LimitExceededError
from core.types import Diagnostic


@dataclass(frozen=True)
class RunLimits:
    """Limits of one execution job.

    Attributes:
        wall_clock_s: seconds a job may run (in-process between ops; hard kill in the pool).
        memory_bytes: address-space limit (``RLIMIT_AS``) of a worker process. It counts
            virtual memory, so it includes the ~0.5-1 GiB the interpreter, NumPy and BLAS
            reserve at start-up.
        max_elements: most elements any single tensor may hold.
        max_loop_iterations: most iterations of one run of a ``While`` op.
    """

    wall_clock_s: float = 30.0
    memory_bytes: int = 4 * 1024**3
    max_elements: int = 100_000_000
    max_loop_iterations: int = 100_000

    def __post_init__(self) -> None:
        if not self.wall_clock_s > 0:
            raise InvalidRequestError(f"wall_clock_s must be > 0, got {self.wall_clock_s}")
        if self.memory_bytes <= 0:
            raise InvalidRequestError(f"memory_bytes must be > 0, got {self.memory_bytes}")
        if self.max_elements <= 0:
            raise InvalidRequestError(f"max_elements must be > 0, got {self.max_elements}")
        if self.max_loop_iterations < 0:
            raise InvalidRequestError(
                f"max_loop_iterations must be >= 0, got {self.max_loop_iterations}"
            )

    def deadline(self) -> float:
        """``time.monotonic()`` value at which a job started now runs out of time."""
        return time.monotonic() + self.wall_clock_s


_default = RunLimits()


def default_limits() -> RunLimits:
    """The process-wide default limits (a worker process sets its pool's limits here)."""
    return _default


def set_default_limits(limits: RunLimits) -> None:
    """Replace the process-wide default limits (used by pool workers at start-up)."""
    global _default
    _default = limits


def check_elements(
    n: int, what: str, limits: RunLimits, path: str | None = None, blobs: tuple[str, ...] = ()
) -> None:
    """Raise when a tensor of ``n`` elements would exceed ``limits.max_elements``.

    ``path`` and ``blobs``: where the tensor is given in the request (``inputs[2].random``)
    and its blob, for the problem.

    Raises:
        LimitExceededError: ``n > limits.max_elements`` (code ``tensor_too_large``).
    """
    if n > limits.max_elements:
        msg = f"{what} would hold {n} elements, more than the limit of {limits.max_elements}"
        raise LimitExceededError(
            msg, [Diagnostic("error", "tensor_too_large", msg, path=path, blobs=blobs)])


@contextmanager
def element_cap(limits: RunLimits) -> Iterator[None]:
    """Set ``core.ops._args.MAX_ELEMENTS`` (if the kernels define it) for the duration.

    The fill kernels read that cap before allocating; the executor checks every output
    again afterwards, so the cap holds even for kernels that do not read it.
    """
    try:
        mod = importlib.import_module("core.ops._args")
    except ImportError:
        yield
        return
    if not hasattr(mod, "MAX_ELEMENTS"):
        yield
        return
    old = getattr(mod, "MAX_ELEMENTS")  # noqa: B009 - optional module attribute
    setattr(mod, "MAX_ELEMENTS", limits.max_elements)  # noqa: B010
    try:
        yield
    finally:
        setattr(mod, "MAX_ELEMENTS", old)  # noqa: B010
