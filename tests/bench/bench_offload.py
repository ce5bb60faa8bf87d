"""Benchmark: ``dispatch --once --flush`` to posix beside ``cp -r commitlog && sync``, with the
key index on (the default) and off, for 1 KiB, 4 KiB and 256-byte bodies.

Run with ``make bench`` (not part of the test run; needs ~8 GB of free disk). For each body size
one store of about :data:`SIZE_BYTES` is generated (16 queues interleaved in the commitlog as
concurrent producers leave them, ``UNIQ_KEY`` plus ``KEYS`` in the realistic key mix of
``gen-store --key-mix realistic``: shared and duplicate tokens, blank ones, 3 % non-ASCII tokens
in CJK, Cyrillic and outside the BMP; 1 GiB commitlog files) and offloaded with the default
configuration by a ``rmq-tiered dispatch`` process (process start included, bytecode compiled
as pip installs it), index on and index off, alternating with the copy, :data:`REPEAT` times,
the previous run's deletions synced and the page cache warmed before each run (:func:`_warm`).
Printed per size: medians of wall time and their ratio to the copy, CPU-seconds (user + system,
from the process's own rusage; the copy's beside it) per GiB of message bytes, peak RSS (polled
``VmHWM``), and the CPU the whole machine spent per GiB until a ``sync`` after the run (the copy's
writeback is done by ``sync`` and the kernel's flusher threads, the sidecar's by its own
``fdatasync``: only this figure compares them).

``RMQ_BENCH_OFFLOAD_BODIES`` (comma-separated body sizes, default ``1024,4096,256``) and
``RMQ_BENCH_OFFLOAD_REPEAT`` (default 3) narrow a run.

A second part offloads :data:`S3_SIZE_BYTES` to S3 (moto over HTTP) and prints requests per GiB
of message bytes, by operation (PUT = one per chunk append, per metadata mirror, per part).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tiered.providers import RequestCounts
from tiered.providers import build_provider
from tiered.providers.testing.servers import running_moto

from tiered.broker.generator import GenSpec
from tiered.broker.generator import generate_store
from tiered.config import load_config
from tiered.core.sidecar import Sidecar
from tiered.testing.tier_check import check_tier

SIZE_BYTES = 1200 << 20
S3_SIZE_BYTES = 256 << 20
BODIES = tuple(
    int(b) for b in os.environ.get("RMQ_BENCH_OFFLOAD_BODIES", "1024,4096,256").split(",")
)
REPEAT = int(os.environ.get("RMQ_BENCH_OFFLOAD_REPEAT", "3"))
OVERHEAD = 240  # header, topic and properties (UNIQ_KEY, two KEYS tokens, TAGS) of a unit
RMQ_TIERED = Path(sys.executable).parent / "rmq-tiered"
INSTALLED_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
"""The sidecar's environment as installed: pip compiles its bytecode at install, so a start loads
it instead of compiling every module (here a warm-up run writes it once, before the first
measurement)."""


def _spec(nbytes: int, body: int = 1024) -> GenSpec:
    return GenSpec(
        seed=1,
        topics=2,
        queues=8,
        messages=nbytes // (body + OVERHEAD),
        min_body=body,
        max_body=body,
        keys_per_message=2,
        key_mix="realistic",
        commitlog_file_size=1 << 30,
    )


def _warm(directory: Path) -> None:
    """Before each measured run: ``sync``, so the run does not pay for the previous one's
    deleted files (on ext4 mounted with ``discard``, the first ``fdatasync`` after the removal of
    a 1.2 GB copy waited for that journal commit and its TRIMs: +0.37 s for the sidecar, whose
    first syncs come early, +0.07 s for the copy, which syncs once at its end), then read the
    commitlog into the page cache."""
    subprocess.run(["sync"], check=True)
    for f in sorted(directory.iterdir()):
        with f.open("rb") as fh:
            while fh.read(64 << 20):
                pass


def _conf(path: Path, store: Path, work: Path, extra: dict[str, str] | None = None) -> Path:
    keys = {
        "storePathRootDir": str(store),
        "brokerName": "broker-a",
        "tieredDataDir": str(work / "data"),
        "tieredBackendServiceProvider": "posix",
        "tieredStoreFilePath": str(work / "tier"),
    }
    keys.update(extra or {})
    path.write_text("".join(f"{k}={v}\n" for k, v in keys.items()), encoding="utf-8")
    return path


@dataclass
class Run:
    """One measured process: wall seconds, CPU-seconds (user + system), peak RSS bytes, and the
    CPU-seconds the whole machine was busy from its start to the end of a ``sync`` after it."""

    wall: float
    cpu: float
    rss: int
    node: float


def _busy() -> float:
    """CPU-seconds the machine has been busy (user, nice, system, irq, softirq: /proc/stat)."""
    user, nice, system, _idle, _iowait, irq, softirq = map(
        int, Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]
    )
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def _measure(argv: list[str], cwd: Path) -> tuple[Run, bytes]:
    """Run ``argv``; its wall time, its own CPU time (``wait4`` rusage), its peak RSS, polled
    from /proc (the rusage peak of a forked child also counts the parent's inherited pages), and
    the machine's busy CPU until a ``sync`` after it has returned: what the node pays, with the
    writeback of what the process left dirty, wherever the kernel does it."""
    busy = _busy()
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, cwd=cwd, env=INSTALLED_ENV)
    peak = 0
    stop = threading.Event()

    def poll() -> None:
        nonlocal peak
        while not stop.wait(0.02):
            peak = max(peak, _hwm(proc.pid))

    watcher = threading.Thread(target=poll)
    watcher.start()
    assert proc.stdout is not None
    out = proc.stdout.read()
    proc.stdout.close()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    stop.set()
    watcher.join()
    assert proc.returncode == 0, argv
    subprocess.run(["sync"], check=True)
    return Run(wall, usage.ru_utime + usage.ru_stime, peak, _busy() - busy), out


def _cp(store: Path, target: Path) -> Run:
    """``cp -r commitlog && sync``: the copy's wall time (both), CPU of the copy itself."""
    t0 = time.perf_counter()
    run, _ = _measure(["cp", "-r", str(store / "commitlog"), str(target)], target.parent)
    return Run(time.perf_counter() - t0, run.cpu, run.rss, run.node)


def _hwm(pid: int) -> int:
    """The process's peak RSS so far (``VmHWM``), bytes; 0 once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _dispatch(conf: Path, cwd: Path) -> tuple[Run, dict[str, object]]:
    run, out = _measure(
        [str(RMQ_TIERED), "dispatch", "--config", str(conf), "--once", "--flush", "--json"], cwd
    )
    summary: dict[str, object] = json.loads(out.decode().splitlines()[-1])
    return run, summary


def _median(runs: list[Run]) -> Run:
    return Run(
        statistics.median(r.wall for r in runs),
        statistics.median(r.cpu for r in runs),
        max(r.rss for r in runs),
        statistics.median(r.node for r in runs),
    )


def test_offload_against_cp(tmp_path: Path) -> None:
    lines = [
        (
            f"\noffload to posix beside `cp -r commitlog && sync`, medians of {REPEAT} "
            "(CPU = user + system of the process, per GiB of message bytes; RSS = peak)"
        ),
        (
            f"{'body':>6} {'GiB':>5} {'msgs':>9} | {'cp s':>6} {'CPU-s/GiB':>9} | "
            f"{'index on: s':>11} {'x cp':>5} {'CPU-s/GiB':>9} {'RSS MiB':>7} | "
            f"{'index off: s':>12} {'x cp':>5} {'CPU-s/GiB':>9} {'RSS MiB':>7}"
        ),
    ]
    warm = tmp_path / "warm-up"
    generate_store(warm / "store", _spec(1 << 20))
    _dispatch(_conf(warm / "on.conf", warm / "store", warm), tmp_path)
    shutil.rmtree(warm)
    for body in BODIES:
        store = tmp_path / f"store{body}"
        report = generate_store(store, _spec(SIZE_BYTES, body))
        subprocess.run(["sync"], check=True)  # or the first copy's sync writes the new store back
        gib = report.bytes / (1 << 30)
        runs: dict[str, list[Run]] = {"cp": [], "on": [], "off": []}
        for i in range(REPEAT):
            _warm(store / "commitlog")
            runs["cp"].append(_cp(store, tmp_path / "copy"))
            shutil.rmtree(tmp_path / "copy")
            for mode, enable in (("on", "true"), ("off", "false")):
                work = tmp_path / f"work-{mode}-{i}"
                conf = _conf(tmp_path / f"{mode}.conf", store, work,
                             {"messageIndexEnable": enable})  # fmt: skip
                _warm(store / "commitlog")
                run, summary = _dispatch(conf, tmp_path)
                assert summary["messages"] == report.messages
                assert summary["bytes"] == report.bytes
                runs[mode].append(run)
                shutil.rmtree(work)
        cp, on, off = (_median(runs[k]) for k in ("cp", "on", "off"))
        lines.append(
            f"{body:>6} {gib:5.2f} {report.messages:>9} | {cp.wall:6.2f} {cp.cpu / gib:9.2f} | "
            f"{on.wall:11.2f} {on.wall / cp.wall:5.2f} {on.cpu / gib:9.2f} "
            f"{on.rss / (1 << 20):7.0f} | {off.wall:12.2f} {off.wall / cp.wall:5.2f} "
            f"{off.cpu / gib:9.2f} {off.rss / (1 << 20):7.0f}"
        )
        lines.append(
            f"{'':>6} runs: cp {', '.join(f'{r.wall:.2f}' for r in runs['cp'])} "
            f"(copy CPU {statistics.median(r.cpu for r in runs['cp']) / gib:.2f} s/GiB); "
            f"on {', '.join(f'{r.wall:.2f}' for r in runs['on'])}; "
            f"off {', '.join(f'{r.wall:.2f}' for r in runs['off'])}"
        )
        lines.append(
            f"{'':>6} the node's CPU-s/GiB (every process and kernel thread, until a sync after "
            f"the run has written everything back): cp {cp.node / gib:.2f}, "
            f"index on {on.node / gib:.2f}, index off {off.node / gib:.2f}"
        )
        shutil.rmtree(store)
    print("\n".join(lines))


def test_s3_requests_per_gib(tmp_path: Path) -> None:
    with running_moto() as moto:
        store = tmp_path / "store"
        report = generate_store(store, _spec(S3_SIZE_BYTES))
        cfg = load_config(
            [
                _conf(
                    tmp_path / "s3.conf",
                    store,
                    tmp_path,
                    {"tieredBackendServiceProvider": "s3"} | moto.config_keys(moto.new_bucket()),
                )
            ],
            env={},
        )
        provider = build_provider(cfg)
        requests = RequestCounts()
        provider.add_request_listener(requests)
        t0 = time.perf_counter()
        with Sidecar(cfg, provider) as sidecar:
            done = sidecar.dispatcher.run_pass(flush=True)
        seconds = time.perf_counter() - t0
        assert done.messages == report.messages
        gib = report.bytes / (1 << 30)
        check_tier(cfg, build_provider(cfg)).assert_ok(report.messages)
    ops = requests.counts
    per_gib = {k: round(v / gib) for k, v in sorted(ops.items())}
    print(
        f"\noffload of {report.bytes / (1 << 20):.0f} MiB to S3 (moto over HTTP) in "
        f"{seconds:.1f} s ({report.bytes / (1 << 20) / seconds:.0f} MiB/s):\n"
        f"  PUTs per GiB               {ops['PUT'] / gib:7.0f}\n"
        f"  requests per GiB by kind   {per_gib}\n"
        f"  requests per GiB, total    {sum(ops.values()) / gib:7.0f}"
    )
