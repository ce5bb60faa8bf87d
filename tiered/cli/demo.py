"""``rmq-tiered demo``: the main job end to end on an embedded default, in a temporary directory.

Each step runs a real ``rmq-tiered`` command in this process and shows it as an operator would
type it: generate a broker store, offload it to a local posix tier, show ``status``, read cold
messages back under ``tieredStorageLevel=FORCE``, query a key, seal and compact the key index with
local Spark and query the key again from the uploaded index, then export the messages of one
property value to Parquet through the Spark data source over the tier.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import click

from tiered.cli.common import EXIT_DATA_ERROR
from tiered.cli.common import console

DEMO_MESSAGES = 20_000


@dataclass
class _Run:
    """The demo's working directory and what its steps measured."""

    root: Path
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def config(self) -> Path:
        return self.root / "tiered.conf"

    def command(self, title: str, *args: str, capture: bool = False) -> str:
        """Run ``rmq-tiered ARGS`` here, showing it; returns its stdout when ``capture``."""
        from tiered.cli import main

        console.rule(title)
        shown = " ".join(a if " " not in a else repr(a) for a in args)
        console.print(f"[bold]$ rmq-tiered {shown}[/bold]")
        out = io.StringIO()
        started = time.perf_counter()
        with contextlib.redirect_stdout(out) if capture else contextlib.nullcontext():
            try:
                main.main(args=list(args), prog_name="rmq-tiered", standalone_mode=False)
            except SystemExit as e:
                if e.code not in (0, None):
                    raise click.ClickException(f"step {title!r} failed (exit {e.code})") from e
        self.timings[title] = time.perf_counter() - started
        return out.getvalue()


def _write_config(run: _Run) -> None:
    run.config.write_text(
        "\n".join(
            (
                "# written by rmq-tiered demo",
                f"storePathRootDir={run.root / 'store'}",
                "mappedFileSizeCommitLog=8388608",
                "mappedFileSizeConsumeQueue=20000",
                "brokerClusterName=DefaultCluster",
                "brokerName=broker-a",
                "tieredBackendServiceProvider=posix",
                f"tieredStoreFilePath={run.root / 'tier'}",
                f"tieredDataDir={run.root / 'data'}",
                "tieredStorageLevel=FORCE",
                "",
            )
        ),
        encoding="utf-8",
    )


@click.command("demo")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep the demo's files here (default: a temporary directory, removed after).",
)
@click.option(
    "--messages",
    type=int,
    default=DEMO_MESSAGES,
    show_default=True,
    help="Messages in the generated store.",
)
def demo(workdir: Path | None, messages: int) -> None:
    """Generate a broker store, offload it, read it back cold, query a key, compact the index."""
    tmp = None
    if workdir is None:
        tmp = tempfile.mkdtemp(prefix="rmq-tiered-demo-")
        workdir = Path(tmp)
    try:
        _demo(_Run(workdir), messages)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _demo(run: _Run, messages: int) -> None:
    store = run.root / "store"
    run.command(
        "1. a broker store (generated, byte-exact)",
        "gen-store",
        str(store),
        "--seed",
        "7",
        "--topics",
        "2",
        "--queues",
        "4",
        "--messages",
        str(messages),
        "--min-body",
        "64",
        "--max-body",
        "2048",
        "--commitlog-file-size",
        str(8 << 20),
        "--cq-file-entries",
        "1000",
        "--v2-fraction",
        "0.1",
        "--ipv6-fraction",
        "0.1",
        "--compress-fraction",
        "0.1",
        "--keys-per-message",
        "2",
        "--java-client",
        "--user-property-fraction",
        "0.3",
        "--quiet",
    )
    _write_config(run)
    console.print(f"[dim]config: {run.config}[/dim]")
    summary = json.loads(
        run.command(
            "2. offload it to a posix tier",
            "dispatch",
            "--config",
            str(run.config),
            "--once",
            "--flush",
            "--json",
            capture=True,
        )
    )
    console.print_json(data=summary)
    run.command("3. status", "status", "--config", str(run.config))
    cfg = ("--config", str(run.config))
    fetched = [
        json.loads(line)
        for line in run.command(
            "4. cold messages by offset (tieredStorageLevel=FORCE: read from the tier)",
            "fetch",
            *cfg,
            "--topic",
            "GenTopic0",
            "--queue",
            "0",
            "--offset",
            "0",
            "--max-count",
            "3",
            "--json",
            capture=True,
        ).splitlines()
    ]
    for m in fetched:
        console.print(
            f"{m['topic']}/{m['queueId']}@{m['queueOffset']} tier={m['tier']} keys={m['keys']} "
            f"crcOk={m['crcOk']} physicalOffset(flat)={m['physicalOffset']}"
        )
    key = fetched[0]["keys"][0] if fetched else "GenTopic0-0-0-0"

    def query(title: str) -> list[dict[str, Any]]:
        lines = run.command(
            title, "query", *cfg, "--topic", "GenTopic0", "--key", key, "--json", capture=True
        ).splitlines()
        return [json.loads(line) for line in lines]

    hits = query("5. a message by key")
    for m in hits:
        console.print(f"{key} → {m['topic']}/{m['queueId']}@{m['queueOffset']} keys={m['keys']}")
    compaction = run.command(
        "6. seal the key index and compact it with local Spark, then upload it",
        "compact-index",
        *cfg,
        "--seal",
        "--engine",
        "spark",
        "--json",
        capture=True,
    )
    console.print(compaction.strip())
    hits_after = query("7. the same key, now from the uploaded (compacted) index")
    exported = json.loads(
        run.command(
            "8. SQL over the tier: the region=eu messages of GenTopic0 to Parquet, with Spark",
            "export",
            *cfg,
            "--topic",
            "GenTopic0",
            "--where",
            "properties['region'] = 'eu'",
            "--columns",
            "topic,queueId,queueOffset,storeTimestamp,tags,keys,properties",
            "--to",
            str(run.root / "export"),
            "--json",
            capture=True,
        )
    )
    console.print_json(data=exported)
    console.rule("report")
    console.print(
        f"offloaded {summary['messages']} messages ({summary['bytes'] / 1e6:.1f} MB) of "
        f"{summary['queues']} queues with {summary['requests']['total']} backend requests; "
        f"fetched {len(fetched)} cold messages; key {key!r}: {len(hits)} hit(s) before and "
        f"{len(hits_after)} after compaction; exported {exported['messages']} region=eu "
        "messages to Parquet; "
        + ", ".join(f"{k.split('.')[0]}: {v:.2f} s" for k, v in run.timings.items())
    )
    if (
        summary["messages"] != messages
        or not fetched
        or not hits
        or len(hits_after) != len(hits)
        or not exported["messages"]
    ):
        raise SystemExit(EXIT_DATA_ERROR)
