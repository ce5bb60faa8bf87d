"""``rmq-tiered compact-index``: compact SEALED index files and upload them, or stage them for a
``spark-submit`` job on a cluster."""

from __future__ import annotations

import time
from pathlib import Path
from typing import cast

import click

from tiered.cli.common import emit_json
from tiered.cli.common import fail
from tiered.cli.common import verbose_option
from tiered.cli.config_option import config_option
from tiered.cli.config_option import load
from tiered.cli.config_option import setup_logging
from tiered.cli.config_option import verbosity
from tiered.config import TieredConfig
from tiered.core.data_dir_lock import DataDirLock
from tiered.core.sidecar import index_reader
from tiered.index.compaction import CompactionResult
from tiered.index.compaction import Engine
from tiered.index.service import IndexService
from tiered.index.staging import submit_command
from tiered.metadata import MetadataStore
from tiered.metadata import mirror_key_for
from tiered.providers import build_provider


@click.command("compact-index")
@config_option
@click.option("--seal", is_flag=True, help="Seal the UNSEALED index file first.")
@click.option(
    "--stage",
    is_flag=True,
    help="Only stage the SEALED files in the backend for a spark-submit job and print its "
    "command line (without --seal this takes no lock and is safe beside `run`).",
)
@click.option(
    "--engine",
    type=click.Choice(["auto", "numpy", "spark"]),
    default="auto",
    show_default=True,
    help="auto: numpy below 1M items, the PySpark job (tieredIndexSparkMaster) above.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON report per file.")
@verbose_option
def compact_index(
    configs: tuple[Path, ...], seal: bool, stage: bool, engine: str, as_json: bool, verbose: int
) -> None:
    """Compact every SEALED tiered index file (--seal: the UNSEALED one too), upload each as an
    INDEX segment, record it and delete its local copies; or, with --stage, put them where a
    `spark-submit` job compacts them (the sidecar picks the results up at its next compaction).

    Stop `rmq-tiered run` first (except for --stage alone): this takes the data-dir lock.
    """
    cfg = load(configs)
    setup_logging(cfg, verbose_level=verbosity(verbose), quiet=True)
    if cfg.tiered_store_read_only:
        fail("tieredStoreReadOnly=true: compact-index uploads index files; run it with the "
             "configuration of the sidecar that writes this tier")  # fmt: skip
    if not cfg.uploads:
        fail(
            f"brokerRole={cfg.broker_role} brokerId={cfg.broker_id}: only the master's sidecar "
            "uploads index files; run compact-index there"
        )
    started = time.monotonic()
    if stage and not seal:
        results = _stage_beside_run(cfg)
    else:
        results = _with_lock(cfg, seal=seal, stage=stage, engine=engine, as_json=as_json)
    _report(results, as_json, time.monotonic() - started)
    if stage:
        command = submit_command(cfg)
        if command is None:
            fail(
                f"tieredBackendServiceProvider={cfg.tiered_backend_service_provider!r} is not "
                "reachable from a Spark cluster; stage with posix, s3 or fsspec"
            )
        click.echo(command)
    if any(r.action == "failed" for r in results):
        fail("some index files could not be compacted or uploaded (see above); run again", 1)


def _stage_beside_run(cfg: TieredConfig) -> list[CompactionResult]:
    with index_reader(cfg) as service:
        return service.compact_sealed(stage_all=True)


def _with_lock(
    cfg: TieredConfig, *, seal: bool, stage: bool, engine: str, as_json: bool
) -> list[CompactionResult]:
    lock = DataDirLock(cfg.tiered_data_dir)
    lock.acquire()
    provider = build_provider(cfg)
    try:
        key = mirror_key_for(cfg.broker_cluster_name, cfg.broker_name)
        metadata = MetadataStore(
            cfg.tiered_data_dir,
            mirror=provider,
            mirror_key=key,
            journal_min_bytes=cfg.tiered_metadata_journal_min_bytes,
        )
        metadata.load()
        service = IndexService(cfg, provider, metadata, engine=cast(Engine, engine))
        with service.start(catch_up=False):
            if seal:
                sealed = service.seal()
                if sealed is not None:
                    # with --json, stdout carries only the JSON reports
                    click.echo(f"sealed {sealed.path} ({sealed.item_count} items)", err=as_json)
            results = service.compact_sealed(stage_all=stage)
        metadata.compact()  # leave the file whole, as a stopped sidecar does
        return results
    finally:
        provider.close()
        lock.release()


def _report(results: list[CompactionResult], as_json: bool, seconds: float) -> None:
    if as_json:
        for r in results:
            emit_json(r.to_json())
    for r in results:
        line = (
            f"index file {r.begin_timestamp}: {r.items} items, {r.action}"
            + (f" ({r.engine}, {r.bytes} bytes" if r.engine else "")
            + (f", base offset {r.base_offset}" if r.base_offset >= 0 else "")
            + (")" if r.engine else "")
            + f" in {r.seconds:.2f} s"
            + (f": {r.error}" if r.error else "")
        )
        click.echo(line, err=as_json)
    click.echo(
        f"{len(results)} SEALED index file(s) handled in {seconds:.2f} s "
        f"(compaction {sum(r.seconds for r in results):.2f} s)",
        err=as_json,
    )
