"""The broker's own IndexFile, ``{storePathRootDir}/index/{yyyyMMddHHmmssSSS}`` (spec §4).

Layout (big-endian): a 40-byte header, ``slots`` i32 hash slots, then ``max_items`` 20-byte items
``(key hash i32, commitlog offset i64, timeDiff s i32, prev item i32)``. Item 0 is never used; a
slot holds the newest item of its chain, each item the previous one (0 ends the chain). The key hash
is ``abs(String.hashCode(topic + "#" + key))`` with ``Integer.MIN_VALUE`` mapped to 0 (the tiered
index maps it differently); the slot is ``hash % slots``.

The header does not record ``slots`` (``maxHashSlotNum``), so a reader must be told it; the item
capacity then follows from the file size. Reading is read-only (``mmap`` of an ``O_RDONLY`` fd).
The bulk writer builds a whole file at once with numpy (stable sort by slot gives the chains).
"""

from __future__ import annotations

import io
import mmap
import os
import struct
from collections.abc import Iterable
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from datetime import tzinfo
from pathlib import Path
from typing import BinaryIO
from typing import Final
from typing import NamedTuple
from typing import TypedDict
from typing import Unpack

import numpy as np
import numpy.typing as npt

from tiered.broker.javautil import java_string_hash
from tiered.broker.javautil import to_i32
from tiered.closeable import Closeable
from tiered.errors import IndexFileError
from tiered.errors import StoreFileNotFoundError

INDEX_HEADER_SIZE: Final = 40
HASH_SLOT_SIZE: Final = 4
INDEX_ITEM_SIZE: Final = 20
DEFAULT_MAX_HASH_SLOT_NUM: Final = 5_000_000
DEFAULT_MAX_INDEX_NUM: Final = 20_000_000
MAX_TIMESTAMP: Final = 2**63 - 1
ITEM_DTYPE: Final = np.dtype(
    [("hash", ">i4"), ("phys", ">i8"), ("time_diff", ">i4"), ("prev", ">i4")]
)
_HEADER: Final = struct.Struct(">qqqqii")
_ITEM: Final = struct.Struct(">iqii")
_I32: Final = struct.Struct(">i")
_INT_MAX: Final = 2**31 - 1


def key_hash_local(topic: str, key: str) -> int:
    """``IndexFile.indexKeyHashMethod(topic + "#" + key)``: abs of the Java hash, MIN_VALUE -> 0."""
    h = to_i32(abs(java_string_hash(f"{topic}#{key}")))
    return 0 if h < 0 else h


def index_file_size(
    slots: int = DEFAULT_MAX_HASH_SLOT_NUM, max_items: int = DEFAULT_MAX_INDEX_NUM
) -> int:
    """Bytes of an index file: ``40 + slots*4 + max_items*20`` (420,000,040 by default)."""
    return INDEX_HEADER_SIZE + slots * HASH_SLOT_SIZE + max_items * INDEX_ITEM_SIZE


def index_file_name(timestamp_ms: int, tz: tzinfo | None = None) -> str:
    """``yyyyMMddHHmmssSSS`` of ``timestamp_ms`` in ``tz`` (default: local time, as the JVM)."""
    seconds, millis = divmod(timestamp_ms, 1000)
    when = datetime.fromtimestamp(seconds, tz) if tz else datetime.fromtimestamp(seconds)
    return f"{when:%Y%m%d%H%M%S}{millis:03d}"


class IndexHeader(NamedTuple):
    """The 40-byte header. ``index_count`` starts at 1 (= items + 1)."""

    begin_timestamp: int = 0
    end_timestamp: int = 0
    begin_phy_offset: int = 0
    end_phy_offset: int = 0
    hash_slot_count: int = 0
    index_count: int = 1

    def encode(self) -> bytes:
        """The header's 40 bytes."""
        return _HEADER.pack(
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )


@dataclass(frozen=True)
class IndexHit:
    """One matching item: its commitlog offset, reconstructed store time (s precision), index."""

    phys_offset: int
    store_timestamp: int
    item: int


class IndexFile(Closeable):
    """A read-only, memory-mapped broker index file. Use as a context manager or call close()."""

    def __init__(self, path: Path, mapped: mmap.mmap, slots: int):
        self.path = path
        self.slots = slots
        self._mm = mapped
        self.max_items = (
            len(mapped) - INDEX_HEADER_SIZE - slots * HASH_SLOT_SIZE
        ) // INDEX_ITEM_SIZE
        self.header = IndexHeader(*_HEADER.unpack_from(mapped, 0))
        if not 0 <= self.header.index_count <= self.max_items:
            self.close()
            raise IndexFileError(
                f"{path}: indexCount {self.header.index_count} outside [0, {self.max_items}]; "
                "the file is corrupt or maxHashSlotNum is wrong"
            )

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, slots: int = DEFAULT_MAX_HASH_SLOT_NUM
    ) -> IndexFile:
        """Map ``path`` read-only; ``slots`` is the broker's ``maxHashSlotNum``.

        Raises:
            StoreFileNotFoundError: the file does not exist.
            IndexFileError: its size does not fit ``slots`` (wrong ``maxHashSlotNum``) or the
                header is inconsistent.
        """
        p = Path(path)
        try:
            fd = os.open(p, os.O_RDONLY)
        except FileNotFoundError as e:
            raise StoreFileNotFoundError(f"{p}: no such index file") from e
        try:
            size = os.fstat(fd).st_size
            body = size - INDEX_HEADER_SIZE - slots * HASH_SLOT_SIZE
            if slots <= 0 or body < 0 or body % INDEX_ITEM_SIZE:
                raise IndexFileError(
                    f"{p}: size {size} does not fit maxHashSlotNum={slots!r} (40 + slots*4 + "
                    "items*20); pass the broker's maxHashSlotNum"
                )
            mapped = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        return cls(p, mapped, slots)

    def close(self) -> None:
        """Unmap the file."""
        self._mm.close()

    def slot_table(self) -> npt.NDArray[np.int32]:
        """All slot values (a copy)."""
        raw = np.frombuffer(self._mm, dtype=">i4", count=self.slots, offset=INDEX_HEADER_SIZE)
        return raw.astype(np.int32)

    def items(self) -> npt.NDArray[np.void]:
        """Items ``1 .. index_count-1`` as a structured array (a copy; row ``i`` = item ``i+1``)."""
        n = max(self.header.index_count - 1, 0)
        base = INDEX_HEADER_SIZE + self.slots * HASH_SLOT_SIZE + INDEX_ITEM_SIZE
        return np.frombuffer(self._mm, dtype=ITEM_DTYPE, count=n, offset=base).copy()

    def is_time_matched(self, begin_ms: int, end_ms: int) -> bool:
        """``IndexFile.isTimeMatched``: the file's [begin, end] intersects the query range."""
        b, e = self.header.begin_timestamp, self.header.end_timestamp
        return (begin_ms < b and end_ms > e) or b <= begin_ms <= e or b <= end_ms <= e

    def lookup(
        self,
        topic: str,
        key: str,
        begin_ms: int = 0,
        end_ms: int = MAX_TIMESTAMP,
        *,
        max_num: int | None = None,
    ) -> list[IndexHit]:
        """Items of ``topic#key`` stored in ``[begin_ms, end_ms]``, newest first.

        Walks the slot's chain with the broker's stop rules: prev <= 0, prev > indexCount, prev ==
        current, timeDiff < 0, an item older than ``begin_ms``, or ``max_num`` hits.

        Raises:
            IndexFileError: the chain loops (more steps than items).
        """
        key_hash = key_hash_local(topic, key)
        count = self.header.index_count
        (cur,) = _I32.unpack_from(
            self._mm, INDEX_HEADER_SIZE + (key_hash % self.slots) * HASH_SLOT_SIZE
        )
        hits: list[IndexHit] = []
        if cur <= 0 or cur > count or count <= 1:
            return hits
        base = INDEX_HEADER_SIZE + self.slots * HASH_SLOT_SIZE
        for _ in range(count):
            if max_num is not None and len(hits) >= max_num:
                return hits
            item_hash, phys, time_diff, prev = _ITEM.unpack_from(
                self._mm, base + cur * INDEX_ITEM_SIZE
            )
            if time_diff < 0:
                return hits
            stored = self.header.begin_timestamp + time_diff * 1000
            if item_hash == key_hash and begin_ms <= stored <= end_ms:
                hits.append(IndexHit(phys, stored, cur))
            if prev <= 0 or prev > count or prev == cur or stored < begin_ms:
                return hits
            cur = prev
        raise IndexFileError(f"{self.path}: the chain of slot {key_hash % self.slots} loops")


def lookup_index_files(
    paths: Iterable[str | os.PathLike[str]],
    topic: str,
    key: str,
    begin_ms: int = 0,
    end_ms: int = MAX_TIMESTAMP,
    *,
    max_num: int = 64,
    slots: int = DEFAULT_MAX_HASH_SLOT_NUM,
) -> list[IndexHit]:
    """``IndexService.queryOffset`` over a store's index files: newest file first, files whose
    time range misses the query skipped, stop after a file that begins before ``begin_ms``."""
    hits: list[IndexHit] = []
    for path in sorted(paths, key=lambda p: Path(p).name, reverse=True):
        with IndexFile.open(path, slots=slots) as f:
            if f.is_time_matched(begin_ms, end_ms):
                hits += f.lookup(topic, key, begin_ms, end_ms, max_num=max_num - len(hits))
            if f.header.begin_timestamp < begin_ms or len(hits) >= max_num:
                break
    return hits


# --- bulk writer (the store generator) ----------------------------------------------------------


def rollover_bounds(n_items: int, max_items: int = DEFAULT_MAX_INDEX_NUM) -> list[tuple[int, int]]:
    """``[lo, hi)`` item ranges, one per file: a file is full at ``max_items - 1`` items."""
    per_file = max_items - 1
    if per_file < 1:
        raise ValueError(f"max_items={max_items!r} must be >= 2 (item 0 is never used)")
    return [(lo, min(lo + per_file, n_items)) for lo in range(0, n_items, per_file)]


class FileOptions(TypedDict, total=False):
    """The keyword options of the writers: the file's ``slots`` and ``max_items`` (the broker's
    defaults when absent) and ``prev_end_timestamp`` / ``prev_end_phy_offset``, the previous
    file's end values, which a broker copies into a new file's header (0 for the first file);
    they decide the first item's timeDiff."""

    slots: int
    max_items: int
    prev_end_timestamp: int
    prev_end_phy_offset: int


def _size(options: FileOptions) -> int:
    return index_file_size(
        options.get("slots", DEFAULT_MAX_HASH_SLOT_NUM),
        options.get("max_items", DEFAULT_MAX_INDEX_NUM),
    )


def _layout(
    key_hashes: npt.ArrayLike,
    phys_offsets: npt.ArrayLike,
    store_timestamps: npt.ArrayLike,
    options: FileOptions,
) -> tuple[IndexHeader, npt.NDArray[np.int32], npt.NDArray[np.void]]:
    slots = options.get("slots", DEFAULT_MAX_HASH_SLOT_NUM)
    max_items = options.get("max_items", DEFAULT_MAX_INDEX_NUM)
    prev_end_timestamp = options.get("prev_end_timestamp", 0)
    prev_end_phy_offset = options.get("prev_end_phy_offset", 0)
    hashes = np.asarray(key_hashes, dtype=np.int64)
    phys = np.asarray(phys_offsets, dtype=np.int64)
    ts = np.asarray(store_timestamps, dtype=np.int64)
    n = hashes.shape[0]
    if not hashes.shape == phys.shape == ts.shape or hashes.ndim != 1:
        raise ValueError("key_hashes, phys_offsets and store_timestamps must be 1-D, equally long")
    if n > max_items - 1:
        raise ValueError(f"{n} items exceed one file ({max_items - 1}); split with rollover_bounds")
    if n and (hashes.min() < 0 or hashes.max() > _INT_MAX):
        raise ValueError("key hashes must be in [0, 2**31-1]; use key_hash_local")
    item_ids = np.arange(1, n + 1, dtype=np.int32)
    slot = hashes % slots
    order = np.argsort(slot, kind="stable")  # within a slot, items stay in put order
    sorted_slot = slot[order]
    same_as_prev = np.zeros(n, dtype=np.bool_)
    same_as_prev[1:] = sorted_slot[1:] == sorted_slot[:-1]
    prev = np.zeros(n, dtype=np.int32)
    prev[order[1:]] = np.where(same_as_prev[1:], item_ids[order[:-1]], 0)
    last_of_slot = np.ones(n, dtype=np.bool_)
    last_of_slot[:-1] = ~same_as_prev[1:]
    table = np.zeros(slots, dtype=np.int32)
    table[sorted_slot[last_of_slot]] = item_ids[order][last_of_slot]
    # the first put measures from the initial begin (the previous file's end), later ones from ts[0]
    begin = np.full(n, ts[0] if n else 0, dtype=np.int64)
    if n:
        begin[0] = prev_end_timestamp
    diff = np.clip((ts - begin) // 1000, 0, _INT_MAX)  # negatives clamp to 0 either way
    diff[begin <= 0] = 0
    items = np.zeros(n, dtype=ITEM_DTYPE)
    items["hash"], items["phys"], items["time_diff"], items["prev"] = hashes, phys, diff, prev
    header = IndexHeader(
        begin_timestamp=int(ts[0]) if n else prev_end_timestamp,
        end_timestamp=int(ts[-1]) if n else prev_end_timestamp,
        begin_phy_offset=int(phys[0]) if n else prev_end_phy_offset,
        end_phy_offset=int(phys[-1]) if n else prev_end_phy_offset,
        hash_slot_count=int(last_of_slot.sum()),
        index_count=n + 1,
    )
    return header, table, items


def _write(
    fh: BinaryIO, header: IndexHeader, table: npt.NDArray[np.int32], items: npt.NDArray[np.void]
) -> None:
    """Write header, slot table, the unused item 0 and the items of a :func:`_layout`."""
    fh.write(header.encode())
    fh.write(table.astype(">i4").tobytes())
    fh.write(bytes(INDEX_ITEM_SIZE))
    fh.write(items.tobytes())


def build_index_file(
    key_hashes: npt.ArrayLike,
    phys_offsets: npt.ArrayLike,
    store_timestamps: npt.ArrayLike,
    **options: Unpack[FileOptions],
) -> bytes:
    """The whole file a broker would write after putting these items in order (size
    :func:`index_file_size`; prefer :func:`write_index_file` for default-sized files)."""
    out = io.BytesIO()
    _write(out, *_layout(key_hashes, phys_offsets, store_timestamps, options))
    return out.getvalue().ljust(_size(options), b"\0")


def write_index_file(
    path: str | os.PathLike[str],
    key_hashes: npt.ArrayLike,
    phys_offsets: npt.ArrayLike,
    store_timestamps: npt.ArrayLike,
    **options: Unpack[FileOptions],
) -> IndexHeader:
    """Write the file :func:`build_index_file` describes to a NEW ``path`` (the unused tail is a
    sparse hole) and return its header. Refuses to overwrite."""
    header, table, items = _layout(key_hashes, phys_offsets, store_timestamps, options)
    with open(path, "xb") as fh:  # only once the items are known to fit
        _write(fh, header, table, items)
        fh.truncate(_size(options))
    return header


def key_hashes_local(topic_keys: Sequence[tuple[str, str]]) -> npt.NDArray[np.int64]:
    """:func:`key_hash_local` of each ``(topic, key)`` pair, as an array for the writer."""
    return np.fromiter((key_hash_local(t, k) for t, k in topic_keys), np.int64, len(topic_keys))


def write_index_files(
    index_dir: str | os.PathLike[str],
    key_hashes: npt.ArrayLike,
    phys_offsets: npt.ArrayLike,
    store_timestamps: npt.ArrayLike,
    *,
    tz: tzinfo | None = None,
    **options: Unpack[FileOptions],
) -> list[tuple[Path, IndexHeader]]:
    """Put items in order into as many new files as rollover needs (full at ``max_items - 1``).

    Each file is named by :func:`index_file_name` of its first item's store time (one ms later
    while the name is taken) and starts from the previous file's end, as the broker's do;
    ``prev_end_*`` continue an existing index directory. Returns ``(path, header)`` per file.
    """
    hashes = np.asarray(key_hashes, dtype=np.int64)
    phys = np.asarray(phys_offsets, dtype=np.int64)
    ts = np.asarray(store_timestamps, dtype=np.int64)
    directory = Path(index_dir)
    directory.mkdir(parents=True, exist_ok=True)
    written: list[tuple[Path, IndexHeader]] = []
    for lo, hi in rollover_bounds(hashes.shape[0], options.get("max_items", DEFAULT_MAX_INDEX_NUM)):
        name_ms = int(ts[lo])
        while (directory / index_file_name(name_ms, tz)).exists():
            name_ms += 1
        path = directory / index_file_name(name_ms, tz)
        header = write_index_file(path, hashes[lo:hi], phys[lo:hi], ts[lo:hi], **options)
        options["prev_end_timestamp"] = header.end_timestamp
        options["prev_end_phy_offset"] = header.end_phy_offset
        written.append((path, header))
    return written
