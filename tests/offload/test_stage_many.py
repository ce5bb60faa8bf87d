"""A wide round's wave staged at once (:func:`~tiered.offload.offload_step.stage_many`: every
batch checked by one call of the kernel and appended with one more) stages exactly what staging
each plan alone (:func:`~tiered.offload.offload_step.stage`) does: twin sidecars over one store,
one staging each way, compared batch by batch and byte by byte (the rewritten messages, the
pending units, the offsets), a corrupt message and a batch that does not continue its queue
among them."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from tiered.broker.unit_fields import check_batch
from tiered.broker.unit_fields import check_batches
from tiered.core.sidecar import Sidecar
from tiered.file.flat_message_file import FlatMessageFile
from tiered.offload.offload_step import Sent
from tiered.offload.offload_step import StepResult
from tiered.offload.offload_step import stage
from tiered.offload.offload_step import stage_many
from tiered.source.local_source import UncheckedBatch
from tiered.testing.sample_tier import SidecarCase

START_MS = 1_700_000_000_000


def _sent(got: Sent) -> tuple[Any, ...]:
    b = got.batch
    assert got.offsets is not None and got.early
    return (got.plan.flat.path, b.queue_offset, bytes(b.data), b.starts.tolist(),
            b.sizes.tolist(), b.tags_codes.tolist(), b.timestamps.tolist(), b.times(),
            got.offsets.tolist(), got.next_store_time)  # fmt: skip


def _pending(flat: FlatMessageFile) -> tuple[Any, ...]:
    return tuple(
        [
            (
                s.base,
                s.size,
                s.sealed,
                s.pending_size,
                s.pending_begin,
                s.pending_end,
                b"".join(s.pending),
            )
            for s in f.segments
        ]
        for f in (flat.commitlog, flat.consume_queue)
    )


def _stage(sidecar: Sidecar, many: bool) -> tuple[list[Any], list[Any], list[Any]]:
    """Plan every queue and stage the wave (one queue's consumequeue moved on meanwhile); what
    was staged, what failed, each flat file."""
    d = sidecar.dispatcher
    flats = d.targets()
    now = int(time.time() * 1000)
    plans = d._plan(flats, [], now, True, 1)
    reads = d._read_wave(plans)
    moved = sidecar.flat_store.get("GenTopic5", 1)
    assert moved is not None
    moved.consume_queue.append(b"\0" * 20, START_MS, START_MS)
    failed: list[tuple[FlatMessageFile, StepResult]] = []
    if many:
        staged = stage_many(plans, reads, d.local, now, (), failed)
    else:
        staged = []
        for p, (read, after) in zip(plans, reads, strict=True):
            got = stage(p, read, after, now, (), prepare=False)
            if isinstance(got, Sent):
                staged.append(got)
            else:
                failed.append((p.flat, got))
    errors = [(f.path, r.failed, d.state(f.topic, f.queue_id).error) for f, r in failed]
    return [_sent(s) for s in staged], errors, [_pending(f) for f in flats]


def _corrupt_one(store: Path, sidecar: Sidecar, topic: str, queue_id: int) -> int:
    """Flip the magic of the next message of a queue in the broker's commitlog; its offset."""
    flat = sidecar.flat_store.get(topic, queue_id)
    assert flat is not None
    units = sidecar.dispatcher.local.read_units(topic, queue_id, flat.commit_offset, 1)
    physical = int(units["offset"][0])
    files = sorted((store / "commitlog").iterdir())
    base = max(int(f.name) for f in files if int(f.name) <= physical)
    with open(store / "commitlog" / f"{base:020d}", "r+b") as f:
        f.seek(physical - base + 4)
        magic = f.read(4)
        f.seek(physical - base + 4)
        f.write(bytes(b ^ 0xFF for b in magic))
        f.flush()
        os.fsync(f.fileno())
    return physical


def test_a_wave_staged_at_once_as_each_batch_alone(offload_case: SidecarCase) -> None:
    store = offload_case.store(topics=12, queues=4, messages=900, start_ms=START_MS)
    one = offload_case.config(store, "posix", work=offload_case.work / "one")
    other = offload_case.config(store, "posix", work=offload_case.work / "other")
    with Sidecar(one) as a, Sidecar(other) as b:
        for s in (a, b):
            assert s.dispatcher.run_pass(flush=True).messages == 900
        offload_case.append(store, seed=5, messages=700, start_ms=START_MS + 10**6)
        physical = _corrupt_one(store, a, "GenTopic3", 2)
        broken = [
            f.path
            for f in (a.flat_store.get("GenTopic3", 2), a.flat_store.get("GenTopic5", 1))
            if f
        ]
        many, many_failed, many_files = _stage(a, many=True)
        each, each_failed, each_files = _stage(b, many=False)
    assert len(many) == len(each) > 40
    for m, e in zip(many, each, strict=True):
        assert m == e
    assert many_failed == each_failed
    assert [path for path, _, _ in many_failed] == broken
    (_, corrupt, why), (_, misplaced, how) = many_failed
    assert corrupt and misplaced
    assert f"physical offset {physical} does not match" in why, why
    assert "consumequeue continues" in how, how
    assert many_files == each_files


def test_batches_checked_at_once_as_each_alone(offload_case: SidecarCase) -> None:
    """The kernel's check of many batches gives each batch what its own check gives: starts,
    good units, store times and their range, with a bad unit in the middle of one batch."""
    store = offload_case.store(topics=3, queues=3, messages=400, start_ms=START_MS)
    with Sidecar(offload_case.config(store, "posix")) as s:
        d = s.dispatcher
        plans = d._plan(d.targets(), [], int(time.time() * 1000), True, 1)
        reads = [r for r, _ in d._read_wave(plans)]
    unchecked = [r for r in reads if isinstance(r, UncheckedBatch)]
    assert len(unchecked) == len(plans) == 9
    bad = unchecked[4]
    bad.data[int(bad.sizes[:3].sum()) + 4] ^= 0x01  # unit 3's magic
    got = check_batches(
        [u.data for u in unchecked],
        np.concatenate([u.sizes for u in unchecked]),
        np.array([len(u.sizes) for u in unchecked], np.int64),
        np.array([u.request.queue_offset for u in unchecked], np.int64),
        np.concatenate([u.offsets for u in unchecked]),
    )
    at = 0
    for u, good, time_range in zip(unchecked, got.good, got.time_ranges, strict=True):
        alone = check_batch(u.data, u.sizes, u.request.queue_offset, u.offsets)
        n = len(u.sizes)
        assert good == alone.good and time_range == alone.time_range
        assert got.starts[at : at + n].tolist() == alone.starts.tolist()
        assert got.timestamps[at : at + good].tolist() == alone.timestamps.tolist()
        assert not got.timestamps[at + good : at + n].any()
        at += n
    assert got.good[4] == 3
    assert all(g == len(u.sizes) for g, u in zip(got.good, unchecked, strict=True) if u is not bad)
