"""The driver layer: one contract (:class:`Provider`); the posix, memory, s3, fsspec providers.

A provider stores segment objects under the upstream key layout (:mod:`.layout`) and knows nothing
of messages. Pick one by name with :func:`provider_from_settings` or from the configuration with
:func:`from_config` (:func:`build_provider` also wraps it for metrics and quotas); wrap one with
:class:`MetricsProvider` (metrics and request accounting), :class:`QuotaProvider` (byte quotas),
:class:`FaultInjectingProvider` or :class:`LatencyProvider` (:mod:`.faults`). SDKs (boto3,
s3fs) are imported only when their provider is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING
from typing import Any

from .base import BytesLike
from .base import Payload
from .base import Provider
from .base import RequestCounts
from .base import RequestListener
from .layout import INDEX_TOPIC
from .layout import FileType
from .layout import SegmentAddress
from .layout import all_keys_safe
from .layout import check_component
from .layout import check_key
from .layout import cluster_dir_name
from .layout import file_name_to_offset
from .layout import index_logical_path
from .layout import logical_path
from .layout import offset_to_file_name
from .layout import segment_key
from .quota import QuotaProvider
from .quota import TokenBucket
from .registry import ENTRY_POINT_GROUP
from .registry import ProviderEntry
from .registry import ProviderRegistry
from .registry import build_provider
from .registry import from_config
from .registry import provider_from_settings
from .registry import registry
from .wrappers import MetricsProvider
from .wrappers import ProviderMetrics
from .wrappers import WrappedProvider
from .wrappers import unwrap

if TYPE_CHECKING:
    from .faults import FaultInjectingProvider
    from .faults import FaultPlan
    from .faults import LatencyProvider
    from .fsspec import FsspecProvider
    from .memory import MemoryProvider
    from .posix import PosixProvider
    from .s3 import S3Provider

_PROVIDERS = {
    "FaultInjectingProvider": "faults",
    "FaultPlan": "faults",
    "LatencyProvider": "faults",
    "FsspecProvider": "fsspec",
    "MemoryProvider": "memory",
    "PosixProvider": "posix",
    "S3Provider": "s3",
}
"""The provider classes and the fault-injection wrappers, imported when first asked for: a posix
``dispatch`` never loads the s3 and fsspec modules (nor http.client, ssl, email, cachetools) nor
:mod:`.faults`. ``base``, ``layout``, ``registry``, ``wrappers`` and ``quota`` stay eager: every
user needs them, and ``from .registry import registry`` must bind the registry object, not the
submodule an import of ``tiered.providers.registry`` would leave under that name."""

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
    "QuotaProvider",
    "RequestCounts",
    "RequestListener",
    "S3Provider",
    "SegmentAddress",
    "TokenBucket",
    "WrappedProvider",
    "all_keys_safe",
    "build_provider",
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


def __getattr__(name: str) -> Any:
    module = _PROVIDERS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
