"""Tiered metadata (container layer): upstream's ``tieredStoreMetadata.json`` and its store.

:mod:`.models` holds the schema (pydantic, upstream camelCase on disk) with the one parse function
and the writer; :mod:`.store` keeps the file atomic, backed up, mirrored and recoverable.
"""

from __future__ import annotations

from .models import (
    LONG_MAX,
    FileSegmentMetadata,
    FileSegmentType,
    MessageQueue,
    MetadataDocument,
    QueueMetadata,
    TopicMetadata,
    dump_metadata,
    parse_metadata,
)
from .store import LoadReport, MetadataStore, mirror_key_for, now_ms, read_metadata

__all__ = [
    "LONG_MAX",
    "FileSegmentMetadata",
    "FileSegmentType",
    "LoadReport",
    "MessageQueue",
    "MetadataDocument",
    "MetadataStore",
    "QueueMetadata",
    "TopicMetadata",
    "dump_metadata",
    "mirror_key_for",
    "now_ms",
    "parse_metadata",
    "read_metadata",
]
