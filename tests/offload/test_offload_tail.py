"""A live tail's per-pass work: what a pass remembers from the last one, and that it changes
neither what is uploaded nor when.

A running dispatcher reads, per held queue, only the consumequeue units written since the last
pass; finds a queue's max offset without listing its directory; re-lists the consumequeue and
commitlog directories only when their mtimes moved; and rewrites its state file only when what
``status`` shows changed (or every :data:`~tiered.offload.dispatcher.STATE_REFRESH_S`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tiered.providers import MemoryProvider

from tiered.broker import consumequeue as cqmod
from tiered.broker import generator
from tiered.broker import read_only
from tiered.broker.generator import GenSpec
from tiered.config import TieredConfig
from tiered.core.sidecar import Sidecar
from tiered.errors import CorruptStoreFileError
from tiered.errors import OffsetNotInStoreError
from tiered.offload import dispatcher as dispatcher_mod
from tiered.source import listing as listing_mod
from tiered.source import local_source as local_mod
from tiered.source.batch_request import BatchRequest
from tiered.source.local_source import LocalSource
from tiered.testing.sample_tier import SidecarCase
from tiered.testing.tier_check import check_tier


def _settle(*paths: Path) -> None:
    """Date ``paths`` (and every directory below them) an hour back, as a store not touched for
    a while: the listings of a running sidecar are then reused until something changes."""
    past = time.time() - 3600
    for top in paths:
        for d in [top, *(p for p in top.rglob("*") if p.is_dir())]:
            os.utime(d, (past, past))


def _spec(small_spec: GenSpec, **changes: Any) -> GenSpec:
    return dataclasses.replace(small_spec, **changes)


def _holding(case: SidecarCase, store: Path) -> TieredConfig:
    """A config whose queues hold their messages (10 min, 1000 messages, 64 MiB per batch)."""
    return case.config(
        store,
        tieredStoreGroupCommitTimeout=600_000,
        tieredStoreGroupCommitCount=1000,
        tieredStoreGroupCommitSize=64 << 20,
    )


# --- the held queue ---------------------------------------------------------------------------


def test_a_held_queue_reads_only_the_units_written_since_the_last_pass(
    offload_case: SidecarCase, small_spec: GenSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = int(time.time() * 1000)
    spec = _spec(small_spec, topics=1, queues=1, messages=100, start_ms=now)
    store = offload_case.store(spec)
    cfg = _holding(offload_case, store)
    provider = MemoryProvider()
    reads: list[tuple[int, int]] = []  # units read from consumequeue files: (first, count)
    calls: list[int] = []  # read_units calls
    read_part = read_only.pread_exact

    def counted(fd: int, position: int, length: int) -> Any:
        reads.append((position // 20, length // 20))
        return read_part(fd, position, length)

    monkeypatch.setattr(local_mod, "pread_exact", counted)
    opens: list[str] = []  # consumequeue files the scans opened
    open_whole = read_only.open_sized

    def opened(path: str, file_size: int) -> int | None:
        opens.append(path)
        return open_whole(path, file_size)

    monkeypatch.setattr(local_mod, "open_sized", opened)
    with Sidecar(cfg, provider) as sidecar:
        local = sidecar.dispatcher.local
        read_units = local.read_units

        def called(topic: str, qid: int, start: int, count: int) -> Any:
            calls.append(start)
            return read_units(topic, qid, start, count)

        monkeypatch.setattr(local, "read_units", called)
        clock = [now + 1000]
        sidecar.dispatcher.clock = lambda: clock[0]
        assert sidecar.dispatcher.run_pass().messages == 0  # young and few: held
        first = list(calls)
        for i in range(3):
            offload_case.append(store, seed=50 + i, messages=100, start_ms=now + 10 * (i + 1))
            reads.clear()
            calls.clear()
            opens.clear()
            assert sidecar.dispatcher.run_pass().messages == 0
            assert len(opens) == 1, opens
            # only what came since the last pass: from the old end, not from the tier's end;
            # the units the max offset's scan read are not read again
            assert reads and all(start >= 100 * (i + 1) for start, _ in reads), reads
            assert calls == []
            # a probe then a chunk (of the file opened once); once the queue is live, one read
            assert len(reads) == (2 if i == 0 else 1), reads
        clock[0] = now + 610_000  # the first held message is old enough now: all of it goes
        calls.clear()
        report = sidecar.dispatcher.run_pass()
        assert report.messages == 400
        assert calls[0] == 0  # the batch that goes is read again, as the broker has it now
    assert first[0] == 0
    assert check_tier(cfg, provider).problems == []


def test_the_batch_that_goes_is_read_again_not_taken_from_the_held_units(
    offload_case: SidecarCase, small_spec: GenSpec
) -> None:
    now = int(time.time() * 1000)
    spec = _spec(small_spec, topics=1, queues=2, messages=300, start_ms=now)
    store = offload_case.store(spec)
    cfg = _holding(offload_case, store)
    provider = MemoryProvider()
    with Sidecar(cfg, provider) as sidecar:
        clock = [now + 1000]
        sidecar.dispatcher.clock = lambda: clock[0]
        assert sidecar.dispatcher.run_pass().messages == 0
        held = [st.held for st in sidecar.dispatcher.states.values() if st.held is not None]
        assert len(held) == 2
        for h in held:  # what a pass remembered is only for deciding; never uploaded
            h.sizes = np.ones(len(h.sizes), np.int64)
            h.first_offset = 1 << 40
        clock[0] = now + 610_000
        assert sidecar.dispatcher.run_pass().messages == 300
    assert check_tier(cfg, provider).problems == []


def test_the_hold_decisions_are_those_of_a_fresh_dispatcher_each_pass(
    offload_case: SidecarCase, small_spec: GenSpec, tmp_path: Path
) -> None:
    """One long-running dispatcher and a new one for every pass send the same batches."""
    now = int(time.time() * 1000)
    spec = _spec(small_spec, topics=1, queues=3, messages=90, start_ms=now)
    keys: dict[str, Any] = {
        "tieredStoreGroupCommitTimeout": 20_000,
        "tieredStoreGroupCommitCount": 120,
    }
    sent: dict[str, list[int]] = {"long": [], "fresh": []}
    for mode, counts in sent.items():
        case = SidecarCase(tmp_path / mode, small_spec, dict(offload_case.keys))
        store = case.store(spec)
        cfg = case.config(store, **keys)
        provider = MemoryProvider()
        sidecar = Sidecar(cfg, provider).open()
        try:
            for step in range(8):
                clock = now + 5_000 * (step + 1)
                if mode == "fresh" and step:
                    sidecar.close()
                    sidecar = Sidecar(cfg, provider).open()
                sidecar.dispatcher.clock = functools.partial(int, clock)
                counts.append(sidecar.dispatcher.run_pass().messages)
                case.append(store, seed=step + 1, messages=90, start_ms=clock)
            assert 0 < sum(counts) < 9 * 90
            counts.append(sidecar.dispatcher.run_pass(flush=True).messages)
        finally:
            sidecar.close()
        check_tier(cfg, provider).assert_ok(9 * 90)
    assert sent["long"] == sent["fresh"]


# --- max offsets without listings -------------------------------------------------------------


def test_max_offset_follows_a_queue_across_files_without_listing_each_time(
    offload_case: SidecarCase, small_spec: GenSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _spec(small_spec, topics=1, queues=2, messages=150)  # 400-unit consumequeue files
    store = offload_case.store(spec)
    cfg = offload_case.config(store)
    local = LocalSource(cfg)
    listings = [0]
    listed = cqmod.list_offset_files

    def counted(*args: Any, **kwargs: Any) -> Any:
        listings[0] += 1
        return listed(*args, **kwargs)

    monkeypatch.setattr(cqmod, "list_offset_files", counted)
    queues = local.queues()
    for i in range(12):  # 12 x ~100 units per queue: three files each
        for topic, qid in queues:
            truth = cqmod.ConsumeQueue(store / "consumequeue" / topic / str(qid), 400 * 20)
            before = listings[0]
            got = local.max_offset(topic, qid)
            assert got == truth.max_offset()
            assert listings[0] - before <= 2  # the answer's own listing at most, then the truth
        offload_case.append(store, seed=10 + i, messages=200)
    for topic, qid in queues:
        end = local.max_offset(topic, qid)
        listings[0] = 0
        assert local.max_offset(topic, qid) == end
        if end % 400:  # in the middle of a file: read on from the last answer, no listing
            assert listings[0] == 0


def test_the_units_a_max_offset_scan_found_are_those_a_read_returns(
    offload_case: SidecarCase, small_spec: GenSpec
) -> None:
    spec = _spec(small_spec, topics=1, queues=2, messages=150)  # 400-unit consumequeue files
    store = offload_case.store(spec)
    local = LocalSource(offload_case.config(store))
    queues = local.queues()
    ends = {q: local.max_offset(*q) for q in queues}
    served = 0
    for i, more in enumerate([37, 200, 1, 120, 600, 2, 90, 300, 45, 5, 260, 80]):
        offload_case.append(store, seed=10 + i, messages=more)  # across files too
        for q in queues:
            before, end = ends[q], local.max_offset(*q)
            ends[q] = end
            assert (
                end
                == cqmod.ConsumeQueue(store / "consumequeue" / q[0] / str(q[1]), 8000).max_offset()
            )
            tail = local.tail_units(*q, before, end - before)
            if tail is not None:
                served += 1
                assert tail.tobytes() == local.read_units(*q, before, end - before).tobytes()
            assert local.tail_units(*q, before - 1, 2) is None  # only what the scan read
            assert local.tail_units(*q, before, end - before + 1) is None
    assert served >= len(queues) * 8  # not the scans that crossed into a new file
    for q in queues:  # nothing new: nothing kept
        assert local.max_offset(*q) == ends[q]
        assert local.tail_units(*q, ends[q] - 1, 1) is None


def test_max_offsets_scanned_ahead_are_those_each_queue_finds_alone(
    offload_case: SidecarCase, small_spec: GenSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass's moved queues, read with one call of the kernel, answer as each queue's own scan
    does, with the same units kept; an odd queue (its file gone or cut) is left to that scan."""
    spec = _spec(small_spec, topics=8, queues=8, messages=400)  # 64 queues, 400-unit files
    store = offload_case.store(spec)
    cfg = offload_case.config(store)
    alone, ahead = LocalSource(cfg), LocalSource(cfg)
    queues = alone.queues()
    assert len(queues) >= local_mod.SCAN_AHEAD_QUEUES
    scans = [0]
    scan = ahead._scan_from

    def counted(*args: Any) -> Any:
        scans[0] += 1
        return scan(*args)

    monkeypatch.setattr(ahead, "_scan_from", counted)
    ends = {q: alone.max_offset(*q) for q in queues}
    with ahead.scanned_ahead(queues):  # no answer yet: each queue lists its directory
        assert {q: ahead.max_offset(*q) for q in queues} == ends
    rng = np.random.default_rng(11)
    for i, more in enumerate([0, 1, 40, 3000, 7, 30000, 2, 150]):
        if more:
            offload_case.append(store, seed=20 + i, messages=more)  # across files too
        if i == 7:  # odd queues: a file gone, a file cut short (after the last append)
            gone, cut = queues[3], queues[4]
            for f in (store / "consumequeue" / gone[0] / str(gone[1])).iterdir():
                f.unlink()
            last = sorted((store / "consumequeue" / cut[0] / str(cut[1])).iterdir())[-1]
            os.truncate(last, last.stat().st_size - 20)
        scans[0] = 0
        order = list(rng.permutation(len(queues)))
        with ahead.scanned_ahead(queues):
            got: dict[tuple[str, int], int | None] = {}
            for k in order:
                topic, qid = q = queues[k]
                try:
                    end = got[q] = ahead.max_offset(topic, qid)
                except (CorruptStoreFileError, OffsetNotInStoreError):
                    got[q] = None
                    continue
                for start, count in [(ends[q], end - ends[q]), (ends[q], 3), (ends[q] - 1, 2)]:
                    kept = ahead.tail_units(topic, qid, start, count)
                    if kept is not None:
                        truth = ahead.read_units(topic, qid, start, count)
                        assert kept.tobytes() == truth.tobytes(), (q, start, count)
                ahead.drop_tail(topic, qid)
        want: dict[tuple[str, int], int | None] = {}
        for q in queues:
            try:
                want[q] = alone.max_offset(*q)
            except (CorruptStoreFileError, OffsetNotInStoreError):
                want[q] = None
        assert got == want, i
        # one call of the kernel for all but the queues at a file's start or end, or odd
        at_edge = sum(1 for q in queues if ends[q] % 400 == 0 or (got[q] or 0) - ends[q] >= 400)
        assert scans[0] <= at_edge + 2, (i, scans[0], at_edge)
        ends = {q: v if v is not None else ends[q] for q, v in got.items()}
    assert ahead._scanned == {}  # nothing answered twice, nothing kept past the block


def test_max_offsets_learned_with_the_bounds_are_not_read_again(
    offload_case: SidecarCase, small_spec: GenSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """New queues' max offsets read by ``learn_bounds`` answer the ``scanned_ahead`` block that
    follows (the kernel is not asked for them again), once: a later block reads anew."""
    spec = _spec(small_spec, topics=8, queues=8, messages=400)
    store = offload_case.store(spec)
    cfg = offload_case.config(store)
    alone, ahead = LocalSource(cfg), LocalSource(cfg)
    queues = alone.queues()
    asked: list[list[tuple[str, int]]] = []
    scan_many = ahead._scan_many

    def counted(keys: Any, starts: Any) -> Any:
        asked.append(list(keys))
        return scan_many(keys, starts)

    monkeypatch.setattr(ahead, "_scan_many", counted)
    monkeypatch.setattr(local_mod, "SCAN_AHEAD_QUEUES", 8)
    ahead.learn_bounds(queues[:40])
    with ahead.scanned_ahead(queues):
        got = {q: ahead.max_offset(*q) for q in queues}
    assert got == {q: alone.max_offset(*q) for q in queues}
    assert asked == [queues[40:]]  # the others' from the bounds
    offload_case.append(store, seed=5, messages=300)
    asked.clear()
    with ahead.scanned_ahead(queues):  # nothing learned since: every queue read anew
        got = {q: ahead.max_offset(*q) for q in queues}
    assert got == {q: alone.max_offset(*q) for q in queues}
    assert asked == [queues]
    assert ahead._scanned == {} and ahead._learned == {}


def test_a_scan_ahead_from_the_readers_offset_brings_the_units_it_reads(
    offload_case: SidecarCase, small_spec: GenSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``starts``, a queue whose reader is at most ``SCAN_AHEAD_KEPT_UNITS`` units before
    its last max offset, in the same file, is read on from the reader's offset: the block's
    ``tail_units`` answers the reader's units (the same as ``read_units``), so it reads none of
    its own; a reader further behind gets them read as before. And the bounds ``learn_bounds``
    reads tell that the queue is there: ``min_offset`` looks at no directory."""
    spec = _spec(small_spec, topics=8, queues=8, messages=400)
    store = offload_case.store(spec)
    cfg = offload_case.config(store)
    near, far, alone = LocalSource(cfg), LocalSource(cfg), LocalSource(cfg)
    queues = alone.queues()
    mins = [alone.min_offset(*q) for q in queues]
    monkeypatch.setattr(local_mod, "SCAN_AHEAD_QUEUES", 8)
    looked: list[str] = []
    isdir = os.path.isdir

    def counted(path: Any) -> bool:
        looked.append(path)
        return isdir(path)

    monkeypatch.setattr(os.path, "isdir", counted)
    for local in (near, far):
        local.learn_bounds(queues)
        with local.scanned_ahead([]):  # (what it learned answers one block: not this test's)
            pass
    assert [near.min_offset(*q) for q in queues] == mins
    assert looked == []
    before = {q: near._max_hint[q] for q in queues}
    offload_case.append(store, seed=5, messages=30)  # (some queues get none)
    starts = [max(0, before[q] - 4) for q in queues]
    served = 0
    for local, kept in ((near, local_mod.SCAN_AHEAD_KEPT_UNITS), (far, 2)):
        monkeypatch.setattr(local_mod, "SCAN_AHEAD_KEPT_UNITS", kept)
        with local.scanned_ahead(queues, starts):
            for q, start in zip(queues, starts, strict=True):
                end = local.max_offset(*q)
                assert end == alone.max_offset(*q)
                assert (q in local._live) == (end > before[q]), q  # new units since its answer
                tail = local.tail_units(*q, start, end - start)
                if before[q] - start > kept:
                    assert tail is None, q  # read on from its last answer, as before
                elif 0 < end - start <= kept:
                    assert tail is not None, q
                    served += 1
                    assert tail.tobytes() == alone.read_units(*q, start, end - start).tobytes()
                local.drop_tail(*q)
    assert served >= len(queues) // 2
    assert any(before[q] - start > 2 for q, start in zip(queues, starts, strict=True))


def test_max_offset_of_a_queue_whose_files_were_replaced(
    offload_case: SidecarCase, small_spec: GenSpec
) -> None:
    spec = _spec(small_spec, topics=1, queues=1, messages=300)
    store = offload_case.store(spec)
    local = LocalSource(offload_case.config(store))
    (topic, qid) = local.queues()[0]
    assert local.max_offset(topic, qid) == 300
    queue = store / "consumequeue" / topic / str(qid)
    for f in queue.iterdir():  # the topic deleted and written again: one short queue
        f.unlink()
    units = cqmod.encode_units([0, 100], [100, 100], [0, 0])
    (queue / f"{0:020d}").write_bytes(units + bytes(400 * 20 - len(units)))
    assert local.max_offset(topic, qid) == 300  # the hint: never below the last answer
    assert cqmod.ConsumeQueue(queue, 400 * 20).max_offset(hint=300) == 300  # as the listing's


def test_units_read_by_file_name_are_those_of_the_listing(
    offload_case: SidecarCase, small_spec: GenSpec
) -> None:
    store = offload_case.store(_spec(small_spec, topics=1, queues=2, messages=1900))
    local = LocalSource(offload_case.config(store))
    rng = np.random.default_rng(5)
    for topic, qid in local.queues():
        queue = store / "consumequeue" / topic / str(qid)
        truth = cqmod.ConsumeQueue(queue, 400 * 20)
        end = truth.max_offset()
        assert end > 800  # three files
        starts, counts = rng.integers(0, end + 5, 40), rng.integers(0, 500, 40)
        cases = [(0, 1), (399, 1), (399, 2), (0, 400), (end - 3, 10), (end, 5)]
        cases += [(int(a), int(b)) for a, b in zip(starts, counts, strict=True)]
        for start, count in cases:
            got = local.read_units(topic, qid, start, count)
            assert got.tobytes() == truth.read_units(start, count).tobytes(), (start, count)
        first = sorted(queue.iterdir())[0]
        first.unlink()  # the broker deleted it: an error, as the listing says
        with pytest.raises(OffsetNotInStoreError):
            local.read_units(topic, qid, 10, 5)
        with pytest.raises(OffsetNotInStoreError):
            truth.read_units(10, 5)
        last = sorted(queue.iterdir())[-1]
        os.truncate(last, last.stat().st_size - 20)  # not the configured size any more
        with pytest.raises(CorruptStoreFileError):
            local.read_units(topic, qid, int(last.name) // 20, 1)


# --- listings reused while directories do not change -----------------------------------------


def test_queues_are_listed_again_only_when_a_directory_changed(
    offload_case: SidecarCase, small_spec: GenSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = offload_case.store(_spec(small_spec, topics=2, queues=2, messages=40))
    local = LocalSource(offload_case.config(store))
    calls = [0]
    list_queues = cqmod.list_queues

    def counted(root: Any) -> Any:
        calls[0] += 1
        return list_queues(root)

    monkeypatch.setattr(cqmod, "list_queues", counted)
    cq = store / "consumequeue"
    _settle(cq)
    first = local.queues()
    assert len(first) == 4 and calls == [1]
    assert local.queues() == first and calls == [1]  # nothing moved: the listing holds
    (cq / "GenTopic0" / "7").mkdir()  # a new queue of a known topic
    assert ("GenTopic0", 7) in local.queues() and calls == [2]
    _settle(cq)
    local.queues()
    (cq / "NewTopic").mkdir()  # a topic directory first, its queue a moment later
    assert local.queues() == sorted([*first, ("GenTopic0", 7)])
    _settle(cq)
    local.queues()
    listed = calls[0]
    (cq / "NewTopic" / "0").mkdir()
    assert ("NewTopic", 0) in local.queues() and calls[0] == listed + 1
    _settle(cq)
    local.queues()
    for f in (cq / "GenTopic1" / "1").iterdir():
        f.unlink()
    (cq / "GenTopic1" / "1").rmdir()
    assert ("GenTopic1", 1) not in local.queues()


def test_a_listing_made_just_after_a_change_is_not_reused(
    offload_case: SidecarCase, small_spec: GenSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """File times are coarse: a directory changed within the last moments is listed again at
    every look, so an entry added in the same clock tick is never missed."""
    store = offload_case.store(_spec(small_spec, topics=1, queues=1, messages=10))
    local = LocalSource(offload_case.config(store))
    calls = [0]
    list_queues = cqmod.list_queues

    def counted(root: Any) -> Any:
        calls[0] += 1
        return list_queues(root)

    monkeypatch.setattr(cqmod, "list_queues", counted)
    local.queues()
    local.queues()
    assert calls == [2]
    monkeypatch.setattr(listing_mod, "SETTLED_NS", -(10**12))  # everything counts as settled
    local.queues()
    local.queues()
    assert calls == [3]


def test_the_commitlog_is_listed_again_when_a_file_came_went_or_grew(
    offload_case: SidecarCase, small_spec: GenSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = offload_case.store(_spec(small_spec, topics=1, queues=1, messages=2000))
    cfg = offload_case.config(store)
    local = LocalSource(cfg)
    assert len(local.commitlog.files) > 2
    calls = [0]
    refresh = local.commitlog.refresh

    def counted() -> None:
        calls[0] += 1
        refresh()

    monkeypatch.setattr(local.commitlog, "refresh", counted)
    _settle(store / "commitlog")
    local.refresh()
    local.refresh()
    assert calls == [1]
    files = sorted((store / "commitlog").iterdir())
    size = files[-1].stat().st_size
    os.truncate(files[-1], size + 20)  # a last file still being extended
    local.refresh()
    assert calls == [2]
    os.truncate(files[-1], size)
    local.refresh()
    assert calls == [3]
    _settle(store / "commitlog")
    local.refresh()
    files[0].unlink()  # the broker deleted its oldest file
    local.refresh()
    assert calls == [5]
    assert local.commitlog.min_offset == int(files[1].name)
    _settle(store / "commitlog")
    local.refresh()
    offload_case.append(store, seed=3, messages=2000)  # new files
    local.refresh()
    assert local.commitlog.files[-1].path.name == sorted(os.listdir(store / "commitlog"))[-1]


def test_units_in_a_file_the_broker_rolled_to_after_the_listing_are_read(
    offload_case: SidecarCase, small_spec: GenSpec
) -> None:
    """A round lists the commitlog once, then reads the units its queues hold by then: units in
    a file the broker created since are read (the files are listed again), not taken for units
    whose file the broker deleted."""
    store = offload_case.store(_spec(small_spec, topics=1, queues=1, messages=200))
    local = LocalSource(offload_case.config(store))
    listed = local.commitlog.files
    offload_case.append(store, seed=3, messages=2000)  # rolls to new files
    assert len(os.listdir(store / "commitlog")) > len(listed)
    assert local.commitlog.files == listed  # nothing listed them yet
    topic, qid = local.queues()[0]
    units = local.read_units(topic, qid, 0, 2200)
    assert int(units["offset"][-1]) >= listed[-1].end
    batches, _ = local.read_batches([BatchRequest(topic, qid, 0, units)])
    assert not isinstance(batches[0], Exception), batches[0]
    assert len(batches[0]) == 2200
    assert local.commitlog.files[-1].path.name == sorted(os.listdir(store / "commitlog"))[-1]


def test_a_running_dispatcher_on_a_settled_store_finds_new_queues_and_files(
    offload_case: SidecarCase, small_spec: GenSpec
) -> None:
    store = offload_case.store(_spec(small_spec, topics=1, queues=2, messages=300))
    cfg = offload_case.config(store)
    provider = MemoryProvider()
    total = 300
    with Sidecar(cfg, provider) as sidecar:
        assert sidecar.dispatcher.run_pass(flush=True).messages == 300
        for i in range(3):
            _settle(store / "consumequeue", store / "commitlog")
            assert sidecar.dispatcher.run_pass(flush=True).messages == 0
            more = dataclasses.replace(small_spec, topics=2 + i, queues=2, messages=400)
            generator.generate_store(store, dataclasses.replace(more, seed=9 + i, append=True))
            total += 400
            assert sidecar.dispatcher.run_pass(flush=True).messages == 400
    check_tier(cfg, provider).assert_ok(total)


def test_a_sidecar_holds_a_bounded_number_of_consumequeue_handles(
    offload_case: SidecarCase, small_spec: GenSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory at rest does not grow with a handle per queue: the handles used last are kept."""
    monkeypatch.setattr(local_mod, "CQ_HANDLES", 3)
    store = offload_case.store(_spec(small_spec, topics=3, queues=4, messages=600))
    cfg = offload_case.config(store)
    provider = MemoryProvider()
    with Sidecar(cfg, provider) as sidecar:
        assert sidecar.dispatcher.run_pass(flush=True).messages == 600
        local = sidecar.dispatcher.local
        assert all(local.max_offset(f"GenTopic{t}", q) > 0 for t in range(3) for q in range(4))
        assert len(local._queues) == 3
        more = dataclasses.replace(small_spec, topics=3, queues=4, messages=300, seed=4)
        generator.generate_store(store, dataclasses.replace(more, append=True))
        assert sidecar.dispatcher.run_pass(flush=True).messages == 300
        assert len(local._queues) <= 3
    check_tier(cfg, provider).assert_ok(900)


def test_a_pass_that_committed_nothing_does_not_wake_the_commit_thread(
    offload_case: SidecarCase, small_spec: GenSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = offload_case.store(_spec(small_spec, topics=1, queues=2, messages=300))
    cfg = offload_case.config(store)
    with Sidecar(cfg, MemoryProvider()) as sidecar:
        d, index = sidecar.dispatcher, sidecar.index
        assert index is not None
        assert d.run_pass(flush=True).messages == 300
        pool = d._notifier._pool
        submit = pool.submit
        handed: list[object] = []

        def counted(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            handed.append(fn)
            return submit(fn, *args, **kwargs)

        monkeypatch.setattr(pool, "submit", counted)
        for _ in range(3):
            assert d.run_pass(flush=True).messages == 0
        assert handed == []
        told: list[int] = []

        def slow(flat: Any, batch: Any, offsets: Any) -> None:
            time.sleep(0.05)
            told.append(len(batch))

        d.add_commit_listener(slow)
        offload_case.append(store, seed=7, messages=500)
        local = LocalSource(cfg)
        report = d.run_pass(flush=True)
        assert report.messages == 500 and handed
        # every batch of the pass was told before it returned: its keys are indexed
        assert sum(told) == 500
        assert {q: index.progress.get(*q) for q in local.queues()} == {
            q: local.max_offset(*q) for q in local.queues()
        }


# --- the state file ---------------------------------------------------------------------------


def _state_stamp(cfg: TieredConfig) -> tuple[int, int]:
    st = (cfg.tiered_data_dir / "status" / "dispatcher.json").stat()
    return st.st_ino, st.st_mtime_ns


def test_the_state_file_is_written_when_status_would_show_a_change(
    offload_case: SidecarCase, small_spec: GenSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = offload_case.store(_spec(small_spec, topics=1, queues=2, messages=200))
    cfg = offload_case.config(store)
    with Sidecar(cfg, MemoryProvider()) as sidecar:
        d = sidecar.dispatcher
        assert d.run_pass(flush=True).messages == 200
        written = _state_stamp(cfg)
        for _ in range(3):  # idle passes: nothing status shows changed
            d.run_pass()
        assert _state_stamp(cfg) == written
        offload_case.append(store, seed=4, messages=50)
        assert d.run_pass(flush=True).messages == 50  # an upload: written
        assert _state_stamp(cfg) != written
        written = _state_stamp(cfg)
        monkeypatch.setattr(dispatcher_mod, "STATE_IDLE_REFRESH_S", 0.0)  # now old enough
        d.run_pass()
        assert _state_stamp(cfg) != written
        monkeypatch.setattr(dispatcher_mod, "STATE_IDLE_REFRESH_S", 3600.0)
        written = _state_stamp(cfg)
        d.run_pass()
        rounds = d.rounds
    assert _state_stamp(cfg) != written  # a pass since the last write: written at close
    snapshot = d.state_file.load() if d.state_file else None
    assert snapshot is not None and snapshot.rounds == rounds
    assert all(q.last_upload_ms > 0 for q in snapshot.queues.values())


def test_queues_asked_at_once_answer_as_each_alone(
    offload_case: SidecarCase, small_spec: GenSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``has_queues`` (the moved queues of a pass, asked of the kernel at once) answers what
    ``has_queue`` answers of each: present, absent, a file where the directory should be, and
    a queue removed since it was last seen once that answer is stale."""
    store = offload_case.store(_spec(small_spec, topics=2, queues=2, messages=40))
    cq = store / "consumequeue"
    (cq / "GenTopic0" / "5").write_bytes(b"")  # a file, not a queue's directory
    keys = [(f"GenTopic{t}", q) for t in range(3) for q in range(40)]
    assert len(keys) >= local_mod.SCAN_AHEAD_QUEUES
    bulk, alone = LocalSource(offload_case.config(store)), LocalSource(offload_case.config(store))
    want = [alone.has_queue(*k) for k in keys]
    assert sum(want) == 4
    assert bulk.has_queues(keys) == want
    assert bulk.has_queues(keys) == want  # the present ones remembered
    for f in (cq / "GenTopic1" / "1").iterdir():
        f.unlink()
    (cq / "GenTopic1" / "1").rmdir()
    monkeypatch.setattr(local_mod, "HAS_QUEUE_TTL_S", 0.0)
    gone = LocalSource(offload_case.config(store))
    gone.has_queues(keys)
    time.sleep(0.01)
    assert gone.has_queues(keys) == [
        k != ("GenTopic1", 1) and w for k, w in zip(keys, want, strict=True)
    ]
