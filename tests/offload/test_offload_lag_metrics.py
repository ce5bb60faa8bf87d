"""Copy lag in the broker's commitlog files, expiry (delete) lag and backend errors, through real
runs on a posix tier; the oracles read the broker's files and the metadata document directly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from prometheus_client import REGISTRY
from tiered.providers import FaultInjectingProvider
from tiered.providers import FaultPlan
from tiered.providers import MetricsProvider
from tiered.providers import from_config

from tiered.core.sidecar import Sidecar
from tiered.errors import AccessDeniedError
from tiered.metadata import FileSegmentType
from tiered.testing.sample_tier import SidecarCase
from tiered.testing.tier_check import read_document

BEHIND_FILES = "rocketmq_tiered_store_dispatch_behind_commitlog_files"


def first_physical(store: Path, entries: int, topic: str, qid: int, offset: int) -> int:
    """The commitlog offset of the queue's unit at ``offset``, read from its consumequeue file."""
    base = offset // entries * entries * 20
    path = store / "consumequeue" / topic / str(qid) / f"{base:020d}"
    unit = path.read_bytes()[(offset % entries) * 20 :][:8]
    return int(np.frombuffer(unit, ">i8")[0])


def commitlog_ends(store: Path) -> list[int]:
    """Physical offset just past each of the broker's commitlog files."""
    files = sorted(p for p in (store / "commitlog").iterdir() if p.name.isdigit())
    return [int(p.name) + p.stat().st_size for p in files]


def test_copy_lag_counts_the_commitlog_files_from_the_oldest_message_not_offloaded(
    offload_case: SidecarCase,
) -> None:
    store = offload_case.store()
    cfg = offload_case.config(store, "posix")
    with Sidecar(cfg) as sidecar:
        assert sidecar.dispatcher.run_pass(flush=True).messages == 3000
        assert REGISTRY.get_sample_value(BEHIND_FILES) == 0  # caught up
        done = {(f.topic, f.queue_id): f.commit_offset for f in sidecar.flat_store.files()}
    offload_case.append(store, seed=5, messages=3000)
    entries = offload_case.spec.cq_file_entries
    oldest = min(first_physical(store, entries, t, q, o) for (t, q), o in done.items())
    expected = sum(1 for end in commitlog_ends(store) if end > oldest)
    assert expected >= 3  # the lag spans several of the broker's files
    with Sidecar(cfg) as sidecar:
        sidecar.pause.set(True, "test")
        assert sidecar.dispatcher.run_pass(flush=True).paused  # measured, not uploaded
        assert REGISTRY.get_sample_value(BEHIND_FILES) == expected
        sidecar.pause.set(False, "test")
        assert sidecar.dispatcher.run_pass(flush=True).messages == 3000
        assert REGISTRY.get_sample_value(BEHIND_FILES) == 0


def lag_gauge(name: str, queues: list[tuple[str, int]], file_type: str) -> float:
    return sum(
        REGISTRY.get_sample_value(
            f"rocketmq_tiered_store_expiry_behind_{name}",
            {"topic": t, "queue_id": str(q), "file_type": file_type},
        )
        or 0.0
        for t, q in queues
    )


def test_expiry_lag_holds_what_expiry_could_not_delete_until_it_is_deleted(
    offload_case: SidecarCase,
) -> None:
    cfg = offload_case.config(offload_case.store(), "posix")
    faults = FaultInjectingProvider(from_config(cfg))
    provider = MetricsProvider(faults)  # sees the refused deletes
    errors = {"provider": "posix", "operation": "delete"}
    refused = REGISTRY.get_sample_value("rocketmq_tiered_store_provider_errors_total", errors)
    with Sidecar(cfg, provider) as sidecar:
        assert sidecar.dispatcher.run_pass(flush=True).messages == 3000
        queues = [(f.topic, f.queue_id) for f in sidecar.flat_store.files()]
        doc = read_document(cfg)
        recorded = {
            kind: [s.size for segs in doc.segment_table(kind).values() for s in segs.values()]
            for kind in (FileSegmentType.COMMIT_LOG, FileSegmentType.CONSUME_QUEUE)
        }
        report = sidecar.expire(0)  # nothing is past its reserve time
        assert report.behind_segments == 0 and report.behind
        faults.set_plan(FaultPlan(rate=1.0, operations={"delete"}, error=AccessDeniedError))
        report = sidecar.expire(10**15)  # everything is, and no delete succeeds
        assert report.segments == 0 and report.failures == len(queues)
        for kind, file_type in (
            (FileSegmentType.COMMIT_LOG, "commit_log"),
            (FileSegmentType.CONSUME_QUEUE, "consume_queue"),
        ):
            sizes = [s for s in recorded[kind] if s]
            assert lag_gauge("segments", queues, file_type) == len(sizes), file_type
            assert lag_gauge("bytes", queues, file_type) == sum(sizes), file_type
        # one consumequeue object per queue was orphaned (its record went first)
        assert len(sidecar.metadata.orphans.keys()) == len(queues)
        assert report.behind_bytes == sum(sum(v) for v in recorded.values())
        now = REGISTRY.get_sample_value("rocketmq_tiered_store_provider_errors_total", errors)
        assert refused is not None and now == refused + len(queues)  # not retriable: once each
        faults.set_plan(FaultPlan())  # the backend recovers
        again = sidecar.expire(10**15)
        assert again.failures == 0 and again.orphans_deleted == len(queues)
        assert again.behind_segments == 0
        for file_type in ("commit_log", "consume_queue"):
            assert lag_gauge("segments", queues, file_type) == 0
            assert lag_gauge("bytes", queues, file_type) == 0
