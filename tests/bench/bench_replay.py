"""Benchmark: replaying a ~1 GiB queue through the RocketMQ protocol vs the HTTP API.

Run with ``make bench`` (not part of the test run; about 3 GB of free disk). One generated queue of
:data:`SIZE_BYTES` (1 KiB bodies) is offloaded to a posix tier; then a real ``rmq-tiered run``
(``tieredStorageLevel=FORCE``: every read comes from the tier) serves it, and this process reads
the whole queue from offset 0 the way a consumer catching up does, ``nextBeginOffset`` after
``nextBeginOffset``, on one connection:

* over the replay endpoint (PULL_MESSAGE, :class:`~tiered.remoting.client.RemotingClient`) with
  32 messages per pull (Java's default ``pullBatchSize``) and 1024;
* over HTTP ``format=raw`` with the same batch sizes -- the baseline each ratio divides by;
* both at 1024 again through TLS (both ports ``permissive``, so the plain runs and the TLS runs
  are the same process, side by side): what TLS costs a catch-up, in MB/s and CPU-s/GiB;
* over the replay endpoint again with RocketMQ's own Java client (``DefaultMQPullConsumer`` of
  rocketmq-client 5.3.3, the real-broker harness's driver, ``namesrvAddr`` = the replay port),
  32 and 1024 per pull, synchronous pulls as above: what a Java consumer gets. One JVM for the
  whole run, warmed up by one pass over the queue before the first measured one; its own
  timer (the pulls, not the JVM's start).

Both front doors are the same process and the same read path, so the ratio is the protocol's cost.
Runs alternate; before each, the page cache of the tier's files is dropped and the sidecar's
read-ahead cache has expired (``readAheadCacheExpireDuration`` 2 s, 3 s apart), so every run reads
the backend. Figures are medians of :data:`REPEAT` runs; the sidecar's CPU-seconds per GiB read
(from /proc, with the kernel's share: the tier's files read cold, the socket writes) are reported
too. Goals: protocol at 1024 per pull >= 1.0 of HTTP raw at 1024; >= 150 000 messages/s at 32 per
pull; <= 2 sidecar CPU-seconds per GiB through both doors at 1024. The reader's own CPU is
printed beside the sidecar's: one synchronous reader waits for each answer, so at 32 per pull
its rate is bounded by its own work plus the sidecar's per pull.
"""

from __future__ import annotations

import json
import os
import re
import signal
import ssl
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tiered.providers import build_provider

from tiered.broker.generator import GenSpec
from tiered.broker.generator import generate_store
from tiered.core.sidecar import Sidecar
from tiered.remoting.client import RemotingClient
from tiered.remoting.codes import RequestCode
from tiered.remoting.codes import ResponseCode
from tiered.testing.certs import make_pki
from tiered.testing.http import scan_queue
from tiered.testing.page_cache import drop_cache
from tiered.testing.realbroker import Runtime
from tiered.testing.sample_tier import sample_config

SIZE_BYTES = int(float(os.environ.get("RMQ_BENCH_REPLAY_GIB", "1")) * (1 << 30))
UNIT_BYTES = 1024 + 190
REPEAT = int(os.environ.get("RMQ_BENCH_REPEAT", "3"))
TOPIC, QID = "GenTopic0", 0
MIB, GIB = 1 << 20, 1 << 30
RMQ_TIERED = Path(sys.executable).parent / "rmq-tiered"
JAVA_FLAGS = ("-Xmx512m", "-XX:+UseSerialGC")
"""A consumer JVM with the default JIT (C2): the harness's short-lived clients stop at C1."""


@dataclass
class Run:
    seconds: float
    nbytes: int
    messages: int
    cpu_s: float
    sys_s: float
    client_s: float
    """CPU-seconds of the reader (this process, or the Java consumer's JVM)."""

    @property
    def mb_s(self) -> float:
        return self.nbytes / 1e6 / self.seconds

    @property
    def msgs_s(self) -> float:
        return self.messages / self.seconds

    @property
    def cpu_per_gib(self) -> float:
        return self.cpu_s / (self.nbytes / GIB)

    @property
    def sys_per_gib(self) -> float:
        return self.sys_s / (self.nbytes / GIB)

    @property
    def client_per_gib(self) -> float:
        return self.client_s / (self.nbytes / GIB)


def cpu_seconds(pid: int) -> tuple[float, float]:
    """CPU-seconds of ``pid`` (user + system) and of them in the kernel (system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tck, int(fields[12]) / tck


@dataclass
class Served:
    proc: subprocess.Popen[bytes]
    http_port: int
    replay_port: int
    tier: Path
    end: int
    tls: ssl.SSLContext
    """A client context trusting the sidecar's (test) certificate."""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("bench-replay")
    spec = GenSpec(
        seed=11, topics=1, queues=1, messages=SIZE_BYTES // UNIT_BYTES,
        min_body=1024, max_body=1024, commitlog_file_size=1 << 30,
    )  # fmt: skip
    generate_store(root / "store", spec)
    pki = make_pki(root / "pki")
    cfg = sample_config(
        root / "store", root, spec, "posix",
        tieredStorageLevel="FORCE",
        tieredStoreCommitLogMaxSize=str(256 * MIB),
        tieredStoreConsumeQueueMaxSize=str(100 * MIB),
        tieredStoreGroupCommitCount="4096",
        tieredStoreGroupCommitSize=str(4 * MIB),
        tieredStoreFileReservedTime="1000000",
        readAheadCacheExpireDuration="2000",
        messageIndexEnable="false",
        tieredRemotingTlsMode="permissive",
        tieredHttpTlsMode="permissive",
        tieredTlsCertFile=str(pki.server_cert),
        tieredTlsKeyFile=str(pki.server_key),
        tieredStoreDispatchIntervalMs="1000",  # the default (the test settings' 50 ms would
    )  # fmt: skip                             # put 20 idle passes a second into the figures
    sidecar = Sidecar(cfg, build_provider(cfg)).open()
    assert sidecar.dispatcher.run_pass(flush=True).messages == spec.messages
    sidecar.close()
    conf = root / "sidecar.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in cfg.as_properties().items() if v != ""))
    log = root / "run.log"
    with log.open("wb") as err:
        proc = subprocess.Popen([RMQ_TIERED, "run", "--config", conf], stderr=err)
    deadline = time.monotonic() + 120
    while not (
        (h := re.search(r"HTTP API listening on https?://[^:]+:(\d+)", log.read_text()))
        and (r := re.search(r"\(RocketMQ remoting\) listening on \S+:(\d+)", log.read_text()))
    ):
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
    time.sleep(2)  # the first dispatch pass (nothing to do) and restore are over
    yield Served(
        proc, int(h.group(1)), int(r.group(1)), root / "tier", spec.messages,
        pki.client_context(),
    )  # fmt: skip
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)


def replay(served: Served, batch: int, tls: bool = False) -> tuple[int, int]:
    offset = nbytes = 0
    context = served.tls if tls else None
    with RemotingClient("127.0.0.1", served.replay_port, tls=context) as c:
        while offset < served.end:
            r = c.call(
                RequestCode.PULL_MESSAGE, consumerGroup="bench", topic=TOPIC, queueId=QID,
                queueOffset=offset, maxMsgNums=batch, sysFlag=0, commitOffset=0,
                suspendTimeoutMillis=0,
            )  # fmt: skip
            assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
            nxt = int(r.ext_fields["nextBeginOffset"])
            assert nxt > offset
            nbytes += len(r.body)
            offset = nxt
    return nbytes, offset


def http_raw(served: Served, batch: int, tls: bool = False) -> tuple[int, int]:
    nbytes = offset = 0
    context = served.tls if tls else None
    for _, nxt, body in scan_queue(served.http_port, TOPIC, QID, served.end, batch, "raw", context):
        nbytes += len(body)
        offset = nxt
    return nbytes, offset


class JavaReplay:
    """The Java driver's ``replay`` command, one JVM for every pass: a line with the batch size
    starts a pass, its ``{"pass": ...}`` line ends it."""

    def __init__(self, runtime: Runtime, served: Served) -> None:
        args = {"namesrv": f"127.0.0.1:{served.replay_port}", "group": "bench-java",
                "topic": TOPIC, "queueId": QID, "end": served.end, "passes": 1000}  # fmt: skip
        cmd = runtime.java("Driver", "replay", json.dumps(args), role="client", flags=JAVA_FLAGS)
        self.err = (runtime.home / "replay.err").open("wb")
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, env=runtime.env()
        )

    def _line(self, key: str) -> dict[str, float]:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            assert line, f"the Java driver exited {self.proc.poll()} (see {self.err.name})"
            if line.startswith(b"{"):
                found: dict[str, float] = json.loads(line)
                if key in found:
                    return found

    def read(self, batch: int) -> tuple[float, int, int]:
        """One pass over the queue: its seconds (the JVM's timer), messages, bytes."""
        assert self.proc.stdin is not None
        self._line("ready")
        self.proc.stdin.write(f"{batch}\n".encode())
        self.proc.stdin.flush()
        done = self._line("pass")
        return float(done["seconds"]), int(done["messages"]), int(done["bytes"])

    def close(self) -> None:
        """End the JVM (its stdin closed, it exits; killed if it does not within 60 s)."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self.err.close()


def measure_java(served: Served, java: JavaReplay, batch: int) -> Run:
    drop_cache(served.tier)
    time.sleep(3)
    cpu, sys_s = cpu_seconds(served.proc.pid)
    client, _ = cpu_seconds(java.proc.pid)
    seconds, messages, nbytes = java.read(batch)
    cpu1, sys1 = cpu_seconds(served.proc.pid)
    client1, _ = cpu_seconds(java.proc.pid)
    return Run(seconds, nbytes, messages, cpu1 - cpu, sys1 - sys_s, client1 - client)


def measure(served: Served, read: Callable[[Served, int], tuple[int, int]], batch: int) -> Run:
    drop_cache(served.tier)
    time.sleep(3)  # the sidecar's read-ahead windows of the last run have expired
    cpu, sys_s = cpu_seconds(served.proc.pid)
    client = time.process_time()
    started = time.perf_counter()
    nbytes, messages = read(served, batch)
    seconds = time.perf_counter() - started
    client = time.process_time() - client
    cpu1, sys1 = cpu_seconds(served.proc.pid)
    return Run(seconds, nbytes, messages, cpu1 - cpu, sys1 - sys_s, client)


def test_replay_through_the_protocol_vs_http_raw(
    served: Served, tmp_path_factory: pytest.TempPathFactory
) -> None:
    java = JavaReplay(Runtime.prepare(tmp_path_factory.mktemp("rmq-home")), served)
    cases = {
        "protocol 32/pull": (replay, 32),
        "http raw 32/call": (http_raw, 32),
        "protocol 1024/pull": (replay, 1024),
        "http raw 1024/call": (http_raw, 1024),
        "protocol 1024 TLS": (lambda s, b: replay(s, b, tls=True), 1024),
        "http raw 1024 TLS": (lambda s, b: http_raw(s, b, tls=True), 1024),
    }
    java_cases = {"java client 32/pull": 32, "java client 1024/pull": 1024}
    runs: dict[str, list[Run]] = {name: [] for name in [*cases, *java_cases]}
    try:
        java.read(32)  # warm-up: the JIT compiles the client's pull path
        for _ in range(REPEAT):
            for name, (read, batch) in cases.items():
                runs[name].append(measure(served, read, batch))
            for name, batch in java_cases.items():
                runs[name].append(measure_java(served, java, batch))
    finally:
        java.close()
    med = {name: {
        "msgs_s": statistics.median(r.msgs_s for r in rs),
        "mb_s": statistics.median(r.mb_s for r in rs),
        "cpu": statistics.median(r.cpu_per_gib for r in rs),
        "sys": statistics.median(r.sys_per_gib for r in rs),
        "client": statistics.median(r.client_per_gib for r in rs),
    } for name, rs in runs.items()}  # fmt: skip
    gib = served.end * UNIT_BYTES / GIB
    print(f"\nreplay of one {gib:.2f} GiB queue ({served.end} messages of 1 KiB), posix tier, "
          f"FORCE, medians of {REPEAT}")  # fmt: skip
    print(f"{'reader':<22}{'msgs/s':>10}{'MB/s':>9}{'sidecar CPU-s/GiB':>19}{'of it kernel':>14}"
          f"{'reader CPU-s/GiB':>18}")  # fmt: skip
    for name, m in med.items():
        print(f"{name:<22}{m['msgs_s']:>10.0f}{m['mb_s']:>9.1f}{m['cpu']:>19.2f}{m['sys']:>14.2f}"
              f"{m['client']:>18.2f}")  # fmt: skip
    for batch in (32, 1024):
        proto = med[f"protocol {batch}/pull"]
        http = med[f"http raw {batch}/call"]
        print(f"protocol/http raw at {batch}: {proto['mb_s'] / http['mb_s']:.2f} (MB/s), "
              f"{proto['msgs_s'] / http['msgs_s']:.2f} (msgs/s)")  # fmt: skip
    ratio = med["protocol 1024/pull"]["mb_s"] / med["http raw 1024/call"]["mb_s"]
    print(f"protocol 1024/pull vs http raw 1024: {ratio:.2f} (goal >= 1.0); 32/pull: Java client "
          f"{med['java client 32/pull']['msgs_s']:.0f} msgs/s (goal >= 150000), Python client "
          f"{med['protocol 32/pull']['msgs_s']:.0f}; sidecar CPU-s/GiB "
          f"at 1024 (goal <= 2): protocol {med['protocol 1024/pull']['cpu']:.2f}, "
          f"http raw {med['http raw 1024/call']['cpu']:.2f}")  # fmt: skip
    for door in ("protocol", "http raw"):
        plain, tls = (
            med[f"{door} 1024/{'pull' if door == 'protocol' else 'call'}"],
            med[f"{door} 1024 TLS"],
        )
        print(f"TLS cost, {door} at 1024: {tls['mb_s']:.1f} vs {plain['mb_s']:.1f} MB/s "
              f"({tls['mb_s'] / plain['mb_s']:.2f}x), {tls['cpu']:.2f} vs {plain['cpu']:.2f} "
              f"sidecar CPU-s/GiB (+{tls['cpu'] - plain['cpu']:.2f})")  # fmt: skip
    assert all(r.messages == served.end for rs in runs.values() for r in rs)
