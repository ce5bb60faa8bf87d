"""Read the messages of many queues' batches with one ``preadv`` per commitlog range.

The broker's commitlog interleaves queues, so one queue's messages are rarely adjacent: reading
them queue by queue costs one system call per message. :func:`gather` instead sorts every
requested unit of a dispatch round by physical offset, merges units separated by less than
``gap_bytes`` into one range (reading through the small gaps -- other queues' messages -- costs
far less than a system call each), never across a file boundary, and reads each range with
scatter I/O: one ``preadv`` (per ``IOV_MAX`` pieces) lands every unit directly at its place in
its own queue's batch buffer, the gaps in a scratch buffer. The plan is made by the compiled
kernel (``tiered._kernel.gather_plan``, tiered/kernel/src/gather.rs). No intermediate copy is
made. A large range is read in two halves at once (:data:`SPLIT_BYTES`). A range whose file the
broker deleted meanwhile fails only the batches with units in it.
"""

from __future__ import annotations

import ctypes
import os
from concurrent.futures import Executor
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tiered.broker.commitlog import CommitLog
from tiered.broker.commitlog import CommitLogFile
from tiered.errors import BrokerStoreError
from tiered.errors import CorruptStoreFileError
from tiered.errors import OffsetNotInStoreError
from tiered.native import kernel

Int64s = npt.NDArray[np.int64]
DEFAULT_GAP_BYTES = 256 << 10
SPLIT_BYTES = 8 << 20
"""A range this large is read by two threads, half each: this machine's page cache copies at
~1.5-1.9 GB/s on one core, 2.6-2.7 on two, and a dispatch round's workers wait for its read
(a 1 KiB catch-up's main thread spent ~0.8 of its 5 s there)."""
IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024
IOVEC = np.dtype([("base", np.uintp), ("len", np.uintp)])
"""``struct iovec``: a pointer and a size_t."""

# preadv(2) itself, over an iovec array numpy builds: ``os.preadv`` wants one Python buffer object
# per piece, which costs more than the rest of a dispatch round together (one per message).
# ctypes releases the GIL for the call, as os.preadv does.
_libc_preadv = ctypes.CDLL(None, use_errno=True).preadv
_libc_preadv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int64]
_libc_preadv.restype = ctypes.c_ssize_t


@dataclass(frozen=True)
class Gathered:
    """``data[i]`` holds request ``i``'s units back to back; ``errors[i]`` is set instead when
    one of its ranges could not be read. ``calls`` counts the ``preadv`` calls made."""

    data: list[bytearray]
    errors: list[BrokerStoreError | None]
    calls: int


def gather(
    log: CommitLog,
    offsets: list[Int64s],
    sizes: list[Int64s],
    *,
    gap_bytes: int = DEFAULT_GAP_BYTES,
    helper: Executor | None = None,
) -> Gathered:
    """Read request ``i``'s units ``(offsets[i][j], sizes[i][j])`` (in that order) into one new
    buffer per request; see the module docstring. ``helper`` reads the second half of a large
    range; by default :data:`READER`, at the priority of the thread that first used it (the
    dispatcher brings its own: see :mod:`tiered.offload_priority`)."""
    # the buffers (one per request, not zeroed: the reads fill them completely, a failed read
    # discards its buffer), sorting, merging into ranges and the iovecs, in one compiled call
    # without the GIL: as numpy passes it was some twenty calls a wave, each handing the GIL to
    # an uploading worker while the workers waited for this read
    scratch = bytearray(max(gap_bytes, 1))
    files = log.files
    bases = np.array([f.base for f in files], dtype=np.int64)
    out, raw_iov, raw_ranges, raw_owners, raw_bounds = kernel().gather_plan(
        [np.ascontiguousarray(o, dtype=np.int64) for o in offsets],
        [np.ascontiguousarray(z, dtype=np.int64) for z in sizes],
        bases, scratch, gap_bytes,
    )  # fmt: skip
    errors: list[BrokerStoreError | None] = [None] * len(out)
    iov = np.frombuffer(raw_iov, dtype=IOVEC)
    ranges = np.frombuffer(raw_ranges, dtype=np.int64).reshape(-1, 5).tolist()
    owners = np.frombuffer(raw_owners, dtype=np.int64).tolist()
    bounds = np.frombuffer(raw_bounds, dtype=np.int64).tolist()
    views = [memoryview(buf) for buf in out]  # pinned: nothing resizes them under the reads
    calls = 0
    for r, (fi, begin, end, first, last) in enumerate(ranges):
        error: BrokerStoreError | None = None
        if fi < 0 or end > files[fi].end:
            error = OffsetNotInStoreError(
                f"commitlog range [{begin}, {end}) is not in the files under "
                f"{', '.join(map(str, log.dirs))}; the broker deleted it"
            )
        else:
            part = iov[first:last]
            error = _preadv(files[fi], begin, end - begin, part, helper or READER)
            calls += -(-len(part) // IOV_MAX)
        if error is not None:
            for o in owners[bounds[r] : bounds[r + 1]]:
                errors[o] = errors[o] or error
    for view in views:
        view.release()
    return Gathered(out, errors, calls)


def _preadv(
    f: CommitLogFile, position: int, length: int, iov: npt.NDArray[np.void], helper: Executor
) -> BrokerStoreError | None:
    try:
        fd = os.open(f.path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return OffsetNotInStoreError(f"commitlog file {f.path} disappeared (the broker deleted it)")
    try:
        at = position - f.base
        if length < SPLIT_BYTES:
            done = _preadv_all(fd, f, at, iov)
        else:  # the second half on the helper thread, the first here, both without the GIL
            half = len(iov) // 2 // IOV_MAX * IOV_MAX or len(iov) // 2
            second = helper.submit(
                _preadv_all, fd, f, at + int(iov["len"][:half].sum()), iov[half:]
            )
            try:
                done = _preadv_all(fd, f, at, iov[:half])
            finally:
                rest = second.result()  # before the fd closes, whatever the first half did
            done += rest
    finally:
        os.close(fd)
    if done != length:
        return CorruptStoreFileError(
            f"{f.path}: short read at physical offset {position} ({done} of {length} bytes)",
            path=str(f.path),
            offset=position,
        )
    return None


def _preadv_all(fd: int, f: CommitLogFile, at: int, iov: npt.NDArray[np.void]) -> int:
    """``preadv`` the pieces of ``iov`` from file position ``at``, ``IOV_MAX`` a call; the
    bytes read (fewer than asked at the end of the file)."""
    done = 0
    for i in range(0, len(iov), IOV_MAX):
        part = iov[i : i + IOV_MAX]
        want = int(part["len"].sum())
        got = _libc_preadv(fd, part.ctypes.data, len(part), at)
        if got < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), str(f.path))
        done += got
        if got != want:
            break
        at += got
    return done


READER = ThreadPoolExecutor(1, thread_name_prefix="tiered-read")
"""The thread that reads the second half of a large range for reads that serve consumers
(started at its first use)."""
