"""A topic the broker deleted: the sidecar releases what it holds of it at the next expiry run,
keeps its tiered messages readable until the reserve time expires them, then removes its
records (segments, queues, the topic) and objects, so neither memory nor the metadata file grows
with topics that come and go."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tiered import metrics
from tiered.core.sidecar import Sidecar
from tiered.metadata import HOUR_MS
from tiered.metadata import now_ms
from tiered.testing.sample_tier import SidecarCase
from tiered.testing.tier_check import read_document


def _delete_topic(store: Path, topic: str) -> None:
    """What the broker's deleteTopic leaves: no topics.json entry, no consumequeue directory."""
    path = store / "config" / "topics.json"
    table = json.loads(path.read_text())
    del table["topicConfigTable"][topic]
    path.write_text(json.dumps(table))
    shutil.rmtree(store / "consumequeue" / topic)


def test_a_deleted_topic_is_released_then_removed_after_its_reserve_time(
    offload_case: SidecarCase,
) -> None:
    store = offload_case.store()
    years = 24 * 365 * 30  # the generated messages are years old: keep them until told
    cfg = offload_case.config(store, "posix", tieredStoreFileReservedTime=years)
    tier = Path(cfg.tiered_store_file_path)
    with Sidecar(cfg) as sidecar:
        assert sidecar.dispatcher.run_pass(flush=True).messages > 0
        queues = {(f.topic, f.queue_id) for f in sidecar.flat_store.files()}
        gone = {q for q in queues if q[0] == "GenTopic1"}
        assert gone and gone != queues
        _delete_topic(store, "GenTopic1")
        sidecar.expire(now_ms())  # within the reserve time: released, still in the tier
        assert not gone & set(sidecar.dispatcher.states)
        assert all(sidecar.flat_store.get(*q) is not None for q in gone)
        assert {q for q in queues if q[0] == "GenTopic1"} <= {
            (t, qid)
            for t, by_id in read_document(cfg).queue_metadata_table.items()
            for qid in by_id
        }
        assert any("/GenTopic1/" in str(p) for p in tier.rglob("*") if p.is_file())
        later = now_ms() + (cfg.tiered_store_file_reserved_time_hours + 1) * HOUR_MS
        sidecar.expire(later)  # every segment expired: records and objects go
        assert all(sidecar.flat_store.get(*q) is None for q in gone)
        assert sidecar.flat_store.get("GenTopic0", 0) is not None  # live topics keep their place
    doc = read_document(cfg)
    assert "GenTopic1" not in doc.queue_metadata_table
    assert "GenTopic1" not in doc.topic_metadata_table
    assert "GenTopic0" in doc.queue_metadata_table
    assert not any(p.is_file() for p in tier.rglob("*") if "/GenTopic1/" in str(p))
    with Sidecar(cfg) as again:  # a restart brings none of it back
        assert not {(f.topic, f.queue_id) for f in again.flat_store.files()} & gone
        assert again.dispatcher.run_pass(flush=True).errors == {}
    size = next(f for f in metrics.REGISTRY.collect() if f.name == "rocketmq_storage_size")
    ours = {f"{cfg.broker_name}/{topic}/{qid}" for topic, qid in gone}
    assert not [s for s in size.samples if s.labels["topic"] in ours]


def test_nothing_is_taken_for_deleted_without_the_brokers_topics(
    offload_case: SidecarCase,
) -> None:
    """A queue directory gone but topics.json unreadable (or still naming the topic): kept."""
    store = offload_case.store()
    cfg = offload_case.config(store, "posix")
    with Sidecar(cfg) as sidecar:
        sidecar.dispatcher.run_pass(flush=True)
        shutil.rmtree(store / "consumequeue" / "GenTopic1")
        later = now_ms() + (cfg.tiered_store_file_reserved_time_hours + 1) * HOUR_MS
        sidecar.expire(later)  # topics.json still names it: a queue directory alone proves little
        assert sidecar.flat_store.get("GenTopic1", 0) is not None
        (store / "config" / "topics.json").write_text("{not json")
        sidecar.expire(later)
        assert sidecar.flat_store.get("GenTopic1", 0) is not None
    assert "GenTopic1" in read_document(cfg).queue_metadata_table
