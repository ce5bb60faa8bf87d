"""The remoting consumers' POP switch: ``SET_MESSAGE_REQUEST_MODE`` (``mqadmin setConsumeMode``)
and ``QUERY_ASSIGNMENT``, answered as the broker's ``QueryAssignmentProcessor`` answers them,
and ``GET_ALL_MESSAGE_REQUEST_MODE`` (every mode set, as a master broker answers its slave).

A 5.x remoting push consumer built with ``setClientRebalance(false)`` asks the broker which
queues it gets and how to read them (PULL or POP). A (topic, group) switched to POP gets, as
upstream's ``allocate4Pop``, every queue at once (queue id -1: the pops go round the queues) when
``popShareQueueNum`` is 0 or covers the group, else its own share plus that many neighbours'; in
PULL mode the queues are shared out averagely among the group's live clients. The modes are kept
in the POP state file (:class:`~.pop_state.PopState`), not in the broker's
``messageRequestMode.json``: the endpoint writes nothing of the broker's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING
from typing import Any

from tiered.config import TieredConfig
from tiered.errors import InvalidRequestError

from .body import dumps
from .codes import RETRY_GROUP_TOPIC_PREFIX
from .codes import RequestCode
from .codes import ResponseCode
from .frame import Command
from .groups import Clients
from .naming import Naming
from .pop_state import PopState

if TYPE_CHECKING:
    from .handlers import Response

MODES = ("PULL", "POP")


class Assignments:
    """``SET_MESSAGE_REQUEST_MODE`` and ``QUERY_ASSIGNMENT`` (thread-safe through their state)."""

    def __init__(
        self, cfg: TieredConfig, naming: Naming, clients: Clients, state: PopState
    ) -> None:
        self.cfg = cfg
        self.naming = naming
        self.clients = clients
        self.state = state

    def handlers(self) -> dict[int, Callable[[Command], Response]]:
        return {
            RequestCode.SET_MESSAGE_REQUEST_MODE: self.set_mode,
            RequestCode.QUERY_ASSIGNMENT: self.query,
            RequestCode.GET_ALL_MESSAGE_REQUEST_MODE: self.all_modes,
        }

    def set_mode(self, request: Command) -> Response:
        body = _body(request, "SetMessageRequestModeRequestBody")
        topic, group = str(body.get("topic") or ""), str(body.get("consumerGroup") or "")
        mode = str(body.get("mode") or "PULL").upper()
        share = body.get("popShareQueueNum") or 0
        if not topic or not group or mode not in MODES or not isinstance(share, int):
            raise InvalidRequestError(
                f"SET_MESSAGE_REQUEST_MODE needs a topic, a consumerGroup, a mode of {MODES} and "
                f"an integer popShareQueueNum: got {body!r}"
            )
        if self.naming.queue_count(topic) == 0:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic {topic} not exist (neither the tier nor the broker's store holds it)",
            )
        self.state.set_request_mode(topic, group, mode, share)
        return request.response(ResponseCode.SUCCESS)

    def query(self, request: Command) -> Response:
        body = _body(request, "QueryAssignmentRequestBody")
        topic, group = str(body.get("topic") or ""), str(body.get("consumerGroup") or "")
        client = str(body.get("clientId") or "")
        model = str(body.get("messageModel") or "CLUSTERING").upper()
        count = self.naming.queue_count(topic)
        mode, share = ("PULL", 0)
        if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):  # retry topics: always PULL
            mode, share = self.state.request_mode(topic, group) or ("PULL", 0)
        queues: list[int] = list(range(count))
        if count and model == "CLUSTERING":
            cids = self.clients.clients(group)
            if client not in cids:
                queues = []
            elif mode == "POP" and (share <= 0 or share >= len(cids) - 1):
                queues = [-1]
            else:
                index = cids.index(client)
                shares = 1 + (share if mode == "POP" else 0)
                picked: set[int] = set()
                for i in range(shares):
                    picked.update(averagely(count, len(cids), (index + i) % len(cids)))
                queues = sorted(picked)
        assignments = [
            {
                "messageQueue": {
                    "brokerName": self.cfg.broker_name,
                    "queueId": q,
                    "topic": topic,
                },
                "mode": mode,
            }
            for q in queues
        ]
        return request.response(
            ResponseCode.SUCCESS, body=dumps({"messageQueueAssignments": assignments})
        )

    def all_modes(self, request: Command) -> Response:
        """``MessageRequestModeSerializeWrapper``: topic -> group -> the mode set for it."""
        table: dict[str, dict[str, dict[str, Any]]] = {}
        for topic, group, mode, share in self.state.request_modes():
            table.setdefault(topic, {})[group] = {
                "topic": topic,
                "consumerGroup": group,
                "mode": mode,
                "popShareQueueNum": share,
            }
        return request.response(ResponseCode.SUCCESS, body=dumps({"messageRequestModeMap": table}))


def averagely(queues: int, clients: int, index: int) -> list[int]:
    """The queue ids client ``index`` of ``clients`` gets of ``queues``, as upstream's
    ``AllocateMessageQueueAveragely``."""
    mod = queues % clients
    extra = 1 if mod > 0 and index < mod else 0
    size = 1 if queues <= clients else queues // clients + extra
    start = index * size if mod > 0 and index < mod else index * size + mod
    return [(start + i) % queues for i in range(max(min(size, queues - start), 0))]


def _body(request: Command, name: str) -> dict[str, Any]:
    try:
        body = json.loads(request.body or b"{}")
    except (UnicodeDecodeError, ValueError) as e:
        raise InvalidRequestError(f"the request body is not a {name}: {e}") from e
    if not isinstance(body, dict):
        raise InvalidRequestError(f"the request body is not a {name}")
    return body
