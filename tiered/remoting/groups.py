"""Consumer groups as the replay endpoint sees them: live clients and committed offsets.

:class:`Clients` records each group's clients and subscriptions from ``HEART_BEAT``, as the
broker's ``ConsumerManager`` does. :class:`ReplayOffsets` keeps the replay groups' committed
offsets in ``{tieredDataDir}/config/replayConsumerOffset.json`` -- never in the broker's store,
whose groups are the broker's business.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Hashable
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from tiered.metadata.state_file import JsonStateFile

log = logging.getLogger(__name__)

CLIENT_EXPIRY_S = 120.0
OFFSETS_FILE = "replayConsumerOffset.json"
VERSION = 1


@dataclass(frozen=True, slots=True)
class Subscription:
    """What a group subscribed to on a topic (``subString`` and ``expressionType``)."""

    expression: str
    expression_type: str = "TAG"


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """One client of a group as a ``Connection`` shows it."""

    client_id: str
    address: str
    language: str
    version: int


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """A group as ``ConsumerConnection`` shows it: live clients and what they declared."""

    clients: list[ClientInfo]
    consume_type: str
    message_model: str
    consume_from_where: str
    subscriptions: dict[str, dict[str, Any]]


@dataclass(slots=True)
class _Group:
    clients: dict[str, float] = field(default_factory=dict)  # client id -> last heartbeat
    channels: dict[str, Hashable] = field(default_factory=dict)  # client id -> its connection
    info: dict[str, ClientInfo] = field(default_factory=dict)
    subscriptions: dict[str, Subscription] = field(default_factory=dict)
    raw: dict[str, dict[str, Any]] = field(default_factory=dict)  # topic -> SubscriptionData
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"

    def drop(self, client: str) -> None:
        self.clients.pop(client, None)
        self.channels.pop(client, None)
        self.info.pop(client, None)


class Clients:
    """Live consumer clients per group (thread-safe).

    As the broker's ``ConsumerManager``: a client belongs to the connection its last heartbeat
    came on (``channel``, any hashable; None when the caller has none), and leaves every group
    the moment that connection closes (:meth:`drop_channel`) or it unregisters; the calls that
    change a group's membership or subscriptions return the groups whose other clients should
    rebalance now (``NOTIFY_CONSUMER_IDS_CHANGED``, sent to :meth:`channels`).

    A rebalancing client takes no queue unless ``GET_CONSUMER_LIST_BY_GROUP`` lists it; a Java
    push consumer pulls without a subscription and the broker uses the heartbeat's. A client
    that has not sent a heartbeat for :data:`CLIENT_EXPIRY_S` (a connection left open) is
    dropped too, and a group left with no live client is forgotten (swept at most once per
    expiry period, so heartbeats naming ever new groups hold memory for one period, not for
    ever). For ``GET_CONSUMER_CONNECTION_LIST`` it keeps what the broker's ``ConsumerGroupInfo``
    keeps: each client's address, language and version, the group's ``consumeType``,
    ``messageModel`` and ``consumeFromWhere``, and each ``SubscriptionData`` as sent."""

    def __init__(self, expiry_s: float = CLIENT_EXPIRY_S) -> None:
        self.expiry_s = expiry_s
        self._groups: dict[str, _Group] = {}
        self._lock = threading.Lock()
        self._swept = float("-inf")

    def remembered(self) -> int:
        """Groups remembered, live or not yet swept (no ``__len__``: an empty registry is still
        one, and ``clients or Clients()`` must keep it)."""
        with self._lock:
            return len(self._groups)

    def heartbeat(
        self,
        data: dict[str, Any],
        now: float | None = None,
        *,
        address: str = "",
        language: str = "JAVA",
        version: int = 0,
        channel: Hashable | None = None,
    ) -> list[str]:
        """Record a ``HeartbeatData`` body sent on ``channel`` from ``address`` by a client of
        ``language`` and ``version`` (the request header's); returns the consumer groups it
        changed (a client new to the group or on a new connection, or a subscription new or
        different: the broker's ``CHANGE``).

        Raises:
            ValueError: the body is not a heartbeat (no ``clientID``).
        """
        client = data.get("clientID")
        if not isinstance(client, str) or not client:
            raise ValueError("the heartbeat has no clientID")
        stamp = time.monotonic() if now is None else now
        info = ClientInfo(client, address, language, version)
        changed: list[str] = []
        with self._lock:
            for consumer in data.get("consumerDataSet") or []:
                name = consumer.get("groupName") if isinstance(consumer, dict) else None
                if not isinstance(name, str) or not name:
                    continue
                group = self._live(name, stamp) or self._groups.setdefault(name, _Group())
                change = client not in group.clients or group.channels.get(client) != channel
                group.clients[client] = stamp
                group.channels[client] = channel
                group.info[client] = info
                for key in ("consumeType", "messageModel", "consumeFromWhere"):
                    value = consumer.get(key)
                    if isinstance(value, str) and value:
                        setattr(group, _ATTRS[key], value)
                for sub in consumer.get("subscriptionDataSet") or []:
                    if isinstance(sub, dict) and isinstance(sub.get("topic"), str):
                        subscription = Subscription(
                            str(sub.get("subString") or "*"),
                            str(sub.get("expressionType") or "TAG"),
                        )
                        change |= group.subscriptions.get(sub["topic"]) != subscription
                        group.subscriptions[sub["topic"]] = subscription
                        group.raw[sub["topic"]] = sub
                if change:
                    changed.append(name)
            if stamp - self._swept >= self.expiry_s:
                self._sweep(stamp)
        return changed

    def _sweep(self, now: float) -> None:
        """Forget the groups with no live client (call under the lock)."""
        self._swept = now
        for name in list(self._groups):
            g = self._live(name, now)
            if g is not None and not g.clients:
                del self._groups[name]

    def unregister(self, client: str, group: str | None) -> list[str]:
        """Forget ``client`` in ``group`` (in every group when ``group`` is empty); the groups
        it left."""
        left = []
        with self._lock:
            for name, g in self._groups.items():
                if (not group or name == group) and client in g.clients:
                    g.drop(client)
                    left.append(name)
        return left

    def drop_channel(self, channel: Hashable) -> dict[str, list[str]]:
        """Forget every client whose heartbeats came on ``channel`` (it closed), in every group;
        ``group -> the clients it lost``."""
        lost: dict[str, list[str]] = {}
        with self._lock:
            for name, g in self._groups.items():
                gone = [c for c, ch in g.channels.items() if ch is not None and ch == channel]
                for client in gone:
                    g.drop(client)
                if gone:
                    lost[name] = gone
        return lost

    def channels(self, group: str, now: float | None = None) -> list[Hashable]:
        """The connections of ``group``'s live clients to tell that it changed (none for a
        broadcasting group: its clients each read every queue)."""
        with self._lock:
            g = self._live(group, now)
            if g is None or g.message_model == "BROADCASTING":
                return []
            seen = {id(ch): ch for ch in g.channels.values() if ch is not None}
            return list(seen.values())

    def _live(self, group: str, now: float | None) -> _Group | None:
        """The group with its expired clients dropped (call under the lock)."""
        stamp = time.monotonic() if now is None else now
        g = self._groups.get(group)
        if g is not None:
            for client, seen in list(g.clients.items()):
                if stamp - seen > self.expiry_s:
                    g.drop(client)
        return g

    def clients(self, group: str, now: float | None = None) -> list[str]:
        """The group's clients heard from within the expiry, sorted."""
        with self._lock:
            g = self._live(group, now)
            return sorted(g.clients) if g is not None else []

    def group(self, group: str, now: float | None = None) -> GroupInfo | None:
        """What ``group``'s live clients declared; ``None`` when none is live."""
        with self._lock:
            g = self._live(group, now)
            if g is None or not g.clients:
                return None
            return GroupInfo(
                [g.info[c] for c in sorted(g.info)],
                g.consume_type,
                g.message_model,
                g.consume_from_where,
                dict(g.raw),
            )

    def live_groups(self, now: float | None = None) -> list[str]:
        """The groups with a live client, sorted."""
        with self._lock:
            return sorted(n for n in list(self._groups) if (g := self._live(n, now)) and g.clients)

    def subscribers(self, topic: str) -> list[str]:
        """The groups that subscribed to ``topic`` in a heartbeat, sorted."""
        with self._lock:
            return sorted(n for n, g in self._groups.items() if topic in g.subscriptions)

    def subscription(self, group: str, topic: str) -> Subscription | None:
        """The subscription ``group`` last sent for ``topic`` in a heartbeat."""
        with self._lock:
            g = self._groups.get(group)
            return g.subscriptions.get(topic) if g is not None else None

    def subscribed_topics(self, group: str) -> set[str]:
        """The topics ``group`` subscribed to in its heartbeats."""
        with self._lock:
            g = self._groups.get(group)
            return set(g.subscriptions) if g is not None else set()


_ATTRS = {
    "consumeType": "consume_type",
    "messageModel": "message_model",
    "consumeFromWhere": "consume_from_where",
}


class ReplayOffsets:
    """Committed offsets of replay groups, by ``(group, topic, queue id)`` (thread-safe).

    The file has the broker's ``consumerOffset.json`` shape (``{"offsetTable": {"topic@group":
    {"queueId": offset}}}``) plus a ``version``, written atomically (temp, fsync, rename, ``.bak``
    kept) by :meth:`flush`, which ``run`` calls every second and at shutdown: a ``kill -9`` loses
    at most the last second of commits (re-read by the consumer: at-least-once, as with a
    broker). When the file and its ``.bak`` are both damaged they are moved aside and the groups
    start over from ``tieredRemotingNewGroupOffset``."""

    def __init__(self, config_dir: Path) -> None:
        self._file = JsonStateFile(
            Path(config_dir) / OFFSETS_FILE,
            VERSION,
            _parse,
            "replay groups start again from tieredRemotingNewGroupOffset",
        )
        self._table: dict[str, dict[int, int]] = {}
        self._dirty = False
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()

    @property
    def path(self) -> Path:
        return self._file.path

    def load(self, *, owner: bool = True) -> None:
        """Read the file (or its ``.bak``); a damaged pair is moved aside and warned about, unless
        this is a reader beside the sidecar that writes it (``owner=False``), which changes
        nothing (a stale temp file it removed could be the writer's file being written)."""
        table = self._file.load(owner=owner)
        with self._lock:
            self._table = table or {}

    def get(self, group: str, topic: str, queue_id: int) -> int | None:
        with self._lock:
            return self._table.get(f"{topic}@{group}", {}).get(queue_id)

    def topics(self, group: str) -> list[str]:
        """The topics ``group`` committed offsets on (upstream's ``whichTopicByConsumer``)."""
        suffix = f"@{group}"
        with self._lock:
            return sorted(k[: -len(suffix)] for k in self._table if k.endswith(suffix))

    def groups(self, topic: str | None = None) -> list[str]:
        """The groups that committed offsets (on ``topic``: ``whichGroupByTopic``)."""
        with self._lock:
            keys = list(self._table)
        found = set()
        for key in keys:
            name, _, group = key.partition("@")  # topics never hold an "@"
            if topic is None or name == topic:
                found.add(group)
        return sorted(found)

    def commit(
        self, group: str, topic: str, queue_id: int, offset: int, *, forward_only: bool = False
    ) -> None:
        """Remember ``offset`` (written by the next :meth:`flush`); with ``forward_only`` (a
        pull's ``commitOffset``) only when it is past the committed one: a group's offset
        moves back only when a client says so (``UPDATE_CONSUMER_OFFSET``)."""
        with self._lock:
            queues = self._table.setdefault(f"{topic}@{group}", {})
            current = queues.get(queue_id)
            back = forward_only and current is not None and offset < current
            if current != offset and not back:
                queues[queue_id] = offset
                self._dirty = True

    def flush(self) -> bool:
        """Write the table if it changed since the last flush; returns whether it wrote.

        Raises:
            OSError: the write failed (the table stays dirty and is written next time).
        """
        with self._write_lock:
            with self._lock:
                if not self._dirty:
                    return False
                table = {
                    k: {str(q): o for q, o in sorted(v.items())}
                    for k, v in sorted(self._table.items())
                }
                self._dirty = False
            try:
                self._file.save({"offsetTable": table})
            except OSError:
                with self._lock:
                    self._dirty = True
                raise
            return True


def _parse(document: dict[str, Any]) -> dict[str, dict[int, int]]:
    table = document["offsetTable"]
    if not isinstance(table, dict):
        raise TypeError("offsetTable is not an object")
    out: dict[str, dict[int, int]] = {}
    for key, queues in table.items():
        if "@" not in key or not isinstance(queues, dict):
            raise ValueError(f"entry {key!r} is not topic@group with a queue map")
        row: dict[int, int] = {}
        for queue, offset in queues.items():
            if not str(queue).isdigit() or isinstance(offset, bool) or not isinstance(offset, int):
                raise ValueError(f"entry {key!r} has queue {queue!r} -> {offset!r}")
            row[int(queue)] = offset
        out[key] = row
    return out
