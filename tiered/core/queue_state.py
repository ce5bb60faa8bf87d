"""Per-queue dispatch state, and the state file ``status`` reads while ``run`` is running.

``{tieredDataDir}/status/dispatcher.json`` is the sidecar's own file (not upstream's): the role,
and per queue the last upload time, the gaps (queue offsets the broker deleted before they were
offloaded, never in the tier), the last error and the local offsets last seen. It is replaced
atomically (temp file + rename) after each round that changed something, so a reader never sees a
torn file; it is fsync'd when a gap was recorded (gaps must survive a crash). Losing it loses only
history shown by ``status``, never data.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STATE_VERSION = 1


@dataclass(frozen=True)
class Gap:
    """Queue offsets ``[start, end)`` the broker deleted before they were offloaded."""

    start: int
    end: int
    detected_ms: int

    @property
    def messages(self) -> int:
        """How many messages the gap holds."""
        return self.end - self.start


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
            topic=str(obj["topic"]),
            queue_id=int(obj["queueId"]),
            local_min=int(obj.get("localMin", -1)),
            local_max=int(obj.get("localMax", -1)),
            last_upload_ms=int(obj.get("lastUploadMs", 0)),
            gaps=[Gap(int(a), int(b), int(c)) for a, b, c in obj.get("gaps", [])],
            error=str(obj.get("error", "")),
        )


@dataclass
class StateSnapshot:
    """What the state file holds."""

    role: str = "unknown"
    pid: int = 0
    updated_ms: int = 0
    rounds: int = 0
    queues: dict[tuple[str, int], QueueState] = field(default_factory=dict)


class StateFile:
    """``{tieredDataDir}/status/dispatcher.json``."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / "status" / "dispatcher.json"

    def load(self) -> StateSnapshot:
        """The last saved state; empty when there is none or it does not parse."""
        try:
            obj = json.loads(self.path.read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            return StateSnapshot()
        if not isinstance(obj, dict) or obj.get("version") != STATE_VERSION:
            return StateSnapshot()
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

    def save(self, snapshot: StateSnapshot, *, sync: bool = False) -> None:
        """Replace the file atomically; ``sync`` makes it durable (fsync file and directory)."""
        obj = {
            "version": STATE_VERSION,
            "role": snapshot.role,
            "pid": snapshot.pid,
            "updatedMs": snapshot.updated_ms,
            "rounds": snapshot.rounds,
            "queues": [snapshot.queues[k].to_json() for k in sorted(snapshot.queues)],
        }
        data = json.dumps(obj, separators=(",", ":")).encode("utf-8")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.replace(tmp, self.path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        if sync:
            dfd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
