"""A sample tier for tests and benchmarks: a generated broker store, offloaded, then aged.

:func:`build_sample_tier` writes a store with :func:`~tiered.broker.generator.generate_store`,
captures every message from the broker's files (what each must read back as), offloads everything
with one flushing dispatcher pass through :class:`~tiered.core.sidecar.Sidecar`, then deletes the
broker's oldest commitlog files as its cleanup would -- so the oldest offsets exist only in the
tier. :class:`SidecarCase` makes the stores and configurations of one test and
:func:`write_conf` writes a configuration as the properties file the CLI reads. Nothing here is
used by the sidecar itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tiered.broker.generator import GenReport
from tiered.broker.generator import GenSpec
from tiered.broker.generator import generate_store
from tiered.config import StorageLevel
from tiered.config import TieredConfig
from tiered.config import load_config
from tiered.core.sidecar import Sidecar
from tiered.providers import Provider
from tiered.providers import WrappedProvider
from tiered.providers import build_provider
from tiered.read.message_store import TieredMessageStore
from tiered.source.local_source import LocalSource
from tiered.source.topic_filter import TopicFilter

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


SMALL_SEGMENTS: dict[str, Any] = {
    "tieredStoreCommitLogMaxSize": 64 << 10,
    "tieredStoreConsumeQueueMaxSize": 200 * 20,
    "tieredStoreGroupCommitCount": 128,
    "tieredStoreGroupCommitSize": 32 << 10,
    "objectStoreGroupCommitSize": 32 << 10,
}
"""Flat segments small enough that both files roll in a test store (64 KiB commitlog, 200-unit
consumequeue) and group commits of 128 messages / 32 KiB (object stores too)."""


@dataclasses.dataclass
class SidecarCase:
    """Broker stores and sidecar configurations for one test, under ``work``.

    ``store(spec=None, name="store", **changes)`` generates a store of ``spec`` (the case's by
    default, with ``changes`` to its fields) and returns its root; ``append(store, **changes)``
    writes more into it; ``config(store, provider="memory", *, spec=None, work=None, **keys)``
    configures a sidecar for it (:func:`sample_config` with the spec the store was generated
    with, then the case's ``keys``, then these); ``conf_file(cfg, **keys)`` writes a
    configuration as a properties file for the CLI."""

    work: Path
    spec: GenSpec
    keys: dict[str, Any] = dataclasses.field(default_factory=dict)
    _specs: dict[Path, GenSpec] = dataclasses.field(default_factory=dict, repr=False)
    _files: int = dataclasses.field(default=0, repr=False)

    def store(self, spec: GenSpec | None = None, name: str = "store", **changes: Any) -> Path:
        root = self.work / name
        self._specs[root] = dataclasses.replace(spec or self.spec, **changes)
        generate_store(root, self._specs[root])
        return root

    def append(self, store: Path, **changes: Any) -> GenReport:
        """The broker writes more: append messages of the spec ``store`` was generated with, with
        ``changes`` (a new ``seed`` and ``messages`` at least)."""
        spec = dataclasses.replace(self._specs.get(store, self.spec), **changes, append=True)
        return generate_store(store, spec)

    def config(self, store: Path, provider: str = "memory", **keys: Any) -> TieredConfig:
        spec: GenSpec = keys.pop("spec", None) or self._specs.get(store, self.spec)
        work: Path = keys.pop("work", None) or self.work
        return sample_config(store, work, spec, provider, **(self.keys | keys))

    def conf_file(self, cfg: TieredConfig, **keys: Any) -> Path:
        self._files += 1
        return write_conf(cfg, self.work / f"sidecar-{self._files}.conf", **keys)


def write_conf(cfg: TieredConfig, path: Path, **keys: Any) -> Path:
    """Write ``cfg`` (``keys``, upstream names, override) as a properties file the CLI reads,
    the secret included, and return ``path``."""
    props = cfg.as_properties() | {
        "objectStoreSecretKey": cfg.object_store_secret_key.get_secret_value()
    }
    props |= {k: str(v) for k, v in keys.items()}
    # a backslash escapes in a properties file: paths and values keep theirs
    lines = (f"{k}={v}".replace("\\", "\\\\") for k, v in props.items() if v)
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


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
