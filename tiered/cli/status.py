"""``rmq-tiered status``: per queue, local and tiered offsets, lag, gaps, last upload; the role."""

from __future__ import annotations

import datetime as dt
import functools
from pathlib import Path

import click
import orjson

from tiered.broker.store_layout import check_store
from tiered.cli.common import Rows
from tiered.cli.common import console
from tiered.cli.config_option import config_option
from tiered.cli.config_option import load
from tiered.core.status_report import IndexStatusReport
from tiered.core.status_report import StatusQuery
from tiered.core.status_report import StatusReport
from tiered.core.status_report import collect_status
from tiered.offload.pause import utc
from tiered.process.collector import collector_paused
from tiered.source.no_local_store import REPLICA_MARKER


@click.command("status")
@config_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of a table.")
@click.option(
    "--topic", "topic", metavar="PATTERN", help="Only queues of topics matching this glob."
)
@click.option("--lagging", is_flag=True, help="Only queues behind (or failing), most behind first.")
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=None,
    help="List at most this many queues (the summary still counts all of them).",
)
def status(
    configs: tuple[Path, ...], as_json: bool, topic: str | None, lagging: bool, limit: int | None
) -> None:
    """Show how far the tier is behind the broker's store, per queue.

    A summary line first (queues, how many are behind, the lag), then one row per queue.
    Read-only and lock-free: safe while `rmq-tiered run` is running.
    """
    with collector_paused():
        cfg = load(configs)
        if not (cfg.tiered_data_dir / REPLICA_MARKER).exists():  # a replica (serve) has no store
            check_store(cfg.store_path_root_dir, cfg.commitlog_dirs, cfg.consume_queue_dir)
        report = collect_status(cfg, StatusQuery(topic=topic, lagging=lagging, limit=limit))
        if as_json:  # orjson: a row per queue, thousands of them
            click.echo(orjson.dumps(report.to_json()).decode("utf-8"))
            return
        _print(report)


TOPICS_SHOWN = 50
"""Topics the broker-topics line names (the rest are counted)."""
POP_LATEST_SHOWN = 5
"""Latest dead-lettered offsets shown per group and topic (``--json`` has them all)."""


@functools.lru_cache(maxsize=1024)  # (a round's queues share their last upload time)
def _when(ms: int) -> str:
    if ms <= 0:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


QUEUE_COLUMNS = (
    "queue", "local [min, max)", "tiered [min, commit)", "lag", "lag size", "in tier", "gaps",
    "last upload (UTC)", "note",
)  # fmt: skip
"""The table's columns (``index lag`` goes before ``note`` when the key index is on)."""
RIGHT_ALIGNED = frozenset({"lag", "lag size", "in tier", "gaps", "index lag"})


def _print(report: StatusReport) -> None:
    out = console  # (made on first use: --json does not load rich)
    daemon = (
        f"running (pid {report.daemon_pid})"
        if report.daemon_running
        else "not running"
        if report.daemon_pid is None
        else f"not running (last pid {report.daemon_pid})"
    )
    out.print(
        f"cluster {report.cluster}  broker {report.broker}  role {report.role}  daemon {daemon}"
    )
    out.print(f"metadata {report.metadata}")
    out.print(_summary(report))
    if report.role == "standby":
        out.print("this sidecar stands by: its broker is not the master (brokerRole/brokerId)")
    elif report.role == "read-only":
        out.print("this sidecar is read-only (tieredStoreReadOnly=true): it never writes the tier")
    elif report.role == "replica":
        out.print("this is a read replica (rmq-tiered serve): it never writes the tier and reads "
                  "every message from it (tieredStorageLevel=FORCE)")  # fmt: skip
    if report.uploads.paused:
        out.print(_paused_line(report))
    indexed = report.index.enabled
    headers = [*QUEUE_COLUMNS[:-1], *(["index lag"] if indexed else []), "note"]
    out.print()
    with Rows(headers, right=RIGHT_ALIGNED) as rows:
        for q in report.queues:
            rows.add(
                f"{q.topic}/{q.queue_id}",
                f"[{q.local_min}, {q.local_max})" if q.local_max >= 0 else "-",
                f"[{q.tiered_min}, {q.tiered_commit})" if q.tiered_commit >= 0 else "-",
                str(q.lag_messages),
                _size(q.lag_bytes),
                _size(q.tiered_bytes),
                f"{q.gap_messages} in {len(q.gaps)}" if q.gaps else "0",
                _when(q.last_upload_ms),
                *([str(q.index_lag) if q.indexed_offset >= 0 else "-"] if indexed else []),
                q.error or ("not offloaded (topic filter)" if not q.offloaded else ""),
            )
    out.print()
    if report.next_offset is not None:
        out.print(f"listed {len(report.queues)} of {report.rows} queues (--limit)")
    if indexed:
        out.print(_index_line(report.index))
    out.print(_topics_line(report))
    for line in _pop_lines(report):
        out.print(line)


def _paused_line(report: StatusReport) -> str:
    pause = report.uploads
    minutes = max(dt.datetime.now(dt.UTC).timestamp() - pause.since_ms / 1000, 0) / 60
    by = f" by {pause.by}" if pause.by else ""
    why = f" ({pause.reason})" if pause.reason else ""
    return (
        f"uploads paused since {utc(pause.since_ms)} ({minutes:.0f} min){by}{why}: the lag grows "
        "until `rmq-tiered resume`; reads and expiry go on"
    )


def _summary(report: StatusReport) -> str:
    t = report.totals()
    return (
        f"{t['queues']} queues, {t['laggingQueues']} behind; lag {t['lagMessages']} messages "
        f"({_size(t['lagBytes'])}); {_size(t['tieredBytes'])} in the tier; "
        f"{t['gapMessages']} messages in gaps"
    )


def _topics_line(report: StatusReport) -> str:
    if not report.topics:
        return f"broker topics: none ({report.topics_source or 'topics.json is empty'})"
    shown = [
        f"{t.topic}({t.read_queue_nums}{'' if t.offloaded else ', not offloaded'})"
        for t in report.topics[:TOPICS_SHOWN]
    ]
    if len(report.topics) > TOPICS_SHOWN:
        shown.append(f"... and {len(report.topics) - TOPICS_SHOWN} more (--json lists them)")
    offloaded = sum(t.offloaded for t in report.topics)
    return (
        f"broker topics ({report.topics_source}): {len(report.topics)}, {offloaded} offloaded: "
        + " ".join(shown)
    )


def _pop_lines(report: StatusReport) -> list[str]:
    """POP dead letters per group and topic (none: no line), or why the state was not read."""
    if report.pop_state_error:
        return [f"POP state not read: {report.pop_state_error}"]
    if not report.pop_dead_letters:
        return []
    head = (
        "POP dead letters (delivered retryMaxTimes + 1 times, never acked; recorded by the "
        "replay port, not written to the broker's %DLQ%):"
    )
    lines = [head]
    for d in report.pop_dead_letters:
        latest = " ".join(f"{q}/{o}" for q, o in d.latest[-POP_LATEST_SHOWN:])
        lines.append(f"  group {d.group} topic {d.topic}: {d.count} (latest queue/offset {latest})")
    return lines


def _index_line(index: IndexStatusReport) -> str:
    sealed = [f for f in index.local_files if f.status == "SEALED"]
    unsealed = [f for f in index.local_files if f.status != "SEALED"]
    parts = [
        f"{len(unsealed)} open file ({sum(f.items for f in unsealed)} keys)"
        if len(unsealed) == 1
        else f"{len(unsealed)} open files ({sum(f.items for f in unsealed)} keys)",
        f"{len(sealed)} sealed waiting for compaction",
        f"{index.uploaded_files} uploaded ({_size(index.uploaded_bytes)}"
        + (
            f", keys stored {_when(index.uploaded_begin_ms)} .. {_when(index.uploaded_end_ms)})"
            if index.uploaded_files
            else ")"
        ),
        f"{index.lag_messages} uploaded messages not yet indexed",
    ]
    return "key index: " + "; ".join(parts) + (f"; {index.error}" if index.error else "")
