"""``BrokerTier``: what every keeper of one broker's segments holds -- the backend, the metadata
store that records the segments, the cluster and broker names their keys are built from, and the
clock their records are stamped with. :class:`~tiered.file.FlatFileStore` (the flat files) and
:class:`~tiered.index.uploaded.UploadedIndex` (the INDEX segments) extend it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY
from dataclasses import dataclass

from tiered.providers.base import Provider

from .metadata_store import MetadataStore
from .metadata_store import now_ms


@dataclass(eq=False)
class BrokerTier:
    """One broker's segments in the tier: ``provider`` holds them, ``metadata`` records them."""

    provider: Provider
    metadata: MetadataStore
    _: KW_ONLY
    cluster: str
    broker: str
    clock: Callable[[], int] = now_ms
