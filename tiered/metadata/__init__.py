"""Tiered metadata (container layer): upstream's ``tieredStoreMetadata.json`` and its store.

:mod:`.models` holds the schema (msgspec records, upstream camelCase on disk) with the one parse
function and the writer; :mod:`.metadata_store` keeps the file atomic, backed up, mirrored and
recoverable; :mod:`.state_file` is the one primitive of the sidecar's small JSON state files,
:mod:`.orphans` the log of objects expiry still has to delete, :mod:`.atomic` the atomic file
write; :mod:`.broker_tier` is what every keeper of one broker's segments holds (backend,
metadata, names).

Imports the driver layer (``tiered.providers``, for the mirror) and ``tiered.errors``; used by
the container layer (``tiered.file``, ``tiered.index``) and above.
"""

from __future__ import annotations

from .metadata_store import HOUR_MS
from .metadata_store import LoadReport
from .metadata_store import MetadataStore
from .metadata_store import mirror_key_for
from .metadata_store import now_ms
from .metadata_store import read_metadata
from .models import LONG_MAX
from .models import FileSegmentMetadata
from .models import FileSegmentType
from .models import MessageQueue
from .models import MetadataDocument
from .models import QueueMetadata
from .models import TopicMetadata
from .models import dump_metadata
from .models import dump_metadata_json
from .models import parse_metadata

__all__ = [
    "HOUR_MS",
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
    "dump_metadata_json",
    "mirror_key_for",
    "now_ms",
    "parse_metadata",
    "read_metadata",
]
