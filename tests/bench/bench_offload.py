"""Benchmark: ``dispatch --once --flush`` of a ~2 GiB store to posix, beside ``cp -r`` + ``sync``.

Run with ``make bench`` (not part of the test run; needs ~7 GB of free disk). One generated store
of :data:`SIZE_BYTES` (16 queues, 1 KiB bodies, 1 GiB commitlog files) is offloaded with the
default configuration (1 GiB flat commitlog segments, 4 MiB / 4096-message batches, every append
fsync'd) by a ``rmq-tiered dispatch`` subprocess, and copied with ``cp -r`` of the commitlog
directory followed by ``sync`` (so both end durable), alternately, :data:`REPEAT` times, the page
cache warmed before each run. Printed: medians, their ratio, the dispatch process's peak RSS.

A second part offloads :data:`S3_SIZE_BYTES` to S3 (moto over HTTP) and prints requests per GiB
of message bytes, by operation (PUT = one per chunk append, per metadata mirror, per part).
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from tiered.providers.testing.servers import HttpFaults, moto_server

from tiered.broker.generator import GenSpec, generate_store
from tiered.config import load_config
from tiered.core.sidecar import Sidecar, build_provider
from tiered.core.tier_check import check_tier

SIZE_BYTES = 2 << 30
S3_SIZE_BYTES = 256 << 20
UNIT_BYTES = 1024 + 170  # a 1 KiB body plus header, topic and properties
REPEAT = 3
RMQ_TIERED = Path(sys.executable).parent / "rmq-tiered"


def _spec(nbytes: int) -> GenSpec:
    return GenSpec(
        seed=1,
        topics=2,
        queues=8,
        messages=nbytes // UNIT_BYTES,
        min_body=1024,
        max_body=1024,
        commitlog_file_size=1 << 30,
    )


def _warm(directory: Path) -> None:
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


def _cp(store: Path, target: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(["cp", "-r", str(store / "commitlog"), str(target)], check=True)
    subprocess.run(["sync"], check=True)
    return time.perf_counter() - t0


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


def _dispatch(conf: Path, cwd: Path) -> tuple[float, int, dict[str, object]]:
    """Run one dispatch; (seconds, peak RSS, summary). The peak is polled from /proc: the
    rusage of a forked child also counts the parent's pages it inherited."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [RMQ_TIERED, "dispatch", "--config", str(conf), "--once", "--flush", "--json"],
        stdout=subprocess.PIPE,
        cwd=cwd,
    )
    peak = 0
    stop = threading.Event()

    def poll() -> None:
        nonlocal peak
        while not stop.wait(0.02):
            peak = max(peak, _hwm(proc.pid))

    watcher = threading.Thread(target=poll)
    watcher.start()
    out, _ = proc.communicate()
    seconds = time.perf_counter() - t0
    stop.set()
    watcher.join()
    assert proc.returncode == 0
    summary: dict[str, object] = json.loads(out.decode().splitlines()[-1])
    return seconds, peak, summary


def test_offload_2gib_against_cp(tmp_path: Path) -> None:
    store = tmp_path / "store"
    report = generate_store(store, _spec(SIZE_BYTES))
    cp_s, run_s, pass_s, rss = [], [], [], []
    summary: dict[str, object] = {}
    for i in range(REPEAT):
        _warm(store / "commitlog")
        cp_s.append(_cp(store, tmp_path / f"copy{i}"))
        shutil.rmtree(tmp_path / f"copy{i}")
        work = tmp_path / f"work{i}"
        conf = _conf(tmp_path / f"bench{i}.conf", store, work)
        _warm(store / "commitlog")
        seconds, peak, summary = _dispatch(conf, tmp_path)
        assert summary["messages"] == report.messages and summary["bytes"] == report.bytes
        run_s.append(seconds)
        pass_s.append(float(summary["seconds"]))  # type: ignore[arg-type]
        rss.append(peak)
        shutil.rmtree(work)
    cp, run, in_pass = statistics.median(cp_s), statistics.median(run_s), statistics.median(pass_s)
    mib = report.bytes / (1 << 20)
    print(
        f"\noffload of {mib:.0f} MiB ({report.messages} messages, 16 queues, 1 KiB bodies) to "
        f"posix, median of {REPEAT}:\n"
        f"  cp -r commitlog + sync     {cp:7.2f} s  {mib / cp:7.1f} MiB/s  "
        f"(runs: {', '.join(f'{x:.2f}' for x in cp_s)})\n"
        f"  rmq-tiered dispatch        {run:7.2f} s  {mib / run:7.1f} MiB/s  "
        f"(runs: {', '.join(f'{x:.2f}' for x in run_s)}; process start included)\n"
        f"  of which the offload pass  {in_pass:7.2f} s  {mib / in_pass:7.1f} MiB/s\n"
        f"  ratio dispatch / cp        {run / cp:7.2f}   (pass only: {in_pass / cp:.2f})\n"
        f"  peak RSS of dispatch       {max(rss) / (1 << 20):7.0f} MiB\n"
        f"  requests                   {summary['requests']}"
    )


def test_s3_requests_per_gib(tmp_path: Path) -> None:
    server = moto_server(HttpFaults())
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        import boto3

        boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        ).create_bucket(Bucket="bench")
        store = tmp_path / "store"
        report = generate_store(store, _spec(S3_SIZE_BYTES))
        cfg = load_config(
            [
                _conf(
                    tmp_path / "s3.conf",
                    store,
                    tmp_path,
                    {
                        "tieredBackendServiceProvider": "s3",
                        "objectStoreEndpoint": endpoint,
                        "objectStoreBucket": "bench",
                        "objectStoreAccessKey": "testing",
                        "objectStoreSecretKey": "testing",
                        "objectStorePathStyle": "true",
                    },
                )
            ],
            env={},
        )
        provider = build_provider(cfg)
        ops: Counter[str] = Counter()
        lock = threading.Lock()

        def count(operation: str) -> None:
            with lock:
                ops[operation] += 1

        provider.add_request_listener(count)
        t0 = time.perf_counter()
        with Sidecar(cfg, provider) as sidecar:
            done = sidecar.dispatcher.run_pass(flush=True)
        seconds = time.perf_counter() - t0
        assert done.messages == report.messages
        gib = report.bytes / (1 << 30)
        check = check_tier(cfg, build_provider(cfg))
        assert check.problems == [] and check.messages == report.messages
    finally:
        server.stop()
    per_gib = {k: round(v / gib) for k, v in sorted(ops.items())}
    print(
        f"\noffload of {report.bytes / (1 << 20):.0f} MiB to S3 (moto over HTTP) in "
        f"{seconds:.1f} s ({report.bytes / (1 << 20) / seconds:.0f} MiB/s):\n"
        f"  PUTs per GiB               {ops['PUT'] / gib:7.0f}\n"
        f"  requests per GiB by kind   {per_gib}\n"
        f"  requests per GiB, total    {sum(ops.values()) / gib:7.0f}"
    )
