"""What a POP consumer (or a tool) asks without taking messages, answered as the broker's
``NotificationProcessor``, ``PeekMessageProcessor`` and ``PollingInfoProcessor`` answer it, over
the same :class:`~.pop_state.PopState` as the pops (nothing is leased, acked or written):

* ``NOTIFICATION`` (200054) -- "would a pop find something now?" (``hasMsg``), held up to its
  ``pollTime`` like a pop when not (long polling), for one queue or every queue (queueId -1);
* ``PEEK_MESSAGE`` (200052) -- the messages the group's next pop would read as new (from its
  cursor, else where a new group starts), handed out and left where they are;
* ``POLLING_INFO`` (200055) -- how many pops and notifications of the group are held on the
  queue right now (``pollingNum``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tiered import metrics
from tiered.errors import InvalidRequestError
from tiered.read.fetcher import GetStatus
from tiered.read.message_store import MAX_QUEUE_ID

from .codes import RETRY_GROUP_TOPIC_PREFIX
from .codes import RequestCode
from .codes import ResponseCode
from .fields import field
from .fields import int_field
from .frame import Command
from .pop import MAX_POLL_MS
from .pop import MAX_POP_BYTES
from .pop import MAX_POP_COUNT
from .pop import Pops

if TYPE_CHECKING:
    from .handlers import Response
    from .handlers import Suspend

_HELD_CODES = frozenset({RequestCode.POP_MESSAGE, RequestCode.NOTIFICATION})


class PopWatch:
    """``NOTIFICATION``, ``PEEK_MESSAGE`` and ``POLLING_INFO`` (thread-safe through the pops'
    state); ``held()`` lists the requests the server holds (long polling)."""

    def __init__(self, pops: Pops, held: Callable[[], list[Suspend]]) -> None:
        self.pops = pops
        self.held = held

    def handlers(self) -> dict[int, Callable[[Command], Response]]:
        return {
            RequestCode.NOTIFICATION: self.notification,
            RequestCode.PEEK_MESSAGE: self.peek,
            RequestCode.POLLING_INFO: self.polling_info,
        }

    def _queues(self, topic: str, queue_id: int) -> list[int] | None:
        """The queues a request names (queueId -1: every queue of the topic); None for a topic
        neither tier holds."""
        store = self.pops.store
        if not store.topics.known(topic):
            return None
        if queue_id < 0:
            return sorted(self.pops.naming.topic_queues(topic))
        if queue_id > MAX_QUEUE_ID:
            raise InvalidRequestError(f"queueId={queue_id} of topic {topic} is not a queue")
        return [queue_id]

    def notification(self, request: Command, *, may_suspend: bool = True) -> Response:
        """``hasMsg`` true when a pop of the group would hand something out now (a lease ran
        out, or new messages fit its window); else held up to ``pollTime`` and answered
        again then (``hasMsg`` false at the deadline). A retry topic never has any."""
        from .handlers import Suspend  # a cycle: handlers builds this class

        ext = request.ext_fields
        group, topic = field(ext, "consumerGroup"), field(ext, "topic")
        queue_id = int_field(ext, "queueId", -1)
        poll_ms = min(max(int_field(ext, "pollTime", 0), 0), MAX_POLL_MS)
        orderly = (ext.get("order") or "").lower() == "true"
        queues = self._queues(topic, queue_id)
        if queues is None and not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{topic}] not exist (neither the tier nor the broker's store holds it)",
            )
        listed = queues or []
        has = bool(listed) and self.pops.due(group, topic, listed, orderly)
        if not has and may_suspend and poll_ms > 0:
            return Suspend(
                request,
                topic,
                queue_id,
                0,
                time.monotonic() + poll_ms / 1000,
                ready=lambda: bool(listed) and self.pops.due(group, topic, listed, orderly),
            )
        return request.response(
            ResponseCode.SUCCESS,
            ext_fields={"hasMsg": str(has).lower(), "pollingFull": "false"},
        )

    def peek(self, request: Command) -> Response:
        """Up to ``maxMsgNums`` (at most 32) messages from each queue's cursor on, in queue
        order, without a lease; ``restNum`` is what is left after the cursors. ``PULL_NOT_FOUND``
        when there is nothing."""
        ext = request.ext_fields
        group, topic = field(ext, "consumerGroup"), field(ext, "topic")
        queue_id = int_field(ext, "queueId", -1)
        count = min(max(int_field(ext, "maxMsgNums", MAX_POP_COUNT), 1), MAX_POP_COUNT)
        queues = self._queues(topic, queue_id)
        if queues is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{topic}] not exist (neither the tier nor the broker's store holds it)",
            )
        store, state = self.pops.store, self.pops.state
        parts: list[bytes | bytearray | memoryview] = []
        rest = got = 0
        for q in queues:
            cursor = state.cursor((group, topic, q))
            start = self.pops.start_of(group, topic, q, 0) if cursor is None else cursor
            rest += max(store.get_max_offset(topic, q) - start, 0)
            if got >= count:
                continue
            result = store.get_message(topic, q, start, count - got, max_bytes=MAX_POP_BYTES)
            if result.status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY):
                result = store.get_message(
                    topic, q, result.next_begin_offset, count - got, max_bytes=MAX_POP_BYTES
                )
            if result.status is GetStatus.FOUND:
                metrics.child(metrics.REMOTING_MESSAGES_SERVED, result.tier).inc(result.count)
                parts.extend(result.body_parts())
                got += result.count
        header = {"restNum": str(rest)}
        if not got:
            return request.response(
                ResponseCode.PULL_NOT_FOUND, "NO_MESSAGE_IN_QUEUE", ext_fields=header
            )
        return request.response(ResponseCode.SUCCESS, "FOUND", ext_fields=header, body_parts=parts)

    def polling_info(self, request: Command) -> Response:
        """``pollingNum``: the group's pops and notifications of the topic held right now on
        the queue the request names (-1: those held for every queue)."""
        ext = request.ext_fields
        group, topic = field(ext, "consumerGroup"), field(ext, "topic")
        queue_id = int_field(ext, "queueId", -1)
        if not self.pops.store.topics.known(topic):
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{topic}] not exist (neither the tier nor the broker's store holds it)",
            )
        held = 0
        for suspend in self.held():
            asked = suspend.request
            if asked.code not in _HELD_CODES:
                continue
            e = asked.ext_fields
            if (e.get("consumerGroup"), e.get("topic")) != (group, topic):
                continue
            held += int_field(e, "queueId", -1) == queue_id
        return request.response(ResponseCode.SUCCESS, ext_fields={"pollingNum": str(held)})
