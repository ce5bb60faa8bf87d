"""The broker's local consume queues (spec §3) and their ConsumeQueueExt companions (spec §2.8).

A queue ``consumequeue/{topic}/{queueId}/`` is a row of pre-allocated files of ``file_size`` bytes
(default 6,000,000 = 300,000 units), each named by its start BYTE offset in the queue (20 digits).
A unit is 20 big-endian bytes ``(commitlog offset i64, size i32, tags code i64)``; queue offset
``q`` lives at byte ``q * 20``. Units are read in bulk as numpy structured arrays
(:data:`CQ_UNIT_DTYPE`), one ``pread`` per file touched.

Size rule: every file must be exactly ``file_size`` bytes, except that a zero-length LAST file
(one the broker is creating) is ignored. Anything else -- a size that is not a multiple of 20, or
one that differs from the configured size -- raises :class:`CorruptStoreFileError` naming the file
and its size; a partial tail is never silently skipped, as every position after it would be wrong.

Nothing here writes to the broker's store; files are opened ``O_RDONLY``.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Final
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from tiered.broker.read_only import pread_file
from tiered.broker.unit_fields import gather_be
from tiered.errors import CorruptStoreFileError
from tiered.errors import OffsetNotInStoreError
from tiered.errors import StoreFileNotFoundError

log = logging.getLogger(__name__)

CQ_UNIT_SIZE: Final = 20
CQ_UNIT_DTYPE: Final = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
DEFAULT_CQ_FILE_SIZE: Final = 300_000 * CQ_UNIT_SIZE
DEFAULT_CQ_EXT_FILE_SIZE: Final = 48 * 1024 * 1024
BLANK_FILL_SIZE: Final = 0x7FFFFFFF  # size of the pre-blank fill units (spec §3.3)
EXT_MAX_ADDRESS: Final = -(2**31) - 1  # ConsumeQueueExt.MAX_ADDR: a tags code <= this is an address
CQ_EXT_UNIT_HEADER: Final = 20  # size i16, tagsCode i64, msgStoreTime i64, bitMapSize i16
_INT64_MAX: Final = 2**63 - 1
_FIRST_CHUNK_UNITS: Final = 4096
_FILE_NAME = re.compile(r"\d{20}")

Units = npt.NDArray[np.void]
Int64s = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]


class StoreFile(NamedTuple):
    """One offset-named file of a queue: its start offset (bytes), path and size on disk."""

    start: int
    path: Path
    size: int


def effective_cq_file_size(configured: int) -> int:
    """``mappedFileSizeConsumeQueue`` rounded up to a whole number of units, as the broker does."""
    if configured <= 0:
        raise ValueError(f"mappedFileSizeConsumeQueue={configured!r} must be > 0")
    return -(-configured // CQ_UNIT_SIZE) * CQ_UNIT_SIZE


def decode_units(buf: bytes | bytearray | memoryview, *, path: Path | None = None) -> Units:
    """View ``buf`` as consume-queue units (no copy).

    Raises:
        CorruptStoreFileError: ``len(buf)`` is not a multiple of 20.
    """
    if len(buf) % CQ_UNIT_SIZE:
        raise CorruptStoreFileError(
            f"{path or 'buffer'}: {len(buf)} bytes is not a whole number of 20-byte "
            "consume-queue units",
            path=str(path) if path else None,
        )
    return np.frombuffer(buf, dtype=CQ_UNIT_DTYPE)


def encode_units(offsets: npt.ArrayLike, sizes: npt.ArrayLike, tags_codes: npt.ArrayLike) -> bytes:
    """Encode units from three equal-length columns (the writer side, used by the generator)."""
    off = np.asarray(offsets, dtype=np.int64)
    size = np.asarray(sizes, dtype=np.int64)
    tags = np.asarray(tags_codes, dtype=np.int64)
    if not off.shape == size.shape == tags.shape or off.ndim != 1:
        raise ValueError(
            f"offsets, sizes and tags_codes must be 1-D and equally long, got shapes "
            f"{off.shape}, {size.shape}, {tags.shape}"
        )
    if size.size and (size.min() < -(2**31) or size.max() > 2**31 - 1):
        raise ValueError("sizes must fit in a signed 32-bit int")
    units = np.empty(off.shape[0], dtype=CQ_UNIT_DTYPE)
    units["offset"] = off
    units["size"] = size
    units["tags_code"] = tags
    return units.tobytes()


def valid_mask(units: Units) -> Bools:
    """The broker's recovery test per unit: ``offset >= 0 and size > 0`` (pre-blank fills pass)."""
    return np.asarray((units["offset"] >= 0) & (units["size"] > 0), dtype=np.bool_)


def _qualifies(unit: Units, commitlog_min_offset: int | None) -> bool:
    """Whether a single unit is readable: valid, not a pre-blank fill, and (when given) at or
    above the commitlog's min offset."""
    offset, size, tags = int(unit["offset"][0]), int(unit["size"][0]), int(unit["tags_code"][0])
    if offset < 0 or size <= 0 or (offset == 0 and size == BLANK_FILL_SIZE and tags == 0):
        return False
    return commitlog_min_offset is None or offset >= commitlog_min_offset


def first_invalid(units: Units) -> int:
    """Index of the first unit failing :func:`valid_mask` (the end of written data), or ``len``."""
    bad = np.flatnonzero(~valid_mask(units))
    return int(bad[0]) if bad.size else len(units)


def is_blank_unit(units: Units) -> Bools:
    """Pre-blank fill units ``(0, 0x7FFFFFFF, 0)`` written below a queue's first real offset."""
    return np.asarray(
        (units["offset"] == 0) & (units["size"] == BLANK_FILL_SIZE) & (units["tags_code"] == 0),
        dtype=np.bool_,
    )


def is_ext_tags_code(tags_codes: npt.ArrayLike) -> Bools:
    """Which tags codes are ConsumeQueueExt addresses (``<= Integer.MIN_VALUE - 1``)."""
    return np.asarray(np.asarray(tags_codes, dtype=np.int64) <= EXT_MAX_ADDRESS, dtype=np.bool_)


def ext_offsets(addresses: npt.ArrayLike) -> Int64s:
    """Byte offsets in the ext queue of ext addresses (``address - Long.MIN_VALUE``)."""
    return np.asarray(np.asarray(addresses, dtype=np.int64) & _INT64_MAX, dtype=np.int64)


def list_offset_files(directory: Path, file_size: int, *, unit: int = 1) -> list[StoreFile]:
    """The offset-named files of one queue directory, sorted, validated against ``file_size``.

    Names that are not 20 digits are skipped with a warning. A missing directory gives ``[]``.

    Raises:
        CorruptStoreFileError: a name not aligned to ``file_size``, or a size that is not a
            multiple of ``unit`` or differs from ``file_size`` (a zero-length last file is dropped).
    """
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return []
    files: list[StoreFile] = []
    for entry in entries:
        if not _FILE_NAME.fullmatch(entry.name):
            log.warning("%s: ignoring %r, not a 20-digit offset file name", directory, entry.name)
            continue
        try:
            size = entry.stat().st_size
        except FileNotFoundError:  # deleted by the broker while we listed
            continue
        files.append(StoreFile(int(entry.name), Path(entry.path), size))
    files.sort()
    if files and files[-1].size == 0:
        files.pop()
    for f in files:
        if f.size % unit or f.size != file_size or f.start % file_size:
            what = "not a whole number of units" if f.size % unit else "not the configured size"
            raise CorruptStoreFileError(
                f"{f.path}: size {f.size} at start offset {f.start} is {what} ({file_size}-byte "
                f"files of {unit}-byte units); the file is truncated, or set the store's mapped "
                "file size to the broker's value",
                path=str(f.path),
                offset=f.start,
            )
    return files


def _pread(path: Path, length: int, position: int) -> bytes:
    return pread_file(
        path,
        length,
        position,
        lambda: OffsetNotInStoreError(
            f"{path}: deleted by the broker while reading; retry from the new min offset"
        ),
    )


class ConsumeQueue:
    """Read-only view of one ``consumequeue/{topic}/{queueId}`` directory.

    The directory is listed again on every call, so a live broker adding and deleting files is
    followed without re-opening.
    """

    def __init__(self, directory: str | os.PathLike[str], file_size: int = DEFAULT_CQ_FILE_SIZE):
        self.directory = Path(directory)
        self.file_size = effective_cq_file_size(file_size)
        self.units_per_file = self.file_size // CQ_UNIT_SIZE

    @classmethod
    def for_queue(
        cls,
        consumequeue_dir: str | os.PathLike[str],
        topic: str,
        queue_id: int,
        *,
        file_size: int = DEFAULT_CQ_FILE_SIZE,
    ) -> ConsumeQueue:
        """The queue ``(topic, queue_id)`` under a store's ``consumequeue`` directory."""
        return cls(Path(consumequeue_dir) / topic / str(queue_id), file_size=file_size)

    def __repr__(self) -> str:
        return f"ConsumeQueue({str(self.directory)!r}, file_size={self.file_size})"

    def files(self) -> list[StoreFile]:
        """The queue's files, sorted by start offset (see :func:`list_offset_files`)."""
        return list_offset_files(self.directory, self.file_size, unit=CQ_UNIT_SIZE)

    def max_offset(self, *, hint: int | None = None, files: list[StoreFile] | None = None) -> int:
        """Next queue offset to be written: the first invalid unit of the last file (spec §3.4).

        ``hint``, a queue offset known to be at or below the max (e.g. the previous answer), lets
        the scan start there; chunks grow 4x from 4096 units, so a live queue costs one small read.
        ``files``: a listing just made (:meth:`files`), not made again.
        """
        files = self.files() if files is None else files
        if not files:
            return 0
        last = files[-1]
        base = last.start // CQ_UNIT_SIZE
        pos = 0 if hint is None else min(max(hint - base, 0), self.units_per_file)
        chunk = _FIRST_CHUNK_UNITS
        while pos < self.units_per_file:
            n = min(chunk, self.units_per_file - pos)
            units = decode_units(_pread(last.path, n * CQ_UNIT_SIZE, pos * CQ_UNIT_SIZE))
            k = first_invalid(units)
            if k < n:
                return base + pos + k
            pos += n
            chunk *= 4
        return base + self.units_per_file

    def min_offset(
        self, commitlog_min_offset: int | None = None, *, files: list[StoreFile] | None = None
    ) -> int:
        """First readable queue offset (spec §3.4).

        Pre-blank fill units are skipped; with ``commitlog_min_offset`` the answer is the first
        unit whose commitlog offset is at or above it. Files are searched in order (one read each),
        so a first file the broker has not yet deleted does not hide later data. If no unit
        qualifies the queue has nothing readable and the answer is where its written data ends.
        ``files``: a listing just made (:meth:`files`), not made again.
        """
        files = self.files() if files is None else files
        if not files:
            return 0
        for f in files:
            # the usual answer is a file's first unit (the broker deletes a commitlog file and
            # the consumequeue files below it together): one unit read, not the whole file
            first = decode_units(_pread(f.path, CQ_UNIT_SIZE, 0), path=f.path)
            if len(first) and _qualifies(first, commitlog_min_offset):
                return f.start // CQ_UNIT_SIZE
            units = decode_units(_pread(f.path, f.size, 0), path=f.path)
            end = first_invalid(units)
            ok = ~is_blank_unit(units[:end])
            if commitlog_min_offset is not None:
                ok &= units["offset"][:end] >= commitlog_min_offset
            hit = np.flatnonzero(ok)
            if hit.size:
                return f.start // CQ_UNIT_SIZE + int(hit[0])
            if end < len(units):
                # the written data ends in this file: its end as this read saw it, not a max
                # read later (the broker may have written the first unit in between)
                return f.start // CQ_UNIT_SIZE + end
        return self.max_offset(files=files)

    def read_units(self, start: int, count: int) -> Units:
        """Up to ``count`` units from queue offset ``start``, one read per file touched.

        The result stops early at the end of written data (first invalid unit), at the end of the
        last file, or before a missing file; it is empty when ``start`` is at or past the end.

        Raises:
            OffsetNotInStoreError: ``start`` lies below the first file (deleted by the broker) or in
                a missing file.
            CorruptStoreFileError: a file has the wrong size (see :func:`list_offset_files`).
        """
        if start < 0 or count < 0:
            raise ValueError(f"start={start!r} and count={count!r} must be >= 0")
        files = self.files()
        empty = np.empty(0, dtype=CQ_UNIT_DTYPE)
        if count == 0 or not files:
            return empty
        by_start = {f.start: f for f in files}
        first = files[0].start // CQ_UNIT_SIZE
        end_of_files = files[-1].start // CQ_UNIT_SIZE + self.units_per_file
        if start < first:
            raise OffsetNotInStoreError(
                f"{self.directory}: queue offset {start} is below the first file "
                f"(min queue offset {first}); the broker has deleted it"
            )
        chunks: list[Units] = []
        q, left = start, min(count, end_of_files - start)
        while left > 0:
            byte = q * CQ_UNIT_SIZE
            f = by_start.get(byte - byte % self.file_size)
            if f is None:
                if chunks:
                    break
                raise OffsetNotInStoreError(
                    f"{self.directory}: queue offset {q} falls in missing file "
                    f"{byte - byte % self.file_size:020d}"
                )
            pos = byte - f.start
            n = min(left, (self.file_size - pos) // CQ_UNIT_SIZE)
            units = decode_units(_pread(f.path, n * CQ_UNIT_SIZE, pos), path=f.path)
            k = first_invalid(units)
            chunks.append(units[:k])
            if k < n:
                break
            q, left = q + n, left - n
        if not chunks:
            return empty
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)


def list_queues(consumequeue_dir: str | os.PathLike[str]) -> list[tuple[str, int]]:
    """Every ``(topic, queueId)`` under a store's ``consumequeue`` directory, sorted.

    Entries that are not directories, and queue directories whose name is not a canonical
    non-negative integer, are skipped with a warning naming them.

    Raises:
        StoreFileNotFoundError: the directory does not exist.
    """
    root = Path(consumequeue_dir)
    if not root.is_dir():
        raise StoreFileNotFoundError(
            f"{root}: no consumequeue directory; point storePathRootDir at the broker's store"
        )
    out: list[tuple[str, int]] = []
    # scandir: an entry's type comes with the listing (no stat per queue, thousands of them)
    with os.scandir(root) as topics:
        for topic_dir in topics:
            if not topic_dir.is_dir():
                log.warning("%s: skipping %r, not a topic directory", root, topic_dir.name)
                continue
            where = topic_dir.path
            with os.scandir(where) as queues:
                for queue_dir in queues:
                    name = queue_dir.name
                    if not (queue_dir.is_dir() and name.isdecimal() and str(int(name)) == name):
                        log.warning("%s: skipping %r, not a queue id directory", where, name)
                        continue
                    out.append((topic_dir.name, int(name)))
    out.sort()
    return out


class CqExtUnit(NamedTuple):
    """A ConsumeQueueExt unit: ``size i16, tagsCode i64, msgStoreTime i64, bitMapSize i16, map``."""

    size: int
    tags_code: int
    msg_store_time: int
    filter_bit_map: bytes = b""


class ConsumeQueueExt:
    """Read-only view of one ``consumequeue_ext/{topic}/{queueId}`` directory (spec §2.8).

    A consume-queue tags code ``<= EXT_MAX_ADDRESS`` is the address ``Long.MIN_VALUE + offset`` of
    a :class:`CqExtUnit` here; the real tags code is stored in that unit. A file ends at the first
    unit whose size is < 1 (``-1`` marks "filled to end", ``0`` unwritten space).
    """

    def __init__(
        self, directory: str | os.PathLike[str], *, file_size: int = DEFAULT_CQ_EXT_FILE_SIZE
    ):
        self.directory = Path(directory)
        self.file_size = file_size

    def files(self) -> list[StoreFile]:
        """The ext files, sorted by start offset."""
        return list_offset_files(self.directory, self.file_size)

    def _locate(self, offsets: Int64s, files: list[StoreFile]) -> tuple[StoreFile, Int64s]:
        start = int(offsets[0]) - int(offsets[0]) % self.file_size
        f = next((f for f in files if f.start == start), None)
        if f is None:
            raise OffsetNotInStoreError(
                f"{self.directory}: ext offset {int(offsets[0])} falls in missing file "
                f"{start:020d}; check mappedFileSizeConsumeQueueExt"
            )
        return f, offsets - start

    def lookup(self, addresses: npt.ArrayLike) -> tuple[Int64s, Int64s]:
        """``(tags_codes, msg_store_times)`` of the units at ext ``addresses``, one read per file.

        Raises:
            CorruptStoreFileError: a unit is not written (size < 20) or runs past its file.
            OffsetNotInStoreError: an address points into a missing file.
        """
        offsets = ext_offsets(addresses)
        tags = np.empty(offsets.shape, dtype=np.int64)
        times = np.empty(offsets.shape, dtype=np.int64)
        starts = offsets - offsets % self.file_size
        files = self.files() if offsets.size else []
        for start in np.unique(starts):
            sel = starts == start
            f, pos = self._locate(offsets[sel], files)
            lo, hi = int(pos.min()), int(pos.max()) + CQ_EXT_UNIT_HEADER
            if hi > f.size:
                at = f.start + hi - CQ_EXT_UNIT_HEADER
                raise CorruptStoreFileError(
                    f"{f.path}: ext unit at offset {at} runs past the file end",
                    path=str(f.path),
                    offset=at,
                )
            raw = np.frombuffer(_pread(f.path, hi - lo, lo), dtype=np.uint8)
            rel = pos - lo
            sizes = gather_be(raw, rel, 2)
            bad = np.flatnonzero(sizes < CQ_EXT_UNIT_HEADER)
            if bad.size:
                at = f.start + int(pos[bad[0]])
                raise CorruptStoreFileError(
                    f"{f.path}: no ext unit at offset {at} (size {int(sizes[bad[0]])}); the "
                    "consume queue points at unwritten ext data",
                    path=str(f.path),
                    offset=at,
                )
            tags[sel] = gather_be(raw, rel + 2, 8)
            times[sel] = gather_be(raw, rel + 10, 8)
        return tags, times

    def resolve_tags_codes(self, tags_codes: npt.ArrayLike) -> Int64s:
        """Copy of ``tags_codes`` with every ext address replaced by the tags code it points to."""
        codes = np.array(tags_codes, dtype=np.int64)
        ext = is_ext_tags_code(codes)
        if ext.any():
            codes[ext] = self.lookup(codes[ext])[0]
        return codes

    def get(self, address: int) -> CqExtUnit:
        """The whole unit (with its filter bit map) at one ext ``address``."""
        f, pos = self._locate(ext_offsets([address]), self.files())
        units = _parse_ext_units(f, int(pos[0]), limit=1)
        if not units:
            raise CorruptStoreFileError(
                f"{f.path}: no ext unit at offset {f.start + int(pos[0])}; the consume queue "
                "points at unwritten ext data",
                path=str(f.path),
                offset=f.start + int(pos[0]),
            )
        return units[0][1]

    def scan(self) -> list[tuple[int, CqExtUnit]]:
        """``(address, unit)`` of every written unit in every file (diagnostics, not a hot path)."""
        return [pair for f in self.files() for pair in _parse_ext_units(f, 0)]


def _parse_ext_units(
    f: StoreFile, pos: int, limit: int | None = None
) -> list[tuple[int, CqExtUnit]]:
    data = _pread(f.path, f.size - pos, pos)
    out: list[tuple[int, CqExtUnit]] = []
    at = 0
    while at + 2 <= len(data) and (limit is None or len(out) < limit):
        size = int.from_bytes(data[at : at + 2], "big", signed=True)
        if size < 1:  # -1: filled to the end, 0: not written
            break
        if size < CQ_EXT_UNIT_HEADER or at + size > len(data):
            raise CorruptStoreFileError(
                f"{f.path}: bad ext unit size {size} at offset {f.start + pos + at}",
                path=str(f.path),
                offset=f.start + pos + at,
            )
        tags, store_time = np.frombuffer(data, dtype=">i8", count=2, offset=at + 2).tolist()
        unit = CqExtUnit(size, tags, store_time, data[at + CQ_EXT_UNIT_HEADER : at + size])
        out.append((f.start + pos + at - 2**63, unit))
        at += size
    return out
