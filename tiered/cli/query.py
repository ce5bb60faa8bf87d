"""``rmq-tiered query``: messages of a topic by key, from the tiered key index.

Read-only and lock-free (safe beside ``run``): the local index files are mapped read-only, the
metadata file is read as it is, uploaded index files and messages are read through the
configured provider. ``--json`` prints one message per line, the objects of ``fetch --json`` and
of the HTTP API; the summary goes to stderr.
"""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from tiered.broker import message as msgcodec
from tiered.cli.common import MESSAGE_COLUMNS
from tiered.cli.common import console
from tiered.cli.common import emit_json
from tiered.cli.common import message_cells
from tiered.cli.config_option import config_option
from tiered.cli.config_option import load
from tiered.cli.config_option import setup_logging
from tiered.cli.fetch import max_count_option
from tiered.config import TieredConfig
from tiered.core.sidecar import index_reader
from tiered.http.app import message_json
from tiered.index.search import KeyHit
from tiered.metadata import LONG_MAX


@click.command("query")
@config_option
@click.option("--topic", required=True, help="Topic name.")
@click.option("--key", required=True, help="A message key (KEYS token) or UNIQ_KEY (msgId).")
@click.option("--begin", type=click.IntRange(0), default=0, help="Earliest store time, epoch ms.")
@click.option(
    "--end", type=click.IntRange(0), default=None, help="Latest store time, epoch ms [no limit]."
)
@max_count_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per message.")
def query(
    configs: tuple[Path, ...],
    topic: str,
    key: str,
    begin: int,
    end: int | None,
    max_count: int,
    as_json: bool,
) -> None:
    """Find the newest --max-count messages of TOPIC whose key is KEY, stored between --begin
    and --end, in the tiered key index (local index files and uploaded ones)."""
    cfg = load(configs)
    setup_logging(cfg, quiet=True)
    hits = search(cfg, topic, key, begin, LONG_MAX if end is None else end, max_count)
    if as_json:
        for hit in hits:
            emit_json(message_json(hit.data, "tiered"))
    elif hits:
        console.print(_table(hits))
    click.echo(f"{len(hits)} message(s) with key {key!r} in topic {topic!r}", err=True)


def search(
    cfg: TieredConfig, topic: str, key: str, begin: int, end: int, max_count: int
) -> list[KeyHit]:
    """One query through a read-only index service."""
    with index_reader(cfg) as service:
        return service.query(topic, key, begin, end, max_count)


def _table(hits: list[KeyHit]) -> Table:
    table = Table()
    for name in ("queue", "q offset", *MESSAGE_COLUMNS):
        table.add_column(name, overflow="fold")
    for hit in hits:
        pos = msgcodec.QUEUE_OFFSET_POSITION
        queue_offset = int.from_bytes(hit.data[pos : pos + 8], "big", signed=True)
        table.add_row(str(hit.queue_id), str(queue_offset), *message_cells(hit.data))
    return table
