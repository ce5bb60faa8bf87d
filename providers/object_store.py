"""The ``objectStore*`` keys of an S3-compatible backend, mapped once: the s3 provider builds its
boto3 client from them and the fsspec provider's ``s3://`` URLs get them as s3fs storage options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Any

if TYPE_CHECKING:
    from tiered.config import TieredConfig


@dataclass(frozen=True)
class ObjectStoreOptions:
    """Where and as whom to reach an S3-compatible backend."""

    endpoint: str | None
    """``objectStoreEndpoint``; None for AWS's own endpoint of the region."""
    region: str
    access_key: str | None
    """``objectStoreAccessKey``; None (with ``secret_key``) for the AWS credential chain."""
    secret_key: str | None
    path_style: bool
    """``objectStorePathStyle``: ``endpoint/bucket/key`` addressing (MinIO, Ceph RGW)."""

    @classmethod
    def from_config(cls, cfg: TieredConfig) -> ObjectStoreOptions:
        return cls(
            endpoint=cfg.object_store_endpoint or None,
            region=cfg.object_store_region or "us-east-1",
            access_key=cfg.object_store_access_key or None,
            secret_key=cfg.object_store_secret_key.get_secret_value() or None,
            path_style=cfg.object_store_path_style,
        )

    def s3fs_storage_options(self) -> dict[str, Any]:
        """The same settings as s3fs storage options (``url_to_fs(url, **options)``)."""
        options: dict[str, Any] = {"client_kwargs": {"region_name": self.region}}
        if self.endpoint:
            options["client_kwargs"]["endpoint_url"] = self.endpoint
        if self.access_key:
            options["key"] = self.access_key
            options["secret"] = self.secret_key
        if self.path_style:
            options["config_kwargs"] = {"s3": {"addressing_style": "path"}}
        return options
