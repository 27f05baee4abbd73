"""The C allocator settings of an execution worker (glibc only; elsewhere a no-op).

Why: a full-mode check runs the same net hundreds of thousands of times, and each run
allocates and frees arrays of the input's size. With glibc's defaults an array of more than
128 KiB is mapped on allocation and unmapped on free (or the heap top is trimmed), so every
run faults its pages in again: measured on a 3·10⁴-element check, 5.1 million minor faults,
7.5 s of system time out of 13.2 s, and on the 2-vCPU VM two workers faulting at once did not
run faster than one (bench/README.md §9). Keeping freed memory in the heap during a job and
handing it back after the job removes the faults: 2,600 faults, 4.3 s.

* :func:`keep_freed_memory` - at worker start: arrays up to :data:`MMAP_THRESHOLD_BYTES`
  come from the heap, and up to :data:`TRIM_THRESHOLD_BYTES` of free heap top is kept;
* :func:`release_freed_memory` - after each job: every free page goes back to the system,
  so a worker idles at what it holds, not at its last job's peak.

Memory accounting is unchanged: heap pages count against the worker's ``RLIMIT_AS`` as
mapped ones do.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

#: Largest allocation served from the heap (glibc caps this setting at 32 MiB on 64-bit).
MMAP_THRESHOLD_BYTES = 32 * 1024**2
#: Free memory at the heap top kept between allocations of one job.
TRIM_THRESHOLD_BYTES = 64 * 1024**2

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:  # pragma: no cover - no C library to load
        return None
    if not hasattr(libc, "mallopt") or not hasattr(libc, "malloc_trim"):
        return None  # not glibc (musl has neither)
    return libc


_LIBC = _libc()


def configure(mmap_threshold_bytes: int, trim_threshold_bytes: int) -> bool:
    """Fix glibc's mmap threshold and trim threshold for this process (bytes).

    Allocations above ``mmap_threshold_bytes`` are mapped on their own and unmapped on free;
    free memory above ``trim_threshold_bytes`` at the heap top goes back to the system.
    Fixing the threshold also stops glibc from raising it by itself. The server uses small
    values (memory back after a burst, :func:`app.server.tune_malloc`), execution workers
    large ones (:func:`keep_freed_memory`).

    Returns:
        Whether glibc took both settings (False off glibc; glibc refuses an mmap threshold
        above 32 MiB on 64-bit).
    """
    if _LIBC is None:
        return False
    ok_mmap = _LIBC.mallopt(_M_MMAP_THRESHOLD, mmap_threshold_bytes) == 1
    ok_trim = _LIBC.mallopt(_M_TRIM_THRESHOLD, trim_threshold_bytes) == 1
    return ok_mmap and ok_trim


def keep_freed_memory() -> bool:
    """Set the worker's allocator to keep freed memory for the rest of a job.

    Returns:
        Whether the settings took effect (False off glibc, or if glibc refused them).
    """
    return configure(MMAP_THRESHOLD_BYTES, TRIM_THRESHOLD_BYTES)


def release_freed_memory() -> None:
    """Give every free heap page back to the system (between jobs; no-op off glibc)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


__all__ = ["MMAP_THRESHOLD_BYTES", "TRIM_THRESHOLD_BYTES", "configure", "keep_freed_memory",
           "release_freed_memory"]
