"""Provider benchmark (``make bench``): append and ranged-read throughput against raw baselines.

Per provider: appends in 4 MiB batches, a seal, then ranged reads of 16 MiB over the sealed
segment. Each repetition runs the raw baseline on the same backend right before the provider
(so both see the same machine), and the table quotes medians of MiB/s and of the per-repetition
ratio provider/raw. Baselines: ``open().write()`` + ``fsync`` per batch and ``os.pread`` for
local files; boto3 ``put_object`` per batch and ranged ``get_object`` against the same moto
server for S3. Backend requests per GiB come from the providers' request accounting.

Sizes: ``BENCH_LOCAL_MIB`` (default 256) for local backends, ``BENCH_S3_MIB`` (default 64) for
S3; ``BENCH_REPEAT`` (default 5) repetitions.
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from typing import Protocol

import pytest
from tiered.providers import FsspecProvider
from tiered.providers import MemoryProvider
from tiered.providers import PosixProvider
from tiered.providers import Provider
from tiered.providers import S3Provider
from tiered.providers.testing import seg
from tiered.providers.testing.servers import S3Endpoint
from tiered.providers.testing.servers import running_moto

MIB = 1 << 20
GIB = 1 << 30
BATCH = 4 * MIB
READ = 16 * MIB
LOCAL_MIB = int(os.environ.get("BENCH_LOCAL_MIB", "256"))
S3_MIB = int(os.environ.get("BENCH_S3_MIB", "64"))
REPEAT = int(os.environ.get("BENCH_REPEAT", "5"))
PAYLOAD = os.urandom(BATCH)


class Raw(Protocol):
    """A raw baseline on the provider's backend."""

    def write(self, rep: int, total: int) -> float: ...

    def read(self, rep: int, total: int) -> float: ...


@dataclass
class Row:
    """One line of the table."""

    provider: str
    operation: str
    mib_s: float
    raw_mib_s: float | None
    ratio: float | None
    requests: dict[str, float]


@pytest.fixture(scope="module")
def table() -> Iterator[list[Row]]:
    rows: list[Row] = []
    yield rows
    print(f"\nprovider benchmark: medians of {REPEAT}; appends of 4 MiB, reads of 16 MiB")
    print(
        f"{'provider':<18}{'operation':<10}{'MiB/s':>8}{'raw MiB/s':>10}{'ratio':>7}"
        f"{'req/GiB':>9}  requests per GiB by operation"
    )
    for r in rows:
        raw = f"{r.raw_mib_s:10.0f}" if r.raw_mib_s else f"{'-':>10}"
        ratio = f"{r.ratio:7.2f}" if r.ratio else f"{'-':>7}"
        ops = " ".join(f"{k}={v:.0f}" for k, v in sorted(r.requests.items()))
        total = sum(r.requests.values())
        print(f"{r.provider:<18}{r.operation:<10}{r.mib_s:8.0f}{raw}{ratio}{total:9.0f}  {ops}")


def _since(start: float) -> float:
    return time.perf_counter() - start


class Recorder:
    """Counts backend requests per phase (append, seal, read)."""

    def __init__(self) -> None:
        self.phase = "append"
        self.counts: dict[str, dict[str, int]] = {"append": {}, "seal": {}, "read": {}}

    def __call__(self, operation: str) -> None:
        bucket = self.counts[self.phase]
        bucket[operation] = bucket.get(operation, 0) + 1


def measure(
    name: str, make: Callable[[], Provider], total: int, raw: Raw | None, table: list[Row]
) -> None:
    """Append ``total`` bytes in 4 MiB batches, seal, read in 16 MiB ranges; ``REPEAT`` times."""
    times: dict[str, list[float]] = {"append": [], "seal": [], "read": []}
    raw_times: dict[str, list[float]] = {"append": [], "read": []}
    recorder = Recorder()
    for rep in range(REPEAT):
        provider = make()
        key = seg(rep)
        provider.add_request_listener(recorder)
        if raw:
            raw_times["append"].append(raw.write(rep, total))
        recorder.phase = "append"
        start = time.perf_counter()
        for position in range(0, total, BATCH):
            provider.append(key, PAYLOAD, position)
        times["append"].append(_since(start))
        recorder.phase = "seal"
        start = time.perf_counter()
        provider.seal(key)
        times["seal"].append(_since(start))
        if raw:
            raw_times["read"].append(raw.read(rep, total))
        recorder.phase = "read"
        start = time.perf_counter()
        for position in range(0, total, READ):
            assert len(provider.read(key, position, READ)) == min(READ, total - position)
        times["read"].append(_since(start))
        provider.remove_request_listener(recorder)
        provider.delete(key)
        provider.close()
    gib = total * REPEAT / GIB
    for operation, runs in times.items():
        rate = total / MIB / statistics.median(runs)
        raws = raw_times.get(operation)
        raw_rate = total / MIB / statistics.median(raws) if raws else None
        ratio = statistics.median(r / t for r, t in zip(raws, runs, strict=True)) if raws else None
        per_gib = {k: v / gib for k, v in recorder.counts[operation].items()}
        table.append(Row(name, operation, rate, raw_rate, ratio, per_gib))


# --- raw baselines --------------------------------------------------------------------------------


class RawLocal:
    """``open().write()`` + fsync per 4 MiB batch, and ``os.pread`` of 16 MiB."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def write(self, rep: int, total: int) -> float:
        start = time.perf_counter()
        with open(self.directory / f"raw-{rep}", "wb") as f:
            for _ in range(0, total, BATCH):
                f.write(PAYLOAD)
                f.flush()
                os.fsync(f.fileno())
        return _since(start)

    def read(self, rep: int, total: int) -> float:
        path = self.directory / f"raw-{rep}"
        start = time.perf_counter()
        fd = os.open(path, os.O_RDONLY)
        try:
            for position in range(0, total, READ):
                os.pread(fd, READ, position)
        finally:
            os.close(fd)
        elapsed = _since(start)
        path.unlink()
        return elapsed


class RawS3:
    """boto3 ``put_object`` per 4 MiB batch, and ranged ``get_object`` of 16 MiB."""

    def __init__(self, endpoint: S3Endpoint, bucket: str) -> None:
        self.client: Any = endpoint.client()
        self.bucket = bucket

    def write(self, rep: int, total: int) -> float:
        start = time.perf_counter()
        for position in range(0, total, BATCH):
            key = f"raw/{rep}/{position:020d}"
            self.client.put_object(Bucket=self.bucket, Key=key, Body=PAYLOAD)
        return _since(start)

    def read(self, rep: int, total: int) -> float:
        key = f"raw/{rep}.whole"
        self.client.put_object(Bucket=self.bucket, Key=key, Body=PAYLOAD * (total // BATCH))
        start = time.perf_counter()
        for position in range(0, total, READ):
            end = min(position + READ, total) - 1
            response = self.client.get_object(
                Bucket=self.bucket, Key=key, Range=f"bytes={position}-{end}"
            )
            response["Body"].read()
        return _since(start)


# --- the runs -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def moto() -> Iterator[S3Endpoint]:
    with running_moto(account="bench") as endpoint:
        yield endpoint


def test_local_providers(tmp_path: Path, table: list[Row]) -> None:
    total = LOCAL_MIB * MIB
    raw = RawLocal(tmp_path / "raw")
    measure("posix", lambda: PosixProvider(tmp_path / "posix"), total, raw, table)
    measure("fsspec file://", lambda: FsspecProvider(f"file://{tmp_path}/fs"), total, raw, table)
    measure("memory", MemoryProvider, total, None, table)


def test_s3_providers(moto: S3Endpoint, table: list[Row]) -> None:
    total = S3_MIB * MIB
    bucket = moto.new_bucket()
    raw = RawS3(moto, bucket)

    def s3() -> Provider:
        return S3Provider(
            bucket,
            prefix=f"s3/{uuid.uuid4().hex[:8]}",
            endpoint=moto.url,
            access_key=moto.access_key,
            secret_key=moto.secret_key,
            path_style=True,
        )

    def fsspec_s3() -> Provider:
        options = moto.options().s3fs_storage_options()
        return FsspecProvider(f"s3://{bucket}/fs/{uuid.uuid4().hex[:8]}", storage_options=options)

    measure("s3 (moto)", s3, total, raw, table)
    measure("fsspec s3 (moto)", fsspec_s3, total, raw, table)
