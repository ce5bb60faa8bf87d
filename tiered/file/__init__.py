"""Container layer: a queue's flat commitlog and flat consumequeue as segment lists (spec §5).

:class:`FlatAppendFile` (segments, append vs commit offsets, rolling, two-segment reads),
:class:`FlatCommitLogFile` (the physical-offset rewrite), :class:`FlatConsumeQueueFile`,
:class:`FlatMessageFile` (one queue: commitlog uploaded first, consumequeue second),
:class:`FlatFileStore` (all queues, restored from metadata) and :func:`reconcile`
(:mod:`.restart_reconcile`: the last segments made to agree with the backend at start).

Imports the driver layer (``tiered.providers``), ``tiered.metadata`` and ``tiered.broker``
codecs; knows nothing of dispatch rounds or reads (``tiered.core`` uses it).
"""

from __future__ import annotations

from .flat_append_file import FlatAddress
from .flat_append_file import FlatAppendFile
from .flat_append_file import Segment
from .flat_commitlog import FlatCommitLogFile
from .flat_consumequeue import FlatConsumeQueueFile
from .flat_file_store import FlatFileStore
from .flat_message_file import CommitResult
from .flat_message_file import FlatMessageFile
from .flat_message_file import MessageBatch
from .restart_reconcile import ReconcileReport
from .restart_reconcile import reconcile

__all__ = [
    "CommitResult",
    "FlatAddress",
    "FlatAppendFile",
    "FlatCommitLogFile",
    "FlatConsumeQueueFile",
    "FlatFileStore",
    "FlatMessageFile",
    "MessageBatch",
    "ReconcileReport",
    "Segment",
    "reconcile",
]
