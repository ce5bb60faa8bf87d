"""``rmq-tiered run``: the sidecar daemon (dispatcher and expiry) until SIGTERM."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tiered.cli.config_option import config_option, load, setup_logging
from tiered.core.daemon import Daemon


@click.command("run")
@config_option
@click.option("-v", "--verbose", count=True, help="Log at DEBUG level.")
def run(configs: tuple[Path, ...], verbose: int) -> None:
    """Run the sidecar: offload new messages every tieredStoreDispatchIntervalMs and expire old
    tiered data every tieredStoreDeleteFileInterval.

    SIGTERM (or Ctrl-C) finishes the uploads in flight, persists the metadata and exits 0. Only
    one `run` (or `dispatch`) may use a tieredDataDir at a time.
    """
    setup_logging(verbose)
    cfg = load(configs)
    sys.exit(Daemon(cfg).run())
