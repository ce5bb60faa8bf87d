"""``TieredMessageStore``: cold reads over the broker's store and the tier (spec §9).

Every read is routed first (:func:`~tiered.read.read_route.route`: the topic's storage level, what
the tier holds, whether the broker still has the offset on disk or in the page cache); the tier
side is the :class:`~tiered.read.fetcher.Fetcher` (read-ahead cache, verified reads), the local
side the broker's own files through :class:`~tiered.source.local_source.LocalSource`. As upstream,
a tiered read that finds nothing (or fails) while the broker still has the offset is answered
locally and counted as a fallback; a message that fails its integrity checks is never returned:
the :class:`~tiered.errors.IntegrityError` is raised (or, unless the level is FORCE, the broker's
intact copy is served instead, and the failure logged and counted).

``run`` builds the store over the daemon's live flat files; ``fetch``/``explain`` use
:meth:`TieredMessageStore.open_read_only`, which reads the metadata file without locking,
reconciling or writing anything, so they are safe beside a running sidecar.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tiered import metrics
from tiered.closeable import Closeable
from tiered.config import StorageLevel
from tiered.config import TieredConfig
from tiered.errors import IntegrityError
from tiered.errors import InvalidRequestError
from tiered.errors import OffsetNotInStoreError
from tiered.errors import ProviderError
from tiered.errors import StoreFileNotFoundError
from tiered.file.flat_file_store import FlatFileStore
from tiered.file.flat_message_file import FlatMessageFile
from tiered.metadata import MetadataStore
from tiered.metrics.labels import KnownTopics
from tiered.process.logs import error_fields
from tiered.providers import Provider
from tiered.providers.read_ahead import large_read_bytes
from tiered.read.fetcher import DEFAULT_MAX_TRANSFER_BYTES
from tiered.read.fetcher import Fetcher
from tiered.read.fetcher import GetResult
from tiered.read.fetcher import GetStatus
from tiered.read.fetcher import TieredReader
from tiered.read.fetcher import Unit
from tiered.read.fetcher import out_of_range
from tiered.read.read_cache import ReadAheadCache
from tiered.read.read_cache import memory_limit_bytes
from tiered.read.read_gate import ReadGate
from tiered.read.read_route import Route
from tiered.read.read_route import route
from tiered.read.read_unit import Run
from tiered.read.tag_filter import TagFilter
from tiered.read.time_search import Boundary
from tiered.read.time_search import offset_by_time
from tiered.source.local_source import LocalSource
from tiered.source.topic_filter import is_system_topic

__all__ = ["MAX_QUEUE_ID", "TOPIC_PATTERN", "Boundary", "TieredMessageStore", "check_request"]

log = logging.getLogger(__name__)

TOPIC_PATTERN = r"^[A-Za-z0-9%|_\-]{1,127}$"
"""RocketMQ's topic names (``TopicValidator``): also what keeps a name inside the store."""
_TOPIC = re.compile(TOPIC_PATTERN)
MAX_QUEUE_ID = 65535
_FALLBACK_STATUSES = (GetStatus.OFFSET_FOUND_NULL, GetStatus.NO_MATCHED_LOGIC_QUEUE)


def check_request(topic: str, queue_id: int, offset: int = 0, max_count: int = 1) -> None:
    """Refuse impossible read requests.

    Raises:
        InvalidRequestError: naming the bad value and what is allowed.
    """
    if not _TOPIC.fullmatch(topic):
        raise InvalidRequestError(
            f"topic={topic!r} is not a RocketMQ topic name (1-127 of A-Z a-z 0-9 % | _ -)"
        )
    if not 0 <= queue_id <= MAX_QUEUE_ID:
        raise InvalidRequestError(f"queue={queue_id!r} must be in 0..{MAX_QUEUE_ID}")
    if offset < 0:
        raise InvalidRequestError(f"offset={offset!r} must be >= 0")
    if max_count < 1:
        raise InvalidRequestError(f"maxCount={max_count!r} must be >= 1")


@dataclass(slots=True)  # not frozen: five times cheaper to make, one per read
class _Read:
    """One message read as :meth:`TieredMessageStore.get_message` passes it to a tier."""

    topic: str
    queue_id: int
    offset: int
    max_count: int
    filt: TagFilter
    max_bytes: int
    ahead: bool = False


class TieredMessageStore(Closeable):
    """The read facade; thread-safe (the HTTP API calls it from many threads)."""

    def __init__(
        self,
        cfg: TieredConfig,
        flat_store: FlatFileStore,
        local: LocalSource,
        *,
        cache: ReadAheadCache | None = None,
    ) -> None:
        self.cfg = cfg
        self.flat_store = flat_store
        self.local = local
        if cache is None and cfg.read_ahead_cache_enable:
            budget = int(memory_limit_bytes() * cfg.read_ahead_cache_size_threshold_rate)
            cache = ReadAheadCache(budget, cfg.read_ahead_cache_expire_duration_ms)
        self.cache = cache
        bulk = large_read_bytes(cfg.object_store_read_ahead_size_bytes)
        self.reader = TieredReader(
            cfg.read_ahead_message_size_threshold_bytes,
            _damaged,
            bulk if flat_store.provider.object_per_append else 0,
        )
        self.gate = ReadGate(cfg.tiered_read_max_pending)
        """Bounds the cold reads of every caller of this store (HTTP and replay share it)."""
        self.fetcher = Fetcher(
            self.reader, cache, cfg.read_ahead_message_count_threshold, self.gate
        )
        metadata = flat_store.metadata
        self.topics = KnownTopics(lambda: [m.topic for m in metadata.topics()], local.cq_root)
        """Topics that get their own metric labels (others count as ``_other``)."""
        self._owned: Provider | None = None
        self._seen = (0, 0)
        self._stats_lock = threading.Lock()
        if cache is not None:
            metrics.READ_AHEAD_CACHE_COUNT.set_function(lambda: len(cache))
            metrics.READ_AHEAD_CACHE_BYTES.set_function(lambda: cache.used_bytes)
            metrics.before_collect(self._sync_cache_metrics)  # not on every read: at a scrape

    @classmethod
    def open_read_only(
        cls, cfg: TieredConfig, provider: Provider | None = None
    ) -> TieredMessageStore:
        """A store for a separate process (``fetch``, ``explain``): the metadata file is parsed
        as it is (no data-dir lock, no reconciliation, nothing written or moved); the backend is
        read through ``provider`` (default: the configured one, closed by :meth:`close`).

        Raises:
            MetadataError: the metadata file and its ``.bak`` are both unreadable.
        """
        from tiered.providers import build_provider

        metadata = MetadataStore.read_only(cfg.tiered_data_dir)
        backend = provider if provider is not None else build_provider(cfg)
        flat_store = FlatFileStore.from_config(cfg, backend, metadata)
        flat_store.load(reconcile_backend=False)
        store = cls(cfg, flat_store, LocalSource(cfg))
        store._owned = backend if provider is None else None
        return store

    def close(self) -> None:
        """Stop loading windows ahead of readers; close the provider :meth:`open_read_only`
        built."""
        self.fetcher.close()
        if self._owned is not None:
            self._owned.close()
            self._owned = None

    # --- routing ----------------------------------------------------------------------------------

    def _flat(self, topic: str, queue_id: int) -> FlatMessageFile | None:
        flat = self.flat_store.get(topic, queue_id)
        return flat if flat is not None and flat.initialized else None

    def route(self, topic: str, queue_id: int, offset: int, batch: int = 1) -> Route:
        """Which tier would serve ``batch`` messages from ``offset``, and why (spec §9.1)."""
        flat = self._flat(topic, queue_id)
        cfg = self.cfg
        return route(
            cfg.storage_level_for(topic),
            self.local,
            topic,
            queue_id,
            offset,
            batch,
            flat.commit_offset if flat is not None else -1,
            system_topic=is_system_topic(topic, cfg.broker_cluster_name, cfg.broker_name),
        )

    @contextmanager
    def _timed(self, operation: str, topic: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self._observe(operation, topic, started)

    def _observe(self, operation: str, topic: str, started: float) -> None:
        elapsed_ms = (time.perf_counter() - started) * 1000
        label = self.topics.label(topic)
        metrics.child(metrics.API_LATENCY, operation, label).observe(elapsed_ms)

    # --- messages ---------------------------------------------------------------------------------

    def get_message(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tags: str | TagFilter | None = None,
        *,
        max_bytes: int = DEFAULT_MAX_TRANSFER_BYTES,
        ahead: bool = False,
    ) -> GetResult:
        """Up to ``max_count`` messages matching ``tags`` from ``offset`` and about ``max_bytes``
        (at least one), from whichever tier the route picks; statuses of spec §9.2.

        ``ahead``: a read ahead of its request (a replay connection's prepared pull), which may
        never be handed to a client: its messages are counted out (``messages_out_total``) by
        :meth:`count_out` when they are, not here.

        ``min_offset`` of the result is the lower of the local and the tiered min; ``max_offset``
        that of the tier that answered.

        Raises:
            InvalidRequestError: a bad topic name, queue id, offset, count or tag expression.
            IntegrityError: a message read from the tier failed its checks (never returned).
            ReadBusyError: the read must go to the backend and ``tieredReadMaxPending`` cold
                reads are waiting there already (:mod:`~tiered.read.read_gate`).
            ProviderError: the backend failed and the broker no longer has the offset.
        """
        check_request(topic, queue_id, offset, max_count)
        filt = tags if isinstance(tags, TagFilter) else TagFilter.parse(tags)
        started = time.perf_counter()  # a try block, not _timed: a pull's overhead counts
        try:
            decision = self.route(topic, queue_id, offset, max_count)
            read = _Read(topic, queue_id, offset, max_count, filt, max_bytes, ahead)
            if decision.tier == "local":
                result = self._local_get(read)
            else:
                result = self._tiered_get(decision, read)
        finally:
            self._observe("get_message", topic, started)
        local_min = decision.local_min_offset
        if local_min >= 0:
            result.min_offset = (
                local_min if result.min_offset < 0 else min(local_min, result.min_offset)
            )
        return result

    def count_out(self, topic: str, result: GetResult) -> None:
        """Count the messages of ``result`` as returned from the tier (``messages_out_total``)
        when the tier found them."""
        if result.status is GetStatus.FOUND and result.tier == "tiered":
            metrics.child(metrics.MESSAGES_OUT, self.topics.label(topic)).inc(result.count)

    def _tiered_get(self, decision: Route, read: _Read) -> GetResult:
        topic, queue_id, offset = read.topic, read.queue_id, read.offset
        flat = self.flat_store.get(topic, queue_id)
        try:
            result = self.fetcher.get(flat, offset, read.max_count, read.filt, read.max_bytes)
        except IntegrityError as e:
            if decision.level is StorageLevel.FORCE or not self.local.in_store(
                topic, queue_id, offset
            ):
                raise
            # the failed check itself was logged (one ERROR line, _damaged): this is its outcome
            log.info(
                "serving %s/%d offset %d from the broker's store instead of object %s",
                topic,
                queue_id,
                offset,
                e.key,
                extra=error_fields(e, topic=topic, queue_id=queue_id),
            )
        except ProviderError as e:
            if not self.local.in_store(topic, queue_id, offset):
                raise
            fields = error_fields(e, topic=topic, queue_id=queue_id)
            log.warning(
                "%s/%d offset %d: the tier failed on object %s (%s); served locally",
                topic,
                queue_id,
                offset,
                fields.get("objectKey", "-"),
                e,
                extra=fields,
            )
        else:
            if self.cfg.record_get_message_result:
                log.info(
                    "tiered get %s/%d offset %d max %d: %s, %d messages, next %d",
                    topic,
                    queue_id,
                    offset,
                    read.max_count,
                    result.status.value,
                    result.count,
                    result.next_begin_offset,
                )
            if result.status not in _FALLBACK_STATUSES or not self.local.in_store(
                topic, queue_id, offset
            ):
                if not read.ahead:
                    self.count_out(topic, result)
                return result
        label = self.topics.label(topic)
        metrics.child(metrics.GET_MESSAGE_FALLBACK, "get_message", label).inc()
        return self._local_get(read)

    def _local_get(self, read: _Read) -> GetResult:
        topic, queue_id, offset = read.topic, read.queue_id, read.offset
        local = self.local
        lo, hi = local.min_offset(topic, queue_id), local.max_offset(topic, queue_id)

        def status(s: GetStatus, nxt: int) -> GetResult:
            return GetResult(s, nxt, lo, hi, tier="local")

        if hi < 0:
            return status(GetStatus.NO_MATCHED_LOGIC_QUEUE, offset)
        if hi == 0:
            return status(GetStatus.NO_MESSAGE_IN_QUEUE, offset)
        outside = out_of_range(offset, lo, hi)
        if outside is not None:
            return status(*outside)
        try:
            count = min(read.max_count, hi - offset)
            got = local.read(topic, queue_id, offset, count, read.max_bytes)
        except (OffsetNotInStoreError, StoreFileNotFoundError):
            got = []  # the broker deleted the file meanwhile
        if not got:
            return status(GetStatus.OFFSET_FOUND_NULL, offset)
        run = Run.of_units([Unit(q, data, code) for q, data, code in got])
        if read.filt.tags is not None:
            run = run.select(read.filt.match_run(run))
        result = status(
            GetStatus.FOUND if len(run) else GetStatus.NO_MATCHED_MESSAGE, offset + len(got)
        )
        result.runs = [run] if len(run) else []
        return result

    # --- offsets and times ------------------------------------------------------------------------

    def serves(self, topic: str) -> bool:
        """Whether the tier may serve ``topic`` at all (not DISABLE, not a system topic)."""
        cfg = self.cfg
        return cfg.storage_level_for(topic) is not StorageLevel.DISABLE and not is_system_topic(
            topic, cfg.broker_cluster_name, cfg.broker_name
        )

    def offsets(self, topic: str, queue_id: int) -> dict[str, int]:
        """``min``/``max`` over both tiers (the broker's alone when the tier may not serve the
        topic), the tier's ``commit`` offset (-1 when it holds nothing of the queue), and each
        side's own bounds."""
        check_request(topic, queue_id)
        flat = self._flat(topic, queue_id)
        lmin, lmax = self.local.min_offset(topic, queue_id), self.local.max_offset(topic, queue_id)
        tmin = flat.min_offset() if flat is not None else -1
        commit = flat.commit_offset if flat is not None else -1
        visible = self.serves(topic)
        return {
            "min": _lowest(lmin, tmin) if visible else lmin,
            "max": max(lmax, commit) if visible else lmax,
            "commit": commit,
            "localMin": lmin,
            "localMax": lmax,
            "tieredMin": tmin,
        }

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        """The lowest offset either tier holds (spec §9.6; the broker's alone under DISABLE);
        -1 when neither knows the queue."""
        return self.offsets(topic, queue_id)["min"]

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        """The broker's max offset (the tier is never ahead of it; its commit offset when the
        broker no longer has the queue); -1 when neither knows the queue."""
        return self.offsets(topic, queue_id)["max"]

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        """Store time of the oldest message either tier holds (the broker's alone when the tier
        may not serve the topic); -1 when none (spec §9.6)."""
        check_request(topic, queue_id)
        flat = self._flat(topic, queue_id) if self.serves(topic) else None
        tiered = flat.min_timestamp() if flat is not None else -1
        return _lowest(self.local.earliest_time(topic, queue_id), tiered)

    def get_offset_by_time(
        self,
        topic: str,
        queue_id: int,
        timestamp_ms: int,
        boundary: Boundary | str = Boundary.LOWER,
    ) -> int:
        """The queue offset of the first message stored at or after ``timestamp_ms`` (with
        ``UPPER``: the last stored exactly then). The tier answers when the broker's oldest
        message is newer (or the level is FORCE), the broker otherwise (spec §9.6, §9.7). When
        the tier is asked but its answer is not used (it holds nothing of that time, or it failed
        while the broker holds that time), the broker answers and a
        ``get_message_fallback_total{operation="get_offset_by_time"}`` is counted.

        Raises:
            InvalidRequestError: a bad topic, queue id or boundary.
            ProviderError: the tier failed and the broker does not hold that time (its answer
                could skip what only the tier holds).
        """
        check_request(topic, queue_id)
        try:
            edge = Boundary(boundary)
        except ValueError as e:
            raise InvalidRequestError(f"boundary={boundary!r} must be LOWER or UPPER") from e
        with self._timed("get_offset_by_time", topic):
            level = self.cfg.storage_level_for(topic)
            flat = self._flat(topic, queue_id) if self.serves(topic) else None
            local_first = self.local.earliest_time(topic, queue_id)
            ask_tier = level is StorageLevel.FORCE or local_first < 0 or timestamp_ms < local_first
            fallback = flat is not None and ask_tier
            if flat is not None and ask_tier:
                try:
                    answer = offset_by_time(flat, timestamp_ms, edge)
                except ProviderError as e:
                    # the broker's answer stands in only where it is exact: it holds that time
                    if not 0 <= local_first <= timestamp_ms:
                        raise
                    fields = error_fields(e, topic=topic, queue_id=queue_id)
                    log.warning(
                        "%s/%d offset by time %d: the tier failed on object %s (%s); answered "
                        "by the broker",
                        topic,
                        queue_id,
                        timestamp_ms,
                        fields.get("objectKey", "-"),
                        e,
                        extra=fields,
                    )
                else:
                    if level is StorageLevel.FORCE or 0 <= answer < flat.commit_offset:
                        return answer
            if not self.local.has_queue(topic, queue_id):
                return flat.commit_offset if flat is not None else -1
            if fallback:
                label = self.topics.label(topic)
                metrics.child(metrics.GET_MESSAGE_FALLBACK, "get_offset_by_time", label).inc()
            return self.local.offset_by_time(
                topic, queue_id, timestamp_ms, upper=edge is Boundary.UPPER
            )

    # --- explain ----------------------------------------------------------------------------------

    def explain(self, topic: str, queue_id: int, offset: int) -> dict[str, Any]:
        """Which tier would serve ``offset`` and why: the level (and where it comes from), the
        tier's range, the broker's range, and for NOT_IN_MEM the page-cache residency."""
        check_request(topic, queue_id, offset)
        decision = self.route(topic, queue_id, offset)
        flat = self._flat(topic, queue_id)
        override = self.cfg.storage_level_override(topic)
        out: dict[str, Any] = {"topic": topic, "queueId": queue_id, "offset": offset}
        out.update(decision.as_json())
        out["levelFrom"] = (
            "tieredStorageLevel"
            if override is None
            else f"tieredStorageLevelOverrides {str(override)!r}"
        )
        out["tieredMinOffset"] = flat.min_offset() if flat is not None else -1
        out["localMaxOffset"] = self.local.max_offset(topic, queue_id)
        return out

    # --- integrity and metrics --------------------------------------------------------------------

    def _sync_cache_metrics(self) -> None:
        cache = self.cache
        if cache is None:
            return
        with self._stats_lock:
            accesses, hits = cache.stats.accesses, cache.stats.hits
            seen_accesses, seen_hits = self._seen
            self._seen = (accesses, hits)
        if accesses > seen_accesses:
            metrics.READ_AHEAD_CACHE_ACCESS.inc(accesses - seen_accesses)
        if hits > seen_hits:
            metrics.READ_AHEAD_CACHE_HIT.inc(hits - seen_hits)


def _damaged(flat: FlatMessageFile, error: IntegrityError) -> None:
    """Count and log a message that failed its checks (a function: no reference to the store)."""
    metrics.child(metrics.READ_CRC_FAILURES, *metrics.queue_labels(flat.topic, flat.queue_id)).inc()
    log.error(
        "tier integrity check failed on object %s: %s",
        error.key,
        error,
        extra=error_fields(error, topic=flat.topic, queue_id=flat.queue_id),
    )


def _lowest(a: int, b: int) -> int:
    """The lower of two values where -1 means "none"."""
    if a < 0 or b < 0:
        return max(a, b)
    return min(a, b)
