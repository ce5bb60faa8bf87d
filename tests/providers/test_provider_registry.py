"""The provider registry: names, upstream aliases, entry points, and building from the config."""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path
from typing import Any

import pytest
from tiered.providers import FsspecProvider
from tiered.providers import MemoryProvider
from tiered.providers import PosixProvider
from tiered.providers import ProviderRegistry
from tiered.providers import S3Provider
from tiered.providers import from_config
from tiered.providers import provider_from_settings
from tiered.providers import registry

from tiered.config import TieredConfig
from tiered.errors import ConfigError

UPSTREAM = "org.apache.rocketmq.tieredstore.provider."


def test_builtins_form_a_sorted_table() -> None:
    table = ProviderRegistry(entry_point_group=None).table()
    assert [e.name for e in table] == ["fsspec", "memory", "posix", "s3"]
    assert all(e.source == "builtin" for e in table)
    assert registry.names()[:4] == sorted(registry.names())[:4]


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("posix", PosixProvider),
        ("memory", MemoryProvider),
        ("s3", S3Provider),
        ("fsspec", FsspecProvider),
        (f"{UPSTREAM}PosixFileSegment", PosixProvider),
        (f"{UPSTREAM}posix.PosixFileSegment", PosixProvider),
        (f"{UPSTREAM}MemoryFileSegment", MemoryProvider),
        (f"{UPSTREAM}memory.MemoryFileSegment", MemoryProvider),
    ],
)
def test_names_and_upstream_aliases(name: str, cls: type) -> None:
    assert registry.resolve(name) is cls


def test_unknown_names_list_what_exists() -> None:
    with pytest.raises(ConfigError, match=r"'nope' is not a provider; available: fsspec, memory"):
        registry.resolve("nope")


def test_nothing_is_replaced_silently() -> None:
    reg = ProviderRegistry(entry_point_group=None)
    with pytest.raises(ConfigError, match="taken"):
        reg.register("memory", PosixProvider)
    with pytest.raises(ConfigError, match="taken"):
        reg.register("other", PosixProvider, aliases=(f"{UPSTREAM}MemoryFileSegment",))
    with pytest.raises(ConfigError, match="must match"):
        reg.register("Bad-Name", PosixProvider)
    reg.register("memory", PosixProvider, replace=True)
    assert reg.resolve("memory") is PosixProvider
    reg.register("mine", MemoryProvider)
    assert reg.create("mine").name == "memory"


def test_a_target_must_be_a_provider() -> None:
    reg = ProviderRegistry(entry_point_group=None)
    reg.register("broken", "tiered.providers.layout:FileType")
    with pytest.raises(ConfigError, match="not a Provider"):
        reg.resolve("broken")


def test_provider_from_settings() -> None:
    provider = provider_from_settings("memory")
    assert isinstance(provider, MemoryProvider)


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A real installed distribution (dist-info on sys.path) declaring two entry points."""
    package = tmp_path / "rmq_fancy"
    package.mkdir()
    (package / "__init__.py").write_text(
        textwrap.dedent(
            """
            from tiered.providers import MemoryProvider

            class FancyProvider(MemoryProvider):
                name = "fancy"

                @classmethod
                def from_config(cls, cfg):
                    provider = cls()
                    provider.cluster = cfg.broker_cluster_name
                    return provider
            """
        )
    )
    info = tmp_path / "rmq_fancy-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rmq-fancy\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[rocketmq_tiered.providers]\n"
        "fancy = rmq_fancy:FancyProvider\n"
        "posix = rmq_fancy:FancyProvider\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_third_party_providers_come_from_entry_points(
    plugin: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reg = ProviderRegistry()
    with caplog.at_level(logging.WARNING):
        cls = reg.resolve("fancy")
    assert cls.__name__ == "FancyProvider"
    assert reg.resolve("posix") is PosixProvider
    assert "posix=rmq_fancy:FancyProvider (from rmq-fancy) not loaded" in caplog.text
    entry = next(e for e in reg.table() if e.name == "fancy")
    assert entry.source == "entry point (rmq-fancy)"
    cfg = TieredConfig.from_properties(
        {"tieredBackendServiceProvider": "fancy", "brokerClusterName": "C1"}
    )
    provider: Any = from_config(cfg, reg)
    assert provider.cluster == "C1"


def _config(tmp_path: Path, **props: str) -> TieredConfig:
    return TieredConfig.from_properties(
        {
            "tieredDataDir": str(tmp_path / "data"),
            "storePathRootDir": str(tmp_path / "store"),
            **props,
        }
    )


S3_KEYS = {
    "objectStoreEndpoint": "http://127.0.0.1:9000",
    "objectStoreAccessKey": "AK",
    "objectStoreSecretKey": "SK",
    "objectStorePathStyle": "true",
}
"""The ``objectStore*`` keys the s3 and fsspec providers both map to their clients."""


def test_from_config_builds_each_provider(tmp_path: Path) -> None:
    posix = from_config(
        _config(
            tmp_path,
            tieredBackendServiceProvider=f"{UPSTREAM}PosixFileSegment",
            tieredStoreFilePath=str(tmp_path / "tiered"),
        )
    )
    assert isinstance(posix, PosixProvider)
    assert posix.root == tmp_path / "tiered"
    assert isinstance(from_config(_config(tmp_path)), MemoryProvider)
    s3 = from_config(
        _config(
            tmp_path,
            tieredBackendServiceProvider="s3",
            objectStoreBucket="tiered-bucket",
            objectStorePrefix="prod/",
            objectStoreRegion="eu-west-1",
            **S3_KEYS,
        )
    )
    assert isinstance(s3, S3Provider)
    assert (s3.bucket, s3.prefix, s3.endpoint, s3.region, s3.path_style) == (
        "tiered-bucket",
        "prod",
        "http://127.0.0.1:9000",
        "eu-west-1",
        True,
    )
    assert "SK" not in repr(s3)
    fs = from_config(
        _config(
            tmp_path,
            tieredBackendServiceProvider="fsspec",
            tieredStoreFsspecUrl="s3://bucket/tiered",
            **S3_KEYS,
        )
    )
    assert isinstance(fs, FsspecProvider)
    assert fs.storage_options["client_kwargs"]["endpoint_url"] == "http://127.0.0.1:9000"
    assert fs.storage_options["key"] == "AK"
    assert fs.storage_options["config_kwargs"] == {"s3": {"addressing_style": "path"}}
    local = from_config(
        _config(
            tmp_path,
            tieredBackendServiceProvider="fsspec",
            tieredStoreFsspecUrl=f"file://{tmp_path}/fs",
        )
    )
    assert isinstance(local, FsspecProvider)
    assert local.storage_options == {}
