"""The name-server half of the endpoint: routes and cluster info that point back at the sidecar.

A topic is known when the tier or the broker's store holds any of its queues; its route has one
read-only queue-data entry (``perm`` = read) with ``readQueueNums`` = highest queue id + 1, and
one broker-data entry whose master (``brokerAddrs["0"]``) is the sidecar's advertised address.
A consumer group's retry topic (``%RETRY%<group>``) gets an empty one-queue read-only route, so
push consumers that subscribe to it start without errors. The cluster name and the broker name
route to the broker (``mqadmin topicStatus -c`` finds brokers through the cluster's route) with
one empty read-only queue: a RocketMQ Proxy takes a route without queues for a topic that does
not exist, and finds the broker of a receipt handle through the broker name's route. So do the
proxies' heartbeat-sync topics (``tieredRemotingProxySyncTopics``), which a proxy in cluster mode
creates at start unless its route exists (a read-only endpoint cannot create it; the proxy's
sends to it, one per client registration, fail in the proxy and are logged there).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from typing import Any

from tiered.config import TieredConfig
from tiered.errors import StoreFileNotFoundError
from tiered.read.message_store import TOPIC_PATTERN
from tiered.read.message_store import TieredMessageStore

from .codes import MASTER_ID
from .codes import PERM_READ
from .codes import RETRY_GROUP_TOPIC_PREFIX
from .peers import Peers
from .peers import merge_cluster_infos
from .peers import merge_routes

_TOPIC = re.compile(TOPIC_PATTERN)


class Naming:
    """Topics and their routes, computed from what the tier and the broker's store hold."""

    def __init__(
        self,
        cfg: TieredConfig,
        store: TieredMessageStore,
        address: Callable[[], str],
        peers: Peers | None = None,
    ) -> None:
        self.cfg = cfg
        self.store = store
        self.address = address
        self.peers = peers
        self.sync_topics = frozenset(cfg.tiered_remoting_proxy_sync_topics)
        """The RocketMQ Proxies' heartbeat-sync topics: routed, empty and read-only."""

    def close(self) -> None:
        """Close the connections to the peers."""
        if self.peers is not None:
            self.peers.close()

    def queues(self) -> dict[str, set[int]]:
        """Topic -> queue ids, from the tier's queues and the broker's consumequeue."""
        out: dict[str, set[int]] = {}
        for flat in self.store.flat_store.files():
            out.setdefault(flat.topic, set()).add(flat.queue_id)
        try:
            local = self.store.local.queues()
        except StoreFileNotFoundError:
            local = []
        for topic, queue_id in local:
            out.setdefault(topic, set()).add(queue_id)
        return out

    def topic_queues(self, topic: str) -> set[int]:
        """The queue ids of one topic, from the tier's queues and that topic's consumequeue
        directory alone (a route lookup, asked by every client every 30 s per topic, lists one
        directory, not the broker's whole store; a name that is not a topic touches nothing)."""
        found = {f.queue_id for f in self.store.flat_store.files() if f.topic == topic}
        if not _TOPIC.fullmatch(topic):
            return found
        try:
            with os.scandir(self.store.local.cq_root / topic) as entries:
                for e in entries:
                    name = e.name
                    if name.isdecimal() and str(int(name)) == name and e.is_dir():
                        found.add(int(name))
        except OSError:  # no such topic in the broker's store (or no store yet)
            pass
        return found

    def queue_count(self, topic: str, queues: dict[str, set[int]] | None = None) -> int:
        """``readQueueNums`` of ``topic``: highest queue id + 1 (0 when unknown); ``queues`` is
        a listing :meth:`queues` already made."""
        found = self.topic_queues(topic) if queues is None else queues.get(topic)
        if not found:
            return 1 if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else 0
        return max(found) + 1

    def _broker_data(self) -> dict[str, Any]:
        return {
            "cluster": self.cfg.broker_cluster_name,
            "brokerName": self.cfg.broker_name,
            "brokerAddrs": {str(MASTER_ID): self.address()},
        }

    def route(self, topic: str, *, local_only: bool = False) -> bytes | None:
        """``TopicRouteData`` JSON of ``topic`` (merged with the peers' unless ``local_only``),
        or ``None`` when no one knows it."""
        own = self._own_route(topic)
        if self.peers and not local_only:
            own = merge_routes(own, self.peers.routes(topic))
        return None if own is None else json.dumps(own, separators=(",", ":")).encode()

    def _own_route(self, topic: str) -> dict[str, Any] | None:
        count = self.queue_count(topic)
        named = topic in (self.cfg.broker_cluster_name, self.cfg.broker_name)
        if count == 0 and not named and topic not in self.sync_topics:
            return None
        queue = {
            "brokerName": self.cfg.broker_name,
            "readQueueNums": max(count, 1),
            "writeQueueNums": 0,
            "perm": PERM_READ,
            "topicSysFlag": 0,
        }
        route: dict[str, Any] = {
            "orderTopicConf": None,
            "queueDatas": [queue],
            "brokerDatas": [self._broker_data()],
            "filterServerTable": {},
        }
        return route

    def cluster_info(self, *, local_only: bool = False) -> bytes:
        """``ClusterInfo`` JSON: this broker in its cluster (and the peers' unless
        ``local_only``)."""
        info: dict[str, Any] = {
            "brokerAddrTable": {self.cfg.broker_name: self._broker_data()},
            "clusterAddrTable": {self.cfg.broker_cluster_name: [self.cfg.broker_name]},
        }
        if self.peers and not local_only:
            info = merge_cluster_infos(info, self.peers.cluster_infos())
        return json.dumps(info, separators=(",", ":")).encode()
