"""A local tiered index file, ``{tieredDataDir}/tiered_index_file/{beginTimestamp}`` (spec §6).

Upstream ``IndexStoreFile``: fixed size ``28 + slots*8 + max_items*32``, one hash chain per slot,
newest item first, the same bytes as upstream's ``putKey`` loop (vectors V6); the few deliberate
differences are told where they are made. The header and slot table are written through a memory
map, the items with ``pwrite`` (written once, they need not become pages of this process); queries
read through the map. A batch writes its items (beyond the item count, invisible), then the slot
heads, then the header, so :meth:`IndexStoreFile.open` can undo a batch a crash cut short.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import struct
import sys
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt

from tiered.closeable import Closeable
from tiered.errors import IndexFileError
from tiered.index.format import BEGIN_MAGIC_CODE
from tiered.index.format import DEFAULT_MAX_ITEMS
from tiered.index.format import DEFAULT_SLOTS
from tiered.index.format import END_MAGIC_CODE
from tiered.index.format import HEADER_SIZE
from tiered.index.format import ITEM_SIZE
from tiered.index.format import MAX_QUERY_COUNT
from tiered.index.format import SLOT_SIZE
from tiered.index.format import IndexHeader
from tiered.index.format import IndexItem
from tiered.index.format import IndexStatus
from tiered.index.format import KeyQuery
from tiered.index.format import local_file_size
from tiered.index.format import slot_of
from tiered.index.index_batch import IndexBatch
from tiered.process.native import kernel

_LOG = logging.getLogger(__name__)
FILE_DIRECTORY_NAME: Final = "tiered_index_file"
COMPACTED_DIRECTORY_NAME: Final = "compacting"
_ITEM: Final = struct.Struct(">iiiqiii")
_I32: Final = struct.Struct(">i")
_LINUX: Final = sys.platform.startswith("linux")
_MADV_POPULATE_WRITE: Final = 23
"""Linux's ``MADV_POPULATE_WRITE`` (5.14+; Python 3.11's mmap does not name it)."""
_libc_madvise = ctypes.CDLL(None, use_errno=True).madvise
_libc_madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc_madvise.restype = ctypes.c_int


def local_index_files(directory: str | os.PathLike[str]) -> list[Path]:
    """The local index files in ``directory`` (decimal names), oldest first; [] if absent."""
    d = Path(directory)
    if not d.is_dir():
        return []
    return sorted((p for p in d.iterdir() if p.name.isdigit() and p.is_file()), key=_name_key)


def _name_key(path: Path) -> int:
    return int(path.name)


def _populate(mapped: mmap.mmap, length: int) -> None:
    """Fault in the first ``length`` bytes of a writable map for writing, in one
    ``madvise(MADV_POPULATE_WRITE)`` (Linux 5.14+); nothing when the system cannot (the pages then
    fault in as keys land). A tail's keys touch every page of the slot table within seconds
    anyway, one write fault at a time; faulting them in at once costs less CPU.

    The call goes through ctypes, which releases the interpreter lock: ``mmap.madvise`` holds
    it, and allocating and zeroing a whole slot table's pages would stop every other thread of
    the process from running Python meanwhile."""
    if not _LINUX:
        return
    length = min(-(-length // mmap.PAGESIZE) * mmap.PAGESIZE, len(mapped))
    if length <= 0:
        return
    start = ctypes.c_char.from_buffer(mapped)  # an export of the map: dropped before return
    try:
        done = _libc_madvise(ctypes.addressof(start), length, _MADV_POPULATE_WRITE)
    finally:
        del start
    if done != 0:  # EINVAL before Linux 5.14: the pages fault in as keys land
        why = os.strerror(ctypes.get_errno())
        _LOG.debug("MADV_POPULATE_WRITE refused (%s): the slot table faults in as it is used", why)


class IndexStoreFile(Closeable):
    """One local index file (UNSEALED or SEALED); use :meth:`create` or :meth:`open`.

    Not thread-safe: one writer, and queries from the same thread (the index service holds a lock).
    """

    def __init__(
        self,
        path: Path,
        mapped: mmap.mmap,
        header: IndexHeader,
        slots: int,
        max_items: int,
        fd: int = -1,
    ):
        self.path = path
        self._fd = fd  # items are written with pwrite (a writable file), the rest through the map
        self.slots = slots
        self.max_items = max_items
        self._mm = mapped
        self._begin = header.begin_timestamp
        self._end = header.end_timestamp
        self._slot_count = header.hash_slot_count
        self._count = header.item_count
        self._status = (
            IndexStatus.SEALED if header.magic == END_MAGIC_CODE else IndexStatus.UNSEALED
        )
        self._items_base = HEADER_SIZE + slots * SLOT_SIZE
        self.readonly = False
        self._unflushed = True  # what a killed process wrote may still be in the page cache

    # --- life cycle -------------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        directory: str | os.PathLike[str],
        begin_timestamp: int,
        *,
        slots: int = DEFAULT_SLOTS,
        max_items: int = DEFAULT_MAX_ITEMS,
    ) -> IndexStoreFile:
        """Create the UNSEALED file ``directory/{begin_timestamp}`` (sparse, zero-filled).

        Raises:
            FileExistsError: the file exists (open it instead).
        """
        _check_shape(slots, max_items)
        path = Path(directory) / str(begin_timestamp)
        path.parent.mkdir(parents=True, exist_ok=True)
        header = IndexHeader(BEGIN_MAGIC_CODE, begin_timestamp, 0, 0, 0)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.ftruncate(fd, local_file_size(slots, max_items))
            os.pwrite(fd, header.encode(), 0)
            mapped = mmap.mmap(fd, local_file_size(slots, max_items))
        except BaseException:
            os.close(fd)
            raise
        _populate(mapped, HEADER_SIZE + slots * SLOT_SIZE)
        return cls(path, mapped, header, slots, max_items, fd)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        slots: int = DEFAULT_SLOTS,
        max_items: int = DEFAULT_MAX_ITEMS,
        readonly: bool = False,
    ) -> IndexStoreFile:
        """Reopen a local file after a restart; it continues where it stopped.

        Its status is SEALED if it carries the END magic, else UNSEALED. The begin timestamp is the
        file name (as upstream) when the name is a number. The stored end timestamp is kept
        (upstream reloads it from the begin timestamp), so a reopened file continues
        byte-identically to an uninterrupted run. A slot head pointing past the item count (a batch
        cut short by a crash) is walked back along the ``next`` fields it was written with.
        ``readonly`` maps the file for queries only (another process may be writing it): nothing is
        repaired or written, and items put after the open stay invisible.

        Raises:
            FileNotFoundError: no such file.
            IndexFileError: the size does not match ``slots``/``max_items`` or the header is
                corrupt.
        """
        _check_shape(slots, max_items)
        p = Path(path)
        expected = local_file_size(slots, max_items)
        fd = os.open(p, os.O_RDONLY if readonly else os.O_RDWR)
        keep = False
        try:
            size = os.fstat(fd).st_size
            if size != expected:
                raise IndexFileError(
                    f"{p}: {size} bytes, but tieredStoreIndexFileMaxHashSlotNum={slots} and "
                    f"tieredStoreIndexFileMaxIndexNum={max_items} make {expected}: configure the "
                    "values the file was written with"
                )
            access = mmap.ACCESS_READ if readonly else mmap.ACCESS_WRITE
            mapped = mmap.mmap(fd, size, access=access)
            header = IndexHeader.parse(mapped)
            keep = not readonly and header.magic in (BEGIN_MAGIC_CODE, END_MAGIC_CODE)
        finally:
            if not keep:
                os.close(fd)
        if p.name.isdigit():
            header = IndexHeader(
                header.magic, int(p.name), header.end_timestamp,
                header.hash_slot_count, header.item_count,
            )  # fmt: skip
        if header.magic not in (BEGIN_MAGIC_CODE, END_MAGIC_CODE) or not (
            0 <= header.item_count < max_items
        ):
            mapped.close()
            if keep:
                os.close(fd)
            raise IndexFileError(
                f"{p}: header magic {header.magic:#x} / item count {header.item_count} is not a "
                "tiered index file header; move the file aside"
            )
        self = cls(p, mapped, header, slots, max_items, fd if keep else -1)
        self.readonly = readonly
        if not readonly:
            self._undo_partial_batch()
        return self

    def close(self) -> None:
        """Flush and unmap; the status becomes SHUTDOWN (queries then return nothing)."""
        if not self._mm.closed:
            if not self.readonly:
                self.flush()
            self._mm.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._status = IndexStatus.SHUTDOWN

    def flush(self) -> None:
        """Write dirty pages to disk: the mapped slot table and header, and the items written
        with ``pwrite``. Nothing to do when nothing was written since the last flush (the
        service's checkpoints run idle or not).

        On Linux one ``fdatasync`` does both: pages written through a shared mapping are dirty
        pages of the file's page cache (the kernel marks them at the write fault), and
        ``msync(MS_SYNC)`` is itself ``vfs_fsync_range`` over the mapping. ``mmap.flush``
        holds the GIL through the writeback (a tail dirties the whole slot table within
        seconds); ``os.fdatasync`` releases it. Elsewhere the map is synced first."""
        if not self.readonly and not self._mm.closed and self._unflushed:
            if self._fd < 0 or not _LINUX:
                self._mm.flush()
            if self._fd >= 0:
                os.fdatasync(self._fd)
            self._unflushed = False

    def seal(self) -> None:
        """Stop accepting puts: status SEALED and the END magic in the header, so a file sealed
        before a restart reopens SEALED (upstream reopens every local file UNSEALED and writes
        END only when the file is exactly full)."""
        if self._status is IndexStatus.UNSEALED:
            self._check_writable()
            self._status = IndexStatus.SEALED
            self._write_header()

    # --- state ------------------------------------------------------------------------------------

    @property
    def status(self) -> IndexStatus:
        """UNSEALED (accepts puts), SEALED (full or sealed) or SHUTDOWN (closed)."""
        return self._status

    @property
    def begin_timestamp(self) -> int:
        """The file's key: its begin timestamp, ms."""
        return self._begin

    @property
    def end_timestamp(self) -> int:
        """The largest store timestamp put so far, ms (0 while empty)."""
        return self._end

    @property
    def item_count(self) -> int:
        """Items written (item indexes ``1 .. item_count`` are used)."""
        return self._count

    @property
    def header(self) -> IndexHeader:
        """The header as it is (or will be, for a SEALED file) on disk."""
        return IndexHeader(self._magic(), self._begin, self._end, self._slot_count, self._count)

    def buffer(self) -> memoryview:
        """A read-only view of the whole file (release it before :meth:`close`)."""
        return memoryview(self._mm).toreadonly()

    # --- put --------------------------------------------------------------------------------------

    def put_many(self, batch: IndexBatch) -> int:
        """Put the batch's messages in order until one does not fit; return how many were put.

        A message whose key set would take the item count to ``max_items`` or beyond seals the
        file (upstream FILE_FULL): the caller creates the next file and puts
        ``batch.messages_slice(returned)`` there. A SEALED file puts nothing and returns 0. A
        message with ``max_items`` keys or more fits no file: it is skipped (not indexed) and
        logged, where upstream would seal file after file.

        Items are numbered in put order, a stable sort by slot links each item to the previous
        one of its slot, and the slot heads and header are updated once per batch. A key whose
        slot position falls before the file (hash ``Integer.MIN_VALUE`` with most slot counts) is
        skipped alone; upstream aborts the rest of the message's key set and retries it.
        """
        if self._status is not IndexStatus.UNSEALED or not batch.messages:
            return 0
        self._check_writable()
        slot_pos = HEADER_SIZE + np.fmod(batch.hashes.astype(np.int64), self.slots) * SLOT_SIZE
        too_big = batch.key_counts >= self.max_items
        if too_big.any():
            _LOG.warning(
                "%s: %d message(s) with %d keys or more not indexed (max items per file)",
                self.path, int(too_big.sum()), self.max_items,
            )  # fmt: skip
            slot_pos[np.repeat(too_big, batch.key_counts)] = -1
        written = np.concatenate(([0], np.cumsum(slot_pos >= 0)))
        bounds = np.concatenate(([0], np.cumsum(batch.key_counts)))
        before = self._count + written[bounds[:-1]]  # item count when each message is put
        fits = (before + batch.key_counts < self.max_items) | (batch.key_counts == 0) | too_big
        put = batch.messages if bool(fits.all()) else int(np.argmin(fits))
        rows = int(bounds[put])
        # rows whose slot lands inside the header are put one at a time, as upstream does
        odd = np.flatnonzero((slot_pos[:rows] >= 0) & (slot_pos[:rows] < HEADER_SIZE))
        start = 0
        for row in [*odd.tolist(), rows]:
            keep = np.flatnonzero(slot_pos[start:row] >= HEADER_SIZE) + start
            if keep.size:
                self._put_rows(batch, keep)
            if row < rows:
                self._put_header_row(batch, row, int(slot_pos[row]))
            start = row + 1
        self._write_header()
        if put < batch.messages:
            self.seal()
        return put

    def _put_rows(self, batch: IndexBatch, rows: npt.NDArray[np.intp]) -> None:
        """Put ``rows`` of the batch (their slots lie after the header) as the next items, each
        chained to its slot's previous head: one compiled loop (``tiered._kernel.link_items``)
        over the rows, as upstream's ``putKey`` goes key by key."""
        k = rows.size
        first = self._count + 1
        self._unflushed = True
        table = np.frombuffer(self._mm, np.uint8, self.slots * SLOT_SIZE, HEADER_SIZE)
        items, new_slots, end = kernel().link_items(
            table, self.slots,
            np.ascontiguousarray(batch.hashes), np.ascontiguousarray(batch.topic_ids),
            np.ascontiguousarray(batch.queue_ids), np.ascontiguousarray(batch.offsets),
            np.ascontiguousarray(batch.sizes), np.ascontiguousarray(batch.timestamps),
            np.ascontiguousarray(rows, dtype=np.int64), first, self._begin,
        )  # fmt: skip
        del table
        self._write_raw(memoryview(items), self._items_base + first * ITEM_SIZE)
        self._slot_count += new_slots
        self._end = max(self._end, end)
        self._count += k

    def _put_header_row(self, batch: IndexBatch, row: int, position: int) -> None:
        """Upstream with a slot inside the header: the old head is read from header bytes."""
        (old,) = _I32.unpack_from(self.header.encode(), position)
        old = max(old, 0)
        index = self._count + 1
        self._write_raw(
            memoryview(
                _ITEM.pack(
                    int(batch.hashes[row]),
                    int(batch.topic_ids[row]),
                    int(batch.queue_ids[row]),
                    int(batch.offsets[row]),
                    int(batch.sizes[row]),
                    int(_time_diff(batch.timestamps[row : row + 1], self._begin)[0]),
                    old,
                )
            ),
            self._items_base + index * ITEM_SIZE,
        )
        self._slot_count += int(old == 0)
        self._end = max(self._end, int(batch.timestamps[row]))
        self._count = index

    # --- query ------------------------------------------------------------------------------------

    def query(self, q: KeyQuery) -> list[IndexItem]:
        """The items answering ``q``, newest first (spec §6.6).

        Upstream's walk: from the slot head while ``0 < index <= item_count``, at most 512 items,
        stopping *after* adding when more than ``max_count`` matched, so up to ``max_count + 1``
        items come back (the service trims; vectors V6).
        """
        if self._status not in (IndexStatus.UNSEALED, IndexStatus.SEALED):
            return []
        position = HEADER_SIZE + slot_of(q.key_hash, self.slots) * SLOT_SIZE
        if position < 0:
            return []  # upstream: an exception, caught, empty result
        (current,) = _I32.unpack_from(self._mm, position)
        result: list[IndexItem] = []
        left = MAX_QUERY_COUNT
        while left > 0 and 0 < current <= self._count:
            h, tid, qid, offset, size, diff, nxt = _ITEM.unpack_from(
                self._mm, self._items_base + current * ITEM_SIZE
            )
            item = IndexItem(h, tid, qid, offset, size, diff, current)
            if q.matches(h, item.store_timestamp(self._begin), tid):
                result.append(item)
                if len(result) > q.max_count:
                    break
            current = nxt
            left -= 1
        return result

    # --- internals --------------------------------------------------------------------------------

    def _check_writable(self) -> None:
        if self.readonly:
            raise IndexFileError(f"{self.path} was opened read-only; open it without readonly")

    def _magic(self) -> int:
        full = self.max_items == self._count + 1
        return END_MAGIC_CODE if full or self._status is IndexStatus.SEALED else BEGIN_MAGIC_CODE

    def _write_header(self) -> None:
        self._unflushed = True
        self._mm[:HEADER_SIZE] = self.header.encode()

    def _write_items(self, items: npt.NDArray[np.void], first: int) -> None:
        """Write ``items`` as items ``first ..``."""
        self._write_raw(items.view(np.uint8).data, self._items_base + first * ITEM_SIZE)

    def _write_raw(self, data: memoryview, position: int) -> None:
        """Write ``data`` at ``position`` with ``pwrite`` when the file has a descriptor (so the
        items, up to 640 MB of a file, never become resident pages of this process), else
        through the map."""
        self._unflushed = True
        if self._fd < 0:
            self._mm[position : position + len(data)] = data
            return
        done = 0
        while done < len(data):
            done += os.pwrite(self._fd, data[done:], position + done)

    def _slot_heads(self) -> npt.NDArray[np.int32]:
        """A writable big-endian view of every slot's head (column 0 of the slot table)."""
        table = np.frombuffer(self._mm, ">i4", self.slots * 2, HEADER_SIZE)
        return table.reshape(self.slots, 2)[:, 0]

    def _undo_partial_batch(self) -> None:
        self._unflushed = True
        heads = self._slot_heads()
        for slot in np.flatnonzero(heads > self._count).tolist():
            current = int(heads[slot])
            while self._count < current < self.max_items:
                (current,) = _I32.unpack_from(
                    self._mm, self._items_base + current * ITEM_SIZE + ITEM_SIZE - 4
                )
            heads[slot] = current if current <= self._count else 0
        del heads


def _time_diff(timestamps: npt.NDArray[np.int64], begin: int) -> npt.NDArray[np.int64]:
    """``(int) ((ts - begin) / 1000L)``: truncating long division, then wrapped to int32."""
    delta = timestamps - begin
    quotient = np.abs(delta) // 1000 * np.sign(delta)
    return (quotient + 2**31) % 2**32 - 2**31


def _check_shape(slots: int, max_items: int) -> None:
    if slots < 1 or max_items < 2 or local_file_size(slots, max_items) > 2**31 - 1:
        raise IndexFileError(
            f"slots={slots!r}, max_items={max_items!r}: need slots >= 1, max_items >= 2 and "
            "28 + slots*8 + max_items*32 below 2 GiB"
        )
