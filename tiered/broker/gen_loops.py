"""The generator's send loops: minimal messages, or a Java client's (:mod:`.gen_java`).

Both take the columns :func:`~tiered.broker.generator.generate_store` drew for every send (queue,
queue offset, body slice, compression, tag, hosts, v2, port, born and store time) and put the
units into a :class:`~tiered.broker.gen_writer.UnitSink`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from tiered.broker import message as msgcodec
from tiered.broker.gen_java import JavaBroker
from tiered.broker.gen_java import Send
from tiered.broker.gen_writer import UnitSink
from tiered.broker.javautil import tags_code

if TYPE_CHECKING:
    from tiered.broker.generator import GenSpec

TAGS_POOL = ("TagA", "TagB", "TagC", "TagD", "")
COMPRESSIONS = ("ZLIB", "LZ4", "ZSTD")
STORE_HOST_V4 = msgcodec.encode_host("10.0.0.5:10911")
STORE_HOST_V6 = msgcodec.encode_host("[fd00::a]:10911")

Columns = Iterator[tuple[int, int, int, int, bool, int, int, bool, bool, bool, int, int, int]]


def _born_host(q: int, i: int, b6: bool, port: int) -> bytes:
    if b6:
        return b"\xfd" + bytes(13) + struct.pack(">Hi", q + 1, port)
    return bytes((10, 0, q % 256, 1 + i % 250)) + struct.pack(">i", port)


# non-ASCII key tokens of the realistic mix: CJK, Cyrillic, and a character outside the BMP (a
# surrogate pair in Java's UTF-16)
_FOREIGN = ("订单-", "заказ-", "\U0001f680-")


def realistic_keys(seq: int, own: str, count: int) -> str:
    """The ``KEYS`` value of send ``seq`` in the realistic key mix: ``count`` tokens, the first the
    message's own key ``own``, then keys shared with neighbouring sends (an order id of 4 sends, a
    customer of 64); one send in 33 (3 %) adds a non-ASCII token, one in 20 repeats a token, one
    in 25 has blank tokens (doubled, leading and trailing spaces), one in 100 a blank value.
    Deterministic in ``seq``."""
    if count == 0:
        return ""
    if seq % 100 == 99:
        return " " * (1 + seq % 3)
    shared = (f"order-{seq // 4}", f"customer-{seq // 64 % 5000}")
    tokens = [own, *[shared[(j - 1) % 2] + ("" if j < 3 else f"-{j}") for j in range(1, count)]]
    if seq % 33 == 7:
        tokens.append(f"{_FOREIGN[seq // 33 % 3]}{seq // 4}")
    if seq % 20 == 3:
        tokens.append(tokens[-1])
    if seq % 25 == 11:
        return " " + "  ".join(tokens) + " "
    return " ".join(tokens)


def plain_loop(
    spec: GenSpec,
    seq0: int,
    topics: list[str],
    pool: bytes,
    columns: Columns,
    sink: UnitSink,
    progress: Callable[[int], None] | None,
) -> None:
    """The minimal messages: KEYS, TAGS, UNIQ_KEY in the producer's order, one unit a send."""
    tag_codes = [tags_code(t) for t in TAGS_POOL]
    step = max(1, spec.messages // 100)
    for i, (q, off, a, blen, comp, ct, ti, b6, s6, is_v2, prt, bms, sms) in enumerate(columns):
        topic = topics[q // spec.queues]
        qid = q % spec.queues
        seq = seq0 + i
        body = pool[a : a + blen]
        sent = body
        sys_flag = 0
        if comp:
            name = COMPRESSIONS[ct]
            body = msgcodec.compress_body(body, name)
            sys_flag |= msgcodec.compression_bits(name)
        # properties in the producer's order (KEYS, TAGS, UNIQ_KEY), built straight as bytes
        if spec.key_mix == "realistic":
            joined = realistic_keys(seq, f"{topic}-{qid}-{off}", spec.keys_per_message)
            keys = [k for k in joined.split(" ") if k]
        else:
            keys = [f"{topic}-{qid}-{off}-{j}" for j in range(spec.keys_per_message)]
            joined = " ".join(keys)
        tag = TAGS_POOL[ti]
        uniq = f"7F000001{spec.seed & 0xFFFF:04X}{seq:020X}"
        props = "".join(
            (
                f"KEYS\x01{joined}\x02" if joined else "",
                f"TAGS\x01{tag}\x02" if tag else "",
                f"UNIQ_KEY\x01{uniq}\x02",
            )
        ).encode()
        unit = bytearray(
            msgcodec.encode(
                topic=topic,
                queue_id=qid,
                queue_offset=off,
                physical_offset=0,
                body=body,
                properties=props,
                born_timestamp=bms,
                store_timestamp=sms,
                born_host=_born_host(q, i, b6, prt),
                store_host=STORE_HOST_V6 if s6 else STORE_HOST_V4,
                sys_flag=sys_flag,
                v2=is_v2,
            )
        )
        sink.put(unit, topic, qid, tag_codes[ti], sms, [uniq, *keys], sent)
        if progress is not None and (i + 1) % step == 0:
            progress(i + 1)


def java_loop(
    spec: GenSpec,
    origin: tuple[int, int],
    topics: list[str],
    pool: bytes,
    columns: Columns,
    sink: UnitSink,
    progress: Callable[[int], None] | None,
) -> JavaBroker:
    """Sends as a Java client makes them, stored as a 5.3.3 broker does (:mod:`.gen_java`).

    The choices of this mode come from a second random stream, so the draws the plain mode shares
    (queues, bodies, times, hosts) are the same for a seed in both modes."""
    n = spec.messages
    seq0, write_offset = origin  # the store's sends so far and its write offset
    rng = np.random.default_rng([spec.seed, seq0, write_offset, 1])
    kind = rng.random(n)
    commit = (rng.random(n) < spec.commit_fraction).tolist()
    level = rng.integers(1, spec.max_delay_level + 1, size=n).tolist()
    late = rng.integers(0, 50, size=n).tolist()
    batch_at = (rng.random(n) < spec.batch_fraction).tolist()
    batch_len = rng.integers(2, spec.batch_size + 1, size=n).tolist()
    user = (rng.random(n) < spec.user_property_fraction).tolist()
    client6 = (rng.random(n) < spec.client_ipv6_fraction).tolist()
    delayed = (kind < spec.delay_fraction).tolist()
    transactional = (kind >= 1.0 - spec.transaction_fraction).tolist()
    broker = JavaBroker(sink, STORE_HOST_V4, counter=seq0)
    sends: list[Send] = []
    batch_left = 0
    step = max(1, n // 100)
    for i, (q, _, a, blen, comp, ct, ti, b6, s6, is_v2, prt, bms, sms) in enumerate(columns):
        topic = topics[q // spec.queues]
        seq = seq0 + i
        keys = [f"key-{seq}-{j}" for j in range(spec.keys_per_message)]
        props: list[tuple[str, str]] = []
        if user[i]:
            keys.append(f"鍵-{seq}")
            props = [("region", "eu" if seq % 2 else "us"), ("名前", f"値-{seq} ünïcödé")]
        send = Send(
            topic, q % spec.queues, pool[a : a + blen], TAGS_POOL[ti], keys, props, bms, sms,
            _born_host(q, i, b6, prt), STORE_HOST_V6 if s6 else STORE_HOST_V4, is_v2,
            COMPRESSIONS[ct] if comp else None, client6[i],
        )  # fmt: skip
        if batch_left:  # a member of the batch sends[0] began: its queue, born and store time
            lead = sends[0]
            sends.append(replace(send, topic=lead.topic, queue_id=lead.queue_id,
                                 born_ms=lead.born_ms, store_ms=lead.store_ms))  # fmt: skip
            batch_left -= 1
            if not batch_left:
                broker.batch(sends)
        else:
            broker.advance(sms)
            if delayed[i]:
                broker.delayed(send, level[i], late[i])
            elif transactional[i]:
                broker.transaction(send, commit[i], 5 + late[i])
            elif batch_at[i] and i + 1 < n:
                sends = [send]
                batch_left = min(batch_len[i], n - i) - 1
            else:
                broker.plain(send)
        if progress is not None and (i + 1) % step == 0:
            progress(i + 1)
    broker.finish()
    return broker
