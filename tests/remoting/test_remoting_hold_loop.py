"""The holder thread of the replay port sleeps unless a pull is held or an offset may need
writing: no periodic wake-ups while idle, a held pull answered at its own deadline (not on a
poll tick), committed offsets written within a second without a stop."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from tiered.broker.generator import GenSpec
from tiered.remoting.codes import FLAG_SUSPEND
from tiered.remoting.codes import RequestCode as Req
from tiered.remoting.codes import ResponseCode as Res
from tiered.remoting.groups import ReplayOffsets
from tiered.testing.sample_tier import SampleTier

from .conftest import TOPIC
from .conftest import EndpointFactory
from .conftest import build_history
from .test_remoting_requests import Q
from .test_remoting_requests import pull
from .test_remoting_requests import queue_messages


def _count_checks(monkeypatch: pytest.MonkeyPatch, server: object) -> list[float]:
    calls: list[float] = []
    check = server._check_held  # type: ignore[attr-defined]

    def counted(now: float) -> float | None:
        calls.append(now)
        result: float | None = check(now)
        return result

    monkeypatch.setattr(server, "_check_held", counted)
    return calls


def test_an_idle_holder_never_wakes(
    history: SampleTier, endpoint: EndpointFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    ep = endpoint(history)
    with ep.client() as c:
        q = {"consumerGroup": "G", "topic": TOPIC, "queueId": Q}
        assert c.call(Req.QUERY_CONSUMER_OFFSET, **q).code == Res.SUCCESS
    time.sleep(1.5)  # the answer woke it once (offsets maybe dirty); then it sleeps
    calls = _count_checks(monkeypatch, ep.server)
    time.sleep(1.0)
    assert calls == []


def test_a_commit_is_written_within_a_second_without_a_stop(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    time.sleep(0.3)
    with ep.client() as c:
        q = {"consumerGroup": "writer", "topic": TOPIC, "queueId": Q}
        c.call(Req.UPDATE_CONSUMER_OFFSET, commitOffset=23, **q)
    deadline = time.monotonic() + 3
    while True:
        saved = ReplayOffsets(ep.offsets.path.parent)
        saved.load(owner=False)  # the endpoint writes it meanwhile
        if saved.get("writer", TOPIC, Q) == 23:
            break
        assert time.monotonic() < deadline, "the committed offset was not written"
        time.sleep(0.1)


def test_a_held_pull_is_answered_at_its_deadline_not_on_a_poll_tick(
    tmp_path: Path, replay_spec: GenSpec, endpoint: EndpointFactory
) -> None:
    tier = build_history(tmp_path, dataclasses.replace(replay_spec, messages=400), deleted_files=0)
    ep = endpoint(tier, server={"poll_interval_s": 30.0})
    end = max(queue_messages(tier)) + 1
    with ep.client() as c:
        started = time.monotonic()
        r = pull(c, end, sys_flag=FLAG_SUSPEND, suspendTimeoutMillis=600)
        waited = time.monotonic() - started
    assert r.code == Res.PULL_NOT_FOUND and 0.5 < waited < 3, (r.code, waited)
