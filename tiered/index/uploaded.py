"""Uploaded (UPLOAD) index files: the INDEX segments of ``{broker}/rmq_sys_INDEX/0`` (spec §6.1).

Each compacted file is one whole object (provider ``put``) at a cumulative base offset -- the sum
of the sizes of the files uploaded before it -- recorded in ``indexFileSegmentTable`` with the
file's begin/end timestamps as the segment's begin/end timestamps. The record is the truth: a
file is uploaded once it is recorded.

Write order (data first, then metadata): put the object, then record it (persisted), then the
caller deletes the local copies; expiry removes the record before the object. A crash between
any two steps converges: :meth:`UploadedIndex.upload` is idempotent, and
:meth:`UploadedIndex.converge` (at start) adopts or deletes what a crash left.

A file with no item is not uploaded (upstream uploads a 0-byte segment that does not advance the
base, so the next file's object would land on the same key).
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

from tiered import metrics
from tiered.errors import IndexFileError
from tiered.errors import ProviderError
from tiered.errors import SegmentNotFoundError
from tiered.file.flat_append_file import durable
from tiered.file.flat_append_file import retrying
from tiered.index.compacted_file import CompactedIndexFile
from tiered.index.compacted_file import check_compacted
from tiered.index.format import HEADER_SIZE
from tiered.index.format import SLOT_SIZE
from tiered.index.format import IndexHeader
from tiered.metadata import FileSegmentMetadata
from tiered.metadata import FileSegmentType
from tiered.metadata import MetadataStore
from tiered.metadata.broker_tier import BrokerTier
from tiered.metadata.models import STATUS_SEALED
from tiered.providers.base import Provider
from tiered.providers.layout import INDEX_TOPIC
from tiered.providers.layout import FileType
from tiered.providers.layout import SegmentAddress
from tiered.providers.layout import cluster_dir_name
from tiered.providers.layout import index_logical_path
from tiered.providers.layout import segment_key

log = logging.getLogger(__name__)

_I32 = struct.Struct(">i")


@dataclass
class ConvergeReport:
    """What :meth:`UploadedIndex.converge` changed."""

    adopted: list[int] = field(default_factory=list)  # begin timestamps recorded from objects
    deleted: list[str] = field(default_factory=list)  # keys of stale objects deleted
    ignored: list[str] = field(default_factory=list)  # keys left alone (not adoptable)


@dataclass(eq=False, kw_only=True)
class UploadedIndex(BrokerTier):
    """The INDEX segments of one broker; thread-safe as far as the metadata store is."""

    slots: int

    def __post_init__(self) -> None:
        self.path = index_logical_path(self.broker)

    def key(self, base: int) -> str:
        """The provider key of the INDEX segment at ``base``."""
        return segment_key(self.cluster, self.broker, INDEX_TOPIC, 0, FileType.INDEX, base)

    def records(self) -> list[FileSegmentMetadata]:
        """Every recorded INDEX segment, by base offset."""
        return self.metadata.segments(FileSegmentType.INDEX, self.path)

    def begins(self) -> set[int]:
        """The begin timestamps of the uploaded files."""
        return {r.begin_timestamp for r in self.records()}

    def next_base(self) -> int:
        """Where the next file goes: just past the last recorded segment (0 when none)."""
        records = self.records()
        return records[-1].base_offset + records[-1].size if records else 0

    def files(self) -> list[CompactedIndexFile]:
        """Every uploaded file, ready to query (at most two ranged reads each), oldest first."""
        return [
            CompactedIndexFile(
                self.provider,
                self.key(r.base_offset),
                size=r.size,
                begin_timestamp=r.begin_timestamp,
                end_timestamp=r.end_timestamp,
                slots=self.slots,
            )
            for r in self.records()
        ]

    # --- upload ---------------------------------------------------------------------------------

    @metrics.counts_index_failures("upload")
    def upload(self, header: IndexHeader, payload: bytes | Path, size: int) -> FileSegmentMetadata:
        """Upload the compacted form (``payload``: its bytes or a file holding them, ``size``
        bytes) of the SEALED file whose header is ``header``, and record it.

        Idempotent: a file already recorded is not uploaded again; an object already at the
        target key is kept (and recorded without a second put) when it checks out as this very
        file (:func:`~tiered.index.compacted_file.check_compacted` against ``header``), replaced
        otherwise.

        Raises:
            ProviderError: the put failed (nothing is recorded; retry later).
        """
        for record in self.records():
            if record.begin_timestamp == header.begin_timestamp:
                return record
        base = self.next_base()
        key = self.key(base)
        if self._holds(key, header, size):
            log.info("%s already holds index file %d: recorded without a new upload",
                     key, header.begin_timestamp)  # fmt: skip
        elif isinstance(payload, Path):

            def put_file() -> None:
                with payload.open("rb") as fh:
                    self.provider.put(key, fh, overwrite=True)

            retrying(put_file)
        else:
            retrying(lambda: self.provider.put(key, payload, overwrite=True))
        record = self._record(base, size, header)
        metrics.INDEX_FILES_UPLOADED.inc()
        return record

    def _record(self, base: int, size: int, header: IndexHeader) -> FileSegmentMetadata:
        now = self.clock()
        record = FileSegmentMetadata(
            path=self.path,
            type=FileSegmentType.INDEX,
            base_offset=base,
            status=STATUS_SEALED,
            size=size,
            create_timestamp=now,
            begin_timestamp=header.begin_timestamp,
            end_timestamp=header.end_timestamp,
            seal_timestamp=now,
        )
        with durable(self.metadata):
            self.metadata.update_segment(record)
        return record

    def _holds(self, key: str, header: IndexHeader | None, size: int | None) -> bool:
        """Whether ``key`` holds a compacted file of ``header`` (any, when None) and ``size``."""
        try:
            found = retrying(lambda: self.provider.size(key))
            head = retrying(lambda: self.provider.read(key, 0, HEADER_SIZE)) if found else b""
            if found and len(head) < HEADER_SIZE:
                raise IndexFileError(f"{found} bytes, shorter than a header")
            check_compacted(head, found, self.slots, header)
        except SegmentNotFoundError:
            return False
        except (IndexFileError, ProviderError) as e:
            log.warning("%s: not a usable compacted index file (%s)", key, e,
                        extra={"objectKey": key})  # fmt: skip
            return False
        return found > 0 and (size is None or found == size)

    # --- recovery and expiry --------------------------------------------------------------------

    def converge(self, local: dict[int, IndexHeader] | None = None) -> ConvergeReport:
        """Reconcile the records with the INDEX objects in the backend (at start).

        From the next base on, objects that chain (each at the end of the previous) and check
        out as compacted files are recorded -- against the SEALED file's header when
        ``local`` (begin -> header) still has it. Unrecorded objects below the next base (an
        expiry that stopped between record and object) are deleted; others are left alone and
        reported (a later upload to their key replaces them).
        """
        report = ConvergeReport()
        recorded = {r.base_offset for r in self.records()}
        prefix = f"{cluster_dir_name(self.cluster)}/{self.path}/{FileType.INDEX.value}/"
        found: dict[int, str] = {}
        for key in self.provider.list(prefix):
            address = SegmentAddress.parse(key)
            if address is not None and address.file_type is FileType.INDEX:
                found[address.base_offset] = key
        base = self.next_base()
        for offset in sorted(found):
            key = found[offset]
            if offset in recorded:
                continue
            if offset < base:
                retrying(lambda k=key: self.provider.delete(k))  # type: ignore[misc]
                report.deleted.append(key)
                log.warning("%s: an unrecorded index object below the recorded ones: deleted", key)
                continue
            adopted = self._adopt(key, offset, base, local or {})
            if adopted is None:
                report.ignored.append(key)
                continue
            report.adopted.append(adopted.begin_timestamp)
            base = offset + retrying(lambda k=key: self.provider.size(k))  # type: ignore[misc]
        return report

    def _adopt(
        self, key: str, offset: int, base: int, local: dict[int, IndexHeader]
    ) -> IndexHeader | None:
        if offset != base:
            log.warning("%s: an unrecorded index object past the next base %d: left alone",
                        key, base)  # fmt: skip
            return None
        try:
            size = retrying(lambda: self.provider.size(key))
            head = retrying(lambda: self.provider.read(key, 0, HEADER_SIZE + 4)) if size else b""
            slots = _slots_of(head)
            if slots != self.slots:
                raise IndexFileError(
                    f"it was written with {slots} slots, tieredStoreIndexFileMaxHashSlotNum is "
                    f"{self.slots}"
                )
            header = check_compacted(head[:HEADER_SIZE], size, self.slots)
            sealed = local.get(header.begin_timestamp)
            if sealed is not None:
                check_compacted(head[:HEADER_SIZE], size, self.slots, sealed)
        except (IndexFileError, ProviderError) as e:
            log.warning("%s: an unrecorded index object that does not check out (%s): left "
                        "alone", key, e, extra={"objectKey": key})  # fmt: skip
            return None
        if size == 0:
            return None
        self._record(offset, size, header)
        log.warning("%s: an uploaded index file (begin %d) was not recorded: recorded now",
                    key, header.begin_timestamp)  # fmt: skip
        return header

    @metrics.counts_index_failures("expire")
    def expire(self, before: int) -> list[FileSegmentMetadata]:
        """Delete uploaded files from the oldest while their end timestamp is below ``before``:
        the record first (persisted), then the object. Returns the records deleted."""
        deleted: list[FileSegmentMetadata] = []
        for record in self.records():
            if record.end_timestamp >= before:
                break
            key = self.key(record.base_offset)
            self.metadata.orphans.add([key])  # so a failed or interrupted delete is retried
            with durable(self.metadata):
                self.metadata.delete_segment(FileSegmentType.INDEX, self.path, record.base_offset)
            retrying(lambda k=key: self.provider.delete(k))  # type: ignore[misc]
            self.metadata.orphans.remove([key])
            deleted.append(record)
        return deleted


def _slots_of(head: bytes) -> int:
    """The slot count of a compacted file from its first slot's position (spec §6.1)."""
    if len(head) < HEADER_SIZE + 4:
        raise IndexFileError(f"{len(head)} bytes: too short for a header and a slot")
    (position,) = _I32.unpack_from(head, HEADER_SIZE)
    if position < HEADER_SIZE + SLOT_SIZE or (position - HEADER_SIZE) % SLOT_SIZE:
        raise IndexFileError(f"slot 0 points at {position}, not at the end of a slot table")
    return int((position - HEADER_SIZE) // SLOT_SIZE)


def rebuild_index_records(
    provider: Provider, metadata: MetadataStore, cluster: str, broker: str
) -> int:
    """Record the INDEX objects of ``broker`` that chain from base 0 (``recover
    --from-backend``); the slot count is read from the first object. Returns how many."""
    index = UploadedIndex(provider, metadata, cluster=cluster, broker=broker, slots=0)
    first = index.key(index.next_base())
    try:
        head = retrying(lambda: provider.read(first, 0, HEADER_SIZE + 4))
        index.slots = _slots_of(head)
    except (ProviderError, IndexFileError):
        return 0
    return len(index.converge().adopted)
