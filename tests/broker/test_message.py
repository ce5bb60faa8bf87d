from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tiered.broker import message as m
from tiered.errors import CorruptStoreFileError

V5_HEX = (
    "000000b5daa320a769c865ed0000000300000000000000000000002a00000000"
    "40000080000000000000018bcfe56800c0a8000a0000cb2d0000018bcfe5687b"
    "0a00000500002a9f0000000000000000000000000000000e48656c6c6f20526f"
    "636b65744d5109546f7069635465737400434b455953016b657931206b657932"
    "0254414753015461674102554e49515f4b455901374630303030303130303030"
    "324139463030303030303030303030303030303102"
)
V5_IPV6_HEX = (
    "00000088daa320a769c865ed0000000300000000000000000000002b00000000"
    "40000135000000100000018bcfe56801fe800000000000000000000000000001"
    "0000cb2e0000018bcfe569c80a00000500002a9f000000000000000000000000"
    "0000000e48656c6c6f20526f636b65744d5109546f70696354657374000a5441"
    "4753015461674202"
)


def test_v5_unit_encodes_byte_exact() -> None:
    unit = m.encode(
        topic="TopicTest",
        queue_id=3,
        queue_offset=42,
        physical_offset=1073741952,
        body=b"Hello RocketMQ",
        properties={
            "KEYS": "key1 key2",
            "TAGS": "TagA",
            "UNIQ_KEY": "7F00000100002A9F0000000000000001",
        },
        born_timestamp=1700000000000,
        store_timestamp=1700000000123,
        born_host="192.168.0.10:52013",
        store_host="10.0.0.5:10911",
    )
    assert unit.hex() == V5_HEX
    assert m.unit_size(14, 9, 67) == 181


def test_v5_unit_decodes() -> None:
    msg = m.decode(bytes.fromhex(V5_HEX))
    assert (msg.total_size, msg.topic, msg.queue_id, msg.queue_offset) == (181, "TopicTest", 3, 42)
    assert msg.physical_offset == 1073741952
    assert msg.born_host == "192.168.0.10:52013"
    assert msg.store_host == "10.0.0.5:10911"
    assert msg.store_timestamp == 1700000000123
    assert msg.body_crc == 1774740973 and msg.crc_ok
    assert msg.keys == ["key1", "key2"] and msg.tags == "TagA"
    assert msg.offset_msg_id == "0A00000500002A9F0000000040000080"
    assert msg.version == "v1"


def test_ipv6_born_host_moves_store_timestamp() -> None:
    raw = bytes.fromhex(V5_IPV6_HEX)
    msg = m.decode(raw)
    assert msg.sys_flag == m.BORNHOST_V6_FLAG
    assert msg.born_host == "[fe80::1]:52014"
    assert msg.store_timestamp == 1700000000456 == m.store_timestamp_of(raw)
    again = m.encode(
        topic="TopicTest",
        queue_id=3,
        queue_offset=43,
        physical_offset=1073742133,
        body=b"Hello RocketMQ",
        properties={"TAGS": "TagB"},
        born_timestamp=1700000000001,
        store_timestamp=1700000000456,
        born_host="[fe80::1]:52014",
        store_host="10.0.0.5:10911",
    )
    assert again == raw


@pytest.mark.parametrize("name", ["ZLIB", "LZ4", "ZSTD"])
def test_compressed_bodies_round_trip(name: str) -> None:
    body = b"cold message " * 100
    stored = m.compress_body(body, name)
    unit = m.encode(
        topic="T",
        queue_id=0,
        queue_offset=0,
        physical_offset=0,
        body=stored,
        properties={},
        born_timestamp=1,
        store_timestamp=2,
        sys_flag=m.compression_bits(name),
    )
    msg = m.decode(unit)
    assert msg.compression == name and msg.crc_ok
    assert msg.body == stored and msg.decompressed_body() == body


def test_legacy_compressed_flag_means_zlib() -> None:
    assert m.compression_type(m.COMPRESSED_FLAG) == "ZLIB"
    assert m.decompress_body(zlib.compress(b"x" * 50), m.COMPRESSED_FLAG) == b"x" * 50


def test_garbage_compressed_body_is_an_error_naming_the_codec() -> None:
    with pytest.raises(CorruptStoreFileError, match="not valid LZ4"):
        m.decompress_body(b"not lz4 at all", m.compression_bits("LZ4"))


def test_properties_decoding_rules() -> None:
    raw = b"KEYS\x01a b\x02x\x02\x01v\x02n\x01\x02TAGS\x01T1\x02TAGS\x01T2\x02UNIQ_KEY\x01u"
    assert m.decode_properties(raw) == {"KEYS": "a b", "TAGS": "T2", "UNIQ_KEY": "u"}


def test_v2_magic_for_long_topics() -> None:
    topic = "t" * 200
    unit = m.encode(
        topic=topic,
        queue_id=1,
        queue_offset=0,
        physical_offset=0,
        body=b"b",
        properties={},
        born_timestamp=1,
        store_timestamp=1,
    )
    assert struct.unpack_from(">i", unit, 4)[0] == m.MAGIC_V2
    msg = m.decode(unit)
    assert msg.topic == topic and msg.version == "v2"


def _unit() -> bytes:
    return bytes.fromhex(V5_HEX)


def test_bad_magic_names_the_offset() -> None:
    raw = bytearray(b"\0" * 16 + _unit())
    raw[16 + 4 : 16 + 8] = b"\x12\x34\x56\x78"
    with pytest.raises(CorruptStoreFileError, match="bad magic code 0x12345678") as e:
        m.decode(raw, 16, where="f")
    assert e.value.offset == 16


def test_truncated_unit_is_reported() -> None:
    with pytest.raises(CorruptStoreFileError, match="TOTALSIZE 181 does not fit"):
        m.decode(_unit()[:150])


def test_total_size_disagreeing_with_fields_is_reported() -> None:
    raw = bytearray(_unit()) + b"\0\0"
    struct.pack_into(">i", raw, 0, 183)
    with pytest.raises(CorruptStoreFileError, match="disagree with TOTALSIZE 183"):
        m.decode(raw)


def test_crc_mismatch_is_flagged_not_hidden() -> None:
    raw = bytearray(_unit())
    raw[90] ^= 0xFF  # a body byte
    msg = m.decode(raw)
    assert not msg.crc_ok


hosts = st.one_of(
    st.tuples(st.ip_addresses(v=4), st.integers(0, 65535)).map(lambda t: f"{t[0]}:{t[1]}"),
    st.tuples(st.ip_addresses(v=6), st.integers(0, 65535)).map(lambda t: f"[{t[0]}]:{t[1]}"),
)
prop_text = st.text(
    st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"]),
    min_size=2,
    max_size=20,
)


@settings(max_examples=150, deadline=None)
@given(
    topic=st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=60),
    body=st.binary(max_size=300),
    props=st.dictionaries(prop_text, prop_text, max_size=5),
    born=hosts,
    store=hosts,
    v2=st.booleans(),
    queue_offset=st.integers(0, 2**62),
    phys=st.integers(0, 2**62),
)
def test_encode_decode_round_trip(
    topic: str,
    body: bytes,
    props: dict[str, str],
    born: str,
    store: str,
    v2: bool,
    queue_offset: int,
    phys: int,
) -> None:
    unit = m.encode(
        topic=topic,
        queue_id=7,
        queue_offset=queue_offset,
        physical_offset=phys,
        body=body,
        properties=props,
        born_timestamp=11,
        store_timestamp=12,
        born_host=born,
        store_host=store,
        v2=v2 or len(topic.encode()) > 127,
    )
    msg = m.decode(unit)
    assert msg.total_size == len(unit)
    assert (msg.topic, msg.body, msg.properties) == (topic, body, props)
    assert (msg.queue_offset, msg.physical_offset, msg.store_timestamp) == (queue_offset, phys, 12)
    assert m.decode_host(m.encode_host(born)) == msg.born_host
    assert msg.crc_ok
