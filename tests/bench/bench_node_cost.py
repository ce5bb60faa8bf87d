"""Benchmark: what tiering costs the broker's node -- no tier, the Java tieredstore plugin inside
the broker, and the sidecar beside it -- under the same producer load on a real broker.

Run with ``make bench`` (not part of the test run; needs ``make rmq``, Java 17, about 1 GB of
free disk, about 12 minutes on a quiet machine). The three modes run one after another, never
in parallel, each on a fresh name server and a fresh real RocketMQ 5.3.3 broker (the real-broker
harness, with the broker's production file sizes: 1 GiB commitlog files, 300 000-unit consume
queues, 5 M-slot/20 M-entry index files) on a fresh store:

* **no tier**: the broker alone;
* **Java plugin**: ``messageStorePlugIn=org.apache.rocketmq.tieredstore.TieredMessageStore``
  writing to a posix tier, upstream defaults otherwise (group commit at 4096 messages, 4 MiB or
  30 s; its dispatcher wakes every 20 s; key index on);
* **sidecar**: ``rmq-tiered run`` beside the broker writing to a posix tier, defaults otherwise
  (the same group-commit defaults; dispatch every 1 s; key index on), its HTTP and replay
  ports on free ports.

The load is the Java driver's ``load`` command (``tests/realbroker/java/Driver.java``), one
producer JVM per mode: an open-loop schedule of :data:`RATE` msgs/s (message *i* is due at
``start + i / RATE``) sent by :data:`THREADS` threads with **synchronous** ``send`` calls of the
remoting ``DefaultMQProducer``, to a topic of :data:`QUEUES` queues; every message carries two
KEYS (a unique one and an order id shared by :data:`KEY_SHARE` messages) besides the client's
UNIQ_KEY. Send latency is the time the ``send`` call took; the driver also reports it counted
from when the message was due (this includes waiting for a free sender) and how late the latest
send started -- if the machine cannot keep :data:`RATE`, these show it.

Per mode: a warm-up of :data:`WARM_S` s of load on each measured topic (one per body size), until
the tier holds it -- the broker's, the plugin's and the producer's JIT has compiled the paths
measured, and the tier has set up the topic's queues (the plugin spends its first dispatcher pass
over a new queue on that) -- then one measured window per body size (:data:`BODIES`):
:data:`SECONDS` s of load and :data:`TAIL_S` s more -- the same length in every mode, long enough
for the plugin (20 s dispatcher, 30 s group-commit timeout) to catch up; if a tier has not caught
up by then, the window lasts until it has (the wall column shows it) -- then a ``sync``. Caught
up means the tier's posix directory holds the topic's flat COMMIT_LOG bytes (the broker's
commitlog growth) and CONSUME_QUEUE bytes (20 per message), polled with ``stat`` every 0.5 s.

Figures for a window:

* CPU-s: CPU-seconds the whole machine was not idle over the window and the ``sync``, nothing
  subtracted: CPUs x wall time - (idle + iowait + steal) from ``/proc/stat``. The kernel measures
  idle time exactly (tickless idle), whereas /proc/stat's user and system time are sampled at
  timer ticks, which on this VM missed up to 40% of this load (checked against the sum of the
  per-process times, which the scheduler measures exactly); both are printed. That is broker,
  tier, producer JVM, name server, kernel threads (writeback), this process -- and other users'
  processes, since this machine is shared: their CPU is measured from ``/proc/<pid>/stat``
  (``foreign``); each window first waits (up to :data:`QUIET_MAX_S` s) for them to be quiet,
  and is measured again (up to :data:`ATTEMPTS` times) when they took more than
  :data:`FOREIGN_LIMIT` of it. CPU-s/GiB divides by the GiB the broker stored (its commitlog
  growth in the window). With ``RMQ_BENCH_NODE_REPEAT=n`` each mode and size is measured n times
  and the window of median machine CPU is reported (one window's machine CPU varies by a few
  CPU-seconds, about as much as a tier costs);
* extra CPU-s/GiB: the mode's CPU-s/GiB minus no tier's;
* per process: ``utime + stime`` (all threads, plus reaped children) of the broker, the sidecar,
  the producer JVM and the name server; the tier's share is the broker's CPU minus no tier's
  broker CPU for the plugin, the sidecar's own CPU for the sidecar. That difference of two
  brokers is noisy (a CPU-second or two either way), so the plugin's own threads
  (``/proc/<pid>/task/*/stat`` by thread name: its dispatcher, commit, fetch and index threads)
  are measured too -- a lower bound, without the GC and JIT work it causes;
* tier RSS: the peak RSS (``VmHWM``, reset through ``/proc/<pid>/clear_refs`` at the start of
  the window) of the sidecar, or the broker's minus no tier's broker's; and the same for peak
  anonymous memory (``RssAnon``, polled every 0.2 s), because ``VmHWM`` also counts the mapped
  commitlog pages a process touched (the broker's and the sidecar's maps share those pages).

Asserted is sanity only: every message was sent and stored (the broker's consume queues and
commitlog grew as sent), the tier holds every message's flat commitlog and consume-queue bytes,
and for the sidecar ``rmq-tiered status`` shows each queue offloaded up to the broker's max
offset.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import pytest

from tiered.testing.realbroker import Broker
from tiered.testing.realbroker import NameServer
from tiered.testing.realbroker import Runtime
from tiered.testing.replay_check import sidecar_status
from tiered.testing.sidecar_process import Sidecar

BODIES = tuple(int(b) for b in os.environ.get("RMQ_BENCH_NODE_BODIES", "1024,256").split(","))
RATE = int(os.environ.get("RMQ_BENCH_NODE_RATE", "3000"))
"""Messages per second, the same in every mode and at every size."""
SECONDS = int(os.environ.get("RMQ_BENCH_NODE_SECONDS", "30"))
WARM_S = int(os.environ.get("RMQ_BENCH_NODE_WARM", "8"))
TAIL_S = float(os.environ.get("RMQ_BENCH_NODE_TAIL", "50"))
"""Seconds a window runs on after the load: the plugin's dispatcher wakes every 20 s and holds a
queue's last (< 4096) messages until the first of them is 30 s old."""
MODES = tuple(os.environ.get("RMQ_BENCH_NODE_MODES", "none,plugin,sidecar").split(","))
THREADS = 8
QUEUES = 8
KEY_SHARE = 10
REPEAT = int(os.environ.get("RMQ_BENCH_NODE_REPEAT", "1"))
"""Windows per mode and size; the one of median machine CPU is reported."""
ATTEMPTS = int(os.environ.get("RMQ_BENCH_NODE_ATTEMPTS", "3"))
FOREIGN_LIMIT = 0.03
"""A window is run again when other users' processes took more than this share of its CPU."""
QUIET_MAX_S = float(os.environ.get("RMQ_BENCH_NODE_QUIET_MAX", "600"))
QUIET_CORES = 0.05
"""Quiet: other users' processes used less than this many cores over 3 s."""
TOPIC = "NodeCost"
CLUSTER, BROKER = "BenchCluster", "broker-a"
GIB, MIB = 1 << 30, 1 << 20
CQ_UNIT = 20
LOAD_FLAGS = ("-Xms256m", "-Xmx512m", "-XX:+UseSerialGC")
"""The producer JVM: full JIT (the harness's client flags stop at C1), a small serial heap."""
PRODUCTION_GEOMETRY: dict[str, object] = {
    "mappedFileSizeCommitLog": GIB,
    "mappedFileSizeConsumeQueue": 300_000 * CQ_UNIT,
    "maxHashSlotNum": 5_000_000,
    "maxIndexNum": 20_000_000,
}
"""The broker's default file sizes (the harness shrinks them so that tests roll files)."""
TITLES = {"none": "no tier", "plugin": "Java plugin", "sidecar": "sidecar"}
CLK_TCK = os.sysconf("SC_CLK_TCK")
NCPU = os.cpu_count() or 1


# --- /proc ----------------------------------------------------------------------------------


def machine_busy() -> tuple[float, float, float]:
    """CPU-seconds the machine has been busy by /proc/stat's tick samples (user, nice, system,
    irq, softirq), and not running anything (idle + iowait + steal: measured, not sampled,
    by the kernel's tickless idle accounting), and the monotonic time they were read."""
    user, nice, system, idle, iowait, irq, softirq, steal = map(
        int, Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    )
    busy = (user + nice + system + irq + softirq) / CLK_TCK
    return busy, (idle + iowait + steal) / CLK_TCK, time.monotonic()


def _stat(pid: int | str) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name (state is [0], ppid [1])."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def process_cpu(pid: int) -> float:
    """utime + stime (all threads) + cutime + cstime (reaped children) of ``pid``."""
    return sum(int(x) for x in _stat(pid)[11:15]) / CLK_TCK


def processes() -> dict[int, tuple[int, float]]:
    """Every process: pid -> (ppid, CPU-seconds as :func:`process_cpu`)."""
    out: dict[int, tuple[int, float]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                fields = _stat(entry.name)
            except OSError:
                continue  # gone meanwhile
            out[int(entry.name)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / CLK_TCK)
    return out


@dataclass
class Split:
    """CPU-seconds between two :func:`processes` snapshots by whose processes spent them."""

    mine: float
    kernel: float
    foreign: float


def split(before: dict[int, tuple[int, float]], after: dict[int, tuple[int, float]]) -> Split:
    """This process and its descendants (``mine``), kernel threads, everyone else. A process
    that ended in between counts through the process that reaped it (its CPU moved into that
    one's ``cutime``), less the CPU it had spent before."""
    me = os.getpid()
    parent = {pid: ppid for pid, (ppid, _) in (before | after).items()}
    mine: set[int] = {me}
    changed = True
    while changed:
        grown = {pid for pid, ppid in parent.items() if ppid in mine} - mine
        mine |= grown
        changed = bool(grown)
    deltas = [(pid, cpu - before.get(pid, (0, 0.0))[1]) for pid, (_, cpu) in after.items()]
    deltas += [(pid, -cpu) for pid, (ppid, cpu) in before.items()
               if pid not in after and ppid != 2]  # fmt: skip
    out = Split(0.0, 0.0, 0.0)
    for pid, delta in deltas:
        if pid in mine:
            out.mine += delta
        elif pid == 2 or parent[pid] == 2:
            out.kernel += delta
        else:
            out.foreign += delta
    return out


def wait_quiet() -> float:
    """Wait (at most :data:`QUIET_MAX_S`) until other users' processes are quiet; the seconds
    waited."""
    t0 = time.monotonic()
    while True:
        before = processes()
        time.sleep(3)
        if split(before, processes()).foreign < QUIET_CORES * 3:
            return time.monotonic() - t0
        if time.monotonic() - t0 > QUIET_MAX_S:
            print(f"machine still busy after {QUIET_MAX_S:.0f} s: measuring anyway")
            return time.monotonic() - t0


PLUGIN_THREADS = (
    "MessageStoreDis",  # MessageStoreDispatcher (Linux keeps 15 characters of a thread name)
    "BufferCommitExe",
    "BufferFetchExec",
    "TieredCommonExe",
    "IndexStoreServi",
)
"""Name prefixes of the tieredstore plugin's own threads (5.3.3: its ServiceThreads and
MessageStoreExecutor pools)."""
THREAD_GROUPS = (
    ("plugin", PLUGIN_THREADS),
    ("fork-join", ("ForkJoinPool",)),
    ("GC", ("GC Thread", "G1 ", "VM Thread")),
    ("JIT", ("C1 CompilerThre", "C2 CompilerThre")),
)


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU-seconds (utime + stime) of ``pid``'s live threads, summed by thread-name group
    (:data:`THREAD_GROUPS`, else ``other``)."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "stat").read_text()
        except OSError:
            continue  # ended meanwhile
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 1 :].split()
        group = next((g for g, prefixes in THREAD_GROUPS if name.startswith(prefixes)), "other")
        out[group] = out.get(group, 0.0) + (int(fields[11]) + int(fields[12])) / CLK_TCK
    return out


def memory(pid: int) -> tuple[int, int]:
    """(``VmHWM``, ``RssAnon``) of ``pid`` in bytes; zeros once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0, 0
    values = {
        k: int(v.split()[0]) * 1024
        for k, v in (line.split(":", 1) for line in status.splitlines())
        if k in ("VmHWM", "RssAnon")
    }
    return values.get("VmHWM", 0), values.get("RssAnon", 0)


def reset_peak(pid: int) -> bool:
    """Reset ``VmHWM`` of ``pid`` to its current RSS (``clear_refs`` 5, Linux 4.0+)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


@dataclass
class Peaks:
    """Peak memory of some processes, polled until :meth:`stop`."""

    pids: dict[str, int]
    hwm: dict[str, int] = field(default_factory=dict)
    anon: dict[str, int] = field(default_factory=dict)
    reset: bool = True
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Peaks:
        resets = [reset_peak(pid) for pid in self.pids.values()]  # every one, no short cut
        self.reset = False not in resets
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self) -> None:
        while True:
            for name, pid in self.pids.items():
                hwm, anon = memory(pid)
                self.hwm[name] = max(self.hwm.get(name, 0), hwm)
                self.anon[name] = max(self.anon.get(name, 0), anon)
            if self._stop.wait(0.2):
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


# --- the node under test --------------------------------------------------------------------


def plugin_keys(tier: Path) -> dict[str, object]:
    """The Java tieredstore plugin on a posix tier; upstream defaults for everything else."""
    return {
        "messageStorePlugIn": "org.apache.rocketmq.tieredstore.TieredMessageStore",
        "tieredBackendServiceProvider": "org.apache.rocketmq.tieredstore.provider.PosixFileSegment",
        "tieredMetadataServiceProvider": (
            "org.apache.rocketmq.tieredstore.metadata.DefaultMetadataStore"
        ),
        "tieredStoreFilePath": tier,
    }


def sidecar_conf(path: Path, work: Path) -> Path:
    """The sidecar's own keys (read after the broker's broker.conf): a posix tier, defaults for
    everything else, free ports."""
    keys = {
        "tieredBackendServiceProvider": "posix",
        "tieredStoreFilePath": work / "tier",
        "tieredDataDir": work / "data",
        "tieredHttpPort": 0,
        "tieredRemotingPort": 0,
    }
    path.write_text("".join(f"{k}={v}\n" for k, v in keys.items()), "utf-8")
    return path


def tier_holds(tier: Path, topic: str) -> tuple[int, int, int]:
    """(flat COMMIT_LOG bytes, CONSUME_QUEUE bytes, files) of ``topic`` in a posix tier laid
    out as upstream's PosixFileSegment (``{hash}_{cluster}/{broker}/{topic}/{queue}/{type}``)."""
    commitlog = consumequeue = files = 0
    for queue in tier.glob(f"*/{BROKER}/{topic}/*"):
        for kind in ("COMMIT_LOG", "CONSUME_QUEUE"):
            try:
                entries = list(os.scandir(queue / kind))
            except OSError:
                continue
            for e in entries:
                if e.name.startswith("."):
                    continue  # a put's temporary file
                files += 1
                if kind == "COMMIT_LOG":
                    commitlog += e.stat().st_size
                else:
                    consumequeue += e.stat().st_size
    return commitlog, consumequeue, files


@dataclass
class Node:
    """A name server, a broker, ``rmq-tiered run`` (mode ``sidecar``) and the producer JVM."""

    runtime: Runtime
    mode: str
    work: Path
    topics: list[str]
    namesrv: NameServer = field(init=False)
    broker: Broker = field(init=False)
    sidecar: Sidecar | None = None
    driver: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        (self.work / "namesrv").mkdir(parents=True)
        (self.work / "broker").mkdir()
        self.namesrv = NameServer(self.runtime, "namesrv", self.work / "namesrv")
        keys: dict[str, object] = {"brokerClusterName": CLUSTER, "brokerName": BROKER,
                                   **PRODUCTION_GEOMETRY}  # fmt: skip
        if self.mode == "plugin":
            keys.update(plugin_keys(self.tier))
        self.broker = Broker(self.runtime, "broker", self.work / "broker", conf_keys=keys)

    @property
    def tier(self) -> Path:
        return self.work / "tier"

    def start(self) -> None:
        self.namesrv.start()
        self.broker.namesrv = self.namesrv.address
        self.broker.start()
        if self.mode == "sidecar":
            conf = sidecar_conf(self.work / "sidecar.conf", self.work)
            self.sidecar = Sidecar(conf, self.work / "run", broker_conf=self.broker.conf)
            self.sidecar.start()
        args = {
            "namesrv": self.namesrv.address, "broker": self.broker.address,
            "topics": dict.fromkeys(self.topics, QUEUES), "maxMs": 3_600_000,
        }  # fmt: skip
        cmd = self.runtime.java("Driver", "load", json.dumps(args), role="client",
                                flags=LOAD_FLAGS)  # fmt: skip
        with (self.work / "load.err").open("wb") as err:
            self.driver = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           stderr=err, env=self.runtime.env())  # fmt: skip
        self.reply("ready")

    def reply(self, key: str) -> Any:
        """The value of ``key`` in the driver's next JSON line that has it."""
        assert self.driver is not None and self.driver.stdout is not None
        for raw in self.driver.stdout:
            if raw.startswith(b"{"):
                line: dict[str, Any] = json.loads(raw)
                if key in line:
                    return line[key]
        code = self.driver.wait(timeout=60)
        err = (self.work / "load.err").read_text("utf-8", "replace")[-4000:]
        raise AssertionError(f"Driver load exited {code} before printing {key!r}:\n{err}")

    def send(self, topic: str, body: int, seconds: float) -> None:
        """Start a load of ``seconds`` at :data:`RATE` (:meth:`reply` collects it)."""
        assert self.driver is not None and self.driver.stdin is not None
        phase = {
            "topic": topic, "count": int(RATE * seconds), "size": body, "rate": RATE,
            "threads": THREADS, "keyShare": KEY_SHARE, "tag": topic, "seed": body,
        }  # fmt: skip
        self.driver.stdin.write(json.dumps(phase).encode() + b"\n")
        self.driver.stdin.flush()

    @property
    def pids(self) -> dict[str, int]:
        procs = {"broker": self.broker.proc, "namesrv": self.namesrv.proc, "producer": self.driver}
        if self.sidecar is not None:
            procs["sidecar"] = self.sidecar.proc
        pids = {name: p.pid for name, p in procs.items() if p is not None}
        assert len(pids) == len(procs), f"{self.mode}: a process is not running"
        return pids

    def cpu(self) -> dict[str, float]:
        return {name: process_cpu(pid) for name, pid in self.pids.items()}

    def stop(self) -> None:
        if self.driver is not None:
            if self.driver.stdin is not None:
                self.driver.stdin.close()  # end of input: the driver exits
            try:
                self.driver.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.driver.kill()
                self.driver.wait()
            if self.driver.stdout is not None:
                self.driver.stdout.close()
            self.driver = None
        if self.sidecar is not None:
            self.sidecar.stop()
        self.broker.stop()
        self.namesrv.stop()
        # the commitlog and index files are sparse but large; the logs stay
        for d in (self.broker.store, self.tier, self.work / "data"):
            shutil.rmtree(d, ignore_errors=True)


# --- one window -----------------------------------------------------------------------------


@dataclass
class Load:
    """What the driver's ``load`` command reported for one load."""

    sent: int
    failed: int
    seconds: float
    rate: float
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    due_p99_ms: float
    late_max_ms: float
    stored_bytes: int
    """the broker's commitlog growth"""
    stored_messages: int
    """the growth of the topic's consume queues"""

    @classmethod
    def parse(cls, done: dict[str, Any]) -> Load:
        before, after = done["before"], done["after"]
        return cls(
            sent=done["sent"], failed=done["failed"], seconds=done["seconds"],
            rate=done["rate"], p50_ms=done["service"]["p50Ms"], p99_ms=done["service"]["p99Ms"],
            p999_ms=done["service"]["p999Ms"], max_ms=done["service"]["maxMs"],
            due_p99_ms=done["fromDue"]["p99Ms"], late_max_ms=done["lateMaxMs"],
            stored_bytes=after["commitLogMaxOffset"] - before["commitLogMaxOffset"],
            stored_messages=after["queueMaxOffsetSum"] - before["queueMaxOffsetSum"],
        )  # fmt: skip


@dataclass
class Result:
    mode: str
    body: int
    attempt: int
    load: Load
    window_s: float
    catch_up_s: float
    """from the last send to the tier holding every message (0 without a tier)"""
    machine_cpu: float
    """CPU-s the machine was not idle: CPUs x wall - (idle + iowait + steal), from /proc/stat"""
    ticks_busy: float
    """user + nice + system + irq + softirq of /proc/stat (sampled at timer ticks)"""
    procs: dict[str, float]
    split: Split
    hwm: dict[str, int]
    anon: dict[str, int]
    peak_reset: bool
    tier_files: int
    tier_bytes: int
    broker_threads: dict[str, float]
    """the broker's CPU-s by thread group (threads that ended in the window are missing)"""
    repeats: list[float] = field(default_factory=list)
    """machine CPU-s of every window measured of this mode and size (:data:`REPEAT`)"""

    @property
    def gib(self) -> float:
        return self.load.stored_bytes / GIB

    @property
    def per_gib(self) -> float:
        return self.machine_cpu / self.gib

    @property
    def contaminated(self) -> bool:
        return self.split.foreign > FOREIGN_LIMIT * self.machine_cpu


@dataclass
class Topic:
    """A topic of the load and what the broker stored of it so far."""

    name: str
    body: int
    stored_bytes: int = 0
    stored_messages: int = 0

    def add(self, load: Load) -> Load:
        assert load.failed == 0 and load.stored_messages == load.sent, load
        self.stored_bytes += load.stored_bytes
        self.stored_messages += load.stored_messages
        return load

    def held_by(self, node: Node) -> Callable[[], bool]:
        """Whether ``node``'s tier holds every message of the topic."""
        want = (self.stored_bytes, CQ_UNIT * self.stored_messages)
        return lambda: node.mode == "none" or tier_holds(node.tier, self.name)[:2] == want


def wait_until(what: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.5)


def warm_up(node: Node, topics: list[Topic]) -> None:
    """:data:`WARM_S` s of load on each topic, until the tier holds it: the JIT has compiled
    the paths measured, and the tier has its files for the topic's queues open (the plugin
    spends its first dispatcher pass over a new queue on setting it up)."""
    for t in topics:
        node.send(t.name, t.body, WARM_S)
        t.add(Load.parse(node.reply("load")))
    for t in topics:
        wait_until(f"{node.mode} to take the warm-up of {t.name}", t.held_by(node), 240)


def window(node: Node, topic: Topic, attempt: int) -> Result:
    """One measured load of ``topic``."""
    pids = node.pids
    peaks = Peaks({k: v for k, v in pids.items() if k in ("broker", "sidecar")}).start()
    threads0 = thread_cpu(pids["broker"])
    cpu0, procs0, (busy0, idle0, t0) = node.cpu(), processes(), machine_busy()
    node.send(topic.name, topic.body, SECONDS)
    load = topic.add(Load.parse(node.reply("load")))
    loaded = time.monotonic()
    wait_until(f"{node.mode} to take {topic.name}", topic.held_by(node), TAIL_S + 180)
    caught = time.monotonic()
    time.sleep(max(0.0, max(loaded + TAIL_S, caught + 1) - time.monotonic()))
    cpu1, procs1, threads1 = node.cpu(), processes(), thread_cpu(pids["broker"])
    subprocess.run(["sync"], check=True)
    busy1, idle1, t1 = machine_busy()
    peaks.stop()
    held = tier_holds(node.tier, topic.name)
    return Result(
        mode=node.mode, body=topic.body, attempt=attempt, load=load, window_s=t1 - t0,
        catch_up_s=caught - loaded if node.mode != "none" else 0.0,
        machine_cpu=NCPU * (t1 - t0) - (idle1 - idle0), ticks_busy=busy1 - busy0,
        procs={k: cpu1[k] - cpu0[k] for k in cpu0},
        split=split(procs0, procs1), hwm=peaks.hwm, anon=peaks.anon, peak_reset=peaks.reset,
        tier_files=held[2], tier_bytes=held[0],
        broker_threads={k: v - threads0.get(k, 0.0) for k, v in threads1.items()},
    )  # fmt: skip


def check(node: Node, topic: Topic, r: Result) -> None:
    """Sanity: every message sent and stored, and held by the tier."""
    load = r.load
    assert load.failed == 0 and load.sent == RATE * SECONDS, load
    assert load.stored_messages == load.sent, load
    assert load.stored_bytes >= load.sent * r.body, load
    if node.mode == "none":
        assert not node.tier.exists(), "no tier, yet a tier directory"
        return
    assert r.tier_files > 0 and r.tier_bytes == topic.stored_bytes, (r.tier_bytes, topic)
    if node.sidecar is not None:
        report, _ = sidecar_status(node.broker.conf, node.sidecar.conf)
        rows = [q for q in report["queues"] if q["topic"] == topic.name]
        assert len(rows) == QUEUES, rows
        assert all(q["tieredCommit"] == q["localMax"] for q in rows), rows
        assert sum(q["localMax"] for q in rows) == topic.stored_messages, rows


def measured(node: Node, topic: Topic) -> Result:
    """A window of ``topic`` that other users' processes left alone (at most :data:`ATTEMPTS`;
    the last one is taken whatever they did)."""
    for attempt in range(ATTEMPTS):
        waited = wait_quiet()
        if waited > 5:
            print(f"{node.mode} {topic.body}: waited {waited:.0f} s for a quiet machine")
        r = window(node, topic, attempt)
        check(node, topic, r)
        if not r.contaminated:
            break
        print(f"{node.mode} {topic.body}: other processes took {r.split.foreign:.1f} of "
              f"{r.machine_cpu:.1f} CPU-s" + ("; measuring again" if attempt + 1 < ATTEMPTS
                                              else ""))  # fmt: skip
    return r


def run_mode(runtime: Runtime, work: Path, mode: str) -> list[Result]:
    """Start ``mode``'s node, warm it up, measure :data:`REPEAT` windows per body size (the one
    of median machine CPU is reported), stop it."""
    topics = [Topic(f"{TOPIC}{b}", b) for b in BODIES]
    node = Node(runtime, mode, work / mode, [t.name for t in topics])
    out: list[Result] = []
    try:
        node.start()
        warm_up(node, topics)
        for topic in topics:
            runs = sorted((measured(node, topic) for _ in range(REPEAT)),
                          key=lambda r: r.machine_cpu)  # fmt: skip
            median = runs[(len(runs) - 1) // 2]
            median.repeats = [r.machine_cpu for r in runs]
            out.append(median)
    finally:
        node.stop()
    return out


# --- the report -----------------------------------------------------------------------------


def table(results: dict[tuple[str, int], Result]) -> list[str]:
    lines = [
        (
            f"\nnode cost of tiering, real RocketMQ 5.3.3 broker: {RATE} msgs/s for {SECONDS} s "
            f"per window, {QUEUES} queues, synchronous sends from {THREADS} threads, 2 KEYS + "
            f"UNIQ_KEY per message; window = load + {TAIL_S:.0f} s + sync; CPU-s of the whole "
            "machine per GiB the broker stored"
        ),
        (
            f"{'body':>5} {'mode':<12}{'GiB':>6}{'CPU-s':>7}{'CPU-s/GiB':>10}{'extra/GiB':>10}"
            f"{'broker':>8}{'tier':>7}{'tier/GiB':>9}{'own/GiB':>8}{'p50 ms':>8}{'p99 ms':>8}"
            f"{'RSS MiB':>8}{'anon MiB':>9}{'catch-up':>9}{'wall s':>8}{'foreign':>8}"
        ),
    ]
    nan = float("nan")
    for body in BODIES:
        base = results.get(("none", body))
        for mode in MODES:
            r = results.get((mode, body))
            if r is None:
                continue
            extra = r.per_gib - base.per_gib if base else nan
            if mode == "plugin":
                tier_cpu = r.procs["broker"] - base.procs["broker"] if base else nan
                own = r.broker_threads.get("plugin", 0.0)
                rss = (r.hwm["broker"] - base.hwm["broker"]) / MIB if base else nan
                anon = (r.anon["broker"] - base.anon["broker"]) / MIB if base else nan
            elif mode == "sidecar":
                tier_cpu = own = r.procs["sidecar"]
                rss, anon = r.hwm["sidecar"] / MIB, r.anon["sidecar"] / MIB
            else:
                tier_cpu = own = rss = anon = 0.0
            lines.append(
                f"{body:>5} {TITLES[mode]:<12}{r.gib:>6.3f}{r.machine_cpu:>7.1f}"
                f"{r.per_gib:>10.1f}{extra:>10.1f}{r.procs['broker']:>8.1f}{tier_cpu:>7.1f}"
                f"{tier_cpu / r.gib:>9.1f}{own / r.gib:>8.1f}{r.load.p50_ms:>8.2f}"
                f"{r.load.p99_ms:>8.2f}{rss:>8.0f}{anon:>9.0f}{r.catch_up_s:>9.1f}{r.window_s:>8.1f}"
                f"{r.split.foreign:>8.1f}" + (" !" if r.contaminated else "")
            )
    lines += [
        (
            "CPU-s = CPU-s the whole machine was not idle in the window (CPUs x wall - idle - "
            "iowait - steal, /proc/stat; nothing subtracted); extra = CPU-s/GiB - no tier's; "
            "broker, tier = CPU-s of the broker and of the tier's share (plugin: broker - no "
            "tier's broker; sidecar: its process); own = "
            "CPU-s of the tier's own threads (plugin: its named threads in the broker, a lower "
            "bound: GC and JIT not included; sidecar: its process); RSS, anon = peak VmHWM, "
            "RssAnon of the tier's share (plugin: broker - no tier's broker); catch-up = s from "
            "the last send until the tier held every message; foreign = CPU-s of other users' "
            f"processes, included in CPU-s (! = over {FOREIGN_LIMIT:.0%} of it after "
            f"{ATTEMPTS} attempts)"
        ),
        (
            "per window: CPU-s by process (producer JVM, name server, this process, kernel "
            "threads, foreign; rest = irq/softirq, exited processes, tick rounding); send "
            "latency; broker memory"
        ),
    ]
    for (mode, body), r in sorted(results.items(), key=lambda kv: (-kv[0][1], kv[0][0])):
        p = r.procs
        rest = r.machine_cpu - r.split.mine - r.split.kernel - r.split.foreign
        lines.append(
            f"  {body:>4} {TITLES[mode]:<12} producer {p['producer']:.1f}, name server "
            f"{p['namesrv']:.1f}, this process {r.split.mine - sum(p.values()):.1f}, kernel "
            f"{r.split.kernel:.1f}, foreign {r.split.foreign:.1f}, rest {rest:.1f}; /proc/stat "
            f"busy ticks {r.ticks_busy:.1f}; without "
            f"foreign {(r.machine_cpu - r.split.foreign) / r.gib:.1f} CPU-s/GiB"
            + (f" (attempt {r.attempt + 1})" if r.attempt else "")
        )
        groups = ", ".join(f"{k} {v:.2f}" for k, v in sorted(r.broker_threads.items()))
        lines.append(
            f"  {'':>4} {'':<12} broker CPU-s by thread: {groups}"
            + (f"; machine CPU-s of the {REPEAT} windows: " if REPEAT > 1 else "")
            + (", ".join(f"{x:.1f}" for x in r.repeats) if REPEAT > 1 else "")
        )
        lines.append(
            f"  {'':>4} {'':<12} sent {r.load.sent} in {r.load.seconds:.1f} s "
            f"({r.load.rate:.0f}/s), send p99.9 {r.load.p999_ms:.2f} ms, max "
            f"{r.load.max_ms:.1f} ms, p99 from due {r.load.due_p99_ms:.2f} ms, latest start "
            f"{r.load.late_max_ms:.1f} ms late; stored {r.load.stored_bytes} B; broker peak RSS "
            f"{r.hwm['broker'] / MIB:.0f} MiB (anon {r.anon['broker'] / MIB:.0f})"
            + ("" if r.peak_reset else " (VmHWM not reset: process lifetime)")
            + (f"; tier {r.tier_files} files" if mode != "none" else "")
        )
    return lines


def test_node_cost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the sidecar loads the bytecode pip compiled at install instead of compiling every module
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    runtime = Runtime.prepare(tmp_path / "rmq-home")
    started = time.monotonic()
    results: dict[tuple[str, int], Result] = {}
    for mode in MODES:
        for r in run_mode(runtime, tmp_path, mode):
            results[(mode, r.body)] = r
    print("\n".join(table(results)))
    print(f"bench wall time {time.monotonic() - started:.0f} s")
