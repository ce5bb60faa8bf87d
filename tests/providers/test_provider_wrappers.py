"""Wrappers: metrics and request accounting, fault and latency injection; wrapped providers
still pass the conformance suite."""

from __future__ import annotations

import pickle
import time

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client import Histogram
from tiered.providers import FaultInjectingProvider
from tiered.providers import FaultPlan
from tiered.providers import LatencyProvider
from tiered.providers import MemoryProvider
from tiered.providers import MetricsProvider
from tiered.providers import Provider
from tiered.providers import ProviderMetrics
from tiered.providers import unwrap
from tiered.providers.testing import DictOracle
from tiered.providers.testing import Oracle
from tiered.providers.testing import ProviderTests
from tiered.providers.testing import seg
from tiered.providers.wrappers import CALLS
from tiered.providers.wrappers import LATENCY_BUCKETS_MS
from tiered.providers.wrappers import observe_each
from tiered.providers.wrappers import observe_repeated

from tiered.errors import InjectedFaultError
from tiered.errors import SegmentNotFoundError
from tiered.errors import ThrottledError


class TestWrappedMemoryProvider(ProviderTests):
    pickle_shares_backend = False

    @pytest.fixture
    def provider(self) -> Provider:
        inner = FaultInjectingProvider(LatencyProvider(MemoryProvider(), 0.0))
        return MetricsProvider(inner, ProviderMetrics(CollectorRegistry()))

    @pytest.fixture
    def oracle(self, provider: Provider) -> Oracle:
        memory = unwrap(provider)
        assert isinstance(memory, MemoryProvider)
        return DictOracle(memory._objects)


def test_nth_calls_fail() -> None:
    provider = FaultInjectingProvider(MemoryProvider(), FaultPlan(nth={2, 4}))
    provider.append("k", b"a", 0)
    with pytest.raises(InjectedFaultError):
        provider.size("k")
    assert provider.size("k") == 1
    with pytest.raises(InjectedFaultError):
        provider.read("k", 0, 1)
    assert provider.injected == 2
    assert provider.calls == 4


def test_a_fraction_of_calls_fails_with_the_chosen_error() -> None:
    plan = FaultPlan(rate=0.2, error=ThrottledError, operations={"size"}, seed=7)
    provider = FaultInjectingProvider(MemoryProvider(), plan)
    provider.append("k", b"a", 0)
    failures = 0
    for _ in range(1000):
        try:
            provider.size("k")
        except ThrottledError:
            failures += 1
    assert 150 <= failures <= 250
    assert ThrottledError.retriable
    assert provider.calls == 1000


def test_failures_after_the_call_took_effect() -> None:
    provider = FaultInjectingProvider(MemoryProvider(), FaultPlan(nth={1}, when="after"))
    with pytest.raises(InjectedFaultError, match="after the call took effect"):
        provider.append("k", b"landed", 0)
    assert provider.inner.read("k", 0, 10) == b"landed"


def test_delays() -> None:
    provider = FaultInjectingProvider(MemoryProvider(), FaultPlan(delay_rate=1.0, delay_s=0.05))
    start = time.perf_counter()
    provider.list()
    assert time.perf_counter() - start >= 0.05
    slow = LatencyProvider(MemoryProvider(), 0.03, jitter_s=0.01, operations={"append"})
    start = time.perf_counter()
    slow.append("k", b"x", 0)
    slow.size("k")
    assert 0.03 <= time.perf_counter() - start < 0.5


def test_set_plan_restarts_the_count() -> None:
    provider = FaultInjectingProvider(MemoryProvider(), FaultPlan(nth={1}))
    with pytest.raises(InjectedFaultError):
        provider.list()
    provider.set_plan(FaultPlan())
    assert list(provider.list()) == []
    assert provider.calls == 1


def test_metrics_labels_and_failures() -> None:
    registry = CollectorRegistry()
    provider = MetricsProvider(MemoryProvider(), ProviderMetrics(registry))
    with pytest.raises(SegmentNotFoundError):
        provider.read(seg(1), 0, 1)
    provider.put("meta/tieredStoreMetadata.json", b"{}")
    sample = registry.get_sample_value
    failed = {
        "path": "broker-a/TopicTest/1",
        "file_type": "commit_log",
        "operation": "read",
        "success": "false",
    }
    assert sample("rocketmq_tiered_store_provider_rpc_latency_count", failed) == 1
    other = {"path": "", "file_type": "other", "operation": "write"}
    assert sample("rocketmq_tiered_store_provider_upload_bytes_sum", other) == 2
    assert (
        sample(
            "rocketmq_tiered_store_provider_requests_total",
            {"provider": "memory", "operation": "PUT"},
        )
        == 1
    )


def test_errors_are_counted_by_operation_but_not_found_answers() -> None:
    registry = CollectorRegistry()
    faults = FaultInjectingProvider(MemoryProvider())
    provider = MetricsProvider(faults, ProviderMetrics(registry))

    def errors(operation: str) -> float | None:
        labels = {"provider": "memory", "operation": operation}
        return registry.get_sample_value("rocketmq_tiered_store_provider_errors_total", labels)

    assert all(errors(op) == 0 for op in CALLS)  # every series from the start
    with pytest.raises(SegmentNotFoundError):
        provider.size(seg(1))  # a probe's answer
    with pytest.raises(SegmentNotFoundError):
        provider.read(seg(1), 0, 1)  # a fetch that failed
    faults.set_plan(FaultPlan(rate=1.0, operations={"append", "put"}))
    for call in (lambda: provider.append(seg(2), b"x", 0), lambda: provider.put("k", b"x")):
        with pytest.raises(InjectedFaultError):
            call()
    assert (errors("size"), errors("read"), errors("write"), errors("delete")) == (0, 1, 2, 0)


def test_wrappers_pickle() -> None:
    provider = MetricsProvider(FaultInjectingProvider(MemoryProvider(), FaultPlan(nth={99})))
    provider.append("k", b"abc", 0)
    copy = pickle.loads(pickle.dumps(provider))
    assert copy.read("k", 0, 3) == b"abc"
    assert isinstance(copy.inner, FaultInjectingProvider)
    assert copy.inner.plan.nth == {99}


@pytest.mark.parametrize(
    "amounts",
    [
        [],
        [0.0],
        [1.0, 3.0, 3.0001, 2999.9, 3000.0, 3000.1, 1e9],
        [0.5] * 100,
        list(range(0, 5000, 7)),
    ],
)
def test_observe_each_equals_one_observe_per_amount(amounts: list[float]) -> None:
    registry = CollectorRegistry()
    one = Histogram("one", "h", buckets=LATENCY_BUCKETS_MS, registry=registry)
    each = Histogram("each", "h", buckets=LATENCY_BUCKETS_MS, registry=registry)
    for a in amounts:
        one.observe(a)
    observe_each(each, iter(amounts))
    _assert_same_histograms(registry, "each", "one")


@pytest.mark.parametrize(("amount", "n"), [(0.0, 1), (3.0, 4), (3.0001, 2), (1e9, 3), (0.5, 0)])
def test_observe_repeated_equals_n_observes(amount: float, n: int) -> None:
    registry = CollectorRegistry()
    one = Histogram("one", "h", buckets=LATENCY_BUCKETS_MS, registry=registry)
    repeated = Histogram("repeated", "h", buckets=LATENCY_BUCKETS_MS, registry=registry)
    for _ in range(n):
        one.observe(amount)
    observe_repeated(repeated, amount, n)
    _assert_same_histograms(registry, "repeated", "one")


def _assert_same_histograms(registry: CollectorRegistry, got_name: str, want_name: str) -> None:
    def samples(name: str) -> list[tuple[str, dict[str, str], float]]:
        (family,) = (m for m in registry.collect() if m.name == name)
        return [(s.name.removeprefix(name), s.labels, s.value) for s in family.samples]

    got, want = samples(got_name), samples(want_name)
    assert [s[:2] for s in got] == [s[:2] for s in want]
    assert [s[2] for s in got] == pytest.approx([s[2] for s in want])


def test_a_bulk_append_records_each_append_as_a_write() -> None:
    registry = CollectorRegistry()
    provider = MetricsProvider(MemoryProvider(), ProviderMetrics(registry))
    provider.append(seg(2), b"x", 0)  # seg(2) then appends at 1; a wrong position fails
    done = provider.append_deferred_many(
        [
            (seg(1), b"a" * 10, 0),
            (seg(2), b"b" * 2000, 1),
            (seg(1, 3), b"c" * 5, 0),
            (seg(2), b"d", 0),
        ]
    )
    assert [isinstance(d, int) for d in done] == [True, True, True, False]
    sample = registry.get_sample_value
    ok = {"path": "broker-a/TopicTest/1", "file_type": "commit_log", "operation": "write"}
    assert sample("rocketmq_tiered_store_provider_upload_bytes_count", ok) == 2
    assert sample("rocketmq_tiered_store_provider_upload_bytes_sum", ok) == 15
    assert sample("rocketmq_tiered_store_provider_upload_bytes_bucket", {**ok, "le": "1024.0"}) == 2
    two = {**ok, "path": "broker-a/TopicTest/2"}
    assert sample("rocketmq_tiered_store_provider_upload_bytes_sum", two) == 2001
    assert (
        sample("rocketmq_tiered_store_provider_rpc_latency_count", {**two, "success": "true"}) == 2
    )
    assert (
        sample("rocketmq_tiered_store_provider_rpc_latency_count", {**two, "success": "false"}) == 1
    )
    errors = {"provider": "memory", "operation": "write"}
    assert sample("rocketmq_tiered_store_provider_errors_total", errors) == 1
