"""``rmq-tiered run``: the sidecar daemon (dispatcher, expiry, HTTP API) until SIGTERM."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from tiered import metrics
from tiered.access.security import Security
from tiered.cli.config_option import config_option
from tiered.cli.config_option import load
from tiered.cli.config_option import setup_logging
from tiered.core.daemon import Daemon
from tiered.http.admin_routes import admin_router
from tiered.http.key_routes import keys_router
from tiered.http.service import http_service
from tiered.read.message_store import TieredMessageStore


@click.command("run")
@config_option
@click.option("-v", "--verbose", count=True, help="Log at DEBUG level (whatever tieredLogLevel).")
def run(configs: tuple[Path, ...], verbose: int) -> None:
    """Run the sidecar: offload new messages every tieredStoreDispatchIntervalMs, expire old
    tiered data every tieredStoreDeleteFileInterval, serve the HTTP API (cold reads, status,
    /metrics, /healthz, /readyz) on tieredHttpHost:tieredHttpPort, and the RocketMQ remoting
    protocol (replay with unmodified consumers and mqadmin; tieredRemotingEnable) on
    tieredRemotingHost:tieredRemotingPort.

    SIGTERM (or Ctrl-C) finishes the uploads in flight, persists the metadata and exits 0. Only
    one `run` (or `dispatch`) may use a tieredDataDir at a time. `rmq-tiered pause` stops the
    uploads (and `resume` restarts them) while it runs; tieredStoreReadOnly=true starts it
    without any writer of the tier.
    """
    cfg = load(configs)
    setup_logging(cfg, verbose_level=logging.DEBUG if verbose else None)
    metrics.set_detail(cfg.tiered_metrics_detail.value)  # before any queue's series
    metrics.register()  # every family on /metrics from the first scrape
    daemon = Daemon(cfg)
    add_front_doors(daemon)
    sys.exit(daemon.run())


def add_front_doors(daemon: Daemon) -> None:
    """Add the HTTP API and (``tieredRemotingEnable``) the replay endpoint to ``daemon``'s
    services, both over one :class:`TieredMessageStore` of its sidecar (``run`` and ``serve``)."""
    cfg = daemon.cfg
    security = Security.from_config(
        cfg
    )  # accounts and certificate of both ports, reloaded on change
    daemon.services.append(security)
    keys = keys_router(
        lambda: daemon.sidecar.index, max_response_bytes=cfg.tiered_http_max_response_bytes
    )
    # one read facade (and one read-ahead cache) behind both front doors
    store = TieredMessageStore(cfg, daemon.sidecar.flat_store, daemon.sidecar.local)
    admin = admin_router(daemon.sidecar.pause, security)  # pause and resume the uploads
    daemon.services.append(
        http_service(daemon, extra_routers=[keys, admin], store=store, security=security)
    )
    if cfg.tiered_remoting_enable:
        from tiered.remoting.service import registration_service
        from tiered.remoting.service import remoting_service

        endpoint = remoting_service(daemon, store, security)
        daemon.services.append(endpoint)
        daemon.services.append(registration_service(daemon, endpoint))
