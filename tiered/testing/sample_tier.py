"""A sample tier for tests and benchmarks: a generated broker store, offloaded, then aged.

:func:`build_sample_tier` writes a store with :func:`~tiered.broker.generator.generate_store`,
captures every message from the broker's files (what each must read back as), offloads everything
with one flushing dispatcher pass through :class:`~tiered.core.sidecar.Sidecar`, then deletes the
broker's oldest commitlog files as its cleanup would -- so the oldest offsets exist only in the
tier. Nothing here is used by the sidecar itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tiered.broker.generator import GenSpec
from tiered.broker.generator import generate_store
from tiered.config import StorageLevel
from tiered.config import TieredConfig
from tiered.config import load_config
from tiered.core.local_source import LocalSource
from tiered.core.message_store import TieredMessageStore
from tiered.core.sidecar import Sidecar
from tiered.core.sidecar import build_provider
from tiered.core.topic_filter import TopicFilter
from tiered.providers import Provider
from tiered.providers import WrappedProvider

QueueKey = tuple[str, int]
MessageKey = tuple[str, int, int]


def sample_config(
    store: Path, work: Path, spec: GenSpec, provider: str, **keys: Any
) -> TieredConfig:
    """A configuration over ``store`` with small flat segments (both files roll), no
    group-commit hold, the HTTP API and the replay endpoint on any free port; ``keys``
    (upstream names) override."""
    values = {
        "storePathRootDir": str(store),
        "mappedFileSizeCommitLog": str(spec.commitlog_file_size),
        "mappedFileSizeConsumeQueue": str(spec.cq_file_entries * 20),
        "brokerClusterName": "DefaultCluster",
        "brokerName": "broker-a",
        "tieredDataDir": str(work / "data"),
        "tieredBackendServiceProvider": provider,
        "tieredStoreFilePath": str(work / "tier"),
        "tieredStoreCommitLogMaxSize": str(96 << 10),
        "tieredStoreConsumeQueueMaxSize": str(250 * 20),
        "tieredStoreGroupCommitCount": "256",
        "tieredStoreGroupCommitSize": str(64 << 10),
        "tieredStoreGroupCommitTimeout": "0",
        "objectStoreGroupCommitSize": str(64 << 10),
        "objectStoreGroupCommitTimeout": "0",
        "tieredStoreDispatchIntervalMs": "50",
        "tieredHttpPort": "0",
        "tieredRemotingPort": "0",
    }
    values.update({k: str(v) for k, v in keys.items()})
    return load_config([], env={}, overrides=values)


def rolling_spec(**changes: Any) -> GenSpec:
    """A small store whose files roll often (256 KiB commitlog files, 400-unit consumequeue
    files) with v1 and v2 messages, IPv6 hosts and compressed bodies; ``changes`` (seed, topics,
    queues, messages, ...) override."""
    spec = GenSpec(
        seed=11,
        topics=2,
        queues=3,
        messages=3000,
        min_body=16,
        max_body=600,
        commitlog_file_size=256 << 10,
        cq_file_entries=400,
        v2_fraction=0.3,
        ipv6_fraction=0.3,
        compress_fraction=0.3,
    )
    return dataclasses.replace(spec, **changes)


@dataclasses.dataclass
class OffloadCase:
    """Broker stores and sidecar configurations for offload tests, under ``work``:
    ``store(spec=None, name="store")`` generates a store (``spec`` by default) and returns its
    root; ``config(store, provider="memory", *, spec=None, work=None, **keys)`` configures a
    sidecar for it with small flat segments (64 KiB commitlog, 200-unit consumequeue) so both
    roll and group commits of 128 messages / 32 KiB (object stores too), no hold time; ``keys``
    (upstream names) override."""

    work: Path
    spec: GenSpec

    def store(self, spec: GenSpec | None = None, name: str = "store") -> Path:
        root = self.work / name
        generate_store(root, spec or self.spec)
        return root

    def config(self, store: Path, provider: str = "memory", **keys: Any) -> TieredConfig:
        spec: GenSpec = keys.pop("spec", None) or self.spec
        work: Path = keys.pop("work", None) or self.work
        settings: dict[str, Any] = {
            "tieredStoreCommitLogMaxSize": 64 << 10,
            "tieredStoreConsumeQueueMaxSize": 200 * 20,
            "tieredStoreGroupCommitCount": 128,
            "tieredStoreGroupCommitSize": 32 << 10,
            "objectStoreGroupCommitSize": 32 << 10,
        }
        return sample_config(store, work, spec, provider, **(settings | keys))


@dataclasses.dataclass
class SampleTier:
    """An offloaded store: its configuration, the open sidecar, what each message must be."""

    cfg: TieredConfig
    provider: Provider
    sidecar: Sidecar
    expected: dict[MessageKey, bytes]
    local_min: dict[QueueKey, int]

    def level(self, level: StorageLevel | str, **changes: Any) -> TieredConfig:
        """The configuration with another storage level (and other changed fields)."""
        value = level if isinstance(level, StorageLevel) else StorageLevel[level]
        return self.cfg.model_copy(update={"tiered_storage_level": value, **changes})

    def store(self, level: StorageLevel | str | None = None, **changes: Any) -> TieredMessageStore:
        """A read store over the sidecar's flat files and a fresh view of the broker's store."""
        cfg = self.cfg if level is None else self.level(level, **changes)
        return TieredMessageStore(cfg, self.sidecar.flat_store, LocalSource(cfg))

    @property
    def queues(self) -> list[QueueKey]:
        """Every queue of the store."""
        return sorted(self.local_min)


def build_sample_tier(
    work: Path,
    spec: GenSpec,
    backend: str = "memory",
    *,
    deleted_files: int = 2,
    wrap: Callable[[Provider], WrappedProvider] | None = None,
    capture: bool = True,
    **keys: Any,
) -> SampleTier:
    """Generate a store under ``work``, capture every message (unless not ``capture``), offload
    everything, delete the broker's ``deleted_files`` oldest commitlog files. ``wrap`` wraps the
    provider (e.g. to count reads). The caller closes ``tier.sidecar``.

    Raises:
        AssertionError: the offload failed or did not move every offloadable message.
    """
    store = work / "store"
    generate_store(store, spec)
    cfg = sample_config(store, work, spec, backend, **keys)
    local = LocalSource(cfg)
    expected: dict[MessageKey, bytes] = {}
    total = 0
    allowed = TopicFilter.from_config(cfg).allows
    for topic, qid in local.queues():
        lo, hi = local.min_offset(topic, qid), local.max_offset(topic, qid)
        total += (hi - lo) if allowed(topic) else 0
        if capture:
            for q, data, _ in local.read(topic, qid, lo, hi - lo, 1 << 40):
                expected[(topic, qid, q)] = data
    provider: Provider = build_provider(cfg)
    if wrap is not None:
        provider = wrap(provider)
    sidecar = Sidecar(cfg, provider).open()
    try:
        report = sidecar.dispatcher.run_pass(flush=True)
        if report.errors or report.messages != total:
            raise AssertionError(f"offload moved {report.messages} of {total}: {report.errors}")
    except BaseException:
        sidecar.close()
        raise
    for f in sorted((store / "commitlog").iterdir())[:deleted_files]:
        f.unlink()
    after = LocalSource(cfg)
    minimum = {(t, q): after.min_offset(t, q) for t, q in after.queues()}
    return SampleTier(cfg, provider, sidecar, expected, minimum)
