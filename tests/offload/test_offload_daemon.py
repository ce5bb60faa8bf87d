"""The daemon in-process: APScheduler runs the dispatch and expiry jobs; stop is clean."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from tiered.providers import MemoryProvider

from tiered.core.daemon import Daemon
from tiered.metadata import FileSegmentType
from tiered.source.local_source import LocalSource
from tiered.testing.sample_tier import SidecarCase
from tiered.testing.tier_check import read_document


def _until(predicate: Callable[[], bool], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_the_daemon_dispatches_then_expires_and_stops_cleanly(offload_case: SidecarCase) -> None:
    store = offload_case.store()  # store times of 2023: older than any reserve time
    cfg = offload_case.config(store, tieredStoreDeleteFileInterval=300)
    provider = MemoryProvider()
    daemon = Daemon(cfg, provider)
    done: list[int] = []
    thread = threading.Thread(target=lambda: done.append(daemon.run(install_signals=False)))
    thread.start()
    try:

        def expired_everything() -> bool:
            table = read_document(cfg).segment_table(FileSegmentType.CONSUME_QUEUE)
            if len(table) != 6:
                return False
            ends = {path: max(v) + v[max(v)].size for path, v in table.items()}
            return all(sum(s.size for s in v.values()) == 0 for v in table.values()) and all(
                end // 20 == local[path] for path, end in ends.items()
            )

        source = LocalSource(cfg)
        local = {f"broker-a/{t}/{q}": source.max_offset(t, q) for t, q in source.queues()}
        _until(expired_everything)  # all offloaded, then all expired: positions kept
    finally:
        daemon.stop.set()
        thread.join(timeout=30)
    assert done == [0]
    assert list(provider.list("212d6b50_DefaultCluster/broker-a/GenTopic")) == []
    again = Daemon(cfg, provider)  # the data-dir lock was released: a new sidecar may start
    again.sidecar.open()
    again.sidecar.close()
