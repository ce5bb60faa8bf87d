"""What a scrub found: anomalies (damage, each naming its kind and object) and notes.

An :class:`Anomaly` is something wrong with the tier: the exit code of ``rmq-tiered scrub`` and
the ``rocketmq_tiered_store_scrub_anomalies{kind}`` gauge count them. A note (same shape) is
something the sidecar did on purpose that looks like damage from the outside -- a gap the broker
caused and the dispatcher recorded, an object whose deletion is still pending -- reported for
the operator's information only.

Offsets are in the unit of the file they name: flat commitlog bytes, consumequeue queue offsets
(``queueOffset`` also names the message of a unit or message check), index file bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import Final

KINDS: Final = (
    "missing",
    "size_mismatch",
    "orphan",
    "offset_gap",
    "offset_overlap",
    "unit_out_of_range",
    "index_header",
    "crc",
    "queue_offset",
    "message_header",
)
"""The kinds of damage, in the order reports list them:

- ``missing``: a recorded segment with bytes has no object;
- ``size_mismatch``: the object is shorter than its record (recorded bytes are lost; an object
  longer than its record is normal: bytes past a record are never read);
- ``orphan``: an object in a segment directory that no record names;
- ``offset_gap`` / ``offset_overlap``: a segment does not start where the previous one ends
  (a consumequeue gap the dispatcher recorded is a note instead);
- ``unit_out_of_range``: a consumequeue unit points past the end of its commitlog segment (or
  into no segment);
- ``index_header``: an uploaded index file's header is not a compacted file's, or disagrees with
  its record;
- ``crc`` (``--deep``): a message's body does not match its BODYCRC;
- ``queue_offset`` (``--deep``): a message's QUEUEOFFSET is not the unit's queue offset;
- ``message_header`` (``--deep``): a message's TOTALSIZE, magic or PHYSICALOFFSET disagrees with
  the unit pointing at it."""

NOTE_KINDS: Final = ("recorded_gap", "pending_delete")
"""Informational findings: ``recorded_gap`` (queue offsets the broker deleted before they were
offloaded, recorded by the dispatcher), ``pending_delete`` (an object whose record expiry removed
and whose deletion is logged to be retried)."""


@dataclass(frozen=True)
class Anomaly:
    """One finding; ``count`` > 1 for a run of consecutive units or messages of one segment."""

    kind: str
    key: str
    detail: str
    topic: str | None = None
    queue_id: int | None = None
    file_type: str | None = None
    offset: int | None = None
    queue_offset: int | None = None
    expected: int | None = None
    found: int | None = None
    count: int = 1

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` form (camelCase keys; absent values as null)."""
        return {
            "kind": self.kind,
            "key": self.key,
            "topic": self.topic,
            "queueId": self.queue_id,
            "fileType": self.file_type,
            "offset": self.offset,
            "queueOffset": self.queue_offset,
            "expected": self.expected,
            "found": self.found,
            "count": self.count,
            "detail": self.detail,
        }


@dataclass
class ScrubReport:
    """The whole answer of a scrub."""

    cluster: str
    broker: str
    deep: bool
    topic: str | None
    started_ms: int
    seconds: float = 0.0
    metadata: str = ""
    """Which metadata file was read (the main file, its ``.bak``)."""
    queues: int = 0
    segments: int = 0
    objects: int = 0
    object_bytes: int = 0
    units: int = 0
    """Consumequeue units checked against their commitlog segments."""
    messages: int = 0
    """Messages read and checked (``--deep``)."""
    index_files: int = 0
    anomalies: list[Anomaly] = field(default_factory=list)
    notes: list[Anomaly] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """Whether no anomaly was found (notes do not count)."""
        return not self.anomalies

    def add(self, anomaly: Anomaly) -> None:
        """Record a finding: a note when its kind is one of :data:`NOTE_KINDS`."""
        (self.notes if anomaly.kind in NOTE_KINDS else self.anomalies).append(anomaly)

    def counts(self) -> dict[str, int]:
        """Anomalies by kind, every kind of :data:`KINDS` present (0 when none)."""
        counts = dict.fromkeys(KINDS, 0)
        for a in self.anomalies:
            counts[a.kind] += 1
        return counts

    def sorted(self) -> None:
        """Order the findings by kind (as :data:`KINDS`), then key and offset."""
        order = {k: i for i, k in enumerate((*KINDS, *NOTE_KINDS))}

        def rank(a: Anomaly) -> tuple[int, str, int]:
            return order.get(a.kind, len(order)), a.key, a.queue_offset or a.offset or 0

        self.anomalies.sort(key=rank)
        self.notes.sort(key=rank)

    def summary(self) -> str:
        """One line: what was checked and what was found."""
        checked = (
            f"{self.queues} queues, {self.segments} segments, {self.objects} objects "
            f"({self.object_bytes} bytes), {self.units} units"
        )
        if self.deep:
            checked += f", {self.messages} messages"
        if self.index_files:
            checked += f", {self.index_files} index files"
        notes = f"; {len(self.notes)} notes" if self.notes else ""
        if self.clean:
            return f"scrubbed {checked} in {self.seconds:.1f} s: clean{notes}"
        kinds = ", ".join(f"{k} {n}" for k, n in self.counts().items() if n)
        found = f"{len(self.anomalies)} anomalies ({kinds})"
        return f"scrubbed {checked} in {self.seconds:.1f} s: {found}{notes}"

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` report: one object."""
        return {
            "cluster": self.cluster,
            "broker": self.broker,
            "deep": self.deep,
            "topic": self.topic,
            "startedMs": self.started_ms,
            "seconds": round(self.seconds, 3),
            "metadata": self.metadata,
            "checked": {
                "queues": self.queues,
                "segments": self.segments,
                "objects": self.objects,
                "objectBytes": self.object_bytes,
                "units": self.units,
                "messages": self.messages,
                "indexFiles": self.index_files,
            },
            "clean": self.clean,
            "counts": self.counts(),
            "anomalies": [a.to_json() for a in self.anomalies],
            "notes": [a.to_json() for a in self.notes],
        }
