"""What the metadata store's tests share: a store on a fake clock, and recognisable documents."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

from tiered.metadata.metadata_store import MetadataStore
from tiered.metadata.metadata_store import mirror_key_for
from tiered.metadata.models import FileSegmentMetadata
from tiered.metadata.models import FileSegmentType
from tiered.metadata.models import MessageQueue
from tiered.metadata.models import MetadataDocument
from tiered.metadata.models import parse_metadata

CL, CQ, INDEX = FileSegmentType.COMMIT_LOG, FileSegmentType.CONSUME_QUEUE, FileSegmentType.INDEX
KEY = mirror_key_for("DefaultCluster", "broker-a")
T0 = 1700000000000


def clock() -> Callable[[], int]:
    counter = itertools.count(T0)
    return lambda: next(counter)


def open_store(data_dir: Path, **kwargs: object) -> MetadataStore:
    store = MetadataStore(data_dir, clock=clock(), **kwargs)  # type: ignore[arg-type]
    store.load()
    return store


def mq(topic: str = "TopicTest", queue_id: int = 0) -> MessageQueue:
    return MessageQueue(broker_name="broker-a", queue_id=queue_id, topic=topic)


def segment(
    kind: FileSegmentType = CL, path: str = "broker-a/TopicTest/0", base: int = 0, size: int = 0
) -> FileSegmentMetadata:
    return FileSegmentMetadata(
        path=path, type=kind, base_offset=base, size=size, create_timestamp=T0 - 1
    )


def fill(store: MetadataStore, version: int) -> None:
    """A recognisable document: ``version`` topics, each with two queues and segments."""
    with store.batch():
        for n in range(version):
            store.add_topic(f"T{n}")
            for q in range(2):
                store.add_queue(mq(f"T{n}", q))
                path = f"broker-a/T{n}/{q}"
                store.update_segment(segment(CL, path, 0, size=100 * n))
                store.update_segment(segment(CQ, path, 0, size=20 * n))


def disk_document(store: MetadataStore) -> MetadataDocument:
    return parse_metadata(store.path.read_text("utf-8"), source=str(store.path))
