"""``rmq-tiered export``: messages of the tier to Parquet or JSON files, through Spark.

The common case of "SQL over the tier" without writing a Spark program: the ``rocketmq_tiered``
data source (:mod:`tiered.jobs.tier_source`) read with the options given here, an optional SQL
predicate, written by Spark (``local[*]`` by default, ``tieredIndexSparkMaster`` or ``--master``
for a cluster). A progress bar follows Spark's tasks; the summary names the messages written, the
bytes read from the backend and the seconds taken.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import click

from tiered.cli.common import emit_json
from tiered.cli.common import fail
from tiered.cli.config_option import config_option
from tiered.cli.config_option import load
from tiered.cli.config_option import setup_logging


@click.command("export")
@config_option
@click.option("--topic", multiple=True, help="Topic to export (repeat for several; default all).")
@click.option("--queue", "queue_ids", type=click.IntRange(0), multiple=True, help="Queue id.")
@click.option("--since", default=None, help="Stored at or after: ISO 8601 or epoch ms.")
@click.option("--until", default=None, help="Stored before: ISO 8601 or epoch ms.")
@click.option("--key", default=None, help="Only messages with this key (KEYS or UNIQ_KEY).")
@click.option("--where", default=None, help="A Spark SQL predicate over the table's columns.")
@click.option(
    "--columns", default=None, help="Comma-separated columns to write (default: all of them)."
)
@click.option(
    "--format", "fmt", type=click.Choice(["parquet", "json"]), default="parquet", show_default=True
)
@click.option("--to", "target", required=True, help="Output directory, or an fsspec URL.")
@click.option("--brokers", default=None, help="Brokers to read: names, or * for the whole cluster.")
@click.option(
    "--metadata",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Plan from this tieredStoreMetadata.json (a tier RocketMQ's plugin wrote).",
)
@click.option(
    "--on-corrupt", type=click.Choice(["fail", "skip"]), default="fail", show_default=True
)
@click.option("--master", default=None, help="Spark master (default tieredIndexSparkMaster).")
@click.option(
    "--storage-options",
    default=None,
    help="JSON of fsspec options for a --to URL (e.g. endpoint and credentials).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
def export(
    configs: tuple[Path, ...],
    topic: tuple[str, ...],
    queue_ids: tuple[int, ...],
    since: str | None,
    until: str | None,
    key: str | None,
    where: str | None,
    columns: str | None,
    fmt: str,
    target: str,
    brokers: str | None,
    metadata: Path | None,
    on_corrupt: str,
    master: str | None,
    storage_options: str | None,
    as_json: bool,
) -> None:
    """Export messages of the tier (read straight from the backend, in parallel) to --to as
    Parquet or JSON Lines files: every message, or those of --topic/--queue/--since/--until/--key
    and the --where predicate. Safe beside `run`: nothing is written to the tier or the broker.
    """
    cfg = load(configs)
    setup_logging(cfg, quiet=True)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    remote = "://" in target and not target.startswith("file://")
    out_dir = Path(target.removeprefix("file://"))
    if not remote and out_dir.exists():
        if not out_dir.is_dir() or any(out_dir.iterdir()):
            fail(f"--to {target} exists and is not an empty directory: give a new directory")
        out_dir.rmdir()  # Spark writes only where nothing is
    fs_options: dict[str, Any] = {}
    if storage_options:
        try:
            fs_options = json.loads(storage_options)
        except json.JSONDecodeError as e:
            fail(f"--storage-options is not JSON ({e.msg} at character {e.pos})")
    stats = Path(tempfile.mkdtemp(prefix="rmq-tiered-export-stats-"))
    staging = Path(tempfile.mkdtemp(prefix="rmq-tiered-export-")) / "out" if remote else out_dir
    options = {
        "config": ",".join(str(p) for p in configs),
        "statsDir": str(stats),
        "onCorrupt": on_corrupt,
    }
    if not configs:  # the environment's configuration, passed key by key
        options |= {k: v for k, v in cfg.as_properties().items() if v}
        options["objectStoreSecretKey"] = cfg.object_store_secret_key.get_secret_value()
    for name, value in (
        ("topic", ",".join(topic)),
        ("queueId", ",".join(str(q) for q in queue_ids)),
        ("since", since),
        ("until", until),
        ("key", key),
        ("brokers", brokers),
        ("metadata", str(metadata) if metadata else None),
    ):
        if value:
            options[name] = value
    started = time.monotonic()
    from pyspark.sql import SparkSession

    from tiered.jobs.session import local_spark_session
    from tiered.jobs.tier_source import TierSource

    ours = SparkSession.getActiveSession() is None  # else a caller's session: leave it running
    spark = local_spark_session(
        master or cfg.tiered_index_spark_master, app_name="rmq-tiered-export"
    )
    try:
        spark.dataSource.register(TierSource)
        reader = spark.read.format("rocketmq_tiered").options(**options)
        if columns:
            from tiered.jobs.tier_batch import COLUMNS

            kinds = dict(COLUMNS)
            wanted = [c.strip() for c in columns.split(",") if c.strip()]
            unknown = [c for c in wanted if c not in kinds]
            if unknown:
                fail(f"--columns: {', '.join(unknown)} not among {', '.join(kinds)}")
            reader = reader.schema(", ".join(f"`{c}` {kinds[c]}" for c in wanted))
        df = reader.load()
        if where:
            df = df.where(where)
        with _progress(spark):
            df.write.format(fmt).mode("errorifexists").save(str(staging))
        written = spark.read.format(fmt).load(str(staging)).count()
    finally:
        if ours:
            spark.stop()
    read = [json.loads(p.read_text()) for p in stats.glob("*.json")]
    shutil.rmtree(stats, ignore_errors=True)
    if remote:
        _upload(staging, target, fs_options)
        shutil.rmtree(staging.parent, ignore_errors=True)
    summary = {
        "messages": written,
        "messagesRead": sum(r["messages"] for r in read),
        "skippedCorrupt": sum(r["skipped"] for r in read),
        "bytesRead": sum(r["bytes"] for r in read),
        "objects": len({o for r in read for o in r["objects"]}),
        "tasks": len(read),
        "seconds": round(time.monotonic() - started, 2),
        "format": fmt,
        "to": target,
    }
    if as_json:
        emit_json(summary)
    else:
        click.echo(
            f"exported {written} message(s) to {target} ({fmt}): read {summary['bytesRead']} bytes "
            f"from {summary['objects']} object(s) in {summary['tasks']} task(s), "
            f"{summary['seconds']} s"
            + (
                f"; skipped {summary['skippedCorrupt']} damaged"
                if summary["skippedCorrupt"]
                else ""
            )
        )


def _upload(local: Path, target: str, options: dict[str, Any]) -> None:
    import fsspec

    fs, root = fsspec.core.url_to_fs(target, **options)
    for path in sorted(local.rglob("*")):
        if path.is_file() and not path.name.startswith((".", "_")):
            fs.put_file(str(path), f"{root.rstrip('/')}/{path.relative_to(local).as_posix()}")


class _progress:  # noqa: N801 (a context manager used like a function)
    """A progress bar of the running Spark stages' tasks (stderr), while the block runs."""

    def __init__(self, spark: Any):
        self.tracker = spark.sparkContext.statusTracker()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="export-progress", daemon=True)

    def __enter__(self) -> None:
        self.thread.start()

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)

    def _run(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn
        from rich.progress import MofNCompleteColumn
        from rich.progress import Progress
        from rich.progress import TimeElapsedColumn

        console = Console(stderr=True)
        columns = (BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as bar:
            task = bar.add_task("tasks", total=None)
            while not self.stop.wait(0.5):
                done = total = 0
                for stage in self.tracker.getActiveStageIds():
                    info = self.tracker.getStageInfo(stage)
                    if info is not None:
                        done += info.numCompletedTasks
                        total += info.numTasks
                if total:
                    bar.update(task, completed=done, total=total)
