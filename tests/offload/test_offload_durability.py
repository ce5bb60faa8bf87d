"""A segment record never says more than is durable: the consumequeue units a round uploads
without a sync of their own (``append_deferred``) are synced, side by side, before the round
records them; a batch's commitlog bytes are written, then synced before its units go up (its
memory is freed in between), so units beyond a record always point at durable bytes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

import pytest
from tiered.providers import BytesLike
from tiered.providers import PosixProvider
from tiered.providers import WrappedProvider

from tiered.config import TieredConfig
from tiered.core.sidecar import Sidecar
from tiered.errors import ProviderUnavailableError
from tiered.errors import TieredStoreError
from tiered.file.flat_message_file import FlatMessageFile
from tiered.file.flat_message_file import MessageBatch
from tiered.offload import dispatcher as dispatcher_mod
from tiered.testing.sample_tier import SidecarCase
from tiered.testing.tier_check import check_tier
from tiered.testing.tier_check import persisted_records

T = TypeVar("T")


class Durability(WrappedProvider):
    """Tracks how many bytes of each key are durable (a durable append's end, or the size at a
    sync), and checks before and after every backend call that no persisted record says more;
    also that every consumequeue append is deferred, and made only when the queue's commitlog
    holds no bytes that wait for a sync."""

    def __init__(self, inner: PosixProvider, cfg: TieredConfig) -> None:
        super().__init__(inner)
        self.cfg = cfg
        self.durable: dict[str, int] = {}
        self.waiting: set[str] = set()
        """Commitlog keys written by ``append_deferred`` and not synced since."""
        self.calls: Counter[str] = Counter()

    def _around(self, operation: str, key: str, call: Callable[[], T]) -> T:
        self.check()
        try:
            return call()
        finally:
            self.check()

    def append(self, key: str, data: BytesLike, position: int) -> int:
        assert "/CONSUME_QUEUE/" not in key, f"{key}: a consumequeue append waited for its sync"
        self.calls["append"] += 1
        size = self._around("append", key, lambda: self.inner.append(key, data, position))
        self.durable[key] = size
        return size

    def append_deferred(self, key: str, data: BytesLike, position: int) -> int:
        kind = _kind(key)
        self.calls[f"append_deferred {kind}"] += 1
        if kind == "cq":
            queue = key.split("/CONSUME_QUEUE/", maxsplit=1)[0]
            assert not {k for k in self.waiting if k.startswith(queue + "/COMMIT_LOG/")}, (
                f"{key}: units uploaded while the queue's commitlog waits for its sync"
            )
        size = self._around("append", key, lambda: self.inner.append_deferred(key, data, position))
        if kind == "cl":
            self.waiting.add(key)
        return size

    def sync(self, key: str) -> None:
        self.calls[f"sync {_kind(key)}"] += 1
        size = self.inner.size(key)
        self._around("sync", key, lambda: self.inner.sync(key))
        self.durable[key] = size
        self.waiting.discard(key)

    def sync_many(self, keys: Sequence[str]) -> None:
        kinds = {_kind(key) for key in keys}
        for kind in kinds:
            self.calls[f"sync_many {kind}"] += 1
        sizes = {key: self.inner.size(key) for key in keys}
        self._around("sync", "", lambda: self.inner.sync_many(keys))
        self.durable.update(sizes)
        self.waiting.difference_update(keys)

    def check(self) -> None:
        for key, record in persisted_records(self.cfg):
            durable = self.durable.get(key, 0)
            assert record.size <= durable, f"{key}: record {record.size} > {durable}"


def test_a_record_never_says_more_than_was_synced(offload_case: SidecarCase) -> None:
    cfg = offload_case.config(offload_case.store(), "posix")
    provider = Durability(PosixProvider(cfg.tiered_store_file_path), cfg)
    with Sidecar(cfg, provider) as sidecar:
        report = sidecar.dispatcher.run_pass(flush=True)
        assert not report.errors and report.messages > 0
    check_tier(cfg, provider)  # every record is whole and decodes
    calls = provider.calls
    assert calls["append_deferred cl"] > 0 and calls["append_deferred cq"] > 0
    assert calls["sync cl"] == calls["append_deferred cl"]  # each batch's, before its units
    # the syncs of a round's units: one per queue (and roll), where each batch made one before
    assert 0 < calls["sync cq"] < calls["append_deferred cq"]
    assert not provider.waiting


def _kind(key: str) -> str:
    return "cq" if "/CONSUME_QUEUE/" in key else "cl" if "/COMMIT_LOG/" in key else "other"


class _SyncWatch(WrappedProvider):
    """Checks at every commitlog sync that the batches a staged listener saw for that queue have
    already freed their bytes."""

    def __init__(self, inner: PosixProvider) -> None:
        super().__init__(inner)
        self.batches: dict[str, list[MessageBatch]] = {}
        self.checked = 0

    def sync(self, key: str) -> None:
        if "/COMMIT_LOG/" in key:
            queue = key.split("/COMMIT_LOG/", maxsplit=1)[0].split("/", 1)[1]  # broker/topic/queue
            for batch in self.batches.get(queue, []):
                assert batch.data == bytearray(), f"{key}: synced while a batch holds its bytes"
                self.checked += 1
        self.inner.sync(key)


def test_a_batch_frees_its_bytes_before_its_commitlog_sync(offload_case: SidecarCase) -> None:
    cfg = offload_case.config(offload_case.store(), "posix")
    provider = _SyncWatch(PosixProvider(cfg.tiered_store_file_path))
    sizes: list[int] = []

    def prepare(flat: FlatMessageFile, batch: MessageBatch, offsets: object) -> None:
        assert len(batch.data) == batch.nbytes > 0  # prepared with its bytes
        sizes.append(batch.nbytes)
        provider.batches.setdefault(flat.path, []).append(batch)

    with Sidecar(cfg, provider) as sidecar:
        sidecar.dispatcher.add_staged_listener(prepare)
        report = sidecar.dispatcher.run_pass(flush=True)
        assert not report.errors and report.messages > 0
    assert provider.checked >= len(sizes) > 0
    assert sum(sizes) == report.bytes  # nbytes still counts a freed batch
    assert check_tier(cfg, provider).problems == []


def _tier_files(root: str) -> dict[str, bytes]:
    """The tier's segment files (the metadata mirror, which holds times, left out)."""
    top = Path(root)
    return {
        str(p.relative_to(top)): p.read_bytes()
        for p in sorted(top.rglob("*"))
        if p.is_file() and ("/COMMIT_LOG/" in str(p) or "/CONSUME_QUEUE/" in str(p))
    }


@pytest.mark.slow
@pytest.mark.parametrize(("wave_queues", "tail"), [(4096, 256), (160, 40)])
def test_a_wide_round_syncs_every_commitlog_at_once_before_any_units(
    offload_case: SidecarCase, monkeypatch: pytest.MonkeyPatch, wave_queues: int, tail: int
) -> None:
    """A round of many queues (40 topics x 8) writes every queue's commitlog, syncs them with one
    ``sync_many`` (posix: syncfs), then writes the units and syncs those at once: the records
    never say more than is durable, no units precede their commitlog's sync, and the tier is
    byte for byte what the round of one queue at a time writes. With waves of 80 queues (half
    of ``WIDE_WAVE_QUEUES``) then two of 40, each wave's commitlogs are synced at
    once, while the wave before is committed and the next one written."""
    monkeypatch.setattr(dispatcher_mod, "WIDE_WAVE_QUEUES", wave_queues)
    monkeypatch.setattr(dispatcher_mod, "WIDE_TAIL_QUEUES", tail)
    store = offload_case.store(topics=40, queues=8, messages=1600)
    cfg = offload_case.config(store, "posix")
    provider = Durability(PosixProvider(cfg.tiered_store_file_path), cfg)
    with Sidecar(cfg, provider) as sidecar:
        report = sidecar.dispatcher.run_pass(flush=True)
        assert not report.errors and report.messages == 1600
    assert check_tier(cfg, provider).problems == []
    calls = provider.calls
    assert calls["sync_many cl"] >= (1 if wave_queues > 640 else 5) and calls["sync_many cq"] >= 1
    assert calls["sync cl"] == 0 and calls["sync cq"] == 0  # none one by one
    assert not provider.waiting

    monkeypatch.setattr(dispatcher_mod, "WIDE_ROUND_QUEUES", 1 << 30)
    narrow = offload_case.config(store, "posix", work=offload_case.work / "narrow")
    with Sidecar(narrow) as sidecar:
        assert sidecar.dispatcher.run_pass(flush=True).messages == 1600
    wide_files = _tier_files(cfg.tiered_store_file_path)
    assert wide_files and wide_files == _tier_files(narrow.tiered_store_file_path)


class _FailingSyncfs(WrappedProvider):
    """Fails every ``sync_many``, as ``syncfs`` does after an I/O error on the file system."""

    def __init__(self, inner: PosixProvider) -> None:
        super().__init__(inner)
        self.failed = 0

    def sync_many(self, keys: Sequence[str]) -> None:
        self.failed += 1
        raise OSError(5, "Input/output error")


def test_a_failed_sync_of_many_falls_back_to_one_by_one(offload_case: SidecarCase) -> None:
    store = offload_case.store(topics=40, queues=8, messages=800)
    cfg = offload_case.config(store, "posix")
    provider = _FailingSyncfs(PosixProvider(cfg.tiered_store_file_path))
    with Sidecar(cfg, provider) as sidecar:
        report = sidecar.dispatcher.run_pass(flush=True)
        assert not report.errors and report.messages == 800
    assert provider.failed >= 2  # the commitlogs' and the units'
    assert check_tier(cfg, provider).problems == []


class _FailOneBulkAppend(WrappedProvider):
    """Fails, once, the bulk append of the first commitlog key of ``queue`` that already holds
    bytes (what a wide round writes to files that exist), without writing it."""

    def __init__(self, inner: PosixProvider, queue: str) -> None:
        super().__init__(inner)
        self.queue = queue
        self.failed: list[str] = []
        self.bulk = 0

    def append_deferred_many(
        self, appends: Sequence[tuple[str, BytesLike, int]]
    ) -> list[int | TieredStoreError | OSError]:
        self.bulk += len(appends)
        victim = next(
            (i for i, (key, _, at) in enumerate(appends)
             if not self.failed and f"/{self.queue}/COMMIT_LOG/" in key and at > 0),
            None,
        )  # fmt: skip
        rest = [a for i, a in enumerate(appends) if i != victim]
        done = self.inner.append_deferred_many(rest)
        if victim is None:
            return done
        self.failed.append(appends[victim][0])
        error = ProviderUnavailableError("injected: the backend is away", key=appends[victim][0])
        return [*done[:victim], error, *done[victim:]]


@pytest.mark.slow
def test_a_wide_round_writes_many_files_at_once_and_retries_one_that_failed(
    offload_case: SidecarCase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wide round over queues whose files exist writes every commitlog, and then every
    consumequeue, with one bulk append; an append of it that fails fails its queue's step alone
    (retried by the next round from where it stopped), and the tier is byte for byte what
    rounds of one queue at a time write."""
    store = offload_case.store(topics=40, queues=8, messages=800)
    cfg = offload_case.config(store, "posix")
    provider = _FailOneBulkAppend(PosixProvider(cfg.tiered_store_file_path), "GenTopic3/5")
    with Sidecar(cfg, provider) as sidecar:
        assert sidecar.dispatcher.run_pass(flush=True).messages == 800
        offload_case.append(store, seed=9, messages=1600)
        first = sidecar.dispatcher.run_round(flush=True)
        assert [r.failed for f, r in first if f.path.endswith("/GenTopic3/5")] == [True]
        assert sum(r.failed for _, r in first) == 1
        report = sidecar.dispatcher.run_pass(flush=True)
        assert not report.errors and report.failures == 0
    assert len(provider.failed) == 1 and provider.bulk > 320
    assert check_tier(cfg, provider).problems == []

    narrow_dir = offload_case.work / "narrow"
    narrow = offload_case.config(store, "posix", work=narrow_dir)
    monkeypatch.setattr(dispatcher_mod, "WIDE_ROUND_QUEUES", 1 << 30)
    with Sidecar(narrow) as sidecar:
        assert sidecar.dispatcher.run_pass(flush=True).messages == 2400
    wide_files = _tier_files(cfg.tiered_store_file_path)
    assert wide_files and wide_files == _tier_files(narrow.tiered_store_file_path)
