"""The other sidecars of a cluster (``tieredRemotingPeers``): their routes merged into this one's.

Without a name server, the built-in name-server half can answer for the whole cluster: a topic's
route is this sidecar's own (its broker's queues) plus each peer's own, and the cluster info lists
every peer's broker. A peer is asked for its own answer only (the request carries
``tieredLocalOnly=true``, so peers never ask each other in a loop), on one kept connection, and
its answer is kept for ``tieredRemotingPeerCacheMs``. An unreachable peer is left out of the
answer for that long and logged once per failure.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import Final

from .body import loads
from .client import RemotingClient
from .codes import RequestCode
from .codes import ResponseCode

log = logging.getLogger(__name__)

LOCAL_ONLY: Final = "tieredLocalOnly"
"""The extField a peer's request carries: answer for your own broker only."""
TIMEOUT_S: Final = 3.0


@dataclass
class _Peer:
    address: str
    client: RemotingClient | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    cache: dict[tuple[int, str], tuple[float, Any]] = field(default_factory=dict)
    failing: str = ""


class Peers:
    """Asks the peer sidecars for their own routes and cluster info (thread-safe)."""

    def __init__(self, addresses: tuple[str, ...], cache_ms: int) -> None:
        self.peers = [_Peer(a) for a in addresses]
        self.cache_s = cache_ms / 1000

    def __bool__(self) -> bool:
        return bool(self.peers)

    def close(self) -> None:
        for peer in self.peers:
            with peer.lock:
                if peer.client is not None:
                    peer.client.close()
                    peer.client = None

    def _ask(self, peer: _Peer, code: int, topic: str = "") -> Any:
        """The peer's own answer as parsed JSON, ``None`` when it has none (or is unreachable)."""
        key = (code, topic)
        with peer.lock:
            hit = peer.cache.get(key)
            if hit is not None and hit[0] > time.monotonic():
                return hit[1]
            try:
                if peer.client is None:
                    host, _, port = peer.address.rpartition(":")
                    peer.client = RemotingClient(host, int(port), timeout_s=TIMEOUT_S)
                fields = {LOCAL_ONLY: "true"} | ({"topic": topic} if topic else {})
                response = peer.client.call(code, **fields)
                value = (
                    loads(response.body)
                    if response.code == ResponseCode.SUCCESS and response.body
                    else None
                )
                if peer.failing:
                    log.info("peer sidecar %s answers again", peer.address)
                peer.failing = ""
            except (OSError, ValueError) as e:
                why = f"{type(e).__name__}: {e}"
                if peer.failing != why:
                    log.warning("peer sidecar %s unreachable (%s): left out of routes for %.1f s",
                                peer.address, why, self.cache_s)  # fmt: skip
                peer.failing = why
                if peer.client is not None:
                    peer.client.close()
                    peer.client = None
                value = None
            peer.cache[key] = (time.monotonic() + self.cache_s, value)
            if len(peer.cache) > 10_000:  # topics come from requests: keep the cache bounded
                peer.cache.clear()
            return value

    def routes(self, topic: str) -> list[dict[str, Any]]:
        """Each peer's own route of ``topic`` (peers without it left out)."""
        found = (self._ask(p, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic) for p in self.peers)
        return [r for r in found if isinstance(r, dict)]

    def cluster_infos(self) -> list[dict[str, Any]]:
        """Each peer's own cluster info."""
        found = (self._ask(p, RequestCode.GET_BROKER_CLUSTER_INFO) for p in self.peers)
        return [c for c in found if isinstance(c, dict)]


def merge_routes(own: dict[str, Any] | None, others: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One route from this sidecar's and its peers' (a broker listed once)."""
    if own is None and not others:
        return None
    merged: dict[str, Any] = own or {
        "orderTopicConf": None, "queueDatas": [], "brokerDatas": [], "filterServerTable": {}
    }  # fmt: skip
    seen = {b.get("brokerName") for b in merged["brokerDatas"]}
    for route in others:
        fresh = [b for b in route.get("brokerDatas") or [] if b.get("brokerName") not in seen]
        names = {b.get("brokerName") for b in fresh}
        merged["brokerDatas"] += fresh
        merged["queueDatas"] += [
            q for q in route.get("queueDatas") or [] if q.get("brokerName") in names
        ]
        seen |= names
    return merged


def merge_cluster_infos(own: dict[str, Any], others: list[dict[str, Any]]) -> dict[str, Any]:
    """One cluster info from this sidecar's and its peers'."""
    brokers = dict(own.get("brokerAddrTable") or {})
    clusters = {k: list(v) for k, v in (own.get("clusterAddrTable") or {}).items()}
    for info in others:
        for name, data in (info.get("brokerAddrTable") or {}).items():
            brokers.setdefault(name, data)
        for cluster, names in (info.get("clusterAddrTable") or {}).items():
            into = clusters.setdefault(cluster, [])
            into += [n for n in names if n not in into]
    return {"brokerAddrTable": brokers, "clusterAddrTable": clusters}
