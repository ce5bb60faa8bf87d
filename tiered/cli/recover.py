"""``rmq-tiered recover``: rebuild the local tiered metadata from the backend."""

from __future__ import annotations

import os
from pathlib import Path

import click

from tiered.cli.common import console
from tiered.cli.common import fail
from tiered.cli.common import verbose_option
from tiered.cli.config_option import config_option
from tiered.cli.config_option import load
from tiered.cli.config_option import setup_logging
from tiered.cli.config_option import verbosity
from tiered.config import TieredConfig
from tiered.core.data_dir_lock import DataDirLock
from tiered.core.metadata_rebuild import RebuildReport
from tiered.core.metadata_rebuild import merge_listing
from tiered.core.metadata_rebuild import rebuild_from_backend
from tiered.errors import MetadataError
from tiered.file.flat_file_store import FlatFileStore
from tiered.metadata import MetadataStore
from tiered.metadata import mirror_key_for
from tiered.metadata import now_ms
from tiered.metadata.metadata_store import FILE_NAME
from tiered.providers import Provider
from tiered.providers import build_provider
from tiered.source.local_source import LocalSource


@click.command("recover")
@config_option
@click.option(
    "--from-backend",
    is_flag=True,
    help="Rebuild by listing the backend's segments (when the metadata mirror is gone too).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Replace a valid local metadata file (it is kept beside as a copy).",
)
@verbose_option
def recover(configs: tuple[Path, ...], from_backend: bool, force: bool, verbose: int) -> None:
    """Rebuild {tieredDataDir}/config/tieredStoreMetadata.json from the backend mirror (or, with
    --from-backend, from the segments themselves), then reconcile every queue with the backend.

    Stop `rmq-tiered run` first: recover takes the same data-dir lock.
    """
    cfg = load(configs)
    setup_logging(cfg, verbose_level=verbosity(verbose), quiet=True)
    if cfg.tiered_store_read_only:
        fail("tieredStoreReadOnly=true: recover writes the tier (the metadata mirror, the "
             "reconciled segments); run it with the configuration of the sidecar that writes "
             "this tier")  # fmt: skip
    provider = build_provider(cfg)
    key = mirror_key_for(cfg.broker_cluster_name, cfg.broker_name)
    lock = DataDirLock(cfg.tiered_data_dir)
    lock.acquire()
    try:
        if from_backend:
            metadata = _fresh_store(cfg, provider, key, force)
            report = rebuild_from_backend(
                provider, metadata, cfg.broker_cluster_name, cfg.broker_name
            )
        else:
            try:
                metadata = MetadataStore.recover_from_mirror(
                    cfg.tiered_data_dir,
                    provider,
                    key,
                    force=force,
                    journal_min_bytes=cfg.tiered_metadata_journal_min_bytes,
                )
            except MetadataError as e:
                fail(f"{e} (or rebuild from the segments with --from-backend)")
            report = RebuildReport("mirror")
            report.added_from_listing = merge_listing(
                provider, metadata, cfg.broker_cluster_name, cfg.broker_name
            )
            report.topics = len(metadata.topics())
            report.queues = len(metadata.queues())
        store = FlatFileStore.from_config(cfg, provider, metadata)
        reconciled = store.load(LocalSource(cfg).units_lookup)
        metadata.compact()  # the file alone holds it all (for the Java plugin too)
    finally:
        lock.release()
        provider.close()
    changed = [r for r in reconciled if r.changed]
    console.print(
        f"recovered the tiered metadata from the {report.source}: {report.topics} topics, "
        f"{report.queues} queues"
        + (f", {report.segments} segments ({report.bytes} bytes)" if report.segments else "")
        + (
            f", {report.added_from_listing} segments added from the listing"
            if report.added_from_listing
            else ""
        )
        + f"; {len(changed)} queues reconciled with the backend -> {metadata.path}"
    )


def _fresh_store(cfg: TieredConfig, provider: Provider, key: str, force: bool) -> MetadataStore:
    """An empty, loaded store; an existing file is kept aside (``--force``) or refused."""
    data_dir = cfg.tiered_data_dir
    path = Path(data_dir) / "config" / FILE_NAME
    if path.exists():
        if not force:
            fail(
                f"{path} exists; pass --force to rebuild it from the backend (the current file "
                "is kept beside it)"
            )
        for old in (path, path.with_name(FILE_NAME + ".bak")):
            if old.exists():
                os.replace(old, old.with_name(f"{old.name}.replaced-{now_ms()}"))
    store = MetadataStore(
        data_dir,
        mirror=provider,
        mirror_key=key,
        journal_min_bytes=cfg.tiered_metadata_journal_min_bytes,
    )
    store.load()
    return store
