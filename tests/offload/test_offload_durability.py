"""A segment record never says more than is durable: the consumequeue units a round uploads
without a sync of their own (``append_deferred``) are synced, side by side, before the round
records them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TypeVar

from tiered.providers import BytesLike
from tiered.providers import PosixProvider
from tiered.providers import WrappedProvider

from tiered.config import TieredConfig
from tiered.core.sidecar import Sidecar
from tiered.testing.sample_tier import SidecarCase
from tiered.testing.tier_check import check_tier
from tiered.testing.tier_check import persisted_records

T = TypeVar("T")


class Durability(WrappedProvider):
    """Tracks how many bytes of each key are durable (a durable append's end, or the size at a
    sync), and checks before and after every backend call that no persisted record says more;
    also that a commitlog append is durable and every consumequeue append is deferred."""

    def __init__(self, inner: PosixProvider, cfg: TieredConfig) -> None:
        super().__init__(inner)
        self.cfg = cfg
        self.durable: dict[str, int] = {}
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
        self.calls["append_deferred"] += 1
        return self._around("append", key, lambda: self.inner.append_deferred(key, data, position))

    def sync(self, key: str) -> None:
        self.calls["sync"] += 1
        size = self.inner.size(key)
        self._around("sync", key, lambda: self.inner.sync(key))
        self.durable[key] = size

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
    assert calls["append"] > 0 and calls["append_deferred"] > 0
    # the syncs of a round's units: one per queue (and roll), where each batch made one before
    assert 0 < calls["sync"] < calls["append_deferred"]
