"""The execution worker keeps freed memory within a job (no page-fault storm), glibc only."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from core.executor import allocator

# Allocate and free a 1 MiB array 400 times, then report the minor page faults it cost.
_PROBE = textwrap.dedent("""
    import resource, sys
    import numpy as np
    from core.executor import allocator
    if sys.argv[1] == "keep":
        assert allocator.keep_freed_memory()
    x = np.ones(1 << 17)  # 1 MiB of float64
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(400):
        y = x * 2.0
        z = y + 1.0
        del y, z
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")

needs_glibc = pytest.mark.skipif(allocator._LIBC is None, reason="glibc's mallopt only")


def _faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True,
                         check=True)
    return int(out.stdout.strip())


@needs_glibc
def test_kept_memory_removes_the_page_faults_of_repeated_allocations() -> None:
    default, kept = _faults("default"), _faults("keep")
    # glibc's default maps and unmaps each 1 MiB array: ~256 faults per allocation.
    assert default > 400 * 100
    assert kept < default / 20


@needs_glibc
def test_release_returns_freed_pages_between_jobs() -> None:
    probe = textwrap.dedent("""
        import numpy as np
        from core.executor import allocator
        allocator.keep_freed_memory()
        def rss():
            return int(open("/proc/self/statm").read().split()[1]) * 4096
        blocks = [np.ones(1 << 18) for _ in range(16)]  # 16 x 2 MiB on the heap
        held = rss()
        del blocks
        kept = rss()
        allocator.release_freed_memory()
        print(held, kept, rss())
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True)
    held, kept, released = (int(v) for v in out.stdout.split())
    mib = 1024**2
    assert held - kept < 8 * mib  # freed, but kept: below the 64 MiB trim threshold
    assert kept - released > 24 * mib  # most of the 32 MiB went back on release


def test_settings_are_a_no_op_without_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "_LIBC", None)
    assert allocator.keep_freed_memory() is False
    allocator.release_freed_memory()  # does nothing, raises nothing
