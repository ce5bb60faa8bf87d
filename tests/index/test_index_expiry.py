"""Index expiry follows per-topic retention: an uploaded index file holds every topic's keys, so
it lives as long as the longest reserve time of any topic; a topic kept longer by
``tieredStoreFileReservedTimeOverrides`` keeps its key lookups after the global reserve time,
while a topic on the global reserve time loses its messages, and so its lookups, as before."""

from __future__ import annotations

import pytest
from tiered.providers import build_provider

from tiered.core.sidecar import Sidecar
from tiered.metadata import HOUR_MS
from tiered.testing.index_keys import IndexCase
from tiered.testing.index_keys import assert_all_found

KEPT_TOPIC = "GenTopic0"
KEPT_HOURS = 720


@pytest.mark.parametrize("kept_by", ["override", "metadata"])
def test_a_topic_kept_longer_keeps_its_key_lookups(index_case: IndexCase, kept_by: str) -> None:
    """Kept by a ``tieredStoreFileReservedTimeOverrides`` entry, or by the topic's metadata
    ``reserveTime`` (a tier the Java plugin wrote)."""
    override = f"{KEPT_TOPIC}:{KEPT_HOURS}" if kept_by == "override" else ""
    cfg = index_case.config(tieredStoreFileReservedTimeOverrides=override)
    expected = index_case.keys()
    kept = {k: v for k, v in expected.items() if k[0] == KEPT_TOPIC}
    dropped = sorted(k for k in expected if k[0] != KEPT_TOPIC)
    assert kept and dropped
    with Sidecar(cfg, build_provider(cfg)) as sidecar:
        sidecar.dispatcher.run_pass(flush=True)
        if kept_by == "metadata":
            meta = sidecar.metadata.get_topic(KEPT_TOPIC)
            assert meta is not None
            sidecar.metadata.update_topic(meta.model_copy(update={"reserve_time": KEPT_HOURS}))
        index = sidecar.index
        assert index is not None
        index.seal()
        index.compact_sealed()
        assert not index.local.files  # every key is in an uploaded file
        records = index.uploaded.records()
        assert len(records) >= 3
        assert_all_found(index, expected, 7)

        # every message is past the global reserve time: only the kept topic's stay in the tier
        newest = max(r.end_timestamp for r in records)
        now = newest + cfg.tiered_store_file_reserved_time_hours * HOUR_MS + 1
        assert sidecar.expire(now).segments > 0
        deleted = index.expire(now)
        assert_all_found(index, kept, 3)
        assert deleted == 0
        for topic, key in dropped[::7]:
            assert index.query(topic, key) == [], (topic, key)

        # past the kept topic's reserve time the index files go too
        assert index.expire(newest + KEPT_HOURS * HOUR_MS + 1) == len(records)
        assert not index.uploaded.records()
