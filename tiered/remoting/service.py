"""The replay endpoint of ``rmq-tiered run``, assembled from the daemon's live state."""

from __future__ import annotations

from pathlib import Path

from tiered.core.daemon import Daemon
from tiered.core.message_store import TieredMessageStore

from .acl import Acl
from .groups import ReplayOffsets
from .handlers import Replay
from .naming import Naming
from .server import RemotingServer


def remoting_service(daemon: Daemon, store: TieredMessageStore) -> RemotingServer:
    """The endpoint on ``tieredRemotingHost:tieredRemotingPort`` over ``store`` (the same
    :class:`TieredMessageStore` the HTTP API reads through), started by the daemon.

    Raises:
        ConfigError: ``tieredRemotingAclFile`` cannot be read or is malformed.
    """
    cfg = daemon.cfg
    acl = Acl.load(Path(cfg.tiered_remoting_acl_file)) if cfg.tiered_remoting_acl_enable else None
    offsets = ReplayOffsets(cfg.tiered_data_dir / "config")
    offsets.load()
    server: RemotingServer | None = None

    def address() -> str:
        assert server is not None
        return server.address

    def ready() -> bool:
        return daemon.sidecar.metadata.loaded and daemon.scheduler.running

    replay = Replay(
        cfg,
        store,
        Naming(cfg, store, address),
        index=lambda: daemon.sidecar.index,
        offsets=offsets,
        acl=acl,
        ready=ready,
    )
    server = RemotingServer(
        replay,
        cfg.tiered_remoting_host,
        cfg.tiered_remoting_port,
        max_frame_bytes=cfg.tiered_remoting_max_frame_bytes,
        max_connections=cfg.tiered_remoting_max_connections,
        advertised_address=cfg.tiered_remoting_advertised_address,
        flush=offsets.flush,
    )
    return server
