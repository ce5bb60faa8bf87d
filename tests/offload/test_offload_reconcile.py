"""Crash consistency: a crash at every provider call, then restart.

A crash is simulated in-process: at the chosen moment the provider and the metadata store go
"dead" (every later call raises :class:`Crash`, a ``BaseException`` nothing catches), the
abandoned sidecar's threads are drained, and a new sidecar starts on the same backend and data
directory. It must reconcile, finish the offload, and leave every queue offset in the tier exactly
once with the broker's bytes.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tiered.providers import MemoryProvider
from tiered.providers import PosixProvider
from tiered.providers import Provider
from tiered.providers import WrappedProvider
from tiered.providers.faults import FaultInjectingProvider
from tiered.providers.faults import FaultPlan

from tiered.broker.generator import GenSpec
from tiered.broker.generator import generate_store
from tiered.config import TieredConfig
from tiered.core.clean_stop import CLEAN_STOP_NAME
from tiered.core.sidecar import Sidecar
from tiered.file import reconcile
from tiered.metadata import FileSegmentType
from tiered.testing.sample_tier import SidecarCase
from tiered.testing.sample_tier import rolling_spec
from tiered.testing.tier_check import check_tier
from tiered.testing.tier_check import read_document


class Crash(BaseException):
    """The process died."""


class Dying(WrappedProvider):
    """Dies at call ``at`` (1-based), before or after it takes effect; dead after that."""

    def __init__(self, inner: Provider, at: int, *, after: bool) -> None:
        super().__init__(inner)
        self.at, self.after = at, after
        self.calls = 0
        self.dead = False

    def _around(self, operation: str, key: str, call: Callable[[], Any]) -> Any:
        if self.dead:
            raise Crash(operation)
        self.calls += 1
        if self.calls == self.at and not self.after:
            self.dead = True
            raise Crash(operation)
        try:
            return call()
        finally:
            if self.calls == self.at:
                self.dead = True
                raise Crash(operation)


def crash_run(cfg: TieredConfig, provider: Dying) -> bool:
    """A flush pass that dies when ``provider`` says; True if it died.

    A crash inside a metadata persist needs no sweep of its own: the file is replaced
    atomically (old or new, :mod:`tiered.metadata.atomic`), so it equals a crash just before or
    just after the persist, and the mirror put that follows is a provider call of the sweep.
    """
    sidecar = Sidecar(cfg, provider, lock=False, workers=2)
    try:
        sidecar.open()
        sidecar.dispatcher.run_pass(flush=True)
    except Crash:
        died = True
    else:
        died = False
    finally:
        provider.dead = True  # whatever still runs in the abandoned sidecar dies now
        sidecar.dispatcher.close(cancel=True)
        if sidecar.index is not None:  # or its saver writes the next one's progress.fast.json
            sidecar.index.stop_saver()
    return died


def finish(cfg: TieredConfig, provider: Provider) -> int:
    with Sidecar(cfg, provider, lock=False) as sidecar:
        report = sidecar.dispatcher.run_pass(flush=True)
    assert not report.errors
    return report.messages


@pytest.fixture(scope="module")
def tiny_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GenSpec]:
    spec = rolling_spec(
        seed=3, topics=1, queues=2, messages=240, min_body=20, max_body=300,
        commitlog_file_size=64 << 10, cq_file_entries=100, compress_fraction=0.0,
    )  # fmt: skip
    root = tmp_path_factory.mktemp("tiny") / "store"
    generate_store(root, spec)
    return root, spec


def tiny_config(offload_case: SidecarCase, store: Path, spec: GenSpec, work: Path) -> TieredConfig:
    return offload_case.config(
        store,
        spec=spec,
        work=work,
        tieredStoreCommitLogMaxSize=6000,
        tieredStoreConsumeQueueMaxSize=30 * 20,
        tieredStoreGroupCommitCount=16,
        tieredStoreGroupCommitSize=4000,
    )


def count_calls(cfg: TieredConfig) -> int:
    probe = Dying(MemoryProvider(), at=10**9, after=False)
    assert not crash_run(cfg, probe)
    return probe.calls


@pytest.fixture
def fast_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory on tmpfs when there is one (the sweep persists metadata thousands of times;
    fsync there is free), else ``tmp_path``."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(prefix="offload-sweep-", dir=shm))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_a_crash_at_every_provider_call_loses_and_duplicates_nothing(
    tiny_store: tuple[Path, GenSpec], offload_case: SidecarCase, fast_dir: Path
) -> None:
    store, spec = tiny_store
    tmp_path = fast_dir
    total = count_calls(tiny_config(offload_case, store, spec, tmp_path / "probe"))
    # ~90: the appends and creations of ~30 rounds, and the metadata mirror (put at a pass's
    # first round and its end, within the pass at most every MIRROR_INTERVAL_S)
    assert total > 80
    points = 0
    for at in range(1, total + 1):
        for after in (False, True):
            work = tmp_path / f"c{at}{'a' if after else 'b'}"
            cfg = tiny_config(offload_case, store, spec, work)
            inner = MemoryProvider()
            assert crash_run(cfg, Dying(inner, at, after=after))
            finish(cfg, inner)
            check_tier(cfg, inner).assert_ok(240, context=(at, after))
            points += 1
    assert points == 2 * total > 160


def test_a_posix_crash_sweep(
    tiny_store: tuple[Path, GenSpec], offload_case: SidecarCase, tmp_path: Path
) -> None:
    store, spec = tiny_store
    for at in (5, 17, 40, 77, 120):
        cfg = tiny_config(offload_case, store, spec, tmp_path / f"p{at}")
        inner = PosixProvider(cfg.tiered_store_file_path)
        crash_run(cfg, Dying(inner, at, after=at % 2 == 1))
        finish(cfg, inner)
        check_tier(cfg, inner).assert_ok(240, context=at)


def test_unrecorded_units_that_agree_are_kept_not_uploaded_again(
    tiny_store: tuple[Path, GenSpec], offload_case: SidecarCase, tmp_path: Path
) -> None:
    store, spec = tiny_store
    cfg = tiny_config(offload_case, store, spec, tmp_path)
    inner = MemoryProvider()
    # die right after an upload of consumequeue units, before the round's metadata persist
    dying = Dying(inner, 0, after=True)
    cq_appends = 0

    class StopAfterThirdCq(WrappedProvider):
        def append(self, key: str, data: Any, position: int) -> int:
            nonlocal cq_appends
            size = super().append(key, data, position)
            if "/CONSUME_QUEUE/" in key:
                cq_appends += 1
                if cq_appends == 3:
                    dying.dead = True
                    raise Crash("after the third consumequeue upload")
            return size

    dying.inner = StopAfterThirdCq(inner)
    assert crash_run(cfg, dying)
    recorded = {
        path: sum(s.size for s in segs.values())
        for path, segs in read_document(cfg).segment_table(FileSegmentType.CONSUME_QUEUE).items()
    }
    with Sidecar(cfg, inner, lock=False) as sidecar:
        kept = sum(r.kept_units for r in sidecar.reports)
        assert kept > 0  # uploaded but unrecorded units were judged whole and kept
        report = sidecar.dispatcher.run_pass(flush=True)
    now = read_document(cfg).segment_table(FileSegmentType.CONSUME_QUEUE)
    assert sum(recorded.values()) < sum(s.size for segs in now.values() for s in segs.values())
    assert report.messages == 240 - sum(recorded.values()) // 20 - kept
    check_tier(cfg, inner).assert_ok(240)


def test_garbage_tails_are_cut_without_truncate(
    tiny_store: tuple[Path, GenSpec], offload_case: SidecarCase, tmp_path: Path
) -> None:
    source, spec = tiny_store
    store = tmp_path / "store"
    shutil.copytree(source, store)
    cfg = tiny_config(offload_case, store, spec, tmp_path)
    inner = PosixProvider(cfg.tiered_store_file_path)
    finish(cfg, inner)
    with Sidecar(cfg, inner, lock=False) as sidecar:
        flats = sidecar.flat_store.files()
        cq_key = flats[0].consume_queue.key(flats[0].consume_queue.segments[-1].base)
        cl_key = flats[0].commitlog.key(flats[0].commitlog.segments[-1].base)
        cq2 = flats[1].consume_queue.key(flats[1].consume_queue.segments[-1].base)
    # what a crash leaves: no record of a clean stop (which would skip the reconciliation), and
    # a partial unit on one queue, a whole unit pointing nowhere on the other, a torn message
    (cfg.tiered_data_dir / CLEAN_STOP_NAME).unlink()
    inner.append(cq_key, b"\x00\x01\x02\x03\x04\x05\x06", inner.size(cq_key))
    inner.append(
        cq2, (10**9).to_bytes(8, "big") + (100).to_bytes(4, "big") + bytes(8), inner.size(cq2)
    )
    inner.append(cl_key, b"\xde\xad" * 33, inner.size(cl_key))
    with Sidecar(cfg, inner, lock=False) as sidecar:
        reports = {r.path: r for r in sidecar.reports}
    assert reports[flats[0].path].cut_bytes == 7 and reports[flats[1].path].cut_bytes == 20
    assert reports[flats[0].path].orphan_bytes == 66
    generate_store(store, dataclasses.replace(spec, seed=9, messages=200, append=True))
    assert finish(cfg, inner) == 200
    check_tier(cfg, inner).assert_ok(440)


def test_reconcile_is_a_no_op_on_a_clean_tier(
    tiny_store: tuple[Path, GenSpec], offload_case: SidecarCase, tmp_path: Path
) -> None:
    store, spec = tiny_store
    cfg = tiny_config(offload_case, store, spec, tmp_path)
    inner = MemoryProvider()
    finish(cfg, inner)
    with Sidecar(cfg, inner, lock=False) as sidecar:
        assert not any(r.changed for r in sidecar.reports)
        again = [reconcile(f) for f in sidecar.flat_store.files()]
    assert not any(r.changed or r.cut_bytes or r.kept_units for r in again)


class _Sizes(WrappedProvider):
    """Counts ``size`` calls (restart reconciliation asks each queue's last segments')."""

    def __init__(self, inner: Provider) -> None:
        super().__init__(inner)
        self.sizes = 0

    def _around(self, operation: str, key: str, call: Callable[[], Any]) -> Any:
        self.sizes += operation == "size"
        return call()


def test_a_clean_stop_skips_the_reconciliation_once(
    tiny_store: tuple[Path, GenSpec], offload_case: SidecarCase, tmp_path: Path
) -> None:
    store, spec = tiny_store
    cfg = tiny_config(offload_case, store, spec, tmp_path)
    inner = MemoryProvider()
    assert finish(cfg, inner) == 240
    record = cfg.tiered_data_dir / CLEAN_STOP_NAME
    assert record.exists()
    counted = _Sizes(inner)
    sidecar = Sidecar(cfg, counted, lock=False).open()
    try:
        assert sidecar.clean_start and sidecar.reports == [] and counted.sizes == 0
        assert not record.exists()  # taken at the start: a crash from here on reconciles
        assert len(sidecar.flat_store) == 2
    finally:
        sidecar.close()
    assert record.exists()
    # the metadata replaced since the stop (here: rewritten whole): the record does not match
    meta = cfg.tiered_data_dir / "config" / "tieredStoreMetadata.json"
    data = meta.read_bytes()
    meta.unlink()
    meta.write_bytes(data)
    with Sidecar(cfg, _Sizes(inner), lock=False) as sidecar:
        assert not sidecar.clean_start and len(sidecar.reports) == 2
    check_tier(cfg, inner).assert_ok(240)


def test_a_stop_with_failed_uploads_leaves_the_next_start_to_reconcile(
    tiny_store: tuple[Path, GenSpec], offload_case: SidecarCase, tmp_path: Path
) -> None:
    source, spec = tiny_store
    store = tmp_path / "store"
    shutil.copytree(source, store)
    cfg = tiny_config(offload_case, store, spec, tmp_path)
    inner = MemoryProvider()
    assert finish(cfg, inner) == 240
    generate_store(store, dataclasses.replace(spec, seed=9, messages=100, append=True))
    # every upload fails: the pass gives up with the batches pending
    failing = FaultInjectingProvider(inner, FaultPlan(rate=1.0, operations={"append"}))
    with Sidecar(cfg, failing, lock=False) as sidecar:
        assert sidecar.clean_start
        report = sidecar.dispatcher.run_pass(flush=True)
        assert report.errors and len(sidecar.flat_store.unsettled()) == 2
    assert not (cfg.tiered_data_dir / CLEAN_STOP_NAME).exists()
    with Sidecar(cfg, inner, lock=False) as sidecar:
        assert not sidecar.clean_start and len(sidecar.reports) == 2
        assert sidecar.dispatcher.run_pass(flush=True).messages == 100
    check_tier(cfg, inner).assert_ok(340)
