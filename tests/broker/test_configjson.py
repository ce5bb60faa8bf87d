"""Broker config JSON: the fastjson dialect, the .bak fallback, typed models, the pretty writer."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiered.broker.configjson import ConsumerOffsets
from tiered.broker.configjson import DataVersion
from tiered.broker.configjson import DelayOffsets
from tiered.broker.configjson import SubscriptionGroups
from tiered.broker.configjson import TopicConfig
from tiered.broker.configjson import TopicsConfig
from tiered.broker.configjson import bean
from tiered.broker.configjson import config_kind
from tiered.broker.configjson import dump_topics_json
from tiered.broker.configjson import load_config
from tiered.broker.configjson import load_config_json
from tiered.broker.configjson import load_consumer_offsets
from tiered.broker.configjson import load_delay_offsets
from tiered.broker.configjson import load_subscription_groups
from tiered.broker.configjson import load_topics
from tiered.broker.configjson import parse
from tiered.broker.fastjson import dumps_fastjson
from tiered.broker.fastjson import parse_fastjson
from tiered.errors import CorruptStoreFileError
from tiered.errors import StoreFileNotFoundError

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
REAL = SHARED / "testdata" / "real"

TOPICS_V4 = {
    "dataVersion": {"counter": 1, "stateVersion": 0, "timestamp": 5},
    "topicConfigTable": {"TopicTest": {"topicName": "TopicTest", "readQueueNums": 4}},
}


def real() -> Path:
    if not REAL.is_dir():
        pytest.fail(f"{REAL} is missing: the shared test data must sit beside the repo (../shared)")
    return REAL


def real_configs() -> list[Path]:
    paths = sorted(
        p
        for p in real().rglob("*")
        if p.parent.name == "config" and re.search(r"\.json(\.bak)?$", p.name)
    )
    assert len(paths) >= 60
    return paths


def v7_blocks() -> list[str]:
    """The two fastjson documents of vectors.md V7 (exact bytes written by fastjson 1.2.83)."""
    spec = (SHARED / "spec" / "vectors.md").read_text(encoding="utf-8")
    v7 = spec[spec.index("## V7") : spec.index("## V8")]
    return re.findall(r"```\n(\{\n.*?\n\})\n```", v7, re.S)


def normalise(obj: Any) -> Any:
    """What a standard JSON reader sees: every key a string."""
    if isinstance(obj, dict):
        return {str(k): normalise(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [normalise(v) for v in obj]
    return obj


# --- real files -------------------------------------------------------------------------------


def test_every_real_config_file_loads() -> None:
    for p in real_configs():
        loaded = load_config(p, use_bak=False)
        kind = config_kind(p)
        if kind is None:
            assert isinstance(loaded, dict)
        else:
            assert isinstance(loaded, kind)
        assert load_config_json(p, use_bak=False) == parse_fastjson(p.read_text(encoding="utf-8"))


def test_every_real_config_file_redumps_byte_exact() -> None:
    for p in real_configs():
        text = p.read_text(encoding="utf-8")
        pretty = text.startswith("{\n")
        assert dumps_fastjson(parse_fastjson(text, int_keys=True), pretty=pretty) == text, p


def test_real_topics() -> None:
    t = load_topics(real() / "humphery755__RocketMQ/store/config/topics.json")
    assert t.data_version == DataVersion(counter=117, timestamp=1453114491043)  # "timestatmp"
    assert len(t.topics) == 112
    cfg = t.topics["GAME_MATCH_MSG_NOTIFY"]
    assert (cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm, cfg.order) == (8, 8, 6, False)
    assert cfg.topic_filter_type == "SINGLE_TAG"
    assert cfg.attributes == {}
    t = load_topics(real() / "haohao1029__java/data/broker/store/config/topics.json")
    assert t.data_version is not None
    assert t.data_version.timestamp == 1724576003194
    assert t.topics["SCHEDULE_TOPIC_XXXX"].read_queue_nums == 18
    assert t.topics["DefaultCluster"].perm == 7


def test_real_consumer_and_delay_offsets() -> None:
    c = load_consumer_offsets(real() / "super-golden__rocketMq/store/config/consumerOffset.json")
    assert c.offset_table["TopicTest@please_rename_unique_group_name_4"] == {
        0: 250,
        1: 250,
        2: 251,
        3: 250,
    }
    assert c.by_topic_group()[
        "%RETRY%please_rename_unique_group_name_4", "please_rename_unique_group_name_4"
    ] == {0: 0}
    d = load_delay_offsets(real() / "humphery755__RocketMQ/store/config/delayOffset.json")
    assert d.data_version is None
    assert d.offset_table[18] == 74
    assert d.queue_offsets()[17] == 74
    assert len(d.offset_table) == 16


def test_real_subscription_groups() -> None:
    g = load_subscription_groups(real() / "gxstax__rocketmq/store/config/subscriptionGroup.json")
    assert len(g.subscription_group_table) == 9
    self_test = g.subscription_group_table["SELF_TEST_C_GROUP"]
    assert (self_test.retry_max_times, self_test.retry_queue_nums, self_test.broker_id) == (
        16,
        1,
        0,
    )
    assert self_test.consume_broadcast_enable
    old = load_subscription_groups(
        real() / "humphery755__RocketMQ/store/config/subscriptionGroup.json"
    )
    assert old.data_version is not None
    assert old.data_version.timestamp > 0  # "timestatmp"


# --- the dialect ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{0:23,1:23}", {"0": 23, "1": 23}),
        ("{-1:5, 2 :6}", {"-1": 5, "2": 6}),
        ("{\n\t\t0:1,\n\t1:2\n}", {"0": 1, "1": 2}),
        ('{"a":{0:12,1:5\n\t\t}}', {"a": {"0": 12, "1": 5}}),
        ('{"s":"{1:2},3:4"}', {"s": "{1:2},3:4"}),
        ('{"q\\"{0:":{7:"x\\\\"},"n":[1,2,3]}', {'q"{0:': {"7": "x\\"}, "n": [1, 2, 3]}),
        ('{"0":1,"big":9223372036854775807}', {"0": 1, "big": 2**63 - 1}),
        ("{}", {}),
    ],
)
def test_parse_fastjson(text: str, expected: Any) -> None:
    assert parse_fastjson(text) == expected


def test_int_keys_are_kept_apart_from_quoted_ones() -> None:
    assert parse_fastjson('{0:1,"1":2,"a":{-3:"0:"}}', int_keys=True) == {
        0: 1,
        "1": 2,
        "a": {-3: "0:"},
    }


def test_parse_rejects_non_json() -> None:
    for bad in ["hello", "{0:}", '{"a":1', "{a:1}"]:
        with pytest.raises(json.JSONDecodeError):
            parse_fastjson(bad)


def test_v7_documents_round_trip_byte_exact() -> None:
    blocks = v7_blocks()
    assert len(blocks) == 2
    for text in blocks:
        assert dumps_fastjson(parse_fastjson(text, int_keys=True)) == text
    offsets = parse_fastjson(blocks[1], int_keys=True)
    assert offsets["offsetTable"] == {"TopicTest@GID_test": {0: 12, 1: 5}}
    assert parse(ConsumerOffsets, offsets).offset_table == {"TopicTest@GID_test": {0: 12, 1: 5}}


KEYS = st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(alphabet='0123456789{}[],:"\\ \tab-é\n'))
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.text(alphabet='0123456789{},:"\\ a\n'),
)
TREES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=4)),
    max_leaves=25,
)


@given(st.dictionaries(KEYS, TREES, max_size=5), st.booleans())
def test_dump_parse_round_trip(doc: dict[Any, Any], pretty: bool) -> None:
    text = dumps_fastjson(doc, pretty=pretty)
    assert parse_fastjson(text, int_keys=True) == doc
    assert parse_fastjson(text) == normalise(doc)


@given(st.dictionaries(st.text(), TREES, max_size=5))
def test_standard_json_parses_unchanged(doc: dict[str, Any]) -> None:
    assert parse_fastjson(json.dumps(doc)) == normalise(doc)


def test_dumps_rejects_unknown_types() -> None:
    with pytest.raises(TypeError, match="cannot serialize"):
        dumps_fastjson({"a": object()})
    with pytest.raises(TypeError, match="must be a str or an int"):
        dumps_fastjson({1.5: 1})


# --- the writer ----------------------------------------------------------------------------------


def test_dump_topics_json_format() -> None:
    text = dump_topics_json(
        [TopicConfig(topic_name="TopicTest", read_queue_nums=4, write_queue_nums=4)],
        data_version=DataVersion(counter=1, timestamp=1700000000000),
    )
    assert text == (
        "{\n"
        '\t"dataVersion":{\n\t\t"counter":1,\n\t\t"stateVersion":0,\n\t\t"timestamp":1700000000000\n\t},\n'
        '\t"topicConfigTable":{\n'
        '\t\t"TopicTest":{\n'
        '\t\t\t"attributes":{},\n'
        '\t\t\t"order":false,\n'
        '\t\t\t"perm":6,\n'
        '\t\t\t"readQueueNums":4,\n'
        '\t\t\t"topicFilterType":"SINGLE_TAG",\n'
        '\t\t\t"topicName":"TopicTest",\n'
        '\t\t\t"topicSysFlag":0,\n'
        '\t\t\t"writeQueueNums":4\n'
        "\t\t}\n"
        "\t}\n"
        "}"
    )


def test_dump_topics_json_round_trips_real_topics(tmp_path: Path) -> None:
    src = load_topics(real() / "liushangqing9803__rocketmq-tech/store/config/topics.json")
    out = tmp_path / "topics.json"
    out.write_text(dump_topics_json(src.topics, data_version=src.data_version), encoding="utf-8")
    again = load_topics(out)
    assert again.topics == src.topics
    assert again.data_version == src.data_version
    attrs = TopicConfig(topic_name="A", attributes={"+message.type": "NORMAL"})
    assert load_topics_text(tmp_path, dump_topics_json({"A": attrs})).topics["A"] == attrs


def load_topics_text(tmp_path: Path, text: str) -> TopicsConfig:
    p = tmp_path / "t2" / "topics.json"
    p.parent.mkdir()
    p.write_text(text, encoding="utf-8")
    return load_topics(p)


# --- .bak fallback -----------------------------------------------------------------------------


def write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, str):
        content = content.encode()
    path.write_bytes(content)
    return path


@pytest.mark.parametrize(
    "primary", [None, b"", b"  \n", b'{"dataVersion":{"counter":', b"\xff\xfe", b"[1,2]"]
)
def test_falls_back_to_bak(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, primary: bytes | None
) -> None:
    x = tmp_path / "topics.json"
    if primary is not None:
        write(x, primary)
    write(tmp_path / "topics.json.bak", dumps_fastjson(TOPICS_V4))
    before = sorted(tmp_path.iterdir())
    with caplog.at_level(logging.WARNING):
        t = load_topics(x)
    assert t.topics["TopicTest"].read_queue_nums == 4
    assert "using topics.json.bak" in caplog.text
    assert sorted(tmp_path.iterdir()) == before  # nothing moved, deleted or created
    assert x.exists() == (primary is not None)


def test_wrong_shape_falls_back_to_bak(tmp_path: Path) -> None:
    write(tmp_path / "topics.json", '{"topicConfigTable":[1,2]}')
    write(tmp_path / "topics.json.bak", dumps_fastjson(TOPICS_V4))
    assert load_topics(tmp_path / "topics.json").topics["TopicTest"].topic_name == "TopicTest"
    assert load_config_json(tmp_path / "topics.json") == {"topicConfigTable": [1, 2]}


def test_good_primary_wins_over_bak(tmp_path: Path) -> None:
    write(tmp_path / "delayOffset.json", '{\n\t"offsetTable":{1:10,2:20\n\t}\n}')
    write(tmp_path / "delayOffset.json.bak", '{"offsetTable":{1:5}}')
    assert load_delay_offsets(tmp_path / "delayOffset.json").offset_table == {1: 10, 2: 20}
    assert load_delay_offsets(tmp_path / "delayOffset.json.bak").offset_table == {1: 5}


def test_nothing_usable(tmp_path: Path) -> None:
    x = tmp_path / "consumerOffset.json"
    with pytest.raises(
        StoreFileNotFoundError,
        match=re.escape("consumerOffset.json missing or empty; consumerOffset.json.bak missing"),
    ):
        load_consumer_offsets(x)
    write(x, "not json at all")
    with pytest.raises(
        CorruptStoreFileError, match=re.escape("consumerOffset.json unparseable")
    ) as e:
        load_consumer_offsets(x)
    assert e.value.path == str(x)
    write(tmp_path / "consumerOffset.json.bak", "{0:")
    with pytest.raises(
        CorruptStoreFileError, match=re.escape("consumerOffset.json.bak unparseable")
    ):
        load_config_json(x)
    write(x, "")
    with pytest.raises(
        CorruptStoreFileError,
        match=re.escape("missing or empty; consumerOffset.json.bak unparseable"),
    ):
        load_config(x)


def test_use_bak_false(tmp_path: Path) -> None:
    write(tmp_path / "topics.json", "{")
    write(tmp_path / "topics.json.bak", dumps_fastjson(TOPICS_V4))
    with pytest.raises(CorruptStoreFileError, match="unparseable"):
        load_topics(tmp_path / "topics.json", use_bak=False)


# --- models ---------------------------------------------------------------------------------------


def test_config_kind() -> None:
    assert config_kind("a/topics.json") is TopicsConfig
    assert config_kind("a/topics.json.bak") is TopicsConfig
    assert config_kind("consumerOffset.json") is ConsumerOffsets
    assert config_kind("subscriptionGroup.json") is SubscriptionGroups
    assert config_kind("delayOffset.json.bak") is DelayOffsets
    assert config_kind("consumerFilter.json") is None


def test_data_version_spellings() -> None:
    assert parse(DataVersion, {"counter": 2, "timestatmp": 7}).timestamp == 7
    assert parse(DataVersion, {"counter": 2, "timestamp": 8}).timestamp == 8
    dv = parse(DataVersion, {"counter": 2, "stateVersion": 3, "timestamp": 8})
    assert bean(dv) == {"counter": 2, "stateVersion": 3, "timestamp": 8}


def test_unknown_properties_are_kept() -> None:
    t = parse(TopicConfig, {"topicName": "A", "newField": 1})
    assert t.extra == {"newField": 1}
    assert '"newField":1' in dump_topics_json([t])


def test_by_topic_group_skips_bad_keys(caplog: pytest.LogCaptureFixture) -> None:
    c = parse(ConsumerOffsets, {"offsetTable": {"T@G": {"0": 1}, "nogroup": {"0": 2}}})
    with caplog.at_level(logging.WARNING):
        assert c.by_topic_group() == {("T", "G"): {0: 1}}
    assert "'nogroup'" in caplog.text
