"""``tieredUploadMaxBytesPerSecond``: a real offload of a generated store under the upload quota
takes as long as its bytes need at that rate, writes a tier byte-identical to an unthrottled one,
and keeps ``status`` and the lag gauges honest while it is held; with the quota at 0 nothing
changes."""

from __future__ import annotations

import hashlib
import itertools
import threading
import time
from pathlib import Path

from prometheus_client import REGISTRY
from tiered.providers import QuotaProvider
from tiered.providers import build_provider

from tiered.broker.generator import GenSpec
from tiered.config import TieredConfig
from tiered.core.sidecar import Sidecar
from tiered.core.status_report import collect_status
from tiered.testing.sample_tier import SidecarCase
from tiered.testing.tier_check import check_tier

MIB = 1 << 20
RATE = 2 * MIB
"""The quota: a quarter of the store's bytes per second."""
SPEC = GenSpec(
    seed=48, topics=2, queues=2, messages=7000, min_body=600, max_body=1700,
    commitlog_file_size=2 * MIB, cq_file_entries=4000,
)  # fmt: skip
"""About 8 MiB of messages in 4 queues."""
KEYS = {
    "tieredStoreCommitLogMaxSize": MIB,
    "tieredStoreGroupCommitSize": 256 << 10,
    "tieredStoreGroupCommitCount": 1024,
    "objectStoreGroupCommitSize": 256 << 10,
}


def tier_files(root: Path) -> dict[str, str]:
    """sha256 of every segment object under a posix tier (the metadata mirror left out: it
    holds times)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "config" not in p.relative_to(root).parts
    }


def uploaded_bytes() -> float:
    """Bytes every provider of this process has written (appends and puts)."""
    total = 0.0
    for family in REGISTRY.collect():
        if family.name == "rocketmq_tiered_store_provider_upload_bytes":
            total += sum(s.value for s in family.samples if s.name.endswith("_sum"))
    return total


def metric(name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` with ``labels`` (every series of the family)."""
    total = 0.0
    for family in REGISTRY.collect():
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                total += sample.value
    return total


def offload(cfg: TieredConfig, during: list[tuple[float, int, float]] | None = None) -> float:
    """Offload the whole store with one flushing pass; the seconds it took. With ``during``,
    sample ``(time, status lagMessages, dispatch_behind)`` every 0.2 s while it runs."""
    with Sidecar(cfg) as sidecar:
        done = threading.Event()
        report = []

        def run() -> None:
            try:
                report.append(sidecar.dispatcher.run_pass(flush=True))
            finally:
                done.set()

        started = time.monotonic()
        worker = threading.Thread(target=run)
        worker.start()
        while not done.wait(0.2):
            if during is not None:
                lag = collect_status(cfg).totals()["lagMessages"]
                behind = metric("rocketmq_tiered_store_dispatch_behind")
                during.append((time.monotonic() - started, lag, behind))
        worker.join()
        elapsed = time.monotonic() - started
        assert report and not report[0].errors, report
        return elapsed


def test_an_offload_under_the_upload_quota_takes_its_bytes_at_that_rate(tmp_path: Path) -> None:
    case = SidecarCase(tmp_path, SPEC, dict(KEYS))
    store = case.store()
    free_cfg = case.config(store, "posix", work=tmp_path / "free")
    held_cfg = case.config(
        store, "posix", work=tmp_path / "held", tieredUploadMaxBytesPerSecond=RATE
    )
    assert isinstance(build_provider(held_cfg), QuotaProvider)
    waited = metric("rocketmq_tiered_store_quota_wait_seconds_total", direction="upload")

    free = offload(free_cfg)  # the quota is 0: no wrapper, no wait
    assert metric("rocketmq_tiered_store_quota_wait_seconds_total", direction="upload") == waited

    before = uploaded_bytes()
    samples: list[tuple[float, int, float]] = []
    held = offload(held_cfg, samples)
    sent = uploaded_bytes() - before
    waited = metric("rocketmq_tiered_store_quota_wait_seconds_total", direction="upload") - waited
    rate = sent / held / MIB
    print(
        f"\nupload quota {RATE / MIB:.0f} MiB/s: {sent / MIB:.2f} MiB in {held:.2f} s = "
        f"{rate:.2f} MiB/s (unthrottled {free:.2f} s); waited {waited:.1f} s in all"
    )
    assert sent >= 7.5 * MIB
    assert held >= sent / RATE * 0.97  # the bucket starts empty: every byte waits for its turn
    assert held <= sent / RATE + free + 2.0
    assert waited > 0

    # the same tier, byte for byte, and every message in it
    free_tier, held_tier = (
        Path(free_cfg.tiered_store_file_path),
        Path(held_cfg.tiered_store_file_path),
    )
    assert tier_files(held_tier) == tier_files(free_tier)
    assert len(tier_files(held_tier)) > 20
    check_tier(held_cfg, build_provider(held_cfg)).assert_ok(SPEC.messages)

    # while held, status and the lag gauge showed the backlog, shrinking, never a false zero
    lags = [lag for _, lag, _ in samples]
    behind = [b for _, _, b in samples]
    assert len(samples) >= 5, samples  # (0.2 s apart plus a status each: fewer on a busy machine)
    assert lags[0] > 0 and all(a >= b for a, b in itertools.pairwise(lags)), lags
    assert lags[-1] < lags[0]
    assert max(behind) > 0 and len(set(behind)) >= 3, behind  # updated batch by batch
    assert collect_status(held_cfg).totals()["lagMessages"] == 0
