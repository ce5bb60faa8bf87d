"""A store generator: writes a byte-exact broker store as a real broker would (``gen-store``).

Commitlog files are named by start offset, pre-sized (sparse) to ``mappedFileSizeCommitLog`` and end
with a BLANK unit where the next message does not fit; consumequeue files hold
``cq_file_entries`` units each; ``config/topics.json``, ``checkpoint`` and ``lock`` are written, and
broker IndexFiles with ``with_index``. The output depends only on the seed and the existing store,
and ``append`` continues a store like a broker that kept writing.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from tiered.broker import broker_index
from tiered.broker import checkpoint
from tiered.broker import configjson
from tiered.broker import consumequeue
from tiered.broker import message as msgcodec
from tiered.broker.commitlog import list_files
from tiered.broker.commitlog import scan_file
from tiered.errors import ConfigError
from tiered.javautil import tags_code

TAGS_POOL = ("TagA", "TagB", "TagC", "TagD", "")
COMPRESSIONS = ("ZLIB", "LZ4", "ZSTD")
_FLUSH_BYTES = 8 << 20
STORE_HOST_V4 = msgcodec.encode_host("10.0.0.5:10911")
STORE_HOST_V6 = msgcodec.encode_host("[fd00::a]:10911")


@dataclass(frozen=True, slots=True)
class GenSpec:
    """What to generate. ``messages`` is the total over all queues."""

    seed: int = 0
    topics: int = 2
    queues: int = 4
    messages: int = 1000
    min_body: int = 16
    max_body: int = 1024
    commitlog_file_size: int = 1 << 30
    cq_file_entries: int = 300_000
    v2_fraction: float = 0.0
    ipv6_fraction: float = 0.0
    compress_fraction: float = 0.0
    keys_per_message: int = 1
    with_index: bool = False
    index_slots: int = 5_000_000
    index_max_items: int = 20_000_000
    start_ms: int = 1_700_000_000_000
    append: bool = False

    def validate(self) -> None:
        """Refuse impossible combinations with a message naming the option."""
        checks: list[tuple[bool, str]] = [
            (self.topics >= 1, f"--topics={self.topics} must be >= 1"),
            (self.queues >= 1, f"--queues={self.queues} must be >= 1"),
            (self.messages >= 0, f"--messages={self.messages} must be >= 0"),
            (0 <= self.min_body <= self.max_body, "--min-body must be >= 0 and <= --max-body"),
            (self.max_body <= 4 << 20, f"--max-body={self.max_body} exceeds 4 MiB maxMessageSize"),
            (self.cq_file_entries >= 1, "--cq-file-entries must be >= 1"),
            (self.keys_per_message >= 0, "--keys-per-message must be >= 0"),
            (self.index_slots >= 1 and self.index_max_items >= 2, "index sizes must be >= 1/2"),
        ]
        for name in ("v2_fraction", "ipv6_fraction", "compress_fraction"):
            v = getattr(self, name)
            checks.append((0.0 <= v <= 1.0, f"--{name.replace('_', '-')}={v} must be in [0, 1]"))
        # the largest unit must fit a file with room for the BLANK header
        biggest = msgcodec.BLANK_HEADER_SIZE + msgcodec.unit_size(
            self.max_body + 64,
            140,
            200 + 60 * self.keys_per_message,
            v2=True,
            born_v6=True,
            store_v6=True,
        )
        too_small = (
            f"--commitlog-file-size={self.commitlog_file_size} cannot hold a "
            f"{self.max_body}-byte body; use at least {biggest}"
        )
        checks.append((self.commitlog_file_size >= biggest, too_small))
        for ok, msg in checks:
            if not ok:
                raise ConfigError(msg)


@dataclass(slots=True)
class GenReport:
    """What a run wrote."""

    messages: int = 0
    bytes: int = 0
    seconds: float = 0.0
    commitlog_files: int = 0
    index_files: int = 0
    queues: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    # with ``manifest=True``: (topic, queueId, queueOffset) -> (sha256 of the unit, of the body
    # the producer sent), so a reader can be checked against what was really written
    manifest: dict[tuple[str, int, int], tuple[str, str]] = field(default_factory=dict)

    @property
    def mb_per_s(self) -> float:
        """Commitlog bytes written per second, in MB (10^6)."""
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0


def topic_names(n: int) -> list[str]:
    """The generated topics: ``GenTopic0`` ... (stable across ``--append`` runs)."""
    return [f"GenTopic{i}" for i in range(n)]


@dataclass(slots=True)
class _StoreState:
    """Where an existing store ends: commitlog write offset, per-queue next offset, last time."""

    write_offset: int = 0
    next_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    last_store_ms: int = 0
    seq: int = 0


def _existing_state(out: Path, spec: GenSpec) -> _StoreState:
    state = _StoreState()
    files = list_files([out / "commitlog"])
    if files:
        last = files[-1]
        if last.size != spec.commitlog_file_size:
            raise ConfigError(
                f"{last.path} is {last.size} bytes but --commitlog-file-size is "
                f"{spec.commitlog_file_size}; pass the size the store was generated with"
            )
        end = None
        for item in scan_file(last.path, last.base):
            if item.kind == "message" and item.message is not None:
                state.last_store_ms = max(state.last_store_ms, item.message.store_timestamp)
            elif item.kind == "blank":
                end = last.end
            elif item.kind == "end":
                end = item.offset
            else:
                raise ConfigError(f"cannot append: {last.path} is corrupt ({item.reason})")
        state.write_offset = last.end if end is None else end
    cq_root = out / "consumequeue"
    if cq_root.is_dir():
        for topic, qid in consumequeue.list_queues(cq_root):
            cq = consumequeue.ConsumeQueue(
                cq_root / topic / str(qid),
                file_size=spec.cq_file_entries * consumequeue.CQ_UNIT_SIZE,
            )
            nxt = cq.max_offset()
            state.next_offsets[(topic, qid)] = nxt
            state.seq += nxt
    ck = out / "checkpoint"
    if ck.exists():
        state.last_store_ms = max(
            state.last_store_ms, checkpoint.read_checkpoint(ck).physic_msg_timestamp
        )
    return state


def generate_store(
    out: Path,
    spec: GenSpec,
    progress: Callable[[int], None] | None = None,
    *,
    manifest: bool = False,
) -> GenReport:
    """Write (or with ``spec.append`` extend) the store under ``out``; returns what was written.

    Raises:
        ConfigError: an option is out of range, ``out`` already holds a store without ``append``,
            or the existing store cannot be continued.
    """
    spec.validate()
    started = time.perf_counter()
    if not spec.append and (out / "commitlog").exists():
        raise ConfigError(f"{out} already holds a store; pass --append to add messages to it")
    if spec.append and not (out / "commitlog").exists():
        raise ConfigError(f"--append given but {out} holds no store (no commitlog directory)")
    state = _existing_state(out, spec) if spec.append else _StoreState()
    (out / "commitlog").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng([spec.seed, state.seq, state.write_offset])
    n = spec.messages
    topics = topic_names(spec.topics)
    nq = spec.topics * spec.queues

    # everything random is drawn up front, vectorised
    qsel = rng.integers(0, nq, size=n)
    body_len = rng.integers(spec.min_body, spec.max_body + 1, size=n)
    pool = rng.integers(32, 127, size=(1 << 20) + spec.max_body, dtype=np.uint8).tobytes()
    body_at = rng.integers(0, 1 << 20, size=n)
    v2 = rng.random(n) < spec.v2_fraction
    born6 = rng.random(n) < spec.ipv6_fraction
    store6 = rng.random(n) < spec.ipv6_fraction
    compress = rng.random(n) < spec.compress_fraction
    ctype = rng.integers(0, len(COMPRESSIONS), size=n)
    tag_idx = rng.integers(0, len(TAGS_POOL), size=n)
    start = max(spec.start_ms, state.last_store_ms + 1)
    store_ms = start + np.arange(n, dtype=np.int64) + np.cumsum(rng.integers(0, 3, size=n))
    born_ms = store_ms - rng.integers(0, 5, size=n)
    port = rng.integers(1024, 65535, size=n)

    # queue offsets: per queue, consecutive from where the queue ended
    base_off = np.array(
        [state.next_offsets.get((topics[i // spec.queues], i % spec.queues), 0) for i in range(nq)],
        dtype=np.int64,
    )
    order = np.argsort(qsel, kind="stable")
    counts = np.bincount(qsel, minlength=nq)
    group_start = np.concatenate(([0], np.cumsum(counts)[:-1]))
    qoff = np.empty(n, dtype=np.int64)
    qoff[order] = base_off[qsel[order]] + (np.arange(n) - group_start[qsel[order]])

    index_keys: list[tuple[str, str, int]] = []  # (topic, key, message index)
    tag_codes = [tags_code(t) for t in TAGS_POOL]

    writer = _CommitLogWriter(out / "commitlog", spec.commitlog_file_size, state.write_offset)
    report = GenReport()
    step = max(1, n // 100)
    columns = zip(
        qsel.tolist(),
        qoff.tolist(),
        body_at.tolist(),
        body_len.tolist(),
        compress.tolist(),
        ctype.tolist(),
        tag_idx.tolist(),
        born6.tolist(),
        store6.tolist(),
        v2.tolist(),
        port.tolist(),
        born_ms.tolist(),
        store_ms.tolist(),
        strict=True,
    )  # plain Python values: numpy scalar indexing would dominate this loop
    phys_l: list[int] = []
    sizes_l: list[int] = []
    tags_l: list[int] = []
    for i, (q, off, a, blen, comp, ct, ti, b6, s6, is_v2, prt, bms, sms) in enumerate(columns):
        topic = topics[q // spec.queues]
        qid = q % spec.queues
        seq = state.seq + i
        body = pool[a : a + blen]
        sent = body
        sys_flag = 0
        if comp:
            name = COMPRESSIONS[ct]
            body = msgcodec.compress_body(body, name)
            sys_flag |= msgcodec.compression_bits(name)
        # properties in the producer's order (KEYS, TAGS, UNIQ_KEY), built straight as bytes
        keys = [f"{topic}-{qid}-{off}-{j}" for j in range(spec.keys_per_message)]
        tag = TAGS_POOL[ti]
        uniq = f"7F000001{spec.seed & 0xFFFF:04X}{seq:020X}"
        props = "".join(
            (
                f"KEYS\x01{' '.join(keys)}\x02" if keys else "",
                f"TAGS\x01{tag}\x02" if tag else "",
                f"UNIQ_KEY\x01{uniq}\x02",
            )
        ).encode()
        if b6:
            born_host = b"\xfd" + bytes(13) + struct.pack(">Hi", q + 1, prt)
        else:
            born_host = bytes((10, 0, q % 256, 1 + i % 250)) + struct.pack(">i", prt)
        unit = bytearray(
            msgcodec.encode(
                topic=topic,
                queue_id=qid,
                queue_offset=off,
                physical_offset=0,
                body=body,
                properties=props,
                born_timestamp=bms,
                store_timestamp=sms,
                born_host=born_host,
                store_host=STORE_HOST_V6 if s6 else STORE_HOST_V4,
                sys_flag=sys_flag,
                v2=is_v2,
            )
        )
        pos = writer.reserve(len(unit))
        struct.pack_into(">q", unit, msgcodec.PHYSICAL_OFFSET_POSITION, pos)
        writer.write(unit)
        if manifest:
            report.manifest[(topic, qid, off)] = (
                hashlib.sha256(unit).hexdigest(),
                hashlib.sha256(sent).hexdigest(),
            )
        phys_l.append(pos)
        sizes_l.append(len(unit))
        tags_l.append(tag_codes[ti])
        if spec.with_index:
            index_keys.append((topic, uniq, i))
            index_keys.extend((topic, k, i) for k in keys)
        if progress is not None and (i + 1) % step == 0:
            progress(i + 1)
    writer.close()
    phys = np.array(phys_l, dtype=np.int64)
    sizes = np.array(sizes_l, dtype=np.int32)
    tcodes = np.array(tags_l, dtype=np.int64)

    _write_consume_queues(out, spec, topics, qsel, qoff, phys, sizes, tcodes, report)
    last_ms = int(store_ms[-1]) if n else state.last_store_ms
    index_end_ms = 0
    if spec.with_index and n:
        report.index_files, index_end_ms = _write_index(out, spec, index_keys, phys, store_ms)
    _write_metadata(out, spec, topics, last_ms, index_end_ms)
    report.messages = n
    report.bytes = int(sizes.sum()) if n else 0
    report.commitlog_files = len(list_files([out / "commitlog"]))
    report.seconds = time.perf_counter() - started
    return report


class _CommitLogWriter:
    """Appends units to pre-sized commitlog files, rolling with a BLANK like the broker."""

    def __init__(self, directory: Path, file_size: int, offset: int):
        self.dir = directory
        self.file_size = file_size
        self.offset = offset
        self.fd = -1
        self.file_base = -1
        self.buf = bytearray()
        self.buf_at = offset
        self._open(offset - offset % file_size)

    def _open(self, base: int) -> None:
        path = self.dir / f"{base:020d}"
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(self.fd).st_size < self.file_size:
            os.ftruncate(self.fd, self.file_size)
        self.file_base = base

    def _flush(self) -> None:
        if self.buf:
            os.pwrite(self.fd, self.buf, self.buf_at - self.file_base)
        self.buf.clear()
        self.buf_at = self.offset

    def reserve(self, size: int) -> int:
        """The physical offset a unit of ``size`` bytes will get (rolling the file if needed)."""
        remaining = self.file_base + self.file_size - self.offset
        if size + msgcodec.BLANK_HEADER_SIZE > remaining:
            self.buf += msgcodec.blank_unit(remaining)
            self.offset += remaining
            self._flush()
            os.close(self.fd)
            self._open(self.offset)
        return self.offset

    def write(self, unit: bytes | bytearray) -> None:
        """Append a unit at the reserved offset."""
        self.buf += unit
        self.offset += len(unit)
        if len(self.buf) >= _FLUSH_BYTES:
            self._flush()

    def close(self) -> None:
        """Flush and close the current file."""
        self._flush()
        os.close(self.fd)


def _write_consume_queues(
    out: Path,
    spec: GenSpec,
    topics: list[str],
    qsel: npt.NDArray[np.int64],
    qoff: npt.NDArray[np.int64],
    phys: npt.NDArray[np.int64],
    sizes: npt.NDArray[np.int32],
    tcodes: npt.NDArray[np.int64],
    report: GenReport,
) -> None:
    file_bytes = spec.cq_file_entries * consumequeue.CQ_UNIT_SIZE
    for q in range(spec.topics * spec.queues):
        topic, qid = topics[q // spec.queues], q % spec.queues
        idx = np.flatnonzero(qsel == q)
        d = out / "consumequeue" / topic / str(qid)
        d.mkdir(parents=True, exist_ok=True)
        if len(idx) == 0:
            continue
        data = consumequeue.encode_units(phys[idx], sizes[idx], tcodes[idx])
        first = int(qoff[idx[0]])
        byte_at = first * consumequeue.CQ_UNIT_SIZE
        done = 0
        while done < len(data):
            base = (byte_at + done) // file_bytes * file_bytes
            pos = byte_at + done - base
            chunk = data[done : done + file_bytes - pos]
            fd = os.open(d / f"{base:020d}", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if os.fstat(fd).st_size < file_bytes:
                    os.ftruncate(fd, file_bytes)
                os.pwrite(fd, chunk, pos)
            finally:
                os.close(fd)
            done += len(chunk)
        report.queues[(topic, qid)] = (first, int(qoff[idx[-1]]) + 1)


def _write_index(
    out: Path,
    spec: GenSpec,
    keys: list[tuple[str, str, int]],
    phys: npt.NDArray[np.int64],
    store_ms: npt.NDArray[np.int64],
) -> tuple[int, int]:
    """Broker IndexFiles for ``keys``, rolling at ``index_max_items``; returns (files, end ms).

    With ``--append`` the new items start a new file whose header continues from the last one.
    """
    hashes = broker_index.key_hashes_local([(t, k) for t, k, _ in keys])
    msg = np.fromiter((i for _, _, i in keys), dtype=np.int64, count=len(keys))
    index_dir = out / "index"
    index_dir.mkdir(exist_ok=True)
    prev_ts, prev_phys = 0, 0
    existing = sorted(p for p in index_dir.iterdir() if p.name.isdigit())
    if existing:
        with broker_index.IndexFile.open(existing[-1], slots=spec.index_slots) as last:
            prev_ts, prev_phys = last.header.end_timestamp, last.header.end_phy_offset
    written = broker_index.write_index_files(
        index_dir,
        hashes,
        phys[msg],
        store_ms[msg],
        slots=spec.index_slots,
        max_items=spec.index_max_items,
        prev_end_timestamp=prev_ts,
        prev_end_phy_offset=prev_phys,
        tz=dt.UTC,
    )
    return len(written), written[-1][1].end_timestamp if written else prev_ts


def _write_metadata(
    out: Path, spec: GenSpec, topics: list[str], last_ms: int, index_end_ms: int
) -> None:
    cfg = out / "config"
    cfg.mkdir(exist_ok=True)
    existing: dict[str, configjson.TopicConfig] = {}
    if (cfg / "topics.json").exists():
        existing = configjson.load_topics(cfg / "topics.json").topic_config_table
    merged = dict(existing)
    for t in topics:
        merged.setdefault(
            t,
            configjson.TopicConfig(
                topic_name=t, read_queue_nums=spec.queues, write_queue_nums=spec.queues
            ),
        )
    (cfg / "topics.json").write_text(configjson.dump_topics_json(merged), encoding="utf-8")
    (out / "checkpoint").write_bytes(
        checkpoint.encode_checkpoint(
            checkpoint.Checkpoint(
                physic_msg_timestamp=last_ms,
                logics_msg_timestamp=last_ms,
                index_msg_timestamp=index_end_ms,
            )
        )
    )
    (out / "lock").write_bytes(b"lock")
