"""Benchmark: sequential cold catch-up of a ~1 GiB queue, and single-message fetch latencies.

Run with ``make bench`` (not part of the test run; needs ~4 GB of free disk and ~3 GB of memory).
One generated queue of :data:`SIZE_BYTES` (4 KiB bodies) is offloaded to posix and to S3 (moto
over HTTP) with 256 MiB flat commitlog segments (so most are sealed) and the default batches
(4 MiB; 64 MiB on S3, ``objectStoreGroupCommitSize``). Then, with ``tieredStorageLevel=FORCE``,
the whole queue is read from offset 0 the way a consumer catching up does (``nextBeginOffset``
after ``nextBeginOffset``, 1024 messages / 16 MiB per call):

* through :class:`TieredMessageStore` (a fresh read-ahead cache each run),
* through the HTTP API on a real uvicorn server, ``format=raw`` and JSON,
* straight from the broker's commitlog (:meth:`LocalSource.read`, the same calls) -- the baseline
  every ratio divides by.

The page cache of the broker's files and of the posix tier is dropped before each run (moto keeps
its objects in memory). Each figure is the median of :data:`REPEAT` runs. Backend requests are
counted by the provider's request listener (posix ``READ``, S3 ``GET``/``LIST``/``HEAD``).
Latency: :data:`SAMPLES` random single-message fetches with an empty cache (each a miss: one
consumequeue and one commitlog read of a 32-message window), then the same offsets again (hits).

moto keeps each object as one buffer and copies it whole for every ranged GET (a 1 KiB range of a
256 MiB object took ~220 ms here, of a 4 MiB object ~12 ms): its figures are the emulator's, not
S3's, for sealed segments.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path

import pytest
from tiered.providers import Provider
from tiered.providers import RequestCounts
from tiered.providers import build_provider
from tiered.providers.testing.servers import S3Endpoint
from tiered.providers.testing.servers import running_moto

from tiered.broker.generator import GenSpec
from tiered.broker.generator import generate_store
from tiered.config import TieredConfig
from tiered.core.sidecar import Sidecar
from tiered.http.app import create_app
from tiered.http.server import HttpServer
from tiered.read.message_store import TieredMessageStore
from tiered.source.local_source import LocalSource
from tiered.testing.http import scan_queue
from tiered.testing.page_cache import drop_cache
from tiered.testing.sample_tier import sample_config

SIZE_BYTES = int(float(os.environ.get("RMQ_BENCH_READ_GIB", "1")) * (1 << 30))
UNIT_BYTES = 4096 + 190  # a 4 KiB body plus header, topic and properties
REPEAT = int(os.environ.get("RMQ_BENCH_REPEAT", "3"))
SAMPLES = 300
BATCH, BATCH_BYTES = 1024, 16 << 20
TOPIC, QID = "GenTopic0", 0
MIB = 1 << 20


@dataclasses.dataclass
class Backend:
    name: str
    cfg: TieredConfig
    provider: Provider
    sidecar: Sidecar
    requests: Counter[str]
    tier_dir: Path | None


@dataclasses.dataclass
class Run:
    seconds: float
    nbytes: int
    messages: int
    requests: int

    @property
    def mib_s(self) -> float:
        return self.nbytes / MIB / self.seconds

    @property
    def msgs_s(self) -> float:
        return self.messages / self.seconds


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GenSpec]:
    spec = GenSpec(
        seed=7,
        topics=1,
        queues=1,
        messages=SIZE_BYTES // UNIT_BYTES,
        min_body=4096,
        max_body=4096,
        commitlog_file_size=1 << 30,
    )
    root = tmp_path_factory.mktemp("bench-read")
    generate_store(root / "store", spec)
    return root, spec


def _offload(root: Path, spec: GenSpec, name: str, **keys: str) -> Backend:
    work = root / name
    cfg = sample_config(
        root / "store",
        work,
        spec,
        name,
        tieredStorageLevel="FORCE",
        tieredStoreCommitLogMaxSize=str(256 * MIB),
        tieredStoreConsumeQueueMaxSize=str(100 * MIB),
        tieredStoreGroupCommitCount="4096",
        tieredStoreGroupCommitSize=str(4 * MIB),
        objectStoreGroupCommitSize=str(64 * MIB),  # the default (sample_config's is 64 KiB)
        tieredHttpMaxResponseBytes=str(BATCH_BYTES),
        readAheadCacheExpireDuration="600000",  # the warm pass comes long after (moto is slow)
        **keys,
    )
    provider = build_provider(cfg)
    counts = RequestCounts()
    provider.add_request_listener(counts)
    requests = counts.counts
    sidecar = Sidecar(cfg, provider).open()
    report = sidecar.dispatcher.run_pass(flush=True)
    assert report.messages == spec.messages and not report.errors
    return Backend(
        name, cfg, provider, sidecar, requests, work / "tier" if name == "posix" else None
    )


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Endpoint]:
    with running_moto() as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def backends(store_dir: tuple[Path, GenSpec], s3: S3Endpoint) -> Iterator[list[Backend]]:
    root, spec = store_dir
    made = [
        _offload(root, spec, "posix"),
        _offload(
            root,
            spec,
            "s3",
            objectStoreEndpoint=s3.url,
            objectStoreBucket=s3.new_bucket(),
            objectStoreAccessKey=s3.access_key,
            objectStoreSecretKey=s3.secret_key,
            objectStoreRegion=s3.region,
            objectStorePathStyle="true",
        ),
    ]
    yield made
    for b in made:
        b.sidecar.close()


# --- the readers ----------------------------------------------------------------------------


def scan_local(cfg: TieredConfig) -> tuple[int, int]:
    local = LocalSource(cfg)
    end = local.max_offset(TOPIC, QID)
    offset = nbytes = count = 0
    while offset < end:
        got = local.read(TOPIC, QID, offset, min(BATCH, end - offset), BATCH_BYTES)
        count += len(got)
        nbytes += sum(len(d) for _, d, _ in got)
        offset = got[-1][0] + 1
    return nbytes, count


def scan_store(store: TieredMessageStore) -> tuple[int, int]:
    end = store.get_max_offset(TOPIC, QID)
    offset = nbytes = count = 0
    while offset < end:
        r = store.get_message(TOPIC, QID, offset, BATCH, max_bytes=BATCH_BYTES)
        assert r.units and r.next_begin_offset > offset, r.status
        count += len(r.units)
        nbytes += sum(len(u.data) for u in r.units)
        offset = r.next_begin_offset
    return nbytes, count


def scan_http(server: HttpServer, end: int, fmt: str) -> tuple[int, int]:
    nbytes = count = 0
    for offset, nxt, body in scan_queue(server.port, TOPIC, QID, end, BATCH, fmt):
        if fmt == "json":
            messages = json.loads(body)["messages"]
            count += len(messages)
            nbytes += sum(m["totalSize"] for m in messages)
        else:
            count += nxt - offset
            nbytes += len(body)
    return nbytes, count


def timed(
    backend: Backend | None, cold: list[Path | None], call: Callable[[], tuple[int, int]]
) -> Run:
    gc.collect()  # the previous run's read-ahead cache (up to the whole queue) goes now
    drop_cache(*cold)
    if backend is not None:
        backend.requests.clear()
    t0 = time.perf_counter()
    nbytes, count = call()
    seconds = time.perf_counter() - t0
    requests = sum(backend.requests.values()) if backend is not None else 0
    return Run(seconds, nbytes, count, requests)


def median(runs: list[Run]) -> Run:
    return sorted(runs, key=lambda r: r.seconds)[len(runs) // 2]


def fresh_store(b: Backend) -> TieredMessageStore:
    """A read store with an empty read-ahead cache."""
    return TieredMessageStore(b.cfg, b.sidecar.flat_store, LocalSource(b.cfg))


def over_http(b: Backend, fmt: str) -> Callable[[], tuple[int, int]]:
    """A catch-up through a new server (so a new, empty cache) for each run."""

    def run() -> tuple[int, int]:
        app = create_app(
            fresh_store(b),
            status=lambda query: {},
            ready=dict,
            alive=dict,
            max_response_bytes=BATCH_BYTES,
        )
        server = HttpServer(app, "127.0.0.1", 0)
        server.start()
        try:
            flat = b.sidecar.flat_store.get(TOPIC, QID)
            assert flat is not None
            return scan_http(server, flat.commit_offset, fmt)
        finally:
            server.stop()

    return run


def measure(b: Backend, base: Run, commitlog: Path) -> list[str]:
    """One backend's rows: store API, HTTP raw, HTTP JSON."""
    rows = []
    paths: list[tuple[str, Callable[[], tuple[int, int]]]] = [
        ("store API", lambda: scan_store(fresh_store(b))),
        ("HTTP raw", over_http(b, "raw")),
        ("HTTP JSON", over_http(b, "json")),
    ]
    for label, call in paths:
        runs = [timed(b, [commitlog, b.tier_dir], call) for _ in range(REPEAT)]
        for r in runs:
            assert (r.messages, r.nbytes) == (base.messages, base.nbytes)
        m = median(runs)
        per_gib = m.requests / (m.nbytes / (1 << 30))
        rows.append(
            f"  {b.name + ' ' + label:30} {m.mib_s:8.0f} {m.msgs_s:9.0f} "
            f"{m.mib_s / base.mib_s:8.2f} {per_gib:13.0f}"
        )
    return rows


def test_cold_catch_up_and_fetch_latency(backends: list[Backend]) -> None:
    cfg = backends[0].cfg
    commitlog = cfg.store_path_root_dir / "commitlog"
    base = median([timed(None, [commitlog], lambda: scan_local(cfg)) for _ in range(REPEAT)])
    lines = [
        (
            f"\ncold sequential catch-up of one {base.nbytes / MIB:.0f} MiB queue "
            f"({base.messages} messages, 4 KiB bodies), {BATCH} messages / "
            f"{BATCH_BYTES // MIB} MiB per call, median of {REPEAT}:"
        ),
        f"  {'path':30} {'MiB/s':>8} {'msgs/s':>9} {'x local':>8} {'requests/GiB':>13}",
        (
            f"  {'local commitlog (baseline)':30} {base.mib_s:8.0f} {base.msgs_s:9.0f} "
            f"{1.0:8.2f} {'-':>13}"
        ),
    ]
    for b in backends:
        lines += measure(b, base, commitlog)
    lines.append("single-message fetches, get_message(offset, 1), ms:")
    for b in backends:
        lines += latency(b)
    print("\n".join(lines))


def latency(b: Backend) -> list[str]:
    """p50/p99 of random single-message fetches, first with an empty cache, then again."""
    flat = b.sidecar.flat_store.get(TOPIC, QID)
    assert flat is not None
    offsets = random.Random(3).sample(range(flat.commit_offset), SAMPLES)
    store = fresh_store(b)
    drop_cache(b.tier_dir)
    out = []
    for phase in ("cold cache", "warm cache"):
        b.requests.clear()
        samples = []
        for offset in offsets:
            t0 = time.perf_counter()
            r = store.get_message(TOPIC, QID, offset, 1)
            samples.append((time.perf_counter() - t0) * 1000)
            assert [u.queue_offset for u in r.units] == [offset]
        q = statistics.quantiles(samples, n=100)
        requests = sum(b.requests.values()) / SAMPLES
        out.append(
            f"  {b.name:6} {phase:11} p50 {q[49]:7.3f}  p99 {q[98]:7.3f}  "
            f"({requests:.1f} backend requests per fetch)"
        )
    return out
