"""``rmq-tiered demo``: the main job end to end on an embedded default, in a temporary directory."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from pathlib import Path

import click
from rich.table import Table

from tiered.broker import consumequeue as cqmod
from tiered.broker import indexfile, verify
from tiered.broker.commitlog import CommitLog
from tiered.broker.generator import GenSpec, generate_store
from tiered.cli.common import EXIT_DATA_ERROR, console, warn

DEMO_SPEC = GenSpec(
    seed=7,
    topics=2,
    queues=4,
    messages=20_000,
    min_body=64,
    max_body=2048,
    commitlog_file_size=8 << 20,
    cq_file_entries=1000,
    v2_fraction=0.1,
    ipv6_fraction=0.1,
    compress_fraction=0.1,
    keys_per_message=2,
    with_index=True,
    index_slots=100_003,
    index_max_items=50_000,
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
    default=DEMO_SPEC.messages,
    show_default=True,
    help="Messages in the generated store.",
)
def demo(workdir: Path | None, messages: int) -> None:
    """Generate a broker store, read it back read-only, cross-check it and query a key."""
    tmp = None
    if workdir is None:
        tmp = tempfile.mkdtemp(prefix="rmq-tiered-demo-")
        workdir = Path(tmp)
    try:
        _run(workdir, messages)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _run(workdir: Path, messages: int) -> None:
    store = workdir / "store"
    spec = dataclasses.replace(DEMO_SPEC, messages=messages)
    console.rule("1. a broker store (generated, byte-exact)")
    gen = generate_store(store, spec)
    console.print(
        f"{gen.messages} messages, {gen.bytes / 1e6:.1f} MB, {gen.commitlog_files} commitlog "
        f"files, "
        f"{len(gen.queues)} queues, {gen.index_files} index files in {gen.seconds:.2f} s "
        f"({gen.mb_per_s:.0f} MB/s) under {store}"
    )

    console.rule("2. read back read-only: every consumequeue unit against the commitlog")
    t0 = time.perf_counter()
    check = verify.check_store(
        store, spec.commitlog_file_size, spec.cq_file_entries * cqmod.CQ_UNIT_SIZE
    )
    table = Table("topic", "queue", "min", "max", "checked", "problems")
    for q in check.queues:
        table.add_row(
            q.topic,
            str(q.queue_id),
            str(q.min_offset),
            str(q.max_offset),
            str(q.checked),
            str(len(q.problems)),
        )
    console.print(table)
    console.print(f"{check.checked} units checked in {time.perf_counter() - t0:.2f} s")

    console.rule("3. a message by (topic, queue, offset)")
    log = CommitLog(store / "commitlog", spec.commitlog_file_size)
    first = check.queues[0]
    cq = cqmod.ConsumeQueue.for_queue(
        store / "consumequeue",
        first.topic,
        first.queue_id,
        file_size=spec.cq_file_entries * cqmod.CQ_UNIT_SIZE,
    )
    unit = cq.read_units(first.min_offset, 1)[0]
    m = log.read_message(int(unit["offset"]), int(unit["size"]))
    console.print(
        f"{m.topic}/{m.queue_id}@{m.queue_offset}: {m.version}, {m.total_size} B, "
        f"keys={m.keys}, tags={m.tags!r}, crcOk={m.crc_ok}, "
        f"body={m.decompressed_body()[:40]!r}…"
    )

    console.rule("4. a key in the broker's IndexFile")
    key = m.keys[0] if m.keys else m.properties.get("UNIQ_KEY", "")
    hits: list[indexfile.IndexHit] = []
    for path in sorted((store / "index").iterdir()):
        with indexfile.IndexFile.open(path, slots=spec.index_slots) as idx:
            hits.extend(idx.lookup(m.topic, key))
    for h in hits:
        found = log.read_message(h.phys_offset)
        console.print(
            f"{m.topic}#{key} → physical offset {h.phys_offset}: "
            f"{found.topic}/{found.queue_id}@{found.queue_offset} keys={found.keys}"
        )

    console.rule("report")
    console.print(
        f"messages {gen.messages}, bytes {gen.bytes}, units cross-checked {check.checked}, "
        f"problems {len(check.problems)}, key hits {len(hits)}"
    )
    for p in check.problems:
        warn(p)
    if check.problems or not hits:
        raise SystemExit(EXIT_DATA_ERROR)
