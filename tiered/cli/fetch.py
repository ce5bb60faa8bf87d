"""``rmq-tiered fetch``: messages of a queue by offset, from whichever tier serves them.

Read-only and lock-free (safe beside ``run``): the metadata file is read as it is and the backend
through the configured provider. ``--json`` prints one message per line, exactly the objects of
the HTTP API; the status line (status, tier, next offset) goes to stderr.
"""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from tiered.cli.common import MESSAGE_COLUMNS
from tiered.cli.common import emit_json
from tiered.cli.common import message_cells
from tiered.cli.common import wide_console
from tiered.cli.config_option import config_option
from tiered.cli.config_option import load
from tiered.cli.config_option import setup_logging
from tiered.http.app import MAX_COUNT_LIMIT
from tiered.http.app import message_json
from tiered.read.fetcher import GetResult
from tiered.read.message_store import TieredMessageStore

max_count_option = click.option(
    "--max-count",
    type=click.IntRange(1, MAX_COUNT_LIMIT),
    default=32,
    show_default=True,
    help="Most messages to return.",
)
"""``--max-count`` of the commands that print messages (``fetch``, ``query``)."""


@click.command("fetch")
@config_option
@click.option("--topic", required=True, help="Topic name.")
@click.option("--queue", "queue_id", type=click.IntRange(0), required=True, help="Queue id.")
@click.option("--offset", type=click.IntRange(0), required=True, help="First queue offset.")
@max_count_option
@click.option("--tags", default=None, help="Tag subscription: '*' or 'TagA || TagB'.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per message.")
def fetch(
    configs: tuple[Path, ...],
    topic: str,
    queue_id: int,
    offset: int,
    max_count: int,
    tags: str | None,
    as_json: bool,
) -> None:
    """Fetch up to --max-count messages of TOPIC/QUEUE from --offset (tier or broker store, as
    tieredStorageLevel routes them; `explain` says why)."""
    cfg = load(configs)
    setup_logging(cfg, quiet=True)
    with TieredMessageStore.open_read_only(cfg) as store:
        result = store.get_message(
            topic, queue_id, offset, max_count, tags, max_bytes=cfg.tiered_http_max_response_bytes
        )
    if as_json:
        for unit in result.units:
            emit_json(message_json(unit.data, result.tier))
    elif result.units:
        wide_console().print(_table(result))
    click.echo(_summary(result), err=True)


def _summary(r: GetResult) -> str:
    return (
        f"{r.status.value}: {len(r.units)} message(s) from the {r.tier} store, next offset "
        f"{r.next_begin_offset} (queue offsets [{r.min_offset}, {r.max_offset}))"
    )


def _table(r: GetResult) -> Table:
    table = Table()
    for name in ("q offset", "tier", *MESSAGE_COLUMNS):
        table.add_column(name, overflow="fold")
    for unit in r.units:
        table.add_row(str(unit.queue_offset), r.tier, *message_cells(unit.data))
    return table
