"""The conformance suite every provider's test class subclasses.

Subclass :class:`ProviderTests` as ``TestXxx`` and define two fixtures: ``provider`` (a fresh,
empty provider) and ``oracle`` (an :class:`~.oracle.Oracle` on the same backend). Object stores
with chunked segments subclass :class:`~.chunked.ChunkedProviderTests` instead, which adds the
crash-point tests. Every check of what the provider stored goes through the oracle.
"""

from __future__ import annotations

import io
import pickle
import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from typing import ClassVar

import pytest
from hypothesis import HealthCheck
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test
from prometheus_client import CollectorRegistry
from tiered.providers.base import BytesLike
from tiered.providers.base import Provider
from tiered.providers.faults import FaultInjectingProvider
from tiered.providers.faults import FaultPlan
from tiered.providers.layout import FileType
from tiered.providers.layout import segment_key
from tiered.providers.wrappers import MetricsProvider
from tiered.providers.wrappers import ProviderMetrics
from tiered.providers.wrappers import unwrap

from tiered.errors import InjectedFaultError
from tiered.errors import InvalidKeyError
from tiered.errors import InvalidRangeError
from tiered.errors import PositionMismatchError
from tiered.errors import ReadPastEndError
from tiered.errors import SegmentExistsError
from tiered.errors import SegmentNotFoundError
from tiered.errors import SegmentSealedError

from .oracle import Oracle
from .stateful import make_state_machine

CLUSTER, BROKER, TOPIC = "DefaultCluster", "broker-a", "TopicTest"

HOSTILE_KEYS = (
    "",
    "/abs/olute",
    "a//b",
    "../escape",
    "a/../../escape",
    "a/./b",
    "a/.hidden",
    ".",
    "..",
    "a/b\x00c",
    "a\\b",
    "a/b~00000000000000000000",
    "a/line\nbreak",
    "a/" + "x" * 256,
    "a/b/",
    "a/\udc80",
)
HOSTILE_PREFIXES = ("../", "a/../", "a/\x00", "a~", "/abs", "a//")
HOSTILE_TOPICS = ("..", ".", "a/b", "x\x00y", "", "%RETRY%~", "a\\b", "t" * 256)


def seg(queue: int, base: int = 0, file_type: FileType = FileType.COMMIT_LOG) -> str:
    """A segment key in the upstream layout (``212d6b50_DefaultCluster/broker-a/...``)."""
    return segment_key(CLUSTER, BROKER, TOPIC, queue, file_type, base)


def blob(size: int, seed: int = 0) -> bytes:
    """``size`` reproducible pseudo-random bytes."""
    return random.Random(seed * 7919 + size).randbytes(size)


def fill(provider: Provider, key: str, sizes: tuple[int, ...], seed: int = 0) -> bytes:
    """Append chunks of ``sizes`` to a new ``key``; returns the content."""
    content = b""
    for i, size in enumerate(sizes):
        data = blob(size, seed + i)
        assert provider.append(key, data, len(content)) == len(content) + len(data)
        content += data
    return content


REMOTE_SETTINGS = settings(
    max_examples=10,
    stateful_step_count=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
"""State machine settings for backends behind HTTP (a few ms per request)."""


class ProviderTests:
    """The contract, checked against one provider; see the module docstring."""

    state_machine_settings: ClassVar[settings] = settings(
        max_examples=30,
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    """Subclasses on slow backends lower ``max_examples``."""

    pickle_shares_backend: ClassVar[bool] = True
    """Whether a pickled copy works on the same objects (false for the memory provider)."""

    @pytest.fixture
    def provider(self) -> Provider:
        raise NotImplementedError("define a `provider` fixture returning a fresh provider")

    @pytest.fixture
    def oracle(self, provider: Provider) -> Oracle:
        raise NotImplementedError("define an `oracle` fixture on the provider's backend")

    # --- append and read ------------------------------------------------------------------------

    def test_append_creates_then_grows(self, provider: Provider, oracle: Oracle) -> None:
        key = seg(0)
        assert provider.append(key, b"hello ", 0) == 6
        assert provider.append(key, bytearray(b"world"), 6) == 11
        assert provider.append(key, memoryview(b"!!"), 11) == 13
        assert provider.size(key) == 13
        assert provider.read(key, 0, 100) == b"hello world!!"
        assert oracle.content(key) == b"hello world!!"

    def test_a_deferred_append_reads_back_at_once_and_syncs(
        self, provider: Provider, oracle: Oracle
    ) -> None:
        key = seg(5)
        assert provider.append_deferred(key, b"hello ", 0) == 6
        assert provider.append_deferred(key, bytearray(b"world"), 6) == 11
        assert provider.read(key, 0, 100) == b"hello world"  # readable before the sync
        provider.sync(key)
        assert provider.size(key) == 11
        assert oracle.content(key) == b"hello world"
        with pytest.raises(PositionMismatchError):
            provider.append_deferred(key, b"x", 3)

    def test_bulk_deferred_appends_each_succeed_or_fail_alone(
        self, provider: Provider, oracle: Oracle
    ) -> None:
        grown, fresh, wrong, absent = seg(30), seg(31), seg(32), seg(33)
        first = fill(provider, grown, (10, 5))
        other = fill(provider, wrong, (7,))
        registry = CollectorRegistry()
        metered = MetricsProvider(provider, ProviderMetrics(registry))
        appends: list[tuple[str, BytesLike, int]] = [
            (grown, blob(20, 1), 15),
            (fresh, b"new", 0),
            (wrong, b"x", 3),
            (absent, b"abc", 5),
            (grown, bytearray(b"more"), 35),
        ]
        done = metered.append_deferred_many(appends)
        assert done[0] == 35 and done[1] == 3 and done[4] == 39
        assert isinstance(done[2], PositionMismatchError) and done[2].expected == 7
        assert isinstance(done[3], SegmentNotFoundError)
        provider.sync_many([grown, fresh])
        assert oracle.content(grown) == first + blob(20, 1) + b"more"
        assert oracle.content(fresh) == b"new"
        assert oracle.content(wrong) == other
        assert oracle.names_of(absent) == set()
        name = type(unwrap(provider)).name
        errors = {"provider": name, "operation": "write"}
        assert registry.get_sample_value("rocketmq_tiered_store_provider_errors_total", errors) == 2
        uploads = [s for m in registry.collect() for s in m.samples
                   if s.name == "rocketmq_tiered_store_provider_upload_bytes_sum"]  # fmt: skip
        assert sum(s.value for s in uploads) == 27
        assert metered.append_deferred_many([]) == []

    def test_reads_across_appends(self, provider: Provider, oracle: Oracle) -> None:
        key = seg(1)
        content = fill(provider, key, (1, 7, 100, 3000, 1, 513))
        rng = random.Random(1)
        for _ in range(25):
            position = rng.randrange(len(content))
            length = rng.randrange(1, 2 * len(content))
            assert provider.read(key, position, length) == content[position : position + length]
        assert provider.read(key, 0, len(content)) == content
        assert oracle.content(key) == content

    def test_append_at_wrong_position(self, provider: Provider, oracle: Oracle) -> None:
        key = seg(2)
        content = fill(provider, key, (10, 20))
        for wrong in (0, 29, 31, 1000):
            with pytest.raises(PositionMismatchError) as info:
                provider.append(key, b"xyz", wrong)
            assert (info.value.expected, info.value.given, info.value.key) == (30, wrong, key)
            assert isinstance(info.value, ValueError)
        assert provider.size(key) == 30
        assert oracle.content(key) == content

    def test_append_to_absent_key_beyond_zero(self, provider: Provider, oracle: Oracle) -> None:
        with pytest.raises(SegmentNotFoundError):
            provider.append(seg(3), b"abc", 5)
        assert oracle.names_of(seg(3)) == set()

    def test_negative_position_or_length(self, provider: Provider) -> None:
        key = seg(4)
        fill(provider, key, (10,))
        with pytest.raises(InvalidRangeError):
            provider.append(key, b"x", -1)
        with pytest.raises(InvalidRangeError):
            provider.read(key, -1, 5)
        with pytest.raises(InvalidRangeError):
            provider.read(key, 0, -5)

    def test_retried_append_after_a_lost_response(self, provider: Provider, oracle: Oracle) -> None:
        """The append landed but its caller saw an error: the retry learns the real size."""
        key = seg(5)
        lossy = FaultInjectingProvider(
            provider, FaultPlan(nth={2}, when="after", operations={"append"})
        )
        lossy.append(key, b"first", 0)
        with pytest.raises(InjectedFaultError):
            lossy.append(key, b"second", 5)
        with pytest.raises(PositionMismatchError) as info:
            lossy.append(key, b"second", 5)
        assert info.value.expected == 11
        assert oracle.content(key) == b"firstsecond"

    def test_read_truncates_at_end_and_fails_past_it(self, provider: Provider) -> None:
        key = seg(6)
        content = fill(provider, key, (100,))
        assert provider.read(key, 90, 50) == content[90:]
        assert provider.read(key, 99, 1) == content[99:]
        assert provider.read(key, 10, 0) == b""
        for position in (100, 101, 10**12):
            with pytest.raises(ReadPastEndError) as info:
                provider.read(key, position, 1)
            assert isinstance(info.value, EOFError)

    def test_read_view_and_readinto_answer_what_read_does(self, provider: Provider) -> None:
        """A view (of a read-ahead window, where the provider has one) and a read into the
        caller's buffer hold the bytes ``read`` does, short at the end, and fail past it."""
        key = seg(6, 1)
        content = fill(provider, key, (3000, 1, 4000, 2999))
        views = []
        for position in range(0, len(content), 1000):  # sequential: read-ahead where there is
            view = provider.read_view(key, position, 1000)
            assert bytes(view) == content[position : position + 1000]
            views.append((position, view))
        for position, view in views:  # still the same bytes after the reads that followed
            assert bytes(view) == content[position : position + 1000]
        into = bytearray(b"\xff" * 1500)
        assert provider.readinto(key, 9500, memoryview(into)) == 500
        assert into[:500] == content[9500:] and into[500:] == b"\xff" * 1000
        assert provider.readinto(key, 17, memoryview(into)) == 1500
        assert into == content[17:1517]
        assert provider.readinto(key, 5, memoryview(into)[:0]) == 0
        for position in (len(content), 10**12):
            with pytest.raises(ReadPastEndError):
                provider.read_view(key, position, 1)
            with pytest.raises(ReadPastEndError):
                provider.readinto(key, position, memoryview(into))
        with pytest.raises(InvalidRangeError):
            provider.readinto(key, -1, memoryview(into))

    def test_empty_object(self, provider: Provider, oracle: Oracle) -> None:
        key = seg(7)
        assert provider.append(key, b"", 0) == 0
        assert provider.size(key) == 0
        assert provider.exists(key)
        assert list(provider.list(key)) == [key]
        with pytest.raises(ReadPastEndError):
            provider.read(key, 0, 1)
        assert oracle.content(key) == b""
        assert provider.append(key, b"", 0) == 0
        assert provider.append(key, b"data", 0) == 4
        assert provider.append(key, b"", 4) == 4
        assert provider.read(key, 0, 10) == b"data"
        assert oracle.content(key) == b"data"

    def test_missing_key(self, provider: Provider) -> None:
        key = seg(8)
        for call in (
            lambda: provider.size(key),
            lambda: provider.read(key, 0, 1),
            lambda: provider.seal(key),
        ):
            with pytest.raises(SegmentNotFoundError) as info:
                call()
            assert isinstance(info.value, FileNotFoundError)
        assert not provider.exists(key)
        provider.delete(key)

    def test_sizes_many_answers_as_size_does(self, provider: Provider) -> None:
        """Present, empty and absent objects, an absent object beside a present one, keys
        under other topics and brokers with no object at all, a key named twice."""
        provider.append(seg(1), b"abc", 0)
        provider.append(seg(2), b"", 0)
        provider.append(seg(1, 0, FileType.CONSUME_QUEUE), b"q" * 40, 0)
        keys = [
            seg(1), seg(2), seg(3), seg(1, 40, FileType.CONSUME_QUEUE),
            seg(1, 0, FileType.CONSUME_QUEUE),
            segment_key(CLUSTER, BROKER, "OtherTopic", 0, FileType.COMMIT_LOG, 0),
            segment_key(CLUSTER, BROKER, "OtherTopic", 1, FileType.COMMIT_LOG, 0),
            segment_key(CLUSTER, "broker-z", TOPIC, 1, FileType.COMMIT_LOG, 0),
            seg(1),
        ]  # fmt: skip
        assert provider.sizes_many(keys) == [3, 0, None, None, 40, None, None, None, 3]
        assert provider.sizes_many([]) == []
        for key in HOSTILE_KEYS[:3]:
            with pytest.raises(InvalidKeyError):
                provider.sizes_many([seg(1), key])

    # --- seal -----------------------------------------------------------------------------------

    def test_seal_keeps_content(self, provider: Provider, oracle: Oracle) -> None:
        key = seg(9)
        content = fill(provider, key, (5, 1000, 1))
        provider.seal(key)
        provider.seal(key)
        assert provider.size(key) == len(content)
        assert provider.read(key, 3, 500) == content[3:503]
        assert oracle.content(key) == content
        assert oracle.names_of(key) == {key}
        assert list(provider.list(key)) == [key]
        if provider.enforces_seal:
            with pytest.raises(SegmentSealedError):
                provider.append(key, b"more", len(content))
            with pytest.raises(SegmentSealedError):
                provider.append(key, b"", len(content))
        assert oracle.content(key) == content

    def test_seal_of_an_empty_object(self, provider: Provider, oracle: Oracle) -> None:
        key = seg(10)
        provider.append(key, b"", 0)
        provider.seal(key)
        assert provider.size(key) == 0
        assert oracle.names_of(key) == {key}
        assert oracle.content(key) == b""

    # --- put, delete, list ----------------------------------------------------------------------

    def test_put(self, provider: Provider, oracle: Oracle) -> None:
        key = "212d6b50_DefaultCluster/meta/tieredStoreMetadata.json"
        provider.put(key, b'{"v": 1}')
        assert oracle.content(key) == b'{"v": 1}'
        with pytest.raises(SegmentExistsError) as info:
            provider.put(key, b'{"v": 2}')
        assert isinstance(info.value, FileExistsError)
        assert provider.read(key, 0, 100) == b'{"v": 1}'
        provider.put(key, b'{"v": 3}', overwrite=True)
        assert provider.read(key, 0, 100) == b'{"v": 3}'
        assert oracle.content(key) == b'{"v": 3}'
        assert oracle.names_of(key) == {key}
        if provider.enforces_seal:
            with pytest.raises(SegmentSealedError):
                provider.append(key, b"x", 8)

    def test_put_from_a_file_object_and_empty(self, provider: Provider, oracle: Oracle) -> None:
        data = blob(300_000, 3)
        provider.put(seg(11, file_type=FileType.INDEX), io.BytesIO(data))
        assert oracle.content(seg(11, file_type=FileType.INDEX)) == data
        provider.put(seg(12, file_type=FileType.INDEX), b"")
        assert provider.size(seg(12, file_type=FileType.INDEX)) == 0

    def test_put_over_an_unsealed_segment(self, provider: Provider, oracle: Oracle) -> None:
        key = seg(13)
        fill(provider, key, (10, 10))
        with pytest.raises(SegmentExistsError):
            provider.put(key, b"whole")
        provider.put(key, b"whole", overwrite=True)
        assert provider.read(key, 0, 100) == b"whole"
        assert oracle.content(key) == b"whole"
        assert oracle.names_of(key) == {key}

    def test_delete(self, provider: Provider, oracle: Oracle) -> None:
        unsealed, sealed, put = seg(14), seg(15), seg(16, file_type=FileType.INDEX)
        fill(provider, unsealed, (10, 20, 30))
        fill(provider, sealed, (10, 20))
        provider.seal(sealed)
        provider.put(put, b"index")
        for key in (unsealed, sealed, put):
            provider.delete(key)
            provider.delete(key)
            assert not provider.exists(key)
            assert oracle.names_of(key) == set()
        assert list(provider.list("")) == []
        assert provider.append(unsealed, b"again", 0) == 5
        assert oracle.content(unsealed) == b"again"

    def test_list(self, provider: Provider, oracle: Oracle) -> None:
        keys = [
            seg(1, 0),
            seg(1, 2000, FileType.CONSUME_QUEUE),
            seg(2, 0),
            seg(10, 0),
            segment_key(CLUSTER, BROKER, "%RETRY%group", 0, FileType.COMMIT_LOG, 0),
            "212d6b50_DefaultCluster/meta/tieredStoreMetadata.json",
        ]
        for i, key in enumerate(keys):
            if i % 3 == 0:
                provider.put(key, b"p")
            else:
                fill(provider, key, (3, 4))
                if i % 3 == 2:
                    provider.seal(key)
        assert list(provider.list()) == sorted(keys)
        assert list(provider.list("")) == sorted(keys)
        queue_dir = seg(1).rsplit("/", 2)[0] + "/"
        assert list(provider.list(queue_dir)) == sorted(keys[:2])
        assert list(provider.list(queue_dir[:-1])) == sorted([keys[0], keys[1], keys[3]])
        assert list(provider.list(keys[2])) == [keys[2]]
        assert list(provider.list("212d6b50_DefaultCluster/nothing/")) == []
        assert list(provider.list("zzz")) == []
        assert {k for k in oracle.names() if "~" not in k} <= set(keys)
        # the same listing with sizes, each as size() says it (unsealed ones too)
        sized = list(provider.list_sizes())
        assert sized == [(k, provider.size(k)) for k in sorted(keys)]
        assert {size for _, size in sized} == {1, 7}
        assert list(provider.list_sizes(queue_dir)) == [
            (k, provider.size(k)) for k in sorted(keys[:2])
        ]
        assert list(provider.list_sizes("zzz")) == []

    def test_objects_written_to_the_backend_are_visible(
        self, provider: Provider, oracle: Oracle
    ) -> None:
        key = seg(17)
        content = b"written by the Java broker"
        oracle.put(key, content)
        assert provider.size(key) == len(content)
        assert provider.read(key, 11, 4) == content[11:15]
        assert list(provider.list(key)) == [key]

    # --- keys -----------------------------------------------------------------------------------

    @pytest.mark.parametrize("key", HOSTILE_KEYS)
    def test_hostile_keys_are_refused(self, provider: Provider, oracle: Oracle, key: str) -> None:
        calls: list[Callable[[], Any]] = [
            lambda: provider.size(key),
            lambda: provider.read(key, 0, 1),
            lambda: provider.append(key, b"x", 0),
            lambda: provider.seal(key),
            lambda: provider.put(key, b"x"),
            lambda: provider.put(key, b"x", overwrite=True),
            lambda: provider.delete(key),
            lambda: provider.exists(key),
        ]
        for call in calls:
            with pytest.raises(InvalidKeyError):
                call()
        assert oracle.names() == set()

    @pytest.mark.parametrize("prefix", HOSTILE_PREFIXES)
    def test_hostile_prefixes_are_refused(self, provider: Provider, prefix: str) -> None:
        with pytest.raises(InvalidKeyError):
            list(provider.list(prefix))

    @pytest.mark.parametrize("topic", HOSTILE_TOPICS)
    def test_hostile_topics_never_make_a_key(self, topic: str) -> None:
        with pytest.raises(InvalidKeyError):
            segment_key(CLUSTER, BROKER, topic, 0, FileType.COMMIT_LOG, 0)

    # --- process and thread behaviour -----------------------------------------------------------

    def test_pickle_round_trip(self, provider: Provider, oracle: Oracle) -> None:
        key = seg(18)
        content = fill(provider, key, (100, 50))
        seen: list[str] = []
        provider.add_request_listener(seen.append)
        copy = pickle.loads(pickle.dumps(provider))
        assert type(copy) is type(provider)
        assert copy.read(key, 0, 1000) == content
        copy.append(key, b"tail", len(content))
        assert copy.read(key, 0, 1000) == content + b"tail"
        if self.pickle_shares_backend:
            assert provider.read(key, 0, 1000) == content + b"tail"
            assert oracle.content(key) == content + b"tail"
        else:
            assert oracle.content(key) == content
        copy.close()
        provider.remove_request_listener(seen.append)

    def test_context_manager_closes_and_reconnects(self, provider: Provider) -> None:
        key = seg(19)
        with provider as p:
            p.append(key, b"abc", 0)
        assert provider.read(key, 0, 3) == b"abc"

    def test_concurrent_appends_on_different_keys(self, provider: Provider, oracle: Oracle) -> None:
        keys = [seg(100 + i) for i in range(8)]

        def work(i: int) -> bytes:
            return fill(provider, keys[i], tuple(1 + (i * 37 + j * 101) % 700 for j in range(6)), i)

        with ThreadPoolExecutor(8) as pool:
            contents = list(pool.map(work, range(8)))
        for key, content in zip(keys, contents, strict=True):
            assert provider.read(key, 0, 10_000) == content
            assert oracle.content(key) == content

    # --- accounting -----------------------------------------------------------------------------

    def test_requests_are_reported(self, provider: Provider) -> None:
        seen: list[str] = []
        provider.add_request_listener(seen.append)
        try:
            fill(provider, seg(20), (10, 10))
            provider.read(seg(20), 0, 5)
        finally:
            provider.remove_request_listener(seen.append)
        assert seen
        assert all(op.isupper() for op in seen)
        before = len(seen)
        fill(provider, seg(21), (1,))
        assert len(seen) == before

    def test_metrics_wrapper(self, provider: Provider) -> None:
        registry = CollectorRegistry()
        wrapped = MetricsProvider(provider, ProviderMetrics(registry))
        content = fill(wrapped, seg(22), (1000, 24))
        wrapped.read(seg(22), 0, 2048)
        wrapped.put(seg(23, file_type=FileType.INDEX), io.BytesIO(b"x" * 300))
        labels = {"path": f"{BROKER}/{TOPIC}/22", "file_type": "commit_log", "operation": "write"}
        uploaded = registry.get_sample_value(
            "rocketmq_tiered_store_provider_upload_bytes_sum", labels
        )
        assert uploaded == len(content)
        index = {**labels, "path": f"{BROKER}/{TOPIC}/23", "file_type": "index"}
        assert (
            registry.get_sample_value("rocketmq_tiered_store_provider_upload_bytes_sum", index)
            == 300
        )
        read = {**labels, "operation": "read"}
        assert registry.get_sample_value(
            "rocketmq_tiered_store_provider_download_bytes_sum", read
        ) == len(content)
        ok = {**labels, "success": "true"}
        assert (
            registry.get_sample_value("rocketmq_tiered_store_provider_rpc_latency_count", ok) == 2
        )
        name = type(unwrap(provider)).name
        requests = [
            s.value
            for metric in registry.collect()
            if metric.name == "rocketmq_tiered_store_provider_requests"
            for s in metric.samples
            if s.name.endswith("_total") and s.labels["provider"] == name
        ]
        assert sum(requests) > 0

    # --- the model ------------------------------------------------------------------------------

    def test_state_machine(self, provider: Provider) -> None:
        machine = make_state_machine(provider)
        run_state_machine_as_test(machine, settings=self.state_machine_settings)
