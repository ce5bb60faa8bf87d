"""End to end: generated broker stores offloaded to posix, memory and S3 (moto) tiers.

Every test checks the tier with :func:`tiered.testing.tier_check.check_tier` (each queue offset
exactly once, in order, bytes equal to the broker's except 28..35, which hold the flat offset).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tiered.providers import FaultInjectingProvider
from tiered.providers import FaultPlan
from tiered.providers import MemoryProvider
from tiered.providers import PosixProvider
from tiered.providers import Provider
from tiered.providers import S3Provider
from tiered.providers import WrappedProvider
from tiered.providers import build_provider

from tiered import metrics
from tiered.broker.generator import GenSpec
from tiered.broker.generator import generate_store
from tiered.broker.page_cache import residency
from tiered.config import TieredConfig
from tiered.core.sidecar import Sidecar
from tiered.metadata import FileSegmentType
from tiered.metadata import now_ms
from tiered.testing.sample_tier import SidecarCase
from tiered.testing.tier_check import check_tier
from tiered.testing.tier_check import read_document
from tiered.testing.tier_check import store_fingerprint


def offload(cfg: TieredConfig, provider: Provider, *, flush: bool = True) -> int:
    """One sidecar life: open (restore + reconcile), one pass, close; returns messages sent."""
    with Sidecar(cfg, provider) as sidecar:
        report = sidecar.dispatcher.run_pass(flush=flush)
        assert not report.errors, report.errors
        return report.messages


def segment_counts(cfg: TieredConfig) -> tuple[int, int]:
    """The most commitlog and consumequeue segments any queue has."""
    doc = read_document(cfg)
    cl = doc.segment_table(FileSegmentType.COMMIT_LOG)
    cq = doc.segment_table(FileSegmentType.CONSUME_QUEUE)
    return max(len(v) for v in cl.values()), max(len(v) for v in cq.values())


def gap_total() -> float:
    """The gap counter summed over queues."""
    samples = (s for m in metrics.DISPATCH_GAP_MESSAGES.collect() for s in m.samples)
    return sum(s.value for s in samples if s.name.endswith("_total"))


def provider_for(cfg: TieredConfig) -> Provider:
    """The backend of ``cfg`` (a fresh memory provider for ``memory``)."""
    return build_provider(cfg)


@pytest.mark.parametrize("backend", ["posix", "memory"])
def test_every_message_offloaded_once_in_order_with_rolls(
    backend: str, offload_case: SidecarCase
) -> None:
    store = offload_case.store()
    cfg = offload_case.config(store, backend)
    provider = provider_for(cfg)
    before = store_fingerprint(store)
    assert offload(cfg, provider) == 3000
    check = check_tier(cfg, provider)
    assert check.problems == []
    assert check.messages == 3000 and len(check.ranges) == 6
    cl_segments, cq_segments = segment_counts(cfg)
    assert cl_segments > 3 and cq_segments > 1  # both flat files rolled
    assert store_fingerprint(store) == before  # the broker store is read-only to the sidecar


@pytest.mark.s3
def test_s3_end_to_end(offload_case: SidecarCase, s3_keys: dict[str, str]) -> None:
    store = offload_case.store()
    cfg = offload_case.config(store, "s3", tieredStoreCommitLogMaxSize=96 << 10, **s3_keys)
    provider = provider_for(cfg)
    assert offload(cfg, provider) == 3000
    check_tier(cfg, provider).assert_ok(3000)
    cl_segments, cq_segments = segment_counts(cfg)
    assert cl_segments > 1 and cq_segments > 1  # sealed (consolidated) segments on S3 too
    # a fresh sidecar restores everything from metadata and finds nothing left to do
    assert offload(cfg, provider_for(cfg)) == 0


@pytest.mark.s3
def test_on_s3_the_object_store_keys_hold_and_size_the_batches(
    tmp_path: Path, offload_case: SidecarCase, small_spec: GenSpec, s3_keys: dict[str, str]
) -> None:
    store = tmp_path / "store"
    now = int(time.time() * 1000)
    spec = dataclasses.replace(small_spec, messages=600, start_ms=now)
    generate_store(store, spec)
    upstream = {  # would send at once, in small batches
        "tieredStoreGroupCommitTimeout": 0,
        "tieredStoreGroupCommitCount": 8,
        "tieredStoreGroupCommitSize": 4096,
        "tieredStoreCommitLogMaxSize": 1 << 30,
        "tieredStoreConsumeQueueMaxSize": 100 << 20,
    }
    held = offload_case.config(
        store,
        "s3",
        objectStoreGroupCommitTimeout=600_000,
        objectStoreGroupCommitSize=1 << 20,
        **upstream,
        **s3_keys,
    )
    provider = provider_for(held)
    assert offload(held, provider, flush=False) == 0  # young messages wait on an object store
    requests: list[str] = []
    provider.add_request_listener(requests.append)
    sized = offload_case.config(
        store,
        "s3",
        objectStoreGroupCommitTimeout=0,
        objectStoreGroupCommitSize=64 << 10,
        **upstream,
        **s3_keys,
    )
    assert offload(sized, provider, flush=False) == 600
    assert check_tier(sized, provider).problems == []
    s3 = provider.inner if isinstance(provider, WrappedProvider) else provider
    assert isinstance(s3, S3Provider)
    listed = s3.client.list_objects_v2(Bucket=s3.bucket)["Contents"]
    chunks = [o["Key"] for o in listed if "~" in o["Key"]]
    # each queue's ~50 KiB went as one commitlog and one consumequeue object, not ~100 of each
    assert len(chunks) == 2 * spec.topics * spec.queues
    assert requests.count("PUT") == len(chunks) + 1  # and the metadata mirror, once a round
    with Sidecar(sized, provider) as sidecar:  # an object fills a wave: one batch a round
        assert sidecar.dispatcher.round_batches == 1


@pytest.mark.parametrize("backend", ["posix", "memory"])
def test_follows_a_broker_that_keeps_writing_and_rolling(
    backend: str, offload_case: SidecarCase
) -> None:
    store = offload_case.store()
    cfg = offload_case.config(store, backend)
    provider = provider_for(cfg)
    total = offload(cfg, provider)
    for round_ in range(3):
        offload_case.append(store, seed=100 + round_, messages=700)
        total += offload(cfg, provider)
    assert total == 3000 + 3 * 700
    check_tier(cfg, provider).assert_ok(total)


def test_a_running_dispatcher_follows_appends_between_passes(offload_case: SidecarCase) -> None:
    store = offload_case.store()
    cfg = offload_case.config(store)
    provider = MemoryProvider()
    with Sidecar(cfg, provider) as sidecar:
        total = sidecar.dispatcher.run_pass(flush=True).messages
        for i in range(3):
            offload_case.append(store, seed=7 + i, messages=500)
            total += sidecar.dispatcher.run_pass(flush=True).messages
    assert total == 4500
    assert check_tier(cfg, provider).problems == []


def test_gap_when_the_broker_deleted_unoffloaded_files(offload_case: SidecarCase) -> None:
    store = offload_case.store()
    cfg = offload_case.config(store)
    provider = MemoryProvider()
    offload(cfg, provider)
    first = check_tier(cfg, provider)
    offload_case.append(store, seed=5, messages=3000)
    files = sorted((store / "commitlog").iterdir())
    for f in files[:-1]:  # the broker deleted every file but the newest
        f.unlink()
    gaps_before = gap_total()
    with Sidecar(cfg, provider) as sidecar:
        report = sidecar.dispatcher.run_pass(flush=True)
        states = dict(sidecar.dispatcher.states)
    assert report.gaps and not report.errors
    gap_messages = sum(g.messages for _, _, g in report.gaps)
    assert gap_total() - gaps_before == gap_messages
    start = {}
    for (topic, qid), (_, end) in first.ranges.items():
        gap = states[(topic, qid)].gaps[-1]
        assert gap.start == end  # the gap begins where the tier stopped
        start[(topic, qid)] = gap.end
    check = check_tier(cfg, provider, start=start)
    assert check.problems == []
    for key, (a, b) in first.ranges.items():  # the tiered history is kept
        assert set(range(a, b)) <= check.tier_offsets[key]


def test_system_topics_never_offloaded_and_include_exclude_apply(offload_case: SidecarCase) -> None:
    store = offload_case.store()
    import shutil

    cq = store / "consumequeue"
    for name in ("RMQ_SYS_TRACE_TOPIC", "rmq_sys_REVIVE_LOG_x", "%LMQ%q", "broker-a", "TBW102"):
        shutil.copytree(cq / "GenTopic0" / "0", cq / name / "0")
    shutil.copytree(cq / "GenTopic0" / "1", cq / "%RETRY%group" / "0")
    cfg = offload_case.config(store, tieredStoreTopicExclude="GenTopic1")
    provider = MemoryProvider()
    offload(cfg, provider)
    doc = read_document(cfg)
    assert set(doc.topic_metadata_table) == {"GenTopic0", "%RETRY%group"}
    check = check_tier(cfg, provider, topics={"GenTopic0", "%RETRY%group"})
    assert check.problems == [] and len(check.ranges) == 4


def test_a_slave_stands_by_unless_told_to_upload(offload_case: SidecarCase) -> None:
    store = offload_case.store()
    provider = MemoryProvider()
    slave = offload_case.config(store, brokerRole="SLAVE", brokerId=1)
    with Sidecar(slave, provider) as sidecar:
        assert sidecar.dispatcher.role == "standby"
        report = sidecar.dispatcher.run_pass(flush=True)
    assert report.messages == 0 and report.role == "standby"
    assert list(provider.list()) == []
    assert read_document(slave).topic_metadata_table == {}
    forced = offload_case.config(
        store, brokerRole="SLAVE", brokerId=1, tieredStoreUploadOnSlave=True
    )
    assert offload(forced, provider) == 3000


def test_recent_policy_starts_near_now(
    tmp_path: Path, offload_case: SidecarCase, small_spec: GenSpec
) -> None:
    store = tmp_path / "store"
    now = int(time.time() * 1000)
    old = dataclasses.replace(small_spec, messages=1000, start_ms=now - 3_600_000)
    generate_store(store, old)
    recent = generate_store(
        store, dataclasses.replace(old, seed=3, messages=600, start_ms=now, append=True)
    )
    cfg = offload_case.config(store, tieredStoreDispatchStartPolicy="RECENT")
    provider = MemoryProvider()
    assert offload(cfg, provider) == 600
    start = {key: first for key, (first, _) in recent.queues.items()}
    check = check_tier(cfg, provider, start=start).assert_ok(600)
    assert all(min(check.tier_offsets[k]) == v for k, v in start.items())


def test_a_message_bigger_than_the_batch_size_goes_alone(
    tmp_path: Path, offload_case: SidecarCase, small_spec: GenSpec
) -> None:
    store = tmp_path / "store"
    spec = dataclasses.replace(small_spec, messages=300, min_body=3000, max_body=6000)
    generate_store(store, spec)
    cfg = offload_case.config(
        store, spec=spec, tieredStoreGroupCommitSize=1024, tieredStoreCommitLogMaxSize=4096
    )
    provider = MemoryProvider()
    with Sidecar(cfg, provider) as sidecar:
        report = sidecar.dispatcher.run_pass(flush=True)
    assert report.messages == 300 and report.rounds >= 50  # one message per queue per round
    assert check_tier(cfg, provider).problems == []


def test_the_hold_rule_waits_for_age_or_count(
    tmp_path: Path, offload_case: SidecarCase, small_spec: GenSpec
) -> None:
    store = tmp_path / "store"
    now = int(time.time() * 1000)
    generate_store(store, dataclasses.replace(small_spec, messages=600, start_ms=now))
    provider = MemoryProvider()
    held = offload_case.config(
        store,
        tieredStoreGroupCommitTimeout=600_000,
        tieredStoreGroupCommitCount=1000,
        tieredStoreGroupCommitSize=1 << 20,
    )
    assert offload(held, provider, flush=False) == 0  # young, few: held
    by_count = offload_case.config(
        store,
        tieredStoreGroupCommitTimeout=600_000,
        tieredStoreGroupCommitCount=40,
        tieredStoreGroupCommitSize=1 << 20,
    )
    sent = offload(by_count, provider, flush=False)
    assert 0 < sent < 600  # full batches went, each queue's remainder waits
    assert offload(held, provider, flush=True) == 600 - sent
    assert check_tier(held, provider).problems == []


class _Concurrency(WrappedProvider):
    """Counts how many appends run at once."""

    def __init__(self, inner: Provider) -> None:
        super().__init__(inner)
        self.running = self.peak = 0
        self._lock = threading.Lock()

    def _around(self, operation: str, key: str, call: Callable[[], Any]) -> Any:
        if operation != "append":
            return call()
        with self._lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
        try:
            time.sleep(0.002)
            return call()
        finally:
            with self._lock:
                self.running -= 1


def test_uploads_of_different_queues_run_concurrently_and_bounded(
    offload_case: SidecarCase,
) -> None:
    store = offload_case.store()
    cfg = offload_case.config(store)
    provider = _Concurrency(MemoryProvider())
    with Sidecar(cfg, provider, workers=3) as sidecar:
        sidecar.dispatcher.run_pass(flush=True)
    assert 1 < provider.peak <= 3
    assert check_tier(cfg, provider).problems == []


@pytest.mark.s3
def test_ten_percent_of_s3_calls_failing_loses_nothing(
    offload_case: SidecarCase, s3_keys: dict[str, str]
) -> None:
    store = offload_case.store()
    cfg = offload_case.config(store, "s3", tieredStoreCommitLogMaxSize=96 << 10, **s3_keys)
    s3 = build_provider(cfg)
    before = FaultInjectingProvider(s3, FaultPlan(rate=0.05, seed=1))  # nothing happened
    faulty = FaultInjectingProvider(before, FaultPlan(rate=0.05, seed=2, when="after"))
    with Sidecar(cfg, faulty) as sidecar:  # restore and reconcile go through the faults too
        report = sidecar.dispatcher.run_pass(flush=True)
    assert report.errors == {} and report.messages == 3000
    assert report.failures > 0  # failed steps were retried from where they stopped
    assert before.injected > 0 and faulty.injected > 0
    check_tier(cfg, s3).assert_ok(3000)


def test_cold_backlog_pages_are_released(offload_case: SidecarCase) -> None:
    store = offload_case.store()
    files = sorted((store / "commitlog").iterdir())
    import os

    os.sync()  # clean pages only can be dropped
    for f in files:
        f.read_bytes()  # warm the page cache
    assert sum(residency(f, 0, f.stat().st_size).resident_pages for f in files) > 0
    cfg = offload_case.config(store)
    with Sidecar(cfg, MemoryProvider()) as sidecar:
        sidecar.dispatcher.run_pass(flush=True)
        released = sidecar.dispatcher.released_bytes
    assert released > 0
    # everything but the newest file's tail (the broker's hot end) left the page cache
    cold = files[:-1]
    left = sum(residency(f, 0, f.stat().st_size).resident_pages for f in cold)
    total = sum(residency(f, 0, f.stat().st_size).total_pages for f in cold)
    assert left <= total // 10


def test_many_queues(tmp_path: Path, offload_case: SidecarCase, small_spec: GenSpec) -> None:
    spec = dataclasses.replace(small_spec, topics=4, queues=16, messages=6400, max_body=300)
    store = tmp_path / "store"
    generate_store(store, spec)
    cfg = offload_case.config(store, spec=spec)
    provider = MemoryProvider()
    assert offload(cfg, provider) == 6400
    check = check_tier(cfg, provider)
    assert check.problems == [] and len(check.ranges) == 64 and check.messages == 6400


def test_posix_tier_is_the_java_layout(offload_case: SidecarCase) -> None:
    store = offload_case.store()
    cfg = offload_case.config(store, "posix")
    provider = PosixProvider(cfg.tiered_store_file_path)
    offload(cfg, provider)
    root = Path(cfg.tiered_store_file_path) / "212d6b50_DefaultCluster" / "broker-a"
    first_cq = root / "GenTopic0" / "0" / "CONSUME_QUEUE" / "cfcd208400000000000000000000"
    first_cl = root / "GenTopic0" / "0" / "COMMIT_LOG" / "cfcd208400000000000000000000"
    assert first_cq.is_file() and first_cl.is_file()
    head = first_cl.read_bytes()[:36]
    assert int.from_bytes(head[28:36], "big") == 0  # the first unit's flat offset
    assert int.from_bytes(first_cq.read_bytes()[:8], "big") == 0


def test_commit_listeners_run_on_their_own_thread_within_a_byte_budget(
    offload_case: SidecarCase, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from tiered.offload import commit_notifier as dispatcher_module

    budget = 64 << 10  # a few batches of the test store
    monkeypatch.setattr(dispatcher_module, "NOTIFY_PENDING_BYTES", budget)
    cfg = offload_case.config(offload_case.store())
    threads: set[str] = set()
    waiting: list[int] = []
    sizes: list[int] = []
    told: list[tuple[tuple[str, int], int]] = []

    def slow(flat: Any, batch: Any, offsets: Any) -> None:
        threads.add(threading.current_thread().name)
        waiting.append(sidecar.dispatcher._notifier._pending)
        sizes.append(batch.nbytes)
        time.sleep(0.005)  # slower than the uploads: the workers must wait for the budget
        told.append(((flat.topic, flat.queue_id), batch.queue_offset))

    def broken(flat: Any, batch: Any, offsets: Any) -> None:
        raise RuntimeError("a listener's bug")

    inner = MemoryProvider()
    with Sidecar(cfg, inner) as sidecar:
        sidecar.dispatcher.add_commit_listener(broken)
        sidecar.dispatcher.add_commit_listener(slow)
        report = sidecar.dispatcher.run_pass(flush=True)
        told_at_return = len(told)
    assert not report.errors and report.messages
    assert threads == {"tiered-commit_0"}
    assert told_at_return == len(told)  # every batch was told before run_pass returned
    # within the budget, or one batch alone bigger than it
    assert max(waiting) <= max(budget, *sizes)
    assert max(waiting) > budget // 2  # the workers did get ahead of the listener
    for key in {k for k, _ in told}:
        offsets = [o for k, o in told if k == key]
        assert offsets == sorted(offsets)  # a queue's batches in queue order
    assert "commit listener" in caplog.text and "a listener's bug" in caplog.text
    check_tier(cfg, inner).assert_ok(report.messages)


def test_commit_listeners_hear_every_batch_once_after_both_uploads(
    offload_case: SidecarCase,
) -> None:
    cfg = offload_case.config(offload_case.store())
    inner = MemoryProvider()
    # 15 % of uploads fail: a batch is told only once both of its uploads landed
    faulty = FaultInjectingProvider(inner, FaultPlan(rate=0.15, operations={"append"}, seed=4))
    heard: dict[tuple[str, int], list[int]] = {}
    lock = threading.Lock()

    def listener(flat: Any, batch: Any, offsets: Any) -> None:
        key = (flat.topic, flat.queue_id)
        assert flat.commit_offset >= batch.queue_offset + len(batch)  # both files uploaded
        assert len(offsets) == len(batch)
        with lock:
            heard.setdefault(key, []).extend(
                range(batch.queue_offset, batch.queue_offset + len(batch))
            )

    with Sidecar(cfg, faulty) as sidecar:
        sidecar.dispatcher.add_commit_listener(listener)
        report = sidecar.dispatcher.run_pass(flush=True)
    assert report.failures > 0 and not report.errors
    check = check_tier(cfg, inner)
    assert check.problems == []
    for key, (first, end) in check.ranges.items():
        assert heard[key] == list(range(first, end))  # each message once, in order


def _objects(provider: MemoryProvider) -> dict[str, bytes]:
    """Every data object of the tier (commitlog and consumequeue segments), by key."""
    return {
        key: provider.read(key, 0, provider.size(key))
        for key in provider.list()
        if "/commitlog/" in key or "/consumequeue/" in key
    }


@pytest.mark.parametrize(("flush", "aged"), [(True, False), (False, False), (True, True)])
def test_rounds_of_several_batches_upload_what_single_batches_would(
    flush: bool, aged: bool, offload_case: SidecarCase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queue's follow-on batches (Plan.follow) are exactly the batches one-batch rounds plan:
    the same objects, byte for byte, through segment rolls of both flat files, held tails, and
    (``aged``) commitlog segments old enough to roll by time as soon as they hold 20 KiB."""
    import tiered.offload.dispatcher as dispatcher_module

    store = offload_case.store()
    tiers: dict[int, dict[str, bytes]] = {}
    rounds: dict[int, int] = {}
    segments: dict[int, tuple[int, int]] = {}
    for batches in (1, 3):
        monkeypatch.setattr(dispatcher_module, "ROUND_BATCHES", batches)
        cfg = offload_case.config(
            store,
            work=offload_case.work / f"work{batches}",
            tieredStoreGroupCommitTimeout=60_000,
            tieredStoreGroupCommitSize=16 << 10,  # rolls every few batches, not every one
            tieredStoreCommitLogMaxSize=64 << 10,
            tieredStoreConsumeQueueMaxSize=200 * 20,
            commitLogRollingInterval=1,
            commitLogRollingMinimumSize=20 << 10,
        )
        provider = MemoryProvider()
        with Sidecar(cfg, provider) as sidecar:
            if not flush:  # every message is young: a queue's last, partial batch is held
                sidecar.dispatcher.clock = lambda: 1
            if aged:  # two hours on: the first segments are old enough to roll by time
                sidecar.dispatcher.clock = lambda: now_ms() + 7_200_000
            report = sidecar.dispatcher.run_pass(flush=flush)
        assert not report.errors and not report.failures and report.messages
        rounds[batches] = report.rounds
        segments[batches] = segment_counts(cfg)
        tiers[batches] = _objects(provider)
        if flush:
            assert check_tier(cfg, provider).problems == []
        else:  # the last batch of each queue is held: less than a full one stays local
            assert 3000 - 6 * 100 < report.messages < 3000
    assert segments[1][0] > 3 and segments[1][1] > 1  # both flat files rolled
    assert tiers[3] == tiers[1]
    assert segments[3] == segments[1]
    if not aged:
        assert rounds[3] < rounds[1] * 0.7  # several batches of a queue per round


def test_staged_listeners_prepare_in_the_workers_and_put_in_queue_order(
    offload_case: SidecarCase, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = offload_case.config(offload_case.store())
    inner = MemoryProvider()
    # 15 % of uploads fail: a batch is prepared before its uploads (with its bytes, which are
    # freed once written) and put only once both of its uploads landed, retries included
    faulty = FaultInjectingProvider(inner, FaultPlan(rate=0.15, operations={"append"}, seed=7))
    prepared_in: set[str] = set()
    put_in: set[str] = set()
    heard: dict[tuple[str, int], list[int]] = {}

    def prepare(flat: Any, batch: Any, offsets: Any) -> Callable[[], None]:
        prepared_in.add(threading.current_thread().name.rsplit("_", 1)[0])
        assert len(batch.data) == batch.nbytes > 0  # its bytes, not yet freed
        key, first, count = (flat.topic, flat.queue_id), batch.queue_offset, len(batch)

        def put() -> None:
            put_in.add(threading.current_thread().name)
            assert flat.commit_offset >= first + count  # both files uploaded
            heard.setdefault(key, []).extend(range(first, first + count))

        return put

    def broken(flat: Any, batch: Any, offsets: Any) -> None:
        raise RuntimeError("a staged listener's bug")

    with Sidecar(cfg, faulty) as sidecar:
        sidecar.dispatcher.add_staged_listener(broken)
        sidecar.dispatcher.add_staged_listener(prepare)
        report = sidecar.dispatcher.run_pass(flush=True)
        told_at_return = sum(len(v) for v in heard.values())
    assert report.failures > 0 and not report.errors
    assert prepared_in == {"tiered-dispatch"} and put_in == {"tiered-commit_0"}
    check = check_tier(cfg, inner)
    assert check.problems == []
    assert told_at_return == check.messages  # every batch was put before run_pass returned
    for key, (first, end) in check.ranges.items():
        assert heard[key] == list(range(first, end))  # each message once, in queue order
    assert "a staged listener's bug" in caplog.text
