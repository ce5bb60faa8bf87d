"""A queue's local bounds, its min and max offset, with the fewest reads: what ``status`` asks of
every queue once, thousands of queues at a time.

The answer is that of :meth:`ConsumeQueue.min_offset` and :meth:`ConsumeQueue.max_offset` over one
listing. Here it costs one listing of the queue's directory, one open per file touched and, in the
usual case, a unit read for the min and a unit or a small chunk for the max; anything unusual (a
name that is not 20 digits, a file of another size, a first unit that is not readable) goes
through those methods, which say what is wrong.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import numpy as np

from tiered.broker.consumequeue import BLANK_FILL_SIZE
from tiered.broker.consumequeue import CQ_UNIT_SIZE
from tiered.broker.consumequeue import ConsumeQueue
from tiered.broker.consumequeue import StoreFile
from tiered.broker.consumequeue import decode_units
from tiered.broker.consumequeue import effective_cq_file_size
from tiered.broker.consumequeue import first_invalid
from tiered.errors import OffsetNotInStoreError
from tiered.process import native
from tiered.process.background import in_background

PROBE_UNITS: Final = 64
"""Units read after a hint's unit at first: a queue the tier has caught up with ends there."""
FIRST_CHUNK_UNITS: Final = 256
"""Without a hint the last file is read from its start in chunks growing 4x from this many units
(5 KB: a small queue in a 6 MB file costs that, not the 80 KB of
:meth:`ConsumeQueue.max_offset`'s first chunk)."""

MAX_THREADS: Final = 4
"""Threads the kernel reads the queues on, at most (one per core)."""

_UNIT: Final = struct.Struct(">qiq")
_ASK: Final = -2
"""The kernel's min and max of a queue it leaves to :func:`queue_bounds`."""


def queue_bounds(
    directory: str,
    file_size: int,
    commitlog_min_offset: int | None = None,
    hint: int | None = None,
) -> tuple[int, int] | None:
    """``(min_offset, max_offset)`` of the queue whose consumequeue directory is ``directory``;
    None when there is no such directory.

    ``hint``, a queue offset known to have been written (the tier's commit offset), lets the max
    be read from there: it is taken when the unit before it is in the last file and valid.

    Raises:
        CorruptStoreFileError: a file's size or name does not fit ``file_size``.
        OffsetNotInStoreError: a file was deleted by the broker while being read.
    """
    file_size = effective_cq_file_size(file_size)
    files: list[tuple[int, str, int]] = []
    usual = True
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                name = entry.name
                if len(name) != 20 or not (name.isascii() and name.isdigit()):
                    usual = False
                    continue
                try:
                    files.append((int(name), entry.path, entry.stat().st_size))
                except FileNotFoundError:
                    usual = False
    except (FileNotFoundError, NotADirectoryError):
        return None
    files.sort()
    if files and files[-1][2] == 0:
        files.pop()
    if not usual or any(size != file_size or start % file_size for start, _, size in files):
        queue = ConsumeQueue(directory, file_size)
        listed = queue.files()
        return queue.min_offset(commitlog_min_offset, files=listed), queue.max_offset(files=listed)
    if not files:
        return 0, 0
    per_file = file_size // CQ_UNIT_SIZE
    first_start, first_path, _ = files[0]
    last_start, last_path, _ = files[-1]
    fd = _open(first_path)
    try:
        if _readable(os.pread(fd, CQ_UNIT_SIZE, 0), commitlog_min_offset):
            low: int | None = first_start // CQ_UNIT_SIZE
        else:
            low = None
        if last_path != first_path:
            os.close(fd)
            fd = -1
            fd = _open(last_path)
        high = _max_offset(fd, last_start // CQ_UNIT_SIZE, per_file, hint)
    finally:
        if fd >= 0:
            os.close(fd)
    if low is None:  # a pre-blank fill or a unit the commitlog no longer holds: search the files
        listed = [StoreFile(start, Path(path), size) for start, path, size in files]
        low = ConsumeQueue(directory, file_size).min_offset(commitlog_min_offset, files=listed)
    return low, high


def many_bounds(
    directories: Sequence[str],
    file_size: int,
    commitlog_min_offset: int | None,
    hints: Sequence[int | None],
) -> list[tuple[int, int, int] | None]:
    """:func:`queue_bounds` of each of ``directories`` (with ``hints``), the usual queues in one
    call of the kernel (on a few threads), and a third figure: the bytes of the queue's units
    from its hint to its max (the sizes in the units added up), -1 when the max was not read
    from the hint. ``(-1, -1, -1)`` for a missing directory, and None for a queue the kernel
    leaves to :func:`queue_bounds` (a name or size out of the ordinary, a first unit that is not
    readable, an error): the caller asks that, queue by queue, and sees what it raises."""
    return start_many_bounds(directories, file_size, commitlog_min_offset, hints)()


def start_many_bounds(
    directories: Sequence[str],
    file_size: int,
    commitlog_min_offset: int | None,
    hints: Sequence[int | None],
) -> Callable[[], list[tuple[int, int, int] | None]]:
    """:func:`many_bounds` begun on a thread: the kernel reads the queues (without the GIL)
    while the caller goes on; the function returned waits for the answer (and raises what the
    kernel raised)."""
    if len(hints) != len(directories):
        raise ValueError(f"{len(hints)} hints for {len(directories)} directories")
    if not directories:
        return list
    args = (
        list(directories),
        effective_cq_file_size(file_size),
        -1 if commitlog_min_offset is None else commitlog_min_offset,
        np.fromiter((h or 0 for h in hints), dtype=np.int64, count=len(hints)),
        min(len(os.sched_getaffinity(0)), MAX_THREADS),
    )
    done: list[tuple[bytes, bytes, bytes]] = []
    read = in_background(lambda: done.append(native.kernel().queue_bounds(*args)), "queue-bounds")

    def answer() -> list[tuple[int, int, int] | None]:
        read()  # (raises what the kernel raised)
        mins, maxs, tails = (np.frombuffer(b, dtype=np.int64).tolist() for b in done[0])
        return [
            None if lo == _ASK else (lo, hi, tail)
            for lo, hi, tail in zip(mins, maxs, tails, strict=True)
        ]

    return answer


def _open(path: str) -> int:
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError as e:
        raise OffsetNotInStoreError(
            f"{path}: deleted by the broker while reading; retry from the new min offset"
        ) from e


def _valid(raw: bytes, at: int = 0) -> bool:
    """The broker's recovery test of the unit at byte ``at``: offset >= 0 and size > 0."""
    offset, size, _ = _UNIT.unpack_from(raw, at)
    return bool(offset >= 0 and size > 0)


def _readable(raw: bytes, commitlog_min_offset: int | None) -> bool:
    """Whether a first unit is readable: valid, not a pre-blank fill, in the commitlog."""
    if len(raw) < CQ_UNIT_SIZE:
        return False
    offset, size, tags = _UNIT.unpack_from(raw)
    if offset < 0 or size <= 0 or (offset == 0 and size == BLANK_FILL_SIZE and tags == 0):
        return False
    return bool(commitlog_min_offset is None or offset >= commitlog_min_offset)


def _max_offset(fd: int, base: int, per_file: int, hint: int | None) -> int:
    """The first invalid unit of the last file (which starts at queue offset ``base``), read
    from ``hint`` when the unit before it is valid, else from the file's start."""
    if hint is not None and base < hint <= base + per_file:
        pos = hint - 1 - base
        n = min(1 + PROBE_UNITS, per_file - pos)
        raw = os.pread(fd, n * CQ_UNIT_SIZE, pos * CQ_UNIT_SIZE)
        if len(raw) >= CQ_UNIT_SIZE and _valid(raw):
            if len(raw) < 2 * CQ_UNIT_SIZE or not _valid(raw, CQ_UNIT_SIZE):
                return hint  # the usual answer: the tier is level with the queue
            k = first_invalid(decode_units(raw[: len(raw) - len(raw) % CQ_UNIT_SIZE]))
            if k < n:
                return base + pos + k
            return _scan(fd, base, per_file, pos + n, 4 * PROBE_UNITS)
    return _scan(fd, base, per_file, 0, FIRST_CHUNK_UNITS)


def _scan(fd: int, base: int, per_file: int, pos: int, chunk: int) -> int:
    while pos < per_file:
        n = min(chunk, per_file - pos)
        raw = os.pread(fd, n * CQ_UNIT_SIZE, pos * CQ_UNIT_SIZE)
        k = first_invalid(decode_units(raw[: len(raw) - len(raw) % CQ_UNIT_SIZE]))
        if k < n:
            return base + pos + k
        pos += n
        chunk *= 4
    return base + per_file
