"""Cross-cutting concerns as wrappers, written once for every provider.

- :class:`WrappedProvider` delegates every call through one method its subclasses override;
- :class:`MetricsProvider` exports upstream's provider metrics (spec §13) plus request accounting
  (the families are listed in :mod:`tiered.metrics`).

The test and drill wrappers (fault and latency injection) are in :mod:`.faults`.
"""

from __future__ import annotations

import bisect
import collections
import functools
import math
import time
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any
from typing import BinaryIO
from typing import Final
from typing import Literal
from typing import TypeVar

from tiered.errors import InvalidKeyError
from tiered.errors import SegmentNotFoundError
from tiered.errors import TieredStoreError

from .base import RETRY_PREFIX
from .base import BytesLike
from .base import Payload
from .base import Provider
from .base import RequestListener
from .layout import FileType
from .layout import cluster_dir_name

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client import Counter
    from prometheus_client import Histogram

T = TypeVar("T")

LATENCY_BUCKETS_MS = (1, 3, 5, 7, 10, 100, 200, 400, 600, 800, 1000, 1500, 3000)
SIZE_BUCKETS_BYTES = tuple(
    float(x)
    for x in (1 << 10, 10 << 10, 100 << 10, 1 << 20, 10 << 20, 32 << 20, 50 << 20, 100 << 20)
)
OPERATIONS = ("size", "read", "append", "seal", "put", "delete", "list")
CALLS = ("size", "read", "write", "seal", "sync", "delete", "list", "clean_temporary")
"""The ``operation`` values of the provider metric families (``write``: append and put)."""


class WrappedProvider(Provider):
    """Delegates every call to ``inner`` through :meth:`_around`; subclasses override that."""

    def __init__(self, inner: Provider) -> None:
        super().__init__()
        self.inner = inner

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    @property
    def enforces_seal(self) -> bool:
        return self.inner.enforces_seal

    @property
    def object_per_append(self) -> bool:
        return self.inner.object_per_append

    @property
    def leaves_temporary(self) -> bool:
        return self.inner.leaves_temporary

    @property
    def defers_sync(self) -> bool:
        # a subclass that watches appends (and not deferred ones) gets them as appends: durable
        cls = type(self)
        watched = cls.append is not WrappedProvider.append
        own = cls.append_deferred is not WrappedProvider.append_deferred
        return self.inner.defers_sync and (own or not watched)

    def _around(self, operation: str, key: str, call: Callable[[], T]) -> T:
        return call()

    def size(self, key: str) -> int:
        return self._around("size", key, functools.partial(self.inner.size, key))

    def sizes_many(self, keys: Sequence[str]) -> list[int | None]:
        cls = type(self)
        if cls._around is not WrappedProvider._around or cls.size is not WrappedProvider.size:
            return Provider.sizes_many(self, keys)  # a subclass watches: each call
        return self.inner.sizes_many(keys)

    def read(self, key: str, position: int, length: int) -> bytes:
        return self._around("read", key, functools.partial(self.inner.read, key, position, length))

    def expect_unsealed(self, key: str, size: int) -> None:
        self.inner.expect_unsealed(key, size)

    def read_view(self, key: str, position: int, length: int) -> BytesLike:
        cls = type(self)
        if cls.read is not WrappedProvider.read and cls.read_view is WrappedProvider.read_view:
            return self.read(key, position, length)  # a subclass watches reads: it sees this
        return self._around(
            "read", key, functools.partial(self.inner.read_view, key, position, length)
        )

    def readinto(self, key: str, position: int, into: memoryview) -> int:
        cls = type(self)
        if cls.readinto is WrappedProvider.readinto and (
            cls.read is not WrappedProvider.read or cls.read_view is not WrappedProvider.read_view
        ):
            return Provider.readinto(self, key, position, into)  # through the watched reads
        return self._around(
            "read", key, functools.partial(self.inner.readinto, key, position, into)
        )

    def append(self, key: str, data: BytesLike, position: int) -> int:
        return self._around(
            "append", key, functools.partial(self.inner.append, key, data, position)
        )

    def append_deferred(self, key: str, data: BytesLike, position: int) -> int:
        if type(self).append is not WrappedProvider.append:
            return self.append(key, data, position)  # a subclass watches appends: it sees this
        return self._around(
            "append", key, functools.partial(self.inner.append_deferred, key, data, position)
        )

    def append_deferred_many(
        self, appends: Sequence[tuple[str, BytesLike, int]]
    ) -> list[int | TieredStoreError | OSError]:
        cls = type(self)
        if (
            cls._around is not WrappedProvider._around
            or cls.append is not WrappedProvider.append
            or cls.append_deferred is not WrappedProvider.append_deferred
        ):
            return Provider.append_deferred_many(self, appends)  # a subclass watches: each call
        return self.inner.append_deferred_many(appends)

    def sync(self, key: str) -> None:
        self._around("sync", key, functools.partial(self.inner.sync, key))

    def sync_many(self, keys: Sequence[str]) -> None:
        self._around("sync", "", functools.partial(self.inner.sync_many, keys))

    def seal(self, key: str) -> None:
        self._around("seal", key, functools.partial(self.inner.seal, key))

    def put(self, key: str, data: Payload, overwrite: bool = False) -> None:
        self._around("put", key, functools.partial(self.inner.put, key, data, overwrite))

    def delete(self, key: str) -> None:
        self._around("delete", key, functools.partial(self.inner.delete, key))

    def list(self, prefix: str = "") -> Iterator[str]:
        keys = self._around("list", prefix, lambda: [*self.inner.list(prefix)])
        return iter(keys)

    def list_sizes(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        found = self._around("list", prefix, lambda: [*self.inner.list_sizes(prefix)])
        return iter(found)

    def clean_temporary(self, prefix: str = "", prune: Callable[[str], bool] | None = None) -> int:
        return self._around(
            "clean_temporary",
            prefix,
            functools.partial(self.inner.clean_temporary, prefix, prune),
        )

    def close(self) -> None:
        self.inner.close()

    def add_request_listener(self, listener: RequestListener) -> None:
        self.inner.add_request_listener(listener)

    def remove_request_listener(self, listener: RequestListener) -> None:
        self.inner.remove_request_listener(listener)


def unwrap(provider: Provider) -> Provider:
    """The innermost provider below any wrappers."""
    while isinstance(provider, WrappedProvider):
        provider = provider.inner
    return provider


# --- metrics ------------------------------------------------------------------------------------


class ProviderMetrics:
    """The provider metric families, registered once in one ``CollectorRegistry``."""

    def __init__(self, registry: CollectorRegistry | Literal["default"] | None = "default") -> None:
        """``registry``: where the families are registered; ``"default"``, prometheus_client's
        default one (imported here: a process that makes no provider metrics never loads it)."""
        from prometheus_client import REGISTRY
        from prometheus_client import Counter
        from prometheus_client import Histogram

        from tiered import metrics

        metrics.register()  # no *_created series (metrics._client), as every family of the package
        if registry == "default":
            registry = REGISTRY
        labels = ["path", "file_type", "operation"]
        self.rpc_latency = Histogram(
            "rocketmq_tiered_store_provider_rpc_latency",
            "Latency of provider calls, milliseconds",
            [*labels, "success"],
            buckets=LATENCY_BUCKETS_MS,
            registry=registry,
        )
        self.upload_bytes = Histogram(
            "rocketmq_tiered_store_provider_upload_bytes",
            "Bytes per provider write (append or put)",
            labels,
            buckets=SIZE_BUCKETS_BYTES,
            registry=registry,
        )
        self.download_bytes = Histogram(
            "rocketmq_tiered_store_provider_download_bytes",
            "Bytes per provider read",
            labels,
            buckets=SIZE_BUCKETS_BYTES,
            registry=registry,
        )
        self.requests = Counter(
            "rocketmq_tiered_store_provider_requests",
            "Backend requests sent by the provider, by operation (GET, PUT, LIST, ...)",
            ["provider", "operation"],
            registry=registry,
        )
        self.retries = Counter(
            "rocketmq_tiered_store_provider_retries",
            "Requests resent after a retriable failure, by reason: throttled, unavailable, timeout",
            ["provider", "reason"],
            registry=registry,
        )
        self.errors = Counter(
            "rocketmq_tiered_store_provider_errors",
            "Provider calls that failed, by operation (read, write, seal, sync, delete, ...); a "
            "size or delete of an absent object is an answer, not counted",
            ["provider", "operation"],
            registry=registry,
        )

    @staticmethod
    @functools.cache
    def default() -> ProviderMetrics:
        """The families in prometheus_client's default registry (created once per process)."""
        return ProviderMetrics()


def _broker(path: str) -> str:
    return ""


_path_label: list[Callable[[str], str]] = [_broker]


def observe_each(child: Histogram, amounts: Iterable[float]) -> None:
    """``child.observe(amount)`` for each of ``amounts``, with one increment per bucket hit and
    one of the sum (a bulk append's thousands of observations: ``observe`` walks the buckets
    and takes two locks each time). It reads the child's ``_upper_bounds``, ``_buckets`` and
    ``_sum``, which prometheus_client's ``Histogram`` has kept through its 0.x releases; a
    child without them gets one ``observe`` per amount."""
    parts = _histogram_parts(child)
    if parts is None:
        for amount in amounts:
            child.observe(amount)
        return
    bounds, buckets, total = parts
    values = list(amounts)
    # the first bucket whose bound is at least the amount, as ``observe`` picks it
    for i, n in collections.Counter(bisect.bisect_left(bounds, v) for v in values).items():
        buckets[i].inc(n)
    total.inc(math.fsum(values))


def observe_repeated(child: Histogram, amount: float, n: int) -> None:
    """``child.observe(amount)`` ``n`` times, as one increment of a bucket and one of the sum
    (a bulk call's share of its time, the same for each of its operations); see
    :func:`observe_each` for what it reads of the child."""
    parts = _histogram_parts(child)
    if parts is None:
        for _ in range(n):
            child.observe(amount)
        return
    bounds, buckets, total = parts
    buckets[bisect.bisect_left(bounds, amount)].inc(n)
    total.inc(amount * n)


def _histogram_parts(child: Histogram) -> tuple[Any, Any, Any] | None:
    """The child's bucket bounds, bucket counters and sum counter, or None where a
    prometheus_client release does not keep them under these names."""
    bounds, buckets, total = (
        getattr(child, n, None) for n in ("_upper_bounds", "_buckets", "_sum")
    )
    if bounds is None or buckets is None or total is None:
        return None
    return bounds, buckets, total


def set_path_label(label: Callable[[str], str]) -> None:
    """Label the ``path`` of the provider families with ``label(logical path)`` (the
    sidecar's ``tieredMetricsDetail``: one series per queue, per topic or for the broker); until
    set, one series for the broker (``""``, that key's default), so a program that never sets
    it does not make a series per queue it touches."""
    _path_label[0] = label


def _labels(key: str) -> tuple[str, str]:
    """``(path label, file type label)`` of a segment key."""
    path, file_type = _address(key)
    return _path_label[0](path), file_type


_TYPE_LABELS: Final = {t.value: t.label for t in FileType}


def _address(key: str) -> tuple[str, str]:
    """``(logical path, file type label)`` of a segment key; ``("", "other")`` for a key outside
    the layout. Read off the key's components (a label, not a check: see
    :meth:`~.layout.SegmentAddress.parse`). Addresses are not cached (a broker's keys are many);
    the cluster directory's check is (:func:`_is_cluster_dir`)."""
    parts = key.split("/")
    label = _TYPE_LABELS.get(parts[4]) if len(parts) == 6 else None
    if label is None or not _is_cluster_dir(parts[0]):
        return "", "other"
    return f"{parts[1]}/{parts[2]}/{parts[3]}", label


@functools.lru_cache(maxsize=64)
def _is_cluster_dir(name: str) -> bool:
    """Whether ``name`` is the directory :func:`~.layout.cluster_dir_name` makes of the cluster
    it names (cached: every key of a broker starts with the same one)."""
    try:
        return name == cluster_dir_name(name.partition("_")[2])
    except InvalidKeyError:  # not a cluster name
        return False


class _CountingReader:
    """A file object that counts the bytes read through it."""

    def __init__(self, inner: BinaryIO) -> None:
        self.inner = inner
        self.count = 0

    def read(self, size: int = -1) -> bytes:
        data = self.inner.read(size)
        self.count += len(data)
        return data


class _RequestCounter:
    """The request listener of :class:`MetricsProvider`: ``requests_total`` by operation, and
    ``retries_total`` by reason for ``RETRY_<REASON>`` (a child per operation kept: ``labels``
    costs more than the count)."""

    def __init__(self, requests: Counter, retries: Counter, provider: str) -> None:
        self.requests, self.retries, self.provider = requests, retries, provider
        self.children: dict[str, Counter] = {}

    def __call__(self, operation: str) -> None:
        self.many(operation, 1)

    def many(self, operation: str, n: int) -> None:
        """``n`` requests of ``operation`` (see :meth:`~.base.Provider._request_many`)."""
        child = self.children.get(operation)
        if child is None:
            if operation.startswith(RETRY_PREFIX):
                reason = operation.removeprefix(RETRY_PREFIX).lower()
                child = self.retries.labels(provider=self.provider, reason=reason)
            else:
                child = self.requests.labels(provider=self.provider, operation=operation)
            self.children[operation] = child
        child.inc(n)


class MetricsProvider(WrappedProvider):
    """Records the provider metrics for ``inner``: ``provider_rpc_latency`` (milliseconds,
    upstream's buckets), ``provider_upload_bytes``, ``provider_download_bytes`` and
    ``provider_requests_total``.

    ``operation`` of the first three is ``read``, ``write`` (append and put), ``seal``, ``size``,
    ``delete`` or ``list``; ``path`` is the queue's logical path (``broker-a/TopicTest/3``, at the
    detail :func:`set_path_label` sets) and ``file_type`` ``commit_log``, ``consume_queue`` or
    ``index`` (``""``/``other`` for keys outside the segment layout). ``requests_total`` counts
    backend requests (``GET``, ``PUT``, ``LIST``, ...), so requests per GiB can be read off a run
    (divide by the upload/download ``_sum``). ``provider_errors_total{operation}`` counts the
    calls that raised, but a ``size`` or ``delete`` of an absent object (an answer: existence
    probes, a delete of what is gone; ``success="false"`` of the latency counts those too);
    every operation of :data:`CALLS` has its series from the start.

    ``metrics`` defaults to the default registry's families; a pickled copy uses those.
    """

    def __init__(self, inner: Provider, metrics: ProviderMetrics | None = None) -> None:
        super().__init__(inner)
        self.metrics = metrics or ProviderMetrics.default()
        self._children: dict[tuple[int, tuple[str, ...]], Histogram] = {}
        self._attach()

    def _attach(self) -> None:
        counter, retries = self.metrics.requests, self.metrics.retries
        name = type(unwrap(self.inner)).name
        self._count = _RequestCounter(counter, retries, name)
        self.inner.add_request_listener(self._count)
        self._errors: dict[str, Counter] = {
            op: self.metrics.errors.labels(provider=name, operation=op) for op in CALLS
        }

    def _around(self, operation: str, key: str, call: Callable[[], T]) -> T:
        path, file_type = _labels(key) if operation != "list" else ("", "")
        kind = {"append": "write", "put": "write"}.get(operation, operation)
        start = time.perf_counter()
        ok = False
        try:
            result = call()
            ok = True
            return result
        except Exception as e:
            if isinstance(e, SegmentNotFoundError) and kind in ("size", "delete"):
                raise  # an answer (a probe, a delete of what is gone), not a failure
            errors = self._errors.get(kind)
            if errors is None:
                errors = self._errors[kind] = self.metrics.errors.labels(
                    provider=type(unwrap(self.inner)).name, operation=kind
                )
            errors.inc()
            raise
        finally:
            elapsed_ms = (time.perf_counter() - start) * 1000.0
            values = (path, file_type, kind, "true" if ok else "false")
            self._child(self.metrics.rpc_latency, values).observe(elapsed_ms)

    def read(self, key: str, position: int, length: int) -> bytes:
        data = super().read(key, position, length)
        self._downloaded(key, len(data))
        return data

    def read_view(self, key: str, position: int, length: int) -> BytesLike:
        data = super().read_view(key, position, length)
        self._downloaded(key, len(data))
        return data

    def readinto(self, key: str, position: int, into: memoryview) -> int:
        n = super().readinto(key, position, into)
        self._downloaded(key, n)
        return n

    def _downloaded(self, key: str, n: int) -> None:
        path, file_type = _labels(key)
        self._child(self.metrics.download_bytes, (path, file_type, "read")).observe(n)

    def append(self, key: str, data: BytesLike, position: int) -> int:
        size = super().append(key, data, position)
        self._uploaded(key, size - position)
        return size

    def append_deferred(self, key: str, data: BytesLike, position: int) -> int:
        size = self._around(
            "append", key, functools.partial(self.inner.append_deferred, key, data, position)
        )
        self._uploaded(key, size - position)
        return size

    def append_deferred_many(
        self, appends: Sequence[tuple[str, BytesLike, int]]
    ) -> list[int | TieredStoreError | OSError]:
        """The inner provider's bulk appends, each recorded as its own ``write`` (the call's
        time shared out among them)."""
        if not appends:
            return []
        done, each_ms = self._bulk("write", len(appends), len(appends),
                                   lambda: self.inner.append_deferred_many(appends))  # fmt: skip
        latency, uploaded = self.metrics.rpc_latency, self.metrics.upload_bytes
        sizes: dict[tuple[str, str], list[float]] = {}  # by label: a round's appends share few
        failed: dict[tuple[str, str], int] = {}
        for (key, _, position), got in zip(appends, done, strict=True):
            labels = _labels(key)
            if isinstance(got, int):
                sizes.setdefault(labels, []).append(got - position)
            else:
                failed[labels] = failed.get(labels, 0) + 1
        for (path, file_type), written in sizes.items():
            observe_repeated(self._child(latency, (path, file_type, "write", "true")),
                             each_ms, len(written))  # fmt: skip
            observe_each(self._child(uploaded, (path, file_type, "write")), written)
        for (path, file_type), n in failed.items():
            self._errors["write"].inc(n)
            observe_repeated(self._child(latency, (path, file_type, "write", "false")),
                             each_ms, n)  # fmt: skip
        return done

    def _bulk(self, kind: str, items: int, errors: int, call: Callable[[], T]) -> tuple[T, float]:
        """``call()`` (a bulk call of ``items`` operations of ``kind``) and each one's share of
        its time in milliseconds; if it raises, ``errors`` failures of ``kind`` are counted."""
        start = time.perf_counter()
        try:
            result = call()
        except Exception:
            self._errors[kind].inc(errors)
            raise
        return result, (time.perf_counter() - start) * 1000.0 / items

    def sizes_many(self, keys: Sequence[str]) -> list[int | None]:
        """The inner provider's sizes at once, each recorded as its own ``size`` (the call's
        time shared out among them; an absent object's with ``success="false"``, as one
        ``size`` records it)."""
        if not keys:
            return []
        found, each_ms = self._bulk("size", len(keys), 1, lambda: self.inner.sizes_many(keys))
        counts: dict[tuple[str, str, str], int] = {}
        for key, size in zip(keys, found, strict=True):
            path, file_type = _labels(key)
            labels = (path, file_type, "false" if size is None else "true")
            counts[labels] = counts.get(labels, 0) + 1
        for (path, file_type, ok), n in counts.items():
            child = self._child(self.metrics.rpc_latency, (path, file_type, "size", ok))
            observe_repeated(child, each_ms, n)
        return found

    def put(self, key: str, data: Payload, overwrite: bool = False) -> None:
        if isinstance(data, bytes | bytearray | memoryview):
            super().put(key, data, overwrite)
            self._uploaded(key, memoryview(data).nbytes)
            return
        reader = _CountingReader(data)
        super().put(key, reader, overwrite)  # type: ignore[arg-type]
        self._uploaded(key, reader.count)

    def _uploaded(self, key: str, count: int) -> None:
        path, file_type = _labels(key)
        self._child(self.metrics.upload_bytes, (path, file_type, "write")).observe(count)

    def _child(self, family: Histogram, values: tuple[str, ...]) -> Histogram:
        """``family.labels(*values)``, remembered (``labels`` checks its arguments and takes a
        lock on every call: a cost paid per backend call)."""
        key = (id(family), values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = family.labels(*values)
        return found

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("metrics", None)
        state.pop("_count", None)
        state.pop("_children", None)
        state.pop("_errors", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.metrics = ProviderMetrics.default()
        self._children = {}
        self._attach()
