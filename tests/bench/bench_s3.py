"""Benchmark: what S3 costs in requests, on moto and on a real Ceph RADOS Gateway (``make bench``).

With default settings (only the endpoint keys set):

* **backlog**: a store of old messages (``RMQ_BENCH_S3_GIB``, default 1 GiB, 1 KiB bodies, 16
  queues) offloaded by one ``run_pass`` -- requests per GiB by operation, MB/s;
* **live tail** at 1 and 10 MB/s: messages appended to the broker store in steps of 5 simulated
  seconds and a dispatch round after each, on a simulated clock (the store time of the newest
  message), until ``RMQ_BENCH_TAIL_GIB`` (default 0.5) GiB arrived; requests per GiB. Message
  bodies are sized so the generator's 500 messages per second make the rate;
* the same backlog with 64 MiB flat commitlog segments, so every queue seals segments: the seal's
  share (a default 1 GiB segment seals once per GiB of a queue);
* **catch-up**: every queue read whole from offset 0 over the HTTP API (``format=raw``,
  ``tieredStorageLevel=FORCE``, ``maxCount=65536``: what the sidecar has read ahead, up to 16 MiB,
  per call; and again at 1024 messages per call, the most a JSON answer carries) and over the
  replay port (``PULL_MESSAGE`` through ``tiered.remoting.client.RemotingClient``, 1024 per pull,
  ``nextBeginOffset`` after ``nextBeginOffset``), each by a consumer process and a freshly opened
  sidecar (nothing remembered, empty caches), and through the store API in the sidecar's process
  (``get_message``, no hop: what the read path itself costs), against plain boto3 ranged GETs of
  16 MiB over the same objects: requests per GiB, MB/s, the ratio to boto3 and the sidecar's
  CPU-seconds per GiB. ``RMQ_BENCH_S3_REPEAT`` rounds (default 3) of the five, one after the
  other, give medians and each round's ratios (the machine is shared and noisy: a ratio is only
  worth quoting between runs of the same round);
* **one queue**: a queue of ``RMQ_BENCH_S3_QUEUE_MIB`` (default 300) MiB alone, offloaded and read
  whole over HTTP by a fresh sidecar: the requests per GiB of a catch-up of a few hundred MB;
* single-message cold fetches (``get_message(offset, 1)``, empty cache) on S3 and on posix: p50
  and p99 in ms.

``RMQ_BENCH_S3_CATCH_UP_ONLY=1`` skips the 64 MiB segments, the live tails and the latencies
(for iterating on the read path).

Ceph RGW is booted from ``../shared/tools/ceph-rgw`` (about a minute).
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from pathlib import Path

import pytest
from tiered.providers import Provider
from tiered.providers import RequestCounts
from tiered.providers import build_provider
from tiered.providers.testing.servers import S3Endpoint
from tiered.providers.testing.servers import running_moto
from tiered.providers.testing.servers import start_ceph
from tiered.providers.testing.servers import stop_ceph

from tiered.broker.generator import GenSpec
from tiered.broker.generator import generate_store
from tiered.config import TieredConfig
from tiered.config import load_config
from tiered.core.sidecar import Sidecar
from tiered.http.app import MAX_RAW_COUNT_LIMIT
from tiered.http.app import create_app
from tiered.http.server import HttpServer
from tiered.process import allocator
from tiered.read.message_store import TieredMessageStore
from tiered.remoting.groups import ReplayOffsets
from tiered.remoting.handlers import Replay
from tiered.remoting.naming import Naming
from tiered.remoting.server import RemotingServer
from tiered.source.local_source import LocalSource

GIB = 1 << 30
MIB = 1 << 20
BACKLOG_GIB = float(os.environ.get("RMQ_BENCH_S3_GIB", "1"))
TAIL_GIB = float(os.environ.get("RMQ_BENCH_TAIL_GIB", "0.5"))
REPEAT = int(os.environ.get("RMQ_BENCH_S3_REPEAT", "3"))
QUEUE_MIB = float(os.environ.get("RMQ_BENCH_S3_QUEUE_MIB", "300"))
CATCH_UP_ONLY = os.environ.get("RMQ_BENCH_S3_CATCH_UP_ONLY", "") not in ("", "0")
QUEUES = 16
UNIT = 1024 + 200  # a 1 KiB body plus header, topic and properties
STEP_S = 5
GEN_RATE = 500  # messages per simulated second (the generator spaces them ~2 ms apart)
SAMPLES = 200
READ_BATCH, READ_BYTES = 1024, 16 * MIB
CEPH_RGW = Path(__file__).resolve().parents[2].parent / "shared" / "tools" / "ceph-rgw"


@pytest.fixture(scope="module")
def servers() -> Iterator[list[S3Endpoint]]:
    with running_moto() as moto:
        ceph_dir = Path(tempfile.mkdtemp(prefix="bench-rgw-"))
        ceph, env = start_ceph(CEPH_RGW, ceph_dir)
        try:
            yield [moto, ceph]
        finally:
            stop_ceph(CEPH_RGW, ceph_dir, env)
            shutil.rmtree(ceph_dir, ignore_errors=True)  # ~1.4 GB of RADOS data per run


def settings(store: Path, work: Path, endpoint: S3Endpoint | None, **keys: str) -> TieredConfig:
    """Default settings but for the broker, the directories and the backend."""
    values = {
        "storePathRootDir": str(store),
        "brokerClusterName": "DefaultCluster",
        "brokerName": "broker-a",
        "tieredDataDir": str(work / "data"),
        "tieredStorageLevel": "FORCE",
        "tieredHttpMaxResponseBytes": str(READ_BYTES),
    }
    if endpoint is None:
        values |= {"tieredBackendServiceProvider": "posix", "tieredStoreFilePath": str(work / "t")}
    else:
        values |= {"tieredBackendServiceProvider": "s3"} | endpoint.config_keys(
            endpoint.new_bucket()
        )
    return load_config([], env={}, overrides=values | keys)


def counted(cfg: TieredConfig) -> tuple[Provider, Counter[str]]:
    provider = build_provider(cfg)
    counts = RequestCounts()
    provider.add_request_listener(counts)
    requests = counts.counts
    return provider, requests


def per_gib(requests: Counter[str], nbytes: int) -> str:
    total = sum(requests.values())
    ops = " ".join(f"{k}={v * GIB / nbytes:.0f}" for k, v in sorted(requests.items()))
    return f"{total * GIB / nbytes:7.0f}  {ops}"


def backlog_spec(queues: int = QUEUES, gib: float = BACKLOG_GIB) -> GenSpec:
    return GenSpec(
        seed=3,
        topics=1,
        queues=queues,
        messages=int(gib * GIB / UNIT),
        min_body=1024,
        max_body=1024,
        keys_per_message=2,
    )


@pytest.fixture(scope="module")
def backlog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    allocator.tune()  # the sidecars below run in this process: as every rmq-tiered command does
    root = tmp_path_factory.mktemp("bench-s3")
    generate_store(root / "store", backlog_spec())
    return root


@dataclasses.dataclass
class Offloaded:
    """A backlog offload: the still open sidecar and what it cost."""

    sidecar: Sidecar
    cfg: TieredConfig
    requests: Counter[str]
    nbytes: int
    seconds: float


def offload_backlog(
    root: Path,
    endpoint: S3Endpoint | None,
    name: str,
    store: str = "store",
    spec: GenSpec | None = None,
    **keys: str,
) -> Offloaded:
    work = root / name
    cfg = settings(root / store, work, endpoint, **keys)
    provider, requests = counted(cfg)
    sidecar = Sidecar(cfg, provider).open()
    started = time.perf_counter()
    report = sidecar.dispatcher.run_pass()  # old messages: no hold, no flush needed
    seconds = time.perf_counter() - started
    expected = (spec or backlog_spec()).messages
    assert not report.errors and report.messages == expected, report
    return Offloaded(sidecar, cfg, requests, report.bytes, seconds)


def tail(root: Path, endpoint: S3Endpoint, mb_s: int) -> str:
    """A live tail at ``mb_s`` MB/s on a simulated clock; requests per GiB."""
    body = mb_s * 1_000_000 // GEN_RATE - 200
    store = root / f"tail-{endpoint.name}-{mb_s}-store"
    work = root / f"tail-{endpoint.name}-{mb_s}"
    start = int(time.time() * 1000) - 3_600_000
    spec = GenSpec(
        seed=mb_s,
        topics=1,
        queues=QUEUES,
        messages=GEN_RATE * STEP_S,
        min_body=body,
        max_body=body,
        start_ms=start,
        commitlog_file_size=64 * MIB,  # an append rescans the last file: keep it small
    )
    generate_store(store, spec)
    cfg = settings(store, work, endpoint)
    provider, requests = counted(cfg)
    clock = [start + STEP_S * 1000]
    sidecar = Sidecar(cfg, provider).open()
    sidecar.dispatcher.clock = lambda: clock[0]
    sent = 0
    total = int(TAIL_GIB * GIB)
    while sent < total:
        sent += sidecar.dispatcher.run_pass().bytes
        clock[0] += STEP_S * 1000
        generate_store(store, dataclasses.replace(spec, append=True, start_ms=clock[0] - 10_000))
    sidecar.close()
    return f"  live tail {mb_s:2d} MB/s   {sent / MIB:7.0f} MiB  {per_gib(requests, sent)}"


CLIENT = """
import http.client, sys, time
port, count, queues = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
ends = [int(e) for e in sys.argv[4:]]
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
buffer = bytearray()  # each body received into the same memory, as the replay reader does
nbytes, started = 0, time.perf_counter()
for qid in range(queues):
    offset = 0
    while offset < ends[qid]:
        path = f"/v1/topics/GenTopic0/queues/{qid}/messages?offset={offset}"
        conn.request("GET", f"{path}&maxCount={count}&format=raw")
        response = conn.getresponse()
        assert response.status == 200, response.read()[:200]
        size = int(response.getheader("Content-Length"))
        if len(buffer) < size:
            buffer = bytearray(size)
        view = memoryview(buffer)[:size]
        got = 0
        while got < size:
            n = response.readinto(view[got:])
            assert n, "the response ended early"
            got += n
        nxt = int(response.getheader("X-Next-Begin-Offset"))
        assert nxt > offset
        nbytes, offset = nbytes + size, nxt
print(nbytes, time.perf_counter() - started)
"""


def _consume(
    sidecar: Sidecar,
    requests: Counter[str],
    client: str,
    port: int,
    stop: Callable[[], None],
    args: tuple[str, ...] = (),
) -> tuple[int, float, float]:
    """Run ``client`` (a consumer process reading every queue whole from ``port``; ``args``
    after the port) against a started server, then ``stop`` it; bytes, seconds, this process's
    CPU-seconds."""
    queues = len(sidecar.flat_store.metadata.queues("GenTopic0"))
    ends = []
    for qid in range(queues):
        flat = sidecar.flat_store.get("GenTopic0", qid)
        assert flat is not None
        ends.append(str(flat.commit_offset))
    requests.clear()
    cpu = _cpu()
    try:
        out = subprocess.run(
            [sys.executable, "-c", client, str(port), *args, str(queues), *ends],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    finally:
        stop()
    return int(out[0]), float(out[1]), _cpu() - cpu


def catch_up(
    sidecar: Sidecar, cfg: TieredConfig, requests: Counter[str], count: int = MAX_RAW_COUNT_LIMIT
) -> tuple[int, float, float]:
    """Every queue read whole over HTTP raw, ``maxCount=count`` a request (by default the most a
    raw answer carries: a catch-up takes what the sidecar has read ahead, up to 16 MiB), by a
    consumer process (as a real one is), from a fresh store (empty caches); bytes, seconds, the
    sidecar's CPU-seconds."""
    store = TieredMessageStore(cfg, sidecar.flat_store, LocalSource(cfg))
    app = create_app(
        store, status=lambda query: {}, ready=dict, alive=dict, max_response_bytes=READ_BYTES
    )
    server = HttpServer(app, "127.0.0.1", 0)
    server.start()
    return _consume(sidecar, requests, CLIENT, server.port, server.stop, (str(count),))


REPLAY_CLIENT = """
import sys, time
from tiered.remoting.client import RemotingClient
from tiered.remoting.codes import RequestCode, ResponseCode
port, queues, ends = int(sys.argv[1]), int(sys.argv[2]), [int(e) for e in sys.argv[3:]]
nbytes, started = 0, time.perf_counter()
with RemotingClient("127.0.0.1", port, timeout_s=300) as c:
    for qid in range(queues):
        offset = 0
        while offset < ends[qid]:
            r = c.call(
                RequestCode.PULL_MESSAGE, consumerGroup="bench", topic="GenTopic0", queueId=qid,
                queueOffset=offset, maxMsgNums=READ_BATCH, sysFlag=0, commitOffset=0,
                suspendTimeoutMillis=0,
            )
            assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
            nxt = int(r.ext_fields["nextBeginOffset"])
            assert nxt > offset
            nbytes, offset = nbytes + len(r.body), nxt
print(nbytes, time.perf_counter() - started)
""".replace("READ_BATCH", str(READ_BATCH))


def catch_up_replay(
    sidecar: Sidecar, cfg: TieredConfig, requests: Counter[str]
) -> tuple[int, float, float]:
    """Every queue read whole over the replay port (PULL_MESSAGE, 1024 per pull) by a consumer
    process, from a fresh store (empty caches); bytes, seconds, the sidecar's CPU-seconds."""
    store = TieredMessageStore(cfg, sidecar.flat_store, LocalSource(cfg))
    with tempfile.TemporaryDirectory(prefix="bench-s3-offsets-") as where:
        offsets = ReplayOffsets(Path(where))
        offsets.load()
        holder: list[RemotingServer] = []
        naming = Naming(cfg, store, lambda: holder[0].address, None)
        server = RemotingServer(Replay(cfg, store, naming, offsets=offsets), "127.0.0.1", 0)
        holder.append(server)
        server.start()
        return _consume(sidecar, requests, REPLAY_CLIENT, server.port, server.stop)


def catch_up_in_process(sidecar: Sidecar, cfg: TieredConfig) -> tuple[int, float, float]:
    """The same reads through the store API in this process; bytes, seconds, CPU-seconds."""
    store = TieredMessageStore(cfg, sidecar.flat_store, LocalSource(cfg))
    nbytes, started, cpu = 0, time.perf_counter(), _cpu()
    for qid in range(QUEUES):
        flat = sidecar.flat_store.get("GenTopic0", qid)
        assert flat is not None
        offset = 0
        while offset < flat.commit_offset:
            got = store.get_message("GenTopic0", qid, offset, READ_BATCH, max_bytes=READ_BYTES)
            assert got.next_begin_offset > offset, got
            nbytes, offset = nbytes + len(got.body()), got.next_begin_offset
    return nbytes, time.perf_counter() - started, _cpu() - cpu


def _cpu() -> float:
    """This process's CPU-seconds (user + system), children not included."""
    t = os.times()
    return t.user + t.system


def _machine() -> float:
    """CPU-seconds the whole machine was busy so far (not idle, not waiting on I/O): S3 server,
    sidecar and consumer share these cores, so a door that keeps them all busy is bound by the
    CPU it and the server spend per GiB, not by how it asks."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def boto3_baseline(cfg: TieredConfig) -> tuple[int, float]:
    """Plain boto3 ranged GETs of 16 MiB over every commitlog object of the bucket."""
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=cfg.object_store_endpoint,
        aws_access_key_id=cfg.object_store_access_key,
        aws_secret_access_key=cfg.object_store_secret_key.get_secret_value(),
        region_name=cfg.object_store_region,
    )
    bucket = cfg.object_store_bucket
    objects = [
        o for o in client.list_objects_v2(Bucket=bucket)["Contents"] if "COMMIT_LOG" in o["Key"]
    ]
    nbytes = 0
    started = time.perf_counter()
    for o in objects:
        for at in range(0, o["Size"], 16 * MIB):
            end = min(at + 16 * MIB, o["Size"]) - 1
            got = client.get_object(Bucket=bucket, Key=o["Key"], Range=f"bytes={at}-{end}")
            nbytes += len(got["Body"].read())
    return nbytes, time.perf_counter() - started


def fetch_latency(sidecar: Sidecar, cfg: TieredConfig, label: str) -> str:
    store = TieredMessageStore(cfg, sidecar.flat_store, LocalSource(cfg))
    flat = sidecar.flat_store.get("GenTopic0", 0)
    assert flat is not None
    samples = []
    for offset in random.Random(1).sample(range(flat.commit_offset), SAMPLES):
        t0 = time.perf_counter()
        got = store.get_message("GenTopic0", 0, offset, 1)
        samples.append((time.perf_counter() - t0) * 1000)
        assert [u.queue_offset for u in got.units] == [offset]
    q = statistics.quantiles(samples, n=100)
    return f"  {label:16} cold single-message fetch p50 {q[49]:7.2f} ms  p99 {q[98]:7.2f} ms"


class Printed(list[str]):
    """Lines printed as they are added (a long run shows its figures as it goes)."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        self += lines

    def append(self, line: str) -> None:
        print(line, flush=True)
        super().append(line)

    def __iadd__(self, lines: Iterable[str]) -> Printed:  # type: ignore[override,misc]
        for line in lines:
            self.append(line)
        return self


@dataclasses.dataclass
class Reading:
    """One catch-up: bytes, seconds, the sidecar's CPU-seconds, its requests."""

    nbytes: int
    seconds: float
    cpu: float
    requests: Counter[str]
    machine: float = 0.0
    """The whole machine's busy CPU-seconds over it."""

    @property
    def mb_s(self) -> float:
        return self.nbytes / 1e6 / self.seconds

    @property
    def cpu_per_gib(self) -> float:
        return self.cpu * GIB / self.nbytes

    @property
    def machine_per_gib(self) -> float:
        return self.machine * GIB / self.nbytes

    @property
    def cores(self) -> float:
        """Cores the machine kept busy on average."""
        return self.machine / self.seconds


def fresh_read(
    cfg: TieredConfig,
    how: Callable[[Sidecar, TieredConfig, Counter[str]], tuple[int, float, float]],
) -> Reading:
    """``how`` run by a sidecar opened afresh (a restarted one: it remembers nothing), its
    requests counted from the first read on."""
    provider, requests = counted(cfg)
    sidecar = Sidecar(cfg, provider).open()
    try:
        requests.clear()
        machine = _machine()
        nbytes, seconds, cpu = how(sidecar, cfg, requests)
        return Reading(nbytes, seconds, cpu, Counter(requests), _machine() - machine)
    finally:
        sidecar.close()


def in_process(sidecar: Sidecar, cfg: TieredConfig, _: Counter[str]) -> tuple[int, float, float]:
    return catch_up_in_process(sidecar, cfg)


def catch_up_1024(
    sidecar: Sidecar, cfg: TieredConfig, requests: Counter[str]
) -> tuple[int, float, float]:
    """:func:`catch_up` at 1024 messages a request (the most a JSON answer carries)."""
    return catch_up(sidecar, cfg, requests, 1024)


DOORS = {
    "HTTP raw": catch_up,
    "HTTP 1024": catch_up_1024,
    "replay": catch_up_replay,
    "store API": in_process,
}


def catch_up_rounds(cfg: TieredConfig) -> list[str]:
    """:data:`REPEAT` rounds of boto3, HTTP raw, replay and store API catch-ups, one after the
    other; medians, and each round's ratio to that round's boto3."""
    readings: dict[str, list[Reading]] = {door: [] for door in DOORS}
    base: list[tuple[float, float]] = []  # boto3 MB/s, CPU-s/GiB
    base_machine: list[Reading] = []
    lines = []
    for number in range(1, REPEAT + 1):
        cpu, machine = _cpu(), _machine()
        nbytes, seconds = boto3_baseline(cfg)
        base.append((nbytes / 1e6 / seconds, (_cpu() - cpu) * GIB / nbytes))
        base_machine.append(Reading(nbytes, seconds, 0.0, Counter(), _machine() - machine))
        line = [f"  round {number}: boto3 {base[-1][0]:.0f} MB/s"]
        for door, how in DOORS.items():
            got = fresh_read(cfg, how)
            readings[door].append(got)
            line.append(f"{door} {got.mb_s:.0f} ({got.mb_s / base[-1][0]:.2f})")
        print(", ".join(line), flush=True)
    boto3_mb_s = statistics.median(b for b, _ in base)
    lines.append(
        f"  boto3 16 MiB GETs   median {boto3_mb_s:4.0f} MB/s "
        f"({statistics.median(c for _, c in base):.2f} CPU-s/GiB; machine "
        f"{statistics.median(m.machine_per_gib for m in base_machine):.2f} CPU-s/GiB, "
        f"{statistics.median(m.cores for m in base_machine):.2f} cores busy)"
    )
    for door, runs in readings.items():
        ratios = [g.mb_s / b for g, (b, _) in zip(runs, base, strict=True)]
        last = runs[-1]
        lines.append(
            f"  catch-up {door:9}  median {statistics.median(g.mb_s for g in runs):4.0f} MB/s, "
            f"ratio to boto3 {statistics.median(ratios):.2f} (rounds "
            f"{' '.join(f'{r:.2f}' for r in ratios)}), sidecar "
            f"{statistics.median(g.cpu_per_gib for g in runs):.2f} CPU-s/GiB (machine "
            f"{statistics.median(g.machine_per_gib for g in runs):.2f}, "
            f"{statistics.median(g.cores for g in runs):.2f} cores busy); "
            f"{last.nbytes / MIB:.0f} MiB {per_gib(last.requests, last.nbytes)}"
        )
    return lines


def one_queue(root: Path, endpoint: S3Endpoint) -> str:
    """A queue of :data:`QUEUE_MIB` alone, offloaded, then read whole over HTTP raw by a fresh
    sidecar: requests per GiB of a catch-up of a few hundred MB."""
    spec = backlog_spec(queues=1, gib=QUEUE_MIB / 1024)
    store = f"one-queue-{QUEUE_MIB:.0f}"
    if not (root / store).exists():
        generate_store(root / store, spec)
    done = offload_backlog(root, endpoint, f"{endpoint.name}-{store}", store, spec)
    done.sidecar.close()
    got = fresh_read(done.cfg, catch_up)
    return (
        f"  one queue (HTTP)  {got.nbytes / MIB:7.0f} MiB  {per_gib(got.requests, got.nbytes)}"
        f"  {got.mb_s:.0f} MB/s"
    )


def test_s3_request_cost(backlog: Path, servers: list[S3Endpoint]) -> None:
    lines = Printed(
        [f"\nS3 request cost, default settings, {QUEUES} queues (requests per GiB by operation):"]
    )
    latency = []
    if not CATCH_UP_ONLY:
        posix = offload_backlog(backlog, None, "posix")
        latency.append(fetch_latency(posix.sidecar, posix.cfg, "posix"))
        posix.sidecar.close()
    for endpoint in servers:
        lines.append(f" {endpoint.name}:")
        done = offload_backlog(backlog, endpoint, endpoint.name)
        sidecar, cfg, nbytes = done.sidecar, done.cfg, done.nbytes
        lines.append(
            f"  backlog offload   {nbytes / MIB:7.0f} MiB  {per_gib(done.requests, nbytes)}  "
            f"({nbytes / 1e6 / done.seconds:.0f} MB/s)"
        )
        sidecar.close()  # the readers below are restarted sidecars: they remember nothing
        if not CATCH_UP_ONLY:
            sealing = offload_backlog(
                backlog,
                endpoint,
                endpoint.name + "-64m",
                tieredStoreCommitLogMaxSize=str(64 * MIB),
            )
            sealing.sidecar.close()
            lines.append(
                f"  64 MiB segments   {sealing.nbytes / MIB:7.0f} MiB  "
                f"{per_gib(sealing.requests, sealing.nbytes)}"
            )
        lines += catch_up_rounds(cfg)
        lines.append(one_queue(backlog, endpoint))
        if not CATCH_UP_ONLY:
            lines += [tail(backlog, endpoint, rate) for rate in (1, 10)]
            provider, _ = counted(cfg)
            sidecar = Sidecar(cfg, provider).open()
            latency.append(fetch_latency(sidecar, cfg, endpoint.name))
            sidecar.close()
    print("\n".join(latency))
