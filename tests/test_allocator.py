"""The allocator settings: after :func:`tiered.process.allocator.tune`, a read buffer of
megabytes comes from the heap (its pages reused from one buffer to the next) instead of a fresh
``mmap`` whose pages the kernel faults in and zeroes again for every buffer."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import ctypes
from tiered.process import allocator

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                 "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2

def mapped_by(size):
    before = libc.mallinfo2().hblkhd
    buf = bytearray(size)
    grown = libc.mallinfo2().hblkhd - before
    del buf
    return grown

print(mapped_by(8 << 20) >= 8 << 20, allocator.tune(), mapped_by(8 << 20), end="")
allocator.trim()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_buffers_come_from_the_heap_once_tuned() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True
    ).stdout
    assert out == "True True 0", out
