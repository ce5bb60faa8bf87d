"""Message properties as a Java 5.x client and a 5.3.3 broker write them (for the generator).

A properties string is ``MessageDecoder.messageProperties2String`` of a ``java.util.HashMap``, so
its order is the map's iteration order: by bucket (``(h ^ h >>> 16) & (capacity - 1)`` of
``String.hashCode``), then by insertion within a bucket. The client's map is ``new HashMap<>()``
(16 buckets); the broker decodes that string into ``new HashMap<>(128)``
(``string2messageProperties``), its send hook adds ``MSG_REGION`` and ``TRACE_ON``, the send
processor ``CLUSTER``, and it writes the map again. A delayed message gets ``REAL_TOPIC`` and
``REAL_QID`` on top (``HookUtils.transformDelayLevelMessage``), a transactional half message
``__transactionId__``, ``REAL_TOPIC``, ``REAL_QID`` (``TransactionalMessageBridge``); re-puts
(``ScheduleMessageService.messageTimeUp``, ``EndTransactionProcessor``) copy the stored string as
is, ``DELAY``, ``REAL_*`` and ``TRAN_MSG`` included. A batch's inner message keeps the client's
string and the broker appends the batch's own (so ``UNIQ_KEY`` appears twice; the later one, the
batch's, is what ``string2messageProperties`` keeps and the broker indexes).

The facts were read from a store a real 5.3.3 broker wrote for the Java client. Not modelled:
a bucket holding 8 or more keys (a tree bin iterates differently).
"""

from __future__ import annotations

import calendar
import datetime as dt
import struct
from collections.abc import Iterable
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from tiered.broker.javautil import java_string_hash
from tiered.broker.verify import DEFAULT_DELAY_LEVELS_MS

Props = list[tuple[str, str]]

CLUSTER: Final = "DefaultCluster"
REGION: Final = "DefaultRegion"
SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_GROUP: Final = "CID_RMQ_SYS_TRANS"
REMOVE_TAG: Final = "d"  # TransactionalMessageUtil.REMOVE_TAG, the op messages' TAGS
OP_MSG_MAX_SIZE: Final = 4096  # transactionOpMsgMaxSize
OP_BATCH_INTERVAL_MS: Final = 3000  # transactionOpBatchInterval
COMPRESS_OVER: Final = 4096  # DefaultMQProducer.compressMsgBodyOverHowmuch (>=)
COMPRESS_LEVEL: Final = 5  # DefaultMQProducer.compressLevel (java.util.zip, byte-equal to zlib)
DELAY_LEVELS_MS: Final = DEFAULT_DELAY_LEVELS_MS  # messageDelayLevel's default, level 1 first


def hash_order(keys: Iterable[str], capacity: int = 16) -> list[str]:
    """The iteration order of ``new HashMap<>(capacity)`` after putting ``keys`` in this order.

    A key put again keeps its first place; the table doubles past 3/4 full, as HashMap does.
    """
    unique = list(dict.fromkeys(keys))
    size = 1
    while size < capacity:
        size <<= 1
    while len(unique) > size * 3 // 4:
        size <<= 1

    def bucket(key: str) -> int:
        h = java_string_hash(key) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (size - 1)

    return sorted(unique, key=bucket)  # stable: insertion order within a bucket


def ordered(items: Iterable[tuple[str, str]], capacity: int) -> Props:
    """``items`` put into ``new HashMap<>(capacity)`` (a later value replaces, in place), in the
    map's iteration order."""
    table = dict(items)  # a later value replaces, the first place stays
    return [(k, table[k]) for k in hash_order(table, capacity)]


def encode(props: Sequence[tuple[str, str]]) -> bytes:
    """``name\\x01value\\x02`` per property, in the given order, UTF-8."""
    return "".join(f"{k}\x01{v}\x02" for k, v in props).encode("utf-8")


def client_props(
    *,
    uniq_key: str,
    tags: str = "",
    keys: Sequence[str] = (),
    user: Sequence[tuple[str, str]] = (),
    delay_level: int = 0,
    producer_group: str = "",
) -> Props:
    """The properties a Java client sends: ``Message(topic, tags, keys, body)`` puts TAGS, KEYS,
    WAIT; then the user's properties, DELAY, for a transaction TRAN_MSG and PGROUP, and UNIQ_KEY
    at send time (``MessageClientIDSetter.setUniqID``)."""
    items: Props = []
    if tags:
        items.append(("TAGS", tags))
    if keys:
        items.append(("KEYS", " ".join(keys)))
    items.append(("WAIT", "true"))
    items += user
    if delay_level:
        items.append(("DELAY", str(delay_level)))
    if producer_group:
        items += [("TRAN_MSG", "true"), ("PGROUP", producer_group)]
    items.append(("UNIQ_KEY", uniq_key))
    return ordered(items, 16)


def broker_props(client: Sequence[tuple[str, str]], *extra: tuple[str, str]) -> Props:
    """What the broker stores for a client's properties: its hook's MSG_REGION and TRACE_ON, the
    processor's CLUSTER, then ``extra`` (REAL_TOPIC/REAL_QID of a delayed message, or a half
    message's __transactionId__, REAL_TOPIC, REAL_QID), in ``HashMap(128)`` order."""
    added = [("MSG_REGION", REGION), ("TRACE_ON", "true"), ("CLUSTER", CLUSTER)]
    return ordered([*client, *added, *extra], 128)


def delayed_props(client: Sequence[tuple[str, str]], real_topic: str, real_qid: int) -> Props:
    """A delayed message as stored in ``SCHEDULE_TOPIC_XXXX`` and, unchanged, when re-put."""
    return broker_props(client, ("REAL_TOPIC", real_topic), ("REAL_QID", str(real_qid)))


def half_props(
    client: Sequence[tuple[str, str]], uniq_key: str, real_topic: str, real_qid: int
) -> Props:
    """A transactional half message (and, unchanged, its committed copy)."""
    return broker_props(
        client,
        ("__transactionId__", uniq_key),
        ("REAL_TOPIC", real_topic),
        ("REAL_QID", str(real_qid)),
    )


def batch_props(uniq_key: str) -> Props:
    """The properties a broker appends to each inner message of a batch (``MessageBatch`` gets
    WAIT from its first message and a UNIQ_KEY of its own)."""
    return broker_props(ordered([("WAIT", "true"), ("UNIQ_KEY", uniq_key)], 16))


def op_props() -> Props:
    """An op message's: ``new Message(opTopic, "d", body)`` written by the broker (its UNIQ_KEY
    is set after the string was made, so it is not stored)."""
    return ordered([("TAGS", REMOVE_TAG), ("WAIT", "true")], 16)


def month_start_ms(epoch_ms: int) -> int:
    """Midnight of the first day of ``epoch_ms``'s month, UTC (the generator's JVM zone)."""
    when = dt.datetime.fromtimestamp(epoch_ms / 1000, dt.UTC)
    return calendar.timegm((when.year, when.month, 1, 0, 0, 0)) * 1000


@dataclass(frozen=True, slots=True)
class ClientId:
    """The fixed part of a client's message ids: IP (4 or 16 bytes), PID, class loader hash."""

    ip: bytes
    pid: int
    classloader_hash: int

    def uniq_key(self, created_ms: int, counter: int) -> str:
        """``MessageClientIDSetter.createUniqID``: the fixed part, the ms since the month began
        (wrapping as a Java int does past 24.8 days) and a 16-bit counter, uppercase hex."""
        diff = (created_ms - month_start_ms(created_ms)) & 0xFFFFFFFF
        tail = struct.pack(
            ">HIIH", self.pid & 0xFFFF, self.classloader_hash, diff, counter & 0xFFFF
        )
        return (self.ip + tail).hex().upper()
