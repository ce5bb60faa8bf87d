"""The driver layer: one contract (:class:`Provider`); the posix, memory, s3, fsspec providers.

A provider stores segment objects under the upstream key layout (:mod:`.layout`) and knows nothing
of messages. Pick one by name with :func:`provider_from_settings` or from the configuration with
:func:`from_config`; wrap it with :class:`MetricsProvider` (metrics and request accounting),
:class:`FaultInjectingProvider` or :class:`LatencyProvider`. SDKs (boto3, s3fs) are imported only
when their provider is used.
"""

from __future__ import annotations

from .base import BytesLike
from .base import Payload
from .base import Provider
from .base import RequestCounts
from .base import RequestListener
from .fsspec import FsspecProvider
from .layout import INDEX_TOPIC
from .layout import FileType
from .layout import SegmentAddress
from .layout import check_component
from .layout import check_key
from .layout import cluster_dir_name
from .layout import file_name_to_offset
from .layout import index_logical_path
from .layout import logical_path
from .layout import offset_to_file_name
from .layout import segment_key
from .memory import MemoryProvider
from .posix import PosixProvider
from .registry import ENTRY_POINT_GROUP
from .registry import ProviderEntry
from .registry import ProviderRegistry
from .registry import from_config
from .registry import provider_from_settings
from .registry import registry
from .s3 import S3Provider
from .wrappers import FaultInjectingProvider
from .wrappers import FaultPlan
from .wrappers import LatencyProvider
from .wrappers import MetricsProvider
from .wrappers import ProviderMetrics
from .wrappers import WrappedProvider
from .wrappers import unwrap

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
