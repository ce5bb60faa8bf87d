"""Pausing uploads: the CLI and the HTTP admin routes against a running daemon, a restart while
paused, a pass stopped between rounds, and a pause that outlives the broker's copy (a gap).

The tier is checked with :func:`~tiered.testing.tier_check.check_tier` (every offset once, bytes
equal to the broker's) and, while paused, by a fingerprint of the posix tier's files.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import MutableMapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi import FastAPI
from tiered.providers import MemoryProvider
from tiered.providers import RequestCounts
from tiered.providers import from_config

from tiered import metrics
from tiered.access.security import Security
from tiered.cli import main
from tiered.config import TieredConfig
from tiered.core.daemon import Daemon
from tiered.core.sidecar import Sidecar
from tiered.core.status_report import collect_status
from tiered.http.admin_routes import admin_router
from tiered.offload import dispatcher as dispatcher_module
from tiered.offload.pause import PauseFile
from tiered.source.local_source import LocalSource
from tiered.testing.http import get
from tiered.testing.http import post
from tiered.testing.sample_tier import SidecarCase
from tiered.testing.sidecar_process import Sidecar as RunProcess
from tiered.testing.tier_check import check_tier
from tiered.testing.tier_check import store_fingerprint

ADMIN, READER = ("root", "root-secret"), ("reader", "reader-secret")
ACCOUNTS = """
accounts:
  - accessKey: reader
    secretKey: reader-secret
    defaultTopicPerm: SUB
  - accessKey: root
    secretKey: root-secret
    admin: true
"""


def cli(*args: str | Path, code: int = 0) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == code, (result.output, result.exception)
    return result.output


def status_json(conf: Path) -> dict[str, Any]:
    out = cli("status", "--config", conf, "--json")
    obj: dict[str, Any] = json.loads(out.splitlines()[-1])
    return obj


def gauge(name: str) -> float:
    return metrics.REGISTRY.get_sample_value(f"rocketmq_tiered_store_{name}") or 0.0


def until(predicate: Callable[[], bool], seconds: float = 15.0) -> float:
    """Wait for ``predicate``; returns the seconds it took."""
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < seconds, "timed out"
        time.sleep(0.02)
    return time.monotonic() - started


def behind(queues: list[tuple[str, int]]) -> float:
    """``dispatch_behind`` summed over ``queues``."""
    wanted = {(t, str(q)) for t, q in queues}
    samples = (s for m in metrics.DISPATCH_BEHIND.collect() for s in m.samples)
    return sum(s.value for s in samples if (s.labels["topic"], s.labels["queue_id"]) in wanted)


def segments(tier: Path) -> dict[str, tuple[str, int, int]]:
    """The posix tier's segment files (the metadata mirror left out: it may still be put while
    paused, recording what was uploaded before the pause)."""
    return {k: v for k, v in store_fingerprint(tier).items() if "/config/" not in k}


def lag(cfg: TieredConfig) -> int:
    return collect_status(cfg).totals()["lagMessages"]


@contextmanager
def running(cfg: TieredConfig) -> Iterator[Daemon]:
    """A daemon of ``cfg`` on a thread of its own, stopped cleanly after the block."""
    daemon = Daemon(cfg)
    done: list[int] = []
    thread = threading.Thread(target=lambda: done.append(daemon.run(install_signals=False)))
    thread.start()
    try:
        until(lambda: daemon.scheduler.running)
        yield daemon
    finally:
        daemon.stop.set()
        thread.join(timeout=30)
    assert done == [0]


def test_pause_holds_the_tier_across_a_restart_and_resume_offloads_the_lag_without_gap(
    offload_case: SidecarCase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dispatcher_module, "PAUSED_MEASURE_S", 0.1)  # lag gauges: at once
    store = offload_case.store()
    cfg = offload_case.config(store, "posix")
    conf = offload_case.conf_file(cfg)
    tier = offload_case.work / "tier"
    with running(cfg):
        until(lambda: lag(cfg) == 0)
        said = cli("pause", "--config", conf, "--reason", "bucket migration")
        assert "uploads paused at" in said and "the running sidecar (pid" in said
        stopped_s = until(lambda: gauge("uploads_paused") == 1)
        held = segments(tier)
        offload_case.append(store, seed=5, messages=2000)
        time.sleep(1.0)  # twenty dispatch intervals
        assert segments(tier) == held
        until(lambda: behind(LocalSource(cfg).queues()) == 2000)  # the gauges show the lag
    since = PauseFile(cfg.tiered_data_dir).read().since_ms
    assert gauge("uploads_paused_since_timestamp_seconds") == since / 1000
    with running(cfg):  # a paused sidecar restarts paused
        time.sleep(0.5)
        assert segments(tier) == held and gauge("uploads_paused") == 1
        status = status_json(conf)
        uploads = status["uploads"]
        assert (uploads["paused"], uploads["sinceMs"]) == (True, since)
        assert uploads["by"].startswith("cli:") and uploads["reason"] == "bucket migration"
        assert status["totals"]["lagMessages"] == 2000 and status["totals"]["gapMessages"] == 0
        assert "uploads paused since" in cli("status", "--config", conf)
        assert "uploads resumed" in cli("resume", "--config", conf)
        caught_up_s = until(lambda: lag(cfg) == 0)
        assert gauge("uploads_paused") == 0 and gauge("uploads_paused_since_timestamp_seconds") == 0
    check_tier(cfg, from_config(cfg)).assert_ok(5000)  # every message once, no gap
    assert status_json(conf)["totals"]["gapMessages"] == 0
    assert stopped_s < 1.0 and caught_up_s < 5.0, (stopped_s, caught_up_s)


def test_pause_and_resume_say_what_they_did(offload_case: SidecarCase) -> None:
    cfg = offload_case.config(offload_case.store(messages=300))
    conf = offload_case.conf_file(cfg)
    result = CliRunner().invoke(main, ["pause", "--config", str(conf)])
    assert result.exit_code == 2 and "does not exist" in result.output
    assert "tieredDataDir=" in result.output
    cfg.tiered_data_dir.mkdir(parents=True)
    assert "the next `rmq-tiered run` starts paused" in cli("pause", "--config", conf)
    again = json.loads(cli("pause", "--config", conf, "--json"))
    assert again["changed"] is False and again["uploads"]["paused"] is True
    assert again["daemon"] == {"pid": None, "running": False}
    assert "already paused" in cli("pause", "--config", conf)
    assert "the next `rmq-tiered run` uploads" in cli("resume", "--config", conf)
    assert "were not paused: unchanged" in cli("resume", "--config", conf)


def test_a_pass_stops_after_the_round_it_is_in(offload_case: SidecarCase) -> None:
    cfg = offload_case.config(offload_case.store())
    with Sidecar(cfg, MemoryProvider()) as sidecar:
        rounds: list[int] = []

        def pause_after_the_first(messages: int) -> None:
            rounds.append(messages)
            sidecar.pause.set(True, "test")

        report = sidecar.dispatcher.run_pass(flush=True, on_progress=pause_after_the_first)
        assert report.paused and report.rounds == 1 and 0 < report.messages < 3000
        assert sidecar.dispatcher.run_pass(flush=True).messages == 0
        sidecar.pause.set(False, "test")
        rest = sidecar.dispatcher.run_pass(flush=True)
        assert not rest.paused and report.messages + rest.messages == 3000
        check_tier(cfg, sidecar.provider).assert_ok(3000)


def test_the_key_index_uploads_nothing_while_paused(offload_case: SidecarCase) -> None:
    cfg = offload_case.config(offload_case.store(messages=600))
    provider = MemoryProvider()
    with Sidecar(cfg, provider) as sidecar:
        assert sidecar.dispatcher.run_pass(flush=True).messages == 600
        index = sidecar.index
        assert index is not None and index.seal() is not None
        sidecar.pause.set(True, "test")
        index.compact_job()
        assert index.status()["uploaded"] == [] and len(index.local.sealed()) == 1
        sidecar.pause.set(False, "test")
        index.compact_job()
        assert len(index.status()["uploaded"]) == 1 and index.local.sealed() == []


def test_paused_past_the_brokers_deletion_the_gap_is_reported_exactly(
    offload_case: SidecarCase,
) -> None:
    store = offload_case.store()
    cfg = offload_case.config(store)
    provider = MemoryProvider()
    counts = RequestCounts()
    with Sidecar(cfg, provider) as sidecar:
        dispatcher = sidecar.dispatcher
        assert dispatcher.run_pass(flush=True).messages == 3000
        first = check_tier(cfg, provider).assert_ok(3000)
        sidecar.pause.set(True, "test")
        offload_case.append(store, seed=5, messages=3000)
        provider.add_request_listener(counts)
        assert dispatcher.run_pass(flush=True).paused
        assert counts.counts == {}  # not one backend request while paused
        for f in sorted((store / "commitlog").iterdir())[:-1]:  # the broker deleted them
            f.unlink()
        sidecar.pause.set(False, "test")
        report = dispatcher.run_pass(flush=True)
        states = dict(dispatcher.states)
    local = LocalSource(cfg)
    start = {}
    for (topic, qid), (_, end) in first.ranges.items():
        (gap,) = states[(topic, qid)].gaps
        assert (gap.start, gap.end) == (end, local.min_offset(topic, qid))  # exactly the loss
        start[(topic, qid)] = gap.end
    gap_messages = sum(g.messages for _, _, g in report.gaps)
    assert 0 < gap_messages < 3000 and report.messages == 3000 - gap_messages
    check_tier(cfg, provider, start=start).assert_ok()
    assert collect_status(cfg).totals()["gapMessages"] == gap_messages


def test_http_admin_pause_takes_an_admin_account(offload_case: SidecarCase) -> None:
    accounts = offload_case.work / "plain_acl.yml"
    accounts.write_text(ACCOUNTS)
    store = offload_case.store()
    cfg = offload_case.config(store, "posix", tieredAclEnable=True, tieredAclFile=accounts)
    conf = offload_case.conf_file(cfg)
    run = RunProcess(conf, offload_case.work / "run")
    run.start()
    try:
        until(lambda: lag(cfg) == 0)
        assert post(run.http, "/v1/admin/pause").status == 401
        refused = post(run.http, "/v1/admin/pause", auth=READER)
        assert refused.status == 403 and "admin: true" in refused.json()["error"]
        browser = post(run.http, "/v1/admin/pause", auth=ADMIN, headers={"Origin": "http://x"})
        assert browser.status == 403
        assert gauge_of(run, "uploads_paused") == 0
        done = post(run.http, "/v1/admin/pause", auth=ADMIN, reason="load test")
        assert done.status == 200 and done.json()["changed"] is True
        assert done.json()["uploads"]["by"] == "http:root"
        until(lambda: gauge_of(run, "uploads_paused") == 1)
        tier = offload_case.work / "tier"
        held = segments(tier)
        offload_case.append(store, seed=5, messages=1000)
        time.sleep(0.5)
        assert segments(tier) == held
        shown = get(run.http, "/v1/status", auth=ADMIN).json()
        assert shown["uploads"]["paused"] is True and shown["totals"]["lagMessages"] == 1000
        assert post(run.http, "/v1/admin/pause", auth=ADMIN).json()["changed"] is False
        assert post(run.http, "/v1/admin/resume", auth=READER).status == 403
        assert post(run.http, "/v1/admin/resume", auth=ADMIN).status == 200
        until(lambda: lag(cfg) == 0)
    finally:
        run.stop()
    check_tier(cfg, from_config(cfg)).assert_ok(4000)


def gauge_of(run: RunProcess, name: str) -> float:
    return run.metric(f"rocketmq_tiered_store_{name}")


def _asgi_post(app: FastAPI, path: str, client: str, headers: dict[str, str]) -> int:
    """The status of one POST handed to the ASGI app as if from ``client`` (no network)."""
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "client": (client, 40000), "server": ("127.0.0.1", 8081),
        "headers": [(b"host", b"sidecar")] + [(k.encode(), v.encode()) for k, v in headers.items()],
    }  # fmt: skip
    asyncio.run(app(scope, receive, send))
    return int(next(m["status"] for m in sent if m["type"] == "http.response.start"))


def test_without_accounts_only_the_sidecars_own_host_may_pause(tmp_path: Path) -> None:
    pause = PauseFile(tmp_path)
    app = FastAPI()
    app.include_router(admin_router(pause, Security()))  # tieredAclEnable=false
    assert _asgi_post(app, "/v1/admin/pause", "192.0.2.7", {}) == 403
    assert not pause.read().paused
    assert _asgi_post(app, "/v1/admin/pause", "127.0.0.1", {"origin": "http://evil"}) == 403
    assert _asgi_post(app, "/v1/admin/pause", "::ffff:127.0.0.1", {}) == 200
    assert pause.read().paused and pause.read().by == "http:::ffff:127.0.0.1"
    assert _asgi_post(app, "/v1/admin/resume", "::1", {}) == 200
    assert not pause.read().paused
