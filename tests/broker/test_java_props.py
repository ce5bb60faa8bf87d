"""The Java client / 5.3.3 broker property model against facts read from a real broker's store.

Every literal below comes from a store a real RocketMQ 5.3.3 broker (Maven Central jars, default
broker.conf, cluster DefaultCluster, broker broker-a) wrote for a Java 5.x producer whose client IP
was fd00::2; the store itself is not part of the repository.
"""

from __future__ import annotations

import zlib

import pytest

from tiered.broker import java_props as jp
from tiered.broker import message as msgcodec
from tiered.broker import verify

# -- facts from the real 5.3.3 store -------------------------------------------------------------
U0 = "FD0000000000000000000000000000020ED24E0E2F2A824B947C0000"  # first message, born ...191293
REAL_PLAIN = (
    f"MSG_REGION\x01DefaultRegion\x02UNIQ_KEY\x01{U0}\x02CLUSTER\x01DefaultCluster\x02"
    "WAIT\x01true\x02TRACE_ON\x01true\x02"
)
U1 = "FD00000000000000000000000000000210634E0E2F2A824C11BA0018"
REAL_KEYED = (
    f"MSG_REGION\x01DefaultRegion\x02UNIQ_KEY\x01{U1}\x02CLUSTER\x01DefaultCluster\x02"
    "region\x01eu\x02TAGS\x01TagA\x02KEYS\x01key-0 κλειδί-0 鍵0\x02WAIT\x01true\x02"
    "TRACE_ON\x01true\x02名前\x01値-0 ünïcödé\x02"
)
INNER, BATCH = (
    "FD00000000000000000000000000000210634E0E2F2A824C13970040",
    "FD00000000000000000000000000000210634E0E2F2A824C1397004A",
)
REAL_BATCH_INNER = (
    f"KEYS\x01batch-0-0\x02UNIQ_KEY\x01{INNER}\x02WAIT\x01true\x02TAGS\x01Batch\x02"
    f"MSG_REGION\x01DefaultRegion\x02UNIQ_KEY\x01{BATCH}\x02CLUSTER\x01DefaultCluster\x02"
    "WAIT\x01true\x02TRACE_ON\x01true\x02"
)
U2 = "FD00000000000000000000000000000210634E0E2F2A824C14E1007F"
REAL_DELAYED = (  # in SCHEDULE_TOPIC_XXXX queue 0 and, byte-equal, when re-put into RealMain/3
    f"MSG_REGION\x01DefaultRegion\x02UNIQ_KEY\x01{U2}\x02CLUSTER\x01DefaultCluster\x02"
    "DELAY\x011\x02TAGS\x01Delay\x02KEYS\x01delay-0\x02WAIT\x01true\x02TRACE_ON\x01true\x02"
    "REAL_TOPIC\x01RealMain\x02REAL_QID\x013\x02"
)
U3 = "FD00000000000000000000000000000210634E0E2F2A824C191200F0"
REAL_HALF = (  # in RMQ_SYS_TRANS_HALF_TOPIC (sysflag 0) and, byte-equal, committed (sysflag 8)
    f"MSG_REGION\x01DefaultRegion\x02UNIQ_KEY\x01{U3}\x02CLUSTER\x01DefaultCluster\x02"
    f"PGROUP\x01it-tx-producer\x02__transactionId__\x01{U3}\x02TAGS\x01Tx\x02TRAN_MSG\x01true\x02"
    "KEYS\x01tx-0\x02WAIT\x01true\x02decision\x01commit\x02TRACE_ON\x01true\x02"
    "REAL_TOPIC\x01RealMain\x02REAL_QID\x011\x02"
)
REAL_OP = "WAIT\x01true\x02TAGS\x01d\x02"  # body b"0,1,2,3,4,5,6,7,8,9,", TAGS code 100
# born 1795677222723 (Nov 26 2026 UTC), the second producer's first id: pid 0x1063
REAL_ID_BORN, REAL_ID = 1795677222723, "FD00000000000000000000000000000210634E0E2F2A824C0F420000"
# SCHEDULE_TOPIC_XXXX/0 offset 0: stored 1795677224164 with DELAY=1, consumequeue tag code:
REAL_SCHEDULE_STORE, REAL_SCHEDULE_TAGS_CODE = 1795677224164, 1795677225164
# a 4096-byte text body the client compressed: 79 bytes starting 78 5e, sysflag 0x301
REAL_ZLIB_HEAD, REAL_ZLIB_FLAG = bytes.fromhex("785e"), 0x301


def test_plain_and_keyed_messages() -> None:
    assert jp.encode(jp.broker_props(jp.client_props(uniq_key=U0))).decode() == REAL_PLAIN
    client = jp.client_props(
        uniq_key=U1,
        tags="TagA",
        keys=["key-0", "κλειδί-0", "鍵0"],
        user=[("region", "eu"), ("名前", "値-0 ünïcödé")],
    )
    assert jp.encode(jp.broker_props(client)).decode() == REAL_KEYED


def test_batch_inner_message_carries_two_uniq_keys_and_the_batch_one_wins() -> None:
    inner = jp.client_props(uniq_key=INNER, tags="Batch", keys=["batch-0-0"])
    raw = jp.encode(inner) + jp.encode(jp.batch_props(BATCH))
    assert raw.decode() == REAL_BATCH_INNER
    # string2messageProperties keeps the later value, the batch's: the broker indexes that one
    assert msgcodec.decode_properties(raw)["UNIQ_KEY"] == BATCH


def test_delayed_half_and_op_messages() -> None:
    client = jp.client_props(uniq_key=U2, tags="Delay", keys=["delay-0"], delay_level=1)
    assert jp.encode(jp.delayed_props(client, "RealMain", 3)).decode() == REAL_DELAYED
    client = jp.client_props(
        uniq_key=U3,
        tags="Tx",
        keys=["tx-0"],
        user=[("decision", "commit")],
        producer_group="it-tx-producer",
    )
    assert jp.encode(jp.half_props(client, U3, "RealMain", 1)).decode() == REAL_HALF
    assert jp.encode(jp.op_props()).decode() == REAL_OP


def test_uniq_key_of_an_ipv6_client() -> None:
    client = jp.ClientId(bytes.fromhex("fd000000000000000000000000000002"), 0x1063, 0x4E0E2F2A)
    uniq = client.uniq_key(REAL_ID_BORN - 1, 0)
    assert uniq == REAL_ID
    assert len(uniq) == 56  # 16-byte IP + pid + class loader + ms of the month (wrapped) + counter
    v4 = jp.ClientId(bytes((10, 0, 0, 2)), 1, 2).uniq_key(REAL_ID_BORN, 1)
    assert len(v4) == 32 and v4.startswith("0A000002")


@pytest.mark.parametrize(
    ("keys", "capacity", "order"),
    [
        (["TAGS", "KEYS", "WAIT", "UNIQ_KEY"], 16, ["KEYS", "UNIQ_KEY", "WAIT", "TAGS"]),
        (["UNIQ_KEY", "CLUSTER"], 128, ["UNIQ_KEY", "CLUSTER"]),  # one bucket: insertion order
        (["CLUSTER", "UNIQ_KEY"], 128, ["CLUSTER", "UNIQ_KEY"]),
    ],
)
def test_hash_order(keys: list[str], capacity: int, order: list[str]) -> None:
    assert jp.hash_order(keys, capacity) == order


def test_hash_order_follows_the_resize() -> None:
    # buckets of 16: REAL_TOPIC 1, TRACE_ON 4; of 32: TRACE_ON 4, REAL_TOPIC 17
    few = ["TRACE_ON", "REAL_TOPIC"]
    many = few + [f"x{i}" for i in range(11)]  # 13 > 12 = 3/4 of 16: the table doubles
    assert [k for k in jp.hash_order(few, 16) if k in few] == ["REAL_TOPIC", "TRACE_ON"]
    assert [k for k in jp.hash_order(many, 16) if k in few] == ["TRACE_ON", "REAL_TOPIC"]


def test_client_zlib_is_level_5() -> None:
    body = b"the quick brown fox jumps over the lazy dog " * 100
    packed = zlib.compress(body, jp.COMPRESS_LEVEL)
    assert packed[:2] == REAL_ZLIB_HEAD
    assert msgcodec.compression_bits("ZLIB") == REAL_ZLIB_FLAG


def test_schedule_topic_tag_code_is_the_delivery_time() -> None:
    raw = msgcodec.encode(
        topic="SCHEDULE_TOPIC_XXXX",
        queue_id=0,
        queue_offset=0,
        physical_offset=0,
        body=b"delayed 0",
        properties=REAL_DELAYED.encode(),
        born_timestamp=REAL_SCHEDULE_STORE - 3,
        store_timestamp=REAL_SCHEDULE_STORE,
    )
    m = msgcodec.decode(raw)
    assert verify.expected_tags_code(m) == REAL_SCHEDULE_TAGS_CODE
    reput = msgcodec.decode(raw.replace(b"SCHEDULE_TOPIC_XXXX", b"RealMainXXXXXXXXXXX"))
    assert verify.expected_tags_code(reput) == 65915235  # hash("Delay") in RealMain/3
    assert jp.DELAY_LEVELS_MS[:3] == (1000, 5000, 10000)
