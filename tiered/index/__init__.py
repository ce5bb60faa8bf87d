"""The tiered key index (container layer): local index files, compaction, compacted files.

- :mod:`.format` — header, items, magic codes, status (spec §6.2, §6.3);
- :mod:`.java_hash` — Java's ``String.hashCode`` over many keys, ``topic#key``, ``HashSet`` order;
- :mod:`.key_set` — the keys of one message, as upstream computes them (the reference);
- :mod:`.bulk_keys` — the keys of a whole batch of stored units at once, in the compiled kernel;
- :mod:`.numpy_keys` — the same with numpy array passes (the kernel's reference in the tests);
- :mod:`.index_batch` — :class:`IndexBatch`, what one bulk put holds;
- :mod:`.index_store_file` — :class:`IndexStoreFile`, the UNSEALED/SEALED local file;
- :mod:`.compaction` — :func:`compact_numpy` (upstream's compaction) and the engine choice;
- :mod:`.compacted_file` — :class:`CompactedIndexFile` (UPLOAD), read through a provider.

The index service (access layer; import it from its module) is :mod:`.service`; the PySpark
compaction job is ``tiered.jobs.compact_index``.
"""

from __future__ import annotations

from tiered.index.compacted_file import CompactedIndexFile
from tiered.index.compacted_file import check_compacted
from tiered.index.compaction import compact_numpy
from tiered.index.format import IndexHeader
from tiered.index.format import IndexItem
from tiered.index.format import IndexStatus
from tiered.index.index_batch import IndexBatch
from tiered.index.index_store_file import IndexStoreFile
from tiered.index.index_store_file import local_index_files
from tiered.index.java_hash import index_hashes
from tiered.index.key_set import message_key_sets

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
