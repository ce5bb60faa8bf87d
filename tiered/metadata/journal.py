"""The metadata journal: ``tieredStoreMetadata.journal``, what changed since the snapshot.

A broker of many queues has a large ``tieredStoreMetadata.json`` (about 750 bytes a queue), and a
round that moved a hundred queues would rewrite all of it. Above ``tieredMetadataJournalMinBytes``
:class:`~tiered.metadata.MetadataStore` appends each persist's changes here instead and rewrites
the snapshot (upstream's file) only when the journal has grown as large as it (a compaction),
when the sidecar stops and when it starts.

The file is a sequence of frames, each ``length (u32 BE) | crc32 (u32 BE) | payload``:

* the first frame names the snapshot it extends (:func:`snapshot_id`: the snapshot's byte length
  and CRC-32), so a journal is never replayed onto another file (a snapshot written by the Java
  plugin or by ``recover``, or the one a compaction wrote before it reset the journal);
* every other frame is one persist: the records it set, as a partial metadata document in the
  snapshot's own JSON (:func:`encode_delta`), and the keys it removed.

A frame is replayed whole or not at all; a torn or damaged frame ends the journal (a persist
that was cut short never returned, so nothing relied on it). The backend mirror holds the same
frames as *chunks* beside the snapshot (:func:`chunk_prefix`): one object per mirror put, named
by the snapshot it extends and the sequence number of its first frame.
"""

from __future__ import annotations

import functools
import json
import os
import struct
import zlib
from collections.abc import Iterable
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any
from typing import BinaryIO
from typing import Final
from typing import NamedTuple

import msgspec

from tiered.errors import MetadataError

from .atomic import fsync_dir
from .atomic import write_synced
from .models import FileSegmentType
from .models import MetadataDocument

__all__ = [
    "JOURNAL_NAME",
    "Changes",
    "Journal",
    "JournalRead",
    "SnapshotDigest",
    "apply_delta",
    "chunk_key",
    "chunk_prefix",
    "decode_frames",
    "delta_parts",
    "encode_delta",
    "encode_frame",
    "file_snapshot_id",
    "snapshot_id",
]

JOURNAL_NAME: Final = "tieredStoreMetadata.journal"
_HEAD: Final = struct.Struct(">II")
_MAX_FRAME: Final = 1 << 30
"""A frame length beyond this is damage, not a persist."""

LARGE_CHANGES: Final = 4096
"""From this many changed records a persist may write the snapshot instead of a frame."""

SegmentKey = tuple[FileSegmentType, str, int]


def snapshot_id(data: bytes) -> str:
    """What names a snapshot's bytes: ``{length:x}-{crc32:08x}``."""
    return f"{len(data):x}-{zlib.crc32(data):08x}"


def file_snapshot_id(file: BinaryIO) -> str:
    """:func:`snapshot_id` of a file's bytes from where it stands to its end, read in pieces."""
    digest = SnapshotDigest()
    for piece in iter(functools.partial(file.read, 1 << 20), b""):
        digest.update(piece)
    return digest.id


class SnapshotDigest:
    """:func:`snapshot_id` of a snapshot written in parts: :meth:`through` passes them on."""

    def __init__(self) -> None:
        self.length = 0
        self._crc = 0

    def update(self, part: bytes) -> None:
        self.length += len(part)
        self._crc = zlib.crc32(part, self._crc)

    def through(self, parts: Iterable[bytes]) -> Iterator[bytes]:
        for part in parts:
            self.update(part)
            yield part

    @property
    def id(self) -> str:
        return f"{self.length:x}-{self._crc:08x}"


def encode_frame(*parts: bytes) -> bytes:
    """The payload (``parts`` joined) framed with its length and CRC-32, in one copy."""
    crc = 0
    for part in parts:
        crc = zlib.crc32(part, crc)
    return b"".join((_HEAD.pack(sum(map(len, parts)), crc), *parts))


def decode_frames(raw: bytes) -> tuple[list[bytes], int]:
    """The whole frames at the start of ``raw`` and the bytes they span; decoding stops at the
    first torn or damaged frame."""
    frames: list[bytes] = []
    at = 0
    view = memoryview(raw)
    while at + _HEAD.size <= len(raw):
        length, crc = _HEAD.unpack_from(raw, at)
        end = at + _HEAD.size + length
        if length > _MAX_FRAME or end > len(raw):
            break
        payload = bytes(view[at + _HEAD.size : end])
        if zlib.crc32(payload) != crc:
            break
        frames.append(payload)
        at = end
    return frames, at


@dataclass
class Changes:
    """The keys a store changed since its last persist (their values are read at the persist)."""

    topics: set[str] = field(default_factory=set)
    queues: set[tuple[str, int]] = field(default_factory=set)
    segments: set[SegmentKey] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.topics or self.queues or self.segments)

    def __len__(self) -> int:
        return len(self.topics) + len(self.queues) + len(self.segments)

    def cover_most_of(self, doc: MetadataDocument) -> bool:
        """Whether these are thousands of changes and at least half of ``doc``'s records (as in
        a first offload's round): a snapshot, written in parts, then costs no more bytes than
        their frame, which is built whole in memory (tens of MB at 100,000 queues)."""
        changed = len(self)
        if changed < LARGE_CHANGES:
            return False
        records = len(doc.topic_metadata_table) + sum(map(len, doc.queue_metadata_table.values()))
        for kind in FileSegmentType:
            records += sum(map(len, doc.segment_table(kind).values()))
        return 2 * changed >= records

    def clear(self) -> None:
        """Forget every key (after a persist wrote them)."""
        self.topics.clear()
        self.queues.clear()
        self.segments.clear()


def encode_delta(doc: MetadataDocument, changes: Changes) -> bytes:
    """One persist's frame payload: every changed key's record as ``doc`` holds it now (a
    partial document in the snapshot's JSON), and the changed keys ``doc`` no longer holds."""
    return b"".join(delta_parts(doc, changes))


def delta_parts(doc: MetadataDocument, changes: Changes) -> list[bytes]:
    """:func:`encode_delta` in parts, for :func:`encode_frame` to join once (a persist of
    60,000 queues' records is tens of MB: each copy of it counts in the peak)."""
    part = MetadataDocument(topic_serial_number=doc.topic_serial_number)
    gone_topics: list[str] = []
    gone_queues: list[tuple[str, int]] = []
    gone_segments: list[tuple[int, str, int]] = []
    for topic in changes.topics:
        meta = doc.topic_metadata_table.get(topic)
        if meta is None:
            gone_topics.append(topic)
        else:
            part.topic_metadata_table[topic] = meta
    for topic, qid in changes.queues:
        queue = doc.queue_metadata_table.get(topic, {}).get(qid)
        if queue is None:
            gone_queues.append((topic, qid))
        else:
            part.queue_metadata_table.setdefault(topic, {})[qid] = queue
    tables = {kind: (doc.segment_table(kind), part.segment_table(kind)) for kind in FileSegmentType}
    for kind, path, base in changes.segments:  # (per segment: tens of thousands in a wide round)
        table, into = tables[kind]
        by_base = table.get(path)
        seg = by_base.get(base) if by_base is not None else None
        if seg is None:
            gone_segments.append((int(kind), path, base))
        else:
            got = into.get(path)
            if got is None:
                got = into[path] = {}
            got[base] = seg
    gone = json.dumps(
        {"topics": gone_topics, "queues": gone_queues, "segments": gone_segments},
        ensure_ascii=False,
        separators=(",", ":"),
    )
    body = msgspec.json.encode(part)
    return [b'{"set":', body, b',"removed":', gone.encode("utf-8"), b"}"]


def apply_delta(doc: MetadataDocument, payload: bytes, *, source: str) -> None:
    """Replay one frame onto ``doc`` (in place).

    Raises:
        MetadataError: the payload is not a delta this module wrote (the journal is damaged).
    """
    try:
        data: Any = json.loads(payload)
        part = MetadataDocument.model_validate(data["set"])
        removed = data["removed"]
        gone_topics = [str(t) for t in removed["topics"]]
        gone_queues = [(str(t), int(q)) for t, q in removed["queues"]]
        gone_segments = [(FileSegmentType(k), str(p), int(b)) for k, p, b in removed["segments"]]
    except (ValueError, KeyError, TypeError) as e:  # MetadataError is a ValueError
        raise MetadataError(f"{source}: a journal frame is not a metadata change ({e})") from e
    doc.topic_serial_number = max(doc.topic_serial_number, part.topic_serial_number)
    doc.topic_metadata_table.update(part.topic_metadata_table)
    for topic, by_id in part.queue_metadata_table.items():
        doc.queue_metadata_table.setdefault(topic, {}).update(by_id)
    for kind in FileSegmentType:
        table = doc.segment_table(kind)
        for path, by_base in part.segment_table(kind).items():
            table.setdefault(path, {}).update(by_base)
    for topic in gone_topics:
        doc.topic_metadata_table.pop(topic, None)
    for topic, qid in gone_queues:
        _drop(doc.queue_metadata_table, topic, qid)
    for kind, path, base in gone_segments:
        _drop(doc.segment_table(kind), path, base)


def _drop(table: dict[str, dict[int, Any]], name: str, key: int) -> None:
    inner = table.get(name)
    if inner is not None and inner.pop(key, None) is not None and not inner:
        del table[name]


class JournalRead(NamedTuple):
    """A journal as read: the snapshot it extends (None: no journal, or no whole header), its
    frames' payloads, the bytes they span and the file's length."""

    snapshot: str | None
    frames: list[bytes]
    good_bytes: int
    file_bytes: int

    @property
    def torn(self) -> bool:
        """Whether bytes follow the last whole frame (a persist cut short, or damage)."""
        return self.good_bytes < self.file_bytes


class Journal:
    """The journal file beside the snapshot; not thread-safe (its store serialises it)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / JOURNAL_NAME
        self._tmp = directory / (JOURNAL_NAME + ".tmp")
        self._fd: int | None = None
        self.size = 0
        """Bytes in the file (as this process wrote or last read them)."""
        self.snapshot: str | None = None
        """The snapshot the open journal extends; None while there is none."""
        self.frames = 0
        """Frames after the header (the next frame's sequence number)."""

    def read(self) -> JournalRead:
        """The file as it is now (readers beside the owner call this too)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return JournalRead(None, [], 0, 0)
        frames, good = decode_frames(raw)
        if not frames:
            return JournalRead(None, [], 0, len(raw))
        try:
            head = json.loads(frames[0])
            snapshot = str(head["snapshot"])
        except (ValueError, KeyError, TypeError):
            return JournalRead(None, [], 0, len(raw))
        return JournalRead(snapshot, frames[1:], good, len(raw))

    def adopt(self, read: JournalRead) -> None:
        """Continue the journal as read (its torn tail cut off first)."""
        self.close()
        if read.torn:
            os.truncate(self.path, read.good_bytes)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        if read.torn:
            os.fsync(self._fd)
        self.size, self.snapshot, self.frames = read.good_bytes, read.snapshot, len(read.frames)

    def start(self, snapshot: str) -> None:
        """Replace the journal with an empty one extending ``snapshot`` (atomically: a crash
        leaves the old journal or the new one)."""
        self.close()
        header = encode_frame(json.dumps({"snapshot": snapshot}).encode("ascii"))
        write_synced(self._tmp, header)
        os.replace(self._tmp, self.path)
        fsync_dir(self.path.parent)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self.size, self.snapshot, self.frames = len(header), snapshot, 0

    def append(self, frame: bytes) -> None:
        """Append one frame and make it durable.

        Raises:
            OSError: the write or its sync failed; the frame may be torn, which a later read
                ignores, so the journal must be started again (the store writes a snapshot).
        """
        if self._fd is None:
            raise OSError(f"{self.path}: no journal is open")
        view = memoryview(frame)
        while view:
            view = view[os.write(self._fd, view) :]
        os.fdatasync(self._fd)
        self.size += len(frame)
        self.frames += 1

    def remove(self) -> None:
        """Delete the journal (the snapshot holds everything)."""
        self.close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            return
        fsync_dir(self.path.parent)

    def set_aside(self, stamp: int) -> Path:
        """Rename a journal that extends no snapshot here to ``{path}.stale-{stamp}``."""
        self.close()
        target = self.path.with_name(f"{self.path.name}.stale-{stamp}")
        self.path.rename(target)
        fsync_dir(self.path.parent)
        return target

    def drop_stale_temp(self) -> None:
        """Remove the temporary file an interrupted :meth:`start` left."""
        self._tmp.unlink(missing_ok=True)

    def close(self) -> None:
        """Close the file (it stays as it is)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.snapshot = None

    @property
    def open(self) -> bool:
        """Whether frames are being appended."""
        return self._fd is not None


def chunk_prefix(mirror_key: str) -> str:
    """The backend prefix of the mirror's journal chunks: ``…/config/tieredStoreMetadata.journal/``
    beside the mirror ``…/config/tieredStoreMetadata.json``."""
    base = mirror_key[: -len(".json")] if mirror_key.endswith(".json") else mirror_key
    return base + ".journal/"


def chunk_key(mirror_key: str, snapshot: str, first_frame: int) -> str:
    """The chunk holding frames from ``first_frame`` on, extending ``snapshot``."""
    return f"{chunk_prefix(mirror_key)}{snapshot}/{first_frame:012d}"
