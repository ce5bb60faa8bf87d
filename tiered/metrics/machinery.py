"""How the metric families of :mod:`tiered.metrics` are made and exported: each family made on
first use (:func:`register`), or as a stand-in that records nothing (:func:`discard`); the
detail the per-queue families carry (:func:`set_detail`) and :class:`QueueGauge`, which exports a
queue's value at that detail; hooks run before every collection (:func:`before_collect`)."""

from __future__ import annotations

import functools
import sys
import threading
import weakref
from collections.abc import Callable
from collections.abc import Hashable
from collections.abc import Iterable
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING
from typing import Any
from typing import Final
from typing import TypeVar
from typing import cast

if TYPE_CHECKING:
    from prometheus_client import Counter
    from prometheus_client import Gauge
    from prometheus_client import Histogram
    from prometheus_client.metrics import MetricWrapperBase

M = TypeVar("M", bound="MetricWrapperBase")

_children: dict[tuple[int, tuple[str, ...]], MetricWrapperBase] = {}


def child(metric: M, *values: str) -> M:
    """``metric.labels(*values)``, remembered: ``labels`` checks its arguments and takes a lock
    on every call, a cost paid per request on the read paths. Children are never removed here,
    so a remembered one stays the one exported: never pass a value a request chose as it came
    (a topic goes through :meth:`tiered.metrics.labels.KnownTopics.label` first)."""
    key = (id(metric), values)
    found = _children.get(key)
    if found is None:
        found = _children[key] = metric.labels(*values)
    return found  # type: ignore[return-value]


# --- how much detail the per-queue families carry (``tieredMetricsDetail``) -----------------------

DETAILS: Final = ("broker", "topic", "queue")
"""``tieredMetricsDetail``: the per-queue families (``topic``/``queue_id`` or ``path`` labels) as
one series for the broker (``broker``: both labels empty), one per topic (``topic``: ``queue_id``
empty, ``path`` the topic's ``broker/topic``) or one per queue as upstream (``queue``). Prometheus
reads an empty label as no label, so ``max by (topic, queue_id)`` works at every level."""


class _Detail:
    level = "broker"


_detail = _Detail()


def set_detail(level: str) -> None:
    """Export the per-queue families at ``level`` (one of :data:`DETAILS`); call before the
    first series is made (``run`` does, from ``tieredMetricsDetail``).

    Raises:
        ValueError: ``level`` is not one of :data:`DETAILS`.
    """
    if level not in DETAILS:
        raise ValueError(f"metrics detail {level!r} is not one of {', '.join(DETAILS)}")
    _detail.level = level
    from tiered.providers.wrappers import set_path_label

    set_path_label(path_label)


def detail() -> str:
    """The level of :func:`set_detail` (``broker`` until set)."""
    return _detail.level


def queue_labels(topic: str, queue_id: int) -> tuple[str, str]:
    """The ``(topic, queue_id)`` label values of a queue's series at the configured detail."""
    level = _detail.level
    if level == "queue":
        return topic, str(queue_id)
    return (topic, "") if level == "topic" else ("", "")


def topic_label(topic: str) -> str:
    """The ``topic`` label value of a topic's series (empty at ``broker`` detail)."""
    return "" if _detail.level == "broker" else topic


def path_label(path: str) -> str:
    """The ``path`` label value of a queue's logical path ``broker/topic/queue``: itself at
    ``queue`` detail, ``broker/topic`` at ``topic``, empty at ``broker``."""
    level = _detail.level
    if level == "queue" or not path:
        return path
    return path.rpartition("/")[0] if level == "topic" else ""


# --- making the families --------------------------------------------------------------------------


class _Making:
    """Whether the families are made yet, and whether as stand-ins (:func:`discard`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.made = False
        self.discard = False


_making = _Making()


@functools.cache
def _client() -> ModuleType:
    """prometheus_client, with its ``*_created`` series switched off (they double the series
    count and no dashboard or alert reads them) before this package makes a metric."""
    import prometheus_client

    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped
    return prometheus_client


if "prometheus_client" in sys.modules:  # loaded already (by the provider wrapper): switch now
    _client()


class _Discarded:
    """What every family (and every child) is in a process that called :func:`discard`."""

    def labels(self, *_: object, **__: object) -> _Discarded:
        return self

    def remove(self, *_: object) -> None:
        return None

    def clear(self) -> None:
        return None

    def inc(self, amount: float = 1, exemplar: object = None) -> None:
        return None

    def dec(self, amount: float = 1) -> None:
        return None

    def set(self, value: float) -> None:
        return None

    def set_to_current_time(self) -> None:
        return None

    def set_function(self, f: Callable[[], float]) -> None:
        return None

    def observe(self, amount: float, exemplar: object = None) -> None:
        return None


_DISCARDED = _Discarded()


class _Pending:
    """A family not made yet. The first attribute looked up on any of them makes them all
    (:func:`register`): in the order of this module, in the default registry; the module's
    names then hold the families themselves."""

    def __init__(
        self,
        kind: str,
        args: tuple[str, str, Sequence[str]],
        options: dict[str, Any],
        series: Sequence[tuple[str, ...]],
    ) -> None:
        self.kind, self.args, self.options, self.series = kind, args, options, series
        self.made: Any = None

    def make(self, discard: bool) -> Any:
        """The family (or the discarding stand-in), with its ``series`` at 0."""
        if self.made is None:
            if discard:
                self.made = _DISCARDED
            else:
                client = _client()
                self.made = getattr(client, self.kind)(*self.args, **self.options)
                for values in self.series:
                    self.made.labels(*values)
        return self.made

    def __getattr__(self, name: str) -> Any:
        register()
        return getattr(self.made, name)


def _pending(
    kind: str,
    name: str,
    documentation: str,
    labelnames: Sequence[str],
    series: Sequence[tuple[str, ...]],
    **options: Any,
) -> Any:
    return _Pending(kind, (name, documentation, labelnames), options, series)


def counter(
    name: str,
    documentation: str,
    labelnames: Sequence[str] = (),
    *,
    series: Sequence[tuple[str, ...]] = (),
) -> Counter:
    return cast("Counter", _pending("Counter", name, documentation, labelnames, series))


def gauge(name: str, documentation: str, labelnames: Sequence[str] = ()) -> Gauge:
    return cast("Gauge", _pending("Gauge", name, documentation, labelnames, ()))


def histogram(
    name: str, documentation: str, labelnames: Sequence[str] = (), *, buckets: Sequence[float]
) -> Histogram:
    return cast(
        "Histogram", _pending("Histogram", name, documentation, labelnames, (), buckets=buckets)
    )


class _BeforeCollect:
    """A collector that yields no metric: registered ahead of every family, it runs the
    :func:`before_collect` hooks whenever the registry is collected (a scrape of ``/metrics``,
    ``get_sample_value``), so a counter that a hot path keeps as a plain number is brought up to
    date just before it is read."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.hooks: list[Callable[[], Callable[[], None] | None]] = []

    def add(self, hook: Callable[[], None]) -> None:
        ref: Callable[[], Callable[[], None] | None]
        if hasattr(hook, "__self__"):  # a bound method: held weakly, dropped with its object
            ref = weakref.WeakMethod(hook)
        else:

            def ref() -> Callable[[], None]:
                return hook

        with self.lock:
            self.hooks.append(ref)

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> list[Any]:
        with self.lock:
            self.hooks = [ref for ref in self.hooks if ref() is not None]
            live = [ref() for ref in self.hooks]
        for hook in live:
            if hook is not None:
                hook()
        return []


_BEFORE = _BeforeCollect()


def before_collect(hook: Callable[[], None]) -> None:
    """Run ``hook`` before every collection of the default registry (held weakly when it is a
    bound method). For counters a per-request path counts in plain numbers and publishes only
    when someone looks."""
    _BEFORE.add(hook)


def register() -> None:
    """Make every family of this module now, in prometheus_client's default registry (``run``
    calls it before anything is served; otherwise the first use of any family does). After
    :func:`discard`, make the stand-ins that record nothing instead."""
    with _making.lock:
        if _making.made:
            return
        if not _making.discard:  # first: it runs before the families are collected
            _client().REGISTRY.register(_BEFORE)
        names = vars(sys.modules[__package__ or "tiered.metrics"])  # the families' module
        for name, value in list(names.items()):
            if isinstance(value, _Pending):
                names[name] = value.make(_making.discard)
        if not _making.discard:
            names["REGISTRY"] = _client().REGISTRY
        _making.made = True


def discard() -> bool:
    """Record nothing in this process: every family becomes a stand-in whose methods do
    nothing, and prometheus_client is not loaded for them. For a process that never serves
    ``/metrics`` (the console script's one-shot commands, :data:`tiered.cli.UNSERVED`); call
    it before the first use. Returns :func:`discarded`: False when the families were made
    already (they then stay and record as before)."""
    with _making.lock:
        if not _making.made:
            _making.discard = True
    register()
    return _making.discard


def discarded() -> bool:
    """Whether this process records no metrics (:func:`discard`)."""
    return _making.discard


class PendingRegistry:
    """``REGISTRY`` until the families are made: prometheus_client's default registry, with
    every family of this module in it (its first use makes them)."""

    def __getattr__(self, name: str) -> Any:
        register()
        return getattr(_client().REGISTRY, name)


class QueueGauge:
    """A gauge each queue sets for itself, exported at the configured detail
    (:func:`set_detail`): at ``queue`` detail each queue's value is its own series, as upstream;
    at ``topic`` and ``broker`` detail a series holds ``how`` (``sum`` or ``max``) of the values of
    its queues, worked out when the registry is collected (a scrape), only for the series a queue
    changed since. A queue's value is kept only while it is not 0 (a queue at rest costs nothing
    for ``dispatch_behind`` and ``dispatch_latency``)."""

    def __init__(self, family: Gauge, how: Callable[[Iterable[float]], float]) -> None:
        self.family = family
        self.how = how
        self._lock = threading.Lock()
        self._values: dict[tuple[str, ...], dict[Hashable, float]] = {}
        """Series (its label values) -> the values of its queues."""
        self._dirty: set[tuple[str, ...]] = set()
        before_collect(self._publish)

    def set(self, topic: str, queue_id: int, value: float, *rest: str) -> None:
        """The queue's value (``rest``: the family's labels after ``topic, queue_id``)."""
        if _detail.level == "queue":
            child(self.family, topic, str(queue_id), *rest).set(value)
            return
        self._set((topic, queue_id), (*queue_labels(topic, queue_id), *rest), value)

    def set_path(self, path: str, value: float, *rest: str) -> None:
        """The value of the queue (or index) at logical ``path``, for a family whose first label
        is the path (``rocketmq_storage_size``)."""
        if _detail.level == "queue":
            child(self.family, path, *rest).set(value)
            return
        self._set((path, *rest), (path_label(path), *rest), value)

    def set_paths(self, items: Sequence[tuple[str, float, str]]) -> None:
        """:meth:`set_path` of each ``(path, value, label)`` (a family of one label after the
        path), under one hold of the lock."""
        if _detail.level == "queue":
            for path, value, rest in items:
                child(self.family, path, rest).set(value)
            return
        if _making.discard:
            return
        with self._lock:
            for path, value, rest in items:
                self._set_locked((path, rest), (path_label(path), rest), value)

    def _set(self, key: Hashable, series: tuple[str, ...], value: float) -> None:
        if _making.discard:
            return
        with self._lock:
            self._set_locked(key, series, value)

    def _set_locked(self, key: Hashable, series: tuple[str, ...], value: float) -> None:
        values = self._values.get(series)
        if values is None:
            values = self._values[series] = {}
        if value:
            values[key] = value
        elif values.pop(key, None) is None:
            return  # 0 and was 0: nothing changed
        self._dirty.add(series)

    def forget(self, topic: str, queue_id: int, path: str) -> bool:
        """Drop a queue's values (the broker deleted it): its own series at ``queue`` detail,
        its share of the others; whether it had any."""
        if _making.discard:
            return False
        if _detail.level == "queue":
            own = {(topic, str(queue_id)), (path,)}
            found = False
            (family,) = self.family.collect()
            for sample in list(family.samples):
                labels = tuple(sample.labels.values())
                if labels[:2] in own or labels[:1] in own:
                    _children.pop((id(self.family), labels), None)
                    self.family.remove(*labels)
                    found = True
            return found
        found = False
        with self._lock:
            for series, values in self._values.items():
                mine = [
                    k
                    for k in values
                    if k == (topic, queue_id) or (isinstance(k, tuple) and k[0] == path)
                ]
                for key in mine:
                    del values[key]
                    self._dirty.add(series)
                    found = True
        return found

    def _publish(self) -> None:
        with self._lock:
            dirty, self._dirty = self._dirty, set()
            out = [(s, self.how(self._values[s].values()) if self._values[s] else 0) for s in dirty]
        for series, value in out:
            child(self.family, *series).set(value)
