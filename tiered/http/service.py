"""The HTTP API of ``rmq-tiered run``: the app over the daemon's live flat files, its health checks.

``/healthz`` passes while the process and its scheduler run (``starting`` while the sidecar
restores its queues, which can take a while); ``/readyz`` when the metadata is loaded, the backend
answers and the broker's store is readable -- the body names each check and what is wrong.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter

from tiered.access.security import Security
from tiered.core.daemon import Daemon
from tiered.core.status_report import StatusQuery
from tiered.core.status_report import StatusSources
from tiered.core.status_report import collect_status
from tiered.errors import TieredStoreError
from tiered.metadata import MetadataDocument
from tiered.metadata import mirror_key_for
from tiered.metadata import now_ms
from tiered.offload.dispatch_state import StateSnapshot
from tiered.process.collector import collector_paused
from tiered.read.message_store import TieredMessageStore

from .app import create_app
from .server import HttpServer
from .server import Tls


def liveness(daemon: Daemon) -> dict[str, str]:
    """``process`` and ``scheduler`` (``ok``, ``starting`` or ``stopping``)."""
    if daemon.stop.is_set():
        scheduler = "stopping"
    elif daemon.scheduler.running:
        scheduler = "ok"
    else:
        scheduler = "starting"
    return {"process": "ok", "scheduler": scheduler}


def readiness(daemon: Daemon) -> dict[str, str]:
    """``metadata``, ``backend`` and ``brokerStore``: each ``ok`` or what is wrong."""
    sidecar, cfg = daemon.sidecar, daemon.cfg
    checks = {
        "metadata": "ok"
        if sidecar.metadata.loaded and daemon.scheduler.running
        else "not loaded yet: restoring queues from tieredStoreMetadata.json"
    }
    try:
        sidecar.provider.exists(mirror_key_for(cfg.broker_cluster_name, cfg.broker_name))
        checks["backend"] = "ok"
    except TieredStoreError as e:
        checks["backend"] = f"unreachable: {e}"
    try:
        for directory in (*cfg.commitlog_dirs, cfg.consume_queue_dir):
            with os.scandir(directory):
                pass
        checks["brokerStore"] = "ok"
    except OSError as e:
        checks["brokerStore"] = f"not readable: {e.strerror or e}: {e.filename}"
    return checks


def live_sources(daemon: Daemon) -> StatusSources:
    """What ``/v1/status`` reads: the running sidecar's memory (its metadata under the store's
    lock, the dispatcher's queue states, the key index's progress) while it uploads and runs;
    the files as ``rmq-tiered status`` reads them while it starts or stops, or when it is not
    the writer of its metadata."""
    sidecar = daemon.sidecar
    if not (daemon.scheduler.running and not daemon.stop.is_set() and sidecar.uploading):
        return StatusSources()
    dispatcher = sidecar.dispatcher  # (made before the scheduler started)

    @contextlib.contextmanager
    def metadata() -> Iterator[tuple[MetadataDocument, str]]:
        with sidecar.metadata.reading() as doc:
            yield doc, f"{sidecar.metadata.path} (as the running sidecar holds it)"

    def states() -> StateSnapshot:
        queues = dict(dispatcher.states)
        return StateSnapshot(dispatcher.role, os.getpid(), now_ms(), dispatcher.rounds, queues)

    index = sidecar.index
    return StatusSources(metadata, states, index.progress.items if index is not None else None)


def http_service(
    daemon: Daemon,
    extra_routers: Sequence[APIRouter] = (),
    store: TieredMessageStore | None = None,
    security: Security | None = None,
) -> HttpServer:
    """The HTTP API of ``daemon`` on ``tieredHttpHost:tieredHttpPort`` (started by the daemon),
    reading through ``store`` (default: a new one over the daemon's flat files), guarded by
    ``security`` (accounts and TLS; None: open, plain)."""
    cfg = daemon.cfg
    if store is None:
        store = TieredMessageStore(cfg, daemon.sidecar.flat_store, daemon.sidecar.local)

    def status(query: StatusQuery) -> dict[str, Any]:
        # (its rows and copies are thousands of objects, freed at the end: no collection meanwhile
        # walks them, with the metadata lock held)
        with collector_paused():
            return collect_status(cfg, query, live_sources(daemon)).to_json()

    app = create_app(
        store,
        status=status,
        ready=lambda: readiness(daemon),
        alive=lambda: liveness(daemon),
        max_response_bytes=cfg.tiered_http_max_response_bytes,
        extra_routers=extra_routers,
        security=security,
    )
    tls = None
    if security is not None and security.tls is not None:
        reloading = security.tls
        tls = Tls(security.http_tls_mode, lambda: reloading.value.context, security.guard)
    return HttpServer(
        app, cfg.tiered_http_host, cfg.tiered_http_port, tls, cfg.tiered_http_max_connections
    )
