"""Many queues planned at once (:func:`~tiered.offload.wide_plan.plan_many`) give exactly the
plans, results, queue states and flat files that planning each queue alone gives: twin sidecars
over one store, one planning each way, compared field by field (ready and held batches, queues
caught up, one with a failed upload pending, segments full, segments due to roll by time)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from tiered.config import TieredConfig
from tiered.core.sidecar import Sidecar
from tiered.file.flat_message_file import FlatMessageFile
from tiered.offload.dispatch_state import QueueState
from tiered.offload.offload_step import Plan
from tiered.offload.offload_step import StepResult
from tiered.offload.offload_step import plan
from tiered.offload.wide_plan import plan_many
from tiered.source.local_source import LocalSource
from tiered.testing.sample_tier import SidecarCase

START_MS = 1_700_000_000_000
APPENDED = 800
HOUR_MS = 3_600_000


def _outcome(got: Plan | StepResult) -> tuple[Any, ...]:
    if isinstance(got, StepResult):
        return ("result", got.messages, got.bytes, got.failed, got.more, got.gap)
    units = None if got.units is None else got.units.tobytes()
    ahead = None if got.read_ahead is None else got.read_ahead.tobytes()
    return ("plan", got.flat.path, got.current, got.lmax, units, ahead,
            got.roll_commitlog, got.roll_consume_queue, len(got.follow))  # fmt: skip


def _state(st: QueueState) -> tuple[Any, ...]:
    held = st.held
    kept = None if held is None else (held.current, held.sizes.tolist(), held.first_offset,
                                      held.first_time)  # fmt: skip
    return (st.to_json(), kept, st.next_physical, st.behind, st.behind_bytes, st.published,
            st.error, st.local_max)  # fmt: skip


def _files(flat: FlatMessageFile) -> tuple[Any, ...]:
    return tuple(
        [(s.base, s.size, s.sealed, s.pending_size) for s in f.segments]
        for f in (flat.commitlog, flat.consume_queue)
    )


def _plan_round(sidecar: Sidecar, now: int, flush: bool, many: bool) -> list[tuple[Any, ...]]:
    """One planning of every queue, as a wide round's wave has it; what came of each."""
    d = sidecar.dispatcher
    flats = d.targets()
    states = [d.state(f.topic, f.queue_id) for f in flats]
    sending = [f for f in flats if not f.has_pending]
    queues = [(f.topic, f.queue_id) for f in sending]
    with d.local.scanned_ahead(queues, [f.commit_offset for f in sending]):
        if many:
            got = plan_many(flats, states, d.local, d.limits, now, flush=flush)
        else:
            pairs = zip(flats, states, strict=True)
            got = [plan(f, s, d.local, d.limits, now, flush=flush) for f, s in pairs]
    return [(_outcome(g), _state(s), _files(f)) for f, s, g in zip(flats, states, got, strict=True)]


def _twins(case: SidecarCase, **keys: Any) -> tuple[TieredConfig, TieredConfig]:
    store = case.store(topics=20, queues=4, messages=1200, start_ms=START_MS)
    one = case.config(store, "posix", work=case.work / "one", **keys)
    other = case.config(store, "posix", work=case.work / "other", **keys)
    return one, other


@pytest.mark.parametrize(
    ("label", "keys", "at", "flush"),
    [
        (
            "some ready, some held",
            {"tieredStoreGroupCommitTimeout": 1500, "tieredStoreGroupCommitSize": 1 << 20},
            1700,
            False,
        ),
        (
            "by count or size",
            {"tieredStoreGroupCommitTimeout": 10**9, "tieredStoreGroupCommitCount": 9},
            0,
            False,
        ),
        ("flushed", {"tieredStoreGroupCommitTimeout": 10**9}, 0, True),
        ("due to roll by time", {"commitLogRollingMinimumSize": 4096}, None, False),
        (
            "segments nearly full",
            {"tieredStoreConsumeQueueMaxSize": 12 * 20, "tieredStoreCommitLogMaxSize": 6 << 10},
            10**6,
            True,
        ),
    ],
)
def test_many_queues_planned_at_once_as_each_alone(
    offload_case: SidecarCase, label: str, keys: dict[str, Any], at: int | None, flush: bool
) -> None:
    """Plans compared over three plannings, each followed by a round that carries out the
    queues' steps (as twins: each sidecar's own); ``at``: the planning's clock after the
    appended messages' first store time (None: 30 hours after the wall clock, when every flat
    commitlog segment is due to roll by time)."""
    one, other = _twins(offload_case, **keys)
    store = one.store_path_root_dir
    clock = [int(time.time() * 1000)]
    with Sidecar(one) as a, Sidecar(other) as b:
        for s in (a, b):
            s.dispatcher.clock = lambda: clock[0]  # (the twins' rounds at the same times)
            assert s.dispatcher.run_pass(flush=True).messages == 1200
        appended_at = START_MS + 10**6
        offload_case.append(store, seed=5, messages=APPENDED, start_ms=appended_at)
        pending = [s.flat_store.get("GenTopic2", 1) for s in (a, b)]
        for flat in pending:  # a failed upload left pending in one queue
            assert flat is not None
            flat.commitlog.append(b"x" * 10, appended_at, appended_at)
        now = appended_at + at if at is not None else int(time.time() * 1000) + 30 * HOUR_MS
        rounds = []
        for _ in range(3):  # later plannings meet the batches held and the segments rolled
            many = _plan_round(a, now, flush, many=True)
            each = _plan_round(b, now, flush, many=False)
            assert [m[0][0] for m in many] == [e[0][0] for e in each]
            for m, e in zip(many, each, strict=True):
                assert m == e, label
            rounds.append(many)
            for flat in pending:
                assert flat is not None
                flat.commitlog.drop_pending()
            clock[0] += 1000
            for s in (a, b):
                s.dispatcher.run_round(flush=flush)
            now += 1000
    plans = [r[0] for got in rounds for r in got if r[0][0] == "plan"]
    assert any(p[4] is not None and not (p[6] or p[7]) for p in plans), "none on the common path"
    if label == "some ready, some held":
        held = [r for r in rounds[0] if r[1][1] is not None]
        assert held and len(held) < len(rounds[0])
    if label == "due to roll by time":
        assert any(sealed for r in rounds[0] for _, _, sealed, _ in r[2][0])
    if label == "segments nearly full":
        assert any(p[6] for p in plans) and any(p[7] for p in plans)


def test_store_times_of_many_messages_as_of_each(offload_case: SidecarCase) -> None:
    """:meth:`LocalSource.store_times_at` answers the messages the commitlog feed walked from
    what it remembered (here told apart: remembered a second late) and reads the others."""
    store = offload_case.store(topics=2, queues=2, messages=200, start_ms=START_MS)
    local = LocalSource(offload_case.config(store))
    units = local.read_units("GenTopic1", 0, 0, 40)
    offsets, sizes = units["offset"].astype(np.int64), units["size"].astype(np.int64)
    read = [local.store_time_at(int(o), int(z)) for o, z in zip(offsets, sizes, strict=True)]
    true = [t for t in read if t is not None]
    assert len(true) == len(read) == 40
    assert local.store_times_at(offsets, sizes) == true  # (nothing remembered yet)
    walked = np.arange(0, len(offsets), 3)
    local.remember_store_times(offsets[walked].tolist(), [true[i] + 1000 for i in walked])
    want = [t + 1000 if i in set(walked.tolist()) else t for i, t in enumerate(true)]
    assert local.store_times_at(offsets, sizes) == want
    assert local.store_times_at(offsets[:0], sizes[:0]) == []
