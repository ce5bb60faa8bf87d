"""A segment record never says more than is durable: the consumequeue units a round uploads
without a sync of their own (``append_deferred``) are synced, side by side, before the round
records them; a batch's commitlog bytes are written, then synced before its units go up (its
memory is freed in between), so units beyond a record always point at durable bytes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TypeVar

from tiered.providers import BytesLike
from tiered.providers import PosixProvider
from tiered.providers import WrappedProvider

from tiered.config import TieredConfig
from tiered.core.sidecar import Sidecar
from tiered.file.flat_message_file import FlatMessageFile
from tiered.file.flat_message_file import MessageBatch
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
