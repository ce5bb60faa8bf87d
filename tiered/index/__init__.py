"""The tiered key index (container layer): local index files, compaction, compacted files.

- :mod:`.format` — header, items, magic codes, status (spec §6.2, §6.3);
- :mod:`.keys` — key hashes, a message's key set in Java ``HashSet`` order, :class:`IndexBatch`;
- :mod:`.index_file` — :class:`IndexStoreFile`, the memory-mapped UNSEALED/SEALED local file;
- :mod:`.compacted` — :func:`compact_numpy` and :class:`CompactedIndexFile` (UPLOAD).

The index service (access layer; import it from its module): :mod:`.service`
(``IndexService``: put after upload, compaction, upload, expiry, query) over :mod:`.unit_keys` and
:mod:`.key_tokens` (the keys of stored units, in bulk), :mod:`.local_files`, :mod:`.uploaded`,
:mod:`.compaction`, :mod:`.staging` (compaction elsewhere), :mod:`.progress` and
:mod:`.catch_up` (nothing lost by a crash), :mod:`.search`.

The PySpark compaction job is ``tiered.jobs.compact_index``.
"""

from __future__ import annotations

from tiered.index.compacted import CompactedIndexFile, check_compacted, compact_numpy
from tiered.index.format import IndexHeader, IndexItem, IndexStatus
from tiered.index.index_file import IndexStoreFile, local_index_files
from tiered.index.keys import IndexBatch, index_hashes, message_key_sets

__all__ = [
    "CompactedIndexFile",
    "IndexBatch",
    "IndexHeader",
    "IndexItem",
    "IndexStatus",
    "IndexStoreFile",
    "check_compacted",
    "compact_numpy",
    "index_hashes",
    "local_index_files",
    "message_key_sets",
]
