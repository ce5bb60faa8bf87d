"""``rmq-tiered scrub``: check the tier against its metadata; exit 1 on any anomaly.

Read-only and lock-free (safe beside ``run``): see :mod:`tiered.core.scrub` for what is checked.
Exit codes: 0 clean, 1 anomalies found (for cron and CI), 2 a usage, configuration or backend
error (the scrub did not finish).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.table import Table

from tiered.cli.common import EXIT_DATA_ERROR
from tiered.cli.common import emit_json
from tiered.cli.common import wide_console
from tiered.cli.config_option import config_option
from tiered.cli.config_option import load
from tiered.cli.config_option import setup_logging
from tiered.core.scrub import scrub as run_scrub
from tiered.core.scrub_report import Anomaly
from tiered.core.scrub_report import ScrubReport
from tiered.providers import build_provider

SHOWN = 200
"""Findings the table lists at most (``--json`` lists all)."""


@click.command("scrub")
@config_option
@click.option(
    "--deep", is_flag=True, help="Also read every message and check its CRC and queue offset."
)
@click.option("--json", "as_json", is_flag=True, help="One JSON report object instead of a table.")
@click.option("--topic", "topic", metavar="GLOB", help="Only queues of topics matching this glob.")
def scrub(configs: tuple[Path, ...], deep: bool, as_json: bool, topic: str | None) -> None:
    """Check the tier against the metadata: every recorded segment present with its size, no
    object the metadata lacks, offsets contiguous from segment to segment, consumequeue units
    inside their commitlog segments, index file headers (--deep: every message's CRC and queue
    offset). Never changes the tier; safe while `rmq-tiered run` is running.

    Exits 1 when it finds an anomaly, 0 when the tier is clean.
    """
    cfg = load(configs)
    setup_logging(cfg, quiet=True)
    with build_provider(cfg) as provider:
        report = run_scrub(cfg, provider, deep=deep, topic=topic)
    if as_json:
        emit_json(report.to_json())
    else:
        _print(report)
    if not report.clean:
        sys.exit(EXIT_DATA_ERROR)


def _where(a: Anomaly) -> str:
    if a.topic is None:
        return "-"
    queue = f"/{a.queue_id}" if a.queue_id is not None else ""
    return f"{a.topic}{queue} {a.file_type or ''}".strip()


def _table(title: str, rows: list[Anomaly]) -> Table:
    table = Table(title=title, title_justify="left")
    for name in ("kind", "queue", "offset", "key", "detail"):
        table.add_column(name, overflow="fold")
    for a in rows[:SHOWN]:
        offset = a.queue_offset if a.queue_offset is not None else a.offset
        table.add_row(a.kind, _where(a), "-" if offset is None else str(offset), a.key, a.detail)
    return table


def _print(report: ScrubReport) -> None:
    out = wide_console()
    if report.anomalies:
        out.print(_table("anomalies", report.anomalies))
    if report.notes:
        out.print(_table("notes (not damage)", report.notes))
    hidden = max(len(report.anomalies) - SHOWN, 0) + max(len(report.notes) - SHOWN, 0)
    if hidden:
        out.print(f"({hidden} more not listed: --json lists every one)")
    click.echo(report.summary())
