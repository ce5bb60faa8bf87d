"""``tieredReadMaxBytesPerSecond``: a catch-up of a whole offloaded store through the read path
takes as long as the backend bytes it reads need at that rate and returns every message as the
broker stored it; what the read-ahead cache answers costs nothing; at 0 nothing changes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY

from tiered.broker.generator import GenSpec
from tiered.read.fetcher import GetStatus
from tiered.read.message_store import TieredMessageStore
from tiered.testing.sample_tier import SampleTier
from tiered.testing.sample_tier import build_sample_tier

MIB = 1 << 20
RATE = 2 * MIB
SPEC = GenSpec(
    seed=48, topics=2, queues=2, messages=7000, min_body=600, max_body=1700,
    commitlog_file_size=2 * MIB, cq_file_entries=4000,
)  # fmt: skip
"""About 8 MiB of messages in 4 queues."""
KEYS: dict[str, Any] = {
    "tieredStoreCommitLogMaxSize": MIB,
    "tieredStoreGroupCommitSize": 256 << 10,
    "tieredStoreGroupCommitCount": 1024,
    "tieredStorageLevel": "FORCE",
}


def downloaded() -> float:
    """Bytes every provider of this process has read."""
    total = 0.0
    for family in REGISTRY.collect():
        if family.name == "rocketmq_tiered_store_provider_download_bytes":
            total += sum(s.value for s in family.samples if s.name.endswith("_sum"))
    return total


def waited() -> float:
    labels = {"direction": "read"}
    return REGISTRY.get_sample_value("rocketmq_tiered_store_quota_wait_seconds_total", labels) or 0


def catch_up(tier: SampleTier, store: TieredMessageStore) -> int:
    """Read every queue from its first offset to its end, 1024 messages a pull, checking each
    message against the broker's copy; the messages read."""
    count = 0
    for topic, qid in tier.queues:
        offset, end = store.get_min_offset(topic, qid), store.get_max_offset(topic, qid)
        while offset < end:
            result = store.get_message(topic, qid, offset, 1024, max_bytes=64 * MIB)
            assert result.status is GetStatus.FOUND and result.tier == "tiered", result.status
            for unit in result.units:
                data = tier.expected[(topic, qid, unit.queue_offset)]
                assert unit.data[:28] + unit.data[36:] == data[:28] + data[36:]
            count += result.count
            offset = result.next_begin_offset
    return count


def test_a_catch_up_under_the_read_quota_reads_at_that_rate(tmp_path: Path) -> None:
    tier = build_sample_tier(tmp_path, SPEC, "posix", deleted_files=0, **KEYS)
    try:
        tier.sidecar.close()
        free_cfg = tier.cfg
        before, quota_before = downloaded(), waited()
        started = time.monotonic()
        with TieredMessageStore.open_read_only(free_cfg) as store:
            assert catch_up(tier, store) == SPEC.messages
        free = time.monotonic() - started
        assert waited() == quota_before  # no quota: no wrapper, no wait
        free_bytes = downloaded() - before

        held_cfg = free_cfg.model_copy(update={"tiered_read_max_bytes_per_second": RATE})
        before = downloaded()
        started = time.monotonic()
        with TieredMessageStore.open_read_only(held_cfg) as store:
            assert catch_up(tier, store) == SPEC.messages
            held = time.monotonic() - started
            read = downloaded() - before
            # a second read of what the read-ahead cache holds costs nothing
            topic, qid = tier.queues[-1]
            end = store.get_max_offset(topic, qid)
            again = time.monotonic()
            result = store.get_message(topic, qid, end - 10, 10)
            assert result.count == 10 and time.monotonic() - again < 0.2
            assert downloaded() == before + read
        print(
            f"\nread quota {RATE / MIB:.0f} MiB/s: {read / MIB:.2f} MiB in {held:.2f} s = "
            f"{read / held / MIB:.2f} MiB/s (unthrottled {free:.2f} s); waited "
            f"{waited() - quota_before:.1f} s"
        )
        assert read == free_bytes  # the same reads, only slower
        assert read >= 7.5 * MIB
        assert held >= read / RATE * 0.97
        assert held <= read / RATE + free + 2.0
    finally:
        tier.sidecar.close()
