"""Prepared pulls (``tiered.remoting.prepared``): what a connection keeps of the pulls it read
ahead, and for how long."""

from __future__ import annotations

import numpy as np
import pytest

from tiered.read.fetcher import GetResult
from tiered.read.fetcher import GetStatus
from tiered.read.read_unit import Run
from tiered.remoting import prepared as prepared_mod
from tiered.remoting.prepared import PreparedBudget
from tiered.remoting.prepared import PreparedPulls

Q = ("T", 0)


def found(nbytes: int, nxt: int = 10) -> GetResult:
    one = np.array([0], np.int64)
    run = Run(b"x" * nbytes, one * 0, np.array([nbytes], np.int64), one * 0, one * 0)
    return GetResult(GetStatus.FOUND, nxt, 0, 100, [run])


def test_the_expected_pull_is_read_once_and_taken_by_the_request_that_matches_it() -> None:
    reads: list[int] = []

    def read() -> GetResult:
        reads.append(1)
        return found(100)

    budget = PreparedBudget(1000)
    p = PreparedPulls(budget)
    assert p.take(Q, "k") is None  # nothing prepared: the pull reads
    p.expect(Q, "k", read)
    assert p.pending
    p.prepare()
    assert reads == [1] and budget.held == 100
    assert [p.pending] == [False]  # (a list: mypy narrowed the property to True above)
    got = p.take(Q, "k")
    assert got is not None and got.runs[0].nbytes == 100
    assert budget.held == 0
    assert p.take(Q, "k") is None  # used once


def test_a_request_that_differs_reads_afresh_and_drops_what_was_prepared() -> None:
    budget = PreparedBudget(1000)
    p = PreparedPulls(budget)
    p.expect(Q, "k", lambda: found(100))
    p.prepare()
    assert p.take(Q, "other") is None
    assert budget.held == 0
    assert p.take(Q, "k") is None


def test_an_old_prepared_result_is_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    p = PreparedPulls(PreparedBudget(1000), clock=lambda: now[0])
    p.expect(Q, "k", lambda: found(100))
    p.prepare()
    now[0] += prepared_mod.PREPARED_TTL_S + 0.01  # the consumer paused
    assert p.take(Q, "k") is None


def test_nothing_found_a_failed_read_or_a_full_budget_keeps_nothing() -> None:
    budget = PreparedBudget(150)
    p = PreparedPulls(budget)

    def fails() -> GetResult:
        raise OSError("backend down")

    p.expect(("T", 1), "a", lambda: GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0))
    p.expect(("T", 2), "b", fails)
    p.expect(("T", 3), "c", lambda: found(100))
    p.expect(("T", 4), "d", lambda: found(100))  # over the budget: not kept
    p.prepare()
    assert budget.held == 100
    assert [p.take(("T", i), k) is not None for i, k in enumerate("abcd", 1)] == [
        False, False, True, False,
    ]  # fmt: skip
    assert budget.held == 0


def test_a_connection_keeps_the_most_recent_queues_and_gives_all_back_when_it_closes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(prepared_mod, "PREPARED_QUEUES", 3)
    budget = PreparedBudget(10_000)
    p = PreparedPulls(budget)
    for i in range(5):
        p.expect(("T", i), i, lambda: found(10))
        p.prepare()
    assert budget.held == 30  # queues 2, 3, 4
    assert p.take(("T", 0), 0) is None and p.take(("T", 4), 4) is not None
    p.clear()
    assert budget.held == 0
    for i in range(5):
        p.expect(("T", i), i, lambda: found(10))
    p.prepare()  # only the last 3 expected are read
    assert budget.held == 30
    p.clear()


def test_a_full_budget_drops_what_idle_connections_can_no_longer_use() -> None:
    """A consumer that stopped pulling but keeps its connection holds its last prepared result;
    once it is too old to be taken, a connection that needs the room gets it."""
    now = [0.0]
    budget = PreparedBudget(150, clock=lambda: now[0])
    idle = PreparedPulls(budget, clock=lambda: now[0])
    idle.expect(Q, "k", lambda: found(100))
    idle.prepare()
    sweeps: list[float] = []
    sweep = idle.drop_stale

    def counted() -> None:
        sweeps.append(now[0])
        sweep()

    idle.drop_stale = counted  # type: ignore[method-assign]
    busy = PreparedPulls(budget, clock=lambda: now[0])
    busy.expect(Q, "k", lambda: found(100))
    busy.prepare()  # the idle one's is fresh: no room
    assert busy.take(Q, "k") is None and budget.held == 100
    assert sweeps == [0.0]
    now[0] += prepared_mod.SWEEP_INTERVAL_S / 2
    busy.expect(Q, "k", lambda: found(100))
    busy.prepare()  # swept a moment ago: refused without walking the connections again
    assert budget.held == 100 and busy.take(Q, "k") is None
    assert sweeps == [0.0]
    now[0] += prepared_mod.PREPARED_TTL_S + 0.01
    busy.expect(Q, "k", lambda: found(100))
    busy.prepare()  # the idle one's is stale now: dropped for it
    assert budget.held == 100
    assert idle.take(Q, "k") is None
    assert busy.take(Q, "k") is not None
    assert budget.held == 0
