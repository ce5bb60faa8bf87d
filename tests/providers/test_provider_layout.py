"""The upstream key layout, byte for byte (spec §5.1, vectors V1 and V2)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tiered.providers import FileType
from tiered.providers import SegmentAddress
from tiered.providers import all_keys_safe
from tiered.providers import check_component
from tiered.providers import check_key
from tiered.providers import cluster_dir_name
from tiered.providers import file_name_to_offset
from tiered.providers import index_logical_path
from tiered.providers import logical_path
from tiered.providers import offset_to_file_name
from tiered.providers import segment_key

from tiered.errors import InvalidKeyError

V1 = [
    (0, "cfcd208400000000000000000000"),
    (1073741775, "1f329fef00000000001073741775"),
    (104857600, "40d473e300000000000104857600"),
    (1073741824, "952eb02900000000001073741824"),
    (6000000, "11bdc31800000000000006000000"),
    (2000, "08f90c1a00000000000000002000"),
    (4294937144, "b10da56800000000004294937144"),
]


@pytest.mark.parametrize(("offset", "name"), V1)
def test_v1_segment_names(offset: int, name: str) -> None:
    assert offset_to_file_name(offset) == name
    assert file_name_to_offset(name) == offset


@pytest.mark.parametrize(
    ("cluster", "directory"),
    [
        ("DefaultCluster", "212d6b50_DefaultCluster"),
        ("TieredStorageDailyTest", "161c08ff_TieredStorageDailyTest"),
        ("IndexService", "e96d41b2_IndexService"),
    ],
)
def test_v2_cluster_directories(cluster: str, directory: str) -> None:
    assert cluster_dir_name(cluster) == directory


def test_v2_full_keys() -> None:
    assert (
        segment_key("DefaultCluster", "broker-a", "TopicTest", 3, FileType.COMMIT_LOG, 0)
        == "212d6b50_DefaultCluster/broker-a/TopicTest/3/COMMIT_LOG/cfcd208400000000000000000000"
    )
    assert (
        segment_key("DefaultCluster", "broker-a", "TopicTest", 3, FileType.CONSUME_QUEUE, 2000)
        == "212d6b50_DefaultCluster/broker-a/TopicTest/3/CONSUME_QUEUE/08f90c1a00000000000000002000"
    )
    assert (
        segment_key("DefaultCluster", "broker-a", "rmq_sys_INDEX", 0, FileType.INDEX, 0)
        == "212d6b50_DefaultCluster/broker-a/rmq_sys_INDEX/0/INDEX/cfcd208400000000000000000000"
    )
    assert logical_path("broker-a", "TopicTest", 3) == "broker-a/TopicTest/3"
    assert index_logical_path("broker-a") == "broker-a/rmq_sys_INDEX/0"
    assert FileType.CONSUME_QUEUE.label == "consume_queue"


def test_topics_are_used_verbatim() -> None:
    key = segment_key("DefaultCluster", "broker-a", "%RETRY%group_1", 0, FileType.COMMIT_LOG, 0)
    assert "/%RETRY%group_1/0/" in key


@given(
    topic=st.from_regex(r"[%|a-zA-Z0-9_-]{1,64}", fullmatch=True),
    queue=st.integers(0, 2**31 - 1),
    base=st.integers(0, 2**63 - 1),
    file_type=st.sampled_from(FileType),
)
def test_keys_parse_back(topic: str, queue: int, base: int, file_type: FileType) -> None:
    address = SegmentAddress("c1", "broker-b", topic, queue, file_type, base)
    assert SegmentAddress.parse(address.key) == address
    assert segment_key("c1", "broker-b", topic, queue, file_type, base) == address.key


def _parts_safe(key: str) -> bool:
    try:
        for part in key.split("/"):
            check_component(part)
    except InvalidKeyError:
        return False
    return True


_KEYS = st.lists(
    st.one_of(
        st.text(alphabet=st.sampled_from("a.~\\/\x00\x1f\x7f\n é"), max_size=4),
        st.text(alphabet="ab", min_size=250, max_size=260),
        st.text(max_size=6),
    ),
    min_size=1,
    max_size=4,
).map("/".join)
"""Keys of unsafe parts, long parts, any text; joined by newlines when many are checked."""


@given(_KEYS)
def test_check_key_takes_a_key_when_every_part_is_safe(key: str) -> None:
    """check_key's one-match path for ASCII keys agrees with checking part by part."""
    if _parts_safe(key):
        assert check_key(key) == key
    else:
        with pytest.raises(InvalidKeyError):
            check_key(key)


@given(st.lists(_KEYS, max_size=5))
def test_keys_are_all_safe_only_when_each_passes_check_key(keys: list[str]) -> None:
    """all_keys_safe's one match over many keys agrees with check_key of each (a newline, the
    joint, in a key included); keys beyond ASCII it leaves to check_key (False)."""
    safe = all(_parts_safe(k) for k in keys)
    assert all_keys_safe(keys) == (safe and all(k.isascii() for k in keys))


def test_keys_are_not_all_safe_when_one_is_not_a_string() -> None:
    assert all_keys_safe(["a/b", "c"]) and not all_keys_safe(["a/b", 3])  # type: ignore[list-item]


@pytest.mark.parametrize(
    "key",
    [
        "meta/tieredStoreMetadata.json",
        "212d6b50_DefaultCluster/broker-a/TopicTest/3/COMMIT_LOG/cfcd2084",
        "00000000_DefaultCluster/broker-a/TopicTest/3/COMMIT_LOG/cfcd208400000000000000000000",
        "212d6b50_DefaultCluster/broker-a/TopicTest/03/COMMIT_LOG/cfcd208400000000000000000000",
        "212d6b50_DefaultCluster/broker-a/TopicTest/3/OTHER/cfcd208400000000000000000000",
        "212d6b50_DefaultCluster/broker-a/TopicTest/3/COMMIT_LOG/00000000000000000000000000000",
    ],
)
def test_other_keys_are_not_segments(key: str) -> None:
    assert SegmentAddress.parse(key) is None


@pytest.mark.parametrize(
    "value", ["", ".", "..", ".x", "a/b", "a\\b", "a~b", "a\x00", "\x7f", "é" * 128]
)
def test_unsafe_components(value: str) -> None:
    with pytest.raises(InvalidKeyError) as info:
        check_component(value)
    assert repr(value)[:10] in str(info.value)


@pytest.mark.parametrize(
    "args",
    [
        ("DefaultCluster", "broker-a", "TopicTest", -1, FileType.COMMIT_LOG, 0),
        ("DefaultCluster", "broker-a", "TopicTest", 2**31, FileType.COMMIT_LOG, 0),
        ("DefaultCluster", "broker-a", "TopicTest", 0, FileType.COMMIT_LOG, -1),
        ("DefaultCluster", "broker-a", "TopicTest", 0, FileType.COMMIT_LOG, 10**20),
        ("Default/Cluster", "broker-a", "TopicTest", 0, FileType.COMMIT_LOG, 0),
        ("DefaultCluster", "..", "TopicTest", 0, FileType.COMMIT_LOG, 0),
    ],
)
def test_out_of_range_coordinates(args: tuple[str, str, str, int, FileType, int]) -> None:
    with pytest.raises(InvalidKeyError):
        segment_key(*args)
