"""Benchmark: what the sidecar costs beside a broker of many queues (``make bench``).

Per size (:data:`SIZES`, ``RMQ_BENCH_MQ_QUEUES=1000,16000``): a generated store of N/8 topics x
8 queues, ~25 messages of 100-400 B per queue, 64 MiB commitlog files, 1,000-unit consumequeue
files (a broker of many small topics), offloaded to a posix tier by two sidecars side by side,
each with its own data dir and tier:

* **follow**: defaults (``run`` learns which queues moved from the commitlog);
* **every**: ``tieredStoreQueueScanIntervalMs=0`` (every queue's consumequeue at every pass: what
  ``run`` did before).
* **whole-file**: ``tieredMetadataJournalMinBytes=-1`` (every metadata persist rewrites
  ``tieredStoreMetadata.json`` whole, no journal).

Measured, one row per mode:

* **first offload**: ``rmq-tiered dispatch --once --flush`` of the backlog: wall, CPU-s (rusage)
  per GiB of commitlog and per message, peak RSS;
* **idle**: both ``run`` processes started on the offloaded tiers, settled (:func:`_settle`: at
  100,000 queues the first pass after the start looks at every queue for some seconds), then
  :data:`IDLE_S` s with nothing new: CPU-milliseconds per second, RSS;
* **spread tail**: N more messages appended (``gen-store --append``, about one per queue, over
  ~60 % of the queues); the seconds until each sidecar's log shows them all offloaded (the sum of
  its passes' own times) and its CPU-seconds meanwhile; peak RSS after;
* **scrape**: bytes of one ``GET /metrics`` (at the default ``tieredMetricsDetail=broker``);
* **status**: wall of ``rmq-tiered status --json`` and of the table ``rmq-tiered status``
  prints (median of :data:`STATUS_RUNS` each), and of the running sidecar's ``GET /v1/status``
  (its first page of 1,000 queues, with the totals of all; median of :data:`STATUS_RUNS`);
* **tail metadata**: KiB the sidecar wrote for its metadata during the spread tail
  (``metadata_written_bytes_total``: snapshots and journal).
* **start**: seconds from launching the ``run`` processes (side by side) until each logs
  ``rmq-tiered running`` (metadata loaded, every queue restored).
* **recover**: ``rmq-tiered recover --force`` of the follow sidecar's tier at the end (the
  metadata replaced from its backend mirror, every queue reconciled): wall, CPU-s, peak RSS.

``RMQ_BENCH_MQ_QUEUES=100000`` builds an LMQ's store instead (:data:`LMQ_FROM`).

Printed per size: both rows and each figure's ratio every/follow.

:func:`test_one_spread_pass` times the spread tail's pass alone: see there. With valgrind
installed it also counts the pass's user-space instructions under callgrind, which hold on a
loaded machine where the wall does not.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

from tiered.providers import build_provider

from tiered import metrics
from tiered.config import load_config
from tiered.core.sidecar import Sidecar

RMQ = str(Path(sys.executable).parent / "rmq-tiered")
SIZES = [int(n) for n in os.environ.get("RMQ_BENCH_MQ_QUEUES", "1000,16000").split(",")]
SETTLE_S = 15.0
SETTLE_MAX_S = 120.0
SETTLED_CPU_MS = 100.0
IDLE_S = 20.0
TAIL_TIMEOUT_S = 300.0
STATUS_RUNS = 3
PER_QUEUE = 25
LMQ_FROM = 100_000
"""From this many queues the store is an LMQ's: :data:`LMQ_PER_QUEUE` messages of 40-120 B per
queue, and only the follow and whole-file modes run (every queue at every pass would take
minutes a pass)."""
LMQ_PER_QUEUE = 4
SPREAD_QUEUES = int(os.environ.get("RMQ_BENCH_SPREAD_QUEUES", "16000"))
SPREAD_RUNS = int(os.environ.get("RMQ_BENCH_SPREAD_RUNS", "3"))
MODES = {
    "follow": {},
    "every": {"tieredStoreQueueScanIntervalMs": "0"},
    "whole-file": {"tieredMetadataJournalMinBytes": "-1"},
}


@dataclass
class Row:
    mode: str
    first_wall: float = 0.0
    first_cpu: float = 0.0
    first_rss_mib: float = 0.0
    idle_cpu_ms: float = 0.0
    idle_rss_mib: float = 0.0
    tail_pass_s: float = 0.0
    tail_cpu: float = 0.0
    tail_rss_mib: float = 0.0
    status_s: float = 0.0
    status_table_s: float = 0.0
    status_http_s: float = 0.0
    scrape_kib: float = 0.0
    tail_meta_kib: float = 0.0
    start_s: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)


def _gen(store: Path, queues: int, messages: int, seed: int, append: bool = False) -> None:
    subprocess.run(_gen_args(store, queues, messages, seed, append), check=True)


def _gen_args(store: Path, queues: int, messages: int, seed: int, append: bool) -> list[str]:
    """The ``gen-store`` command of :func:`_gen`."""
    low, high = ("40", "120") if queues >= LMQ_FROM else ("100", "400")
    args = [RMQ, "gen-store", str(store), "--seed", str(seed), "--topics", str(queues // 8),
            "--queues", "8", "--messages", str(messages), "--min-body", low, "--max-body",
            high, "--commitlog-file-size", str(64 << 20), "--cq-file-entries", "1000",
            "--quiet"]  # fmt: skip
    return [*args, "--append"] if append else args


def _conf(path: Path, store: Path, work: Path, keys: dict[str, str]) -> Path:
    lines = {
        "storePathRootDir": str(store),
        "mappedFileSizeCommitLog": str(64 << 20),
        "mappedFileSizeConsumeQueue": str(1000 * 20),
        "tieredDataDir": str(work / "data"),
        "tieredBackendServiceProvider": "posix",
        "tieredStoreFilePath": str(work / "tier"),
        "tieredHttpHost": "127.0.0.1",
        "tieredHttpPort": "0",
        "tieredRemotingHost": "127.0.0.1",
        "tieredRemotingPort": "0",
        **keys,
    }
    path.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
    return path


def _timed(args: list[str], out: Path) -> tuple[float, float, float]:
    """Run ``args`` (stdout to ``out``): wall seconds, CPU seconds, peak RSS MiB (its own
    rusage)."""
    started = time.perf_counter()
    with out.open("wb") as f:
        proc = subprocess.Popen(args, stdout=f, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, args
    return time.perf_counter() - started, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def _settle(pids: list[int]) -> None:
    """At least :data:`SETTLE_S` s, then until each process spent under
    :data:`SETTLED_CPU_MS` CPU-ms a second over the last 5 s (the start's first pass over every
    queue is done), :data:`SETTLE_MAX_S` s at most."""
    time.sleep(SETTLE_S)
    deadline = time.monotonic() + SETTLE_MAX_S - SETTLE_S
    while time.monotonic() < deadline:
        before = [_cpu(pid) for pid in pids]
        time.sleep(5.0)
        rates = [(_cpu(pid) - b) * 1000 / 5.0 for pid, b in zip(pids, before, strict=True)]
        if max(rates) < SETTLED_CPU_MS:
            return


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mib(pid: int, key: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def _offloaded(log: Path) -> tuple[int, float]:
    """Messages the log says were offloaded, and the seconds of those passes."""
    messages, seconds = 0, 0.0
    pattern = r"offloaded (\d+) messages .* in \d+ rounds, ([\d.]+) s"
    for m in re.finditer(pattern, log.read_text(errors="replace")):
        messages += int(m.group(1))
        seconds += float(m.group(2))
    return messages, seconds


def _per_queue(queues: int) -> int:
    return LMQ_PER_QUEUE if queues >= LMQ_FROM else PER_QUEUE


def _modes(queues: int) -> dict[str, dict[str, str]]:
    return {m: k for m, k in MODES.items() if queues < LMQ_FROM or m != "every"}


def _size(queues: int, root: Path) -> list[Row]:
    store = root / "store"
    _gen(store, queues, _per_queue(queues) * queues, seed=1)
    rows, confs = [], {}
    modes = _modes(queues)
    for mode, keys in modes.items():
        work = root / mode
        work.mkdir()
        confs[mode] = _conf(work / "tiered.conf", store, work, keys)
        row = Row(mode)
        summary = work / "dispatch.json"
        row.first_wall, row.first_cpu, row.first_rss_mib = _timed(
            [RMQ, "dispatch", "-c", str(confs[mode]), "--once", "--flush", "--quiet", "--json"],
            summary,
        )
        row.extra["commitlog_gib"] = json.loads(summary.read_text())["bytes"] / (1 << 30)
        rows.append(row)
    logs = {mode: root / f"{mode}.log" for mode in modes}
    procs = {}
    launched = time.monotonic()
    for mode in modes:
        with logs[mode].open("wb") as out:
            procs[mode] = subprocess.Popen(
                [RMQ, "run", "-c", str(confs[mode])], stdout=out, stderr=subprocess.STDOUT
            )
    try:
        deadline = time.monotonic() + 300
        waiting = {row.mode: row for row in rows}
        while waiting:
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs.values())
            for mode, row in list(waiting.items()):
                if "rmq-tiered running" in logs[mode].read_text(errors="replace"):
                    row.start_s = time.monotonic() - launched
                    del waiting[mode]
            time.sleep(0.1)
        _settle([p.pid for p in procs.values()])
        before = {m: _cpu(p.pid) for m, p in procs.items()}
        time.sleep(IDLE_S)
        for row in rows:
            pid = procs[row.mode].pid
            row.idle_cpu_ms = (_cpu(pid) - before[row.mode]) * 1000 / IDLE_S
            row.idle_rss_mib = _rss_mib(pid)
            row.scrape_kib = _scrape_kib(logs[row.mode])
        done_before = {m: _offloaded(logs[m])[0] for m in modes}
        meta_before = {m: _metadata_written(logs[m]) for m in modes}
        cpu_before = {m: _cpu(p.pid) for m, p in procs.items()}
        _gen(store, queues, queues, seed=2, append=True)
        deadline = time.monotonic() + TAIL_TIMEOUT_S
        pending = set(modes)
        while pending and time.monotonic() < deadline:
            assert all(p.poll() is None for p in procs.values()), "a sidecar exited"
            for row in rows:
                if row.mode not in pending:
                    continue
                messages, seconds = _offloaded(logs[row.mode])
                if messages - done_before[row.mode] >= queues:
                    pid = procs[row.mode].pid
                    row.tail_cpu = _cpu(pid) - cpu_before[row.mode]
                    earlier = _passes_before(logs[row.mode], done_before[row.mode])
                    row.tail_pass_s = seconds - earlier
                    row.tail_rss_mib = _rss_mib(pid, "VmHWM")
                    written = _metadata_written(logs[row.mode]) - meta_before[row.mode]
                    row.tail_meta_kib = written / 1024
                    pending.discard(row.mode)
            time.sleep(0.2)
        for row in rows:
            if row.mode not in pending:
                row.status_http_s = _status_http_s(logs[row.mode], queues)
        assert not pending, "not all offloaded: " + "\n".join(
            f"{m}: {_offloaded(logs[m])} of {done_before[m]} + {queues}\n"
            + logs[m].read_text(errors="replace")[-3000:]
            for m in pending
        )
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            p.wait(60)
    for row in rows:
        row.status_s = _status_s(confs[row.mode], queues, "--json")
        row.status_table_s = _status_s(confs[row.mode], queues)
    follow = next(row for row in rows if row.mode == "follow")
    wall, cpu, rss = _timed([RMQ, "recover", "-c", str(confs["follow"]), "--force"],
                            root / "recover.out")  # fmt: skip
    follow.extra.update(recover_s=wall, recover_cpu=cpu, recover_rss_mib=rss)
    return rows


def _status_s(conf: Path, queues: int, *args: str) -> float:
    """The median wall of :data:`STATUS_RUNS` runs of ``rmq-tiered status`` with ``args``
    (which must list every queue: a JSON row or a line of the table each)."""
    walls = []
    for _ in range(STATUS_RUNS):
        started = time.perf_counter()
        done = subprocess.run([RMQ, "status", "-c", str(conf), *args],
                              check=True, capture_output=True)  # fmt: skip
        walls.append(time.perf_counter() - started)
        if args:
            assert json.loads(done.stdout)["totals"]["queues"] >= queues
        else:
            assert done.stdout.count(b"\n") >= queues
    return statistics.median(walls)


def _status_http_s(log: Path, queues: int) -> float:
    """The median wall of :data:`STATUS_RUNS` requests of the running sidecar's first
    ``/v1/status`` page (1,000 queues; the totals count all)."""
    walls = []
    for _ in range(STATUS_RUNS):
        started = time.perf_counter()
        with urllib.request.urlopen(_url(log) + "/v1/status?limit=1000", timeout=60) as answer:
            body = json.loads(answer.read())
        walls.append(time.perf_counter() - started)
        assert body["totals"]["queues"] >= queues and len(body["queues"]) == min(queues, 1000)
    return statistics.median(walls)


def _url(log: Path) -> str:
    """The sidecar's HTTP API address, from its log."""
    found = re.search(r"HTTP API listening on (http://[\d.]+:\d+)", log.read_text(errors="replace"))
    assert found, "no HTTP API address in the log"
    return found.group(1)


def _scrape(log: Path) -> str:
    """One scrape of the sidecar's ``/metrics`` (its port from its log)."""
    with urllib.request.urlopen(_url(log) + "/metrics", timeout=30) as answer:
        return str(answer.read().decode())


def _scrape_kib(log: Path) -> float:
    """KiB of one scrape of the sidecar's ``/metrics``."""
    return len(_scrape(log).encode()) / 1024


def _metadata_written(log: Path) -> float:
    """Bytes the sidecar wrote for its metadata so far (snapshots and journal)."""
    pattern = r"^rocketmq_tiered_store_metadata_written_bytes_total\{[^}]*\} ([0-9.e+]+)$"
    return sum(float(v) for v in re.findall(pattern, _scrape(log), re.M))


def _passes_before(log: Path, messages: int) -> float:
    """Seconds of the passes that offloaded the first ``messages`` messages of the log."""
    done, seconds = 0, 0.0
    pattern = r"offloaded (\d+) messages .* in \d+ rounds, ([\d.]+) s"
    for m in re.finditer(pattern, log.read_text(errors="replace")):
        if done >= messages:
            break
        done += int(m.group(1))
        seconds += float(m.group(2))
    return seconds


def _print(queues: int, rows: list[Row]) -> None:
    gib = rows[0].extra["commitlog_gib"]
    messages = _per_queue(queues) * queues
    print(f"\n{queues} queues, {messages} messages, {gib * 1024:.0f} MiB of commitlog")
    head = ("mode", "first wall s", "first CPU-s/GiB", "first CPU-us/msg", "first RSS MiB",
            "idle CPU-ms/s", "idle RSS MiB", "tail pass s", "tail CPU-s", "tail RSS MiB",
            "status s (JSON / table / HTTP page)", "scrape KiB", "tail metadata KiB",
            "start s")  # fmt: skip
    print(" | ".join(head))
    for r in rows:
        print(" | ".join([
            r.mode, f"{r.first_wall:.1f}", f"{r.first_cpu / gib:.1f}",
            f"{r.first_cpu * 1e6 / messages:.0f}", f"{r.first_rss_mib:.0f}",
            f"{r.idle_cpu_ms:.1f}", f"{r.idle_rss_mib:.0f}", f"{r.tail_pass_s:.2f}",
            f"{r.tail_cpu:.2f}", f"{r.tail_rss_mib:.0f}",
            f"{r.status_s:.2f} / {r.status_table_s:.2f} / {r.status_http_s:.2f}",
            f"{r.scrape_kib:.0f}", f"{r.tail_meta_kib:.0f}", f"{r.start_s:.1f}",
        ]))  # fmt: skip
    by = {r.mode: r for r in rows}
    follow, whole = by["follow"], by["whole-file"]
    print(f"recover --force (follow's tier, from its backend mirror): "
          f"{follow.extra['recover_s']:.1f} s, {follow.extra['recover_cpu']:.1f} CPU-s, "
          f"{follow.extra['recover_rss_mib']:.0f} MiB peak RSS")  # fmt: skip
    if "every" in by:
        every = by["every"]
        print(f"every / follow: idle CPU {every.idle_cpu_ms / max(follow.idle_cpu_ms, 0.1):.1f}x, "
              f"tail pass {every.tail_pass_s / max(follow.tail_pass_s, 0.01):.2f}x, "
              f"tail CPU {every.tail_cpu / max(follow.tail_cpu, 0.01):.2f}x")  # fmt: skip
    print(f"whole-file / follow (journal): tail metadata written "
          f"{whole.tail_meta_kib / max(follow.tail_meta_kib, 0.1):.1f}x, "
          f"tail pass {whole.tail_pass_s / max(follow.tail_pass_s, 0.01):.2f}x, "
          f"tail CPU {whole.tail_cpu / max(follow.tail_cpu, 0.01):.2f}x")  # fmt: skip


def test_many_queues() -> None:
    for queues in SIZES:
        with tempfile.TemporaryDirectory(prefix=f"bench-mq-{queues}-") as tmp:
            _print(queues, _size(queues, Path(tmp)))


@dataclass
class SpreadPass:
    wall: float
    user: float
    system: float
    messages: int
    queues: int
    floor: float
    """the plain loop's wall (see :func:`test_one_spread_pass`)"""


def test_one_spread_pass() -> None:
    """One following pass of ``run`` (in this process, alone on the machine) after
    :data:`SPREAD_QUEUES` more messages spread over the queues of a store of that many queues,
    :data:`SPREAD_RUNS` times on fresh copies of one offloaded store: its wall and CPU, against
    the plain loop of the same appends (:func:`_floor`). The broker's own writes are flushed
    (``os.sync``) before the pass, as the broker's flush would have done them: else the pass's
    first ``syncfs`` writes them back."""
    queues = SPREAD_QUEUES
    with tempfile.TemporaryDirectory(prefix=f"bench-spread-{queues}-") as tmp:
        root = Path(tmp)
        base = root / "base"
        _gen(base / "store", queues, PER_QUEUE * queues, seed=1)
        conf = _conf(base / "tiered.conf", base / "store", base, {})
        subprocess.run([RMQ, "dispatch", "-c", str(conf), "--once", "--flush", "--quiet"],
                       check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        runs = [_spread_pass(root, base, queues, n) for n in range(SPREAD_RUNS)]
        counted = _spread_instructions(root, base, queues) if shutil.which("valgrind") else None
    print(f"\none spread pass, {queues} queues ({PER_QUEUE} messages each offloaded first), "
          f"{queues} messages appended:")  # fmt: skip
    for n, r in enumerate(runs):
        print(f"  run {n}: {r.messages} messages over {r.queues} queues in {r.wall:.2f} s "
              f"(user {r.user:.2f} + system {r.system:.2f} CPU-s); the plain loop of its "
              f"appends {r.floor:.2f} s")  # fmt: skip
    wall = statistics.median(r.wall for r in runs)
    floor = statistics.median(r.floor for r in runs)
    print(f"  median {wall:.2f} s, {wall * 1e6 / max(runs[0].messages, 1):.0f} us per message; "
          f"the plain loop {floor:.2f} s: {wall / max(floor, 1e-3):.1f}x")  # fmt: skip
    if counted is not None:
        print(f"  the pass under callgrind: {counted / 1e9:.2f} G user-space instructions, "
              f"{counted / max(runs[0].queues, 1):,.0f} per queue that moved")  # fmt: skip
    assert all(r.messages == queues for r in runs)


def _spread_pass(root: Path, base: Path, queues: int, n: int) -> SpreadPass:
    """One run of :func:`test_one_spread_pass` on a fresh copy of ``base``."""
    work = root / f"run{n}"
    shutil.copytree(base, work, symlinks=True)
    conf = _conf(work / "tiered.conf", work / "store", work, {})
    cfg = load_config([conf])
    metrics.set_detail(cfg.tiered_metrics_detail.value)  # as `run` does (the suite sets queue)
    with Sidecar(cfg, build_provider(cfg)) as sidecar:
        dispatcher = sidecar.dispatcher
        dispatcher.run_pass(follow=True)  # the start's pass over every queue: the feed starts
        _gen(work / "store", queues, queues, seed=2, append=True)
        os.sync()
        before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        report = dispatcher.run_pass(follow=True)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
    floor = _floor(root / f"floor{n}", len(report.queues), report.messages, report.bytes)
    shutil.rmtree(work)
    return SpreadPass(wall, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime,
                      report.messages, len(report.queues), floor)  # fmt: skip


SPREAD_UNDER_CALLGRIND = """
import os, subprocess, sys
from tiered import metrics
from tiered.providers import build_provider
from tiered.config import load_config
from tiered.core.sidecar import Sidecar
conf, append = sys.argv[1], sys.argv[2:]
cfg = load_config([conf])
metrics.set_detail(cfg.tiered_metrics_detail.value)
with Sidecar(cfg, build_provider(cfg)) as sidecar:
    sidecar.dispatcher.run_pass(follow=True)
    subprocess.run(append, check=True)
    os.sync()
    control = ["callgrind_control", "-i"]
    subprocess.run([*control, "on", str(os.getpid())], check=True, stdout=subprocess.DEVNULL)
    report = sidecar.dispatcher.run_pass(follow=True)
    subprocess.run([*control, "off", str(os.getpid())], check=True, stdout=subprocess.DEVNULL)
print(report.messages)
"""


def _spread_instructions(root: Path, base: Path, queues: int) -> int:
    """User-space instructions of :func:`_spread_pass`'s pass alone (every thread), counted by
    valgrind's callgrind with its instrumentation on only around the pass: a figure that holds
    on a loaded machine, where the wall does not."""
    work = root / "callgrind"
    shutil.copytree(base, work, symlinks=True)
    conf = _conf(work / "tiered.conf", work / "store", work, {})
    append = _gen_args(work / "store", queues, queues, seed=2, append=True)
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=/dev/null",
         sys.executable, "-c", SPREAD_UNDER_CALLGRIND, str(conf), *append],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    shutil.rmtree(work)
    assert int(out.stdout.split()[-1]) == queues, out.stdout[-500:]
    found = re.search(r"Collected : (\d+)", out.stderr)
    assert found, out.stderr[-2000:]
    return int(found.group(1))


def _floor(scratch: Path, queues: int, messages: int, nbytes: int) -> float:
    """Seconds a plain Python loop takes to make a spread pass's appends -- per queue, its
    share of ``nbytes`` to an existing commitlog file and a 20-byte unit per message to an
    existing consumequeue file (open, ``pwrite`` at the end, close) -- and one ``os.sync``:
    what the pass must do at the least, without reading, checking or recording anything."""
    paths = [scratch / f"q{i // 100}" / f"{i}.{kind}" for i in range(queues) for kind in "lq"]
    for path in paths:
        path.parent.mkdir(exist_ok=True, parents=True)
        path.write_bytes(b"\0" * 4096)
    body, units = b"m" * (nbytes // max(queues, 1)), b"u" * (20 * messages // max(queues, 1))
    os.sync()  # (the files' own making is not timed)
    started = time.perf_counter()
    for i, path in enumerate(paths):
        fd = os.open(path, os.O_WRONLY)
        try:
            os.pwrite(fd, units if i % 2 else body, 4096)
        finally:
            os.close(fd)
    os.sync()
    seconds = time.perf_counter() - started
    shutil.rmtree(scratch)
    return seconds
