"""Benchmark: the ``rocketmq_tiered`` Spark data source beside the HTTP raw catch-up.

Run with ``make bench`` (not part of the test run; about 3 GB of free disk). One generated store of
:data:`SIZE_BYTES` (``RMQ_BENCH_SOURCE_GIB``, default 1 GiB; 1 KiB bodies, a tag and a key on every
message, :data:`QUEUES` queues) is offloaded to a posix tier with flat commitlog segments of
:data:`SEGMENT_BYTES` (16 MiB at 1 GiB: 16 per queue, so a time window can prune), and its key
index is sealed, compacted and uploaded. Then, in one run, side by side:

* the HTTP raw catch-up of every queue (a real ``rmq-tiered run``, ``tieredStorageLevel=FORCE``,
  1024 messages per call, one connection -- bench_replay's baseline): MB/s, and the CPU-seconds
  per GiB of the sidecar and of this reading process;
* "count by tag" through the data source on ``local[2]`` (a session started and warmed by a small
  job first), with the full schema and with ``.schema("tags string")``: MB/s (tier commitlog
  bytes over the wall seconds of the query) and CPU-seconds per GiB of this driver process, the
  JVM and every Python worker (``/proc``, the process tree below this one, the sidecar's left
  out); the ratio to HTTP (goal >= 0.8);
* a query on a time window of 1/10 of the data (``storeTimestamp`` between two times, pushed
  down): bytes the tasks read from the backend (``statsDir``) as a share of the tier (goal
  <= 15 %) and the objects they opened;
* a key lookup (``option("key", K)`` and ``where uniqKey = K``): objects the tasks read, and,
  separately, what the planning on the driver reads (the metadata mirror, the index progress
  copy, the index files) -- replayed in this process with the same options through
  :mod:`tiered.jobs.tier_scan` over a recording provider (goal <= 3 objects besides the mirror and
  the progress copy);
* the same store offloaded to moto S3 and to a Ceph RADOS Gateway (``../shared/tools/ceph-rgw``,
  about a minute to boot), with the posix tier's segments and with the default 1 GiB ones,
  scanned whole: backend requests per GiB of commitlog (goal <= 64), and the requests of one
  task by kind (the first and the last partition of queue 0 read again in this process).

The page cache of the posix tier is dropped before every timed run (and the sidecar's read-ahead
windows have expired), so every run reads the backend. A query's time runs from building the
DataFrame to the end of ``collect`` (planning included). Timed figures are medians of
:data:`REPEAT` runs, alternating; nothing timing-based is asserted (row counts are). About 6
minutes on 2 cores at 1 GiB; ``RMQ_BENCH_SOURCE_GIB=0.0625`` for a quick look.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from collections.abc import Iterator
from datetime import UTC
from datetime import datetime
from pathlib import Path
from typing import Any
from typing import TypeVar

import pytest
from tiered.jobs import tier_read
from tiered.jobs import tier_scan
from tiered.jobs.tier_scan import Bounds
from tiered.jobs.tier_scan import load_sources
from tiered.jobs.tier_scan import plan
from tiered.jobs.tier_scan import queues_of
from tiered.jobs.tier_source import TierSource
from tiered.providers import Provider
from tiered.providers import RequestCounts
from tiered.providers import WrappedProvider
from tiered.providers import build_provider
from tiered.providers.registry import from_config
from tiered.providers.testing.servers import S3Endpoint
from tiered.providers.testing.servers import running_moto
from tiered.providers.testing.servers import start_ceph
from tiered.providers.testing.servers import stop_ceph

from tiered.broker.generator import GenSpec
from tiered.broker.generator import generate_store
from tiered.config import TieredConfig
from tiered.core.sidecar import Sidecar
from tiered.metadata.models import FileSegmentType
from tiered.testing.http import scan_queue
from tiered.testing.page_cache import drop_cache
from tiered.testing.sample_tier import sample_config
from tiered.testing.sample_tier import write_conf

T = TypeVar("T")

MIB, GIB = 1 << 20, 1 << 30
SIZE_BYTES = int(float(os.environ.get("RMQ_BENCH_SOURCE_GIB", "1")) * GIB)
REPEAT = int(os.environ.get("RMQ_BENCH_REPEAT", "3"))
UNIT_BYTES = 1024 + 190  # a 1 KiB body plus header, topic and properties
TOPIC, QUEUES = "GenTopic0", 4
# 16 MiB segments at 1 GiB (16 per queue); smaller runs keep about 16 per queue (>= 1 MiB)
SEGMENT_BYTES = max(MIB, min(16 * MIB, SIZE_BYTES // QUEUES // 16 // MIB * MIB))
HTTP_BATCH = 1024
MASTER = "local[2]"
CEPH_RGW = Path(__file__).resolve().parents[2].parent / "shared" / "tools" / "ceph-rgw"
RMQ_TIERED = Path(sys.executable).parent / "rmq-tiered"


def spec() -> GenSpec:
    return GenSpec(
        seed=17, topics=1, queues=QUEUES, messages=SIZE_BYTES // UNIT_BYTES,
        min_body=1024, max_body=1024, keys_per_message=1, commitlog_file_size=1 << 30,
    )  # fmt: skip


def tier_settings(**keys: str) -> dict[str, str]:
    """Sidecar settings of every tier here: segments of :data:`SEGMENT_BYTES`, default batches,
    nothing expires, no scheduled index compaction (the fixtures compact)."""
    return {
        "tieredStorageLevel": "FORCE",
        "tieredStoreCommitLogMaxSize": str(SEGMENT_BYTES),
        "tieredStoreConsumeQueueMaxSize": str(100 * MIB),
        "tieredStoreGroupCommitCount": "4096",
        "tieredStoreGroupCommitSize": str(4 * MIB),
        "objectStoreGroupCommitSize": str(64 * MIB),
        "tieredStoreFileReservedTime": "1000000",
        "readAheadCacheExpireDuration": "2000",
        "tieredIndexCompactionIntervalMs": "0",
        "tieredStoreDispatchIntervalMs": "1000",  # the served sidecar idles beside Spark
        **keys,
    }


# --- CPU from /proc ----------------------------------------------------------------------------


def _stat(pid: int) -> tuple[int, list[str]] | None:
    """The parent pid and the fields after the command name of ``/proc/<pid>/stat``."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # gone meanwhile
        return None
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[1]), fields


def tree_cpu(exclude: set[int]) -> float:
    """CPU-seconds (user + system) of this process and every process below it (the JVM, the
    Python daemon and workers), but the subtrees of ``exclude``. Below this process the children
    they waited for count too (a worker that exited); this process's own do not."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (got := _stat(int(entry))) is not None:
            stats[int(entry)] = got
    me = os.getpid()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    ticks = 0
    todo = [me]
    while todo:
        pid = todo.pop()
        if pid in exclude or pid not in stats:
            continue
        f = stats[pid][1]
        ticks += int(f[11]) + int(f[12])  # utime, stime
        if pid != me:
            ticks += int(f[13]) + int(f[14])  # cutime, cstime
        todo += children.get(pid, [])
    return ticks / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    got = _stat(pid)
    assert got is not None
    return (int(got[1][11]) + int(got[1][12])) / os.sysconf("SC_CLK_TCK")


# --- task statistics ---------------------------------------------------------------------------


@dataclasses.dataclass
class TaskStats:
    """The ``statsDir`` files of one query, summed."""

    tasks: int = 0
    reads: int = 0
    bytes: int = 0
    requests: int = 0
    messages: int = 0
    objects: set[str] = dataclasses.field(default_factory=set)

    @classmethod
    def of(cls, directory: Path) -> TaskStats:
        out = cls()
        for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
            doc = json.loads(path.read_text())
            out.tasks += 1
            out.reads += doc["reads"]
            out.bytes += doc["bytes"]
            out.requests += doc["requests"]
            out.messages += doc["messages"]
            out.objects |= set(doc["objects"])
        return out


def kinds(objects: set[str]) -> str:
    """Objects by kind (the path component the layout names them by)."""
    count: Counter[str] = Counter()
    for key in objects:
        if key.endswith("tieredStoreMetadata.json"):
            count["metadata"] += 1
        elif "/INDEX/" in key:
            count["index"] += 1
        elif "COMMIT_LOG" in key:
            count["commitlog"] += 1
        elif "CONSUME_QUEUE" in key:
            count["consumequeue"] += 1
        else:
            count[key.rsplit("/", 1)[-1]] += 1
    return " ".join(f"{k} {v}" for k, v in sorted(count.items())) or "-"


# --- the posix tier, its sidecar and the Spark session -----------------------------------------


@dataclasses.dataclass
class Tier:
    root: Path
    store: Path
    cfg: TieredConfig
    conf: Path
    messages: int
    commitlog_bytes: int
    ends: list[int]  # per queue: one past its last queue offset
    t_min: int
    t_max: int


def tier_facts(conf: Path) -> tuple[int, list[int], int, int]:
    """Commitlog bytes, queue ends and the store time span, from the metadata mirror."""
    src = load_sources({"config": str(conf)})[0]
    table = src.doc.segment_table(FileSegmentType.COMMIT_LOG)
    records = [rec for segs in table.values() for rec in segs.values() if rec.size > 0]
    queues = sorted(queues_of([src], Bounds()), key=lambda q: q.queue_id)
    return (
        sum(r.size for r in records),
        [q.cq_end for q in queues],
        min(r.begin_timestamp for r in records),
        max(r.end_timestamp for r in records),
    )


def offload(store: Path, work: Path, provider: str, *, index: bool, **keys: str) -> Tier:
    """Offload ``store`` whole into a new tier; with ``index`` seal, compact and upload its key
    index (every queue covered)."""
    s = spec()
    cfg = sample_config(
        store, work, s, provider,
        **tier_settings(messageIndexEnable=str(index).lower(), **keys),
    )  # fmt: skip
    with Sidecar(cfg, build_provider(cfg)) as sidecar:
        report = sidecar.dispatcher.run_pass(flush=True)
        assert report.messages == s.messages and not report.errors, report
        if index:
            assert sidecar.index is not None
            sidecar.index.compactor.engine = "numpy"  # no Spark job inside the fixture
            assert sidecar.index.seal() is not None
            results = sidecar.index.compact_sealed()
            assert [r.action for r in results] == ["uploaded"], results
            sidecar.index.checkpoint()
    conf = write_conf(cfg, work / "tiered.conf")
    nbytes, ends, t_min, t_max = tier_facts(conf)
    assert sum(ends) == s.messages
    return Tier(work, store, cfg, conf, s.messages, nbytes, ends, t_min, t_max)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bench-source")
    started = time.perf_counter()
    generate_store(root / "store", spec())
    print(f"\ngenerated {SIZE_BYTES / GIB:.2f} GiB in {time.perf_counter() - started:.0f} s",
          flush=True)  # fmt: skip
    return root


@pytest.fixture(scope="module")
def tier(root: Path) -> Tier:
    started = time.perf_counter()
    t = offload(root / "store", root / "posix", "posix", index=True)
    print(f"offloaded to posix with the key index in {time.perf_counter() - started:.0f} s",
          flush=True)  # fmt: skip
    return t


@dataclasses.dataclass
class Served:
    proc: subprocess.Popen[bytes]
    http_port: int


@pytest.fixture(scope="module")
def served(tier: Tier) -> Iterator[Served]:
    """A real ``rmq-tiered run`` over the posix tier (its HTTP API)."""
    log = tier.root / "run.log"
    with log.open("wb") as err:
        proc = subprocess.Popen([RMQ_TIERED, "run", "--config", tier.conf], stderr=err)
    deadline = time.monotonic() + 120
    while not (h := re.search(r"HTTP API listening on http://[^:]+:(\d+)", log.read_text())):
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
    time.sleep(2)  # the first dispatch pass (nothing to do) and the restore are over
    yield Served(proc, int(h.group(1)))
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)


@pytest.fixture(scope="module")
def spark(tier: Tier) -> Iterator[Any]:
    """The ``local[2]`` session, the source registered and warmed by a small query on the tier."""
    from tiered.jobs.session import local_spark_session

    started = time.perf_counter()
    session = local_spark_session(MASTER, app_name="bench-tier-source")
    session.dataSource.register(TierSource)
    assert session.range(0, 1000, numPartitions=2).count() == 1000
    warm = source(session, tier.conf).where(f"queueId = 0 AND queueOffset < {HTTP_BATCH}")
    assert warm.count() == HTTP_BATCH
    print(f"Spark session started and warmed in {time.perf_counter() - started:.0f} s",
          flush=True)  # fmt: skip
    yield session
    session.stop()


def source(spark: Any, conf: Path, schema: str | None = None, **options: str) -> Any:
    reader = spark.read.format(TierSource.name()).option("config", str(conf))
    for k, v in options.items():
        reader = reader.option(k, v)
    if schema is not None:
        reader = reader.schema(schema)
    return reader.load()


# --- runs --------------------------------------------------------------------------------------


@dataclasses.dataclass
class Run:
    seconds: float
    nbytes: int
    cpu_s: float  # everything measured together
    cpu_server_s: float = 0.0  # the sidecar's share (HTTP only)
    stats: TaskStats | None = None

    @property
    def mb_s(self) -> float:
        return self.nbytes / 1e6 / self.seconds

    @property
    def cpu_per_gib(self) -> float:
        return self.cpu_s / (self.nbytes / GIB)

    @property
    def server_per_gib(self) -> float:
        return self.cpu_server_s / (self.nbytes / GIB)


def cold(tier: Tier) -> None:
    drop_cache(tier.root / "tier")
    time.sleep(3)  # the sidecar's read-ahead windows of the last run have expired


def http_run(tier: Tier, served: Served) -> Run:
    cold(tier)
    me, server = tree_cpu({served.proc.pid}), cpu_seconds(served.proc.pid)
    started = time.perf_counter()
    nbytes = messages = 0
    for qid, end in enumerate(tier.ends):
        for offset, nxt, body in scan_queue(served.http_port, TOPIC, qid, end, HTTP_BATCH, "raw"):
            nbytes += len(body)
            messages += nxt - offset
    seconds = time.perf_counter() - started
    assert messages == tier.messages
    server = cpu_seconds(served.proc.pid) - server
    me = tree_cpu({served.proc.pid}) - me
    return Run(seconds, nbytes, me + server, server)


def count_by_tag(
    spark: Any, tier: Tier, schema: str | None, stats: Path, exclude: set[int]
) -> tuple[Run, dict[str, int]]:
    cold(tier)
    cpu = tree_cpu(exclude)
    started = time.perf_counter()
    rows = source(spark, tier.conf, schema, statsDir=str(stats)).groupBy("tags").count().collect()
    seconds = time.perf_counter() - started
    cpu = tree_cpu(exclude) - cpu
    counts = {str(r["tags"]): int(r["count"]) for r in rows}
    assert sum(counts.values()) == tier.messages, counts
    return Run(seconds, tier.commitlog_bytes, cpu, stats=TaskStats.of(stats)), counts


# --- what the driver reads while planning (replayed here) --------------------------------------


class Recording(WrappedProvider):
    """Records the keys of every call (a real wrapper around a real provider)."""

    def __init__(self, inner: Provider, calls: list[tuple[str, str]]) -> None:
        super().__init__(inner)
        self.calls = calls

    def _around(self, operation: str, key: str, call: Callable[[], T]) -> T:
        self.calls.append((operation, key))
        return call()


def planned(
    monkeypatch: pytest.MonkeyPatch, options: dict[str, str], uniq: str | None = None
) -> tuple[list[tier_scan.Partition], set[str], int]:
    """What the driver does for a query with ``options`` (and a pushed ``uniqKey = uniq``): load
    the sources, plan; the partitions, the objects it touched and its backend requests (every
    provider the planning opens records)."""
    calls: list[tuple[str, str]] = []
    counts = RequestCounts()

    def recording(cfg: TieredConfig) -> Provider:
        provider = from_config(cfg)
        provider.add_request_listener(counts)
        return Recording(provider, calls)

    with monkeypatch.context() as m:
        m.setattr(tier_scan, "from_config", recording)
        sources = load_sources(options)
        bounds = Bounds.from_options(options)
        parts = plan(sources, bounds if uniq is None else bounds.narrow(uniq_keys=[uniq]))
    return parts, {k for _, k in calls}, sum(counts.counts.values())


# --- the benchmark -----------------------------------------------------------------------------


def median(runs: list[Run], what: Callable[[Run], float]) -> float:
    return statistics.median(what(r) for r in runs)


def test_tier_source_vs_http_raw(
    tier: Tier,
    served: Served,
    spark: Any,
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = Printed()
    gib = tier.commitlog_bytes / GIB
    segments = -(-tier.commitlog_bytes // SEGMENT_BYTES)
    out(f"\ntier source (Spark {MASTER}) vs HTTP raw catch-up: {gib:.2f} GiB of commitlog "
        f"({tier.messages} messages of 1 KiB, {QUEUES} queues, ~{segments} segments of "
        f"{SEGMENT_BYTES // MIB} MiB), posix, cold page cache, medians of {REPEAT}")  # fmt: skip
    exclude = {served.proc.pid}
    runs: dict[str, list[Run]] = {"http": [], "full": [], "tags": []}
    tags: dict[str, dict[str, int]] = {}
    for i in range(REPEAT):
        runs["http"].append(http_run(tier, served))
        for name, schema in (("full", None), ("tags", "tags string")):
            run, tags[name] = count_by_tag(spark, tier, schema, root / f"stats-{name}-{i}", exclude)
            runs[name].append(run)
    assert tags["full"] == tags["tags"]
    http_mb = median(runs["http"], lambda r: r.mb_s)
    out(f"{'reader':<34}{'MB/s':>8}{'CPU-s/GiB':>11}{'  goal / notes'}")
    out(f"{'HTTP raw catch-up, 1024/call':<34}{http_mb:>8.1f}"
        f"{median(runs['http'], lambda r: r.cpu_per_gib):>11.2f}  sidecar "
        f"{median(runs['http'], lambda r: r.server_per_gib):.2f} + reader, "
        f"{median(runs['http'], lambda r: r.nbytes) / MIB:.0f} MiB of raw units")  # fmt: skip
    for name, label in (("full", "count by tag, full schema"), ("tags", "count by tag, tags only")):
        mb = median(runs[name], lambda r: r.mb_s)
        st = runs[name][-1].stats
        assert st is not None
        out(f"{label:<34}{mb:>8.1f}{median(runs[name], lambda r: r.cpu_per_gib):>11.2f}  "
            f"ratio to HTTP {mb / http_mb:.2f} (goal >= 0.8); {st.tasks} tasks read "
            f"{st.bytes / tier.commitlog_bytes:.1%} of the tier in {st.reads} reads")  # fmt: skip
    out(f"  (wall seconds: HTTP {[round(r.seconds, 1) for r in runs['http']]}, full "
        f"{[round(r.seconds, 1) for r in runs['full']]}, tags "
        f"{[round(r.seconds, 1) for r in runs['tags']]}; rows by tag "
        f"{dict(sorted(tags['tags'].items()))})")  # fmt: skip

    # a time window of 1/10 of the data, pushed down
    span = tier.t_max - tier.t_min
    lo = tier.t_min + span * 45 // 100
    hi = lo + span // 10
    from pyspark.sql import functions as F  # noqa: N812 (Spark's convention)

    stats = root / "stats-window"
    cold(tier)
    started = time.perf_counter()
    in_window = (
        source(spark, tier.conf, statsDir=str(stats))
        .where(F.col("storeTimestamp") >= F.lit(_utc(lo)))
        .where(F.col("storeTimestamp") < F.lit(_utc(hi)))
        .count()
    )
    seconds = time.perf_counter() - started
    st = TaskStats.of(stats)
    by_option = source(spark, tier.conf, "storeTimestamp timestamp", since=str(lo), until=str(hi))
    assert by_option.count() == in_window
    assert 0.08 * tier.messages < in_window < 0.12 * tier.messages, in_window
    cl = {k for k in st.objects if "COMMIT_LOG" in k}
    out(f"time window 1/10 (where storeTimestamp >= a and < b): {in_window} rows "
        f"({in_window / tier.messages:.1%}) in {seconds:.1f} s; the tasks read "
        f"{st.bytes / MIB:.1f} MiB = {st.bytes / tier.commitlog_bytes:.1%} of the tier "
        f"(goal <= 15%) in {st.reads} reads from {len(st.objects)} objects ({kinds(st.objects)}) "
        f"of {segments} commitlog segments; {st.tasks} tasks")  # fmt: skip
    assert len(cl) < segments

    # key lookups on the uploaded key index
    columns = "queueId int, queueOffset bigint, uniqKey string, keys array<string>"
    where = f"queueId = 1 AND queueOffset = {tier.ends[1] // 2}"
    pick = source(spark, tier.conf, columns).where(where).collect()
    assert len(pick) == 1
    uniq, token = str(pick[0]["uniqKey"]), str(pick[0]["keys"][0])
    cases: list[tuple[str, dict[str, str], str | None]] = [
        ("option key=UNIQ_KEY", {"key": uniq}, None),
        ("where uniqKey = K", {}, uniq),
        ("option key=KEYS token", {"key": token}, None),
    ]
    for n, (label, options, pushed) in enumerate(cases):
        stats = root / f"stats-key-{n}"
        cold(tier)
        started = time.perf_counter()
        df = source(spark, tier.conf, statsDir=str(stats), **options)
        if pushed is not None:
            df = df.where(F.col("uniqKey") == pushed)
        rows = df.collect()
        seconds = time.perf_counter() - started
        found = [(r["queueId"], r["queueOffset"]) for r in rows]
        assert (1, tier.ends[1] // 2) in found and (len(found) == 1 or pushed is None), found
        st = TaskStats.of(stats)
        parts, driver, driver_requests = planned(
            monkeypatch, {"config": str(tier.conf), **options}, pushed
        )
        scans = sum(1 for p in parts if not p.hits)
        besides = {
            k
            for k in driver | st.objects
            if not k.endswith("tieredStoreMetadata.json") and "progress" not in k.lower()
        }
        out(f"key lookup, {label:<22} {len(rows)} row(s) in {seconds:.1f} s; tasks: "
            f"{st.tasks}, {len(st.objects)} object(s) ({kinds(st.objects)}), {st.reads} reads, "
            f"{st.bytes / 1024:.0f} KiB; planning (driver): {len(parts)} partitions ({scans} "
            f"scans), {len(driver)} object(s) ({kinds(driver)}), {driver_requests} requests; "
            f"objects besides the mirror and the progress copy: {len(besides)} "
            "(goal <= 3)")  # fmt: skip

    out.flush()


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


# --- S3: requests per GiB of a full scan -------------------------------------------------------


@pytest.fixture(scope="module")
def servers() -> Iterator[list[S3Endpoint]]:
    with running_moto() as moto:
        ceph_dir = Path(tempfile.mkdtemp(prefix="bench-rgw-"))
        ceph, env = start_ceph(CEPH_RGW, ceph_dir)
        try:
            yield [moto, ceph]
        finally:
            stop_ceph(CEPH_RGW, ceph_dir, env)
            shutil.rmtree(ceph_dir, ignore_errors=True)  # 2+ GiB of objects at 1 GiB


def test_tier_source_s3_requests(
    root: Path, spark: Any, servers: list[S3Endpoint], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = Printed()
    out(f"\ntier source, count by tag (full schema) on S3, {SIZE_BYTES / GIB:.2f} GiB store, "
        "64 MiB object-store batches: backend requests per GiB of commitlog")  # fmt: skip
    for endpoint in servers:
        for segment in (SEGMENT_BYTES, 1 << 30):  # the posix tier's segments; the default
            started = time.perf_counter()
            t = offload(
                root / "store", root / f"{endpoint.name}-{segment}", "s3", index=False,
                tieredStoreCommitLogMaxSize=str(segment),
                **endpoint.config_keys(endpoint.new_bucket()),
            )  # fmt: skip
            built = time.perf_counter() - started
            stats = root / f"stats-{endpoint.name}-{segment}"
            started = time.perf_counter()
            rows = source(spark, t.conf, statsDir=str(stats)).groupBy("tags").count().collect()
            seconds = time.perf_counter() - started
            assert sum(int(r["count"]) for r in rows) == t.messages
            st = TaskStats.of(stats)
            parts, _, driver_requests = planned(monkeypatch, {"config": str(t.conf)})
            gib = t.commitlog_bytes / GIB
            out(f"  {endpoint.name:<5}{segment // MIB:>5} MiB segments: {st.requests / gib:6.1f} "
                f"requests/GiB (goal <= 64): {st.tasks} tasks, {st.requests} requests for "
                f"{st.reads} reads of {len(st.objects)} objects ({kinds(st.objects)}); planning "
                f"(driver) {driver_requests}; {t.commitlog_bytes / 1e6 / seconds:.0f} MB/s in "
                f"{seconds:.1f} s (offload {built:.0f} s)")  # fmt: skip
            out(f"{'':12}one task by request kind: {per_partition(t, parts)}")
    out.flush()


def per_partition(t: Tier, parts: list[tier_scan.Partition]) -> str:
    """The requests of reading the first and the last partition of queue 0 here (what each task
    does), by operation."""
    src = load_sources({"config": str(t.conf)})
    q0 = [p for p in parts if p.queue.queue_id == 0]
    out = []
    for label, part in (("first", q0[0]), ("last", q0[-1])):
        counts = RequestCounts()
        with src[0].provider() as provider:
            provider.add_request_listener(counts)
            reader = tier_read.PartitionReader(provider, ["tags"])
            for _ in reader.read(part):
                pass
        ops = " ".join(f"{k} {v}" for k, v in sorted(counts.counts.items()))
        out.append(f"{label} ({reader.stats.reads} reads) {ops}")
    return "; ".join(out)


class Printed:
    """Lines printed as they come (a long run shows its figures as it goes), then again together
    at the end (one table)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        print(line, flush=True)
        self.lines.append(line)

    def flush(self) -> None:
        print("\n".join(["", "=" * 20, *self.lines]), flush=True)
