"""Expiry (whole segments, oldest first, metadata before data) and the write-order invariant."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import REGISTRY
from tiered.providers import MemoryProvider
from tiered.providers import WrappedProvider
from tiered.providers.layout import FileType
from tiered.providers.layout import segment_key

from tiered.config import TieredConfig
from tiered.core.sidecar import Sidecar
from tiered.errors import AccessDeniedError
from tiered.metadata import HOUR_MS
from tiered.metadata import LONG_MAX
from tiered.metadata import FileSegmentType
from tiered.offload.expiry import expire
from tiered.offload.expiry import reserve_hours
from tiered.read.fetcher import GetStatus
from tiered.read.message_store import TieredMessageStore
from tiered.source.local_source import LocalSource
from tiered.testing.sample_tier import SidecarCase
from tiered.testing.tier_check import check_tier
from tiered.testing.tier_check import persisted_records
from tiered.testing.tier_check import read_document

TYPES = {
    FileSegmentType.COMMIT_LOG: FileType.COMMIT_LOG,
    FileSegmentType.CONSUME_QUEUE: FileType.CONSUME_QUEUE,
}


class WriteOrder(WrappedProvider):
    """Checks before and after every backend call that every *persisted* segment record is
    backed by at least its size of data, and that recorded units point at recorded bytes."""

    def __init__(self, inner: MemoryProvider, cfg: TieredConfig) -> None:
        super().__init__(inner)
        self.memory = inner
        self.cfg = cfg
        self.checks = 0

    def _around(self, operation: str, key: str, call: Callable[[], Any]) -> Any:
        self.check()
        try:
            return call()
        finally:
            self.check()

    def check(self) -> None:
        self.checks += 1
        for key, record in persisted_records(self.cfg):
            real = self.memory.size(key) if self.memory.exists(key) else 0
            assert record.size <= real, f"{key}: record {record.size} > data {real}"
        doc = read_document(self.cfg)
        cl_table = doc.segment_table(FileSegmentType.COMMIT_LOG)
        for path, segments in doc.segment_table(FileSegmentType.CONSUME_QUEUE).items():
            last = segments[max(segments)]
            if last.size == 0:
                continue
            broker, topic, qid = path.split("/")
            key = segment_key(
                "DefaultCluster", broker, topic, int(qid), FileType.CONSUME_QUEUE, last.base_offset
            )
            unit = self.memory.read(key, last.size - 20, 20)
            end = int.from_bytes(unit[:8], "big") + int.from_bytes(unit[8:12], "big")
            cl = cl_table[path]
            assert end <= max(b + s.size for b, s in cl.items()), f"{path}: unit past the record"


def offload(cfg: TieredConfig, provider: Any) -> None:
    with Sidecar(cfg, provider) as sidecar:
        assert not sidecar.dispatcher.run_pass(flush=True).errors


def ends(cfg: TieredConfig, kind: FileSegmentType) -> dict[str, list[tuple[int, int, int]]]:
    """Per path: (base, size, end timestamp) of each recorded segment."""
    table = read_document(cfg).segment_table(kind)
    return {
        p: [(b, s.size, s.end_timestamp) for b, s in sorted(v.items())] for p, v in table.items()
    }


def test_nothing_expires_within_the_reserve_time(offload_case: SidecarCase) -> None:
    cfg = offload_case.config(offload_case.store())
    provider = MemoryProvider()
    offload(cfg, provider)
    newest = max(
        e
        for segs in ends(cfg, FileSegmentType.COMMIT_LOG).values()
        for _, _, e in segs
        if e != LONG_MAX
    )
    oldest = min(e for segs in ends(cfg, FileSegmentType.COMMIT_LOG).values() for _, _, e in segs)
    with Sidecar(cfg, provider) as sidecar:
        report = sidecar.expire(oldest + 72 * HOUR_MS - 1)
    assert report.segments == 0
    assert newest > oldest


def test_a_read_below_the_commitlogs_first_message_is_too_small_after_a_restart(
    offload_case: SidecarCase,
) -> None:
    """Expiry cuts the commitlog and the consumequeue at their own segment ends, so a queue's
    consumequeue may keep units whose messages went with an older commitlog segment (spec §5.8:
    the min is raised to the first message kept). A restarted sidecar learns that min only by
    reading: a read at the consumequeue's first unit still answers OFFSET_TOO_SMALL with it."""
    cfg = offload_case.config(offload_case.store(), tieredStorageLevel="FORCE")
    provider = MemoryProvider()
    offload(cfg, provider)
    segs = ends(cfg, FileSegmentType.CONSUME_QUEUE)
    cut = min(s[len(s) // 2][2] for s in segs.values())
    with Sidecar(cfg, provider) as sidecar:
        assert sidecar.expire(cut + 72 * HOUR_MS).segments > 0
        lows = {
            (f.topic, f.queue_id): (f.consume_queue.min_queue_offset, f.min_offset())
            for f in sidecar.flat_store.files()
        }
    ahead = {q: lo for q, lo in lows.items() if lo[0] < lo[1]}
    assert ahead, lows  # (the case needs a commitlog that expired ahead of its consumequeue)
    with Sidecar(cfg, provider) as sidecar:  # restarted: no first queue offset known
        store = TieredMessageStore(cfg, sidecar.flat_store, LocalSource(cfg))
        for (topic, qid), (cq_min, lo) in ahead.items():
            r = store.get_message(topic, qid, cq_min, 32)
            assert (r.status, r.next_begin_offset, r.tier) == (
                GetStatus.OFFSET_TOO_SMALL,
                lo,
                "tiered",
            ), (topic, qid, cq_min, lo)
            found = store.get_message(topic, qid, lo, 32)
            assert found.status is GetStatus.FOUND and found.units[0].queue_offset == lo


def test_old_segments_go_oldest_first_metadata_before_data(offload_case: SidecarCase) -> None:
    cfg = offload_case.config(offload_case.store())
    memory = MemoryProvider()
    provider = WriteOrder(memory, cfg)
    offload(cfg, provider)
    before = ends(cfg, FileSegmentType.CONSUME_QUEUE)
    path, segs = next(iter(sorted(before.items())))
    cut = segs[len(segs) // 2][2]  # expire segments whose newest message is older than this
    with Sidecar(cfg, provider) as sidecar:
        report = sidecar.expire(cut + 72 * HOUR_MS)
        flat = sidecar.flat_store.get("GenTopic0", 0)
        assert flat is not None
        min_offset = flat.min_offset()
    assert report.segments > 0 and provider.checks > 0
    after = ends(cfg, FileSegmentType.CONSUME_QUEUE)
    for p, old in before.items():
        kept = [s for s in old if s[2] >= cut]
        assert after[p] == kept  # exactly the older whole segments, from the front
    for old in ends(cfg, FileSegmentType.COMMIT_LOG).values():
        assert all(e >= cut for _, _, e in old)
    # what expiry deleted is gone from the backend; the consumequeue min follows the commitlog
    deleted = [s for s in before[path] if s[2] < cut]
    broker, topic, qid = path.split("/")
    for base, _, _ in deleted:
        assert not memory.exists(
            segment_key("DefaultCluster", broker, topic, int(qid), FileType.CONSUME_QUEUE, base)
        )
    assert min_offset >= after["broker-a/GenTopic0/0"][0][0] // 20


def test_an_idle_queue_keeps_its_position_when_everything_expired(
    offload_case: SidecarCase,
) -> None:
    store = offload_case.store()
    cfg = offload_case.config(store)
    memory = MemoryProvider()
    provider = WriteOrder(memory, cfg)
    offload(cfg, provider)
    first = check_tier(cfg, memory)
    with Sidecar(cfg, provider) as sidecar:
        sidecar.expire(10**15)  # far future: everything is expired
        for flat in sidecar.flat_store.files():
            assert [s.size for s in flat.consume_queue.segments] == [0]
            assert [s.size for s in flat.commitlog.segments] == [0]
            assert flat.commit_offset == first.ranges[(flat.topic, flat.queue_id)][1]
    assert len(list(memory.list("212d6b50_DefaultCluster/broker-a/GenTopic"))) == 0
    offload_case.append(store, seed=21, messages=600)
    offload(cfg, provider)
    start = {k: end for k, (_, end) in first.ranges.items()}
    check_tier(cfg, memory, start=start).assert_ok(600)


def test_reserve_time_per_topic(offload_case: SidecarCase) -> None:
    cfg = offload_case.config(
        offload_case.store(), tieredStoreFileReservedTimeOverrides="GenTopic0:1"
    )
    provider = MemoryProvider()
    offload(cfg, provider)
    newest = max(
        e for segs in ends(cfg, FileSegmentType.CONSUME_QUEUE).values() for _, _, e in segs
    )
    with Sidecar(cfg, provider) as sidecar:
        assert reserve_hours(cfg, sidecar.metadata, "GenTopic0") == 1
        assert reserve_hours(cfg, sidecar.metadata, "GenTopic1") == 72
        topic = sidecar.metadata.get_topic("GenTopic1")
        assert topic is not None
        sidecar.metadata.update_topic(topic.model_copy(update={"reserve_time": 2}))
        assert reserve_hours(cfg, sidecar.metadata, "GenTopic1") == 2
        report = expire(cfg, sidecar.flat_store, newest + 90 * 60_000)  # 1.5 h after the newest
    assert report.segments > 0
    after = ends(cfg, FileSegmentType.CONSUME_QUEUE)
    assert all(sum(s for _, s, _ in segs) == 0 for p, segs in after.items() if "GenTopic0" in p)
    assert all(sum(s for _, s, _ in segs) > 0 for p, segs in after.items() if "GenTopic1" in p)


def test_expiry_can_be_disabled(offload_case: SidecarCase) -> None:
    cfg = offload_case.config(offload_case.store(), tieredStoreDeleteFileEnable="false")
    provider = MemoryProvider()
    offload(cfg, provider)
    with Sidecar(cfg, provider) as sidecar:
        assert sidecar.expire(10**15).segments == 0
    assert check_tier(cfg, provider).messages == 3000


class FailingDeletes(WrappedProvider):
    """Refuses deletes of keys holding ``marker`` (e.g. ``/COMMIT_LOG/``), as a backend would
    (AccessDenied: not retriable)."""

    def __init__(self, inner: MemoryProvider) -> None:
        super().__init__(inner)
        self.marker: str | None = None
        self.refused: list[str] = []

    def _around(self, operation: str, key: str, call: Callable[[], Any]) -> Any:
        if operation == "delete" and self.marker is not None and self.marker in key:
            self.refused.append(key)
            raise AccessDeniedError(f"delete of {key!r} refused", key=key)
        return call()


def expiry_failures(file_type: str) -> float:
    value = REGISTRY.get_sample_value(
        "rocketmq_tiered_store_expiry_failures_total", {"file_type": file_type}
    )
    assert value is not None, f"no expiry_failures_total{{file_type={file_type!r}}} series"
    return value


@pytest.mark.parametrize(("marker", "file_type"), [("/CONSUME_QUEUE/", "consume_queue"),
                                                   ("/COMMIT_LOG/", "commit_log")])  # fmt: skip
def test_a_failed_segment_expiry_is_counted_by_file_type(
    offload_case: SidecarCase, marker: str, file_type: str
) -> None:
    cfg = offload_case.config(offload_case.store())
    provider = FailingDeletes(MemoryProvider())
    offload(cfg, provider)
    before = {t: expiry_failures(t) for t in ("commit_log", "consume_queue", "index")}
    provider.marker = marker
    with Sidecar(cfg, provider) as sidecar:
        queues = len(sidecar.flat_store.files())
        report = sidecar.expire(10**15)  # everything is expired
        assert report.failures == queues  # each queue stops at its first refused delete
        assert len(provider.refused) == queues
        assert expiry_failures(file_type) - before[file_type] == queues
        others = {t for t in before if t != file_type}
        assert all(expiry_failures(t) == before[t] for t in others)  # index: its own metric
        provider.marker = None  # the backend recovers: the next run goes on
        again = sidecar.expire(10**15)
        assert again.failures == 0 and again.segments > 0
        assert expiry_failures(file_type) - before[file_type] == queues


def test_objects_whose_delete_failed_are_deleted_by_a_later_run(offload_case: SidecarCase) -> None:
    """The record goes first, so a refused delete would leave the object in the backend for
    good; the orphan log keeps its key and the next run deletes it -- also after a restart."""
    cfg = offload_case.config(offload_case.store())
    memory = MemoryProvider()
    provider = FailingDeletes(memory)
    offload(cfg, provider)
    provider.marker = "/COMMIT_LOG/"
    with Sidecar(cfg, provider) as sidecar:
        sidecar.expire(10**15)
        refused = sorted(set(provider.refused))
        assert refused and sidecar.metadata.orphans.keys() == refused
        assert all(memory.exists(key) for key in refused)
    provider.marker = None
    with Sidecar(cfg, provider) as sidecar:  # a restart: the log is read back from disk
        report = sidecar.expire(10**15)
        assert report.orphans_deleted == len(refused)
        assert not any(memory.exists(key) for key in refused)
        assert sidecar.metadata.orphans.keys() == []
    doc = read_document(cfg)
    recorded = set()
    for kind, file_type in TYPES.items():
        for path, segments in doc.segment_table(kind).items():
            broker, topic, qid = path.split("/")
            for base in segments:
                recorded.add(
                    segment_key("DefaultCluster", broker, topic, int(qid), file_type, base)
                )
    stored = {k for k in memory.list("") if "/COMMIT_LOG/" in k or "/CONSUME_QUEUE/" in k}
    assert stored <= recorded  # no object without a record is left behind


def test_a_logged_key_whose_record_survived_is_never_deleted(offload_case: SidecarCase) -> None:
    """A crash after logging the key but before removing the record: the object is live."""
    cfg = offload_case.config(offload_case.store())
    memory = MemoryProvider()
    offload(cfg, memory)
    with Sidecar(cfg, memory) as sidecar:
        flat = sidecar.flat_store.files()[0]
        live = flat.commitlog.key(flat.commitlog.segments[0].base)
        sidecar.metadata.orphans.add([live])
        assert sidecar.expire(0).orphans_deleted == 0  # nothing is old enough at time 0
        assert memory.exists(live) and sidecar.metadata.orphans.keys() == []
    assert check_tier(cfg, memory).problems == []
