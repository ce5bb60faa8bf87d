"""Cross-check a store: every consumequeue unit against the commitlog message it points to.

A unit agrees when the commitlog holds a message at its offset with the unit's size, the queue's
topic and id, the unit's queue offset, a body matching its CRC, and the unit's tag code (the hash
of ``TAGS``, or a ConsumeQueueExt address; in ``SCHEDULE_TOPIC_XXXX`` the delivery time, store
time plus the delay of the message's ``DELAY`` level, as ``CommitLog.checkMessageAndReturnSize``
computes it). Units pointing below the commitlog's first file are counted as ``unavailable`` (the
broker deleted those files), not as errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

import numpy as np

from tiered.broker import consumequeue as cqmod
from tiered.broker import message as msgcodec
from tiered.broker.commitlog import CommitLog
from tiered.broker.javautil import tags_code
from tiered.errors import CorruptStoreFileError

_BATCH = 65536
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
# messageDelayLevel's default "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
DEFAULT_DELAY_LEVELS_MS: tuple[int, ...] = tuple(
    1000 * s
    for s in (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
)


def expected_tags_code(
    m: msgcodec.Message, delay_levels_ms: tuple[int, ...] = DEFAULT_DELAY_LEVELS_MS
) -> int:
    """The consumequeue tag code the broker dispatches for ``m``: the hash of ``TAGS``, but for
    a delayed message in ``SCHEDULE_TOPIC_XXXX`` its delivery time, store time plus the delay of
    its ``DELAY`` level (capped at the highest level, as the broker does)."""
    level = m.properties.get("DELAY")
    if m.topic == SCHEDULE_TOPIC and level is not None:
        try:
            n = min(int(level), len(delay_levels_ms))
        except ValueError:
            n = 0
        if n > 0:
            return m.store_timestamp + delay_levels_ms[n - 1]
    return tags_code(m.tags)


@dataclass(slots=True)
class QueueCheck:
    """The verdict for one queue."""

    topic: str
    queue_id: int
    min_offset: int
    max_offset: int
    checked: int = 0
    unavailable: int = 0
    ext_tags: int = 0
    problems: list[str] = field(default_factory=list)


@dataclass(slots=True)
class StoreCheck:
    """The verdict for a whole store."""

    queues: list[QueueCheck] = field(default_factory=list)

    @property
    def checked(self) -> int:
        """Units whose message was read and compared."""
        return sum(q.checked for q in self.queues)

    @property
    def problems(self) -> list[str]:
        """Every disagreement found, each naming queue, queue offset and physical offset."""
        return [p for q in self.queues for p in q.problems]


def check_queue(
    log: CommitLog,
    cq: cqmod.ConsumeQueue,
    topic: str,
    queue_id: int,
    max_problems: int = 20,
    delay_levels_ms: tuple[int, ...] = DEFAULT_DELAY_LEVELS_MS,
) -> QueueCheck:
    """Compare every readable unit of ``cq`` with the commitlog (one bulk read per batch);
    ``delay_levels_ms`` is the broker's ``messageDelayLevel`` in ms, level 1 first."""
    lo, hi = cq.min_offset(), cq.max_offset()
    out = QueueCheck(topic, queue_id, lo, hi)
    clmin = log.min_offset
    q = lo
    while q < hi:
        units = cq.read_units(q, min(_BATCH, hi - q))
        if len(units) == 0:
            break
        offs = units["offset"].astype(np.int64)
        sizes = units["size"].astype(np.int64)
        tags = units["tags_code"].astype(np.int64)
        here = offs >= clmin if clmin >= 0 else np.zeros(len(units), dtype=bool)
        out.unavailable += int((~here).sum())
        idx = np.flatnonzero(here)
        bulk = log.read_many(offs[idx], sizes[idx])
        ext = cqmod.is_ext_tags_code(tags)
        out.ext_tags += int(ext.sum())
        for j, i in enumerate(idx.tolist()):
            if len(out.problems) >= max_problems:
                out.problems.append(f"{topic}/{queue_id}: stopped after {max_problems} problems")
                return out
            where = f"{topic}/{queue_id} queue offset {q + i} (physical offset {int(offs[i])})"
            try:
                m = msgcodec.decode(bulk.view(j), where=where)
            except CorruptStoreFileError as e:
                out.problems.append(str(e))
                continue
            wrong = []
            if (m.topic, m.queue_id) != (topic, queue_id):
                wrong.append(f"message is {m.topic}/{m.queue_id}")
            if m.queue_offset != q + i:
                wrong.append(f"message queue offset is {m.queue_offset}")
            if m.physical_offset != int(offs[i]):
                wrong.append(f"message physical offset field is {m.physical_offset}")
            if not m.crc_ok:
                wrong.append(f"body CRC {msgcodec.body_crc(m.body)} != stored {m.body_crc}")
            expected = expected_tags_code(m, delay_levels_ms)
            if not ext[i] and expected != int(tags[i]):
                what = "delivery time" if m.topic == SCHEDULE_TOPIC else f"hash of TAGS {m.tags!r}"
                wrong.append(f"tag code {int(tags[i])} != {what} {expected}")
            if wrong:
                out.problems.append(f"{where}: " + "; ".join(wrong))
            out.checked += 1
        q += len(units)
    return out


def check_store(
    root: Path,
    commitlog_file_size: int,
    cq_file_size: int = cqmod.DEFAULT_CQ_FILE_SIZE,
    delay_levels_ms: tuple[int, ...] = DEFAULT_DELAY_LEVELS_MS,
) -> StoreCheck:
    """:func:`check_queue` for every queue under ``root/consumequeue``."""
    log = CommitLog(root / "commitlog", commitlog_file_size)
    report = StoreCheck()
    for topic, qid in cqmod.list_queues(root / "consumequeue"):
        cq = cqmod.ConsumeQueue.for_queue(root / "consumequeue", topic, qid, file_size=cq_file_size)
        report.queues.append(check_queue(log, cq, topic, qid, delay_levels_ms=delay_levels_ms))
    return report
