"""Which tier serves a read: the topic's storage level (spec §9.1).

The level is ``tieredStorageLevel`` or the topic's ``tieredStorageLevelOverrides`` entry
(:meth:`~tiered.config.TieredConfig.storage_level_for`).

``route`` returns the decision together with the facts it rests on, so ``explain`` can show an
operator why an offset is (or is not) read from the tier.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from typing import Protocol

from tiered.broker.page_cache import Residency
from tiered.config import StorageLevel

Tier = Literal["tiered", "local"]


class LocalView(Protocol):
    """What routing asks of the broker's store
    (:class:`~tiered.source.local_source.LocalSource`)."""

    def min_offset(self, topic: str, queue_id: int) -> int: ...
    def in_store(self, topic: str, queue_id: int, offset: int) -> bool: ...
    def residency(self, topic: str, queue_id: int, offset: int, batch: int) -> Residency | None: ...


@dataclass(slots=True)  # not frozen: five times cheaper to make, one per read
class Route:
    """A routing decision and why it was taken."""

    tier: Tier
    reason: str
    level: StorageLevel
    flat_commit_offset: int
    local_min_offset: int
    resident: Residency | None = None

    def as_json(self) -> dict[str, object]:
        """The decision as ``explain`` prints it."""
        out: dict[str, object] = {
            "tier": self.tier,
            "reason": self.reason,
            "level": self.level.name,
            "flatCommitOffset": self.flat_commit_offset,
            "localMinOffset": self.local_min_offset,
        }
        if self.resident is not None:
            out["residentPages"] = self.resident.resident_pages
            out["totalPages"] = self.resident.total_pages
        return out


def route(
    level: StorageLevel,
    local: LocalView,
    topic: str,
    queue_id: int,
    offset: int,
    batch: int,
    flat_commit_offset: int,
    *,
    system_topic: bool = False,
) -> Route:
    """Decide local vs tiered for ``batch`` messages from ``offset`` (spec §9.1, in order).

    ``flat_commit_offset`` is the tier's next queue offset to upload, -1 when the tier has no
    file for the queue. A system topic (spec §1.6) is always local. NOT_IN_MEM checks the
    page-cache residency of exactly the batch's commitlog bytes (upstream looks one message past
    the batch).
    """
    local_min = local.min_offset(topic, queue_id)

    def done(tier: Tier, reason: str, resident: Residency | None = None) -> Route:
        return Route(tier, reason, level, flat_commit_offset, local_min, resident)

    if system_topic:
        return done("local", f"{topic!r} is a system topic, never in the tier")
    if level >= StorageLevel.FORCE:
        return done("tiered", "storage level FORCE reads every offset from the tier")
    if level == StorageLevel.DISABLE:
        return done("local", "storage level DISABLE never reads from the tier")
    if flat_commit_offset < 0:
        return done("local", "the tier holds nothing of this queue")
    if offset >= flat_commit_offset:
        return done(
            "local", f"offset {offset} is not uploaded yet (tier ends at {flat_commit_offset})"
        )
    if not local.in_store(topic, queue_id, offset):
        return done(
            "tiered", f"offset {offset} is no longer on the broker's disk (local min {local_min})"
        )
    if level >= StorageLevel.NOT_IN_MEM:
        resident = local.residency(topic, queue_id, offset, batch)
        if resident is None or not resident.all_resident:
            return done("tiered", "the local commitlog range is not in the page cache", resident)
        return done("local", "the local commitlog range is in the page cache", resident)
    return done("local", f"offset {offset} is still on the broker's disk (NOT_IN_DISK)")
