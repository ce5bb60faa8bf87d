"""``tieredStoreReadOnly=true``: a sidecar that serves reads and never writes the tier.

A real ``rmq-tiered run`` over a tier another sidecar wrote, with new messages in the broker's
store and every segment past its reserve time, must leave the posix tier's files as they were
(and send no write request) while it answers reads by offset and by key; the provider wrapper
refuses any write that slips through, naming the object.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tiered.providers import MemoryProvider
from tiered.providers import RequestCounts
from tiered.providers.read_only import ReadOnlyProvider

from tiered.cli import main
from tiered.core.sidecar import Sidecar
from tiered.errors import TierReadOnlyError
from tiered.metadata import now_ms
from tiered.testing.http import get
from tiered.testing.sample_tier import SidecarCase
from tiered.testing.sidecar_process import Sidecar as RunProcess
from tiered.testing.tier_check import store_fingerprint

WRITE_REQUESTS = ("WRITE", "FSYNC", "RENAME", "DELETE")
"""What the posix provider counts for appends, syncs, puts and deletes."""


def cli(*args: str | Path, code: int = 0) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == code, (result.output, result.exception)
    return result.output


def test_a_read_only_run_writes_nothing_and_still_serves_reads(offload_case: SidecarCase) -> None:
    store = offload_case.store()
    with Sidecar(offload_case.config(store, "posix")) as writer:
        assert writer.dispatcher.run_pass(flush=True).messages == 3000
    offload_case.append(store, seed=5, messages=1000)  # not offloaded by the read-only one
    tier, data = offload_case.work / "tier", offload_case.work / "data"
    before = store_fingerprint(tier)
    metadata = (data / "config" / "tieredStoreMetadata.json").read_bytes()
    cfg = offload_case.config(
        store,
        "posix",
        tieredStoreReadOnly=True,
        tieredStorageLevel="FORCE",  # every read from the tier
        tieredStoreDeleteFileInterval=100,  # store times of 2023: every segment is due
        tieredIndexCompactionIntervalMs=100,
    )
    conf = offload_case.conf_file(cfg)
    run = RunProcess(conf, offload_case.work / "run")
    run.start()
    try:
        time.sleep(1.0)  # twenty dispatch passes, ten expiry and compaction runs
        path = "/v1/topics/GenTopic0/queues/0/messages"
        got = get(run.http, path, offset=0, maxCount=4).json()["messages"]
        assert [m["tier"] for m in got] == ["tiered"] * 4
        key = got[1]["msgId"]
        hits = get(run.http, f"/v1/topics/GenTopic0/keys/{key}").json()["messages"]
        assert [m["msgId"] for m in hits] == [key]
        requests = "rocketmq_tiered_store_provider_requests_total"
        assert {op: run.metric(requests, operation=op) for op in WRITE_REQUESTS} == dict.fromkeys(
            WRITE_REQUESTS, 0.0
        )
        assert run.metric(requests, operation="READ") > 0
        assert run.metric("rocketmq_tiered_store_read_only") == 1
        assert run.metric("rocketmq_tiered_store_dispatch_standby") == 0
        status: dict[str, Any] = json.loads(cli("status", "--config", conf, "--json"))
        assert status["role"] == "read-only" and status["totals"]["lagMessages"] == 1000
        assert "this sidecar is read-only" in cli("status", "--config", conf)
    finally:
        run.stop()
    log = (offload_case.work / "run.1.log").read_text()
    assert "tieredStoreReadOnly=true: this sidecar never writes the tier" in log
    assert "role read-only" in log
    assert store_fingerprint(tier) == before  # not a byte, not an mtime
    assert (data / "config" / "tieredStoreMetadata.json").read_bytes() == metadata


def test_an_in_process_read_only_sidecar_starts_no_writer(offload_case: SidecarCase) -> None:
    store = offload_case.store()
    provider = MemoryProvider()
    with Sidecar(offload_case.config(store), provider) as writer:
        assert writer.dispatcher.run_pass(flush=True).messages == 3000
    offload_case.append(store, seed=5, messages=500)
    objects = {k: provider.size(k) for k in provider.list()}
    counts = RequestCounts()
    provider.add_request_listener(counts)
    cfg = offload_case.config(store, tieredStoreReadOnly=True)
    with Sidecar(cfg, provider) as sidecar:
        report = sidecar.dispatcher.run_pass(flush=True)
        assert (report.role, report.messages) == ("read-only", 0)
        assert sidecar.expire(now_ms() + 10**12).segments == 0
        assert sidecar.index is not None and sidecar.index.readonly
        assert len(sidecar.flat_store) == 6  # restored as recorded, for the reads
        with pytest.raises(TierReadOnlyError, match="tieredStoreReadOnly=true"):
            sidecar.provider.put("x/y", b"")  # the safety net under any forgotten writer
    assert {k: provider.size(k) for k in provider.list()} == objects
    assert not set(counts.counts) & {"PUT", "APPEND", "DELETE", "SEAL"}, counts.counts
    result = CliRunner().invoke(
        main, ["compact-index", "--config", str(offload_case.conf_file(cfg))]
    )
    assert result.exit_code == 2 and "tieredStoreReadOnly=true" in result.output


def test_the_read_only_provider_refuses_every_write_naming_the_key() -> None:
    inner = MemoryProvider()
    inner.append("a/b", b"hello", 0)
    counts = RequestCounts()
    inner.add_request_listener(counts)
    provider = ReadOnlyProvider(inner)
    assert provider.read("a/b", 0, 5) == b"hello" and provider.size("a/b") == 5
    assert list(provider.list("a/")) == ["a/b"] and provider.exists("a/b")
    reads = sum(counts.counts.values())
    calls: dict[str, Callable[[], object]] = {
        "append": lambda: provider.append("a/b", b"!", 5),
        "append_deferred": lambda: provider.append_deferred("a/b", b"!", 5),
        "sync": lambda: provider.sync("a/b"),
        "seal": lambda: provider.seal("a/b"),
        "put": lambda: provider.put("a/b", b"x", overwrite=True),
        "delete": lambda: provider.delete("a/b"),
    }
    for name, call in calls.items():
        with pytest.raises(TierReadOnlyError, match="'a/b'") as refused:
            call()
        assert refused.value.key == "a/b" and isinstance(refused.value, PermissionError), name
    calls = {"sync_many": lambda: provider.sync_many(["a/b"]),
             "clean_temporary": provider.clean_temporary}  # fmt: skip
    for call in calls.values():
        with pytest.raises(TierReadOnlyError, match="the backend"):
            call()
    assert inner.read("a/b", 0, inner.size("a/b")) == b"hello"
    assert sum(counts.counts.values()) == reads + 2  # that read and size: no write reached it
