"""The sidecar's Prometheus metrics: plain metric objects in prometheus_client's default registry.

Upstream names (spec §13) are kept where upstream has the metric; the sidecar's own additions are
marked below. Provider metrics (rpc latency, upload/download bytes, request counts) live in
:mod:`tiered.providers.wrappers`; the read-path metrics are recorded by
:class:`~tiered.core.store.TieredMessageStore`.

===================================================  =======  ========  ===========================
name (``rocketmq_tiered_store_`` prefix unless full)  type     unit      labels
===================================================  =======  ========  ===========================
``dispatch_behind``                                  gauge    messages  topic, queue_id, file_type
``dispatch_behind_bytes`` (+)                        gauge    bytes     topic, queue_id
``dispatch_latency``                                 gauge    ms        topic, queue_id, file_type
``messages_dispatch_total``                          counter  messages  topic, queue_id, file_type
``dispatch_bytes_total`` (+)                         counter  bytes     topic, queue_id
``dispatch_errors_total`` (+)                        counter            topic, queue_id
``dispatch_gap_messages_total`` (+)                  counter  messages  topic, queue_id
``dispatch_rounds_total`` (+)                        counter
``dispatch_standby`` (+)                             gauge              (1 = not uploading)
``expired_segments_total`` (+)                       counter            file_type
``rocketmq_storage_size``                            gauge    bytes     topic (= path), file_type
``rocketmq_storage_message_reserve_time``            gauge    ms        topic, queue_id
``api_latency``                                      hist.    ms        operation, topic
``messages_out_total``                               counter  messages  topic
``get_message_fallback_total``                       counter            operation, topic
``read_ahead_cache_count``                           gauge    messages
``read_ahead_cache_bytes``                           gauge    bytes
``read_ahead_cache_access_total``                    counter
``read_ahead_cache_hit_total``                       counter
``read_crc_failures_total`` (+)                      counter  messages  topic, queue_id
===================================================  =======  ========  ===========================

(+) = the sidecar's own. ``dispatch_latency`` is in milliseconds (upstream declares seconds but
records milliseconds; we keep its values). ``file_type`` is ``commit_log`` or ``consume_queue``.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, Counter, Gauge, Histogram

__all__ = [
    "API_LATENCY",
    "DISPATCH_BEHIND",
    "DISPATCH_BEHIND_BYTES",
    "DISPATCH_BYTES",
    "DISPATCH_ERRORS",
    "DISPATCH_GAP_MESSAGES",
    "DISPATCH_LATENCY",
    "DISPATCH_ROUNDS",
    "DISPATCH_STANDBY",
    "EXPIRED_SEGMENTS",
    "GET_MESSAGE_FALLBACK",
    "MESSAGES_DISPATCH",
    "MESSAGES_OUT",
    "READ_AHEAD_CACHE_ACCESS",
    "READ_AHEAD_CACHE_BYTES",
    "READ_AHEAD_CACHE_COUNT",
    "READ_AHEAD_CACHE_HIT",
    "READ_CRC_FAILURES",
    "REGISTRY",
    "STORAGE_MESSAGE_RESERVE_TIME",
    "STORAGE_SIZE",
]

_QUEUE = ["topic", "queue_id"]

DISPATCH_BEHIND = Gauge(
    "rocketmq_tiered_store_dispatch_behind",
    "Messages in the local store not yet offloaded (local max - tiered max)",
    [*_QUEUE, "file_type"],
    registry=REGISTRY,
)
DISPATCH_BEHIND_BYTES = Gauge(
    "rocketmq_tiered_store_dispatch_behind_bytes",
    "Bytes in the local store not yet offloaded (estimated from the units read when large)",
    _QUEUE,
    registry=REGISTRY,
)
DISPATCH_LATENCY = Gauge(
    "rocketmq_tiered_store_dispatch_latency",
    "Age of the oldest message not yet offloaded, milliseconds (0 when caught up)",
    [*_QUEUE, "file_type"],
    registry=REGISTRY,
)
MESSAGES_DISPATCH = Counter(
    "rocketmq_tiered_store_messages_dispatch",
    "Messages offloaded",
    [*_QUEUE, "file_type"],
    registry=REGISTRY,
)
DISPATCH_BYTES = Counter(
    "rocketmq_tiered_store_dispatch_bytes",
    "Message bytes offloaded (flat commitlog bytes)",
    _QUEUE,
    registry=REGISTRY,
)
DISPATCH_ERRORS = Counter(
    "rocketmq_tiered_store_dispatch_errors",
    "Failed dispatch steps of a queue (retried from where they stopped)",
    _QUEUE,
    registry=REGISTRY,
)
DISPATCH_GAP_MESSAGES = Counter(
    "rocketmq_tiered_store_dispatch_gap_messages",
    "Messages the broker deleted before they were offloaded (never in the tier)",
    _QUEUE,
    registry=REGISTRY,
)
DISPATCH_ROUNDS = Counter(
    "rocketmq_tiered_store_dispatch_rounds",
    "Dispatch rounds run (one batch per ready queue each)",
    registry=REGISTRY,
)
DISPATCH_STANDBY = Gauge(
    "rocketmq_tiered_store_dispatch_standby",
    "1 when this sidecar stands by (its broker is a slave), 0 when it uploads",
    registry=REGISTRY,
)
EXPIRED_SEGMENTS = Counter(
    "rocketmq_tiered_store_expired_segments",
    "Tiered segments deleted by expiry",
    ["file_type"],
    registry=REGISTRY,
)
STORAGE_SIZE = Gauge(
    "rocketmq_storage_size",
    "Bytes in the tier per flat file (label topic holds the logical path broker/topic/queue)",
    ["topic", "file_type"],
    registry=REGISTRY,
)
STORAGE_MESSAGE_RESERVE_TIME = Gauge(
    "rocketmq_storage_message_reserve_time",
    "Age of the oldest message kept in the tier, milliseconds",
    _QUEUE,
    registry=REGISTRY,
)

# --- the read path (spec §13; the upstream quirks fixed: the cache count is entries, the cache
# bytes are bytes, access and hit are counted). ``group`` is not a label: the sidecar serves
# reads by offset, not consumer groups.

READ_LATENCY_BUCKETS_MS = (1, 3, 5, 7, 10, 100, 200, 400, 600, 800, 1000, 1500, 3000)

API_LATENCY = Histogram(
    "rocketmq_tiered_store_api_latency",
    "Latency of read API calls (get_message, get_offset_by_time, ...), milliseconds",
    ["operation", "topic"],
    buckets=READ_LATENCY_BUCKETS_MS,
    registry=REGISTRY,
)
MESSAGES_OUT = Counter(
    "rocketmq_tiered_store_messages_out",
    "Messages returned from the tier with status FOUND",
    ["topic"],
    registry=REGISTRY,
)
GET_MESSAGE_FALLBACK = Counter(
    "rocketmq_tiered_store_get_message_fallback",
    "Reads routed to the tier but served by the broker's store (the tier had nothing or failed)",
    ["operation", "topic"],
    registry=REGISTRY,
)
READ_AHEAD_CACHE_COUNT = Gauge(
    "rocketmq_tiered_store_read_ahead_cache_count",
    "Messages held in the read-ahead cache",
    registry=REGISTRY,
)
READ_AHEAD_CACHE_BYTES = Gauge(
    "rocketmq_tiered_store_read_ahead_cache_bytes",
    "Message bytes held in the read-ahead cache",
    registry=REGISTRY,
)
READ_AHEAD_CACHE_ACCESS = Counter(
    "rocketmq_tiered_store_read_ahead_cache_access",
    "Read-ahead cache lookups",
    registry=REGISTRY,
)
READ_AHEAD_CACHE_HIT = Counter(
    "rocketmq_tiered_store_read_ahead_cache_hit",
    "Read-ahead cache lookups that found the message",
    registry=REGISTRY,
)
READ_CRC_FAILURES = Counter(
    "rocketmq_tiered_store_read_crc_failures",
    "Messages read from the tier that failed their body CRC or header checks (never returned)",
    ["topic", "queue_id"],
    registry=REGISTRY,
)
