"""The bulk decoder of the tier table against the one-message codec ``fetch`` uses: every column
of every unit equals ``message_json`` of the same bytes, over hand-made and generated units
(v1/v2, IPv6 hosts, compressed bodies, blank and non-ASCII keys, properties that are not UTF-8,
no UNIQ_KEY), and a column the schema leaves out is never built."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from tiered.jobs.tier_batch import COLUMNS
from tiered.jobs.tier_batch import SCHEMA_DDL
from tiered.jobs.tier_batch import arrow_schema
from tiered.jobs.tier_batch import decode_batch

from tiered.broker import message as msgcodec
from tiered.errors import CorruptStoreFileError
from tiered.testing.sql_tier import as_fetch_json
from tiered.testing.sql_tier import fetch_json

ALL = [name for name, _ in COLUMNS]


def pack(units: list[bytes]) -> tuple[bytes, np.ndarray, np.ndarray]:
    sizes = np.array([len(u) for u in units], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    return b"".join(units), starts, sizes


def unit(**kw: Any) -> bytes:
    base: dict[str, Any] = {
        "topic": "Orders",
        "queue_id": 3,
        "queue_offset": 7,
        "physical_offset": 4096,
        "body": b"hello",
        "properties": {"UNIQ_KEY": "AC11000100002A9F0000000000000001", "KEYS": "k1 k2"},
        "born_timestamp": 1_700_000_000_123,
        "store_timestamp": 1_700_000_000_456,
    }
    return msgcodec.encode(**(base | kw))


CASES = {
    "plain": unit(),
    "blank keys": unit(properties={"KEYS": "  a  b ", "UNIQ_KEY": "U1"}),
    "only blanks": unit(properties={"KEYS": "   ", "TAGS": "TagA"}),
    "no properties": unit(properties={}),
    "no uniq key, ipv6": unit(
        properties={"KEYS": "x"},
        born_host="[fe80::1]:1234",
        store_host="[2001:db8::5]:10911",
        sys_flag=msgcodec.BORNHOST_V6_FLAG | msgcodec.STOREHOST_V6_FLAG,
    ),
    "non-ascii": unit(properties={"KEYS": "订单-1 Заказ 😀", "région": "eu-west", "TAGS": "标签"}),
    "not utf-8": unit(properties=b"KEYS\x01ab\xffcd\x02TAGS\x01T\x02"),
    "odd items": unit(properties=b"\x01v\x02n\x01\x02ab\x02\x02name\x01va\x01lue\x02"),
    "v2 zlib": unit(
        topic="T" * 300,
        body=msgcodec.compress_body(b"z" * 5000, "ZLIB"),
        sys_flag=msgcodec.compression_bits("ZLIB"),
    ),
    "lz4": unit(
        body=msgcodec.compress_body(b"y" * 3000, "LZ4"),
        sys_flag=msgcodec.compression_bits("LZ4"),
    ),
    "zstd empty body": unit(
        body=msgcodec.compress_body(b"", "ZSTD"), sys_flag=msgcodec.compression_bits("ZSTD")
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_shape_decodes_as_fetch_does(name: str) -> None:
    data, starts, sizes = pack([CASES[name]])
    topic = "T" * 300 if "v2" in name else "Orders"
    batch = decode_batch(data, starts, sizes, ALL, topic=topic, broker="broker-a", cluster="C")
    assert batch.schema == arrow_schema(ALL)
    (row,) = batch.to_pylist()
    assert as_fetch_json(row) == fetch_json(CASES[name])
    assert (row["broker"], row["cluster"]) == ("broker-a", "C")


def test_a_batch_of_every_shape_at_once() -> None:
    units = [u for n, u in sorted(CASES.items()) if "v2" not in n]
    data, starts, sizes = pack(units)
    rows = decode_batch(data, starts, sizes, ALL, topic="Orders", broker="b", cluster="c")
    assert [as_fetch_json(r) for r in rows.to_pylist()] == [fetch_json(u) for u in units]


def test_columns_left_out_are_not_built() -> None:
    bad_body = unit(body=b"not zlib", sys_flag=msgcodec.compression_bits("ZLIB"))
    data, starts, sizes = pack([bad_body])
    # without body, the undecompressable body is never touched
    batch = decode_batch(data, starts, sizes, ["tags", "queueOffset"], topic="t", broker="b",
                         cluster="c")  # fmt: skip
    assert batch.schema.names == ["tags", "queueOffset"]
    with pytest.raises(CorruptStoreFileError, match="object X flat offset 9"):
        decode_batch(data, starts, sizes, ["body"], topic="t", broker="b", cluster="c",
                     where=lambda i: f"object X flat offset {9 + i}")  # fmt: skip


def test_schema_ddl_names_every_column() -> None:
    assert [part.split(" ")[0] for part in SCHEMA_DDL.split(", ")] == ALL


_NAME = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00\x01\x02"),
                max_size=12)  # fmt: skip
_VALUE = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00\x02"),
                 max_size=12)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "keys": st.lists(st.sampled_from(["", " ", "k", "кл", "键", "a b"]), max_size=5),
                "extra": st.dictionaries(_NAME, _VALUE, max_size=3),
                "uniq": st.booleans(),
                "v6": st.booleans(),
                "body": st.binary(max_size=64),
                "zip": st.sampled_from([None, "ZLIB", "LZ4", "ZSTD"]),
            }
        ),
        min_size=1,
        max_size=8,
    )
)  # fmt: skip
def test_generated_units_decode_as_fetch_does(specs: list[dict[str, Any]]) -> None:
    units = []
    for i, s in enumerate(specs):
        props = dict(s["extra"])
        if s["keys"]:
            props["KEYS"] = " ".join(s["keys"])
        if s["uniq"]:
            props["UNIQ_KEY"] = f"U{i}"
        flag = msgcodec.BORNHOST_V6_FLAG | msgcodec.STOREHOST_V6_FLAG if s["v6"] else 0
        body = s["body"]
        if s["zip"]:
            body, flag = (
                msgcodec.compress_body(body, s["zip"]),
                flag | msgcodec.compression_bits(s["zip"]),
            )
        hosts = {"born_host": "[::1]:5", "store_host": "[fe80::2]:6"} if s["v6"] else {}
        units.append(unit(properties=props, body=body, sys_flag=flag, queue_offset=i, **hosts))
    data, starts, sizes = pack(units)
    rows = decode_batch(data, starts, sizes, ALL, topic="Orders", broker="b", cluster="c")
    assert [as_fetch_json(r) for r in rows.to_pylist()] == [fetch_json(u) for u in units]
