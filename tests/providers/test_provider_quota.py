"""Byte quotas (:mod:`tiered.providers.quota`): the token bucket's arithmetic on a manual clock,
and the quota wrapper over a real memory provider (conformance suite, what each call costs)."""

from __future__ import annotations

import io
import pickle
import threading
import time

import pytest
from prometheus_client import REGISTRY
from tiered.providers import MemoryProvider
from tiered.providers import Provider
from tiered.providers import QuotaProvider
from tiered.providers import TokenBucket
from tiered.providers import build_provider
from tiered.providers import unwrap
from tiered.providers.testing import DictOracle
from tiered.providers.testing import Oracle
from tiered.providers.testing import ProviderTests
from tiered.providers.testing import seg

from tiered.config import TieredConfig

MIB = 1 << 20


class Clock:
    """A clock that moves only when someone sleeps on it."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class TestQuotaMemoryProvider(ProviderTests):
    pickle_shares_backend = False

    @pytest.fixture
    def provider(self) -> Provider:
        return QuotaProvider(MemoryProvider(), 1 << 40, 1 << 40)  # quotas no test reaches

    @pytest.fixture
    def oracle(self, provider: Provider) -> Oracle:
        memory = unwrap(provider)
        assert isinstance(memory, MemoryProvider)
        return DictOracle(memory._objects)


def test_the_bucket_starts_empty_and_serves_at_its_rate() -> None:
    clock = Clock()
    bucket = TokenBucket(MIB, clock=clock, sleep=clock.sleep)
    for _ in range(8):
        bucket.take(MIB // 4)
    assert clock.now - 100.0 == pytest.approx(2.0)  # 2 MiB at 1 MiB/s, nothing before


def test_an_idle_bucket_holds_one_second_at_most() -> None:
    clock = Clock()
    bucket = TokenBucket(MIB, clock=clock, sleep=clock.sleep)
    clock.now += 3600  # an hour idle: still only one second's worth
    assert bucket.take(MIB) == 0.0
    assert bucket.take(MIB) == pytest.approx(1.0)


def test_a_request_larger_than_the_burst_borrows_and_completes() -> None:
    clock = Clock()
    bucket = TokenBucket(MIB, clock=clock, sleep=clock.sleep)
    assert bucket.take(64 * MIB) == pytest.approx(64.0)  # sent after 64 s, whole
    assert bucket.take(MIB) == pytest.approx(1.0)  # the debt is paid: only its own bytes


def test_callers_wait_for_the_debt_of_those_before_them() -> None:
    clock = Clock()
    bucket = TokenBucket(MIB, clock=clock, sleep=lambda s: None)  # both reserve before sleeping
    first = bucket.take(4 * MIB)
    second = bucket.take(MIB)
    assert first == pytest.approx(4.0) and second == pytest.approx(5.0)


def test_bytes_given_back_are_not_charged() -> None:
    clock = Clock()
    bucket = TokenBucket(MIB, clock=clock, sleep=lambda s: None)
    bucket.take(MIB)
    bucket.give_back(MIB)
    assert bucket.take(MIB // 2) == pytest.approx(0.5)


def test_a_bad_rate_is_refused() -> None:
    with pytest.raises(ValueError, match="rate=0 must be > 0"):
        TokenBucket(0)


def wait_total(direction: str) -> float:
    labels = {"direction": direction}
    return REGISTRY.get_sample_value("rocketmq_tiered_store_quota_wait_seconds_total", labels) or 0


def test_appends_and_puts_are_held_reads_are_not_under_an_upload_quota() -> None:
    rate = 4 * MIB
    started = time.monotonic()  # (the bucket fills from its creation on)
    provider = QuotaProvider(MemoryProvider(), upload_bytes_per_second=rate)
    before = wait_total("upload")
    data = b"x" * (MIB // 2)
    provider.append(seg(1), data, 0)
    provider.append(seg(1), data, len(data))
    provider.put(seg(2), io.BytesIO(data))  # streamed: paid as it is read
    uploaded = time.monotonic() - started
    assert uploaded >= 1.5 * MIB / rate * 0.95
    started = time.monotonic()
    for _ in range(20):
        provider.read(seg(1), 0, MIB)
    assert time.monotonic() - started < 0.2
    assert wait_total("upload") - before == pytest.approx(uploaded, abs=0.1)
    assert provider.read(seg(2), 0, MIB) == data


def test_a_read_gives_back_what_the_object_did_not_hold() -> None:
    clock = Clock()
    provider = QuotaProvider(MemoryProvider(), read_bytes_per_second=MIB)
    provider.reads = TokenBucket(MIB, clock=clock, sleep=clock.sleep)
    provider.put(seg(1), b"y" * 1000)
    assert provider.read(seg(1), 0, 2 * MIB) == b"y" * 1000  # waits for the 2 MiB it asked
    assert clock.slept == [pytest.approx(2.0)]
    assert provider.reads.take(MIB - 1000) == 0.0  # the rest is back (up to the burst)


def test_threads_share_one_bucket() -> None:
    rate = 8 * MIB
    started = time.monotonic()  # (the bucket fills from its creation on)
    provider = QuotaProvider(MemoryProvider(), upload_bytes_per_second=rate)
    piece = b"z" * (MIB // 2)

    def write(i: int) -> None:
        for j in range(4):
            provider.put(seg(100 * i + j), piece)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    assert elapsed >= 8 * MIB / rate * 0.95  # 8 MiB in all, not 8 MiB per thread
    assert elapsed < 8 * MIB / rate + 0.5


def test_build_provider_adds_the_wrapper_only_for_a_quota() -> None:
    plain = build_provider(TieredConfig.from_properties({}))
    assert not isinstance(plain, QuotaProvider)
    cfg = TieredConfig.from_properties({"tieredReadMaxBytesPerSecond": str(MIB)})
    limited = build_provider(cfg)
    assert isinstance(limited, QuotaProvider)
    assert (limited.upload, limited.reads is not None) == (None, True)
    copy = pickle.loads(pickle.dumps(limited))  # a copy limits its own process
    assert isinstance(copy, QuotaProvider) and copy.reads is not limited.reads
