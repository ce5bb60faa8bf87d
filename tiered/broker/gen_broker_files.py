"""The files beside the commitlog a 5.3.3 broker leaves after a clean shutdown (``broker_files``).

``config/*.json`` and their ``.bak`` twins (``MixAll.string2File`` copies the previous content to
``X.bak`` before writing ``X``; a broker that persisted twice without a change leaves two equal
files), ``config/transactionMetrics`` (compact JSON), ``compaction/position-checkpoint``,
``abort.bak`` (empty: ``createTempFile`` makes an empty ``abort`` and ``string2File`` backs it up
before writing the PID; a clean shutdown deletes ``abort`` only). Maps are written in the
iteration order of the broker's ``ConcurrentHashMap``s: topics and groups ``(1024)``, the
consumer offset table as fastjson rebuilds it on load ``(16)``. Shapes and values were read from a
store a real 5.3.3 broker (default ``broker.conf``, cluster ``DefaultCluster``, broker
``broker-a``) wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any
from typing import Final

from tiered.broker import java_props as jp
from tiered.broker.fastjson import dumps_fastjson

BROKER_NAME: Final = "broker-a"
# (name, queues, perm) a 5.3.3 broker creates at start (TopicConfigManager), in no order
SYSTEM_TOPICS: Final = (
    (jp.SCHEDULE_TOPIC, 18, 6),
    ("SELF_TEST_TOPIC", 1, 6),
    (jp.CLUSTER, 16, 7),
    (f"{jp.CLUSTER}_REPLY_TOPIC", 1, 6),
    (f"rmq_sys_REVIVE_LOG_{jp.CLUSTER}", 8, 6),
    (f"rmq_sys_SYNC_BROKER_MEMBER_{BROKER_NAME}", 1, 1),
    (BROKER_NAME, 1, 7),
    ("TBW102", 4, 7),
    ("BenchmarkTest", 1024, 6),
    ("OFFSET_MOVED_EVENT", 1, 6),
)
TRANSACTION_TOPICS: Final = ((jp.HALF_TOPIC, 1, 6), (jp.OP_TOPIC, 1, 6))
SYSTEM_GROUPS: Final = (
    "SELF_TEST_C_GROUP",
    "CID_ONSAPI_OWNER",
    "CID_ONSAPI_PERMISSION",
    jp.TRANS_CHECK_GROUP,
    "TOOLS_CONSUMER",
    "CID_ONS-HTTP-PROXY",
    "FILTERSRV_CONSUMER",
    "CID_ONSAPI_PULL",
)
_CHM_1024: Final = 2048  # table size of new ConcurrentHashMap<>(1024)


def data_version(counter: int, timestamp: int) -> dict[str, int]:
    """``DataVersion`` as fastjson writes it."""
    return {"counter": counter, "stateVersion": 0, "timestamp": timestamp}


def topic_config(name: str, queues: int, perm: int = 6) -> dict[str, Any]:
    """One ``topicConfigTable`` entry, properties alphabetical."""
    return {
        "attributes": {},
        "order": False,
        "perm": perm,
        "readQueueNums": queues,
        "topicFilterType": "SINGLE_TAG",
        "topicName": name,
        "topicSysFlag": 0,
        "writeQueueNums": queues,
    }


def group_config(name: str) -> dict[str, Any]:
    """One ``subscriptionGroupTable`` entry of a default group (null properties are omitted)."""
    return {
        "attributes": {},
        "brokerId": 0,
        "consumeBroadcastEnable": True,
        "consumeEnable": True,
        "consumeFromMinEnable": True,
        "consumeMessageOrderly": False,
        "consumeTimeoutMinute": 15,
        "groupName": name,
        "groupRetryPolicy": {"type": "CUSTOMIZED"},
        "groupSysFlag": 0,
        "notifyConsumerIdsChangedEnable": True,
        "retryMaxTimes": 16,
        "retryQueueNums": 1,
        "whichBrokerWhenConsumeSlowly": 1,
    }


def _by_hash(table: Mapping[str, Any], capacity: int) -> dict[str, Any]:
    return {k: table[k] for k in jp.hash_order(table, capacity)}


def topics_json(
    user_topics: Mapping[str, dict[str, Any]], *, transactions: bool, counter: int, ms: int
) -> str:
    """``topics.json``: the broker's own topics, the transaction topics once used, the users'."""
    table = {name: topic_config(name, q, perm) for name, q, perm in SYSTEM_TOPICS}
    if transactions:
        table |= {name: topic_config(name, q, perm) for name, q, perm in TRANSACTION_TOPICS}
    table |= user_topics
    return dumps_fastjson(
        {"dataVersion": data_version(counter, ms), "topicConfigTable": _by_hash(table, _CHM_1024)}
    )


def subscription_group_json(ms: int) -> str:
    """``subscriptionGroup.json`` with the default groups only."""
    table = {g: group_config(g) for g in SYSTEM_GROUPS}
    return dumps_fastjson(
        {
            "dataVersion": data_version(0, ms),
            "forbiddenTable": {},
            "subscriptionGroupTable": _by_hash(table, _CHM_1024),
        }
    )


def consumer_offset_json(offsets: Mapping[tuple[str, str], Mapping[int, int]], ms: int) -> str:
    """``consumerOffset.json``: ``offsetTable`` keyed ``topic@group`` and the derived
    ``groupTopicMap`` (a fastjson-serialised getter: ``HashMap(128)`` of ``HashSet(8)``)."""
    table = {f"{t}@{g}": dict(sorted(q.items())) for (t, g), q in offsets.items()}
    groups: dict[str, list[str]] = {}
    for topic, group in offsets:
        groups.setdefault(group, []).append(topic)
    group_map = {g: jp.hash_order(groups[g], 8) for g in jp.hash_order(groups, 128)}
    return dumps_fastjson(
        {
            "dataVersion": data_version(0, ms),
            "groupTopicMap": group_map,
            "offsetTable": _by_hash(table, 16),
        }
    )


def delay_offset_json(offsets: Mapping[int, int], ms: int) -> str:
    """``delayOffset.json``: ``offsetTable = {delayLevel: next offset to deliver}``."""
    return dumps_fastjson(
        {"dataVersion": data_version(0, ms), "offsetTable": dict(sorted(offsets.items()))}
    )


def transaction_metrics(counts: Mapping[str, int], last_ms: int, boot_ms: int) -> str:
    """``config/transactionMetrics`` (compact): per real topic, transactions not yet ended (0
    here: all ended) and when the count last moved; ``counter`` moves on every +1 and -1."""
    table = {t: {"count": 0, "timeStamp": last_ms} for t in counts}
    updates = 2 * sum(counts.values())
    return dumps_fastjson(
        {
            "dataVersion": data_version(updates, last_ms if updates else boot_ms),
            "transactionCount": _by_hash(table, _CHM_1024),
        },
        pretty=False,
    )


def _write_twice(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.with_name(path.name + ".bak").write_text(text, encoding="utf-8")


def write_broker_files(
    root: Path,
    *,
    topics_text: str,
    next_offsets: Mapping[tuple[str, int], int],
    transactions: Mapping[str, int],
    boot_ms: int,
    last_ms: int,
) -> None:
    """Write every file of the set under ``root`` (``topics_text`` is ``topics.json``);
    ``next_offsets`` are the queues' end offsets (the system ones give the delay and transaction
    progress, all delivered and checked), ``transactions`` the count per real topic."""
    cfg = root / "config"
    _write_twice(cfg / "topics.json", topics_text)
    _write_twice(cfg / "subscriptionGroup.json", subscription_group_json(boot_ms))
    checked = {
        (t, jp.TRANS_CHECK_GROUP): {q: off}
        for (t, q), off in next_offsets.items()
        if t in (jp.HALF_TOPIC, jp.OP_TOPIC)
    }
    _write_twice(cfg / "consumerOffset.json", consumer_offset_json(checked, boot_ms))
    delays = {q + 1: off for (t, q), off in next_offsets.items() if t == jp.SCHEDULE_TOPIC}
    _write_twice(cfg / "delayOffset.json", delay_offset_json(delays, boot_ms))
    _write_twice(cfg / "consumerFilter.json", dumps_fastjson({"filterDataByTopic": {}}))
    _write_twice(cfg / "consumerOrderInfo.json", dumps_fastjson({"table": {}}))
    _write_twice(cfg / "transactionMetrics", transaction_metrics(transactions, last_ms, boot_ms))
    _write_twice(
        root / "compaction" / "position-checkpoint",
        dumps_fastjson({"empty": True, "queueOffsetMap": {}}),
    )
    (root / "abort.bak").write_bytes(b"")
