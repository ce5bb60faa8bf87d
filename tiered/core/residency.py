"""Is a byte range of a file resident in the page cache? (``mincore(2)``, what NOT_IN_MEM asks).

The range is mapped read-only with the C library's ``mmap`` (not Python's, whose buffer cannot be
addressed when read-only), asked with ``mincore`` and unmapped; the file is opened ``O_RDONLY``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from dataclasses import dataclass
from pathlib import Path

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte))
_MAP_FAILED = ctypes.c_void_p(-1).value
PAGE = mmap.PAGESIZE


@dataclass(frozen=True, slots=True)
class Residency:
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
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, span, mmap.PROT_READ, mmap.MAP_SHARED, fd, start)
        if addr == _MAP_FAILED or addr is None:
            err = ctypes.get_errno()
            raise OSError(err, f"mmap failed: {os.strerror(err)}", str(path))
        try:
            vec = (ctypes.c_ubyte * pages)()
            if _libc.mincore(addr, span, vec) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"mincore failed: {os.strerror(err)}", str(path))
            resident = sum(b & 1 for b in bytes(vec))
        finally:
            _libc.munmap(addr, span)
    finally:
        os.close(fd)
    return Residency(resident, pages)
