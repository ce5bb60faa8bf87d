"""The provider conformance suite (installed as ``tiered.providers.testing``; needs pytest and
hypothesis).

A provider's tests subclass :class:`ProviderTests` (or :class:`ChunkedProviderTests` for object
stores) and define the ``provider`` and ``oracle`` fixtures; third-party providers can do the same.
"""

from __future__ import annotations

from .chunked import ChunkedProviderTests
from .chunked import CrashPoint
from .chunked import crash_before_request
from .chunked import requests_of
from .oracle import BotoOracle
from .oracle import DictOracle
from .oracle import DirectoryOracle
from .oracle import Oracle
from .stateful import make_state_machine
from .suite import HOSTILE_KEYS
from .suite import REMOTE_SETTINGS
from .suite import ProviderTests
from .suite import blob
from .suite import fill
from .suite import seg

__all__ = [
    "HOSTILE_KEYS",
    "REMOTE_SETTINGS",
    "BotoOracle",
    "ChunkedProviderTests",
    "CrashPoint",
    "DictOracle",
    "DirectoryOracle",
    "Oracle",
    "ProviderTests",
    "blob",
    "crash_before_request",
    "fill",
    "make_state_machine",
    "requests_of",
    "seg",
]
