"""The replay endpoint of ``rmq-tiered run``, assembled from the daemon's live state."""

from __future__ import annotations

from tiered.access.security import Security
from tiered.core.daemon import Daemon
from tiered.read.message_store import TieredMessageStore

from .groups import ReplayOffsets
from .handlers import Replay
from .naming import Naming
from .peers import Peers
from .pop_state import PopState
from .registration import Registration
from .server import RemotingServer


def remoting_service(
    daemon: Daemon, store: TieredMessageStore, security: Security | None = None
) -> RemotingServer:
    """The endpoint on ``tieredRemotingHost:tieredRemotingPort`` over ``store`` (the same
    :class:`TieredMessageStore` the HTTP API reads through), started by the daemon, guarded by
    ``security`` (default: built from the daemon's config)."""
    cfg = daemon.cfg
    if security is None:
        security = Security.from_config(cfg)
    offsets = ReplayOffsets(cfg.tiered_data_dir / "config")
    offsets.load()
    pop_state = PopState(cfg.tiered_data_dir / "config")
    pop_state.load()
    server: RemotingServer | None = None

    def address() -> str:
        assert server is not None
        return server.address

    def ready() -> bool:
        return daemon.sidecar.metadata.loaded and daemon.scheduler.running

    peers = Peers(cfg.tiered_remoting_peers, cfg.tiered_remoting_peer_cache_ms)
    naming = Naming(cfg, store, address, peers)
    replay = Replay(
        cfg,
        store,
        naming,
        index=lambda: daemon.sidecar.index,
        offsets=offsets,
        security=security,
        ready=ready,
        pop_state=pop_state,
    )
    server = RemotingServer(
        replay,
        cfg.tiered_remoting_host,
        cfg.tiered_remoting_port,
        max_frame_bytes=cfg.tiered_remoting_max_frame_bytes,
        max_connections=cfg.tiered_remoting_max_connections,
        advertised_address=cfg.tiered_remoting_advertised_address,
        flush=replay.flush,
        security=security,
    )
    return server


def registration_service(daemon: Daemon, server: RemotingServer) -> Registration:
    """Registration of ``server``'s endpoint with ``tieredRemotingNamesrvAddr`` (a daemon
    service appended after the server: it starts once the port is bound, registers once the
    sidecar's metadata is loaded, and stops first)."""
    naming = server.replay.naming
    return Registration(
        naming.cfg, naming, lambda: server.address, lambda: daemon.sidecar.metadata.loaded
    )
