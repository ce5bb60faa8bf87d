"""The sidecar's Prometheus metrics: plain metric objects in prometheus_client's default registry.

Upstream names (spec §13) are kept where upstream has the metric; the sidecar's own additions are
marked (+). Every family the package registers is below (names as exposed: counters end in
``_total``); :func:`families` lists them with their types and labels, and the docs' metrics
reference is generated from them (a test holds the three together). The families are made on
first use (:func:`register`), or as stand-ins that record nothing (:func:`discard`).

====================================================  =======  ========  ==========================
name (``rocketmq_tiered_store_`` prefix unless full)  type     unit      labels
====================================================  =======  ========  ==========================
*dispatch* (:mod:`~tiered.offload.offload_step`, :mod:`~tiered.offload.dispatcher`, :mod:`~.expiry`)
---------------------------------------------------------------------------------------------------
``dispatch_behind``                                   gauge    messages  topic, queue_id, file_type
``dispatch_behind_bytes`` (+)                         gauge    bytes     topic, queue_id
``dispatch_behind_commitlog_files`` (+)               gauge    files
``dispatch_latency``                                  gauge    ms        topic, queue_id, file_type
``messages_dispatch_total``                           counter  messages  topic, queue_id, file_type
``dispatch_bytes_total`` (+)                          counter  bytes     topic, queue_id
``dispatch_errors_total`` (+)                         counter            topic, queue_id
``dispatch_gap_messages_total`` (+)                   counter  messages  topic, queue_id
``dispatch_rounds_total`` (+)                         counter
``dispatch_standby`` (+)                              gauge    0/1
``uploads_paused`` (+)                                gauge    0/1
``uploads_paused_since_timestamp_seconds`` (+)        gauge    Unix s
``read_only`` (+)                                     gauge    0/1
``expired_segments_total`` (+)                        counter            file_type
``expiry_failures_total`` (+)                         counter            file_type
``expiry_behind_segments`` (+)                        gauge    segments  topic, queue_id, file_type
``expiry_behind_bytes`` (+)                           gauge    bytes     topic, queue_id, file_type
*storage*
---------------------------------------------------------------------------------------------------
``rocketmq_storage_size``                             gauge    bytes     topic (= path), file_type
``rocketmq_storage_message_reserve_time``             gauge    ms        topic, queue_id
*read* (:class:`~tiered.read.message_store.TieredMessageStore`, :class:`~.IndexService`)
---------------------------------------------------------------------------------------------------
``api_latency``                                       hist.    ms        operation, topic
``messages_out_total``                                counter  messages  topic
``get_message_fallback_total``                        counter            operation, topic
``read_ahead_cache_messages``                         gauge    messages
``read_ahead_cache_bytes``                            gauge    bytes
``read_ahead_cache_access_total``                     counter
``read_ahead_cache_hit_total``                        counter
``read_crc_failures_total`` (+)                       counter  messages  topic, queue_id
*key index* (+) (:mod:`tiered.index`)
---------------------------------------------------------------------------------------------------
``index_keys_total``                                  counter  keys
``index_files_sealed_total``                          counter  files
``index_files_compacted_total``                       counter  files     engine
``index_compaction_duration_seconds``                 hist.    s         engine
``index_files_uploaded_total``                        counter  files
``index_files_waiting``                               gauge    files
``index_failures_total``                              counter            stage
*metadata* (+) (:class:`~tiered.metadata.metadata_store.MetadataStore`)
---------------------------------------------------------------------------------------------------
``metadata_persist_total``                            counter            result
``metadata_mirror_total``                             counter            result
``metadata_written_bytes_total``                      counter  bytes     kind
``metadata_last_persist_timestamp_seconds``           gauge    s
``metadata_last_mirror_timestamp_seconds``            gauge    s
*provider* (:class:`tiered.providers.wrappers.ProviderMetrics`, recorded by ``MetricsProvider``)
---------------------------------------------------------------------------------------------------
``provider_rpc_latency``                              hist.    ms        path, file_type,
                                                                         operation, success
``provider_upload_bytes``                             hist.    bytes     path, file_type, operation
``provider_download_bytes``                           hist.    bytes     path, file_type, operation
``provider_requests_total`` (+)                       counter  requests  provider, operation
``provider_retries_total`` (+)                        counter  requests  provider, reason
``provider_errors_total`` (+)                         counter  calls     provider, operation
*quotas and the read queue* (+) (:mod:`tiered.providers.quota`, :mod:`~tiered.read.read_gate`)
---------------------------------------------------------------------------------------------------
``quota_wait_seconds_total`` (+)                      counter  s         direction
``read_rejected_total`` (+)                           counter  reads     port
*scrubber* (+) (:mod:`tiered.core.scrub`, run by ``tieredScrubIntervalMs``)
---------------------------------------------------------------------------------------------------
``scrub_anomalies`` (+)                               gauge              kind
*HTTP* (+) (:mod:`tiered.http.accounting`)
---------------------------------------------------------------------------------------------------
``http_requests_total``                               counter            method, route, status
``http_request_duration``                             hist.    ms        method, route
``http_rejected_total`` (+)                           counter            reason
*replay endpoint* (+) (:mod:`tiered.remoting`)
---------------------------------------------------------------------------------------------------
``remoting_requests_total``                           counter  requests  code, result
``remoting_pull_latency``                             hist.    ms
``remoting_prepared_pulls_total``                     counter  pulls     result
``remoting_connections``                              gauge    conns
``remoting_messages_served_total``                    counter  messages  tier
``remoting_pop_messages_total``                       counter  messages  event
``remoting_rejected_total``                           counter            reason
*access* (+) (:mod:`tiered.access`)
---------------------------------------------------------------------------------------------------
``access_denied_total``                               counter  requests  port, reason
``security_file_ok``                                  gauge    0/1       file
``security_reloads_total``                            counter  reloads   file, result
``tls_certificate_expiry_timestamp_seconds``          gauge    Unix s    file
====================================================  =======  ========  ==========================

The families with ``topic``/``queue_id`` or a queue's ``path`` are exported at the detail of
``tieredMetricsDetail`` (:func:`set_detail`): one series for the broker (those labels empty),
one per topic, or one per queue as upstream; :class:`QueueGauge` aggregates their gauges.

``dispatch_latency`` is in milliseconds (upstream declares seconds but records milliseconds; we keep
its values). ``file_type`` is ``commit_log``, ``consume_queue`` or ``index``. ``engine`` is
``numpy``, ``spark`` or ``external`` (a ``spark-submit`` job's result, counted when picked up; its
duration is not known here). ``expiry_failures_total`` counts the queues' segments (commitlog,
consumequeue); its ``index`` series stays 0: the key index counts a failed expiry as
``index_failures_total{stage="expire"}``. ``dispatch_behind_commitlog_files`` counts the
broker's commitlog files from the one holding the oldest message not yet offloaded to the newest
(0 when caught up), set after each dispatch round that moved messages and at least every 10 s
otherwise. ``expiry_behind_segments`` and
``expiry_behind_bytes`` are a queue's segments (not the key index's) past their reserve time
still in the tier after an expiry run: recorded ones not deleted yet and objects whose delete
failed (the orphan log); set at each run (never with ``tieredStoreDeleteFileEnable=false``).
``provider_errors_total`` counts failed provider calls by ``operation`` (as
``provider_rpc_latency``'s), not a ``size`` or ``delete`` of an absent object. ``stage`` is one of
:data:`INDEX_STAGES`. ``result`` is ``ok`` or ``failed``. ``route`` is the path template
(``/v1/topics/{topic}/queues/{queueId}/messages``), ``other`` for paths no route matches, so the
label stays bounded. ``code`` is the request code's upstream name (``PULL_MESSAGE``, ``OTHER``
for codes the endpoint does not know), ``result`` the response code's (``SUCCESS``,
``PULL_NOT_FOUND``, ...; ``ONEWAY`` when no response is sent); of ``remoting_prepared_pulls_total``
it is ``used`` or ``unused`` (:mod:`tiered.remoting.prepared`). ``tier`` is ``tiered`` or ``local``.
A ``topic`` a request names (``api_latency``, ``messages_out_total``,
``get_message_fallback_total``) is itself only when the tier or the broker's store holds it,
:data:`OTHER_LABEL` (``_other``) otherwise (:mod:`tiered.metrics.labels`).
``direction`` is ``upload`` (appends and puts under ``tieredUploadMaxBytesPerSecond``) or
``read`` (reads under ``tieredReadMaxBytesPerSecond``); ``port`` of ``read_rejected_total`` is
``http`` or ``remoting`` (cold reads refused past ``tieredReadMaxPending``).
``kind`` of ``scrub_anomalies`` is one of :data:`tiered.core.scrub_report.KINDS` (``missing``,
``size_mismatch``, ``orphan``, ``offset_gap``, ...); every kind is set at each scrub, 0 included.
``reason`` is ``too_large``, ``bad_length``, ``bad_header``, ``serialize_type``, ``not_json``,
``idle`` (a connection silent past the idle timeout, or stalled inside a frame) or
``too_many_connections``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from collections.abc import Iterable
from typing import TYPE_CHECKING
from typing import Final
from typing import ParamSpec
from typing import TypeVar
from typing import cast

from tiered.metrics.machinery import _BEFORE as _BEFORE  # (tests count its hooks)
from tiered.metrics.machinery import DETAILS
from tiered.metrics.machinery import PendingRegistry
from tiered.metrics.machinery import QueueGauge
from tiered.metrics.machinery import _children as _children  # (tests count the children)
from tiered.metrics.machinery import before_collect
from tiered.metrics.machinery import child
from tiered.metrics.machinery import counter as _counter
from tiered.metrics.machinery import detail
from tiered.metrics.machinery import discard
from tiered.metrics.machinery import discarded
from tiered.metrics.machinery import gauge as _gauge
from tiered.metrics.machinery import histogram as _histogram
from tiered.metrics.machinery import path_label
from tiered.metrics.machinery import queue_labels
from tiered.metrics.machinery import register
from tiered.metrics.machinery import set_detail
from tiered.metrics.machinery import topic_label

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = [
    "API_LATENCY",
    "DETAILS",
    "DISPATCH_BEHIND",
    "DISPATCH_BEHIND_BYTES",
    "DISPATCH_BEHIND_FILES",
    "DISPATCH_BYTES",
    "DISPATCH_ERRORS",
    "DISPATCH_GAP_MESSAGES",
    "DISPATCH_LATENCY",
    "DISPATCH_ROUNDS",
    "DISPATCH_STANDBY",
    "EXPIRED_SEGMENTS",
    "EXPIRY_BEHIND_BYTES",
    "EXPIRY_BEHIND_SEGMENTS",
    "EXPIRY_FAILURES",
    "GET_MESSAGE_FALLBACK",
    "HTTP_REJECTED",
    "HTTP_REQUESTS",
    "HTTP_REQUEST_DURATION",
    "INDEX_COMPACTION_DURATION",
    "INDEX_FAILURES",
    "INDEX_FILES_COMPACTED",
    "INDEX_FILES_SEALED",
    "INDEX_FILES_UPLOADED",
    "INDEX_FILES_WAITING",
    "INDEX_KEYS",
    "INDEX_STAGES",
    "MESSAGES_DISPATCH",
    "MESSAGES_OUT",
    "METADATA_LAST_MIRROR",
    "METADATA_LAST_PERSIST",
    "METADATA_MIRROR",
    "METADATA_PERSIST",
    "METADATA_WRITTEN",
    "OTHER_LABEL",
    "QUEUE_BEHIND",
    "QUEUE_BEHIND_BYTES",
    "QUEUE_EXPIRY_BEHIND",
    "QUEUE_EXPIRY_BEHIND_BYTES",
    "QUEUE_LATENCY",
    "QUEUE_RESERVE_TIME",
    "QUEUE_STORAGE_SIZE",
    "QUOTA_WAIT",
    "READ_AHEAD_CACHE_ACCESS",
    "READ_AHEAD_CACHE_BYTES",
    "READ_AHEAD_CACHE_COUNT",
    "READ_AHEAD_CACHE_HIT",
    "READ_CRC_FAILURES",
    "READ_ONLY",
    "READ_REJECTED",
    "REGISTRY",
    "REMOTING_CONNECTIONS",
    "REMOTING_MESSAGES_SERVED",
    "REMOTING_POP_MESSAGES",
    "REMOTING_PREPARED_PULLS",
    "REMOTING_PULL_LATENCY",
    "REMOTING_REJECTED",
    "REMOTING_REQUESTS",
    "SCRUB_ANOMALIES",
    "STORAGE_MESSAGE_RESERVE_TIME",
    "STORAGE_SIZE",
    "UPLOADS_PAUSED",
    "UPLOADS_PAUSED_SINCE",
    "QueueGauge",
    "before_collect",
    "child",
    "counts_index_failures",
    "detail",
    "discard",
    "discarded",
    "families",
    "forget_queue",
    "path_label",
    "queue_labels",
    "register",
    "set_detail",
    "topic_label",
]

P = ParamSpec("P")
R = TypeVar("R")

OTHER_LABEL: Final = "_other"
"""The one value a request-derived label (a topic a request names) takes for every name the
sidecar does not know (:class:`tiered.metrics.labels.KnownTopics`): labels stay bounded
whatever clients send."""

REGISTRY = cast("CollectorRegistry", PendingRegistry())
"""prometheus_client's default registry, where every family of this module is."""

_QUEUE = ["topic", "queue_id"]

DISPATCH_BEHIND = _gauge(
    "rocketmq_tiered_store_dispatch_behind",
    "Messages in the local store not yet offloaded (local max - tiered max)",
    [*_QUEUE, "file_type"],
)
DISPATCH_BEHIND_BYTES = _gauge(
    "rocketmq_tiered_store_dispatch_behind_bytes",
    "Bytes in the local store not yet offloaded (estimated from the units read when large)",
    _QUEUE,
)
DISPATCH_BEHIND_FILES = _gauge(
    "rocketmq_tiered_store_dispatch_behind_commitlog_files",
    "The broker's commitlog files from the one holding the oldest message not yet offloaded to "
    "the newest (0 when caught up)",
)
DISPATCH_LATENCY = _gauge(
    "rocketmq_tiered_store_dispatch_latency",
    "Age of the oldest message not yet offloaded, milliseconds (0 when caught up)",
    [*_QUEUE, "file_type"],
)
MESSAGES_DISPATCH = _counter(
    "rocketmq_tiered_store_messages_dispatch",
    "Messages offloaded",
    [*_QUEUE, "file_type"],
)
DISPATCH_BYTES = _counter(
    "rocketmq_tiered_store_dispatch_bytes",
    "Message bytes offloaded (flat commitlog bytes)",
    _QUEUE,
)
DISPATCH_ERRORS = _counter(
    "rocketmq_tiered_store_dispatch_errors",
    "Failed dispatch steps of a queue (retried from where they stopped)",
    _QUEUE,
)
DISPATCH_GAP_MESSAGES = _counter(
    "rocketmq_tiered_store_dispatch_gap_messages",
    "Messages the broker deleted before they were offloaded (never in the tier)",
    _QUEUE,
)
DISPATCH_ROUNDS = _counter(
    "rocketmq_tiered_store_dispatch_rounds",
    "Dispatch rounds run (one or two batches per ready queue each)",
)
DISPATCH_STANDBY = _gauge(
    "rocketmq_tiered_store_dispatch_standby",
    "1 when this sidecar stands by (its broker is a slave), 0 when it uploads",
)
UPLOADS_PAUSED = _gauge(
    "rocketmq_tiered_store_uploads_paused",
    "1 while uploads are paused (rmq-tiered pause; reads and expiry go on), 0 otherwise",
)
UPLOADS_PAUSED_SINCE = _gauge(
    "rocketmq_tiered_store_uploads_paused_since_timestamp_seconds",
    "When the uploads were paused, Unix seconds; 0 while they are not",
)
READ_ONLY = _gauge(
    "rocketmq_tiered_store_read_only",
    "1 when this sidecar never writes the tier (tieredStoreReadOnly=true), 0 otherwise",
)
EXPIRED_SEGMENTS = _counter(
    "rocketmq_tiered_store_expired_segments",
    "Tiered segments deleted by expiry",
    ["file_type"],
)
EXPIRY_FAILURES = _counter(
    "rocketmq_tiered_store_expiry_failures",
    "Failed expiries of a queue's segment, retried at the next run (the key index's are "
    'index_failures_total{stage="expire"})',
    ["file_type"],
    series=[("commit_log",), ("consume_queue",), ("index",)],  # every series from the start (0)
)
EXPIRY_BEHIND_SEGMENTS = _gauge(
    "rocketmq_tiered_store_expiry_behind_segments",
    "Segments past their reserve time still in the tier after the last expiry run (not deleted "
    "yet, or their delete failed)",
    [*_QUEUE, "file_type"],
)
EXPIRY_BEHIND_BYTES = _gauge(
    "rocketmq_tiered_store_expiry_behind_bytes",
    "Bytes of the segments of expiry_behind_segments",
    [*_QUEUE, "file_type"],
)
STORAGE_SIZE = _gauge(
    "rocketmq_storage_size",
    "Bytes in the tier per flat file (label topic holds the logical path broker/topic/queue)",
    ["topic", "file_type"],
)
STORAGE_MESSAGE_RESERVE_TIME = _gauge(
    "rocketmq_storage_message_reserve_time",
    "Age of the oldest message kept in the tier, milliseconds",
    _QUEUE,
)


def forget_queue(topic: str, queue_id: int, path: str, *, tier: bool = False) -> bool:
    """Drop a deleted queue from the dispatch gauges (with ``tier``, once its tier records are
    gone, from the storage gauges too); whether any held it."""
    gauges = [QUEUE_BEHIND, QUEUE_BEHIND_BYTES, QUEUE_LATENCY]
    if tier:
        gauges += [QUEUE_STORAGE_SIZE, QUEUE_RESERVE_TIME, QUEUE_EXPIRY_BEHIND]
        gauges += [QUEUE_EXPIRY_BEHIND_BYTES]
    held = [g.forget(topic, queue_id, path) for g in gauges]
    return any(held)


def _max(values: Iterable[float]) -> float:
    return max(values, default=0)


QUEUE_BEHIND = QueueGauge(DISPATCH_BEHIND, sum)
QUEUE_BEHIND_BYTES = QueueGauge(DISPATCH_BEHIND_BYTES, sum)
QUEUE_LATENCY = QueueGauge(DISPATCH_LATENCY, _max)
QUEUE_STORAGE_SIZE = QueueGauge(STORAGE_SIZE, sum)
QUEUE_RESERVE_TIME = QueueGauge(STORAGE_MESSAGE_RESERVE_TIME, _max)
QUEUE_EXPIRY_BEHIND = QueueGauge(EXPIRY_BEHIND_SEGMENTS, sum)
QUEUE_EXPIRY_BEHIND_BYTES = QueueGauge(EXPIRY_BEHIND_BYTES, sum)

# --- the read path (spec §13; the upstream quirks fixed: the cache count is entries, the cache
# bytes are bytes, access and hit are counted). ``group`` is not a label: the sidecar serves
# reads by offset, not consumer groups.

READ_LATENCY_BUCKETS_MS = (1, 3, 5, 7, 10, 100, 200, 400, 600, 800, 1000, 1500, 3000)

API_LATENCY = _histogram(
    "rocketmq_tiered_store_api_latency",
    "Latency of read API calls (get_message, get_offset_by_time, query_message), milliseconds",
    ["operation", "topic"],
    buckets=READ_LATENCY_BUCKETS_MS,
)
MESSAGES_OUT = _counter(
    "rocketmq_tiered_store_messages_out",
    "Messages returned from the tier with status FOUND",
    ["topic"],
)
GET_MESSAGE_FALLBACK = _counter(
    "rocketmq_tiered_store_get_message_fallback",
    "Reads routed to the tier but served by the broker's store (the tier had nothing or failed)",
    ["operation", "topic"],
)
READ_AHEAD_CACHE_COUNT = _gauge(
    "rocketmq_tiered_store_read_ahead_cache_messages",
    "Messages held in the read-ahead cache",
)
READ_AHEAD_CACHE_BYTES = _gauge(
    "rocketmq_tiered_store_read_ahead_cache_bytes",
    "Message bytes held in the read-ahead cache",
)
READ_AHEAD_CACHE_ACCESS = _counter(
    "rocketmq_tiered_store_read_ahead_cache_access",
    "Read-ahead cache lookups",
)
READ_AHEAD_CACHE_HIT = _counter(
    "rocketmq_tiered_store_read_ahead_cache_hit",
    "Read-ahead cache lookups that found the message",
)
READ_CRC_FAILURES = _counter(
    "rocketmq_tiered_store_read_crc_failures",
    "Messages read from the tier that failed their body CRC or header checks (never returned)",
    ["topic", "queue_id"],
)

# --- the key index (the sidecar's own) ------------------------------------------------------------

INDEX_STAGES: Final = ("put", "catch_up", "compact", "stage", "pickup", "upload", "expire", "start")
"""Values of ``index_failures_total{stage}``: putting a dispatched batch's keys, indexing from the
tier after a restart, compacting, staging for a ``spark-submit`` job, picking its result up,
uploading, expiring, starting the index service."""
COMPACTION_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)

INDEX_KEYS = _counter(
    "rocketmq_tiered_store_index_keys",
    "Keys put into the local index files (UNIQ_KEY and KEYS tokens; re-indexed ones again)",
)
INDEX_FILES_SEALED = _counter(
    "rocketmq_tiered_store_index_files_sealed",
    "Local index files sealed (full, sealed on request, or left unsealed by a restart)",
)
INDEX_FILES_COMPACTED = _counter(
    "rocketmq_tiered_store_index_files_compacted",
    "SEALED index files compacted, by engine (external: a spark-submit result picked up)",
    ["engine"],
)
INDEX_COMPACTION_DURATION = _histogram(
    "rocketmq_tiered_store_index_compaction_duration_seconds",
    "Time to compact one SEALED index file in the sidecar, seconds",
    ["engine"],
    buckets=COMPACTION_BUCKETS_S,
)
INDEX_FILES_UPLOADED = _counter(
    "rocketmq_tiered_store_index_files_uploaded",
    "Compacted index files uploaded as INDEX segments and recorded",
)
INDEX_FILES_WAITING = _gauge(
    "rocketmq_tiered_store_index_files_waiting",
    "SEALED local index files waiting for compaction and upload (staged ones included)",
)
INDEX_FAILURES = _counter(
    "rocketmq_tiered_store_index_failures",
    "Failed key index steps, by stage (each is retried later)",
    ["stage"],
    series=[(stage,) for stage in INDEX_STAGES],  # every stage's series from the start, for alerts
)


def counts_index_failures(stage: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate an index step: an exception it raises is counted in
    ``index_failures_total{stage}``, then propagates unchanged.

    Raises:
        ValueError: ``stage`` is not one of :data:`INDEX_STAGES`.
    """
    if stage not in INDEX_STAGES:
        raise ValueError(f"stage={stage!r} is not one of {', '.join(INDEX_STAGES)}")

    def decorate(func: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(func)
        def counted(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return func(*args, **kwargs)
            except Exception:
                child(INDEX_FAILURES, stage).inc()
                raise

        return counted

    return decorate


# --- tiered metadata (the sidecar's own) ----------------------------------------------------------

METADATA_PERSIST = _counter(
    "rocketmq_tiered_store_metadata_persist",
    "Local writes of tieredStoreMetadata.json (result=failed: the write raised, old file kept)",
    ["result"],
    series=[("ok",), ("failed",)],
)
METADATA_WRITTEN = _counter(
    "rocketmq_tiered_store_metadata_written_bytes",
    "Bytes written locally for the metadata (kind=snapshot: tieredStoreMetadata.json whole; "
    "kind=journal: changes appended to its journal)",
    ["kind"],
    series=[("snapshot",), ("journal",)],
)
METADATA_MIRROR = _counter(
    "rocketmq_tiered_store_metadata_mirror",
    "Puts of the metadata file to its backend mirror (result=failed: retried at the next persist)",
    ["result"],
    series=[("ok",), ("failed",)],
)
METADATA_LAST_PERSIST = _gauge(
    "rocketmq_tiered_store_metadata_last_persist_timestamp_seconds",
    "When the metadata file was last written locally, seconds since the epoch (0: not yet)",
)
METADATA_LAST_MIRROR = _gauge(
    "rocketmq_tiered_store_metadata_last_mirror_timestamp_seconds",
    "When the metadata mirror was last put to the backend, seconds since the epoch (0: not yet)",
)

# --- HTTP API (the sidecar's own; recorded by tiered.http.accounting) -----------------------------

HTTP_REQUESTS = _counter(
    "rocketmq_tiered_store_http_requests",
    "HTTP requests answered, by method, route template and status code",
    ["method", "route", "status"],
)
HTTP_REQUEST_DURATION = _histogram(
    "rocketmq_tiered_store_http_request_duration",
    "Time from request to the end of the response body, milliseconds",
    ["method", "route"],
    buckets=READ_LATENCY_BUCKETS_MS,
)
HTTP_REJECTED = _counter(
    "rocketmq_tiered_store_http_rejected",
    "HTTP connections closed at once, by reason",
    ["reason"],
)

# --- replay endpoint (the sidecar's own; recorded by tiered.remoting) ---------------------------

REMOTING_REQUESTS = _counter(
    "rocketmq_tiered_store_remoting_requests",
    "Remoting requests answered, by request code name and response code name",
    ["code", "result"],
)
REMOTING_PULL_LATENCY = _histogram(
    "rocketmq_tiered_store_remoting_pull_latency",
    "Time to read the messages of one pull (not the long-polling hold), milliseconds",
    buckets=READ_LATENCY_BUCKETS_MS,
)
REMOTING_PREPARED_PULLS = _counter(
    "rocketmq_tiered_store_remoting_prepared_pulls",
    "Pulls read ahead of their request while the consumer worked on the previous answer, by "
    "whether the request that came matched them (used) or not (unused: read again)",
    ["result"],
    series=[("used",), ("unused",)],
)
REMOTING_CONNECTIONS = _gauge(
    "rocketmq_tiered_store_remoting_connections",
    "Open client connections of the replay endpoint",
)
REMOTING_MESSAGES_SERVED = _counter(
    "rocketmq_tiered_store_remoting_messages_served",
    "Messages returned by pulls, by the tier that served them (tiered or local)",
    ["tier"],
)
REMOTING_POP_MESSAGES = _counter(
    "rocketmq_tiered_store_remoting_pop_messages",
    "POP consumption: messages delivered (first time), redelivered (an invisible time ran out), "
    "acked, and dead_lettered (redelivered past the group's retryMaxTimes, or given up by the "
    "consumer: CONSUMER_SEND_MSG_BACK; recorded, never written to the broker)",
    ["event"],
)
REMOTING_REJECTED = _counter(
    "rocketmq_tiered_store_remoting_rejected",
    "Connections closed or refused for bad input, by reason",
    ["reason"],
)


# --- quotas and the read queue (the sidecar's own) -----------------------------------------------

QUOTA_WAIT = _counter(
    "rocketmq_tiered_store_quota_wait_seconds",
    "Seconds backend calls waited for their bytes under tieredUploadMaxBytesPerSecond (upload) "
    "or tieredReadMaxBytesPerSecond (read), summed over the threads that waited",
    ["direction"],
    series=[("upload",), ("read",)],
)
READ_REJECTED = _counter(
    "rocketmq_tiered_store_read_rejected",
    "Cold reads refused at once because tieredReadMaxPending others were waiting for the "
    "backend (HTTP 503, remoting SYSTEM_BUSY), by port",
    ["port"],
    series=[("http",), ("remoting",)],
)


# --- the scrubber (the sidecar's own) ------------------------------------------------------------

SCRUB_ANOMALIES = _gauge(
    "rocketmq_tiered_store_scrub_anomalies",
    "Anomalies the last background scrub (tieredScrubIntervalMs) found in the tier, by kind "
    "(rmq-tiered scrub --json names their objects)",
    ["kind"],
)


# --- access control and TLS of both ports (recorded by tiered.access) ----------------------------

ACCESS_DENIED = _counter(
    "rocketmq_tiered_store_access_denied",
    "Requests refused, by port (http, remoting) and reason (no_credentials, bad_credentials, "
    "forbidden, throttled, tls_required)",
    ["port", "reason"],
)
SECURITY_FILE_OK = _gauge(
    "rocketmq_tiered_store_security_file_ok",
    "1 when the last (re)load of the accounts file (acl) or certificate (tls) succeeded; 0 while "
    "a changed file does not load and the last good one is still used",
    ["file"],
)
SECURITY_RELOADS = _counter(
    "rocketmq_tiered_store_security_reloads",
    "Reloads of a changed accounts file or certificate, by file (acl, tls) and result",
    ["file", "result"],
)
TLS_CERT_EXPIRY = _gauge(
    "rocketmq_tiered_store_tls_certificate_expiry_timestamp_seconds",
    "When the serving certificate expires (its notAfter), Unix time in seconds; only with a "
    "certificate configured (file=tls)",
    ["file"],
)


def families() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Every metric family the package registers -- this module's and the provider wrapper's
    (:class:`~tiered.providers.wrappers.ProviderMetrics`) -- by the name it is exposed under
    (counters with ``_total``): its type and label names."""
    from prometheus_client.metrics import MetricWrapperBase

    from tiered.providers.wrappers import ProviderMetrics

    register()
    provider = ProviderMetrics.default()
    found: list[MetricWrapperBase] = [
        m for m in globals().values() if isinstance(m, MetricWrapperBase)
    ]
    found += [provider.rpc_latency, provider.upload_bytes, provider.download_bytes]
    found += [provider.requests, provider.retries, provider.errors]
    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    for metric in found:
        (family,) = metric.describe()
        name = f"{family.name}_total" if family.type == "counter" else family.name
        out[name] = (family.type, tuple(metric._labelnames))  # no public accessor
    return out
