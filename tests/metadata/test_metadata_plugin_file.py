"""``tieredStoreMetadata.json`` as RocketMQ 5.3.3's in-broker tieredstore plugin wrote it.

``data/plugin-5.3.3-tieredStoreMetadata.json`` is the file a real broker with
``messageStorePlugIn=org.apache.rocketmq.tieredstore.TieredMessageStore`` (posix backend, 1 MiB
commitlog and 1000-unit consumequeue segments, 100-slot/400-item index files) wrote in
``tests/realbroker/test_java_plugin.py`` after uploading 3000 messages of ``PluginTopic`` (2
queues); the facts below were read off that real run. Real fastjson writes the Long keys of the
segment tables and the Integer queue ids unquoted, and leaves the queues' min/max offsets at -1.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tiered.metadata import FileSegmentType
from tiered.metadata import dump_metadata
from tiered.metadata import parse_metadata

FILE = Path(__file__).parent / "data" / "plugin-5.3.3-tieredStoreMetadata.json"


def test_the_real_file_is_not_standard_json() -> None:
    text = FILE.read_text("utf-8")
    assert '"broker-p/PluginTopic/0":{0:{' in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def test_the_real_file_parses_with_every_segment() -> None:
    doc = parse_metadata(FILE.read_text("utf-8"), source=str(FILE))
    commitlog = doc.segment_table(FileSegmentType.COMMIT_LOG)
    assert {p: {b: s.size for b, s in t.items()} for p, t in commitlog.items()} == {
        "broker-p/PluginTopic/0": {0: 1047456, 1047456: 864033},
        "broker-p/PluginTopic/1": {0: 1048575, 1048575: 857925},
    }
    queue = doc.segment_table(FileSegmentType.CONSUME_QUEUE)
    assert {p: sum(s.size for s in t.values()) // 20 for p, t in queue.items()} == {
        "broker-p/PluginTopic/0": 1500,
        "broker-p/PluginTopic/1": 1500,
    }
    index = doc.segment_table(FileSegmentType.INDEX)["broker-p/rmq_sys_INDEX/0"]
    assert len(index) == 9 and sorted(index)[:3] == [0, 12000, 24000]
    every = [s for t in FileSegmentType for v in doc.segment_table(t).values() for s in v.values()]
    assert {s.status for s in every} == {0}  # the plugin never writes STATUS_SEALED
    assert {s.seal_timestamp for s in every} == {0}
    queues = doc.queue_metadata_table["PluginTopic"]
    assert {q: (m.min_offset, m.max_offset) for q, m in queues.items()} == {
        0: (-1, -1),
        1: (-1, -1),
    }
    assert doc.topic_metadata_table["PluginTopic"].topic_id == 0


def test_the_real_file_round_trips_without_losing_a_field() -> None:
    doc = parse_metadata(FILE.read_text("utf-8"), source=str(FILE))
    again = parse_metadata(dump_metadata(doc), source="rewritten")
    assert again == doc
    assert again == doc
