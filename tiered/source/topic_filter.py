"""Which topics are offloaded: never the system topics (spec §1.6), then include/exclude globs.

The broker's runtime system-topic set is rebuilt from the static list plus the broker config:
the cluster and broker names, ``{cluster}_REPLY_TOPIC``, the trace topic, and every ``rmq_sys_``
and ``%LMQ%`` name. Retry (``%RETRY%...``) and dead-letter (``%DLQ%...``) topics are offloaded,
as upstream, unless ``tieredStoreTopicExclude`` names them.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from fnmatch import fnmatchcase

from tiered.config import TieredConfig

SYSTEM_TOPICS = frozenset(
    {
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "CHECKPOINT_TOPIC",
    }
)
"""``TopicValidator``'s static system topics."""

SYSTEM_PREFIXES = ("rmq_sys_", "%LMQ%")
"""Prefixes that make a topic a system one (``rmq_sys_REVIVE_LOG_`` is covered by the first)."""


def is_system_topic(topic: str, cluster: str, broker: str) -> bool:
    """Whether the tiered store never handles ``topic`` (``MessageStoreTopicFilter``)."""
    return (
        not topic.strip()
        or topic in SYSTEM_TOPICS
        or topic.startswith(SYSTEM_PREFIXES)
        or topic in (cluster, broker, f"{cluster}_REPLY_TOPIC")
    )


class TopicFilter:
    """System topics never pass; others pass when an include pattern matches and no exclude."""

    def __init__(
        self,
        cluster: str,
        broker: str,
        include: Iterable[str] = ("*",),
        exclude: Iterable[str] = (),
    ) -> None:
        self.cluster = cluster
        self.broker = broker
        self.include = tuple(include)
        self.exclude = tuple(exclude)
        self.allows = functools.lru_cache(maxsize=65536)(self._allows)

    @classmethod
    def from_config(cls, cfg: TieredConfig) -> TopicFilter:
        """The filter of ``cfg`` (cluster, broker, ``tieredStoreTopicInclude/Exclude``)."""
        return cls(
            cfg.broker_cluster_name,
            cfg.broker_name,
            cfg.tiered_store_topic_include,
            cfg.tiered_store_topic_exclude,
        )

    def _allows(self, topic: str) -> bool:
        if is_system_topic(topic, self.cluster, self.broker):
            return False
        if not any(fnmatchcase(topic, p) for p in self.include):
            return False
        return not any(fnmatchcase(topic, p) for p in self.exclude)

    def why_not(self, topic: str) -> str | None:
        """Why ``topic`` is not offloaded (``None`` when it is)."""
        if is_system_topic(topic, self.cluster, self.broker):
            return "system topic"
        if not any(fnmatchcase(topic, p) for p in self.include):
            return "not matched by tieredStoreTopicInclude"
        if any(fnmatchcase(topic, p) for p in self.exclude):
            return "matched by tieredStoreTopicExclude"
        return None
