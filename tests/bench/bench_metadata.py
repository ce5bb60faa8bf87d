"""Benchmark: metadata persist/load cost for a broker with many queues, beside simpler baselines.

Run with ``make bench``. 10 000 queues (1 250 topics x 8), one commitlog and one consumequeue
segment each: about 7.5 MB of JSON. Compared side by side in one run:

- ``dump_metadata`` (msgspec's writer + the TAB layout rewrite) against the standard
  library's ``json.dumps(indent="\\t")`` of the same dict (the same bytes; pure-Python encoder);
- a whole ``persist`` (dump + temp file + fsync + .bak link + rename + dir fsync) against a raw
  write + fsync of the same bytes;
- ``parse_metadata`` of our standard JSON against the same document with fastjson's bare keys.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from tiered.broker.fastjson import dumps_fastjson
from tiered.metadata.metadata_store import MetadataStore
from tiered.metadata.models import FileSegmentMetadata
from tiered.metadata.models import FileSegmentType
from tiered.metadata.models import MessageQueue
from tiered.metadata.models import MetadataDocument
from tiered.metadata.models import QueueMetadata
from tiered.metadata.models import TopicMetadata
from tiered.metadata.models import dump_metadata
from tiered.metadata.models import parse_metadata

QUEUES = 10_000
REPEAT = 5


def _document() -> MetadataDocument:
    doc = MetadataDocument()
    for n in range(QUEUES):
        topic, qid = f"Topic{n // 8}", n % 8
        path = f"broker-a/{topic}/{qid}"
        if topic not in doc.topic_metadata_table:
            doc.topic_serial_number += 1
            doc.topic_metadata_table[topic] = TopicMetadata(
                topic_id=doc.topic_serial_number, topic=topic, update_timestamp=1700000000000
            )
        doc.queue_metadata_table.setdefault(topic, {})[qid] = QueueMetadata(
            queue=MessageQueue(broker_name="broker-a", queue_id=qid, topic=topic),
            update_timestamp=1700000000000,
        )
        for kind, base in ((FileSegmentType.COMMIT_LOG, 0), (FileSegmentType.CONSUME_QUEUE, 2000)):
            doc.segment_table(kind)[path] = {
                base: FileSegmentMetadata(
                    path=path,
                    type=kind,
                    base_offset=base,
                    size=123456,
                    create_timestamp=1700000000000,
                    begin_timestamp=1700000000100,
                    end_timestamp=1700000000200,
                )
            }
    return doc


def _median(fn: Callable[[], object]) -> float:
    times = []
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _raw_write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def test_metadata_persist_and_load(tmp_path: Path) -> None:
    doc = _document()
    text = dump_metadata(doc)
    data = text.encode()
    stdlib = json.dumps(
        msgspec.to_builtins(doc, str_keys=True),
        indent="\t",
        separators=(",", ":"),
        ensure_ascii=False,
    )
    assert stdlib == text

    def stdlib_dump() -> str:
        plain = msgspec.to_builtins(doc, str_keys=True)
        return json.dumps(plain, indent="\t", separators=(",", ":"), ensure_ascii=False)

    t_dump = _median(lambda: dump_metadata(doc))
    t_stdlib = _median(stdlib_dump)

    store = MetadataStore(tmp_path / "sidecar")
    store.load()
    store._doc = doc  # the benchmark's document, without 30 000 single-record updates
    t_persist = _median(store.persist)
    t_raw = _median(lambda: _raw_write(tmp_path / "raw.json", data))

    java = dumps_fastjson(_bare_keys(msgspec.to_builtins(doc)))
    t_parse = _median(lambda: parse_metadata(text, source="bench"))
    t_parse_java = _median(lambda: parse_metadata(java, source="bench"))
    t_load = _median(MetadataStore(tmp_path / "sidecar").load)

    print(
        f"\nmetadata, {QUEUES} queues, {len(data) / 1e6:.1f} MB JSON, median of {REPEAT}:\n"
        f"  dump_metadata            {t_dump * 1e3:8.1f} ms\n"
        f"  json.dumps(indent=TAB)   {t_stdlib * 1e3:8.1f} ms  (same bytes)  "
        f"ratio {t_stdlib / t_dump:5.2f}x\n"
        f"  persist (atomic, fsync)  {t_persist * 1e3:8.1f} ms\n"
        f"  raw write + fsync        {t_raw * 1e3:8.1f} ms  (same bytes)  "
        f"persist/raw {t_persist / t_raw:5.2f}x\n"
        f"  parse (standard JSON)    {t_parse * 1e3:8.1f} ms\n"
        f"  parse (fastjson bare)    {t_parse_java * 1e3:8.1f} ms  "
        f"ratio {t_parse_java / t_parse:5.2f}x\n"
        f"  load (read + parse)      {t_load * 1e3:8.1f} ms"
    )


def _bare_keys(node: object) -> object:
    if isinstance(node, dict):
        return {key: _bare_keys(value) for key, value in node.items()}
    return int(node) if isinstance(node, FileSegmentType) else node
