"""The driver layer: one contract (:class:`Provider`); the posix, memory, s3, fsspec providers.

A provider stores segment objects under the upstream key layout (:mod:`.layout`) and knows nothing
of messages. Pick one by name with :func:`provider_from_settings` or from the configuration with
:func:`from_config`; wrap it with :class:`MetricsProvider` (metrics and request accounting),
:class:`FaultInjectingProvider` or :class:`LatencyProvider`. SDKs (boto3, s3fs) are imported only
when their provider is used.
"""

from __future__ import annotations

from .base import BytesLike, Payload, Provider, RequestCounts, RequestListener
from .fsspec import FsspecProvider
from .layout import (
    INDEX_TOPIC,
    FileType,
    SegmentAddress,
    check_component,
    check_key,
    cluster_dir_name,
    file_name_to_offset,
    index_logical_path,
    logical_path,
    offset_to_file_name,
    segment_key,
)
from .memory import MemoryProvider
from .posix import PosixProvider
from .registry import (
    ENTRY_POINT_GROUP,
    ProviderEntry,
    ProviderRegistry,
    from_config,
    provider_from_settings,
    registry,
)
from .s3 import S3Provider
from .wrappers import (
    FaultInjectingProvider,
    FaultPlan,
    LatencyProvider,
    MetricsProvider,
    ProviderMetrics,
    WrappedProvider,
    unwrap,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "INDEX_TOPIC",
    "BytesLike",
    "FaultInjectingProvider",
    "FaultPlan",
    "FileType",
    "FsspecProvider",
    "LatencyProvider",
    "MemoryProvider",
    "MetricsProvider",
    "Payload",
    "PosixProvider",
    "Provider",
    "ProviderEntry",
    "ProviderMetrics",
    "ProviderRegistry",
    "RequestCounts",
    "RequestListener",
    "S3Provider",
    "SegmentAddress",
    "WrappedProvider",
    "check_component",
    "check_key",
    "cluster_dir_name",
    "file_name_to_offset",
    "from_config",
    "index_logical_path",
    "logical_path",
    "offset_to_file_name",
    "provider_from_settings",
    "registry",
    "segment_key",
    "unwrap",
]
