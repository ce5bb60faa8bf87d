"""Registration with RocketMQ name servers: the replay endpoint joins a cluster as a broker does.

With ``tieredRemotingNamesrvAddr`` set, a master's sidecar sends ``REGISTER_BROKER`` (103) to each
name server every ``tieredRemotingRegisterIntervalMs`` on one kept connection (a name server drops
a broker whose connection closes, or that it has not heard from for 120 s): its broker and cluster
names, its advertised replay address, and every topic it can serve as a read-only topic config
(perm = read, no write queues, so producers never pick it). ``UNREGISTER_BROKER`` (104) at stop.
A consumer pointed at such a name server gets one route over every registered sidecar and replays
every queue of every broker.

The name server must be dedicated to replay: before each registration the sidecar asks for the
cluster info (106) and refuses -- loudly, without registering -- when its broker name is already
registered there with another address where something listens (the production broker, or another
sidecar of the same broker), since a name server keeps one address per broker name and id. An
address where nothing listens is this sidecar's own before a restart (a new pod IP, or a killed
process the name server has not yet dropped): registering replaces it.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import Final

from tiered.config import TieredConfig
from tiered.errors import ConfigError

from .body import loads
from .client import RemotingClient
from .codes import MASTER_ID
from .codes import PERM_READ
from .codes import RequestCode
from .codes import ResponseCode
from .naming import Naming

log = logging.getLogger(__name__)

REGISTER_BROKER: Final = 103
UNREGISTER_BROKER: Final = 104
VERSION_5_3_3: Final = 479
"""``MQVersion.Version.V5_3_3``: a name server reads the body as ``RegisterBrokerBody`` only from a
client of version 3.0.11 on."""
TIMEOUT_S: Final = 10.0


@dataclass
class NameServerState:
    """What the sidecar knows of one name server."""

    address: str
    client: RemotingClient | None = None
    registered: bool = False
    last_error: str = ""
    registrations: int = 0
    conflict: str = ""


@dataclass
class Registration:
    """Keeps the endpoint registered with ``cfg.tiered_remoting_namesrv_addr`` (a daemon
    service: :meth:`start` after the endpoint listens, :meth:`stop` before it closes)."""

    cfg: TieredConfig
    naming: Naming
    address: Callable[[], str]
    ready: Callable[[], bool] = lambda: True
    states: dict[str, NameServerState] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _version: dict[str, int] = field(default_factory=dict)
    _topics: dict[str, int] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.states = {a: NameServerState(a) for a in self.cfg.tiered_remoting_namesrv_addr}
        self._version = {"timestamp": int(time.time() * 1000), "counter": 0, "stateVersion": 0}

    @property
    def active(self) -> bool:
        """Whether this sidecar registers at all: name servers are set and it is a master's
        (a slave's sidecar stands by, as it does for uploads)."""
        return bool(self.states) and self.cfg.uploads

    def start(self) -> None:
        """Check every name server for a conflict now, then register (once the sidecar is
        ready: its topics are known) and again every interval.

        Raises:
            ConfigError: a name server already holds this broker name with another address.
        """
        if not self.states:
            return
        if not self.cfg.uploads:
            log.info("replay endpoint not registered with %s: this sidecar's broker is a slave "
                     "(brokerRole=%s, brokerId=%d); it stands by", self._names(),
                     self.cfg.broker_role.value, self.cfg.broker_id)  # fmt: skip
            return
        with self._lock:
            for state in self.states.values():
                try:
                    state.conflict = self._conflict(state, self._client(state))
                except (OSError, ValueError) as e:  # unreachable now: the loop retries
                    self._failed(state, f"{type(e).__name__}: {e}")
            conflicts = [s.conflict for s in self.states.values() if s.conflict]
            if conflicts:
                self._close_all()
                raise ConfigError("; ".join(conflicts))
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="tiered-namesrv", daemon=True)
        self._thread.start()

    def _names(self) -> str:
        return ", ".join(self.states)

    def _loop(self) -> None:
        interval = self.cfg.tiered_remoting_register_interval_ms / 1000
        while not self.ready():  # the sidecar opens after its services start
            if self._stop.wait(0.1):
                return
        wait = 0.0
        while not self._stop.wait(wait):
            wait = interval
            try:
                self.register_all()
            except Exception:  # a bug must not stop the registrations: log and go on
                log.exception("registration with the name servers failed")

    def stop(self) -> None:
        """Stop registering, unregister from every name server, close the connections."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(TIMEOUT_S)
            self._thread = None
        with self._lock:
            for state in self.states.values():
                if state.registered and state.client is not None:
                    try:
                        state.client.call(UNREGISTER_BROKER, **self._identity())
                        log.info("replay endpoint unregistered from name server %s", state.address)
                    except OSError as e:
                        log.warning("could not unregister from name server %s: %s",
                                    state.address, e)  # fmt: skip
                state.registered = False
            self._close_all()

    def _close_all(self) -> None:
        for state in self.states.values():
            if state.client is not None:
                state.client.close()
                state.client = None

    def _identity(self) -> dict[str, object]:
        return {
            "brokerName": self.cfg.broker_name,
            "brokerAddr": self.address(),
            "clusterName": self.cfg.broker_cluster_name,
            "brokerId": MASTER_ID,
        }

    # --- one round ------------------------------------------------------------------------------

    def body(self) -> bytes:
        """``RegisterBrokerBody`` JSON: every topic the sidecar serves, read-only."""
        queues = self.naming.queues()
        counts = {topic: self.naming.queue_count(topic, queues) for topic in queues}
        # a name server refuses a first registration of one topic: a broker always sends its
        # cluster's and its own name as topics too; with the proxy's heartbeat-sync topic they
        # get one empty read-only queue, as in the sidecar's own routes (a RocketMQ Proxy whose
        # name server is the replay one finds a broker through the cluster's route, and creates
        # the sync topic at start -- and fails to start -- unless its route exists)
        named = (self.cfg.broker_cluster_name, self.cfg.broker_name, *self.naming.sync_topics)
        for topic in named:
            counts.setdefault(topic, 1)
        if counts != self._topics:
            self._topics = counts
            self._version["counter"] += 1
        table = {
            topic: {
                "topicName": topic,
                "readQueueNums": n,
                "writeQueueNums": 0,
                "perm": PERM_READ,
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
                "order": False,
                "attributes": {},
            }
            for topic, n in sorted(counts.items())
        }
        wrapper = {
            "dataVersion": dict(self._version),
            "mappingDataVersion": dict(self._version),
            "topicConfigTable": table,
            "topicQueueMappingDetailMap": {},
            "topicQueueMappingInfoMap": {},
        }
        body = {"filterServerList": [], "topicConfigSerializeWrapper": wrapper}
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()

    def register_all(self) -> None:
        """One registration with every name server (each failure logged, none raised)."""
        if not self.active:
            return
        with self._lock:
            body = self.body()
            for state in self.states.values():
                self._register(state, body)

    def _client(self, state: NameServerState) -> RemotingClient:
        if state.client is None:
            host, _, port = state.address.rpartition(":")
            state.client = RemotingClient(host, int(port), timeout_s=TIMEOUT_S)
        return state.client

    def _register(self, state: NameServerState, body: bytes) -> None:
        try:
            client = self._client(state)
            state.conflict = self._conflict(state, client)
            if state.conflict:
                log.error("%s", state.conflict)
                return
            fields = self._identity() | {
                "haServerAddr": "",
                "compressed": "false",
                "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF,
            }
            response = client.call_as(VERSION_5_3_3, REGISTER_BROKER, body, fields)
        except (OSError, ValueError) as e:
            self._failed(state, f"{type(e).__name__}: {e}")
            return
        if response.code != ResponseCode.SUCCESS:
            self._failed(state, f"answered {response.code}: {response.remark}")
            return
        if not state.registered:
            log.info("replay endpoint %s registered as broker %s of cluster %s with name server "
                     "%s (%d topics)", self.address(), self.cfg.broker_name,
                     self.cfg.broker_cluster_name, state.address,
                     len(self._topics or {}))  # fmt: skip
        state.registered, state.last_error = True, ""
        state.registrations += 1

    def _failed(self, state: NameServerState, why: str) -> None:
        if state.last_error != why:
            log.warning("registration with name server %s failed (%s); retried in %d ms",
                        state.address, why,
                        self.cfg.tiered_remoting_register_interval_ms)  # fmt: skip
        state.last_error, state.registered = why, False
        if state.client is not None:
            state.client.close()
            state.client = None

    def _conflict(self, state: NameServerState, client: RemotingClient) -> str:
        """Why registering here would be wrong ("" when it is fine)."""
        response = client.call(RequestCode.GET_BROKER_CLUSTER_INFO)
        if response.code != ResponseCode.SUCCESS or not response.body:
            return ""
        info: dict[str, Any] = loads(response.body)
        broker = (info.get("brokerAddrTable") or {}).get(self.cfg.broker_name) or {}
        holder = (broker.get("brokerAddrs") or {}).get(str(MASTER_ID))
        if holder is None:
            holder = (broker.get("brokerAddrs") or {}).get(MASTER_ID)
        mine = self.address()
        if holder is None or holder == mine:
            return ""
        if not _listening(str(holder)):
            log.warning("name server %s holds broker %r at %s, where nothing listens (this "
                        "sidecar before a restart?): registering over it", state.address,
                        self.cfg.broker_name, holder)  # fmt: skip
            return ""
        return (
            f"name server {state.address} already has broker {self.cfg.broker_name!r} "
            f"(cluster {broker.get('cluster')!r}) registered at {holder}, not at this sidecar's "
            f"{mine}: tieredRemotingNamesrvAddr must name name servers dedicated to replay (not "
            "the production one, where the broker itself registers), and one sidecar per broker"
        )


def _listening(address: str) -> bool:
    """Whether something accepts connections at ``host:port`` (within a second)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
            return True
    except (OSError, ValueError):
        return False
