"""Tiered metadata models: V7 (fastjson bytes), the one parse function, the writer (spec §7)."""

from __future__ import annotations

import gc
import json
import sys
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tiered.broker.fastjson import dumps_fastjson
from tiered.broker.fastjson import parse_fastjson
from tiered.broker.fastjson import quote_bare_keys
from tiered.errors import MetadataError
from tiered.metadata.models import LONG_MAX
from tiered.metadata.models import FileSegmentMetadata
from tiered.metadata.models import FileSegmentType
from tiered.metadata.models import MessageQueue
from tiered.metadata.models import MetadataDocument
from tiered.metadata.models import QueueMetadata
from tiered.metadata.models import TopicMetadata
from tiered.metadata.models import dump_metadata
from tiered.metadata.models import dump_metadata_parts
from tiered.metadata.models import parse_metadata
from tiered.process.native import kernel

# vectors.md V7: Java JSON.toJSONString(wrapper, DisableCircularReferenceDetect, PrettyFormat)
V7 = (
    "{\n"
    '\t"commitLogFileSegmentTable":{\n'
    '\t\t"broker-a/TopicTest/0":{0:{\n'
    '\t\t\t\t"path":"broker-a/TopicTest/0",\n'
    '\t\t\t\t"type":0,\n'
    '\t\t\t\t"baseOffset":0,\n'
    '\t\t\t\t"status":0,\n'
    '\t\t\t\t"size":246,\n'
    '\t\t\t\t"createTimestamp":1700000000004,\n'
    '\t\t\t\t"beginTimestamp":1700000000100,\n'
    '\t\t\t\t"endTimestamp":1700000000200,\n'
    '\t\t\t\t"sealTimestamp":0\n'
    "\t\t\t}\n"
    "\t\t}\n"
    "\t},\n"
    '\t"consumeQueueFileSegmentTable":{\n'
    '\t\t"broker-a/TopicTest/0":{2000:{\n'
    '\t\t\t\t"path":"broker-a/TopicTest/0",\n'
    '\t\t\t\t"type":1,\n'
    '\t\t\t\t"baseOffset":2000,\n'
    '\t\t\t\t"status":0,\n'
    '\t\t\t\t"size":40,\n'
    '\t\t\t\t"createTimestamp":1700000000005,\n'
    '\t\t\t\t"beginTimestamp":9223372036854775807,\n'
    '\t\t\t\t"endTimestamp":9223372036854775807,\n'
    '\t\t\t\t"sealTimestamp":0\n'
    "\t\t\t}\n"
    "\t\t}\n"
    "\t},\n"
    '\t"indexFileSegmentTable":{},\n'
    '\t"queueMetadataTable":{\n'
    '\t\t"TopicTest":{0:{\n'
    '\t\t\t\t"queue":{\n'
    '\t\t\t\t\t"brokerName":"broker-a",\n'
    '\t\t\t\t\t"queueId":0,\n'
    '\t\t\t\t\t"topic":"TopicTest"\n'
    "\t\t\t\t},\n"
    '\t\t\t\t"minOffset":-1,\n'
    '\t\t\t\t"maxOffset":-1,\n'
    '\t\t\t\t"updateTimestamp":1700000000002\n'
    "\t\t\t},1:{\n"
    '\t\t\t\t"queue":{\n'
    '\t\t\t\t\t"brokerName":"broker-a",\n'
    '\t\t\t\t\t"queueId":1,\n'
    '\t\t\t\t\t"topic":"TopicTest"\n'
    "\t\t\t\t},\n"
    '\t\t\t\t"minOffset":-1,\n'
    '\t\t\t\t"maxOffset":-1,\n'
    '\t\t\t\t"updateTimestamp":1700000000003\n'
    "\t\t\t}\n"
    "\t\t}\n"
    "\t},\n"
    '\t"topicMetadataTable":{\n'
    '\t\t"TopicTest":{\n'
    '\t\t\t"topicId":0,\n'
    '\t\t\t"topic":"TopicTest",\n'
    '\t\t\t"status":0,\n'
    '\t\t\t"reserveTime":-1,\n'
    '\t\t\t"updateTimestamp":1700000000001\n'
    "\t\t}\n"
    "\t},\n"
    '\t"topicSerialNumber":0\n'
    "}"
)

TOPIC_ORDER = ["topicId", "topic", "status", "reserveTime", "updateTimestamp"]
QUEUE_ORDER = ["queue", "minOffset", "maxOffset", "updateTimestamp"]
MQ_ORDER = ["brokerName", "queueId", "topic"]
SEGMENT_ORDER = [
    "path",
    "type",
    "baseOffset",
    "status",
    "size",
    "createTimestamp",
    "beginTimestamp",
    "endTimestamp",
    "sealTimestamp",
]
TOP_ORDER = [
    "commitLogFileSegmentTable",
    "consumeQueueFileSegmentTable",
    "indexFileSegmentTable",
    "queueMetadataTable",
    "topicMetadataTable",
    "topicSerialNumber",
]


def _v7_doc() -> MetadataDocument:
    return parse_metadata(V7, source="V7")


def _layout_oracle(doc: MetadataDocument) -> str:
    """fastjson's pretty layout with quoted keys, by the standard library's (slow) encoder."""
    data = msgspec.to_builtins(doc, str_keys=True)
    return json.dumps(data, indent="\t", separators=(",", ":"), ensure_ascii=False)


# --- V7 ------------------------------------------------------------------------------------------


def test_v7_is_not_standard_json() -> None:
    with pytest.raises(json.JSONDecodeError):
        json.loads(V7)


def test_v7_parses_into_models() -> None:
    doc = _v7_doc()
    assert doc.topic_serial_number == 0
    assert doc.topic_metadata_table == {
        "TopicTest": TopicMetadata(
            topic_id=0, topic="TopicTest", status=0, reserve_time=-1, update_timestamp=1700000000001
        )
    }
    queues = doc.queue_metadata_table["TopicTest"]
    assert sorted(queues) == [0, 1]
    assert queues[1] == QueueMetadata(
        queue=MessageQueue(broker_name="broker-a", queue_id=1, topic="TopicTest"),
        min_offset=-1,
        max_offset=-1,
        update_timestamp=1700000000003,
    )
    commit_log = doc.commit_log_file_segment_table["broker-a/TopicTest/0"][0]
    assert commit_log == FileSegmentMetadata(
        path="broker-a/TopicTest/0",
        type=FileSegmentType.COMMIT_LOG,
        base_offset=0,
        size=246,
        create_timestamp=1700000000004,
        begin_timestamp=1700000000100,
        end_timestamp=1700000000200,
    )
    cq = doc.consume_queue_file_segment_table["broker-a/TopicTest/0"][2000]
    assert cq.type is FileSegmentType.CONSUME_QUEUE
    assert (cq.base_offset, cq.size, cq.create_timestamp) == (2000, 40, 1700000000005)
    assert cq.begin_timestamp == cq.end_timestamp == LONG_MAX
    assert cq.seal_timestamp == 0
    assert doc.index_file_segment_table == {}


def test_v7_dump_is_standard_json_with_quoted_keys() -> None:
    text = dump_metadata(_v7_doc())
    data = json.loads(text)
    assert list(data["commitLogFileSegmentTable"]["broker-a/TopicTest/0"]) == ["0"]
    assert list(data["queueMetadataTable"]["TopicTest"]) == ["0", "1"]
    assert '"2000":{' in text
    assert "{0:" not in text


def test_v7_dump_parses_back_equal() -> None:
    doc = _v7_doc()
    assert parse_metadata(dump_metadata(doc), source="dump") == doc


def test_v7_dump_carries_the_same_content_in_the_same_order() -> None:
    """Key for key, value for value and in the same order as the Java output."""
    java = parse_fastjson(V7)  # bare keys become strings
    ours = json.loads(dump_metadata(_v7_doc()))

    def ordered(node: Any) -> Any:
        if isinstance(node, dict):
            return [(key, ordered(value)) for key, value in node.items()]
        return node

    assert ordered(ours) == ordered(java)


def test_v7_dump_uses_the_fastjson_layout() -> None:
    text = dump_metadata(_v7_doc())
    assert text.startswith('{\n\t"commitLogFileSegmentTable":{\n\t\t"broker-a/TopicTest/0":{')
    assert '\n\t\t\t\t"path":"broker-a/TopicTest/0",\n' in text
    assert '\n\t"topicSerialNumber":0\n}' in text
    assert ": " not in text
    assert "    " not in text
    # the only difference from Java's bytes: quoted keys on their own lines
    assert text.replace("\n", "").replace("\t", "") == (
        V7.replace("\n", "").replace("\t", "").replace("{0:", '{"0":').replace(",1:", ',"1":')
    ).replace("{2000:", '{"2000":')


def test_entity_field_order_is_upstreams() -> None:
    data = json.loads(dump_metadata(_v7_doc()))
    assert list(data) == TOP_ORDER
    assert list(data["topicMetadataTable"]["TopicTest"]) == TOPIC_ORDER
    queue = data["queueMetadataTable"]["TopicTest"]["1"]
    assert list(queue) == QUEUE_ORDER
    assert list(queue["queue"]) == MQ_ORDER
    assert list(data["consumeQueueFileSegmentTable"]["broker-a/TopicTest/0"]["2000"]) == (
        SEGMENT_ORDER
    )


def test_dump_matches_the_standard_library_layout() -> None:
    doc = _v7_doc()
    assert dump_metadata(doc) == _layout_oracle(doc)


def test_quotes_backslashes_and_unicode_survive_the_layout_rewrite() -> None:
    tricky = 'we": "ird\\\\": \u00e9\u4e2d\U0001f600 '
    doc = MetadataDocument(
        topic_metadata_table={tricky: TopicMetadata(topic_id=0, topic=tricky, update_timestamp=1)},
        topic_serial_number=0,
    )
    text = dump_metadata(doc)
    assert text == _layout_oracle(doc)
    assert "\u4e2d" in text  # written as UTF-8, like fastjson, not \\u-escaped
    assert parse_metadata(text, source="tricky") == doc


def test_a_string_that_starts_with_a_colon_survives_the_layout_rewrite() -> None:
    """A key, value or name that starts with ': ' (found by test_random_documents_round_trip: a
    broker named ': ' lost its space) is written as is."""
    doc = MetadataDocument(
        topic_metadata_table={": t": TopicMetadata(topic_id=0, topic=": t", update_timestamp=1)},
        queue_metadata_table={
            ": t": {
                0: QueueMetadata(
                    queue=MessageQueue(broker_name=": ", queue_id=0, topic=": t"),
                    update_timestamp=1,
                )
            }
        },
        topic_serial_number=0,
    )
    text = dump_metadata(doc)
    assert text == _layout_oracle(doc)
    assert parse_metadata(text, source="colons") == doc


def test_empty_document() -> None:
    doc = MetadataDocument()
    assert doc.topic_serial_number == -1
    text = dump_metadata(doc)
    assert json.loads(text) == {key: {} for key in TOP_ORDER[:-1]} | {"topicSerialNumber": -1}
    assert parse_metadata(text, source="empty") == doc


# --- the models ----------------------------------------------------------------------------------


def test_segment_type_codes_and_sentinels() -> None:
    assert [(t.name, int(t)) for t in FileSegmentType] == [
        ("COMMIT_LOG", 0),
        ("CONSUME_QUEUE", 1),
        ("INDEX", 2),
    ]
    assert LONG_MAX == 2**63 - 1
    seg = FileSegmentMetadata.model_validate(
        {"path": "b/t/0", "type": 2, "baseOffset": 0, "createTimestamp": 5}
    )
    assert seg.type is FileSegmentType.INDEX
    assert (seg.status, seg.size, seg.seal_timestamp) == (0, 0, 0)
    assert seg.begin_timestamp == seg.end_timestamp == LONG_MAX


def test_populate_by_name_and_by_alias() -> None:
    by_name = TopicMetadata(topic_id=3, topic="T", reserve_time=24, update_timestamp=9)
    by_alias = TopicMetadata.model_validate(
        {"topicId": 3, "topic": "T", "reserveTime": 24, "updateTimestamp": 9}
    )
    assert by_name == by_alias
    assert by_name.status == 0


def test_message_queue_is_frozen_and_hashable() -> None:
    mq = MessageQueue(broker_name="broker-a", queue_id=1, topic="T")
    assert {mq: 1}[MessageQueue(broker_name="broker-a", queue_id=1, topic="T")] == 1
    with pytest.raises(AttributeError, match="immutable"):
        mq.queue_id = 2  # type: ignore[misc]


def test_records_are_mutable_in_place() -> None:
    seg = FileSegmentMetadata(
        path="b/t/0", type=FileSegmentType.COMMIT_LOG, base_offset=0, create_timestamp=5
    )
    seg.size = 100
    assert seg.size == 100
    assert b'"size":100' in msgspec.json.encode(seg)


def test_segment_table_picks_the_table_by_type() -> None:
    doc = _v7_doc()
    assert doc.segment_table(FileSegmentType.COMMIT_LOG) is doc.commit_log_file_segment_table
    assert doc.segment_table(FileSegmentType.CONSUME_QUEUE) is (
        doc.consume_queue_file_segment_table
    )
    assert doc.segment_table(FileSegmentType.INDEX) is doc.index_file_segment_table


def test_unknown_entity_properties_are_ignored_like_fastjson() -> None:
    text = V7.replace('"sealTimestamp":0', '"sealTimestamp":0,"futureField":"x"')
    assert parse_metadata(text, source="future") == _v7_doc()


# --- the one parse function: damaged or foreign input ---------------------------------------------


def _replace(old: str, new: str) -> str:
    assert old in V7
    return V7.replace(old, new, 1)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty"),
        ("  \n", "empty"),
        ("\x00\x00\x00garbage", "not JSON"),
        (V7[: len(V7) // 2], "not JSON"),
        (V7[:-1], "not JSON"),
        ("[]", "top level is a JSON list"),
        ("42", "top level is a JSON int"),
        ('{"topicSerialNumber":0}', "missing top-level keys"),
        ('{"dataVersion":{},"offsetTable":{}}', "missing top-level keys"),
        (_replace('"type":1', '"type":7'), r"\[2000\]\.type: Invalid enum value 7"),
        (_replace('"type":1', '"type":true'), r"\.type: Expected `int`, got `bool`"),
        (
            _replace('"size":246', '"size":"246"'),
            r"commitLogFileSegmentTable\[.broker-a/TopicTest/0.\]\[0\]\.size: Expected `int`",
        ),
        (_replace('"size":246', '"size":246.0'), r"\.size: Expected `int`, got `float`"),
        (
            _replace('"size":246', '"size":9223372036854775808'),
            r"\.size: Expected `int` <= 9223372036854775807",
        ),
        (_replace('"queueId":1', '"queueId":-1'), r"\.queue\.queueId: Expected `int` >= 0"),
        (
            _replace('"topicId":0,', ""),
            r"topicMetadataTable\['TopicTest'\]: Object missing required field `topicId`",
        ),
        (_replace('"topic":"TopicTest",', '"topic":null,'), "topic: Expected `str`, got `null`"),
        (_replace("{2000:{", "{x:{"), "not JSON"),
        (_replace("{2000:{", '{"x":{'), r"\['x'\]: Expected an integer key, got 'x'"),
        (_replace("{2000:{", "{2001:{"), "wrong key"),
        (_replace('"type":1', '"type":0'), "wrong key"),
        (_replace('"queueId":1', '"queueId":2'), "wrong key"),
        (_replace('"topic":"TopicTest",', '"topic":"Other",'), "wrong key"),
        (_replace('"queueMetadataTable":{', '"queueMetadataTable":['), "not JSON"),
        (
            _replace('"indexFileSegmentTable":{}', '"indexFileSegmentTable":[]'),
            "indexFileSegmentTable: Expected `object`, got `array`",
        ),
    ],
)
def test_parse_rejects_with_source_and_problem(text: str, problem: str) -> None:
    with pytest.raises(MetadataError, match=problem) as info:
        parse_metadata(text, source="/data/config/tieredStoreMetadata.json")
    assert str(info.value).startswith("/data/config/tieredStoreMetadata.json: ")
    assert "\n" not in str(info.value)


def test_parse_reports_how_many_more_problems() -> None:
    text = V7.replace('"status":0', '"status":"0"').replace('"minOffset":-1', '"minOffset":"-1"')
    with pytest.raises(MetadataError, match=r"got `str` \(and 2 more\); the file is damaged$"):
        parse_metadata(text, source="x")


def test_parse_accepts_quoted_and_bare_keys_mixed() -> None:
    text = _replace(",1:{", ',"1":{')
    assert parse_metadata(text, source="mixed") == _v7_doc()


# --- hypothesis: random documents round-trip ------------------------------------------------------

_i64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_offset = st.integers(min_value=0, max_value=2**63 - 1)
_name = st.text(min_size=1, max_size=12)


@st.composite
def documents(draw: st.DrawFn) -> MetadataDocument:
    topics = draw(st.lists(_name, unique=True, max_size=4))
    doc = MetadataDocument(topic_serial_number=draw(_i64))
    for topic in topics:
        doc.topic_metadata_table[topic] = TopicMetadata(
            topic_id=draw(_i64),
            topic=topic,
            status=draw(st.integers(-(2**31), 2**31 - 1)),
            reserve_time=draw(_i64),
            update_timestamp=draw(_i64),
        )
        for queue_id in draw(st.sets(st.integers(0, 2**31 - 1), max_size=3)):
            queue = MessageQueue(broker_name=draw(_name), queue_id=queue_id, topic=topic)
            doc.queue_metadata_table.setdefault(topic, {})[queue_id] = QueueMetadata(
                queue=queue,
                min_offset=draw(_i64),
                max_offset=draw(_i64),
                update_timestamp=draw(_i64),
            )
    for kind in FileSegmentType:
        for path in draw(st.lists(_name, unique=True, max_size=3)):
            for base in draw(st.sets(_offset, min_size=1, max_size=3)):
                doc.segment_table(kind).setdefault(path, {})[base] = FileSegmentMetadata(
                    path=path,
                    type=kind,
                    base_offset=base,
                    status=draw(st.sampled_from([0, 1, 2])),
                    size=draw(_offset),
                    create_timestamp=draw(_i64),
                    begin_timestamp=draw(st.one_of(st.just(LONG_MAX), _i64)),
                    end_timestamp=draw(st.one_of(st.just(LONG_MAX), _i64)),
                    seal_timestamp=draw(_i64),
                )
    return doc


@settings(max_examples=150, deadline=None)
@given(documents())
def test_random_documents_round_trip(doc: MetadataDocument) -> None:
    text = dump_metadata(doc)
    assert text == _layout_oracle(doc)
    again = parse_metadata(text, source="random")
    assert again == doc
    assert dump_metadata(again) == text


@settings(max_examples=100, deadline=None)
@given(documents(), st.integers(1, 3))
def test_random_documents_in_parts_are_the_whole_dump(doc: MetadataDocument, entries: int) -> None:
    """The file written in parts of a few entries (as a large one is) has the same bytes."""
    parts = list(dump_metadata_parts(doc, entries))
    assert b"".join(parts).decode("utf-8") == _layout_oracle(doc)
    sizes = [len(doc.segment_table(kind)) for kind in FileSegmentType]
    sizes += [len(doc.queue_metadata_table), len(doc.topic_metadata_table)]
    chunks = sum(-(-size // entries) for size in sizes)
    if max(sizes) <= entries:
        assert len(parts) == 1  # a small document at once
    else:
        assert len(parts) == 2 + 2 * len(sizes) + chunks  # no part holds more than `entries`


_json_text = st.text(alphabet=st.sampled_from('{}[],:"\\-0123456789 \t\nak'), max_size=40)
_fastjson_values = st.recursive(
    st.one_of(st.integers(-1000, 1000), st.text(alphabet='{}:,"\\0-9 ab', max_size=6)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(st.integers(-50, 50), st.text(max_size=4)), inner, max_size=3),
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_fastjson_values.map(dumps_fastjson), _json_text))
def test_the_kernels_key_quoting_is_the_regexs(text: str) -> None:
    """The kernel's one-pass quoting of bare integer keys (the metadata reader's) gives what
    ``parse_fastjson``'s regex gives, on fastjson's own output and on arbitrary JSON-ish text."""
    assert kernel().quote_bare_keys(text.encode()) == quote_bare_keys(text).encode()


@settings(max_examples=50, deadline=None)
@given(documents())
def test_random_documents_read_back_from_fastjson_bare_keys(doc: MetadataDocument) -> None:
    """What a Java broker would write (bare integer keys) parses to the same document."""
    data = msgspec.to_builtins(doc)
    assert parse_metadata(dumps_fastjson(_int_keys(data)), source="java") == doc


def _int_keys(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: _int_keys(value) for key, value in node.items()}
    return int(node) if isinstance(node, FileSegmentType) else node


def test_records_are_small_untracked_and_copies_stay_their_own() -> None:
    doc = MetadataDocument()
    for n in range(3):
        seg = FileSegmentMetadata(path=f"b/T/{n}", type=FileSegmentType.COMMIT_LOG,
                                  base_offset=0, size=n, create_timestamp=1)  # fmt: skip
        doc.segment_table(FileSegmentType.COMMIT_LOG)[seg.path] = {0: seg}
    parsed = parse_metadata(dump_metadata(doc), source="test")
    segs = [by[0] for by in parsed.segment_table(FileSegmentType.COMMIT_LOG).values()]
    assert all(not gc.is_tracked(s) and sys.getsizeof(s) <= 128 for s in segs)
    copied = segs[0].model_copy(update={"size": 99})
    assert copied.size == 99 and segs[0].size == 0 and copied is not segs[0]
    deep = parsed.model_copy(deep=True)
    assert deep == parsed
    deep.segment_table(FileSegmentType.COMMIT_LOG)["b/T/0"][0].size = 7
    assert segs[0].size == 0
    assert parse_metadata(dump_metadata(parsed), source="test") == parsed
