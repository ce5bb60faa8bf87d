"""The commitlog feed (which queues moved, from the commitlog's new bytes) and the passes of
``run`` that look only at those queues: against the scanner on real broker files and generated
stores, across file boundaries, torn and deleted files; nothing missed, nothing looked at twice.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from tiered import _kernel
from tiered.broker import consumequeue as cqmod
from tiered.broker.commitlog import CommitLog
from tiered.broker.commitlog import scan_file
from tiered.broker.generator import GenSpec
from tiered.config import load_config
from tiered.core.sidecar import Sidecar
from tiered.offload.commitlog_feed import STUCK_S
from tiered.offload.commitlog_feed import CommitlogFeed
from tiered.source.local_source import LocalSource
from tiered.testing.sample_tier import SidecarCase
from tiered.testing.tier_check import check_tier

FILE = 256 << 10  # rolling_spec's commitlog file size


def queue_ends(store: Path) -> dict[tuple[str, int], int]:
    """Every queue's max offset, from its consumequeue."""
    out = {}
    for topic, qid in cqmod.list_queues(store / "consumequeue"):
        cq = cqmod.ConsumeQueue.for_queue(store / "consumequeue", topic, qid, file_size=400 * 20)
        out[(topic, qid)] = cq.max_offset()
    return out


def test_the_walk_names_what_the_scanner_reads_in_real_broker_files(real_data: Path) -> None:
    files = sorted(real_data.rglob("commitlog/*"))
    assert files
    for f in files:
        data = f.read_bytes()
        consumed, messages, stop, queues = _kernel.walk_commitlog(data)
        items = list(scan_file(f))
        whole = [it for it in items if it.kind == "message"]
        ended = stop in ("blank", "unwritten") or (stop == "more" and len(data) < 8)
        assert messages == len(whole) and ended, (f, stop, len(data))
        assert consumed == (whole[-1].position + whole[-1].size if whole else 0)
        want: dict[tuple[bytes, int], int] = {}
        first: dict[tuple[bytes, int], tuple[int, int]] = {}
        for it in whole:
            assert it.message is not None
            key = (it.message.topic.encode(), it.message.queue_id)
            want[key] = max(want.get(key, 0), it.message.queue_offset + 1)
            first.setdefault(key, (it.position, it.message.store_timestamp))
        assert {(t, q): o for t, q, o, _, _ in queues} == want
        assert {(t, q): (at, ts) for t, q, _, at, ts in queues} == first


def test_a_poll_names_the_queues_appended_to_across_files(offload_case: SidecarCase) -> None:
    store = offload_case.store()
    log = CommitLog(store / "commitlog", FILE)
    before = queue_ends(store)
    end = max(f.end for f in log.files)
    last = log.files[-1]
    items = [it for it in scan_file(last.path) if it.kind == "message"]
    feed = CommitlogFeed(log)
    assert feed.poll() is None  # not started: the caller looks at every queue
    feed.start(items[-1].offset + items[-1].size)
    assert feed.poll() is not None and feed.poll().queues == {}  # type: ignore[union-attr]
    offload_case.append(store, seed=9, messages=1500)  # rolls commitlog files
    log.refresh()
    assert max(f.end for f in log.files) > end + FILE
    moved = feed.poll()
    assert moved is not None and moved.messages == 1500
    after = queue_ends(store)
    assert moved.queues == {k: v for k, v in after.items() if v != before.get(k)}
    again = feed.poll()
    assert again is not None and (again.messages, again.queues) == (0, {})


def test_a_poll_hands_each_moved_queue_s_first_store_time_to_the_pass(
    offload_case: SidecarCase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store time a pass needs of a queue that starts holding a batch -- its first new
    message's -- comes with the poll, as the commitlog has it, and is not read again."""
    store = offload_case.store()
    cfg = offload_case.config(store)
    local = LocalSource(cfg)
    before = queue_ends(store)
    feed = CommitlogFeed(local.commitlog)
    last = [it for it in scan_file(local.commitlog.files[-1].path) if it.kind == "message"][-1]
    feed.start(last.offset + last.size)
    offload_case.append(store, seed=9, messages=1500)  # across files
    local.commitlog.refresh()
    fresh = LocalSource(cfg)
    moved = feed.poll()
    assert moved is not None and moved.queues
    assert moved.first_offsets == sorted(moved.first_offsets)
    local.remember_store_times(moved.first_offsets, moved.first_times)

    def no_read(*args: object) -> bytes:
        raise AssertionError("a store time the feed walked was read again")

    monkeypatch.setattr(local.commitlog, "read", no_read)
    for at, stamp in zip(moved.first_offsets, moved.first_times, strict=True):
        assert local.store_time_at(at, 100) == stamp == fresh.store_time_at(at, 100)
    for topic, qid in moved.queues:  # the unit a held batch starts with
        (unit,) = local.read_units(topic, qid, before.get((topic, qid), 0), 1)
        assert local.store_time_at(int(unit["offset"]), int(unit["size"])) is not None
    monkeypatch.undo()
    local.remember_store_times((), ())
    other = moved.first_offsets[0] + 1  # not a message's start: read (and None) as before
    assert local.store_time_at(other, 100) == fresh.store_time_at(other, 100)


def test_a_torn_message_waits_then_the_feed_gives_up(offload_case: SidecarCase) -> None:
    store = offload_case.store()
    log = CommitLog(store / "commitlog", FILE)
    last = log.files[-1]
    items = [it for it in scan_file(last.path) if it.kind == "message"]
    end = items[-1].offset + items[-1].size
    with last.path.open("r+b") as f:  # a TOTALSIZE and magic, then nothing: a write under way
        f.seek(end - last.base)
        f.write((300).to_bytes(4, "big") + (-626843481).to_bytes(4, "big", signed=True))
    clock = [0.0]
    feed = CommitlogFeed(log, clock=lambda: clock[0])
    feed.start(items[-2].offset)
    moved = feed.poll()
    assert moved is not None and moved.messages == 2 and feed.position == end
    clock[0] += STUCK_S / 2
    assert feed.poll() is not None and feed.position == end
    clock[0] += STUCK_S
    assert feed.poll() is None and feed.position is None


def test_the_feed_gives_up_when_the_broker_deleted_its_file(offload_case: SidecarCase) -> None:
    store = offload_case.store()
    log = CommitLog(store / "commitlog", FILE)
    feed = CommitlogFeed(log)
    feed.start(log.files[0].base)
    log.files[0].path.unlink()
    assert feed.poll() is None


def test_follow_passes_look_only_at_moved_queues_and_miss_nothing(
    offload_case: SidecarCase,
) -> None:
    """``run``'s passes: the first looks at every queue and starts the feed; then only the
    queues appended to (and a slice of the rest) are looked at; a topic created meanwhile is
    picked up; the tier ends up holding every message exactly once."""
    spec = dataclasses.replace(offload_case.spec, topics=4, queues=4)
    store = offload_case.store(spec)
    cfg = offload_case.config(store, "posix", tieredStoreQueueScanIntervalMs=3_600_000)
    with Sidecar(cfg) as car:
        d = car.dispatcher
        first = d.run_pass(flush=True, follow=True)
        assert first.looked_at == 16 and first.messages == spec.messages
        assert d.pass_queues is not None and d.pass_queues.feed.position is not None
        idle = d.run_pass(flush=True, follow=True)
        assert idle.messages == 0 and idle.looked_at <= 1  # a one-queue slice of the scan
        offload_case.append(store, topics=2, queues=2, messages=300, seed=11)
        tail = d.run_pass(flush=True, follow=True)
        assert tail.messages == 300 and tail.looked_at <= 4 + 1
        offload_case.append(store, topics=6, messages=600, seed=12)  # topics 4, 5 are new
        grown = d.run_pass(flush=True, follow=True)
        assert grown.messages == 600 and ("GenTopic5", 3) in grown.queues
    check_tier(cfg, car.provider).assert_ok(spec.messages + 900)


def test_the_scan_goes_over_what_the_full_pass_listed_without_listing_again(
    offload_case: SidecarCase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a pass over every queue, the safety net's slices (a quarter of the queues a pass,
    here) go over the queues that pass listed, from the first: one cycle looks at each queue
    once and lists no queue directory again (at 16,000 queues, a stat of each)."""
    spec = dataclasses.replace(offload_case.spec, topics=4, queues=4)
    store = offload_case.store(spec)
    cfg = offload_case.config(
        store, "posix", tieredStoreQueueScanIntervalMs=4_000, tieredStoreDispatchIntervalMs=1_000
    )
    with Sidecar(cfg) as car:
        d = car.dispatcher
        assert d.run_pass(flush=True, follow=True).looked_at == 16
        listings: list[int] = []
        listed = d.local.queues

        def counted() -> list[tuple[str, int]]:
            listings.append(1)
            return listed()

        monkeypatch.setattr(d.local, "queues", counted)
        seen: list[tuple[str, int]] = []
        queues = d.pass_queues
        assert queues is not None
        for _ in range(4):
            chosen = queues.choose()
            assert chosen is not None and len(chosen) == 4
            seen += chosen
            queues.settle({}, listed=None)
        assert listings == [] and sorted(seen) == sorted(d.listed) and len(d.listed) == 16
        queues.choose()  # the cycle is over: the next lists again
        assert listings == [1]


@pytest.mark.parametrize("interval", [0, 3_600_000])
def test_a_full_scan_and_a_following_pass_offload_the_same(
    offload_case: SidecarCase, interval: int, small_spec: GenSpec
) -> None:
    """With the feed (and without: ``0``), a pass after an append sends from exactly the queues
    whose consumequeues grew."""
    store = offload_case.store()
    cfg = offload_case.config(store, "posix", tieredStoreQueueScanIntervalMs=interval)
    with Sidecar(cfg) as car:
        car.dispatcher.run_pass(flush=True, follow=True)
        before = queue_ends(store)
        offload_case.append(store, seed=13, messages=700)
        report = car.dispatcher.run_pass(flush=True, follow=True)
        grown = {k for k, v in queue_ends(store).items() if v != before.get(k)}
        assert report.messages == 700 and report.queues == grown
    check_tier(cfg, car.provider).assert_ok(small_spec.messages + 700)


def test_a_sidecar_started_beside_an_empty_store_takes_the_sizes_from_the_first_files(
    offload_case: SidecarCase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No broker.conf and no mappedFileSize* keys: the sizes assumed at start (the defaults)
    give way to the files' once a new broker writes them (it reported "not the configured
    size" for ever)."""
    monkeypatch.setattr("tiered.source.local_source.RESIZE_S", 0.0)
    store = tmp_path / "new-broker"
    (store / "commitlog").mkdir(parents=True)
    (store / "consumequeue").mkdir()
    cfg = load_config([write_keys(tmp_path / "tiered.conf", store, tmp_path)])
    assert "mapped_file_size_consume_queue_bytes" not in cfg.model_fields_set
    with Sidecar(cfg) as car:
        empty = car.dispatcher.run_pass(flush=True, follow=True)
        assert empty.messages == 0 and not empty.errors
        written = offload_case.store(name="written")  # 400-unit consumequeue files, 256 KiB logs
        shutil.copytree(written, store, dirs_exist_ok=True)
        report = car.dispatcher.run_pass(flush=True, follow=True)
        assert not report.errors and report.messages == offload_case.spec.messages
        assert car.dispatcher.pass_queues is not None
        assert car.dispatcher.pass_queues.feed.position is not None
    sized = write_keys(tmp_path / "sized.conf", store, tmp_path)  # the checker reads by size
    sized.write_text(sized.read_text() + f"mappedFileSizeConsumeQueue={400 * 20}\n"
                     f"mappedFileSizeCommitLog={FILE}\n")  # fmt: skip
    check_tier(load_config([sized]), car.provider).assert_ok(offload_case.spec.messages)


def write_keys(path: Path, store: Path, work: Path) -> Path:
    path.write_text(
        f"storePathRootDir={store}\ntieredDataDir={work / 'data'}\n"
        f"tieredBackendServiceProvider=posix\ntieredStoreFilePath={work / 'tier'}\n"
    )
    return path
