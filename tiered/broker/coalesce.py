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

import os
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from tiered.broker.commitlog import CommitLog
from tiered.broker.commitlog import CommitLogFile
from tiered.errors import BrokerStoreError
from tiered.errors import CorruptStoreFileError
from tiered.errors import OffsetNotInStoreError
from tiered.process.native import kernel

Int64s = npt.NDArray[np.int64]
DEFAULT_GAP_BYTES = 256 << 10
SPLIT_BYTES = 8 << 20
"""A range this large is read by two threads, half each: copying from the page cache is faster on
two cores than on one, and a dispatch round's workers wait for its read."""
IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


class Gathered(NamedTuple):
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
) -> Gathered:
    """Read request ``i``'s units ``(offsets[i][j], sizes[i][j])`` (in that order) into one new
    buffer per request; see the module docstring."""
    # the buffers (one per request, not zeroed: the reads fill them completely, a failed read
    # discards its buffer), sorting, merging into ranges and the iovecs, in one compiled call
    # without the GIL: numpy passes would be many calls a wave, each handing the GIL to an
    # uploading worker while the workers wait for this read
    scratch = bytearray(max(gap_bytes, 1))
    files = log.files
    bases = np.array([f.base for f in files], dtype=np.int64)
    out, raw_iov, raw_ranges, raw_owners, raw_bounds = kernel().gather_plan(
        [np.ascontiguousarray(o, dtype=np.int64) for o in offsets],
        [np.ascontiguousarray(z, dtype=np.int64) for z in sizes],
        bases, scratch, gap_bytes,
    )  # fmt: skip
    errors: list[BrokerStoreError | None] = [None] * len(out)
    iov = memoryview(raw_iov)
    ranges = np.frombuffer(raw_ranges, dtype=np.int64).reshape(-1, 5).tolist()
    owners = np.frombuffer(raw_owners, dtype=np.int64).tolist()
    bounds = np.frombuffer(raw_bounds, dtype=np.int64).tolist()
    views = [memoryview(buf) for buf in out]  # pinned: nothing resizes them under the reads
    calls = 0
    try:
        for r, (fi, begin, end, first, last) in enumerate(ranges):
            error: BrokerStoreError | None = None
            if fi < 0 or end > files[fi].end:
                error = OffsetNotInStoreError(
                    f"commitlog range [{begin}, {end}) is not in the files under "
                    f"{', '.join(map(str, log.dirs))}; the broker deleted it"
                )
            else:
                error = _preadv(files[fi], begin, end - begin, iov[first * 16 : last * 16])
                calls += -(-(last - first) // IOV_MAX)
            if error is not None:
                for o in owners[bounds[r] : bounds[r + 1]]:
                    errors[o] = errors[o] or error
    finally:
        for view in views:
            view.release()
    return Gathered(out, errors, calls)


def _preadv(
    f: CommitLogFile, position: int, length: int, iov: memoryview
) -> BrokerStoreError | None:
    """Read ``length`` bytes from ``position`` into the pieces ``iov`` (``struct iovec`` bytes):
    one compiled call without the GIL (``tiered._kernel.read_pieces``), ``IOV_MAX`` pieces a
    ``preadv``, a range of :data:`SPLIT_BYTES` or more read in two halves at once, the second by
    a thread of its own (at the priority of the thread that asked, as the first).

    Raises:
        OSError: a read failed (naming the file)."""
    try:
        fd = os.open(f.path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return OffsetNotInStoreError(f"commitlog file {f.path} disappeared (the broker deleted it)")
    try:
        done = kernel().read_pieces(fd, position - f.base, iov, IOV_MAX, length >= SPLIT_BYTES)
    except OSError as e:
        raise OSError(e.errno, os.strerror(e.errno) if e.errno else str(e), str(f.path)) from e
    finally:
        os.close(fd)
    if done != length:
        return CorruptStoreFileError(
            f"{f.path}: short read at physical offset {position} ({done} of {length} bytes)",
            path=str(f.path),
            offset=position,
        )
    return None
