"""``rmq-tiered gen-store``: write a byte-exact broker store for tests, demos and benchmarks."""

from __future__ import annotations

from pathlib import Path

import click
from rich.progress import Progress

from tiered.broker.generator import KEY_MIXES
from tiered.broker.generator import GenSpec
from tiered.broker.generator import generate_store
from tiered.cli.common import commitlog_file_size_option
from tiered.cli.common import console


@click.command("gen-store")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed.")
@click.option("--topics", type=int, default=2, show_default=True, help="Number of topics.")
@click.option("--queues", type=int, default=4, show_default=True, help="Queues per topic.")
@click.option("--messages", type=int, default=1000, show_default=True, help="Total messages.")
@click.option("--min-body", type=int, default=16, show_default=True, help="Smallest body, bytes.")
@click.option("--max-body", type=int, default=1024, show_default=True, help="Largest body, bytes.")
@commitlog_file_size_option
@click.option(
    "--cq-file-entries",
    type=int,
    default=300_000,
    show_default=True,
    help="Consumequeue units per file (mappedFileSizeConsumeQueue / 20).",
)
@click.option("--v2-fraction", type=float, default=0.0, help="Share of v2-magic messages.")
@click.option("--ipv6-fraction", type=float, default=0.0, help="Share of IPv6 born/store hosts.")
@click.option("--compress-fraction", type=float, default=0.0, help="Share of compressed bodies.")
@click.option("--keys-per-message", type=int, default=1, show_default=True, help="KEYS tokens.")
@click.option(
    "--key-mix",
    type=click.Choice(KEY_MIXES),
    default="plain",
    show_default=True,
    help="plain: distinct ASCII keys; realistic: shared, duplicate, blank and 3 % non-ASCII "
    "tokens.",
)
@click.option("--with-index", is_flag=True, help="Also write broker IndexFiles (store/index).")
@click.option(
    "--start-ms",
    type=int,
    default=1_700_000_000_000,
    show_default=True,
    help="Store time of the first message, epoch ms.",
)
@click.option(
    "--java-client",
    is_flag=True,
    help="Messages as RocketMQ's Java client and broker write them (UNIQ_KEY ids, property "
    "order); the four options below need it.",
)
@click.option(
    "--user-property-fraction",
    type=float,
    default=0.0,
    help="Share with user properties (region=eu|us, a non-ASCII name) and a non-ASCII KEYS token.",
)
@click.option("--client-ipv6-fraction", type=float, default=0.0, help="Share from IPv6 clients.")
@click.option("--delay-fraction", type=float, default=0.0, help="Share of delayed messages.")
@click.option(
    "--batch-fraction", type=float, default=0.0, help="Share of sends that start a batch."
)
@click.option("--append", is_flag=True, help="Continue an existing store like a running broker.")
@click.option("--quiet", is_flag=True, help="No progress bar or summary.")
def gen_store(
    out_dir: Path,
    seed: int,
    topics: int,
    queues: int,
    messages: int,
    min_body: int,
    max_body: int,
    commitlog_file_size: int,
    cq_file_entries: int,
    v2_fraction: float,
    ipv6_fraction: float,
    compress_fraction: float,
    keys_per_message: int,
    key_mix: str,
    with_index: bool,
    start_ms: int,
    java_client: bool,
    user_property_fraction: float,
    client_ipv6_fraction: float,
    delay_fraction: float,
    batch_fraction: float,
    append: bool,
    quiet: bool,
) -> None:
    """Write a broker store (commitlog, consumequeue, topics.json, checkpoint) to OUT_DIR."""
    spec = GenSpec(
        seed=seed,
        topics=topics,
        queues=queues,
        messages=messages,
        min_body=min_body,
        max_body=max_body,
        commitlog_file_size=commitlog_file_size,
        cq_file_entries=cq_file_entries,
        v2_fraction=v2_fraction,
        ipv6_fraction=ipv6_fraction,
        compress_fraction=compress_fraction,
        keys_per_message=keys_per_message,
        key_mix=key_mix,
        with_index=with_index,
        start_ms=start_ms,
        java_client=java_client,
        user_property_fraction=user_property_fraction,
        client_ipv6_fraction=client_ipv6_fraction,
        delay_fraction=delay_fraction,
        batch_fraction=batch_fraction,
        append=append,
    )
    if quiet:
        report = generate_store(out_dir, spec)
        return
    with Progress(console=console.rich, transient=True) as progress:
        task = progress.add_task("writing messages", total=messages)
        report = generate_store(out_dir, spec, lambda done: progress.update(task, completed=done))
    console.print(
        f"{'appended' if append else 'wrote'} {report.messages} messages "
        f"({report.bytes / 1e6:.1f} MB) to {out_dir}: {report.commitlog_files} commitlog files, "
        f"{len(report.queues)} queues, {report.index_files} index files "
        f"in {report.seconds:.2f} s ({report.mb_per_s:.0f} MB/s)"
    )
