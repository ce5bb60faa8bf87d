"""POP state under random pops, acks, invisible-time changes, send-backs (a consumer giving up on a
message, named by its commitlog offset), clock jumps and restarts: every message is acked exactly
once (or dead-lettered once, or filtered out) in the end, nothing acked is delivered again,
deliveries count up by one per redelivery, orderly queues hand out one batch at a time, and memory
stays within the window."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine
from hypothesis.stateful import initialize
from hypothesis.stateful import invariant
from hypothesis.stateful import precondition
from hypothesis.stateful import rule

from tiered.errors import PopStateFullError
from tiered.remoting.pop_state import Claim
from tiered.remoting.pop_state import PopState

WINDOW = 8
ENDS = {0: 23, 1: 9}  # queue id -> max offset (messages 0 .. end-1; queue 1 starts at 3)
STARTS = {0: 0, 1: 3}
MAX_REDELIVERIES = 2
GROUPS = {"plain": False, "fifo": True}  # group -> orderly
Key = tuple[str, str, int]


def phys(q: int, offset: int) -> int:
    """A message's commitlog offset (unique over the queues)."""
    return 4096 + q * 100_000 + offset * 10


class PopMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir: Path | None = None
        self.now = 1_700_000_000_000
        self.acked: dict[Key, set[int]] = {}
        self.dead: dict[Key, set[int]] = {}
        self.filtered: dict[Key, set[int]] = {}
        self.deliveries: dict[tuple[Key, int], int] = {}
        self.handles: set[tuple[Key, int]] = set()  # received and not known to be acked
        self.dlq_count = 0

    @initialize()
    def start(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="pop-state-"))
        self.state = self._new()
        for group in GROUPS:
            for q in ENDS:
                key = (group, "T", q)
                self.acked[key], self.dead[key], self.filtered[key] = set(), set(), set()

    def _new(self) -> PopState:
        state = PopState(self.dir, window=WINDOW)
        state.load()
        return state

    # --- one pop ----------------------------------------------------------------------------------

    def _pop(
        self, key: Key, count: int, invisible: int, data: st.DataObject | None, new: bool = True
    ) -> None:
        orderly = GROUPS[key[0]]
        in_flight = self.state.in_flight(key, self.now)
        dead_before = self.state.dead_letters(key[0], key[1])[0]
        claim = self.state.claim(
            key, start=STARTS[key[2]], now=self.now, invisible_ms=invisible, max_count=count,
            max_offset=ENDS[key[2]], orderly=orderly, max_redeliveries=MAX_REDELIVERIES, new=new,
        )  # fmt: skip
        self._dead_lettered(key, dead_before)
        if claim is None:
            return
        assert not (orderly and in_flight), "an orderly queue handed out a second batch"
        assert len(claim.again) + claim.new_max <= count
        assert new or claim.new_from is None, "an expired-only pop read new messages"
        for offset, times in claim.again.items():
            self._receive(key, offset, times)
        if claim.new_from is not None:
            self._read(claim, data)

    def _dead_lettered(self, key: Key, before: int) -> None:
        count, latest = self.state.dead_letters(key[0], key[1])
        if count == before:
            return
        self.dlq_count += count - before
        for q, offset in latest[len(latest) - (count - before) :]:
            k = (key[0], key[1], q)
            assert offset not in self.acked[k] and offset not in self.dead[k]
            assert self.deliveries[(k, offset)] == MAX_REDELIVERIES + 1
            self.dead[k].add(offset)
            self.handles.discard((k, offset))

    def _read(self, claim: Claim, data: st.DataObject | None) -> None:
        key = claim.key
        assert claim.new_from is not None
        left = ENDS[key[2]] - claim.new_from
        if data is not None and data.draw(st.integers(0, 9)) == 0:
            self.state.release(claim)  # the read failed
            return
        n = min(claim.new_max, left)
        if data is not None:
            n = data.draw(st.integers(min(1, n), n))
        skip = set(data.draw(st.sets(st.integers(0, max(n - 1, 0)), max_size=2))) if data else set()
        offsets = [claim.new_from + i for i in range(n) if i not in skip]
        for i in skip & set(range(n)):
            self.filtered[key].add(claim.new_from + i)
        self.state.delivered(claim, offsets, claim.new_from + n, [phys(key[2], o) for o in offsets])
        for offset in offsets:
            self._receive(key, offset, 1)

    def _receive(self, key: Key, offset: int, times: int) -> None:
        assert offset not in self.acked[key], f"{key} {offset} delivered after its ack"
        assert offset not in self.dead[key] and offset not in self.filtered[key]
        assert self.deliveries.get((key, offset), 0) + 1 == times, "deliveries skipped a count"
        self.deliveries[(key, offset)] = times
        self.handles.add((key, offset))

    # --- rules ------------------------------------------------------------------------------------

    @rule(
        group=st.sampled_from(sorted(GROUPS)),
        q=st.sampled_from(sorted(ENDS)),
        count=st.integers(1, 6),
        invisible=st.integers(0, 30_000),
        data=st.data(),
    )
    def pop(self, group: str, q: int, count: int, invisible: int, data: st.DataObject) -> None:
        self._pop((group, "T", q), count, invisible, data)

    @rule(
        group=st.sampled_from(sorted(GROUPS)),
        q=st.sampled_from(sorted(ENDS)),
        count=st.integers(1, 6),
        invisible=st.integers(0, 30_000),
    )
    def pop_expired(self, group: str, q: int, count: int, invisible: int) -> None:
        """The first pass of a pop: only what ran out of invisible time."""
        self._pop((group, "T", q), count, invisible, None, new=False)

    @precondition(lambda self: bool(self.handles))
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        key, offset = data.draw(st.sampled_from(sorted(self.handles)))
        ok = self.state.ack(key, offset)
        self.handles.discard((key, offset))
        if ok:
            assert offset not in self.acked[key], "acked twice"
            self.acked[key].add(offset)
        else:
            assert offset in self.acked[key] or offset in self.dead[key]

    @precondition(lambda self: bool(self.handles))
    @rule(data=st.data(), invisible=st.integers(0, 20_000))
    def change_invisible(self, data: st.DataObject, invisible: int) -> None:
        key, offset = data.draw(st.sampled_from(sorted(self.handles)))
        ok = self.state.change_invisible(key, offset, self.now, invisible)
        assert ok == (offset not in self.acked[key] and offset not in self.dead[key])

    @precondition(lambda self: bool(self.handles))
    @rule(data=st.data())
    def give_up(self, data: st.DataObject) -> None:
        """``CONSUMER_SEND_MSG_BACK``: found by its commitlog offset while leased, then
        dead-lettered (not delivered again, counted once)."""
        key, offset = data.draw(st.sampled_from(sorted(self.handles)))
        leased = self.state.find(key[0], key[1], phys(key[2], offset))
        done = offset in self.acked[key] or offset in self.dead[key]
        assert leased == ([] if done else [(key, offset)])  # (offsets unique here)
        if leased:
            assert self.state.dead_letter(key, offset)
            self.dead[key].add(offset)
            self.dlq_count += 1
        self.handles.discard((key, offset))

    @rule(delta=st.integers(-60_000, 120_000))
    def clock(self, delta: int) -> None:
        self.now += delta

    @rule()
    def restart(self) -> None:
        self.state.flush()
        self.state = self._new()

    # --- invariants -------------------------------------------------------------------------------

    @invariant()
    def bounded(self) -> None:
        if not hasattr(self, "state"):
            return
        assert self.state.entries() <= WINDOW * len(GROUPS) * len(ENDS)
        for key in self.state.queues():
            progress = self.state.progress(key)
            assert progress is not None
            done = self.acked[key] | self.dead[key] | self.filtered[key]
            assert all(o in done for o in range(STARTS[key[2]], progress))

    def teardown(self) -> None:
        if not hasattr(self, "state"):
            return
        for _ in range(500):  # every consumer comes back and acks all it gets
            self.now += 3_600_000
            for group in GROUPS:
                for q in ENDS:
                    key = (group, "T", q)
                    self._pop(key, WINDOW, 1000, None)
                    for k, offset in sorted(self.handles):
                        if k == key and self.state.ack(k, offset):
                            assert offset not in self.acked[k]
                            self.acked[k].add(offset)
                    self.handles = {h for h in self.handles if h[0] != key}
            if all(self.state.progress(k) == ENDS[k[2]] for k in self.acked):
                break
        for key, acked in self.acked.items():
            expected = set(range(STARTS[key[2]], ENDS[key[2]]))
            assert self.state.progress(key) == ENDS[key[2]]
            assert not acked & self.dead[key] and not acked & self.filtered[key]
            assert acked | self.dead[key] | self.filtered[key] == expected
        assert self.state.dead_letter_total() == self.dlq_count
        assert self.state.entries() == 0


PopMachine.TestCase.settings = settings(
    max_examples=50,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestPopState = PopMachine.TestCase


def test_window_caps_a_consumer_that_never_acks(tmp_path: Path) -> None:
    state = PopState(tmp_path, window=4)
    key = ("g", "T", 0)
    claim = state.claim(key, start=0, now=0, invisible_ms=10, max_count=32, max_offset=100)
    assert claim is not None and claim.new_from == 0 and claim.new_max == 4
    state.delivered(claim, [0, 1, 2, 3], 4)
    assert state.claim(key, start=0, now=5, invisible_ms=10, max_count=32, max_offset=100) is None
    again = state.claim(key, start=0, now=10, invisible_ms=10, max_count=32, max_offset=100)
    assert again is not None and again.again == {0: 2, 1: 2, 2: 2, 3: 2} and again.new_from is None
    assert state.ack(key, 0) and not state.ack(key, 0)
    assert state.progress(key) == 1 and state.take_progress() == {key: 1}
    nxt = state.claim(key, start=0, now=11, invisible_ms=10, max_count=32, max_offset=100)
    assert nxt is not None and nxt.new_from == 4 and nxt.new_max == 1


def test_queue_cap(tmp_path: Path) -> None:
    state = PopState(tmp_path, max_queues=1)
    assert state.claim(("g", "T", 0), start=0, now=0, invisible_ms=1, max_count=1, max_offset=1)
    with pytest.raises(PopStateFullError, match="POP state of 1 queues is full"):
        state.claim(("g", "T", 1), start=0, now=0, invisible_ms=1, max_count=1, max_offset=1)


def test_torn_file_falls_back_to_bak_then_starts_empty(tmp_path: Path) -> None:
    key = ("g", "T", 0)
    state = PopState(tmp_path)
    claim = state.claim(key, start=0, now=0, invisible_ms=10, max_count=3, max_offset=10)
    assert claim is not None
    state.delivered(claim, [0, 1, 2], 3)
    state.ack(key, 0)
    assert state.flush()
    state.ack(key, 1)
    assert state.flush()  # the first version is now the .bak
    path = state.path
    assert path is not None
    path.write_bytes(path.read_bytes()[:17])  # torn
    reread = PopState(tmp_path)
    reread.load()
    assert reread.progress(key) == 1  # from the .bak
    path.with_name(path.name + ".bak").write_text(json.dumps({"version": 1, "queues": 3}))
    empty = PopState(tmp_path)
    empty.load()
    assert empty.progress(key) is None
    assert sorted(p.name.split(".corrupt-")[0] for p in tmp_path.glob("*.corrupt-*")) == [
        "replayPopState.json",
        "replayPopState.json.bak",
    ]
