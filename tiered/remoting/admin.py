"""The read-only admin requests ``mqadmin`` sends, answered as a broker and its name server would.

Each answer is upstream's body class as fastjson writes it (:mod:`.body`), with the facts the
sidecar has: the queues and offsets both tiers hold, store times read from the messages, the
replay groups' committed offsets and the clients that sent heartbeats. Counters the sidecar does
not keep (put/get totals and rates, thread-pool queues, timer-wheel lag) are a plain ``0``, as a
broker that has served nothing would report them. Each handler names the ``mqadmin`` commands
(RocketMQ 5.3.3 ``tools``) that send its request.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tiered.broker import message as msgcodec
from tiered.config import TieredConfig
from tiered.errors import BrokerStoreError
from tiered.metadata import HOUR_MS
from tiered.read.fetcher import GetStatus
from tiered.read.message_store import TieredMessageStore

from .body import ObjectKeyMap
from .body import dumps
from .body import message_queue
from .codes import PERM_READ
from .codes import RETRY_GROUP_TOPIC_PREFIX
from .codes import RequestCode
from .codes import ResponseCode
from .fields import field
from .frame import Command
from .groups import Clients
from .groups import ReplayOffsets
from .naming import Naming

VERSION_DESC = "V5_3_3"
VERSION = 479
"""``MQVersion.Version.V5_3_3.ordinal()``: the protocol version the endpoint speaks."""
_HEAD_BYTES = 96  # the store timestamp, even behind an IPv6 born host

_ZERO_RATES = "0.0 0.0 0.0"  # StoreStatsService's 10 s, 1 min and 10 min windows
_NOT_KEPT: dict[str, str] = {
    **{
        f"msg{kind}Total{when}": "0"
        for kind in ("Put", "Get")
        for when in ("YesterdayMorning", "TodayMorning", "TodayNow")
    },
    **dict.fromkeys(
        ("putTps", "getFoundTps", "getMissTps", "getTotalTps", "getTransferredTps"), _ZERO_RATES
    ),
    **{
        f"{pool}ThreadPoolQueue{what}": "0"
        for pool in ("send", "pull", "litePull", "query", "ack")
        for what in ("Size", "Capacity", "HeadWaitTimeMills")
    },
    "putMessageTimesTotal": "0",
    "putMessageFailedTimes": "0",
    "putMessageSizeTotal": "0",
    "putMessageEntireTimeMax": "0",
    "getMessageEntireTimeMax": "0",
    "putLatency99": "0.00",
    "putLatency999": "0.00",
    "dispatchMaxBuffer": "0",
    "dispatchBehindBytes": "0",
    "pageCacheLockTimeMills": "0",
    "startAcceptSendRequestTimeStamp": "0",
    "remainHowManyDataToFlush": "0 B",
    "timerReadBehind": "0",
    "timerOffsetBehind": "0",
    "timerCongestNum": "0",
    "timerEnqueueTps": "0.0",
    "timerDequeueTps": "0.0",
    "EndTransactionQueueSize": "0",
    "EndTransactionThreadPoolQueueCapacity": "0",
}
"""``GET_BROKER_RUNTIME_INFO`` keys of counters the sidecar does not keep (it takes no writes and
runs no thread pools, schedule or timer services)."""


class Admin:
    """Answers the admin requests (thread-safe: it only reads)."""

    def __init__(
        self,
        cfg: TieredConfig,
        store: TieredMessageStore,
        naming: Naming,
        clients: Clients,
        offsets: ReplayOffsets,
    ) -> None:
        self.cfg = cfg
        self.store = store
        self.naming = naming
        self.clients = clients
        self.offsets = offsets
        self.started_ms = int(time.time() * 1000)

    def handlers(self) -> dict[int, Callable[[Command], Command]]:
        """Request code -> handler, for :class:`~.handlers.Replay`."""
        return {
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.create_topic,
            RequestCode.GET_BROKER_RUNTIME_INFO: self.runtime_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.topic_list,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.topics_by_cluster,
            RequestCode.GET_TOPIC_STATS_INFO: self.topic_stats,
            RequestCode.GET_TOPIC_CONFIG: self.topic_config,
            RequestCode.GET_CONSUME_STATS: self.consume_stats,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.connections,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self.consumed_by,
        }

    # --- topics -----------------------------------------------------------------------------------

    def create_topic(self, request: Command) -> Command:
        """``UPDATE_AND_CREATE_TOPIC`` (a RocketMQ Proxy creating its heartbeat-sync topic at
        start, ``mqadmin updateTopic``): SUCCESS for a ``tieredRemotingProxySyncTopics`` name
        (routed already, empty and read-only); any other is refused (no topic is created)."""
        topic = field(request.ext_fields, "topic")
        if topic in self.naming.sync_topics:
            return request.response(ResponseCode.SUCCESS)
        return request.response(
            ResponseCode.NO_PERMISSION,
            f"UPDATE_AND_CREATE_TOPIC of {topic} refused: this is a read-only replay endpoint "
            "(rocketmq-tiered) that creates no topics; create topics on the broker. A RocketMQ "
            "Proxy creating its heartbeat-sync topic (its heartbeatSyncerTopicName) at start: "
            f"add {topic} to the sidecar's tieredRemotingProxySyncTopics (now "
            f"{','.join(sorted(self.naming.sync_topics)) or 'empty'}), which routes it as an "
            "empty read-only topic",
        )

    # --- broker runtime ---------------------------------------------------------------------------

    def runtime_info(self, request: Command) -> Command:
        """``KVTable`` of ``AdminBrokerProcessor.prepareRuntimeInfo``'s keys, for
        ``clusterList``: it reads ``brokerVersionDesc``, ``putTps``, ``getTransferredTps``, the
        thread-pool queue keys, ``pageCacheLockTimeMills``, ``earliestMessageTimeStamp``,
        ``commitLogDiskRatio``, ``timer*`` and ``brokerActive`` (with ``-m`` the
        ``msgPut/GetTotal*`` counters)."""
        local = self.store.local
        local.refresh()
        now = int(time.time() * 1000)
        table = dict(_NOT_KEPT)
        table.update(
            {
                "brokerVersionDesc": VERSION_DESC,
                "brokerVersion": str(VERSION),
                # upstream's "acting master" test: the schedule and transaction-check services
                # run (the endpoint runs neither)
                "brokerActive": "false",
                "bootTimestamp": str(self.started_ms),
                "runtime": _runtime(now - self.started_ms),
                "earliestMessageTimeStamp": str(self.earliest_time()),
                "commitLogMinOffset": str(local.commitlog.min_offset),
                "commitLogMaxOffset": str(self.max_physical_offset()),
            }
        )
        table.update(self._disk())
        return request.response(ResponseCode.SUCCESS, body=dumps({"table": table}))

    def _disk(self) -> dict[str, str]:
        cfg = self.cfg
        out: dict[str, str] = {}
        ratios = []
        for path in cfg.commitlog_dirs:
            ratio = _used_ratio(path)
            out[f"commitLogDiskRatio_{path}"] = str(ratio)
            ratios.append(ratio)
        out["commitLogDiskRatio"] = str(min(ratios, default=-1.0))
        out["consumeQueueDiskRatio"] = str(_used_ratio(cfg.consume_queue_dir))
        try:
            st = os.statvfs(cfg.store_path_root_dir)
        except OSError:
            return out
        total, free = st.f_blocks * st.f_frsize, st.f_bfree * st.f_frsize
        out["commitLogDirCapacity"] = f"Total : {_bytes(total)}, Free : {_bytes(free)}."
        return out

    def earliest_time(self) -> int:
        """Store time of the oldest message served: the broker's first commitlog message or the
        oldest the tier keeps of a topic it serves; -1 when there is none."""
        stamps = [
            flat.min_timestamp()
            for flat in self.store.flat_store.files()
            if flat.initialized and self.store.serves(flat.topic)
        ]
        commitlog = self.store.local.commitlog
        if commitlog.min_offset >= 0:
            try:
                head = commitlog.read(commitlog.min_offset, _HEAD_BYTES)
                stamps.append(msgcodec.store_timestamp_of(head))
            except (BrokerStoreError, OSError, ValueError):
                pass  # the broker deleted the file meanwhile: the tier's answer stands
        return min((s for s in stamps if s >= 0), default=-1)

    def max_physical_offset(self) -> int:
        """The end of the newest message the broker's consumequeues point at (0 when none)."""
        local = self.store.local
        best = 0
        try:
            queues = local.queues()
        except BrokerStoreError:
            return best
        for topic, queue_id in queues:
            top = local.max_offset(topic, queue_id)
            if top <= 0:
                continue
            try:
                units = local.read_units(topic, queue_id, top - 1, 1)
            except (BrokerStoreError, OSError):  # the broker deleted the file meanwhile
                continue
            if len(units):
                best = max(best, int(units["offset"][0]) + int(units["size"][0]))
        return best

    # --- topics -----------------------------------------------------------------------------------

    def _topics(self) -> list[str]:
        """Topics the tier or the broker holds, and the retry topic of each replay group (with
        committed offsets or a live client)."""
        topics = set(self.naming.queues())
        for group in {*self.offsets.groups(), *self.clients.live_groups()}:
            topics.add(RETRY_GROUP_TOPIC_PREFIX + group)
        return sorted(topics)

    def topic_list(self, request: Command) -> Command:
        """``TopicList`` of every topic, for ``topicList`` and ``consumerProgress`` without
        ``-g``, which finds the replay groups by their retry topics."""
        return request.response(ResponseCode.SUCCESS, body=dumps({"topicList": self._topics()}))

    def topics_by_cluster(self, request: Command) -> Command:
        """``TopicList`` of the cluster's topics (none for another cluster)."""
        cluster = field(request.ext_fields, "cluster")
        topics = self._topics() if cluster == self.cfg.broker_cluster_name else []
        return request.response(ResponseCode.SUCCESS, body=dumps({"topicList": topics}))

    def store_time(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time of the message at ``offset`` (the broker's copy when it has one); -1 when
        neither tier holds it."""
        local = self.store.local
        if local.has_queue(topic, queue_id):
            stamp = local.store_time(topic, queue_id, offset)
            if stamp is not None:
                return stamp
        result = self.store.get_message(topic, queue_id, offset, 1)
        if result.status is GetStatus.FOUND and result.units:
            return msgcodec.store_timestamp_of(result.units[0].data)
        return -1

    def topic_stats(self, request: Command) -> Command:
        """``TopicStatsTable`` (``topicStatus``): each queue's min and max offset and the store
        time of its last message."""
        topic = field(request.ext_fields, "topic")
        count = self.naming.queue_count(topic)
        if count == 0:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        rows = []
        for queue_id in range(count):
            low = max(self.store.get_min_offset(topic, queue_id), 0)
            high = max(self.store.get_max_offset(topic, queue_id), 0)
            stamp = self.store_time(topic, queue_id, high - 1) if high > 0 else 0
            offsets = {"lastUpdateTimestamp": stamp, "maxOffset": high, "minOffset": low}
            rows.append((message_queue(topic, self.cfg.broker_name, queue_id), offsets))
        body = {"offsetTable": ObjectKeyMap(rows), "topicPutTps": 0.0}
        return request.response(ResponseCode.SUCCESS, body=dumps(body))

    def topic_config(self, request: Command) -> Command:
        """``TopicConfigAndQueueMapping``: the read-only topic as the routes describe it (no
        static-topic mapping; ``topicStatus`` and ``consumerProgress`` accept TOPIC_NOT_EXIST)."""
        topic = field(request.ext_fields, "topic")
        count = self.naming.queue_count(topic)
        if count == 0:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {topic}"
            )
        config = {
            "attributes": {},
            "order": False,
            "perm": PERM_READ,
            "readQueueNums": count,
            "topicFilterType": "SINGLE_TAG",
            "topicName": topic,
            "topicSysFlag": 0,
            "writeQueueNums": 0,
        }
        return request.response(ResponseCode.SUCCESS, body=dumps(config))

    # --- consumer groups --------------------------------------------------------------------------

    def _stats_topics(self, ext: dict[str, str], group: str) -> list[str]:
        """Upstream's ``getTopicsForCollectingConsumeStats``: the listed topics, else the one
        asked for or those the group committed on, less those its heartbeats do not subscribe
        to (when they subscribe to any)."""
        listed = [t for t in (ext.get("topicList") or "").split(";") if t.strip()]
        if listed:
            return sorted(set(listed))
        topic = (ext.get("topic") or "").strip()
        topics = [topic] if topic else self.offsets.topics(group)
        subscribed = self.clients.subscribed_topics(group)
        return [t for t in topics if not subscribed or t in subscribed]

    def consume_stats(self, request: Command) -> Command:
        """``ConsumeStats`` of a replay group (``consumerProgress``, and a message's track in
        ``queryMsgBy*``): per queue the max offset, the committed offset (0 when none) and the
        store time of the last message consumed. ``consumerProgress -s true`` then asks each
        client for its running info, which is refused: the endpoint never calls into clients."""
        ext = request.ext_fields
        group = field(ext, "consumerGroup")
        rows = []
        listing = self.naming.queues()
        for topic in self._stats_topics(ext, group):
            for queue_id in range(self.naming.queue_count(topic, listing)):
                committed = self.offsets.get(group, topic, queue_id)
                consumer = committed if committed is not None and committed > 0 else 0
                last = self.store_time(topic, queue_id, consumer - 1) if consumer > 0 else 0
                wrapper = {
                    "brokerOffset": max(self.store.get_max_offset(topic, queue_id), 0),
                    "consumerOffset": consumer,
                    "lastTimestamp": max(last, 0),
                    "pullOffset": consumer,  # pulls are not tracked apart from commits
                }
                rows.append((message_queue(topic, self.cfg.broker_name, queue_id), wrapper))
        body = {"consumeTps": 0.0, "offsetTable": ObjectKeyMap(rows)}
        return request.response(ResponseCode.SUCCESS, body=dumps(body))

    def connections(self, request: Command) -> Command:
        """``ConsumerConnection``: the group's live clients and what their heartbeats declared."""
        group = field(request.ext_fields, "consumerGroup")
        info = self.clients.group(group)
        if info is None:
            return request.response(
                ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online"
            )
        body: dict[str, Any] = {
            "connectionSet": [
                {
                    "clientAddr": c.address,
                    "clientId": c.client_id,
                    "language": c.language,
                    "version": c.version,
                }
                for c in info.clients
            ],
            "consumeFromWhere": info.consume_from_where,
            "consumeType": info.consume_type,
            "messageModel": info.message_model,
            "subscriptionTable": info.subscriptions,
        }
        return request.response(ResponseCode.SUCCESS, body=dumps(body))

    def consumed_by(self, request: Command) -> Command:
        """``GroupList``: groups whose heartbeats subscribe to the topic or that committed
        offsets on it."""
        topic = field(request.ext_fields, "topic")
        groups = {*self.clients.subscribers(topic), *self.offsets.groups(topic)}
        return request.response(ResponseCode.SUCCESS, body=dumps({"groupList": sorted(groups)}))


def _used_ratio(path: Path) -> float:
    """``UtilAll.getDiskPartitionSpaceUsedPercent``: used / (used + usable), rounded up to a
    hundredth; -1.0 when the path is missing."""
    try:
        st = os.statvfs(path)
    except OSError:
        return -1.0
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    entire = used + st.f_bavail * st.f_frsize
    if st.f_blocks <= 0 or entire <= 0:
        return -1.0
    return -(-used * 100 // entire) / 100


def _bytes(n: int) -> str:
    """``MixAll.humanReadableByteCount(n, false)``."""
    if n < 1024:
        return f"{n} B"
    exp = int(math.log(n) / math.log(1024))
    return f"{n / 1024**exp:.1f} {'KMGTPE'[exp - 1]}iB"


def _runtime(ms: int) -> str:
    """``StoreStatsService.getFormatRuntime``."""
    day, hour, minute = 24 * HOUR_MS, HOUR_MS, 60_000
    return (
        f"[ {ms // day} days, {ms % day // hour} hours, {ms % hour // minute} minutes, "
        f"{ms % minute // 1000} seconds ]"
    )
