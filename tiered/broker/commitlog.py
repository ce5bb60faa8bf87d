"""Read-only access to the broker's commitlog (spec §1.2, §2.10, §2.11).

Two ways in:

* by physical offset, through the consumequeue — :meth:`CommitLog.read`, :meth:`CommitLog.read_many`
  (the dispatcher and the read path; a live file is never scanned for messages);
* by scanning a file from its start with the broker's recovery rules — :func:`scan_file`
  (``inspect``, the store generator's ``--append``).

Files are opened ``O_RDONLY`` and never written.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from tiered.broker import message as msgcodec
from tiered.broker.read_only import open_read_only
from tiered.broker.read_only import pread_file
from tiered.errors import CorruptStoreFileError
from tiered.errors import OffsetNotInStoreError
from tiered.errors import StoreFileNotFoundError

_I32 = struct.Struct(">i")
FILE_NAME_DIGITS = 20


class CommitLogFile(NamedTuple):
    """One mapped file of the commitlog: ``base`` is its start physical offset (= its name)."""

    base: int
    path: Path
    size: int

    @property
    def end(self) -> int:
        """Physical offset just past the file."""
        return self.base + self.size


def parse_file_name(path: Path) -> int | None:
    """The start offset a 20-digit file name encodes, or ``None`` for any other name."""
    name = path.name
    if len(name) == FILE_NAME_DIGITS and name.isdigit():
        return int(name)
    return None


def list_files(dirs: Sequence[Path]) -> list[CommitLogFile]:
    """The commitlog files of ``dirs`` (several when ``storePathCommitLog`` lists more), by offset.

    Files whose names are not 20 digits (``.swp`` files, editors' leftovers) are ignored.
    """
    found: dict[int, CommitLogFile] = {}
    for d in dirs:
        if not d.is_dir():
            continue
        for p in d.iterdir():
            base = parse_file_name(p)
            if base is None or not p.is_file():
                continue
            if base in found:
                raise CorruptStoreFileError(
                    f"commitlog file {base:020d} exists in both {found[base].path.parent} and "
                    f"{d}; remove the stale copy from storePathCommitLog",
                    path=str(p),
                    offset=base,
                )
            found[base] = CommitLogFile(base, p, p.stat().st_size)
    return [found[b] for b in sorted(found)]


class BulkRead(NamedTuple):
    """The result of :meth:`CommitLog.read_many`: all units in one buffer, in request order.

    ``starts[i]`` is where request ``i`` begins in ``data`` and ``sizes[i]`` its length.
    """

    data: bytearray
    starts: npt.NDArray[np.int64]
    sizes: npt.NDArray[np.int64]
    ranges: int  # number of pread calls that produced ``data``

    def view(self, i: int) -> memoryview:
        """Bytes of request ``i`` (no copy)."""
        s = int(self.starts[i])
        return memoryview(self.data)[s : s + int(self.sizes[i])]


class CommitLog:
    """The broker's commitlog directory (or directories), read by physical offset."""

    def __init__(self, dirs: Path | Sequence[Path], file_size: int):
        self.dirs: tuple[Path, ...] = (dirs,) if isinstance(dirs, Path) else tuple(dirs)
        if file_size <= 0:
            raise ValueError(f"mappedFileSizeCommitLog={file_size!r} must be > 0")
        self.file_size = file_size
        # files and their bases are swapped together, so readers on other threads never see a
        # new list with old bases (take one snapshot per call)
        no_bases: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._listing: tuple[list[CommitLogFile], npt.NDArray[np.int64]] = ([], no_bases)
        self.refresh()

    def refresh(self) -> None:
        """Re-list the files (the broker creates and deletes them while we run)."""
        files = list_files(self.dirs)
        self._listing = (files, np.fromiter((f.base for f in files), dtype=np.int64))

    @property
    def files(self) -> list[CommitLogFile]:
        """The files currently present, by offset."""
        return list(self._listing[0])

    @property
    def min_offset(self) -> int:
        """First file's start offset; -1 when there is no file (spec §1.2)."""
        files = self._listing[0]
        return files[0].base if files else -1

    def file_for(self, phys: int) -> CommitLogFile:
        """The file holding physical offset ``phys``.

        Raises:
            OffsetNotInStoreError: no file holds it (deleted by the broker, or not written yet).
        """
        files, bases = self._listing
        i = int(np.searchsorted(bases, phys, side="right")) - 1
        if i < 0 or phys >= files[i].end:
            first = files[0].base if files else None
            last = files[-1].end if files else None
            raise OffsetNotInStoreError(
                f"physical offset {phys} is not in the commitlog under "
                f"{', '.join(map(str, self.dirs))} (files cover [{first}, {last}))"
            )
        return files[i]

    def read(self, phys: int, length: int) -> bytes:
        """``length`` bytes at physical offset ``phys``; the range may span file boundaries."""
        out = bytearray()
        pos = phys
        while len(out) < length:
            f = self.file_for(pos)
            n = min(length - len(out), f.end - pos)
            out += _pread(f, pos - f.base, n)
            pos += n
        return bytes(out)

    def read_message(self, phys: int, size: int | None = None) -> msgcodec.Message:
        """Decode the unit at ``phys`` (``size`` from the consumequeue when known)."""
        f = self.file_for(phys)
        if size is None:
            size = _I32.unpack(_pread(f, phys - f.base, 4))[0]
            if size <= 0 or phys - f.base + size > f.size:
                raise CorruptStoreFileError(
                    f"{f.path}: TOTALSIZE {size} at position {phys - f.base} is not a unit",
                    path=str(f.path),
                    offset=phys,
                )
        raw = _pread(f, phys - f.base, size)
        return msgcodec.decode(raw, where=f"{f.path} @ physical offset {phys}")

    def read_many(
        self, offsets: npt.NDArray[np.int64], sizes: npt.NDArray[np.int64] | npt.NDArray[np.int32]
    ) -> BulkRead:
        """Read many units in one pass: one ``pread`` per contiguous run inside one file.

        ``offsets``/``sizes`` come straight from consumequeue units; units of one queue are
        usually interleaved with other queues', so runs are split wherever a gap appears. Requests
        are returned in the order given.
        """
        offs = np.asarray(offsets, dtype=np.int64)
        lens = np.asarray(sizes, dtype=np.int64)
        n = len(offs)
        if n == 0:
            return BulkRead(bytearray(), np.zeros(0, np.int64), np.zeros(0, np.int64), 0)
        order = np.argsort(offs, kind="stable")
        so, sl = offs[order], lens[order]
        files, bases = self._listing
        file_idx = np.searchsorted(bases, so, side="right") - 1
        ends = so + sl
        # a run breaks where the next unit does not start at the previous end, or changes file
        brk = np.ones(n, dtype=bool)
        brk[1:] = (so[1:] != ends[:-1]) | (file_idx[1:] != file_idx[:-1])
        run_starts = np.flatnonzero(brk)
        run_ends = np.append(run_starts[1:], n)
        total = int(sl.sum())
        data = bytearray(total)
        view = memoryview(data)
        dst_sorted = np.zeros(n, dtype=np.int64)
        dst_sorted[1:] = np.cumsum(sl)[:-1]
        by_file: dict[int, list[tuple[int, int]]] = {}
        for a, b in zip(run_starts.tolist(), run_ends.tolist(), strict=True):
            by_file.setdefault(int(file_idx[a]), []).append((a, b))
        for fi, runs in by_file.items():
            lo = so[runs[0][0]]
            if fi < 0 or lo >= files[fi].end:
                raise OffsetNotInStoreError(
                    f"physical offset {int(lo)} is not in the commitlog under "
                    f"{', '.join(map(str, self.dirs))}"
                )
            f = files[fi]
            fd = open_read_only(f.path, _gone(f))
            try:
                for a, b in runs:
                    start, stop = int(so[a]), int(ends[b - 1])
                    if stop > f.end:
                        raise CorruptStoreFileError(
                            f"{f.path}: unit at physical offset {start} runs past the file end",
                            path=str(f.path),
                            offset=start,
                        )
                    d = int(dst_sorted[a])
                    got = os.preadv(fd, [view[d : d + stop - start]], start - f.base)
                    if got != stop - start:
                        raise CorruptStoreFileError(
                            f"{f.path}: short read at physical offset {start} "
                            f"({got} of {stop - start} bytes); the file is truncated",
                            path=str(f.path),
                            offset=start,
                        )
            finally:
                os.close(fd)
        starts = np.empty(n, dtype=np.int64)
        starts[order] = dst_sorted
        return BulkRead(data, starts, lens, len(run_starts))


def _gone(f: CommitLogFile) -> Callable[[], Exception]:
    return lambda: StoreFileNotFoundError(
        f"commitlog file {f.path} disappeared (the broker deleted it)"
    )


def _pread(f: CommitLogFile, position: int, length: int) -> bytes:
    data = pread_file(f.path, length, position, _gone(f))
    if len(data) != length:
        raise CorruptStoreFileError(
            f"{f.path}: short read at position {position} ({len(data)} of {length} bytes)",
            path=str(f.path),
            offset=f.base + position,
        )
    return data


# --- scanning -------------------------------------------------------------------------------


class ScanItem(NamedTuple):
    """One step of a scan: a message, a BLANK, the end of valid data, or a corrupt unit.

    ``kind`` is ``"message"``, ``"blank"``, ``"end"`` (zero-filled tail) or ``"corrupt"``;
    ``position`` is within the file and ``offset`` the physical offset (base + position).
    """

    kind: str
    position: int
    offset: int
    size: int = 0
    message: msgcodec.Message | None = None
    reason: str = ""


def scan_file(path: Path, base: int | None = None) -> Iterator[ScanItem]:
    """Walk the units of one commitlog file as the broker's recovery does (spec §2.11).

    Yields every message (CRC not enforced: ``message.crc_ok`` tells), then exactly one of
    ``blank`` (the file ends with a BLANK), ``end`` (a zero tail: the rest was never written) or
    ``corrupt`` (garbage, a truncated unit, fields disagreeing with TOTALSIZE: the broker would
    truncate here). Reading never stops on a CRC mismatch.
    """
    if base is None:
        base = parse_file_name(path) or 0
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            yield ScanItem("end", 0, base, reason="empty file")
            return
        mm = mmap.mmap(fd, size, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    with mm:
        yield from _scan_buffer(mm, size, base, str(path))


def _scan_buffer(buf: mmap.mmap, size: int, base: int, name: str) -> Iterator[ScanItem]:
    pos = 0
    while True:
        rem = size - pos
        if rem <= 4:
            yield ScanItem("end", pos, base + pos, reason="file ends")
            return
        (total,) = _I32.unpack_from(buf, pos)
        magic = _I32.unpack_from(buf, pos + 4)[0] if rem >= 8 else 0
        if magic == msgcodec.BLANK_MAGIC:
            yield ScanItem("blank", pos, base + pos, size=total)
            return
        if total == 0 and magic == 0:
            if any(buf[pos : min(size, pos + 4096)]):
                yield ScanItem(
                    "corrupt", pos, base + pos, reason="zero length followed by non-zero bytes"
                )
            else:
                yield ScanItem("end", pos, base + pos, reason="zero-filled tail")
            return
        try:
            m = msgcodec.decode(buf, pos, where=f"{name} @ position {pos}")
        except CorruptStoreFileError as e:
            yield ScanItem("corrupt", pos, base + pos, size=total, reason=str(e))
            return
        yield ScanItem("message", pos, base + pos, size=m.total_size, message=m)
        pos += m.total_size
