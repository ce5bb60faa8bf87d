"""The C allocator's settings for a process that reads and writes megabyte buffers.

Every bulk read fills a buffer of a few megabytes (a read-ahead window, an offload batch) that
lives for seconds. glibc serves an allocation above its mmap threshold (128 KiB at start, raised
up to 32 MiB as such blocks are freed) with a fresh ``mmap`` and returns it to the kernel when it
is freed, so every buffer's pages are faulted in and zeroed again on first write, which costs more
kernel time than the copy from the page cache. :func:`tune` has such buffers come from the heap,
which keeps freed memory and hands it out again, and :func:`trim` (the daemon calls it every
:data:`TRIM_INTERVAL_MS`) returns what the heap holds free to the kernel, so a catch-up's memory
does not stay resident once its windows are gone. Neither does anything where the C library is
not glibc (musl has neither call; its allocator maps large blocks anyway).
"""

from __future__ import annotations

import ctypes
import functools

MMAP_THRESHOLD = 64 << 20
"""Allocations up to this size come from the heap (glibc's M_MMAP_THRESHOLD)."""
TRIM_THRESHOLD = 64 << 20
"""Free memory at the heap's top beyond this is returned at once (glibc's M_TRIM_THRESHOLD)."""
TRIM_INTERVAL_MS = 30_000
"""How often the daemon returns the heap's free memory to the kernel."""
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6")  # glibc's soname (find_library would run ldconfig)
    except OSError:
        return None
    if not hasattr(libc, "mallopt") or not hasattr(libc, "malloc_trim"):
        return None
    return libc


def tune() -> bool:
    """Serve buffers up to :data:`MMAP_THRESHOLD` from the heap; whether it applied (glibc)."""
    libc = _libc()
    if libc is None:
        return False
    return bool(
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


def trim() -> None:
    """Return the heap's free pages to the kernel (``malloc_trim``)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
