"""The broker half of the endpoint: one method per request code, over the access layer.

Every read goes through :class:`~tiered.read.message_store.TieredMessageStore` (storage levels,
per-topic overrides, CRC checks, the read-ahead cache) -- offsets the broker still holds are read
from its store, read-only -- and key queries through the key index (plus the broker's own index
files for what is only local). Writes are refused: the endpoint is read-only -- messages, and the
admin requests that change topics, groups, offsets or the broker's configuration
(:data:`~.codes.CONFIG_WRITES`); requests a broker answers by calling into a consumer
(:data:`~.codes.CLIENT_CALLBACKS`) are refused by name too. Orderly consumers' queue locks are
kept as the broker keeps them (:mod:`.locks`); the ``mqadmin`` requests are :mod:`.admin`'s.
A cold read refused past ``tieredReadMaxPending`` is answered ``SYSTEM_BUSY``, the code a busy
broker answers and clients back off on.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tiered import metrics
from tiered.access.accounts import BAD_CREDENTIALS
from tiered.access.guard import THROTTLED
from tiered.access.security import Security
from tiered.broker import message as msgcodec
from tiered.broker.broker_index import lookup_index_files
from tiered.config import TieredConfig
from tiered.errors import AclError
from tiered.errors import BrokerStoreError
from tiered.errors import IndexFileError
from tiered.errors import IntegrityError
from tiered.errors import InvalidRequestError
from tiered.errors import PopStateFullError
from tiered.errors import ProviderError
from tiered.errors import ReadBusyError
from tiered.index.search import message_keys
from tiered.index.service import IndexService
from tiered.metadata import LONG_MAX
from tiered.read.fetcher import GetStatus
from tiered.read.message_store import MAX_QUEUE_ID
from tiered.read.message_store import TieredMessageStore
from tiered.read.tag_filter import TagFilter

from .admin import Admin
from .assignment import Assignments
from .body import dumps
from .body import message_queue
from .codes import CLIENT_CALLBACKS
from .codes import CONFIG_WRITES
from .codes import FLAG_COMMIT_OFFSET
from .codes import FLAG_SUBSCRIPTION
from .codes import FLAG_SUSPEND
from .codes import ONEWAY_FLAG
from .codes import REFUSED
from .codes import UNIQUE_KEY_QUERY
from .codes import WRITES
from .codes import RequestCode
from .codes import ResponseCode
from .codes import code_name
from .fields import field
from .fields import int_field
from .frame import LANGUAGES
from .frame import Channel
from .frame import Command
from .groups import Clients
from .groups import ReplayOffsets
from .locks import RebalanceLocks
from .naming import Naming
from .peers import LOCAL_ONLY
from .pop import Pops
from .pop import batch_ack_targets
from .pop_state import PopState
from .pop_watch import PopWatch

log = logging.getLogger(__name__)

MAX_PULL_COUNT = 4096
MAX_PULL_BYTES = 4 << 20
"""Message bytes one pull returns at most (at least one message); a Java client refuses frames
over 16 MiB."""
MAX_SUSPEND_MS = 60_000
DEFAULT_QUERY_MAX = 32
MAX_QUERY_NUM = 1024
_QUEUE_ID, _QUEUE_OFFSET = 12, 20  # message header positions


@dataclass(frozen=True, slots=True)
class Suspend:
    """A pull (or pop) that found nothing new and may be held (long polling) until
    ``deadline``; re-run once its queue moved past ``offset`` (a pop: once ``ready()``)."""

    request: Command
    topic: str
    queue_id: int
    offset: int
    deadline: float  # time.monotonic()
    ready: Callable[[], bool] | None = None


Response = Command | Suspend
_PULLS = frozenset({RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE})
_parse_tags = functools.lru_cache(maxsize=256)(TagFilter.parse)
"""A subscription expression parsed once, not per pull (bounded: expressions are the clients')."""
_BEFORE_READY = frozenset({RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT})
"""Requests answered while the sidecar restores its queues (they read nothing)."""


class Replay:
    """Answers one request at a time (thread-safe; the server calls it from a thread pool)."""

    def __init__(
        self,
        cfg: TieredConfig,
        store: TieredMessageStore,
        naming: Naming,
        *,
        index: Callable[[], IndexService | None] = lambda: None,
        clients: Clients | None = None,
        offsets: ReplayOffsets,
        security: Security | None = None,
        ready: Callable[[], bool] = lambda: True,
        locks: RebalanceLocks | None = None,
        pop_state: PopState | None = None,
    ) -> None:
        self.cfg = cfg
        self.ready = ready
        self.store = store
        self.naming = naming
        self.index = index
        self.clients = clients or Clients()
        self.offsets = offsets
        self.security = security
        self.locks = locks or RebalanceLocks()
        self.admin = Admin(cfg, store, naming, self.clients, offsets)
        self.pop_state = pop_state or PopState(None)
        self.pops = Pops(cfg, store, naming, offsets, self.pop_state, _parse_tags)
        self.assignments = Assignments(cfg, naming, self.clients, self.pop_state)
        self.held: Callable[[], list[Suspend]] = list
        """The requests the server holds now (long polling; it sets this)."""
        self.watch = PopWatch(self.pops, self.held_requests)
        self._refusals_logged: set[int] = set()
        self._handlers: dict[int, Callable[[Command], Response]] = {
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.cluster_info,
            RequestCode.HEART_BEAT: self.heartbeat,
            RequestCode.UNREGISTER_CLIENT: self.unregister,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
            RequestCode.CHECK_CLIENT_CONFIG: self.check_client_config,
            RequestCode.QUERY_CONSUMER_OFFSET: self.query_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.update_offset,
            RequestCode.PULL_MESSAGE: self.pull,
            RequestCode.LITE_PULL_MESSAGE: self.pull,
            RequestCode.GET_MAX_OFFSET: self.max_offset,
            RequestCode.GET_MIN_OFFSET: self.min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self.earliest_time,
            RequestCode.QUERY_MESSAGE: self.query_message,
            RequestCode.VIEW_MESSAGE_BY_ID: self.view_message,
            RequestCode.LOCK_BATCH_MQ: self.lock_batch,
            RequestCode.UNLOCK_BATCH_MQ: self.unlock_batch,
            **self.admin.handlers(),
            **self.pops.handlers(),
            **self.assignments.handlers(),
            **self.watch.handlers(),
        }

    def held_requests(self) -> list[Suspend]:
        return self.held()

    def flush(self) -> None:
        """Write the replay groups' offsets and POP state if they changed.

        Raises:
            OSError: a write failed (retried at the next flush).
        """
        self.offsets.flush()
        self.pop_state.flush()

    # --- dispatch ---------------------------------------------------------------------------------

    def handle(self, request: Command, *, may_suspend: bool = True) -> Response:
        """The response to ``request`` (or, with ``may_suspend``, a :class:`Suspend` for a pull
        that found nothing new); never raises for bad input: the response code and remark say
        what is wrong. ``may_suspend`` is False only for the re-run of a held pull (which then
        commits no offset, as the broker's ``brokerAllowSuspend``)."""
        code = request.code
        if code in WRITES:
            return request.response(
                ResponseCode.NO_PERMISSION,
                f"{RequestCode(code).name} refused: this is a read-only replay endpoint "
                "(rocketmq-tiered); send messages to the broker",
            )
        if code in CONFIG_WRITES:
            return request.response(
                ResponseCode.NO_PERMISSION,
                f"{RequestCode(code).name} refused: this is a read-only replay endpoint "
                "(rocketmq-tiered) that keeps no topic, group, offset or broker configuration to "
                "change; send it to the broker or its name server",
            )
        if code in CLIENT_CALLBACKS:
            return request.response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f"{RequestCode(code).name} is not served by the rocketmq-tiered replay endpoint: "
                "answering it means asking the consumer over its connection and waiting for "
                "its answer, which the endpoint never does",
            )
        handler = self._handlers.get(code)
        if handler is None:
            reason = REFUSED.get(code) or (
                "it answers routes, heartbeats, pulls, POP (pop, ack, changeInvisibleTime, "
                "notification, peek), offsets, orderly-consumer locks, queries by key, time and "
                "id, and the read-only admin requests of mqadmin clusterList, topicList, "
                "topicStatus, consumerProgress and queryMsgBy*/printMsg*; consume with one of "
                "those, or send this request to the broker"
            )
            remark = (
                f"request code {code} ({code_name(code)}) is not supported by the "
                f"rocketmq-tiered replay endpoint: {reason}"
            )
            if code not in self._refusals_logged and len(self._refusals_logged) < 256:
                self._refusals_logged.add(code)  # once per code: the next gap shows up
                log.warning("replay request from %s refused: %s", request.peer, remark)
            return request.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark)
        if code not in _BEFORE_READY and not self.ready():
            return request.response(
                ResponseCode.SYSTEM_BUSY,
                "the sidecar is still restoring its queues from tieredStoreMetadata.json; retry "
                "shortly (answering now could skip what only the tier holds)",
            )
        try:
            self._authorize(request)
            if code in _PULLS:
                return self.pull(request, may_suspend=may_suspend)
            if code == RequestCode.POP_MESSAGE:
                return self.pops.pop(request, may_suspend=may_suspend)
            if code == RequestCode.NOTIFICATION:
                return self.watch.notification(request, may_suspend=may_suspend)
            return handler(request)
        except AclError as e:
            return request.response(ResponseCode.NO_PERMISSION, str(e))
        except InvalidRequestError as e:
            return request.response(ResponseCode.INVALID_PARAMETER, str(e))
        except IntegrityError as e:
            return request.response(ResponseCode.SYSTEM_ERROR, f"tier data damaged: {e}")
        except ReadBusyError as e:
            metrics.child(metrics.READ_REJECTED, "remoting").inc()
            return request.response(ResponseCode.SYSTEM_BUSY, f"system busy: {e}")
        except PopStateFullError as e:
            return request.response(ResponseCode.SYSTEM_BUSY, f"system busy: {e}")
        except ProviderError as e:
            code_out = ResponseCode.SYSTEM_BUSY if e.retriable else ResponseCode.SYSTEM_ERROR
            return request.response(code_out, f"the tier's backend failed: {e}")
        except BrokerStoreError as e:
            return request.response(ResponseCode.SYSTEM_ERROR, f"the broker's store: {e}")

    def _authorize(self, request: Command) -> None:
        """Raises AclError unless the request is signed by an account that may read what it
        names; every refusal counted and audited, a failed signature answered after the guard's
        wait (this connection's next request waits with it)."""
        security = self.security
        acl = None if security is None else security.acl
        if security is None or acl is None:
            return
        ext = request.ext_fields
        topic = ext.get("topic")
        if request.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            topic = None  # a route reveals queue counts only; reads are checked
        group = ext.get("consumerGroup")
        if request.code == RequestCode.CONSUMER_SEND_MSG_BACK:
            topic, group = ext.get("originTopic"), ext.get("group")
        guard, peer = security.guard, request.peer
        address = peer.rpartition(":")[0].strip("[]") or peer
        try:
            account = acl.check(ext, request.body, topic, group)
            if request.code == RequestCode.BATCH_ACK_MESSAGE:  # the acks name their own
                for entry_topic, entry_group in batch_ack_targets(request.body):
                    topic, group = entry_topic, entry_group
                    acl.authorize(account, entry_topic, entry_group)
        except AclError as e:
            reason = e.reason
            if reason == BAD_CREDENTIALS:
                penalty = guard.failed("remoting", address, e.access_key)
                guard.pause(penalty.wait_s)
                if penalty.throttled:
                    reason = THROTTLED
                    e = AclError(
                        f"{e}; too many failed authentications of this AccessKey from {address}: "
                        f"its failures are answered one per {math.ceil(guard.spacing_s)} s "
                        "(correct signatures at once)",
                        reason=THROTTLED,
                        access_key=e.access_key,
                    )
            guard.denied(
                "remoting",
                reason,
                address,
                f"{code_name(request.code)}: {e}",
                access_key=e.access_key,
                topic=topic,
                group=group,
            )
            raise e from None

    # --- name server ------------------------------------------------------------------------------

    def route(self, request: Command) -> Response:
        topic = field(request.ext_fields, "topic")
        body = self.naming.route(topic, local_only=_local_only(request))
        if body is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {topic} (neither the tier "
                "nor the broker's store holds it)",
            )
        return request.response(ResponseCode.SUCCESS, body=body)

    def cluster_info(self, request: Command) -> Response:
        body = self.naming.cluster_info(local_only=_local_only(request))
        return request.response(ResponseCode.SUCCESS, body=body)

    # --- clients and groups -----------------------------------------------------------------------

    def heartbeat(self, request: Command) -> Response:
        try:
            data = json.loads(request.body or b"{}")
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            language = request.language if request.language in _LANGUAGE_NAMES else "OTHER"
            changed = self.clients.heartbeat(
                data,
                address=request.peer,
                language=language,
                version=request.version,
                channel=request.channel,
            )
        except (UnicodeDecodeError, ValueError) as e:
            raise InvalidRequestError(f"the heartbeat body is not HeartbeatData JSON: {e}") from e
        self.notify_changed(changed)
        return request.response(ResponseCode.SUCCESS)

    def unregister(self, request: Command) -> Response:
        ext = request.ext_fields
        left = self.clients.unregister(field(ext, "clientID"), ext.get("consumerGroup"))
        self.notify_changed(left)
        return request.response(ResponseCode.SUCCESS)

    def channel_closed(self, channel: Channel, peer: str) -> None:
        """A client connection closed: its clients leave every group at once (the broker's
        channel-close event) and the groups' other clients are told to rebalance."""
        lost = self.clients.drop_channel(channel)
        for group, gone in sorted(lost.items()):
            log.info(
                "replay connection from %s closed: consumer %s left group %s (its queues go to "
                "the group's other consumers, told to rebalance now)",
                peer,
                ", ".join(gone),
                group,
            )
        self.notify_changed(sorted(lost))

    def notify_changed(self, groups: list[str]) -> None:
        """``NOTIFY_CONSUMER_IDS_CHANGED`` (one way) to every live client of each group, as a
        broker does when a group's members or subscriptions change: they rebalance now, not at
        their next 20 s tick."""
        for group in groups:
            for channel in self.clients.channels(group):
                if isinstance(channel, Channel) and not channel.closed:
                    channel.push(notify_ids_changed(group))

    def consumer_list(self, request: Command) -> Response:
        group = field(request.ext_fields, "consumerGroup")
        found = self.clients.clients(group)
        if not found:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"no consumer of group {group} has sent a heartbeat"
            )
        return request.response(
            ResponseCode.SUCCESS, body=json.dumps({"consumerIdList": found}).encode()
        )

    def check_client_config(self, request: Command) -> Response:
        try:
            body = json.loads(request.body or b"{}")
            sub = body.get("subscriptionData") or {}
            kind = str(sub.get("expressionType") or "TAG")
        except (UnicodeDecodeError, ValueError, AttributeError) as e:
            raise InvalidRequestError(f"the CHECK_CLIENT_CONFIG body is not JSON: {e}") from e
        if kind.upper() != "TAG":
            return request.response(ResponseCode.SYSTEM_ERROR, _sql92_refused(kind))
        return request.response(ResponseCode.SUCCESS)

    def query_offset(self, request: Command) -> Response:
        ext = request.ext_fields
        group, topic = field(ext, "consumerGroup"), field(ext, "topic")
        queue_id = int_field(ext, "queueId")
        offset = self.offsets.get(group, topic, queue_id)
        if offset is None:
            if self.cfg.tiered_remoting_new_group_offset == "CLIENT":
                return request.response(
                    ResponseCode.QUERY_NOT_FOUND,
                    f"no committed offset of group {group} on {topic}/{queue_id} "
                    "(tieredRemotingNewGroupOffset=CLIENT: the consumer's consumeFromWhere "
                    "decides)",
                )
            offset = max(self.store.get_min_offset(topic, queue_id), 0)
        return request.response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    def update_offset(self, request: Command) -> Response:
        ext = request.ext_fields
        group, topic = field(ext, "consumerGroup"), field(ext, "topic")
        queue_id, committed = int_field(ext, "queueId"), int_field(ext, "commitOffset")
        refused = self._unknown_queue(request, topic, queue_id)
        if refused is not None:
            return refused
        self.offsets.commit(group, topic, queue_id, committed)
        return request.response(ResponseCode.SUCCESS)

    def _unknown_queue(self, request: Command, topic: str, queue_id: int) -> Response | None:
        """The broker's answer to an offset for a topic it does not have (offsets are kept only
        for topics the tier or the broker's store holds: a client cannot grow the table with
        names of its own), or for a queue id out of range; None when the queue may be real."""
        if not self.store.topics.known(topic):
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"Topic {topic} not exist! (neither the tier nor the broker's store holds it; "
                "the replay endpoint keeps offsets only for the topics it serves)",
            )
        if not 0 <= queue_id <= MAX_QUEUE_ID:
            return request.response(
                ResponseCode.INVALID_PARAMETER,
                f"queueId={queue_id} of topic {topic} is not a queue (0..{MAX_QUEUE_ID})",
            )
        return None

    # --- orderly consumers' queue locks ----------------------------------------------------------

    def lock_batch(self, request: Command) -> Response:
        """``LockBatchResponseBody``: the queues of the request the client now holds."""
        group, client, queues = _lock_body(request.body, self.cfg.broker_name)
        held = set(self.locks.try_lock(group, client, queues))
        locked = [message_queue(t, b, q) for (t, q), b in queues.items() if (t, q) in held]
        return request.response(ResponseCode.SUCCESS, body=dumps({"lockOKMQSet": locked}))

    def unlock_batch(self, request: Command) -> Response:
        group, client, queues = _lock_body(request.body, self.cfg.broker_name)
        self.locks.unlock(group, client, queues)
        return request.response(ResponseCode.SUCCESS)

    # --- pull -------------------------------------------------------------------------------------

    def pull(self, request: Command, *, may_suspend: bool = True) -> Response:
        """A pull, its status mapped as the broker's ``PullMessageProcessor`` maps it: FOUND ->
        SUCCESS with the messages as stored, back to back; NO_MATCHED_MESSAGE ->
        PULL_RETRY_IMMEDIATELY; OFFSET_OVERFLOW_ONE and OFFSET_FOUND_NULL -> PULL_NOT_FOUND (held
        up to ``suspendTimeoutMillis`` when the request carries the suspend flag:
        :class:`Suspend`); OFFSET_TOO_SMALL and OFFSET_OVERFLOW_BADLY -> PULL_OFFSET_MOVED with a
        corrected ``nextBeginOffset``; an unknown or empty queue -> PULL_NOT_FOUND at offset 0,
        PULL_OFFSET_MOVED elsewhere."""
        ext = request.ext_fields
        topic, queue_id = field(ext, "topic"), int_field(ext, "queueId")
        offset, sys_flag = int_field(ext, "queueOffset"), int_field(ext, "sysFlag", 0)
        group = ext.get("consumerGroup") or ""
        max_count = min(max(int_field(ext, "maxMsgNums", 32), 1), MAX_PULL_COUNT)
        if may_suspend and sys_flag & FLAG_COMMIT_OFFSET and group:
            # first handling only (a held pull's re-run carries a commitOffset from before the
            # batch the consumer read since), and forward only: see ReplayOffsets
            committed = int_field(ext, "commitOffset", -1)
            if committed >= 0 and self._unknown_queue(request, topic, queue_id) is None:
                self.offsets.commit(group, topic, queue_id, committed, forward_only=True)
        if sys_flag & FLAG_SUBSCRIPTION:
            expression = ext.get("subscription") or "*"
            kind = ext.get("expressionType") or "TAG"
        else:
            sub = self.clients.subscription(group, topic)
            expression, kind = (sub.expression, sub.expression_type) if sub else ("*", "TAG")
        if kind.upper() != "TAG":
            return request.response(ResponseCode.SYSTEM_ERROR, _sql92_refused(kind))
        try:
            tags = _parse_tags(expression)
        except InvalidRequestError as e:
            return request.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(e))
        max_bytes = max(min(int_field(ext, "maxMsgBytes", MAX_PULL_BYTES), MAX_PULL_BYTES), 1)
        started = time.perf_counter()
        prepared, queue = request.prepared, (topic, queue_id)
        result = None
        if prepared is not None:  # read while the consumer worked on the previous answer?
            result = prepared.take(queue, (request.code, offset, max_count, expression, max_bytes))
            if result is not None:  # read ahead: counted out now that a client gets it
                self.store.count_out(topic, result)
        if result is None:
            result = self.store.get_message(
                topic, queue_id, offset, max_count, tags, max_bytes=max_bytes
            )
        metrics.REMOTING_PULL_LATENCY.observe((time.perf_counter() - started) * 1000)
        status = result.status
        if status is GetStatus.FOUND and prepared is not None:  # the next pull, read ahead
            nxt = result.next_begin_offset
            read = functools.partial(
                self.store.get_message,
                topic,
                queue_id,
                nxt,
                max_count,
                tags,
                max_bytes=max_bytes,
                ahead=True,
            )
            prepared.expect(queue, (request.code, nxt, max_count, expression, max_bytes), read)
        header = {
            "suggestWhichBrokerId": "0",
            "nextBeginOffset": str(result.next_begin_offset),
            "minOffset": str(max(result.min_offset, 0)),
            "maxOffset": str(max(result.max_offset, result.next_begin_offset, 0)),
        }
        if status is GetStatus.FOUND:
            metrics.child(metrics.REMOTING_MESSAGES_SERVED, result.tier).inc(result.count)
            return request.response(
                ResponseCode.SUCCESS, ext_fields=header, body_parts=result.body_parts()
            )
        if status is GetStatus.NO_MATCHED_MESSAGE:
            return request.response(ResponseCode.PULL_RETRY_IMMEDIATELY, ext_fields=header)
        moved = status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY) or (
            status in (GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.NO_MESSAGE_IN_QUEUE)
            and offset != 0
        )
        if moved:
            return request.response(
                ResponseCode.PULL_OFFSET_MOVED,
                f"offset {offset} of {topic}/{queue_id} is not in the queue ({status.value}); "
                f"next {result.next_begin_offset}",
                ext_fields=header,
            )
        suspend_ms = min(max(int_field(ext, "suspendTimeoutMillis", 0), 0), MAX_SUSPEND_MS)
        if may_suspend and sys_flag & FLAG_SUSPEND and suspend_ms > 0:
            return Suspend(request, topic, queue_id, offset, time.monotonic() + suspend_ms / 1000)
        return request.response(ResponseCode.PULL_NOT_FOUND, ext_fields=header)

    def has_new(self, held: Suspend) -> bool:
        """Whether a held pull may now find something (the queue's max moved past its offset),
        or a held pop (its own test)."""
        if held.ready is not None:
            return held.ready()
        return self.store.get_max_offset(held.topic, held.queue_id) > held.offset

    # --- offsets and times ------------------------------------------------------------------------

    def _queue(self, request: Command) -> tuple[str, int]:
        return field(request.ext_fields, "topic"), int_field(request.ext_fields, "queueId")

    def max_offset(self, request: Command) -> Response:
        value = max(self.store.get_max_offset(*self._queue(request)), 0)
        return request.response(ResponseCode.SUCCESS, ext_fields={"offset": str(value)})

    def min_offset(self, request: Command) -> Response:
        value = max(self.store.get_min_offset(*self._queue(request)), 0)
        return request.response(ResponseCode.SUCCESS, ext_fields={"offset": str(value)})

    def search_offset(self, request: Command) -> Response:
        topic, queue_id = self._queue(request)
        ext = request.ext_fields
        boundary = (ext.get("boundaryType") or "LOWER").upper()
        value = self.store.get_offset_by_time(
            topic, queue_id, int_field(ext, "timestamp"), boundary
        )
        return request.response(ResponseCode.SUCCESS, ext_fields={"offset": str(max(value, 0))})

    def earliest_time(self, request: Command) -> Response:
        value = self.store.get_earliest_message_time(*self._queue(request))
        return request.response(ResponseCode.SUCCESS, ext_fields={"timestamp": str(value)})

    # --- messages by key and by id ----------------------------------------------------------------

    def query_message(self, request: Command) -> Response:
        ext = request.ext_fields
        topic, key = field(ext, "topic"), field(ext, "key")
        max_num = min(max(int_field(ext, "maxNum", DEFAULT_QUERY_MAX), 1), MAX_QUERY_NUM)
        begin, end = int_field(ext, "beginTimestamp", 0), int_field(ext, "endTimestamp", LONG_MAX)
        if ext.get(UNIQUE_KEY_QUERY) == "true":
            begin, end = 0, LONG_MAX  # a msgId query: the caller's time range is a guess
        found: dict[tuple[int, int], bytes] = {}
        for data in self._local_by_key(topic, key, begin, end, max_num):
            found.setdefault(_queue_position(data), data)
        service = self.index()
        if service is not None and len(found) < max_num:
            for hit in service.query(topic, key, begin, end, max_num):
                found.setdefault(_queue_position(hit.data), hit.data)
        if not found:
            return request.response(
                ResponseCode.QUERY_NOT_FOUND,
                f"can not find message with key {key!r} in topic {topic} (tier and broker "
                "index), maybe time range not correct",
            )
        newest = sorted(found.values(), key=msgcodec.store_timestamp_of, reverse=True)[:max_num]
        header = {"indexLastUpdateTimestamp": str(int(time.time() * 1000)),
                  "indexLastUpdatePhyoffset": "0"}  # fmt: skip
        return request.response(ResponseCode.SUCCESS, ext_fields=header, body=b"".join(newest))

    def _local_by_key(self, topic: str, key: str, begin: int, end: int, limit: int) -> list[bytes]:
        """Messages of ``topic`` with ``key`` found through the broker's own index files."""
        index_dir = self.cfg.store_index_dir
        try:
            paths = sorted(p for p in Path(index_dir).iterdir() if p.is_file())
        except OSError:
            return []
        try:
            hits = lookup_index_files(
                paths, topic, key, begin, end, max_num=limit, slots=self.cfg.max_hash_slot_num
            )
        except (IndexFileError, BrokerStoreError, OSError) as e:
            log.warning("the broker's index files under %s are not usable: %s", index_dir, e)
            return []
        out = []
        for hit in hits:
            data = self._local_message(hit.phys_offset)
            if data is None:
                continue
            message = msgcodec.decode(data)
            if message.topic == topic and key in message_keys(message):
                out.append(data)
        return out

    def _local_message(self, phys: int) -> bytes | None:
        """The stored unit at commitlog offset ``phys``, while the broker holds it."""
        commitlog = self.store.local.commitlog
        for attempt in range(2):
            try:
                size = int.from_bytes(commitlog.read(phys, 4), "big", signed=True)
                if size <= 0:
                    return None
                data = commitlog.read(phys, size)
                msgcodec.decode(data)
                return data
            except (BrokerStoreError, OSError, ValueError):
                if attempt == 0:
                    self.store.local.refresh()
        return None

    def view_message(self, request: Command) -> Response:
        phys = int_field(request.ext_fields, "offset")
        data = self._local_message(phys)
        if data is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"can not find message by the offset {phys}: the broker no longer holds it; "
                "tiered copies are found by their unique key (QUERY_MESSAGE with "
                "_UNIQUE_KEY_QUERY=true, which mqadmin queryMsgById falls back to)",
            )
        return request.response(ResponseCode.SUCCESS, body=data)


_LANGUAGE_NAMES = frozenset(LANGUAGES.values())
_OPAQUES = itertools.count(1)


def notify_ids_changed(group: str) -> Command:
    """The one-way ``NOTIFY_CONSUMER_IDS_CHANGED`` a broker sends a group's clients."""
    return Command(
        RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
        opaque=next(_OPAQUES),
        flag=ONEWAY_FLAG,
        ext_fields={"consumerGroup": group},
    )


def _lock_body(body: bytes, broker_name: str) -> tuple[str, str, dict[tuple[str, int], str]]:
    """``consumerGroup``, ``clientId`` and ``mqSet`` (``(topic, queueId) -> brokerName``) of a
    ``LockBatchRequestBody`` / ``UnlockBatchRequestBody``."""
    try:
        data = json.loads(body or b"{}")
    except (UnicodeDecodeError, ValueError) as e:
        raise InvalidRequestError(f"the lock request body is not JSON: {e}") from e
    if not isinstance(data, dict):
        raise InvalidRequestError("the lock request body is not a JSON object")
    group, client, mqs = data.get("consumerGroup"), data.get("clientId"), data.get("mqSet")
    if not isinstance(group, str) or not group or not isinstance(client, str) or not client:
        raise InvalidRequestError("the lock request body has no consumerGroup or clientId")
    if not isinstance(mqs, list | None):
        raise InvalidRequestError(f"the lock request's mqSet {mqs!r} is not a list")
    queues: dict[tuple[str, int], str] = {}
    for mq in mqs or []:
        topic = mq.get("topic") if isinstance(mq, dict) else None
        queue_id = mq.get("queueId") if isinstance(mq, dict) else None
        if (
            not isinstance(topic, str)
            or isinstance(queue_id, bool)
            or not isinstance(queue_id, int)
        ):
            raise InvalidRequestError(f"mqSet entry {mq!r} is not a MessageQueue")
        queues[(topic, queue_id)] = str(mq.get("brokerName") or broker_name)
    return group, client, queues


def _sql92_refused(kind: str) -> str:
    return (
        f"expressionType {kind} is not supported by the replay endpoint: subscribe with tags "
        "(TAG expressions such as 'TagA || TagB' or '*')"
    )


def _queue_position(data: bytes) -> tuple[int, int]:
    return (
        int.from_bytes(data[_QUEUE_ID : _QUEUE_ID + 4], "big"),
        int.from_bytes(data[_QUEUE_OFFSET : _QUEUE_OFFSET + 8], "big"),
    )


def _local_only(request: Command) -> bool:
    """A peer sidecar asks for this broker's own answer (never merged with the peers')."""
    return request.ext_fields.get(LOCAL_ONLY) == "true"
