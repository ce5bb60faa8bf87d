"""The fsspec provider passes the conformance suite on file://, memory:// and s3:// (moto, Ceph)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from fsspec.implementations.memory import MemoryFile
from fsspec.implementations.memory import MemoryFileSystem
from tiered.providers import FsspecProvider
from tiered.providers.testing import ChunkedProviderTests
from tiered.providers.testing import DictOracle
from tiered.providers.testing import DirectoryOracle
from tiered.providers.testing import Oracle
from tiered.providers.testing import ProviderTests
from tiered.providers.testing.s3_suite import OnCeph
from tiered.providers.testing.s3_suite import OnMoto
from tiered.providers.testing.s3_suite import S3Fixtures
from tiered.providers.testing.servers import S3Endpoint

from tiered.errors import ConfigError


class TestFsspecLocal(ProviderTests):
    @pytest.fixture
    def provider(self, tmp_path: Path) -> FsspecProvider:
        provider = FsspecProvider(f"file://{tmp_path}/tiered")
        assert provider.append_mode == "native"
        return provider

    @pytest.fixture
    def oracle(self, tmp_path: Path) -> Oracle:
        return DirectoryOracle(tmp_path / "tiered")


class TestFsspecLocalChunks(ChunkedProviderTests):
    @pytest.fixture
    def provider(self, tmp_path: Path) -> FsspecProvider:
        return FsspecProvider(f"file://{tmp_path}/tiered", append_mode="chunks")

    @pytest.fixture
    def oracle(self, tmp_path: Path) -> Oracle:
        return DirectoryOracle(tmp_path / "tiered", chunked=True)


def _memory_oracle(root: str, chunked: bool) -> Oracle:
    return DictOracle(
        MemoryFileSystem.store,
        root=root,
        chunked=chunked,
        make=lambda path, data: MemoryFile(None, path, data),
    )


class TestFsspecMemory(ProviderTests):
    @pytest.fixture
    def provider(self) -> FsspecProvider:
        return FsspecProvider(f"memory://t{uuid.uuid4().hex}")

    @pytest.fixture
    def oracle(self, provider: FsspecProvider) -> Oracle:
        return _memory_oracle("/" + provider.url.removeprefix("memory://"), chunked=False)


class TestFsspecMemoryChunks(ChunkedProviderTests):
    @pytest.fixture
    def provider(self) -> FsspecProvider:
        return FsspecProvider(f"memory://t{uuid.uuid4().hex}", append_mode="chunks")

    @pytest.fixture
    def oracle(self, provider: FsspecProvider) -> Oracle:
        return _memory_oracle("/" + provider.url.removeprefix("memory://"), chunked=True)


class FsspecS3Tests(S3Fixtures, ChunkedProviderTests):
    """fsspec over s3fs against a real HTTP S3 server."""

    @pytest.fixture
    def provider(self, endpoint: S3Endpoint, bucket: str, key_prefix: str) -> FsspecProvider:
        options = endpoint.options().s3fs_storage_options()
        return FsspecProvider(f"s3://{bucket}/{key_prefix}", storage_options=options)


@pytest.mark.s3
class TestFsspecS3Moto(OnMoto, FsspecS3Tests):
    pass


@pytest.mark.s3
class TestFsspecS3Ceph(OnCeph, FsspecS3Tests):
    pass


def test_append_mode_follows_the_protocol() -> None:
    assert FsspecProvider("memory://x").append_mode == "native"
    assert FsspecProvider("file:///tmp/x").append_mode == "native"
    assert FsspecProvider("/tmp/x").append_mode == "native"
    assert FsspecProvider("s3://bucket/x").append_mode == "chunks"
    assert FsspecProvider("memory://x").enforces_seal is False
    assert FsspecProvider("s3://bucket/x").enforces_seal is True


def test_bad_settings_name_the_key() -> None:
    with pytest.raises(ConfigError, match="tieredStoreFsspecUrl"):
        FsspecProvider("")
    with pytest.raises(ConfigError, match="append_mode"):
        FsspecProvider("memory://x", append_mode="sometimes")  # type: ignore[arg-type]
