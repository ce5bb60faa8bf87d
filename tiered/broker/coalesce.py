"""Read the messages of many queues' batches with one ``preadv`` per commitlog range.

The broker's commitlog interleaves queues, so one queue's messages are rarely adjacent: reading
them queue by queue costs one system call per message. :func:`gather` instead sorts every
requested unit of a dispatch round by physical offset, merges units separated by less than
``gap_bytes`` into one range (reading through the small gaps -- other queues' messages -- costs
far less than a system call each), never across a file boundary, and reads each range with
scatter I/O: one ``preadv`` (per ``IOV_MAX`` pieces) lands every unit directly at its place in
its own queue's batch buffer, the gaps in a scratch buffer. No intermediate copy is made. A large
range is read in two halves at once (:data:`SPLIT_BYTES`). A range whose file the broker deleted
meanwhile fails only the batches with units in it.
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
    # buffers the reads fill completely: not zeroed first (a failed read discards its buffer)
    alloc = kernel().uninitialized
    out = [alloc(int(s.sum())) for s in sizes]
    errors: list[BrokerStoreError | None] = [None] * len(out)
    counts = [len(s) for s in sizes]
    if not sum(counts):
        return Gathered(out, errors, 0)
    offs = np.concatenate(offsets).astype(np.int64)
    lens = np.concatenate(sizes).astype(np.int64)
    owner = np.repeat(np.arange(len(out), dtype=np.int64), counts)
    dst = np.concatenate([np.cumsum(s, dtype=np.int64) - s for s in sizes])
    order = np.argsort(offs, kind="stable")
    so, sl, own, dst = offs[order], lens[order], owner[order], dst[order]
    se = so + sl
    files = log.files
    bases = np.array([f.base for f in files], dtype=np.int64)
    file_idx = np.searchsorted(bases, so, side="right") - 1
    gap = np.zeros(len(so), dtype=np.int64)
    gap[1:] = so[1:] - se[:-1]
    brk = np.ones(len(so), dtype=bool)
    brk[1:] = (gap[1:] > gap_bytes) | (gap[1:] < 0) | (file_idx[1:] != file_idx[:-1])
    # one iovec per unit, plus one into the scratch buffer before each unit after a gap
    fill = (gap > 0) & ~brk
    at = np.arange(len(so)) + np.cumsum(fill)
    entries = len(so) + int(fill.sum())
    who = np.full(entries, len(out), dtype=np.int64)  # len(out) = the scratch buffer
    lo = np.zeros(entries, dtype=np.int64)
    hi = np.zeros(entries, dtype=np.int64)
    who[at], lo[at], hi[at] = own, dst, dst + sl
    hi[at[fill] - 1] = gap[fill]
    scratch = bytearray(max(gap_bytes, 1))
    views = [np.frombuffer(buf, dtype=np.uint8) for buf in (*out, scratch)]  # pin each buffer
    iov = np.empty(entries, dtype=IOVEC)
    iov["base"] = np.array([v.ctypes.data for v in views], dtype=np.uintp)[who]
    iov["base"] += lo.astype(np.uintp)
    iov["len"] = hi - lo
    starts_at = np.flatnonzero(brk)
    first_entry = [*at[starts_at].tolist(), entries]
    stops_at = [*starts_at[1:].tolist(), len(so)]
    calls = 0
    for r, (a, b) in enumerate(zip(starts_at.tolist(), stops_at, strict=True)):
        fi = int(file_idx[a])
        begin, end = int(so[a]), int(se[b - 1])
        error: BrokerStoreError | None = None
        if fi < 0 or end > files[fi].end:
            error = OffsetNotInStoreError(
                f"commitlog range [{begin}, {end}) is not in the files under "
                f"{', '.join(map(str, log.dirs))}; the broker deleted it"
            )
        else:
            part = iov[first_entry[r] : first_entry[r + 1]]
            error = _preadv(files[fi], begin, end - begin, part, helper or READER)
            calls += -(-len(part) // IOV_MAX)
        if error is not None:
            for o in np.unique(own[a:b]).tolist():
                errors[o] = errors[o] or error
    del views
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
