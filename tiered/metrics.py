"""The sidecar's Prometheus metrics: plain metric objects in prometheus_client's default registry.

Upstream names (spec §13) are kept where upstream has the metric; the sidecar's own additions are
marked below. Provider metrics (rpc latency, upload/download bytes, request counts) live in
:mod:`tiered.providers.wrappers`; read-path metrics may be added here by the access layer.

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
===================================================  =======  ========  ===========================

(+) = the sidecar's own. ``dispatch_latency`` is in milliseconds (upstream declares seconds but
records milliseconds; we keep its values). ``file_type`` is ``commit_log`` or ``consume_queue``.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, Counter, Gauge

__all__ = [
    "DISPATCH_BEHIND",
    "DISPATCH_BEHIND_BYTES",
    "DISPATCH_BYTES",
    "DISPATCH_ERRORS",
    "DISPATCH_GAP_MESSAGES",
    "DISPATCH_LATENCY",
    "DISPATCH_ROUNDS",
    "DISPATCH_STANDBY",
    "EXPIRED_SEGMENTS",
    "MESSAGES_DISPATCH",
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
