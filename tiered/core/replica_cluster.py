"""A read replica of a whole cluster (``rmq-tiered serve --all-brokers``): one process, every
broker whose metadata mirror is under the cluster's prefix of the tier.

Each broker is a :class:`~tiered.core.replica.Replica` with a daemon of its own (its data dir
``{tieredDataDir}/{broker}``, its HTTP port and its replay port: a pull names no broker, so each
broker needs an address of its own, as it has in the cluster), run on a thread. The replay
endpoints are each other's peers (:mod:`tiered.remoting.peers`, over loopback): a route or the
cluster info asked at any one of them lists every broker, each at its own port, so a consumer
pointed at any port replays the whole cluster. Brokers are found once, at start, by listing the
cluster's prefix; one that starts offloading later needs a restart.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

from tiered.config import TieredConfig
from tiered.core.daemon import Daemon
from tiered.core.replica import Replica
from tiered.errors import ConfigError
from tiered.metadata.metadata_store import FILE_NAME
from tiered.providers import Provider
from tiered.providers import build_provider
from tiered.providers.layout import cluster_dir_name
from tiered.remoting.peers import Peers
from tiered.remoting.server import RemotingServer

log = logging.getLogger(__name__)


def brokers_in_tier(provider: Provider, cluster: str) -> list[str]:
    """The brokers of ``cluster`` that have a metadata mirror in the tier, sorted."""
    prefix = f"{cluster_dir_name(cluster)}/"
    found = set()
    for key in provider.list(prefix):
        parts = key[len(prefix) :].split("/")
        if len(parts) == 3 and parts[1:] == ["config", FILE_NAME]:
            found.add(parts[0])
    return sorted(found)


def _port(port: int, i: int) -> int:
    return port + i if port else 0  # 0: any free port for each


def broker_config(cfg: TieredConfig, broker: str, i: int) -> TieredConfig:
    """``cfg`` for the ``i``-th broker: its name, ``{tieredDataDir}/{broker}``, and the HTTP and
    replay ports ``i`` above the configured ones (an advertised address's port likewise)."""
    advertised = cfg.tiered_remoting_advertised_address
    if advertised:
        host, _, port = advertised.rpartition(":")
        advertised = f"{host}:{int(port) + i}"
    return cfg.model_copy(
        update={
            "broker_name": broker,
            "tiered_data_dir": cfg.tiered_data_dir / broker,
            "tiered_http_port": _port(cfg.tiered_http_port, i),
            "tiered_remoting_port": _port(cfg.tiered_remoting_port, i),
            "tiered_remoting_advertised_address": advertised,
        }
    )


def serve_cluster(cfg: TieredConfig, front_doors: Callable[[Daemon], None]) -> int:
    """Serve every broker of ``cfg.broker_cluster_name`` in the tier until SIGTERM; returns 0.

    ``front_doors(daemon)`` adds a daemon's HTTP API and replay endpoint (``run``'s).

    Raises:
        ConfigError: the tier holds no metadata mirror of the cluster.
        TieredStoreError: a broker's replica failed to start (the others are stopped).
    """
    lister = build_provider(cfg)
    try:
        brokers = brokers_in_tier(lister, cfg.broker_cluster_name)
    finally:
        lister.close()
    if not brokers:
        raise ConfigError(
            f"no metadata mirror of brokerClusterName={cfg.broker_cluster_name!r} in the tier "
            f"(under {cluster_dir_name(cfg.broker_cluster_name)}/): check the cluster name and "
            "the backend, or serve one broker (without --all-brokers)"
        )
    daemons: list[Daemon] = []
    for i, broker in enumerate(brokers):
        replica = Replica(broker_config(cfg, broker, i))
        daemon = Daemon(replica.cfg, sidecar=replica)
        daemon.jobs.append((replica.refresh_job, replica.cfg.tiered_replica_refresh_ms, "refresh"))
        front_doors(daemon)
        daemons.append(daemon)
    failures: list[BaseException] = []

    def run(daemon: Daemon) -> None:
        try:
            daemon.run(install_signals=False)
        except BaseException as e:  # re-raised in the main thread; the others are stopped
            failures.append(e)
            for other in daemons:
                other.stop.set()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("received %s: stopping the replicas", signal.Signals(signum).name)
        for daemon in daemons:
            daemon.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    threads = [
        threading.Thread(target=run, args=(d,), name=f"replica-{d.cfg.broker_name}")
        for d in daemons
    ]
    for thread in threads:
        thread.start()
    _join_endpoints(daemons)
    log.info("read replica of cluster %s: brokers %s", cfg.broker_cluster_name, ", ".join(brokers))
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return 0


def _join_endpoints(daemons: list[Daemon]) -> None:
    """Once every daemon runs (its ports bound, its metadata loaded), make the replay endpoints
    each other's peers, besides the configured ``tieredRemotingPeers``."""
    while not all(d.scheduler.running for d in daemons):
        if any(d.stop.is_set() for d in daemons):
            return
        time.sleep(0.05)
    servers = [s for d in daemons for s in d.services if isinstance(s, RemotingServer)]
    for server in servers:
        others = tuple(f"{_local(o.host)}:{o.port}" for o in servers if o is not server)
        naming = server.replay.naming
        configured = naming.cfg.tiered_remoting_peers
        if naming.peers is not None:
            naming.peers.close()
        naming.peers = Peers(configured + others, naming.cfg.tiered_remoting_peer_cache_ms)


def _local(host: str) -> str:
    """Where this process reaches its own endpoint listening on ``host``."""
    return {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)
