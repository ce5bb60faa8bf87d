"""Benchmark: what the key index costs the dispatcher, and key queries end to end.

Run with ``make bench`` (about 1-2 minutes on 2 cores). One generated store of
:data:`MESSAGES` messages (16 queues, 256-byte bodies, two KEYS tokens plus UNIQ_KEY each) is
offloaded to the memory and posix providers by an in-process dispatcher pass with the default
index configuration (5,000,000 slots, 20,000,000 items), with the index off and on, alternately,
:data:`REPEAT` times. Printed side by side: medians of the pass and their ratio; the listener's
own work in one thread (keys found in the stored units by the compiled kernel, bulk put) beside
the numpy reference and the message-by-message Python reference (each after a warm-up pass over
the same batches); then query latency over the uploaded files of a run with small index files
(one per ~24k keys).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from tiered.providers import build_provider

from tiered.broker.generator import GenSpec
from tiered.broker.generator import generate_store
from tiered.config import TieredConfig
from tiered.config import load_config
from tiered.core.sidecar import Sidecar
from tiered.file.flat_message_file import MessageBatch
from tiered.index import IndexBatch
from tiered.index.bulk_keys import index_batch_of_units
from tiered.index.key_set import key_properties
from tiered.index.numpy_keys import reference_index_batch
from tiered.source.batch_request import BatchRequest

MESSAGES = 200_000
REPEAT = 3
QUERIES = 500


def _spec() -> GenSpec:
    return GenSpec(
        seed=7, topics=2, queues=8, messages=MESSAGES, min_body=256, max_body=256,
        keys_per_message=2, commitlog_file_size=256 << 20,
    )  # fmt: skip


def _cfg(store: Path, work: Path, **keys: str) -> TieredConfig:
    settings = {
        "storePathRootDir": str(store),
        "mappedFileSizeCommitLog": str(256 << 20),
        "brokerName": "broker-a",
        "tieredDataDir": str(work / "data"),
        "tieredBackendServiceProvider": "memory",
        "tieredStoreGroupCommitTimeout": "0",
        "tieredHttpPort": "0",
        "tieredRemotingPort": "0",
        **keys,
    }
    return load_config([], env={}, overrides=settings)


def _pass(cfg: TieredConfig) -> tuple[float, float]:
    """Seconds of one full dispatcher pass."""
    with Sidecar(cfg, build_provider(cfg), lock=False) as sidecar:
        started = time.perf_counter()
        report = sidecar.dispatcher.run_pass(flush=True)
        elapsed = time.perf_counter() - started
        assert report.messages == MESSAGES
    return elapsed, 0.0


def _reference(batches: list[MessageBatch]) -> float:
    """Seconds per message of the message-by-message key path (the Python reference)."""
    t0 = time.perf_counter()
    for b in batches:
        uniq, keys = key_properties(b.data, b.starts, b.sizes)
        IndexBatch.for_queue("GenTopic0", 0, 0, b.starts, b.sizes, b.timestamps, uniq, keys)
    return (time.perf_counter() - t0) / sum(len(b) for b in batches)


def test_index_service_benchmark(tmp_path: Path) -> None:
    store = tmp_path / "store"
    t0 = time.perf_counter()
    generate_store(store, _spec())
    print(f"\ngenerated {MESSAGES} messages in {time.perf_counter() - t0:.1f} s")
    for provider in ("memory", "posix"):
        off: list[float] = []
        on: list[float] = []
        for i in range(REPEAT):
            work = tmp_path / f"{provider}{i}"
            for name, results, enable in (("off", off, "false"), ("on", on, "true")):
                cfg = _cfg(
                    store, work / name, messageIndexEnable=enable,
                    tieredBackendServiceProvider=provider, tieredStoreFilePath=str(work / name),
                )  # fmt: skip
                results.append(_pass(cfg)[0])
        m_off, m_on = statistics.median(off), statistics.median(on)
        print(f"{provider}: dispatch pass, index off: median {m_off:.2f} s "
              f"({MESSAGES / m_off:,.0f} msg/s); index on: median {m_on:.2f} s "
              f"({MESSAGES / m_on:,.0f} msg/s); ratio on/off {m_on / m_off:.2f}")  # fmt: skip

    # the listener's own work, one thread: keys found in 4096-message batches, then put
    with Sidecar(_cfg(store, tmp_path / "alone"), build_provider(_cfg(store, tmp_path / "x")),
                 lock=False) as sidecar:  # fmt: skip
        index = sidecar.index
        assert index is not None
        flat = sidecar.dispatcher.targets()[0]
        batches: list[MessageBatch] = []
        local = sidecar.local
        for start in range(0, 40_960, 4096):
            units = local.read_units(flat.topic, flat.queue_id, start, 4096)
            read = local.read_batches([BatchRequest(flat.topic, flat.queue_id, start, units)])[0][0]
            assert not isinstance(read, Exception)
            batches.append(read)
        for w in batches:  # warm-up: first touches of the batches and of the kernel's code
            index_batch_of_units(flat.topic, 0, 0, w.data, w.starts, w.sizes, w.starts, w.starts)
            reference_index_batch(flat.topic, 0, 0, w.data, w.starts, w.sizes, w.starts, w.starts)
        t0 = time.perf_counter()
        found = [
            index_batch_of_units(
                flat.topic, 0, 0, b.data, b.starts, b.sizes, b.starts, b.timestamps
            )
            for b in batches
        ]
        t1 = time.perf_counter()
        for w in batches:
            reference_index_batch(
                flat.topic, 0, 0, w.data, w.starts, w.sizes, w.starts, w.timestamps
            )
        numpy_s = time.perf_counter() - t1
        t1 = time.perf_counter()
        for b in found:
            index.local.put(b)
        t2 = time.perf_counter()
        for b in found:  # again: the file's slot-table pages are now mapped
            index.local.put(b)
        t3 = time.perf_counter()
        n = sum(len(b) for b in batches)
        print(f"listener work, one thread: keys of {n} messages in {(t1 - t0) / n * 1e6:.2f} "
              f"us/msg (compiled kernel; numpy reference {numpy_s / n * 1e6:.2f} us/msg, "
              f"Python reference {_reference(batches[:2]) * 1e6:.2f} us/msg); "
              f"put {(t2 - t1) / n * 1e6:.2f} us/msg into a new file (first touch of its 40 MB "
              f"slot table), {(t3 - t2) / n * 1e6:.2f} us/msg once mapped")  # fmt: skip

    # queries: small files so that many are uploaded
    cfg = _cfg(store, tmp_path / "query", tieredStoreIndexFileMaxIndexNum="24001",
               tieredStoreIndexFileMaxHashSlotNum="6000")  # fmt: skip
    with Sidecar(cfg, build_provider(cfg), lock=False) as sidecar:
        index = sidecar.index
        assert index is not None
        sidecar.dispatcher.run_pass(flush=True)
        t0 = time.perf_counter()
        uploads = index.compact_sealed()
        compaction = time.perf_counter() - t0
        files = len(index.uploaded.records())
        latencies = []
        for i in range(QUERIES):
            key = f"GenTopic{i % 2}-{i % 8}-{i * 37 % 10_000}-{i % 2}"
            t0 = time.perf_counter()
            hits = index.query(f"GenTopic{i % 2}", key)
            latencies.append(time.perf_counter() - t0)
            assert len(hits) <= 1
    print(f"compaction + upload of {len(uploads)} files (numpy): {compaction:.2f} s")
    print(f"query over {files} uploaded files + 1 local: median "
          f"{statistics.median(latencies) * 1000:.2f} ms, p95 "
          f"{sorted(latencies)[int(QUERIES * 0.95)] * 1000:.2f} ms")  # fmt: skip
