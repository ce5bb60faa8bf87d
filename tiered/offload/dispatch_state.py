"""Per-queue dispatch state, and the state file ``status`` reads while ``run`` is running.

``{tieredDataDir}/status/dispatcher.json`` is the sidecar's own file (not upstream's): the role,
and per queue the last upload time, the gaps (queue offsets the broker deleted before they were
offloaded, never in the tier), the last error and the local offsets last seen. It is replaced
atomically (a :class:`~tiered.metadata.state_file.JsonStateFile`) after each round that changed
what ``status`` shows (an upload, an error, a gap, the role; otherwise at most every
:data:`~tiered.offload.dispatcher.STATE_REFRESH_S`, for the local offsets and the time), so a
reader never sees a torn file; it is fsync'd when a gap was recorded (gaps must
survive a crash). Losing it, or a damaged copy moved aside, loses only history shown by
``status``, never data.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any
from typing import NamedTuple

import msgspec
import numpy as np
import numpy.typing as npt

from tiered.metadata.state_file import JsonStateFile

STATE_VERSION = 1


class Gap(NamedTuple):
    """Queue offsets ``[start, end)`` the broker deleted before they were offloaded."""

    start: int
    end: int
    detected_ms: int

    @property
    def messages(self) -> int:
        """How many messages the gap holds."""
        return self.end - self.start


@dataclass
class Held:
    """What a queue's held batch is known to be (run time only), so a pass that holds it again
    reads only the consumequeue units written since the last one: the ``sizes`` of the units
    read from queue offset ``current`` (the tier's commit offset) on, the commitlog offset of the
    first and its store time."""

    current: int
    sizes: npt.NDArray[np.int64]
    first_offset: int
    first_time: int


@dataclass
class QueueState:
    """What the dispatcher knows about one queue at run time."""

    topic: str
    queue_id: int
    local_min: int = -1
    local_max: int = -1
    last_upload_ms: int = 0
    gaps: list[Gap] = field(default_factory=list)
    error: str = ""
    failures: int = 0
    next_physical: int | None = None
    behind: int = 0
    behind_bytes: int = 0
    held: Held | None = field(default=None, repr=False, compare=False)
    published: tuple[int, int, int] | None = field(default=None, repr=False, compare=False)
    """The (behind, behind bytes, latency) last set in the queue's gauges."""

    @property
    def key(self) -> str:
        """``topic/queueId``."""
        return f"{self.topic}/{self.queue_id}"

    def to_json(self) -> dict[str, Any]:
        """The persisted fields."""
        return {
            "topic": self.topic,
            "queueId": self.queue_id,
            "localMin": self.local_min,
            "localMax": self.local_max,
            "lastUploadMs": self.last_upload_ms,
            "gaps": [[g.start, g.end, g.detected_ms] for g in self.gaps],
            "error": self.error,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> QueueState:
        """Read back :meth:`to_json`."""
        return cls(
            topic=_text(obj["topic"]),
            queue_id=int(obj["queueId"]),
            local_min=int(obj.get("localMin", -1)),
            local_max=int(obj.get("localMax", -1)),
            last_upload_ms=int(obj.get("lastUploadMs", 0)),
            gaps=[Gap(int(a), int(b), int(c)) for a, b, c in obj.get("gaps", [])],
            error=str(obj.get("error", "")),
        )


@dataclass
class PassReport:
    """What one :meth:`~.dispatcher.Dispatcher.run_pass` did."""

    rounds: int = 0
    messages: int = 0
    bytes: int = 0
    failures: int = 0
    queues: set[tuple[str, int]] = field(default_factory=set)
    gaps: list[tuple[str, int, Gap]] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    role: str = "master"
    looked_at: int = 0
    """Queues the pass planned (``follow``: the ones that moved, had work left or were due)."""
    paused: bool = False
    """Uploads were paused: the pass sent nothing, or stopped after a round (:mod:`.pause`)."""


@dataclass
class StateSnapshot:
    """What the state file holds."""

    role: str = "unknown"
    pid: int = 0
    updated_ms: int = 0
    rounds: int = 0
    queues: dict[tuple[str, int], QueueState] = field(default_factory=dict)


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


class StateFile:
    """``{tieredDataDir}/status/dispatcher.json``."""

    def __init__(self, data_dir: Path) -> None:
        self._file = JsonStateFile(
            Path(data_dir) / "status" / "dispatcher.json",
            STATE_VERSION,
            _parse_snapshot,
            "status shows no upload times, gaps or errors of earlier runs (data is untouched)",
        )
        self._rows: dict[tuple[str, int], str] = {}
        """Each queue's row as last saved (JSON), in key order."""

    @property
    def path(self) -> Path:
        return self._file.path

    def load(self, *, owner: bool = True) -> StateSnapshot:
        """The last saved state; empty when there is none or it is damaged (see
        :class:`JsonStateFile`; ``owner=False`` for a reader beside the daemon)."""
        return self._file.load(owner=owner) or StateSnapshot()

    def save(
        self,
        snapshot: StateSnapshot,
        *,
        sync: bool = False,
        changed: Iterable[tuple[str, int]] | None = None,
    ) -> None:
        """Replace the file atomically; ``sync`` makes it durable (fsync file and directory).
        ``changed``: the only queues whose state may differ from the last save's (None: any);
        the others' rows are written as they were encoded then (a pass that moved 100 of
        16,000 queues encodes 100)."""
        body = {
            "role": snapshot.role,
            "pid": snapshot.pid,
            "updatedMs": snapshot.updated_ms,
            "rounds": snapshot.rounds,
        }
        queues, rows = snapshot.queues, self._rows
        encode = _encode_row
        if changed is not None and rows.keys() == queues.keys():  # the same queues: in place
            for k in changed:
                if k in rows:
                    rows[k] = encode(queues[k].to_json())
        else:  # queues came or went: the rows again in key order, the unchanged ones kept
            keep = rows.keys() & queues.keys() if changed is not None else set()
            keep.difference_update(changed or ())
            rows = {
                k: rows[k] if k in keep else encode(queues[k].to_json()) for k in sorted(queues)
            }
        self._rows = rows
        self._file.save_listed(body, "queues", rows.values(), sync=sync, encoded=True)


_ROW_ENCODER = msgspec.json.Encoder()


def _encode_row(row: dict[str, Any]) -> str:
    """One queue's row as JSON text (a wide round encodes thousands: msgspec's encoder, not
    the standard library's, whose Python layer costs more than the encoding)."""
    return _ROW_ENCODER.encode(row).decode()


def _parse_snapshot(obj: dict[str, Any]) -> StateSnapshot:
    queues = {}
    for raw in obj.get("queues", []):
        state = QueueState.from_json(raw)
        queues[(state.topic, state.queue_id)] = state
    return StateSnapshot(
        role=str(obj.get("role", "unknown")),
        pid=int(obj.get("pid", 0)),
        updated_ms=int(obj.get("updatedMs", 0)),
        rounds=int(obj.get("rounds", 0)),
        queues=queues,
    )
