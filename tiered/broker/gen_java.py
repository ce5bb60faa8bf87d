"""The generator's Java-client mode (``GenSpec.java_client``): what a 5.3.3 broker stores.

Each send becomes what the broker writes for a Java 5.x producer (:mod:`.java_props` for the
properties and UNIQ_KEY; bodies of 4 KiB and more zlib-compressed at level 5, sysflag ``0x301``),
plain, delayed, transactional or batched (:class:`JavaBroker`). Events due later (re-puts,
transaction ends, op writes) are written before the first send stored after them, with store
times never going back.
"""

from __future__ import annotations

import heapq
import zlib
from collections import deque
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Final

from tiered.broker import java_props as jp
from tiered.broker import message as msgcodec
from tiered.broker.gen_writer import UnitSink
from tiered.broker.javautil import tags_code

PRODUCER_GROUP: Final = "GenTxProducer"
CLIENT_V4: Final = jp.ClientId(bytes((10, 0, 0, 2)), 0x0ED2, 0x4E0E2F2A)
CLIENT_V6: Final = jp.ClientId(
    bytes.fromhex("fd000000000000000000000000000002"), 0x1063, 0x4E0E2F2A
)
_ZLIB_FLAG: Final = msgcodec.compression_bits("ZLIB")
_OP_TAG_CODE: Final = tags_code(jp.REMOVE_TAG)
_NEVER: Final = 1 << 62


@dataclass(frozen=True, slots=True)
class Send:
    """One message as the producer sends it; ``compression`` names a codec the client was set
    to use for this body (``None``: only the client's 4 KiB threshold applies)."""

    topic: str
    queue_id: int
    body: bytes
    tag: str
    keys: list[str]
    user: list[tuple[str, str]]
    born_ms: int
    store_ms: int
    born_host: bytes
    store_host: bytes
    v2: bool
    compression: str | None
    client_v6: bool


@dataclass(slots=True)
class JavaBroker:
    """Turns sends into units in ``sink``, holding the events that fall due later."""

    sink: UnitSink
    broker_host: bytes
    counter: int = 0
    transactions: dict[str, int] = field(default_factory=dict)
    _events: list[tuple[int, int, Callable[[int], None]]] = field(default_factory=list)
    _order: int = 0
    _op_pending: deque[str] = field(default_factory=deque)
    _op_size: int = 0
    _op_last: int | None = None
    _op_at: int | None = None
    _op_token: int = 0

    # --- the sends ---------------------------------------------------------------------------

    def plain(self, s: Send) -> None:
        """A plain send: one unit in its queue."""
        uniq = self._uniq(s)
        props = jp.broker_props(
            jp.client_props(uniq_key=uniq, tags=s.tag, keys=s.keys, user=s.user)
        )
        self._put(s, s.topic, s.queue_id, jp.encode(props), uniq, s.store_ms, tags_code(s.tag))

    def delayed(self, s: Send, level: int, late_ms: int) -> None:
        """A send with delay level ``level``, re-put ``late_ms`` after it falls due: a unit in
        ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` whose consumequeue tag code is the delivery
        time (store time + the level's delay), then a copy in the real queue with the same
        properties (``DELAY``, ``REAL_TOPIC``, ``REAL_QID`` kept) and born fields."""
        uniq = self._uniq(s)
        client = jp.client_props(
            uniq_key=uniq, tags=s.tag, keys=s.keys, user=s.user, delay_level=level
        )
        props = jp.encode(jp.delayed_props(client, s.topic, s.queue_id))
        deliver = s.store_ms + jp.DELAY_LEVELS_MS[level - 1]
        self._put(s, jp.SCHEDULE_TOPIC, level - 1, props, uniq, s.store_ms, deliver)

        def reput(t: int) -> None:
            self._put(s, s.topic, s.queue_id, props, uniq, t, tags_code(s.tag))

        self._at(deliver + late_ms, reput)

    def transaction(self, s: Send, commit: bool, end_after_ms: int) -> None:
        """A transactional send, committed or rolled back ``end_after_ms`` after its half: a
        half unit in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 (sysflag without transaction bits),
        then a commit -- a copy in the real queue with sysflag ``TRANSACTION_COMMIT`` (0x8) and
        ``preparedTransactionOffset`` = the half's physical offset -- or a rollback (nothing
        stored). Both end with the half's queue offset in an op message
        (``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0, TAGS ``d``, body ``"off1,off2,..."``, born and
        stored by the broker), batched as ``TransactionalOpBatchService`` does (every 3 s, or at
        once past 4096 bytes)."""
        uniq = self._uniq(s)
        client = jp.client_props(
            uniq_key=uniq, tags=s.tag, keys=s.keys, user=s.user, producer_group=PRODUCER_GROUP
        )
        props = jp.encode(jp.half_props(client, uniq, s.topic, s.queue_id))
        half_pos, half_off = self._put(
            s, jp.HALF_TOPIC, 0, props, uniq, s.store_ms, tags_code(s.tag)
        )
        self.transactions[s.topic] = self.transactions.get(s.topic, 0) + 1

        def end(t: int) -> None:
            if commit:
                tag = tags_code(s.tag)
                self._put(
                    s,
                    s.topic,
                    s.queue_id,
                    props,
                    uniq,
                    t,
                    tag,
                    msgcodec.TRANSACTION_COMMIT,
                    half_pos,
                )
            self._remove(half_off, t)

        self._at(s.store_ms + end_after_ms, end)

    def batch(self, sends: Sequence[Send]) -> None:
        """``sends`` as one ``MessageBatch`` into the first one's queue at its times: one file,
        one born/store time; each inner unit keeps the client's properties and gets the batch's
        appended (a second UNIQ_KEY, the batch's, which is indexed)."""
        first = sends[0]
        inner = [self._uniq(s) for s in sends]
        uniq = self._uniq(first)
        tail = jp.encode(jp.batch_props(uniq))
        units = []
        for s, own in zip(sends, inner, strict=True):
            props = jp.encode(jp.client_props(uniq_key=own, tags=s.tag, keys=s.keys, user=s.user))
            units.append(self._unit(first, s.body, props + tail, first.topic, first.queue_id,
                                    first.store_ms, 0))  # fmt: skip
        self.sink.put_batch(
            units,
            first.topic,
            first.queue_id,
            [tags_code(s.tag) for s in sends],
            first.store_ms,
            [[uniq, *s.keys] for s in sends],
            [s.body for s in sends],
        )

    # --- time --------------------------------------------------------------------------------

    def advance(self, now_ms: int) -> None:
        """Write every event due before ``now_ms``."""
        while self._events and self._events[0][0] < now_ms:
            due, _, action = heapq.heappop(self._events)
            action(max(due, self.sink.last_store_ms))

    def finish(self) -> None:
        """Write every event still pending (the broker kept running until they were done)."""
        self.advance(_NEVER)

    def _at(self, due: int, action: Callable[[int], None]) -> None:
        self._order += 1
        heapq.heappush(self._events, (due, self._order, action))

    # --- units -------------------------------------------------------------------------------

    def _uniq(self, s: Send) -> str:
        client = CLIENT_V6 if s.client_v6 else CLIENT_V4
        self.counter += 1
        return client.uniq_key(s.born_ms - 1, self.counter - 1)

    def _unit(
        self, s: Send, body: bytes, props: bytes, topic: str, queue_id: int, store_ms: int,
        sys_flag: int, prepared: int = 0,
    ) -> bytearray:  # fmt: skip
        return bytearray(
            msgcodec.encode(
                topic=topic,
                queue_id=queue_id,
                queue_offset=0,
                physical_offset=0,
                body=body,
                properties=props,
                born_timestamp=s.born_ms,
                store_timestamp=store_ms,
                born_host=s.born_host,
                store_host=s.store_host,
                sys_flag=sys_flag,
                prepared_transaction_offset=prepared,
                v2=s.v2,
            )
        )

    def _put(
        self, s: Send, topic: str, queue_id: int, props: bytes, uniq: str, store_ms: int,
        tag_code: int, sys_flag: int = 0, prepared: int = 0,
    ) -> tuple[int, int]:  # fmt: skip
        body, flag = s.body, 0
        if len(body) >= jp.COMPRESS_OVER:
            body, flag = zlib.compress(body, jp.COMPRESS_LEVEL), _ZLIB_FLAG
        elif s.compression is not None:
            body = msgcodec.compress_body(body, s.compression)
            flag = msgcodec.compression_bits(s.compression)
        unit = self._unit(s, body, props, topic, queue_id, store_ms, sys_flag | flag, prepared)
        return self.sink.put(unit, topic, queue_id, tag_code, store_ms, [uniq, *s.keys], s.body)

    # --- transaction op messages -------------------------------------------------------------

    def _remove(self, half_offset: int, t: int) -> None:
        item = f"{half_offset},"
        self._op_pending.append(item)
        self._op_size += len(item)
        if self._op_last is None:
            self._op_last = t
        due = (
            t
            if self._op_size > jp.OP_MSG_MAX_SIZE
            else max(t, self._op_last + jp.OP_BATCH_INTERVAL_MS)
        )
        if self._op_at is None or due < self._op_at:
            self._schedule_op(due)

    def _schedule_op(self, due: int) -> None:
        self._op_token += 1
        token = self._op_token
        self._op_at = due
        self._at(due, lambda t: self._write_op(t, token))

    def _write_op(self, t: int, token: int) -> None:
        if token != self._op_token:
            return
        self._op_at = None
        parts: list[str] = []
        size = 0
        while self._op_pending and size < jp.OP_MSG_MAX_SIZE:
            item = self._op_pending.popleft()
            parts.append(item)
            size += len(item)
        self._op_size -= size
        self._op_last = t
        body = "".join(parts).encode("ascii")
        unit = bytearray(
            msgcodec.encode(
                topic=jp.OP_TOPIC,
                queue_id=0,
                queue_offset=0,
                physical_offset=0,
                body=body,
                properties=jp.encode(jp.op_props()),
                born_timestamp=t - 1,
                store_timestamp=t,
                born_host=self.broker_host,
                store_host=self.broker_host,
                v2=False,
            )
        )
        self.sink.put(unit, jp.OP_TOPIC, 0, _OP_TAG_CODE, t, (), body)
        if self._op_pending:
            again = self._op_size >= jp.OP_MSG_MAX_SIZE
            self._schedule_op(t if again else t + jp.OP_BATCH_INTERVAL_MS)
