"""A store generator: writes a byte-exact broker store as a real broker would (``gen-store``).

Commitlog files are named by start offset, pre-sized (sparse) to ``mappedFileSizeCommitLog`` and end
with a BLANK unit where the next message does not fit; consumequeue files hold
``cq_file_entries`` units each; ``config/topics.json``, ``checkpoint`` and ``lock`` are written, and
broker IndexFiles with ``with_index``. The output depends only on the seed and the existing store,
and ``append`` continues a store like a broker that kept writing.

By default messages carry a minimal property set (KEYS, TAGS, UNIQ_KEY). ``java_client`` writes
what a 5.3.3 broker stores for a Java 5.x producer instead (:mod:`.gen_java`): the real property
set and order, real UNIQ_KEYs (IPv4 or IPv6 client ids), zlib above 4 KiB, and on request delayed
messages (``SCHEDULE_TOPIC_XXXX`` then the re-put copy), transactions (half, commit, op messages
in their system topics), batches and non-ASCII user properties. ``broker_files`` adds the files a
real broker keeps beside them (:mod:`.gen_broker_files`) and leaves queues without messages
without a directory, as the broker does.
"""

from __future__ import annotations

import datetime as dt
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
from tiered.broker import gen_broker_files
from tiered.broker import gen_java
from tiered.broker import java_props
from tiered.broker import message as msgcodec
from tiered.broker.commitlog import list_files
from tiered.broker.commitlog import scan_file
from tiered.broker.gen_loops import COMPRESSIONS
from tiered.broker.gen_loops import TAGS_POOL
from tiered.broker.gen_loops import java_loop
from tiered.broker.gen_loops import plain_loop
from tiered.broker.gen_writer import CommitLogWriter
from tiered.broker.gen_writer import UnitSink
from tiered.errors import ConfigError

KEY_MIXES = ("plain", "realistic")
_FRACTIONS = ("v2_fraction", "ipv6_fraction", "compress_fraction")
_JAVA_FRACTIONS = (
    "client_ipv6_fraction",
    "user_property_fraction",
    "delay_fraction",
    "transaction_fraction",
    "batch_fraction",
)


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
    # "plain": distinct ASCII keys; "realistic": shared, duplicate, blank and non-ASCII tokens
    # (:func:`~.gen_loops.realistic_keys`)
    key_mix: str = "plain"
    with_index: bool = False
    index_slots: int = 5_000_000
    index_max_items: int = 20_000_000
    start_ms: int = 1_700_000_000_000
    append: bool = False
    # what a 5.3.3 broker stores for a Java 5.x client (see the module docstring); the fractions
    # below need it and are shares of the sends
    java_client: bool = False
    client_ipv6_fraction: float = 0.0  # UNIQ_KEY of an IPv6 client (28-byte id)
    user_property_fraction: float = 0.0  # non-ASCII user properties and KEYS token
    delay_fraction: float = 0.0  # delay level 1..max_delay_level
    max_delay_level: int = 3
    transaction_fraction: float = 0.0  # half message, then commit or rollback, op messages
    commit_fraction: float = 0.5  # of the transactions
    batch_fraction: float = 0.0  # a send that starts a batch of 2..batch_size
    batch_size: int = 10
    broker_files: bool = False  # config/*.json(.bak), abort.bak, compaction/, no empty queues

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
            (
                self.key_mix in KEY_MIXES,
                f"--key-mix={self.key_mix} must be one of {', '.join(KEY_MIXES)}",
            ),
            (
                self.key_mix == "plain" or not self.java_client,
                "--key-mix=realistic is for the plain messages, not --java-client",
            ),
            (self.index_slots >= 1 and self.index_max_items >= 2, "index sizes must be >= 1/2"),
        ]
        for name in (*_FRACTIONS, *_JAVA_FRACTIONS, "commit_fraction"):
            v = getattr(self, name)
            checks.append((0.0 <= v <= 1.0, f"--{name.replace('_', '-')}={v} must be in [0, 1]"))
        for name in _JAVA_FRACTIONS:
            v = getattr(self, name)
            needs = f"--{name.replace('_', '-')}={v} needs --java-client"
            checks.append((self.java_client or v == 0.0, needs))
        checks += [
            (
                self.delay_fraction + self.transaction_fraction <= 1.0,
                "--delay-fraction plus --transaction-fraction must be <= 1",
            ),
            (1 <= self.max_delay_level <= 18, "--max-delay-level must be in [1, 18]"),
            (self.batch_size >= 2, f"--batch-size={self.batch_size} must be >= 2"),
        ]
        # the largest unit (or batch) must fit a file with room for the BLANK header
        per_unit = msgcodec.unit_size(
            self.max_body + 64,
            140,
            200 + 60 * self.keys_per_message + (700 if self.java_client else 0),
            v2=True,
            born_v6=True,
            store_v6=True,
        )
        units = self.batch_size if self.batch_fraction > 0 else 1
        biggest = msgcodec.BLANK_HEADER_SIZE + units * per_unit
        what = (
            f"a batch of {units} {self.max_body}-byte bodies"
            if units > 1
            else (f"a {self.max_body}-byte body")
        )
        too_small = (
            f"--commitlog-file-size={self.commitlog_file_size} cannot hold {what}; "
            f"use at least {biggest}"
        )
        checks.append((self.commitlog_file_size >= biggest, too_small))
        for ok, msg in checks:
            if not ok:
                raise ConfigError(msg)


@dataclass(slots=True)
class GenReport:
    """What a run wrote."""

    messages: int = 0  # sends
    units: int = 0  # commitlog units: sends, re-put copies, half and op messages
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

    writer = CommitLogWriter(out / "commitlog", spec.commitlog_file_size, state.write_offset)
    report = GenReport()
    sink = UnitSink(
        writer, dict(state.next_offsets), report.manifest if manifest else None, spec.with_index
    )
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
    )  # plain Python values: numpy scalar indexing would dominate the loops
    broker = None
    if spec.java_client:
        first = (state.seq, state.write_offset)
        broker = java_loop(spec, first, topics, pool, columns, sink, progress)
    else:
        plain_loop(spec, state.seq, topics, pool, columns, sink, progress)
    writer.close()

    all_queues = [(t, q) for t in topics for q in range(spec.queues)]
    report.queues = sink.write_consume_queues(
        out, spec.cq_file_entries, () if spec.broker_files else all_queues
    )
    last_ms = sink.last_store_ms if sink.phys_l else state.last_store_ms
    if spec.with_index and sink.index_keys:
        report.index_files = _write_index(out, spec, sink.index_keys, sink.phys, sink.store_ms)
    _write_metadata(out, spec, topics, last_ms, sink.next_offsets, broker)
    report.messages = n
    report.units = len(sink.phys_l)
    report.bytes = sink.total_bytes
    report.commitlog_files = len(list_files([out / "commitlog"]))
    report.seconds = time.perf_counter() - started
    return report


def _write_index(
    out: Path,
    spec: GenSpec,
    keys: list[tuple[str, str, int]],
    phys: npt.NDArray[np.int64],
    store_ms: npt.NDArray[np.int64],
) -> int:
    """Broker IndexFiles for ``keys`` (topic, key, unit number), rolling at ``index_max_items``;
    returns the number of files written.

    With ``--append`` the new items start a new file whose header continues from the last one.
    """
    hashes = broker_index.key_hashes_local([(t, k) for t, k, _ in keys])
    unit = np.fromiter((i for _, _, i in keys), dtype=np.int64, count=len(keys))
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
        phys[unit],
        store_ms[unit],
        slots=spec.index_slots,
        max_items=spec.index_max_items,
        prev_end_timestamp=prev_ts,
        prev_end_phy_offset=prev_phys,
        tz=dt.UTC,
    )
    return len(written)


def _index_checkpoint_ms(out: Path, spec: GenSpec) -> int:
    """``indexMsgTimestamp``: the end time of the newest full index file, which the broker flushes
    when it opens the next one (``IndexService.flush``); 0 while the first file is open."""
    index_dir = out / "index"
    files = sorted(p for p in index_dir.iterdir() if p.name.isdigit()) if index_dir.is_dir() else []
    if len(files) < 2:
        return 0
    with broker_index.IndexFile.open(files[-2], slots=spec.index_slots) as full:
        return full.header.end_timestamp


def _write_metadata(
    out: Path,
    spec: GenSpec,
    topics: list[str],
    last_ms: int,
    next_offsets: dict[tuple[str, int], int],
    broker: gen_java.JavaBroker | None,
) -> None:
    cfg = out / "config"
    cfg.mkdir(exist_ok=True)
    if spec.broker_files:
        _write_broker_files(out, spec, topics, last_ms, next_offsets, broker)
    else:
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
                index_msg_timestamp=_index_checkpoint_ms(out, spec),
            )
        )
    )
    (out / "lock").write_bytes(b"lock")


def _write_broker_files(
    out: Path,
    spec: GenSpec,
    topics: list[str],
    last_ms: int,
    next_offsets: dict[tuple[str, int], int],
    broker: gen_java.JavaBroker | None,
) -> None:
    """The real broker's config set; user topics of an existing ``topics.json`` are kept."""
    system = {name for name, _, _ in gen_broker_files.SYSTEM_TOPICS} | {
        name for name, _, _ in gen_broker_files.TRANSACTION_TOPICS
    }
    user: dict[str, dict[str, object]] = {}
    path = out / "config" / "topics.json"
    if path.exists():
        table = configjson.load_config_json(path).get("topicConfigTable", {})
        user = {k: v for k, v in table.items() if k not in system}
    for t in topics:
        user.setdefault(t, gen_broker_files.topic_config(t, spec.queues))
    transactions = (java_props.HALF_TOPIC, 0) in next_offsets
    boot_ms = spec.start_ms - 60_000
    gen_broker_files.write_broker_files(
        out,
        topics_text=gen_broker_files.topics_json(
            user, transactions=transactions, counter=len(user) + 2 * transactions, ms=last_ms
        ),
        next_offsets=next_offsets,
        transactions=broker.transactions if broker is not None else {},
        boot_ms=boot_ms,
        last_ms=last_ms,
    )
