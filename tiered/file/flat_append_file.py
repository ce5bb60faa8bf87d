"""``FlatAppendFile``: one flat file of a queue as an ordered list of segments (spec §5.4-§5.6).

Each segment is one provider object at :func:`~tiered.providers.layout.segment_key` with an
absolute ``base`` offset. Only the last segment is writable. Bytes go through two positions:

* **append** (:meth:`FlatAppendFile.append`): the bytes are kept in memory as *pending*;
* **commit** (:meth:`FlatAppendFile.commit`): the pending bytes are uploaded with one provider
  ``append``; only committed bytes are readable and recorded in metadata.

Metadata rule: a segment record is written only for bytes already uploaded; a new segment's record
(size 0) is persisted before any byte is written to it; a record is removed (and persisted) before
its object is deleted. Record updates after commits are collected by :meth:`flush_metadata`, which
the caller runs inside one ``MetadataStore.batch()`` per dispatch round.

Not thread-safe on its own: the owning :class:`~tiered.file.flat_message_file.FlatMessageFile`
serialises writers with its lock. Readers may run concurrently: they see a snapshot of the segment
list and read committed bytes only.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import ClassVar
from typing import TypeVar
from typing import cast

from tiered.errors import IntegrityError
from tiered.errors import PositionMismatchError
from tiered.errors import ProviderError
from tiered.errors import ReadPastEndError
from tiered.errors import SegmentNotFoundError
from tiered.errors import SegmentSealedError
from tiered.errors import TieredStoreError
from tiered.metadata import LONG_MAX
from tiered.metadata import FileSegmentMetadata
from tiered.metadata import FileSegmentType
from tiered.metadata import MetadataStore
from tiered.metadata import now_ms
from tiered.metadata.models import STATUS_NEW
from tiered.metadata.models import STATUS_SEALED
from tiered.providers.base import BytesLike
from tiered.providers.base import Provider
from tiered.providers.layout import FileType
from tiered.providers.layout import logical_path
from tiered.providers.layout import offset_to_file_name
from tiered.providers.layout import segment_key

log = logging.getLogger(__name__)
T = TypeVar("T")

SEGMENT_TYPES = {
    FileType.COMMIT_LOG: FileSegmentType.COMMIT_LOG,
    FileType.CONSUME_QUEUE: FileSegmentType.CONSUME_QUEUE,
    FileType.INDEX: FileSegmentType.INDEX,
}
_RETRIES = 5
_RETRY_DELAY_S = 0.05


def retrying(call: Callable[[], T], attempts: int = _RETRIES) -> T:
    """``call()``, retried with a short backoff while it raises a retriable ProviderError."""
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except ProviderError as e:
            if not e.retriable or attempt == attempts:
                raise
            time.sleep(_RETRY_DELAY_S * attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def real_size(provider: Provider, key: str) -> int:
    """The backend size of ``key``; an absent object counts as empty (retries retriable errors)."""

    def size() -> int:
        try:
            return provider.size(key)
        except SegmentNotFoundError:
            return 0

    return retrying(size)


def persist_now(metadata: MetadataStore) -> None:
    """Persist pending changes now, even inside an enclosing batch (a no-op when nothing is
    pending); a failed *mirror* put is logged: the local file was written."""
    if not metadata.dirty:
        return
    try:
        metadata.persist()
    except ProviderError as e:  # logged (one WARNING line) by the metadata store
        log.debug("metadata mirror failed (the local file was written): %s", e)


@contextlib.contextmanager
def durable(metadata: MetadataStore) -> Iterator[None]:
    """Group record changes into one persist that is done when the block ends, even inside
    an enclosing ``batch()`` (records a write will depend on must be durable first)."""
    try:
        with metadata.batch():
            yield
    except ProviderError as e:  # the mirror put at the end of the batch; the file was written
        log.debug("metadata mirror failed (the local file was written): %s", e)
    persist_now(metadata)


@dataclass(frozen=True)
class FlatAddress:
    """Which queue a flat file belongs to."""

    cluster: str
    broker: str
    topic: str
    queue_id: int

    @functools.cached_property
    def path(self) -> str:
        """The logical path ``{broker}/{topic}/{queueId}`` (the metadata key; made once)."""
        return logical_path(self.broker, self.topic, self.queue_id)

    def key_prefix(self, file_type: FileType) -> str:
        """What every key of the queue's ``file_type`` segments starts with (the segment's file
        name follows)."""
        return segment_key(self.cluster, self.broker, self.topic, self.queue_id, file_type, 0)[
            : -len(offset_to_file_name(0))
        ]


@dataclass
class Segment:
    """One segment: committed ``size`` bytes at ``base``, plus pending bytes not yet uploaded."""

    base: int
    size: int = 0
    begin_timestamp: int = LONG_MAX
    end_timestamp: int = LONG_MAX
    create_timestamp: int = 0
    sealed: bool = False
    pending: list[bytes | bytearray | memoryview] = field(default_factory=list)
    pending_size: int = 0
    pending_begin: int = LONG_MAX
    pending_end: int = LONG_MAX
    unsynced: int = 0
    """The last of ``size`` bytes, uploaded by ``append_deferred`` and not yet synced: the
    segment's record says ``size - unsynced`` until :meth:`FlatAppendFile.sync` has run."""

    @property
    def commit_offset(self) -> int:
        """Offset just past the committed bytes."""
        return self.base + self.size

    @property
    def append_offset(self) -> int:
        """Offset just past the appended (committed and pending) bytes."""
        return self.base + self.size + self.pending_size


def _merge_max(a: int, b: int) -> int:
    """The greater of two timestamps where LONG_MAX means unset (the least needs no such
    function: an unset one is greater than any other)."""
    return b if a == LONG_MAX else a if b == LONG_MAX else max(a, b)


_CLEAN: tuple[int, ...] = ()
"""A file's changed-record bases while none changed. The bases are a tuple, usually of one (the
last segment's): a set costs 200 B a file, thousands of files a round."""


class FlatAppendFile:
    """The segments of one flat file of one queue; a subclass says which (``file_type``)."""

    file_type: ClassVar[FileType]
    deferred_sync: ClassVar[bool] = False
    """Upload with ``append_deferred`` and leave the sync to :meth:`sync` (the dispatcher syncs
    a round's files side by side before it records them)."""
    upload_failed: bool = False
    """Whether the last upload of the last segment failed (the backend may hold bytes beyond
    the record until one succeeds); set on the instance only when one did."""

    def __init__(
        self,
        provider: Provider,
        metadata: MetadataStore,
        address: FlatAddress,
        max_size: int,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.provider = provider
        self.metadata = metadata
        self.address = address
        self.segment_type = SEGMENT_TYPES[self.file_type]
        self.max_size = self.segment_size(max_size)
        self.clock = clock
        self.path = address.path
        self._key_prefix: str | None = None  # (see key)
        self._segments: list[Segment] = []
        self._dirty: tuple[int, ...] = _CLEAN  # see _mark

    def _mark(self, base: int) -> None:
        """The record of the segment at ``base`` changed (recorded by :meth:`changed_records`)."""
        if base not in self._dirty:
            self._dirty += (base,)

    def _unmark(self, base: int) -> None:
        if base in self._dirty:
            self._dirty = tuple(b for b in self._dirty if b != base)

    @staticmethod
    def segment_size(max_size: int) -> int:
        """The size of this file's segments when ``max_size`` is configured."""
        return max_size

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.path!r}, {self.file_type.name}, "
            f"segments={len(self._segments)}, commit={self.commit_offset})"
        )

    # --- identity and positions ---------------------------------------------------------------

    def key(self, base: int) -> str:
        """The provider key of the segment at ``base`` (its queue's part made once)."""
        prefix = self._key_prefix
        if prefix is None:
            prefix = self._key_prefix = self.address.key_prefix(self.file_type)
        return prefix + offset_to_file_name(base)

    def key_at(self, offset: int) -> str:
        """The provider key of the segment holding ``offset`` (the first segment's for an
        offset before it; the file's start when it has none)."""
        bases = [seg.base for seg in self._segments]
        if not bases:
            return self.key(self.min_offset)
        return self.key(bases[max(bisect.bisect_right(bases, offset) - 1, 0)])

    @property
    def segments(self) -> list[Segment]:
        """A snapshot of the segment list, by base offset."""
        return list(self._segments)

    @property
    def empty(self) -> bool:
        """Whether the file has no segment (never initialised, or everything expired)."""
        return not self._segments

    @property
    def min_offset(self) -> int:
        """The first segment's base; -1 without segments."""
        segs = self._segments
        return segs[0].base if segs else -1

    @property
    def commit_offset(self) -> int:
        """Offset just past the committed bytes; -1 without segments."""
        segs = self._segments
        if not segs:
            return -1
        last = segs[-1]
        return last.base + last.size

    @property
    def append_offset(self) -> int:
        """Offset just past the appended bytes; -1 without segments."""
        segs = self._segments
        if not segs:
            return -1
        last = segs[-1]
        return last.base + last.size + last.pending_size

    @property
    def pending_size(self) -> int:
        """Bytes appended but not yet uploaded."""
        segs = self._segments
        return segs[-1].pending_size if segs else 0

    @property
    def min_timestamp(self) -> int:
        """The first segment's begin timestamp (LONG_MAX = unset); -1 without segments."""
        segs = self._segments
        return segs[0].begin_timestamp if segs else -1

    @property
    def max_timestamp(self) -> int:
        """The last segment's end timestamp (LONG_MAX = unset); -1 without segments."""
        segs = self._segments
        return segs[-1].end_timestamp if segs else -1

    @property
    def last_size(self) -> int:
        """The last segment's committed bytes; 0 without segments."""
        segs = self._segments
        return segs[-1].size if segs else 0

    @property
    def committed_bytes(self) -> int:
        """Sum of the committed sizes of all segments (the ``rocketmq_storage_size`` value)."""
        segs = self._segments
        return segs[0].size if len(segs) == 1 else sum(s.size for s in segs)

    def room(self) -> int:
        """Bytes the last segment can still take before it must roll (0 without segments)."""
        segs = self._segments
        if not segs:
            return 0
        last = segs[-1]
        return max(self.max_size - last.size - last.pending_size, 0)

    def free_room(self) -> int:
        """:meth:`room`, or -1 while bytes are pending (or without segments): what a plan of
        many queues at once asks of each file in one call."""
        segs = self._segments
        if not segs or segs[-1].pending_size:
            return -1
        last = segs[-1]
        return max(self.max_size - last.size, 0)

    # --- metadata -----------------------------------------------------------------------------

    def _record(self, seg: Segment) -> FileSegmentMetadata:
        return FileSegmentMetadata(
            path=self.path,
            type=self.segment_type,
            base_offset=seg.base,
            status=STATUS_SEALED if seg.sealed else STATUS_NEW,
            size=seg.size - seg.unsynced,  # the metadata never says more than is durable
            create_timestamp=seg.create_timestamp,
            begin_timestamp=seg.begin_timestamp,
            end_timestamp=seg.end_timestamp,
            seal_timestamp=self.clock() if seg.sealed else 0,
        )

    def load(self) -> None:
        """Rebuild the segment list from metadata (positions = recorded sizes, spec §7.4 step 2)."""
        self._segments = [
            Segment(
                base=m.base_offset,
                size=m.size,
                begin_timestamp=m.begin_timestamp,
                end_timestamp=m.end_timestamp,
                create_timestamp=m.create_timestamp,
                sealed=m.status == STATUS_SEALED,
            )
            for m in self.metadata.segments(self.segment_type, self.path, copy=False)
        ]
        self._dirty = _CLEAN

    def flush_metadata(self) -> bool:
        """Write the records of segments whose committed state changed; True if any was written.

        Run it inside ``MetadataStore.batch()`` so a round persists once.
        """
        records = self.changed_records()
        self.metadata.update_segments(records)
        return bool(records)

    def changed_records(self) -> list[FileSegmentMetadata]:
        """The records of the segments whose committed state changed since the last call (or
        :meth:`flush_metadata`), which the caller records (``MetadataStore.update_segments``)."""
        if not self._dirty:
            return []
        if len(self._dirty) == 1 and self._segments:  # a round's usual case: the last segment
            (base,) = self._dirty
            self._dirty = _CLEAN
            last = self._segments[-1]
            if last.base == base:
                return [self._record(last)]
            self._mark(base)
        by_base = {s.base: s for s in self._segments}
        records = [self._record(by_base[b]) for b in sorted(self._dirty) if b in by_base]
        self._dirty = _CLEAN
        return records

    def _new_segment(self, base: int) -> Segment:
        """Add an empty last segment at ``base`` and persist its record before any data."""
        seg = Segment(base=base, create_timestamp=self.clock())
        self._segments = [*self._segments, seg]
        self.metadata.update_segment(self._record(seg))
        self._unmark(base)
        return seg

    # --- writing ------------------------------------------------------------------------------

    def init_offset(self, offset: int, *, persist: bool = True) -> None:
        """Create the first segment at ``offset`` (no-op when segments exist).

        The record is persisted now, or with ``persist=False`` by the caller's enclosing
        ``batch()``, which must end before any data is written to the segment.
        """
        if self._segments:
            return
        if not persist:
            self._new_segment(offset)
            return
        with durable(self.metadata):
            self._new_segment(offset)

    def append(self, data: bytes | bytearray | memoryview, begin_ts: int, end_ts: int) -> int:
        """Keep ``data`` as pending bytes of the last segment; returns the offset it starts at.

        The caller keeps batches within :meth:`room` (or rolls first); a batch bigger than a whole
        segment goes alone into an empty segment.
        """
        if not self._segments:
            raise IntegrityError(f"{self.path} {self.file_type.name}: append before init_offset")
        seg = self._segments[-1]
        at = seg.base + seg.size + seg.pending_size
        n = len(data)
        if n:
            seg.pending.append(data)
            seg.pending_size += n
            seg.pending_begin = min(seg.pending_begin, begin_ts)
            if end_ts != LONG_MAX:
                seg.pending_end = _merge_max(seg.pending_end, end_ts)
        return at

    def roll(self, base: int | None = None) -> Segment:
        """Seal the last segment and start a new one at ``base`` (default: its commit offset).

        Nothing may be pending. An empty last segment is replaced instead when ``base`` differs
        (its record removed first, then its object). The new record is persisted before return.
        """
        last = self._segments[-1]
        if last.pending_size:
            raise IntegrityError(f"{self.path}: roll with {last.pending_size} bytes pending")
        self.sync()  # the sealed segment's record holds all it has
        base = last.commit_offset if base is None else base
        if base < last.commit_offset:
            raise IntegrityError(f"{self.path}: roll to {base} below commit {last.commit_offset}")
        if last.size == 0:
            if base == last.base:
                return last
            self._segments = self._segments[:-1]
            with durable(self.metadata):
                self.metadata.delete_segment(self.segment_type, self.path, last.base)
                seg = self._new_segment(base)
            retrying(lambda: self.provider.delete(self.key(last.base)))
            return seg
        key = self.key(last.base)
        retrying(lambda: self.provider.seal(key))
        last.sealed = True
        with durable(self.metadata):
            self.metadata.update_segment(self._record(last))
            self._unmark(last.base)
            return self._new_segment(base)

    def commit(self) -> int:
        """Upload the last segment's pending bytes; returns how many were uploaded (0: none).

        A failed upload keeps its pending bytes, and the next commit resumes exactly where the
        backend object ends (``PositionMismatchError.expected``): an upload that did land is not
        sent again, one that landed partly (a posix ``pwrite`` cut short) sends only its rest.

        Raises:
            ProviderError: the upload failed; the pending bytes are kept for the next commit.
            IntegrityError: the backend object has a size this file cannot explain.
        """
        seg = self._pending_segment()
        if seg is None:
            return 0
        data = seg.pending[0]
        try:
            uploaded = self._upload(seg, data)
        except BaseException:
            self.upload_failed = True
            raise
        return self._committed(uploaded, data)

    def _pending_segment(self) -> Segment | None:
        """The last segment when bytes are pending in it, joined into one piece."""
        if not self._segments or not self._segments[-1].pending_size:
            return None
        seg = self._segments[-1]
        if len(seg.pending) > 1:
            seg.pending = [b"".join(seg.pending)]
        return seg

    def _committed(
        self, seg: Segment, data: bytes | bytearray | memoryview, defers: bool | None = None
    ) -> int:
        """``seg``'s pending ``data`` was uploaded (maybe into a new segment, when the last one
        turned out sealed): count it as committed (``defers``: :attr:`_defers`, when known)."""
        n = len(data)
        seg.size += n
        if self._defers if defers is None else defers:
            seg.unsynced += n
        seg.begin_timestamp = min(seg.begin_timestamp, seg.pending_begin)
        if seg.pending_end != LONG_MAX:  # (a round runs this per file: no call when unset)
            seg.end_timestamp = _merge_max(seg.end_timestamp, seg.pending_end)
        seg.pending, seg.pending_size = [], 0
        seg.pending_begin = seg.pending_end = LONG_MAX
        if seg.base not in self._dirty:  # (:meth:`_mark`, inlined likewise)
            self._dirty += (seg.base,)
        if self.upload_failed:
            self.upload_failed = False  # the backend ends where the record says again
        return n

    @property
    def _defers(self) -> bool:
        """Whether this file's uploads leave their sync to :meth:`sync`: the file defers, and
        so does its provider (elsewhere an append is durable when it returns)."""
        return self.deferred_sync and self.provider.defers_sync

    @property
    def unsynced(self) -> bool:
        """Whether bytes uploaded by ``append_deferred`` wait for :meth:`sync`."""
        segs = self._segments
        return bool(segs) and segs[-1].unsynced > 0

    def sync(self) -> bool:
        """Make the last segment's deferred bytes durable, so that its record may say so (marked
        for the next :meth:`flush_metadata`); False when none waited.

        Raises:
            ProviderError: the sync failed; the record keeps the durable size, retried later.
        """
        if not self.unsynced:
            return False
        seg = self._segments[-1]
        key = self.key(seg.base)
        retrying(lambda: self.provider.sync(key))
        seg.unsynced = 0
        self._mark(seg.base)
        return True

    @property
    def unsynced_key(self) -> str | None:
        """The key whose deferred bytes wait for a sync (the last segment's), or None."""
        return self.key(self._segments[-1].base) if self.unsynced else None

    def synced(self) -> None:
        """The provider made the last segment's deferred bytes durable (with other keys', by
        :meth:`~tiered.providers.base.Provider.sync_many`): mark them as :meth:`sync` does."""
        if self.unsynced:
            self._segments[-1].unsynced = 0
            self._mark(self._segments[-1].base)

    @staticmethod
    def commit_many(files: Sequence[FlatAppendFile]) -> list[int | TieredStoreError | OSError]:
        """:meth:`commit` of every file: the uploads of those that share the first one's
        provider and defer their syncs made by one
        :meth:`~tiered.providers.base.Provider.append_deferred_many`, the others (and any whose
        bulk upload met an object of another size or a sealed one) one by one. Returns, for each
        file, the bytes uploaded or the error its commit raised (its pending bytes stay)."""
        out: list[int | TieredStoreError | OSError] = [0] * len(files)
        bulk: list[tuple[int, FlatAppendFile, Segment]] = []
        alone: list[int] = []
        provider = files[0].provider if files else None
        defers = provider is not None and provider.defers_sync  # (a property: asked once)
        for i, f in enumerate(files):
            seg = f._pending_segment()
            if seg is None:
                continue
            if f.provider is provider and f.deferred_sync and defers:
                bulk.append((i, f, seg))
            else:
                alone.append(i)
        if bulk:
            assert provider is not None
            appends = [(f.key(seg.base), seg.pending[0], seg.size) for _, f, seg in bulk]
            done = provider.append_deferred_many(appends)
            for (i, f, seg), (_, data, _), got in zip(bulk, appends, done, strict=True):
                if isinstance(got, int):
                    out[i] = f._committed(seg, data, True)
                elif isinstance(got, PositionMismatchError | SegmentSealedError):
                    alone.append(i)  # the single commit resumes or moves to a new segment
                else:
                    f.upload_failed = True
                    out[i] = got
        for i in sorted(alone):
            try:
                out[i] = files[i].commit()
            except (TieredStoreError, OSError) as e:
                out[i] = e
        return out

    def _upload(self, seg: Segment, data: bytes | bytearray | memoryview) -> Segment:
        key, position, sent = self.key(seg.base), seg.size, 0
        append = self.provider.append_deferred if self._defers else self.provider.append
        for _ in range(4):
            try:
                append(key, memoryview(data)[sent:], position + sent)
                return seg
            except PositionMismatchError as e:
                landed = e.expected - position
                if landed == len(data):
                    return seg  # an earlier attempt landed whole; its answer was lost
                if not 0 <= landed < len(data):
                    raise IntegrityError(
                        f"{key}: the backend holds {e.expected} bytes, but this file committed "
                        f"{position} and has {len(data)} pending; restart the sidecar to "
                        "reconcile",
                        key=key,
                        offset=seg.base + position,
                    ) from e
                sent = landed  # an earlier attempt landed partly: send the rest
            except SegmentSealedError:
                if sent or seg.size == 0:
                    raise
                seg = self._reroll_pending(seg)
                key, position = self.key(seg.base), 0
        raise IntegrityError(f"{key}: upload did not converge after 4 attempts", key=key)

    def _reroll_pending(self, seg: Segment) -> Segment:
        """The last segment was sealed before a crash recorded it: move pending to a new one."""
        self.sync()
        log.warning("%s is sealed in the backend; starting a new segment", self.key(seg.base))
        pending = (seg.pending, seg.pending_size, seg.pending_begin, seg.pending_end)
        seg.pending, seg.pending_size = [], 0
        seg.sealed = True
        with durable(self.metadata):
            self.metadata.update_segment(self._record(seg))
            new = self._new_segment(seg.commit_offset)
        new.pending, new.pending_size, new.pending_begin, new.pending_end = pending
        return new

    def drop_pending(self) -> None:
        """Forget pending bytes (they will be re-read from the local store)."""
        if self._segments:
            seg = self._segments[-1]
            seg.pending, seg.pending_size = [], 0
            seg.pending_begin = seg.pending_end = LONG_MAX

    # --- reading ------------------------------------------------------------------------------

    def read(self, offset: int, length: int) -> bytes:
        """Committed bytes ``[offset, offset + length)``, short where committed data ends.

        Spans at most two segments, and only contiguous ones (a gap between segments ends the
        read, unlike upstream which would splice the next segment in).

        Raises:
            ReadPastEndError: ``offset`` is below the first segment or at/after the commit end.
        """
        return cast(bytes, self._read(offset, length, self.provider.read))

    def read_view(self, offset: int, length: int) -> BytesLike:
        """:meth:`read`, maybe answered with a read-only view of the provider's memory
        (:meth:`~tiered.providers.Provider.read_view`: no copy of a read-ahead window's bytes;
        hold it only while its bytes are needed). A read that spans two segments is one joined
        copy.

        Raises:
            ReadPastEndError: ``offset`` is below the first segment or at/after the commit end.
        """
        return self._read(offset, length, self.provider.read_view)

    def _read(
        self, offset: int, length: int, read: Callable[[str, int, int], BytesLike]
    ) -> BytesLike:
        """Bytes ``[offset, offset + length)`` read with ``read`` (see :meth:`read`).

        Raises:
            ReadPastEndError: ``offset`` is below the first segment or at/after the commit end.
        """
        segs = self._segments
        index = next((i for i in range(len(segs) - 1, -1, -1) if segs[i].base <= offset), -1)
        if index < 0 or offset >= segs[index].commit_offset or length <= 0:
            raise ReadPastEndError(
                f"{self.path} {self.file_type.name}: offset {offset} is outside the committed "
                f"range [{self.min_offset}, {self.commit_offset})"
            )
        first = segs[index]
        take = min(length, first.commit_offset - offset)
        out = retrying(lambda: read(self._reading(first), offset - first.base, take))
        rest = length - len(out)
        if rest > 0 and index + 1 < len(segs):
            nxt = segs[index + 1]
            if nxt.base == first.commit_offset and nxt.size > 0:
                n = min(rest, nxt.size)
                out = b"".join((out, retrying(lambda: read(self._reading(nxt), 0, n))))
        return out

    def _reading(self, seg: Segment) -> str:
        """The key of ``seg``, about to be read; the provider is told when the records say it
        is not sealed (:meth:`~tiered.providers.base.Provider.expect_unsealed`)."""
        key = self.key(seg.base)
        if not seg.sealed:
            self.provider.expect_unsealed(key, seg.size)
        return key

    # --- recovery and deletion ----------------------------------------------------------------

    def backend_size(self) -> int:
        """The real size of the last segment's object (0 when absent or no segment)."""
        segs = self._segments
        return real_size(self.provider, self.key(segs[-1].base)) if segs else 0

    def set_last_size(self, size: int) -> None:
        """Set the last segment's committed size (recovery), recorded at the next flush."""
        self.sync()  # (recovery runs before any deferred upload: nothing waits here)
        seg = self._segments[-1]
        if seg.size != size:
            seg.size = size
            self._mark(seg.base)

    def extend_last_timestamps(self, begin: int, end: int) -> None:
        """Widen the last segment's begin/end timestamps (recovery keeps unrecorded bytes)."""
        seg = self._segments[-1]
        b, e = min(seg.begin_timestamp, begin), _merge_max(seg.end_timestamp, end)
        if (b, e) != (seg.begin_timestamp, seg.end_timestamp):
            seg.begin_timestamp, seg.end_timestamp = b, e
            self._mark(seg.base)

    def reset_last(self) -> None:
        """Empty the last segment: its bytes are all invalid (recovery). Deletes the object."""
        seg = self._segments[-1]
        seg.size = seg.unsynced = 0
        seg.begin_timestamp = seg.end_timestamp = LONG_MAX
        with durable(self.metadata):
            self.metadata.update_segment(self._record(seg))
        retrying(lambda: self.provider.delete(self.key(seg.base)))

    def delete_first(self) -> Segment:
        """Remove the first segment: its record (persisted) first, then its object."""
        seg = self._segments[0]
        key = self.key(seg.base)
        self.metadata.orphans.add([key])  # so a failed or interrupted delete is retried
        self._segments = self._segments[1:]
        self._unmark(seg.base)
        with durable(self.metadata):
            self.metadata.delete_segment(self.segment_type, self.path, seg.base)
        retrying(lambda: self.provider.delete(key))
        self.metadata.orphans.remove([key])
        return seg

    def drop_records(self) -> list[str]:
        """Forget every segment and remove their records (not persisted here); returns their
        keys, listed as orphans, whose objects the caller deletes once the records are durable
        (an interrupted delete is retried by the orphan sweep)."""
        keys = [self.key(seg.base) for seg in self._segments]
        self.metadata.orphans.add(keys)
        self._segments = []
        self._dirty = _CLEAN
        self.metadata.delete_segments(self.segment_type, self.path)
        return keys
