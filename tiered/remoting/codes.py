"""Request and response codes, flags and permissions of RocketMQ's remoting protocol.

The numbers are upstream's (``RequestCode``, ``ResponseCode``, ``RemotingSysResponseCode``,
``PullSysFlag``, ``PermName``); only the codes the replay endpoint answers or refuses by name are
listed.
"""

from __future__ import annotations

import enum


class RequestCode(enum.IntEnum):
    """Requests the endpoint answers (or refuses by name)."""

    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    UPDATE_AND_CREATE_TOPIC_LIST = 18
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    CHECK_CLIENT_CONFIG = 46
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    GET_CONSUMER_STATUS_FROM_CLIENT = 221
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    INVOKE_BROKER_TO_GET_CONSUMER_STATUS = 223
    GET_TOPICS_BY_CLUSTER = 224
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    GET_CONSUMER_RUNNING_INFO = 307
    CONSUME_MESSAGE_DIRECTLY = 309
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320
    GET_TOPIC_CONFIG = 351
    GET_SUBSCRIPTIONGROUP_CONFIG = 352
    LITE_PULL_MESSAGE = 361
    QUERY_ASSIGNMENT = 400
    SET_MESSAGE_REQUEST_MODE = 401
    GET_ALL_MESSAGE_REQUEST_MODE = 402
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    PEEK_MESSAGE = 200052
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    NOTIFICATION = 200054
    POLLING_INFO = 200055
    POP_ROLLBACK = 200056
    BATCH_ACK_MESSAGE = 200151


WRITES = frozenset(
    {
        RequestCode.SEND_MESSAGE,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
        RequestCode.END_TRANSACTION,
    }
)
"""Requests that would write to the broker: refused (the endpoint is read-only). A consumer's
``CONSUMER_SEND_MSG_BACK`` and ``UPDATE_AND_CREATE_TOPIC`` have handlers of their own (a POP
group's dead letter; a proxy's heartbeat-sync topic), which refuse the rest."""

CONFIG_WRITES = frozenset(
    {
        RequestCode.UPDATE_AND_CREATE_TOPIC_LIST,
        RequestCode.UPDATE_BROKER_CONFIG,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.DELETE_TOPIC_IN_NAMESRV,
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
    }
)
"""Admin requests that change topics, groups, offsets or the broker's configuration (mqadmin
updateTopic/deleteTopic/updateSubGroup/deleteSubGroup/updateBrokerConfig/resetOffsetByTime):
refused, the endpoint keeps no such configuration."""

CLIENT_CALLBACKS = frozenset(
    {
        RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT,
        RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS,
        RequestCode.GET_CONSUMER_RUNNING_INFO,
        RequestCode.CONSUME_MESSAGE_DIRECTLY,
    }
)
"""Requests a broker answers by asking a consumer over its connection and waiting for its answer
(mqadmin consumerStatus, consumerProgress -s, queryMsgById -g -d): refused, the endpoint never
waits on its clients (it only tells them, one way, to rebalance: NOTIFY_CONSUMER_IDS_CHANGED)."""


REFUSED: dict[int, str] = {
    RequestCode.POP_ROLLBACK: (
        "it moves the broker's POP checkpoint records between its stores (mqadmin "
        "exportPopRecord), and the replay endpoint keeps its POP state in its own "
        "replayPopState.json (rmq-tiered status lists it); send it to the broker"
    ),
}
"""Requests refused by name, with why (the remark names what to do instead)."""


class ResponseCode(enum.IntEnum):
    """Response codes the endpoint sends."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    INVALID_PARAMETER = 29
    CONSUMER_NOT_ONLINE = 206
    POLLING_FULL = 209
    POLLING_TIMEOUT = 210


def code_name(code: int) -> str:
    """A request code's upstream name, or ``OTHER`` (bounded metric labels)."""
    return _REQUEST_NAMES.get(code, "OTHER")


def result_name(code: int) -> str:
    """A response code's upstream name, or the number (a metric's ``result`` label)."""
    return _RESPONSE_NAMES.get(code) or str(code)


# asked per request: a dict lookup, where calling the enum class costs a Python-level lookup
_REQUEST_NAMES: dict[int, str] = {c.value: c.name for c in RequestCode}
_RESPONSE_NAMES: dict[int, str] = {c.value: c.name for c in ResponseCode}


# PullSysFlag bits
FLAG_COMMIT_OFFSET = 1 << 0
FLAG_SUSPEND = 1 << 1
FLAG_SUBSCRIPTION = 1 << 2
FLAG_CLASS_FILTER = 1 << 3
FLAG_LITE_PULL = 1 << 4

# RemotingCommand flag bits
RESPONSE_FLAG = 1 << 0
ONEWAY_FLAG = 1 << 1

# PermName
PERM_READ = 1 << 2
PERM_WRITE = 1 << 1

MASTER_ID = 0
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
