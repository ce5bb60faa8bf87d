"""POP on the replay endpoint: ``POP_MESSAGE``, ``ACK_MESSAGE``, ``BATCH_ACK_MESSAGE`` and
``CHANGE_MESSAGE_INVISIBLETIME`` answered as the broker's ``PopMessageProcessor``,
``AckMessageProcessor`` and ``ChangeInvisibleTimeProcessor`` answer them, over
:class:`~.pop_state.PopState` (nothing is written to the broker), plus the subscription-group
config a RocketMQ Proxy asks before it pops.

A pop reads like a pull (the same store, tag filters, byte cap) from one queue or, with queueId
-1, from every queue of the topic in turn; redelivered messages go out with ``reconsumeTimes`` =
deliveries - 1 written into a copy of the stored unit (the broker sends a revived copy from its
retry topic). The response header carries what the clients build the receipt handle from
(``popTime``, ``invisibleTime``, ``reviveQid`` -- 999 for an orderly pop, as upstream's
``POP_ORDER_REVIVE_QUEUE`` -- ``startOffsetInfo``, ``msgOffsetInfo``, ``orderCountInfo``). A pop
that finds nothing is held up to its ``pollTime`` (long polling, as held pulls) and then answered
``POLLING_TIMEOUT``. A queue's pop progress is committed as the group's consumer offset
(``QUERY_CONSUMER_OFFSET``, ``consumerProgress``).

``CONSUMER_SEND_MSG_BACK`` of a message a POP group has in flight -- what a proxy sends when a
gRPC client gives up on a message (``forwardMessageToDeadLetterQueue``: a FIFO PushConsumer after
its last delivery attempt) or pops one past the retry limit -- dead-letters it (recorded,
never written: :mod:`.pop_state`); any other send-back is a pull consumer's and is refused (the
tier is read-only; the client consumes the message again itself).
"""

from __future__ import annotations

import base64
import itertools
import json
import logging
import os
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from tiered import metrics
from tiered.broker import message as msgcodec
from tiered.broker.configjson import SubscriptionGroupConfig
from tiered.broker.configjson import bean
from tiered.broker.configjson import load_subscription_groups
from tiered.config import TieredConfig
from tiered.errors import BrokerStoreError
from tiered.errors import InvalidRequestError
from tiered.read.fetcher import GetStatus
from tiered.read.message_store import MAX_QUEUE_ID
from tiered.read.message_store import TieredMessageStore
from tiered.read.tag_filter import TagFilter

from .body import dumps
from .codes import RETRY_GROUP_TOPIC_PREFIX
from .codes import RequestCode
from .codes import ResponseCode
from .fields import field
from .fields import int_field
from .frame import Command
from .groups import ReplayOffsets
from .naming import Naming
from .pop_state import Claim
from .pop_state import Key
from .pop_state import PopState

if TYPE_CHECKING:
    from .handlers import Response

log = logging.getLogger(__name__)

ORDER_REVIVE_QID = 999
"""Upstream's ``KeyBuilder.POP_ORDER_REVIVE_QUEUE``: the revive queue id an orderly pop's
handle names (``ExtraInfoUtil.isOrder``)."""
MAX_POP_COUNT = 32
"""Messages one pop hands out at most (upstream's ``MAX_MSG_NUMS_FOR_POP_REQUEST``)."""
MAX_POLL_MS = 60_000
MAX_POP_BYTES = 4 << 20
INIT_MODE_MAX = 1  # ConsumeInitMode.MAX
NORMAL_TOPIC = "0"  # ExtraInfoUtil's mark of a message of the topic itself (not a retry topic)
_SEP = " "  # MessageConst.KEY_SEPARATOR
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_SYS_FLAG_AT = 36


class Pops:
    """The POP requests of one endpoint (thread-safe)."""

    def __init__(
        self,
        cfg: TieredConfig,
        store: TieredMessageStore,
        naming: Naming,
        offsets: ReplayOffsets,
        state: PopState,
        parse_tags: Callable[[str], TagFilter],
    ) -> None:
        self.cfg = cfg
        self.store = store
        self.naming = naming
        self.offsets = offsets
        self.state = state
        self.parse_tags = parse_tags
        self._turn = itertools.count()
        self._groups = BrokerGroups(Path(cfg.store_path_root_dir) / "config")

    def handlers(self) -> dict[int, Callable[[Command], Response]]:
        return {
            RequestCode.POP_MESSAGE: self.pop,
            RequestCode.ACK_MESSAGE: self.ack,
            RequestCode.BATCH_ACK_MESSAGE: self.batch_ack,
            RequestCode.CHANGE_MESSAGE_INVISIBLETIME: self.change_invisible,
            RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG: self.group_config,
            RequestCode.CONSUMER_SEND_MSG_BACK: self.send_back,
        }

    # --- pop --------------------------------------------------------------------------------------

    def pop(self, request: Command, *, may_suspend: bool = True) -> Response:
        from .handlers import Suspend  # a cycle: handlers builds this class

        ext = request.ext_fields
        group, topic = field(ext, "consumerGroup"), field(ext, "topic")
        queue_id = int_field(ext, "queueId", -1)
        count = min(max(int_field(ext, "maxMsgNums", MAX_POP_COUNT), 1), MAX_POP_COUNT)
        invisible = max(int_field(ext, "invisibleTime", 60_000), 0)
        poll_ms = min(max(int_field(ext, "pollTime", 0), 0), MAX_POLL_MS)
        init_mode = int_field(ext, "initMode", 0)
        orderly = (ext.get("order") or "").lower() == "true"
        kind = (ext.get("expType") or "TAG").upper()
        if kind != "TAG":
            return request.response(
                ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                f"expressionType {kind} is not supported by the replay endpoint: subscribe with "
                "tags (TAG expressions such as 'TagA || TagB' or '*')",
            )
        tags = self.parse_tags(ext.get("exp") or "*")
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) and not self.store.topics.known(topic):
            # never written here: redeliveries come from the topic itself
            return self._nothing(request, may_suspend, poll_ms, invisible, orderly)
        if not self.store.topics.known(topic):
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{topic}] not exist (neither the tier nor the broker's store holds it)",
            )
        if queue_id >= 0:
            if queue_id > MAX_QUEUE_ID:
                raise InvalidRequestError(f"queueId={queue_id} of topic {topic} is not a queue")
            queues = [queue_id]
        else:
            listed = sorted(self.naming.topic_queues(topic))
            turn = next(self._turn) % len(listed) if listed else 0
            queues = listed[turn:] + listed[:turn]
        retries = self._groups.get(group).retry_max_times
        now = int(time.time() * 1000)
        found: dict[int, list[tuple[int, int, bytes]]] = {}  # queue -> (offset, times, unit)
        rest, left = 0, count
        for new in (False, True):  # what ran out of invisible time first, in every queue
            for q in queues:
                got, rest_q = self._pop_queue(
                    (group, topic, q), left, now, invisible, tags, init_mode, orderly, retries,
                    new=new,
                )  # fmt: skip
                if new:
                    rest += rest_q
                if got:
                    found.setdefault(q, []).extend(got)
                    left -= len(got)
        out = sorted(found.items())
        self._commit_progress()
        header = {
            "popTime": str(now),
            "invisibleTime": str(invisible),
            "reviveQid": str(ORDER_REVIVE_QID if orderly else 0),
            "restNum": str(rest),
        }
        if not out:
            if may_suspend and poll_ms > 0:
                key_group = group
                return Suspend(
                    request,
                    topic,
                    queue_id,
                    0,
                    time.monotonic() + poll_ms / 1000,
                    ready=lambda: self.due(key_group, topic, queues, orderly),
                )
            return request.response(
                ResponseCode.POLLING_TIMEOUT, "NO_MESSAGE_IN_QUEUE", ext_fields=header
            )
        starts, offsets_info, counts, parts = [], [], [], []
        delivered = redelivered = 0
        for q, got in out:
            got.sort()
            starts.append(f"{NORMAL_TOPIC}{_SEP}{q}{_SEP}{got[0][0]}")
            offsets_info.append(
                f"{NORMAL_TOPIC}{_SEP}{q}{_SEP}" + ",".join(str(o) for o, _, _ in got)
            )
            for offset, times, data in got:
                counts.append(f"{NORMAL_TOPIC}{_SEP}qo{q}%{offset}{_SEP}{times - 1}")
                parts.append(data)
                delivered += 1
                redelivered += times > 1
        header["startOffsetInfo"] = ";".join(starts)
        header["msgOffsetInfo"] = ";".join(offsets_info)
        if orderly:
            header["orderCountInfo"] = ";".join(counts)
        metrics.child(metrics.REMOTING_POP_MESSAGES, "delivered").inc(delivered - redelivered)
        metrics.child(metrics.REMOTING_POP_MESSAGES, "redelivered").inc(redelivered)
        return request.response(ResponseCode.SUCCESS, "FOUND", ext_fields=header, body_parts=parts)

    def _nothing(
        self, request: Command, may_suspend: bool, poll_ms: int, invisible: int, orderly: bool
    ) -> Response:
        """An empty pop: held until its ``pollTime``, then ``POLLING_TIMEOUT``."""
        from .handlers import Suspend

        if may_suspend and poll_ms > 0:
            deadline = time.monotonic() + poll_ms / 1000
            return Suspend(request, "", -1, 0, deadline, ready=lambda: False)
        header = {
            "popTime": str(int(time.time() * 1000)),
            "invisibleTime": str(invisible),
            "reviveQid": str(ORDER_REVIVE_QID if orderly else 0),
            "restNum": "0",
        }
        return request.response(
            ResponseCode.POLLING_TIMEOUT, "NO_MESSAGE_IN_QUEUE", ext_fields=header
        )

    def start_of(self, group: str, topic: str, queue_id: int, init_mode: int) -> int:
        """Where a queue the group never popped starts: its committed offset, else
        ``tieredRemotingNewGroupOffset``'s (EARLIEST: the first offset, tier included; CLIENT:
        the pop's ``initMode``)."""
        committed = self.offsets.get(group, topic, queue_id)
        if committed is not None:
            return committed
        if self.cfg.tiered_remoting_new_group_offset == "CLIENT" and init_mode == INIT_MODE_MAX:
            return max(self.store.get_max_offset(topic, queue_id), 0)
        return max(self.store.get_min_offset(topic, queue_id), 0)

    def _pop_queue(
        self,
        key: tuple[str, str, int],
        count: int,
        now: int,
        invisible: int,
        tags: TagFilter,
        init_mode: int,
        orderly: bool,
        retries: int,
        *,
        new: bool,
    ) -> tuple[list[tuple[int, int, bytes]], int]:
        """What one queue hands out (``(offset, deliveries, unit)``) and how many of its
        messages are left after it."""
        group, topic, q = key
        max_offset = max(self.store.get_max_offset(topic, q), 0)
        if count <= 0:
            cursor = self.state.cursor(key)
            return [], max(max_offset - (cursor if cursor is not None else max_offset), 0)
        before = self.state.dead_letter_total()
        claim = self.state.claim(
            key,
            start=self.start_of(group, topic, q, init_mode),
            now=now,
            invisible_ms=invisible,
            max_count=count,
            max_offset=max_offset,
            orderly=orderly,
            max_redeliveries=retries,
            new=new,
        )
        dead = self.state.dead_letter_total() - before
        if dead:
            metrics.child(metrics.REMOTING_POP_MESSAGES, "dead_lettered").inc(dead)
            log.warning(
                "group %s: %d message(s) of %s/%d delivered %d times and never acked are "
                "dead-lettered (recorded in %s, never written to the broker's %%DLQ%%%s)",
                group, dead, topic, q, retries + 1, self.state.path, group,
            )  # fmt: skip
        if claim is None:
            cursor = self.state.cursor(key)
            return [], max(max_offset - (cursor if cursor is not None else max_offset), 0)
        got = self._again(topic, q, claim)
        if claim.new_from is not None:
            got.extend(self._new(topic, q, claim, tags))
        cursor = self.state.cursor(key)
        return got, max(max_offset - (cursor if cursor is not None else max_offset), 0)

    def _again(self, topic: str, q: int, claim: Claim) -> list[tuple[int, int, bytes]]:
        """The redelivered units of ``claim``, read in runs of consecutive offsets."""
        out = []
        offsets = sorted(claim.again)
        runs: list[list[int]] = []
        for o in offsets:
            if runs and runs[-1][-1] == o - 1:
                runs[-1].append(o)
            else:
                runs.append([o])
        for run in runs:
            result = self.store.get_message(topic, q, run[0], len(run), max_bytes=MAX_POP_BYTES)
            units = {u.queue_offset: u.data for u in result.units}
            for o in run:
                data = units.get(o)
                if data is None:  # gone from the tier since (expired): nothing to deliver
                    self.state.ack((claim.key[0], topic, q), o)
                    continue
                out.append((o, claim.again[o], with_reconsume_times(data, claim.again[o] - 1)))
        return out

    def _new(
        self, topic: str, q: int, claim: Claim, tags: TagFilter
    ) -> list[tuple[int, int, bytes]]:
        assert claim.new_from is not None
        try:
            result = self.store.get_message(
                topic, q, claim.new_from, claim.new_max, tags, max_bytes=MAX_POP_BYTES
            )
        except BaseException:
            self.state.release(claim)
            raise
        status = result.status
        if status is GetStatus.FOUND:
            units = result.units
            self.state.delivered(
                claim,
                [u.queue_offset for u in units],
                result.next_begin_offset,
                [_I64.unpack_from(u.data, msgcodec.PHYSICAL_OFFSET_POSITION)[0] for u in units],
            )
            metrics.child(metrics.REMOTING_MESSAGES_SERVED, result.tier).inc(len(units))
            return [(u.queue_offset, 1, u.data) for u in units]
        if status in (GetStatus.NO_MATCHED_MESSAGE, GetStatus.OFFSET_TOO_SMALL):
            # filtered out, or gone from both tiers: consumed
            self.state.delivered(claim, [], result.next_begin_offset)
        else:
            self.state.release(claim)
        return []

    def due(self, group: str, topic: str, queues: list[int], orderly: bool) -> bool:
        """Whether a held pop may now find something."""
        now = int(time.time() * 1000)
        for q in queues:
            key = (group, topic, q)
            max_offset = max(self.store.get_max_offset(topic, q), 0)
            if self.state.due(key, now, max_offset, orderly=orderly):
                return True
        return False

    def _commit_progress(self) -> None:
        for (group, topic, q), progress in self.state.take_progress().items():
            self.offsets.commit(group, topic, q, progress)

    # --- ack and invisible time -------------------------------------------------------------------

    def ack(self, request: Command) -> Response:
        ext = request.ext_fields
        group, topic = field(ext, "consumerGroup"), field(ext, "topic")
        queue_id, offset = int_field(ext, "queueId"), int_field(ext, "offset")
        _handle(ext)
        if self.state.ack((group, topic, queue_id), offset):
            metrics.child(metrics.REMOTING_POP_MESSAGES, "acked").inc()
        self._commit_progress()
        return request.response(ResponseCode.SUCCESS)

    def batch_ack(self, request: Command) -> Response:
        """``BatchAckMessageRequestBody``: per ``BatchAck`` the offsets ``startOffset + i`` for
        each bit ``i`` of its bit set (fastjson writes it as the base64 of
        ``BitSet.toByteArray``)."""
        try:
            body = json.loads(request.body or b"{}")
            acks = body.get("acks") or []
            if not isinstance(acks, list):
                raise TypeError("acks is not a list")
            done = 0
            for entry in acks:
                group = str(entry.get("c") or entry.get("consumerGroup"))
                topic = str(entry.get("t") or entry.get("topic"))
                queue_id = int(entry.get("q", entry.get("queueId")))
                start = int(entry.get("so", entry.get("startOffset")))
                bits = entry.get("b", entry.get("bitSet"))
                for i in _bits(bits):
                    done += self.state.ack((group, topic, queue_id), start + i)
        except (ValueError, TypeError, AttributeError) as e:
            raise InvalidRequestError(
                f"the BATCH_ACK_MESSAGE body is not a BatchAckMessageRequestBody: {e}"
            ) from e
        metrics.child(metrics.REMOTING_POP_MESSAGES, "acked").inc(done)
        self._commit_progress()
        return request.response(ResponseCode.SUCCESS)

    def change_invisible(self, request: Command) -> Response:
        """A new invisible time for one message from now; answered with the ``popTime`` and
        ``invisibleTime`` the client builds its new handle from (an acked message stays acked)."""
        ext = request.ext_fields
        group, topic = field(ext, "consumerGroup"), field(ext, "topic")
        queue_id, offset = int_field(ext, "queueId"), int_field(ext, "offset")
        invisible = max(int_field(ext, "invisibleTime"), 0)
        handle = _handle(ext)
        now = int(time.time() * 1000)
        self.state.change_invisible((group, topic, queue_id), offset, now, invisible)
        header = {
            "popTime": str(now),
            "invisibleTime": str(invisible),
            "reviveQid": handle[3] if len(handle) > 3 else "0",
        }
        return request.response(ResponseCode.SUCCESS, ext_fields=header)

    # --- dead letters -----------------------------------------------------------------------------

    def send_back(self, request: Command) -> Response:
        """``CONSUMER_SEND_MSG_BACK``: the message at commitlog offset ``offset`` that ``group``
        has in flight (popped from ``originTopic``) is dead-lettered -- whatever ``delayLevel``
        and ``maxReconsumeTimes`` say (a proxy sends -1 and 0: straight to the DLQ) -- and
        answered SUCCESS (the proxy then acks it: a no-op). A POP group without that message
        in flight (acked or dead-lettered already: a send-back sent again) is answered SUCCESS
        too. A group that never popped the topic is a pull consumer's: refused."""
        ext = request.ext_fields
        group, phys = field(ext, "group"), int_field(ext, "offset")
        topic = ext.get("originTopic") or None
        found = self._one(self.state.find(group, topic, phys), ext.get("originMsgId") or "")
        if found is not None:
            (_, topic_of, q), offset = found
            if self.state.dead_letter(*found):
                metrics.child(metrics.REMOTING_POP_MESSAGES, "dead_lettered").inc()
                log.info(
                    "group %s gave up on %s/%d offset %d (commitlog offset %d): dead-lettered "
                    "(recorded in %s, never written to the broker's %%DLQ%%%s)",
                    group, topic_of, q, offset, phys, self.state.path, group,
                )  # fmt: skip
            self._commit_progress()
            return request.response(ResponseCode.SUCCESS)
        if self.state.popped(group, topic):
            log.info(
                "group %s sent back commitlog offset %d of %s, which it has not in flight (acked "
                "or dead-lettered already, or never leased): nothing to dead-letter",
                group, phys, topic or "any topic",
            )  # fmt: skip
            return request.response(
                ResponseCode.SUCCESS,
                f"group {group} has no message in flight at commitlog offset {phys}: acked or "
                "dead-lettered already",
            )
        return request.response(
            ResponseCode.NO_PERMISSION,
            f"CONSUMER_SEND_MSG_BACK refused: this is a read-only replay endpoint "
            f"(rocketmq-tiered) and group {group} does not consume {topic or 'this topic'} by "
            f"POP here, so the message at commitlog offset {phys} cannot go to %RETRY%{group} "
            "or the DLQ: the client consumes it again itself (a DefaultMQPushConsumer retries "
            "it locally and does not commit its offset past it). Return CONSUME_SUCCESS for a "
            "message to skip, or replay the group by POP (a RocketMQ 5 gRPC client through a "
            "proxy, or mqadmin setConsumeMode -m POP) to have given-up messages dead-lettered",
        )

    def _one(self, leased: list[tuple[Key, int]], msg_id: str) -> tuple[Key, int] | None:
        """The one of ``leased`` (messages in flight at the same commitlog offset) whose
        ``UNIQ_KEY`` is ``msg_id`` (the message id the client gave up on), or the only one; None
        when that does not tell (nothing is dead-lettered then: the ack that follows settles the
        message the client meant)."""
        if len(leased) <= 1:
            return leased[0] if leased else None
        for key, offset in leased:
            got = self.store.get_message(key[1], key[2], offset, 1)
            for u in got.units if got.status is GetStatus.FOUND else ():
                if (
                    u.queue_offset == offset
                    and msgcodec.decode(u.data).properties.get(msgcodec.PROPERTY_UNIQ_KEY) == msg_id
                ):
                    return key, offset
        log.warning(
            "a send-back at a commitlog offset %d messages in flight share (%s) names none of "
            "them by its message id %r: nothing dead-lettered", len(leased),
            ", ".join(f"{k[1]}/{k[2]}@{o}" for k, o in leased), msg_id,
        )  # fmt: skip
        return None

    # --- subscription groups ----------------------------------------------------------------------

    def group_config(self, request: Command) -> Response:
        """``SubscriptionGroupConfig`` of a group: the broker's (its ``subscriptionGroup.json``,
        read-only), else a default one (16 retries, concurrent) -- a proxy that gets no answer
        takes 0 retries and dead-letters every message it pops."""
        group = field(request.ext_fields, "group")
        config = self._groups.get(group)
        return request.response(
            ResponseCode.SUCCESS,
            body=dumps({k: v for k, v in bean(config).items() if v is not None}),
        )


class BrokerGroups:
    """The broker's ``config/subscriptionGroup.json``, read again when it changes; a group it
    does not list (or no readable file) gets the broker's defaults."""

    def __init__(self, config_dir: Path) -> None:
        self.path = config_dir / "subscriptionGroup.json"
        self._stamp: tuple[int, int] | None = None
        self._table: dict[str, SubscriptionGroupConfig] = {}
        self._lock = threading.Lock()

    def get(self, group: str) -> SubscriptionGroupConfig:
        try:
            st = os.stat(self.path)
            stamp: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None
        with self._lock:
            if stamp != self._stamp:
                self._stamp = stamp
                self._table = {}
                if stamp is not None:
                    try:
                        loaded = load_subscription_groups(self.path)
                        self._table = dict(loaded.subscription_group_table)
                    except (BrokerStoreError, OSError) as e:
                        log.warning("the broker's %s is not usable: %s", self.path, e)
            found = self._table.get(group)
        return found if found is not None else SubscriptionGroupConfig(group_name=group)


def with_reconsume_times(data: bytes, times: int) -> bytes:
    """A copy of a stored unit with its ``RECONSUMETIMES`` field set to ``times`` (the field sits
    after the born and store hosts, 8 or 20 bytes each by the unit's sysflag)."""
    sys_flag = _I32.unpack_from(data, _SYS_FLAG_AT)[0]
    at = (
        msgcodec.BORN_HOST_POSITION
        + msgcodec.host_size(sys_flag, msgcodec.BORNHOST_V6_FLAG)
        + 8
        + msgcodec.host_size(sys_flag, msgcodec.STOREHOST_V6_FLAG)
    )
    out = bytearray(data)
    _I32.pack_into(out, at, times)
    return bytes(out)


def _handle(ext: dict[str, str]) -> list[str]:
    """The ``extraInfo`` (receipt handle) of an ack or invisible-time change, split.

    Raises:
        InvalidRequestError: it is missing or not ``ckOffset popTime invisibleTime reviveQid
            retry brokerName queueId [offset]``.
    """
    parts = field(ext, "extraInfo").split(_SEP)
    if len(parts) < 7:
        raise InvalidRequestError(
            f"extraInfo {ext['extraInfo']!r} is not a POP handle (ckOffset popTime invisibleTime "
            "reviveQid retry brokerName queueId [offset])"
        )
    return parts


def batch_ack_targets(body: bytes) -> list[tuple[str, str]]:
    """The ``(topic, group)`` pairs a ``BatchAckMessageRequestBody`` acks (none when it does
    not parse: the handler refuses it)."""
    try:
        acks = json.loads(body or b"{}").get("acks") or []
        return sorted(
            {(str(a.get("t") or a.get("topic")), str(a.get("c") or a.get("consumerGroup")))
             for a in acks}
        )  # fmt: skip
    except (UnicodeDecodeError, ValueError, TypeError, AttributeError):
        return []


def _bits(value: Any) -> list[int]:
    """The set bits of a serialized ``BitSet``: base64 of its little-endian bytes, or a list."""
    if isinstance(value, list):
        return [int(x) for x in value]
    if not isinstance(value, str):
        raise TypeError(f"bitSet {value!r} is neither base64 nor a list")
    raw = base64.b64decode(value)
    return [i * 8 + b for i, byte in enumerate(raw) for b in range(8) if byte >> b & 1]
