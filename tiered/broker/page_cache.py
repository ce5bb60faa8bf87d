"""The page cache of the broker's files: what is resident (``mincore``) and what the sidecar
lets go (``posix_fadvise``).

* :func:`residency` -- is a byte range of a file in the page cache? (what NOT_IN_MEM asks). The
  range is mapped read-only with the C library's ``mmap`` (not Python's, whose buffer cannot be
  addressed when read-only), asked with ``mincore`` and unmapped.
* :func:`release` -- drop the cached pages of commitlog ranges the sidecar has finished with.
  Offloading a cold backlog reads gigabytes the broker itself no longer needs; leaving them cached
  would evict the broker's hot pages. ``POSIX_FADV_DONTNEED`` only drops clean cached pages
  (nothing is written; the broker's dirty pages are left alone by the kernel).

Files are only ever opened ``O_RDONLY``.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import mmap
import os
from pathlib import Path
from typing import NamedTuple

from tiered.broker.commitlog import CommitLog

_MAP_FAILED = ctypes.c_void_p(-1).value
PAGE = mmap.PAGESIZE


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library's ``mmap``, ``munmap`` and ``mincore``, loaded on the first
    :func:`residency` (``find_library`` runs ``ldconfig``: not at every command's import)."""
    import ctypes.util

    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    )
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte))
    return libc


class Residency(NamedTuple):
    """How many of the pages covering a range are in the page cache."""

    resident_pages: int
    total_pages: int

    @property
    def all_resident(self) -> bool:
        """Every page of the range is cached (a read would not touch the disk)."""
        return self.total_pages > 0 and self.resident_pages == self.total_pages


def residency(path: Path, position: int, length: int) -> Residency:
    """Page-cache residency of ``[position, position + length)`` of ``path``.

    Raises:
        OSError: the file cannot be opened or mapped (named by the OS error).
    """
    if length <= 0:
        return Residency(0, 0)
    start = position - position % PAGE
    span = position + length - start
    pages = -(-span // PAGE)
    libc = _libc()
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, span, mmap.PROT_READ, mmap.MAP_SHARED, fd, start)
        if addr == _MAP_FAILED or addr is None:
            err = ctypes.get_errno()
            raise OSError(err, f"mmap failed: {os.strerror(err)}", str(path))
        try:
            vec = (ctypes.c_ubyte * pages)()
            if libc.mincore(addr, span, vec) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"mincore failed: {os.strerror(err)}", str(path))
            resident = sum(b & 1 for b in bytes(vec))
        finally:
            libc.munmap(addr, span)
    finally:
        os.close(fd)
    return Residency(resident, pages)


ALIGN = 2 << 20
"""The largest page-cache folio (a PMD): advised ranges start on this boundary."""


def release(log: CommitLog, start: int, end: int) -> int:
    """Advise the kernel to drop cached pages of physical range ``[start, end)``.

    The start is moved down to a :data:`ALIGN` boundary: the page cache holds large folios
    (up to 2 MiB) that are dropped only when a call covers them whole, so each call also covers
    the folio the previous call ended in (advising pages already dropped costs nothing). Files
    the broker deleted meanwhile are skipped. Returns the bytes advised.
    """
    if end <= start or not hasattr(os, "posix_fadvise"):
        return 0
    advised = 0
    for f in log.files:
        lo, hi = max(start, f.base) - f.base, min(end, f.end) - f.base
        if lo >= hi:
            continue
        lo -= lo % ALIGN
        with contextlib.suppress(FileNotFoundError):
            fd = os.open(f.path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, lo, hi - lo, os.POSIX_FADV_DONTNEED)
                advised += hi - lo
            finally:
                os.close(fd)
    return advised
