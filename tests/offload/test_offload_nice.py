"""``tieredOffloadNice``: the offload's own threads run at a lower CPU priority, the threads that
serve reads at the process's. Nice values are read from ``/proc/self/task/<tid>/stat``."""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.request
from collections.abc import Callable

import pytest
from tiered.providers import MemoryProvider

from tiered.broker import coalesce
from tiered.config import TieredConfig
from tiered.core.daemon import Daemon
from tiered.errors import ConfigError
from tiered.http.service import http_service
from tiered.process.offload_priority import lower_thread_priority
from tiered.source.local_source import LocalSource
from tiered.testing.sample_tier import SidecarCase

OFFLOAD_THREADS = (
    "tiered-pass",
    "tiered-dispatch",
    "tiered-commit",
    "tiered-index-progress",
)


def nice_of(native_id: int) -> int:
    """Field 19 of ``/proc/self/task/<tid>/stat`` (fields 3.. follow the parenthesised name)."""
    with open(f"/proc/self/task/{native_id}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[16])


def nices() -> dict[str, int]:
    """Every live Python thread's nice value, by thread name."""
    return {t.name: nice_of(t.native_id) for t in threading.enumerate() if t.native_id is not None}


def _until(predicate: Callable[[], bool], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux /proc")
def test_offload_threads_run_at_the_configured_nice_and_serving_threads_do_not(
    offload_case: SidecarCase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(coalesce, "SPLIT_BYTES", 1)  # every commitlog range read by two threads
    base = nice_of(threading.get_native_id())
    store = offload_case.store()
    cfg = offload_case.config(store, tieredOffloadNice=7)
    daemon = Daemon(cfg, MemoryProvider())
    server = http_service(daemon)
    daemon.services.append(server)
    local = LocalSource(cfg)
    tops = {(t, q): local.max_offset(t, q) for t, q in local.queues()}
    thread = threading.Thread(target=daemon.run, kwargs={"install_signals": False})
    thread.start()
    try:

        def offloaded_and_indexed() -> bool:
            flats = {
                (f.topic, f.queue_id): f.commit_offset for f in daemon.sidecar.flat_store.files()
            }
            index = daemon.sidecar.index
            return (
                flats == tops
                and index is not None
                and all(index.progress.get(t, q) == end for (t, q), end in tops.items())
            )

        _until(offloaded_and_indexed)
        topic, qid = next(iter(tops))
        url = f"{server.url}/v1/topics/{topic}/queues/{qid}/messages?offset=0&maxCount=64"
        with urllib.request.urlopen(url, timeout=10) as response:  # a consumer's read, local
            assert len(json.loads(response.read())["messages"]) == 64
        seen = nices()
    finally:
        daemon.stop.set()
        thread.join(timeout=30)
    offload = {n: v for n, v in seen.items() if n.startswith(OFFLOAD_THREADS)}
    for prefix in OFFLOAD_THREADS:  # each kind was started and is at the configured value
        assert any(n.startswith(prefix) for n in offload), f"no {prefix} thread: {sorted(seen)}"
    assert set(offload.values()) == {max(base, 7)}, offload
    serving = {n: v for n, v in seen.items() if n not in offload}
    assert "tiered-http" in serving
    assert set(serving.values()) == {base}, serving


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux /proc")
def test_a_thread_is_never_raised_above_the_priority_it_has() -> None:
    got: list[int] = []

    def run() -> None:
        me = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, me, max(nice_of(me), 15))
        lower_thread_priority(10)  # lower than it is: left alone, no error
        got.append(nice_of(me))
        lower_thread_priority(17)
        got.append(nice_of(me))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert got == [15, 17]


@pytest.mark.parametrize("value", ["20", "-1", "low"])
def test_a_bad_nice_value_names_the_key_and_the_fix(value: str) -> None:
    with pytest.raises(ConfigError) as e:
        TieredConfig.from_properties({"tieredOffloadNice": value})
    assert f"tieredOffloadNice={value!r} " in str(e.value)
    assert "(allowed: 0..19): set a Linux nice value, 0 for the process's own" in str(e.value)


def test_the_default_is_10() -> None:
    assert TieredConfig.from_properties({}).tiered_offload_nice == 10
