"""``rmq-tiered serve``: a read replica of one broker's tier, with no broker store."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from tiered import metrics
from tiered.cli.config_option import config_option
from tiered.cli.config_option import load
from tiered.cli.config_option import setup_logging
from tiered.cli.run import add_front_doors
from tiered.core.daemon import Daemon
from tiered.core.replica import Replica


@click.command("serve")
@config_option
@click.option(
    "--all-brokers",
    is_flag=True,
    help="Serve every broker of brokerClusterName that has a metadata mirror in the tier, each "
    "on its own HTTP and replay port (tieredHttpPort, tieredRemotingPort and up, in broker name "
    "order); any replay port answers the whole cluster's routes.",
)
@click.option("-v", "--verbose", count=True, help="Log at DEBUG level (whatever tieredLogLevel).")
def serve(configs: tuple[Path, ...], all_brokers: bool, verbose: int) -> None:
    """Serve one broker's tier read-only, with no broker store: the HTTP API and the replay
    endpoint (tieredRemotingEnable) of brokerClusterName/brokerName, every read from the tier
    (as tieredStorageLevel=FORCE).

    The metadata is the writing sidecar's backend mirror, copied into this replica's own
    tieredDataDir (never a writer's) and read again every tieredReplicaRefreshMs, so what the
    writer offloads is served within that interval (plus the writer's 5 s mirror spacing). The
    provider refuses every write: the tier sees reads only (GET/HEAD/LIST). storePathRootDir is
    ignored; replay groups' offsets are kept in tieredDataDir. SIGTERM exits 0.

    With --all-brokers one process serves every broker of the cluster found in the tier, each
    with the data dir {tieredDataDir}/{brokerName}; a broker that appears later needs a restart.
    """
    given = load(configs)
    setup_logging(given, verbose_level=logging.DEBUG if verbose else None)
    metrics.set_detail(given.tiered_metrics_detail.value)  # before any queue's series
    metrics.register()  # every family on /metrics from the first scrape
    if all_brokers:
        from tiered.core.replica_cluster import serve_cluster

        sys.exit(serve_cluster(given, add_front_doors))
    replica = Replica(given)
    daemon = Daemon(replica.cfg, sidecar=replica)
    daemon.jobs.append((replica.refresh_job, replica.cfg.tiered_replica_refresh_ms, "refresh"))
    add_front_doors(daemon)
    sys.exit(daemon.run())
