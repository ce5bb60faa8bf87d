"""Benchmark: what a live tail costs the sidecar's process, without Java (``make bench``).

``bench_node_cost.py`` measures the node's cost on a real broker (about 12 minutes, Java, one
window per mode); this is its cheap, repeatable stand-in for the sidecar's own share. A generated
store (:mod:`tiered.broker.generator`: :data:`QUEUES` queues of one topic, interleaved in the
commitlog as concurrent producers leave them, ``UNIQ_KEY`` plus two ``KEYS`` in the realistic key
mix on every message, one 1 GiB commitlog file, 300 000-unit consume queues: the broker's
production geometry) is **replayed into an empty store at a fixed rate** by :class:`Appender`, as
a broker writes it: every :data:`TICK_S` the messages now due are written to the pre-sized
commitlog (their store and born timestamps set to the current time, so the group-commit hold sees
fresh messages), then their consumequeue units (the broker's reput), and about once a second the
``checkpoint``. A real ``rmq-tiered run`` process (default settings: dispatch every 1 s, group
commit at 4096 messages / 4 MiB / 30 s, key index on, HTTP and replay ports open) tails it.

Per body size (:data:`BODIES`), :data:`REPEAT` fresh windows (store, tier, process), each:

* :data:`WARM_S` s of load after the process is ready (its start-up and each queue's first
  sight are not measured), then the window: :data:`SECONDS` s more load at :data:`RATE` msgs/s
  and :data:`AFTER_S` s after it (the node-cost window's length), extended until the tier holds
  every message;
* **tail**: the process's CPU-seconds (``utime + stime`` of all its threads, ``/proc/<pid>/stat``)
  over the window per GiB it offloaded in it (growth of the flat commitlogs in the tier), and per
  dispatch pass (one a second: the window's seconds, as ``tieredStoreDispatchIntervalMs``);
* **idle**: then :data:`IDLE_S` s with nothing appended: CPU-milliseconds per second, which is
  what a pass costs when there is nothing to send;
* **bulk**: ``rmq-tiered dispatch --once --flush`` of the same store (every message of the
  window and the warm-up) into a fresh tier, CPU from its rusage; less a second ``dispatch --once``
  with nothing to do (start-up, restore), so it is the bulk offload's CPU per GiB of the same bytes.

Printed: medians of the windows, the CPU-s/GiB of tail and bulk side by side and their ratio.
``RMQ_BENCH_LIVE_PROFILE=DIR`` records a py-spy profile of each window's process (raw, folded
stacks, 200 Hz, ``--nonblocking`` unless ``RMQ_BENCH_LIVE_PROFILE_FLAGS`` says otherwise: a
blocking py-spy triples the process's CPU) into DIR. Sizes and rates: ``RMQ_BENCH_LIVE_RATE``,
``RMQ_BENCH_LIVE_SECONDS``, ``RMQ_BENCH_LIVE_AFTER``, ``RMQ_BENCH_LIVE_REPEAT``,
``RMQ_BENCH_LIVE_BODIES``.

A/B: ``RMQ_BENCH_LIVE_TREES=A,B,...`` names directories each holding a ``tiered`` package (a
snapshot of the code, e.g. ``cp -rL build/__editable__*/tiered A/``, then the files under test
replaced); each round runs one window per tree, one after the other, the sidecar and the bulk
dispatch with ``PYTHONPATH`` set to the tree (this process keeps the installed code). Printed:
each tree's medians, and the median of each round's ratio to the first tree -- on a shared
machine the ratio of windows run back to back is steadier than either.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from tiered.broker import checkpoint
from tiered.broker import consumequeue
from tiered.broker import message as msgcodec
from tiered.broker.commitlog import list_files
from tiered.broker.generator import GenSpec
from tiered.broker.generator import generate_store
from tiered.metadata import now_ms
from tiered.testing.sidecar_process import Sidecar

RATE = int(os.environ.get("RMQ_BENCH_LIVE_RATE", "3000"))
"""Messages per second (bench_node_cost's rate)."""
BODIES = tuple(int(b) for b in os.environ.get("RMQ_BENCH_LIVE_BODIES", "1024,256").split(","))
SECONDS = float(os.environ.get("RMQ_BENCH_LIVE_SECONDS", "30"))
AFTER_S = float(os.environ.get("RMQ_BENCH_LIVE_AFTER", "50"))
REPEAT = int(os.environ.get("RMQ_BENCH_LIVE_REPEAT", "3"))
PROFILE = os.environ.get("RMQ_BENCH_LIVE_PROFILE", "")
TREES = tuple(t for t in os.environ.get("RMQ_BENCH_LIVE_TREES", "").split(",") if t)
"""Code trees to alternate (PYTHONPATH of the sidecar); none: the installed code."""
WARM_S = 5.0
IDLE_S = 10.0
PASS_S = 1.0
"""``tieredStoreDispatchIntervalMs``, the default."""
CATCH_UP_MAX_S = 90.0
QUEUES = 8
TICK_S = 0.02
CHECKPOINT_S = 1.0
GIB = 1 << 30
COMMITLOG_FILE = 1 << 30
CQ_FILE = 300_000 * consumequeue.CQ_UNIT_SIZE
BORN_TIMESTAMP = 40
STORE_TIMESTAMP = 56  # behind an IPv4 born host: the generator's default
RMQ_TIERED = Path(sys.executable).parent / "rmq-tiered"
CLK_TCK = os.sysconf("SC_CLK_TCK")
INSTALLED_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

Int64s = npt.NDArray[np.int64]


def process_cpu(pid: int) -> float:
    """CPU-seconds (utime + stime, every thread) of a live process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


# --- the appender ---------------------------------------------------------------------------


class Appender:
    """Writes a generated store's messages into ``live`` as a broker would, at a given rate.

    The commitlog keeps its file name, size and every message's physical offset, so the
    consumequeue units are the source's bytes; only the store and born timestamps are new."""

    def __init__(self, source: Path, live: Path) -> None:
        files = list_files([source / "commitlog"])
        assert len(files) == 1, "the source store must fit one commitlog file"
        self.file = files[0]
        self.src = os.open(self.file.path, os.O_RDONLY)
        self.live = live
        (live / "commitlog").mkdir(parents=True)
        (live / "consumequeue").mkdir()  # made at the broker's start, its queues at first use
        shutil.copytree(source / "config", live / "config")
        shutil.copy(source / "lock", live / "lock")
        self.dst = os.open(live / "commitlog" / self.file.path.name, os.O_RDWR | os.O_CREAT, 0o644)
        os.ftruncate(self.dst, self.file.size)  # pre-sized and sparse, as the broker maps it
        self.queues: list[tuple[str, int, bytes]] = []
        phys, sizes, queue, qoff = [], [], [], []
        for i, (topic, qid) in enumerate(consumequeue.list_queues(source / "consumequeue")):
            cq = consumequeue.ConsumeQueue(source / "consumequeue" / topic / str(qid), CQ_FILE)
            units = cq.read_units(0, cq.max_offset())
            assert cq.min_offset() == 0 and len(units) == cq.max_offset()
            self.queues.append((topic, qid, units.tobytes()))
            phys.append(units["offset"].astype(np.int64))
            sizes.append(units["size"].astype(np.int64))
            queue.append(np.full(len(units), i, np.int64))
            qoff.append(np.arange(len(units), dtype=np.int64))
        order = np.argsort(np.concatenate(phys), kind="stable")
        self.phys: Int64s = np.concatenate(phys)[order]
        self.sizes: Int64s = np.concatenate(sizes)[order]
        self.queue: Int64s = np.concatenate(queue)[order]
        self.qoff: Int64s = np.concatenate(qoff)[order]
        ends = self.phys + self.sizes
        assert self.phys[0] == self.file.base and (self.phys[1:] == ends[:-1]).all()
        self.cq_fds: dict[int, int] = {}
        self.done = 0
        self.bytes = 0
        self.last_checkpoint = 0.0
        self.last_ms = 0

    @property
    def messages(self) -> int:
        return len(self.phys)

    def _cq_fd(self, i: int) -> int:
        fd = self.cq_fds.get(i)
        if fd is None:
            topic, qid, _ = self.queues[i]
            d = self.live / "consumequeue" / topic / str(qid)
            d.mkdir(parents=True, exist_ok=True)
            fd = self.cq_fds[i] = os.open(d / f"{0:020d}", os.O_RDWR | os.O_CREAT, 0o644)
            os.ftruncate(fd, CQ_FILE)
        return fd

    def write_upto(self, k: int) -> None:
        """Write messages ``[done, k)``: commitlog bytes, then consumequeue units."""
        k = min(k, self.messages)
        if k <= self.done:
            return
        a, b = self.done, k
        start = int(self.phys[a])
        end = int(self.phys[b - 1] + self.sizes[b - 1])
        data = bytearray(os.pread(self.src, end - start, start - self.file.base))
        assert len(data) == end - start
        stamp = now_ms()
        self.last_ms = stamp
        view = np.frombuffer(data, np.uint8)
        at = self.phys[a:b] - start
        for field, value in ((STORE_TIMESTAMP, stamp), (BORN_TIMESTAMP, stamp - 1)):
            be = np.frombuffer(value.to_bytes(8, "big"), np.uint8)
            view[(at + field)[:, None] + np.arange(8)] = be
        if a == 0:
            assert msgcodec.store_timestamp_of(memoryview(data)) == stamp
        os.pwrite(self.dst, data, start - self.file.base)
        for i in np.unique(self.queue[a:b]).tolist():
            sel = self.qoff[a:b][self.queue[a:b] == i]
            lo, hi = int(sel[0]), int(sel[-1]) + 1
            assert hi - lo == len(sel)
            units = self.queues[i][2][lo * 20 : hi * 20]
            os.pwrite(self._cq_fd(i), units, lo * consumequeue.CQ_UNIT_SIZE)
        self.done = k
        self.bytes = end - self.file.base
        now = time.monotonic()
        if now - self.last_checkpoint >= CHECKPOINT_S:
            self.last_checkpoint = now
            self.write_checkpoint()

    def write_checkpoint(self) -> None:
        point = checkpoint.Checkpoint(
            physic_msg_timestamp=self.last_ms,
            logics_msg_timestamp=self.last_ms,
            index_msg_timestamp=0,
        )
        (self.live / "checkpoint").write_bytes(checkpoint.encode_checkpoint(point))

    def run(self, upto: int, rate: float, stop: threading.Event) -> None:
        """Write messages up to ``upto`` at ``rate`` per second (open loop), from now."""
        first, started = self.done, time.monotonic()
        while self.done < upto and not stop.is_set():
            due = first + int((time.monotonic() - started) * rate)
            self.write_upto(min(due, upto))
            time.sleep(TICK_S)
        self.write_checkpoint()

    def close(self) -> None:
        for fd in (self.src, self.dst, *self.cq_fds.values()):
            os.close(fd)


# --- one window -----------------------------------------------------------------------------


def _conf(path: Path, store: Path, work: Path) -> Path:
    keys = {
        "storePathRootDir": store,
        "brokerName": "broker-a",
        "tieredBackendServiceProvider": "posix",
        "tieredStoreFilePath": work / "tier",
        "tieredDataDir": work / "data",
        "tieredHttpPort": 0,
        "tieredRemotingPort": 0,
    }
    path.write_text("".join(f"{k}={v}\n" for k, v in keys.items()), "utf-8")
    return path


def tier_bytes(tier: Path) -> int:
    """Bytes of every flat COMMIT_LOG segment in a posix tier."""
    total = 0
    for queue in tier.glob("*/*/*/*/COMMIT_LOG"):
        for e in os.scandir(queue):
            if not e.name.startswith("."):
                total += e.stat().st_size
    return total


@dataclass
class Window:
    gib: float
    cpu: float
    seconds: float
    idle_ms_per_s: float
    bulk_gib: float
    bulk_cpu: float
    start_cpu: float

    @property
    def per_gib(self) -> float:
        return self.cpu / self.gib

    @property
    def ms_per_pass(self) -> float:
        return 1000 * self.cpu / (self.seconds / PASS_S)

    @property
    def bulk_per_gib(self) -> float:
        return (self.bulk_cpu - self.start_cpu) / self.bulk_gib


def _profile(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes] | None:
    if not PROFILE:
        return None
    spy = Path(sys.executable).parent / "py-spy"
    argv = [str(spy), "record", "-r", "200", "-f", "raw", "-o", str(out), "-p", str(pid)]
    argv += os.environ.get("RMQ_BENCH_LIVE_PROFILE_FLAGS", "--nonblocking").split()
    return subprocess.Popen(
        [*argv, "-d", str(int(seconds))], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _env(tree: str) -> dict[str, str]:
    """The environment of a sidecar running ``tree``'s code ('': the installed code)."""
    return INSTALLED_ENV | ({"PYTHONPATH": tree} if tree else {})


@contextlib.contextmanager
def _inherited(env: dict[str, str]) -> Iterator[None]:
    """``os.environ`` is ``env`` inside (Sidecar's process inherits it)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _dispatch_cpu(conf: Path, cwd: Path, tree: str) -> float:
    proc = subprocess.Popen(
        [RMQ_TIERED, "dispatch", "--once", "--flush", "--config", str(conf)],
        stdout=subprocess.DEVNULL,
        cwd=cwd,
        env=_env(tree),
    )
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0
    return usage.ru_utime + usage.ru_stime


def window(root: Path, source: Path, body: int, n: int, tree: str = "") -> Window:
    work = root / f"w{body}-{n}"
    live = work / "store"
    appender = Appender(source, live)
    (work / "data").mkdir(parents=True)
    conf = _conf(work / "sidecar.conf", live, work)
    sidecar = Sidecar(conf, work / "run")
    stop = threading.Event()
    feeder: threading.Thread | None = None
    try:
        with _inherited(_env(tree)):
            sidecar.start()
        assert sidecar.proc is not None
        pid = sidecar.proc.pid
        warm = int(RATE * WARM_S)
        feeder = threading.Thread(
            target=appender.run, args=(appender.messages, RATE, stop), daemon=True
        )
        feeder.start()
        while appender.done < warm:
            time.sleep(0.05)
        t0, cpu0, bytes0 = time.monotonic(), process_cpu(pid), tier_bytes(work / "tier")
        spy = _profile(pid, SECONDS + AFTER_S, work.with_suffix(".profile.txt"))
        feeder.join()
        time.sleep(AFTER_S)
        deadline = time.monotonic() + CATCH_UP_MAX_S
        while tier_bytes(work / "tier") < appender.bytes:
            assert time.monotonic() < deadline, "the tier did not catch up"
            time.sleep(0.5)
        t1, cpu1, bytes1 = time.monotonic(), process_cpu(pid), tier_bytes(work / "tier")
        assert bytes1 == appender.bytes
        time.sleep(IDLE_S)
        idle = process_cpu(pid) - cpu1
        if spy is not None:
            spy.wait()
            name = f"tail-{body}-{n}" + (f"-{TREES.index(tree)}" if tree else "")
            shutil.copy(work.with_suffix(".profile.txt"), Path(PROFILE) / f"{name}.txt")
    finally:
        stop.set()
        if feeder is not None:
            feeder.join()
        sidecar.stop()
        appender.close()
    bulk_work = work / "bulk"
    (bulk_work / "data").mkdir(parents=True)
    bulk_conf = _conf(work / "bulk.conf", live, bulk_work)
    bulk = _dispatch_cpu(bulk_conf, work, tree)
    assert tier_bytes(bulk_work / "tier") == appender.bytes
    start_only = _dispatch_cpu(bulk_conf, work, tree)
    shutil.rmtree(work)
    return Window(
        gib=(bytes1 - bytes0) / GIB,
        cpu=cpu1 - cpu0,
        seconds=t1 - t0,
        idle_ms_per_s=1000 * idle / IDLE_S,
        bulk_gib=appender.bytes / GIB,
        bulk_cpu=bulk,
        start_cpu=start_only,
    )


def _source(root: Path, body: int) -> Path:
    out = root / f"source-{body}"
    spec = GenSpec(
        seed=body,
        topics=1,
        queues=QUEUES,
        messages=int(RATE * (WARM_S + SECONDS)),
        min_body=body,
        max_body=body,
        keys_per_message=2,
        key_mix="realistic",
        commitlog_file_size=COMMITLOG_FILE,
    )
    generate_store(out, spec)
    return out


def _median(windows: list[Window], attr: str) -> float:
    return statistics.median(float(getattr(w, attr)) for w in windows)


def _row(label: str, runs: list[Window]) -> str:
    tail, bulk = _median(runs, "per_gib"), _median(runs, "bulk_per_gib")
    return (
        f"{label:>5} {_median(runs, 'gib'):>6.3f} {_median(runs, 'cpu'):>6.2f} "
        f"{tail:>10.1f} {_median(runs, 'ms_per_pass'):>8.1f} "
        f"{_median(runs, 'idle_ms_per_s'):>10.1f} {bulk:>15.1f} "
        f"{_median(runs, 'start_cpu'):>8.2f} {tail / bulk:>10.1f}"
    )


def test_tail_cost() -> None:
    trees = TREES or ("",)
    with tempfile.TemporaryDirectory(prefix="bench-tail-") as tmp:
        root = Path(tmp)
        title = (
            f"live tail: {RATE} msgs/s, {QUEUES} queues, UNIQ_KEY + 2 KEYS, {WARM_S:.0f} s "
            f"warm-up, window {SECONDS:.0f} s load + {AFTER_S:.0f} s, medians of {REPEAT}; the "
            "sidecar's CPU-s"
        )
        head = (
            f"{'body':>5} {'GiB':>6} {'CPU-s':>6} {'CPU-s/GiB':>10} {'ms/pass':>8} "
            f"{'idle ms/s':>10} {'bulk CPU-s/GiB':>15} {'(start)':>8} {'tail/bulk':>10}"
        )
        lines = [title, head]
        for body in BODIES:
            source = _source(root, body)
            runs: dict[str, list[Window]] = {tree: [] for tree in trees}
            for n in range(REPEAT):
                for tree in trees:
                    w = window(root, source, body, n, tree)
                    runs[tree].append(w)
                    print(
                        f"  {body} B window{f' ({tree})' if tree else ''}: {w.gib:.3f} GiB "
                        f"{w.cpu:.2f} CPU-s {w.per_gib:.1f}/GiB in {w.seconds:.0f} s, idle "
                        f"{w.idle_ms_per_s:.1f} ms/s, bulk {w.bulk_cpu:.2f} - start "
                        f"{w.start_cpu:.2f} CPU-s over {w.bulk_gib:.3f} GiB = "
                        f"{w.bulk_per_gib:.1f}/GiB",
                        flush=True,
                    )
            lines.extend(_row(str(body), runs[t]) + (f"  {t}" if t else "") for t in trees)
            for tree in trees[1:]:
                ratio = statistics.median(
                    b.per_gib / a.per_gib for a, b in zip(runs[trees[0]], runs[tree], strict=True)
                )
                idle = statistics.median(
                    b.idle_ms_per_s / max(a.idle_ms_per_s, 1e-9)
                    for a, b in zip(runs[trees[0]], runs[tree], strict=True)
                )
                lines.append(
                    f"      {tree} / {trees[0]}: CPU-s/GiB x{ratio:.2f}, idle x{idle:.2f} "
                    "(medians of each round's ratio)"
                )
            shutil.rmtree(source)
        print("\n" + "\n".join(lines))
