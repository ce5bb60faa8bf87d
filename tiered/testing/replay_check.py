"""What the real-broker tests compare: messages as the Java driver printed them, the bytes a
broker stored (read straight from its commitlog files), what a tier holds (read whole with
:func:`tiered.testing.tier_check.tier_queue`), and a watch that the sidecar never opens the
broker's store for writing."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from typing import TypeVar

from tiered.config import TieredConfig
from tiered.providers.base import Provider
from tiered.testing.realbroker import Broker
from tiered.testing.realbroker import Runtime
from tiered.testing.sidecar_process import RMQ_TIERED
from tiered.testing.tier_check import read_document
from tiered.testing.tier_check import tier_queue

Key = tuple[str, int, int]
"""(topic, queueId, queueOffset)"""
ClusterKey = tuple[str, str, int, int]
"""(storeHost, topic, queueId, queueOffset)"""
K = TypeVar("K", Key, ClusterKey)
Message = dict[str, Any]
"""One message as the Java driver describes it (``Driver.describe``)."""
CLIENT_PROPERTIES = frozenset({"MIN_OFFSET", "MAX_OFFSET", "CONSUME_START_TIME"})
"""Properties the Java client adds to a message it consumed (from the pull, at consumption)."""


def messages(lines: list[dict[str, Any]]) -> dict[Key, Message]:
    """The driver's consumed messages by (topic, queueId, queueOffset); a message seen twice
    fails."""
    out: dict[Key, Message] = {}
    for line in lines:
        if "msg" in line:
            m = line["msg"]
            k = (m["topic"], m["queueId"], m["queueOffset"])
            assert k not in out, f"{k} consumed twice"
            out[k] = m
    return out


def comparable(m: dict[str, Any]) -> dict[str, Any]:
    """What must be equal wherever a message is read: everything but how it was read, its
    physical offset (the tier's is the flat commitlog's) and the client's own properties."""
    drop = {"via", "commitLogOffset"}
    out = {k: v for k, v in m.items() if k not in drop}
    out["properties"] = {
        k: v
        for k, v in m["properties"].items()
        if k not in ("MIN_OFFSET", "MAX_OFFSET", "CONSUME_START_TIME")
    }
    return out


def cluster_messages(lines: list[dict[str, Any]]) -> dict[ClusterKey, Message]:
    """:func:`messages` of a topic on several brokers: keyed by the storing broker's address
    too (its queue ids and offsets repeat on every broker); a message seen twice fails."""
    out: dict[ClusterKey, Message] = {}
    for line in lines:
        if "msg" in line:
            m = line["msg"]
            k = (m["storeHost"], m["topic"], m["queueId"], m["queueOffset"])
            assert k not in out, f"{k} consumed twice"
            out[k] = m
    return out


def assert_same(got: Mapping[K, Message], want: Mapping[K, Message]) -> None:
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    assert not missing and not extra, f"missing {missing[:5]} ({len(missing)}), extra {extra[:5]}"
    differ = [k for k in want if comparable(got[k]) != comparable(want[k])]
    assert not differ, (
        f"{len(differ)} differ, first {differ[0]}: "
        f"{comparable(got[differ[0]])} != {comparable(want[differ[0]])}"
    )


class ReadOnlyWatch(threading.Thread):
    """Samples a process's open files every :data:`FD_EVERY_S` and its mappings every
    :data:`MAPS_EVERY`-th time: none under ``root`` may be open for writing (O_WRONLY/O_RDWR)
    or mapped writable. The sidecar holds a broker file open only for the reads of one batch
    (milliseconds), so the files are looked at often enough to see it do so (``seen``).
    An fd's link and its ``fdinfo`` are two reads: the inode ``fdinfo`` names must be the
    link target's, or the fd was closed and reused (for a tier file opened for writing)
    between them and the sample is dropped."""

    FD_EVERY_S = 0.002
    MAPS_EVERY = 25

    def __init__(self, pid: int, root: Path) -> None:
        super().__init__(daemon=True)
        self.pid, self.root = pid, str(root.resolve())
        self.violations: list[str] = []
        self.samples = 0
        self.seen: set[str] = set()
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(self.FD_EVERY_S):
            try:
                self.sample()
            except (FileNotFoundError, ProcessLookupError):
                return

    def sample(self) -> None:
        proc = Path(f"/proc/{self.pid}")
        for fd in os.listdir(proc / "fd"):
            try:
                target = os.readlink(proc / "fd" / fd)
                if not target.startswith(self.root):
                    continue
                info = dict(
                    line.split(":", 1) for line in (proc / "fdinfo" / fd).read_text().splitlines()
                )
                flags = info["flags"].strip()
                if int(info["ino"]) != os.stat(target).st_ino:
                    continue  # the fd was closed and reused between the two reads
            except (FileNotFoundError, KeyError, ValueError):
                continue
            self.seen.add(target)
            if int(flags, 8) & 0o3:
                self.violations.append(f"fd {fd} -> {target} flags {flags}")
        if self.samples % self.MAPS_EVERY == 0:
            for line in (proc / "maps").read_text().splitlines():
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and parts[5].startswith(self.root) and "w" in parts[1]:
                    self.violations.append(f"writable mapping {line}")
        self.samples += 1


def read_raw(broker: Broker, ref: dict[Key, Message]) -> dict[Key, bytes]:
    """Each reference message's stored bytes, read straight from the broker's commitlog files
    (file = offset rounded down to the file size) -- none of the sidecar's code."""
    size = int(str(broker.settings()["mappedFileSizeCommitLog"]))
    out: dict[Key, bytes] = {}
    for k, m in ref.items():
        off = int(m["commitLogOffset"])
        path = broker.store / "commitlog" / f"{off // size * size:020d}"
        with path.open("rb") as f:
            f.seek(off % size)
            out[k] = f.read(int(m["storeSize"]))
    return out


def wait_for(what: str, check: Callable[[], Any], timeout: float, every: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(every)


def tier_messages(cfg: TieredConfig, provider: Provider) -> dict[Key, tuple[int, bytes]]:
    """Every message the tier holds, by the queues its posix directory has: (flat offset,
    stored bytes); bytes 28..35 must hold the flat offset. The metadata file is read once."""
    out: dict[Key, tuple[int, bytes]] = {}
    doc = read_document(cfg)
    for path in Path(cfg.tiered_store_file_path).glob("*/*/*/*"):
        if not path.name.isdigit() or path.parent.name == "rmq_sys_INDEX":
            continue
        topic, qid = path.parent.name, int(path.name)
        for offset, (flat, data) in tier_queue(cfg, provider, topic, qid, doc).items():
            assert int.from_bytes(data[28:36], "big") == flat, (topic, qid, offset)
            out[(topic, qid, offset)] = (flat, data)
    return out


def assert_stored_alike(tier: dict[Key, tuple[int, bytes]], raw: dict[Key, bytes]) -> None:
    """Each tier message equals the broker's stored bytes but for bytes 28..35 (its offset)."""
    for k, want in raw.items():
        got = tier[k][1]
        assert len(got) == len(want) and got[:28] + got[36:] == want[:28] + want[36:], k


def sidecar_conf(path: Path, work: Path, **keys: Any) -> Path:
    """The sidecar's own keys beside a real broker (its broker.conf is read before them): a
    posix tier and data dir under ``work``, free ports, quick dispatch, nothing expired, 2 MiB
    flat segments (they seal and roll); ``keys`` add or override."""
    props: dict[str, Any] = {
        "tieredBackendServiceProvider": "posix",
        "tieredStoreFilePath": work / "tier",
        "tieredDataDir": work / "data",
        "tieredHttpPort": 0,
        "tieredRemotingPort": 0,
        "tieredStoreDispatchIntervalMs": 200,
        "tieredStoreGroupCommitTimeout": 300,
        "tieredStoreFileReservedTime": 1_000_000,
        "tieredStoreCommitLogMaxSize": 2 << 20,
        **keys,
    }
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()), "utf-8")
    return path


def sidecar_status(*confs: Path) -> tuple[dict[str, Any], str]:
    """``rmq-tiered status --json`` over ``confs``: the report and what it logged."""
    done = subprocess.run(
        [RMQ_TIERED, "status", "--json", *(a for c in confs for a in ("-c", str(c)))],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    report: dict[str, Any] = json.loads(done.stdout)
    return report, done.stderr


def delete_old_commitlog(rocketmq: Runtime, namesrv: str, b: Broker) -> None:
    """Make broker ``b`` delete every commitlog file but its last, for real: reserve time 0,
    then ``deleteExpiredCommitLog`` (its cleaning task first runs 60 s after it started; this
    waits for that), then reserve time back to 72 h."""
    files = sorted((b.store / "commitlog").iterdir())
    assert len(files) >= 3, f"the commitlog did not roll: {files}"
    time.sleep(max(0.0, b.started_at + 61 - time.time()))
    out = rocketmq.mqadmin(
        namesrv,
        ["updateBrokerConfig", "-b", b.address, "-k", "fileReservedTime", "-v", "0"],
        ["deleteExpiredCommitLog", "-b", b.address],
    )
    assert "success" in out[0] and "success" in out[1], out
    wait_for(
        "the broker to delete its old commitlog files",
        lambda: not (b.store / "commitlog" / files[0].name).exists(),
        timeout=60,
    )
    rocketmq.mqadmin(
        namesrv, ["updateBrokerConfig", "-b", b.address, "-k", "fileReservedTime", "-v", "72"]
    )
