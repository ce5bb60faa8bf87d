"""``rmq-tiered explain``: which tier would serve an offset of a queue, and why.

Read-only and lock-free, like ``fetch``. Shows the storage level (and whether a per-topic
override set it), the tier's range, the broker's range and, for NOT_IN_MEM, the page-cache
residency of the local commitlog bytes.
"""

from __future__ import annotations

from pathlib import Path

import click
from rich import box
from rich.table import Table

from tiered.cli.common import emit_json
from tiered.cli.common import wide_console
from tiered.cli.config_option import config_option
from tiered.cli.config_option import load
from tiered.cli.config_option import setup_logging
from tiered.read.message_store import TieredMessageStore


@click.command("explain")
@config_option
@click.option("--topic", required=True, help="Topic name.")
@click.option("--queue", "queue_id", type=click.IntRange(0), required=True, help="Queue id.")
@click.option("--offset", type=click.IntRange(0), required=True, help="Queue offset.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of a table.")
def explain(
    configs: tuple[Path, ...], topic: str, queue_id: int, offset: int, as_json: bool
) -> None:
    """Say whether TOPIC/QUEUE at --offset is read from the tier or the broker's store, and why."""
    cfg = load(configs)
    setup_logging(cfg, quiet=True)
    with TieredMessageStore.open_read_only(cfg) as store:
        answer = store.explain(topic, queue_id, offset)
    if as_json:
        emit_json(answer)
        return
    table = Table(box=box.SIMPLE, show_header=False, pad_edge=False)
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")
    for key, value in answer.items():
        table.add_row(key, str(value))
    wide_console().print(table)
