"""``rmq-tiered scrub`` against real tiers (posix on a temporary directory, moto's S3 server).

A tier is built by a real offload (and index files compacted and uploaded), scrubbed clean, then
damaged through the backend itself (files, boto3; never through the provider): a deleted segment
object, a truncated one, an overlapping record, a unit pointing past its commitlog segment, a
consumequeue segment gone with its record (a gap), an orphan object, a damaged index header, and
for ``--deep`` a flipped body byte and a flipped queue offset. Each is reported exactly (kind and
key), and nothing else; the scrub sends only reads and listings and changes no byte. Gaps the
dispatcher recorded and deletions expiry still owes are notes, not damage; scrubs beside a running
offload find nothing; the command's exit codes and JSON report; the daemon's background scrub and
its gauge.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client import REGISTRY
from tiered.providers import Provider
from tiered.providers import build_provider
from tiered.providers.base import RequestCounts
from tiered.providers.layout import INDEX_TOPIC
from tiered.providers.layout import FileType
from tiered.providers.layout import segment_key
from tiered.providers.testing.oracle import BotoOracle
from tiered.providers.testing.oracle import DirectoryOracle
from tiered.providers.testing.oracle import Oracle

from tiered.broker import message as msgcodec
from tiered.broker.consumequeue import CQ_UNIT_SIZE
from tiered.broker.consumequeue import decode_units
from tiered.cli import main
from tiered.config import TieredConfig
from tiered.core.daemon import Daemon
from tiered.core.scrub import scrub
from tiered.core.scrub_report import KINDS
from tiered.core.scrub_report import ScrubReport
from tiered.core.sidecar import Sidecar
from tiered.metadata import FileSegmentMetadata
from tiered.metadata import FileSegmentType
from tiered.metadata import MetadataDocument
from tiered.metadata import dump_metadata
from tiered.metadata.orphans import OrphanLog
from tiered.testing.sample_tier import SMALL_SEGMENTS
from tiered.testing.sample_tier import SidecarCase
from tiered.testing.sample_tier import build_sample_tier
from tiered.testing.sample_tier import rolling_spec
from tiered.testing.sample_tier import write_conf
from tiered.testing.tier_check import read_document

INDEX_KEYS: dict[str, Any] = {
    "tieredStoreIndexFileMaxHashSlotNum": 97,
    "tieredStoreIndexFileMaxIndexNum": 500,
    "tieredIndexCompactionIntervalMs": 0,
}
"""Small index files: a few hundred messages seal one, compacted and uploaded by the test."""
READS = {"LIST", "GET", "READ", "STAT", "HEAD", "BUCKET"}
"""The backend requests a scrub may send."""
Found = set[tuple[str, str]]


@dataclasses.dataclass
class Tier:
    """An offloaded tier, and raw access to its backend."""

    cfg: TieredConfig
    oracle: Oracle
    delete: Callable[[str], None]

    def fresh(self) -> Provider:
        """A provider as the command builds it (no state of the writer's)."""
        return build_provider(self.cfg)

    def scrub(self, *, deep: bool = False, counts: RequestCounts | None = None) -> ScrubReport:
        with self.fresh() as provider:
            if counts is not None:
                provider.add_request_listener(counts)
            return scrub(self.cfg, provider, deep=deep)

    def fingerprint(self) -> dict[str, bytes | None]:
        return {name: self.oracle.get(name) for name in sorted(self.oracle.names())}


@pytest.fixture(params=["posix", "s3"])
def tier(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tier]:
    """A real offload of a generated store (both files roll; index files uploaded)."""
    keys: dict[str, Any] = {**SMALL_SEGMENTS, **INDEX_KEYS}
    if request.param == "s3":
        keys |= request.getfixturevalue("s3_keys")
    built = build_sample_tier(tmp_path, rolling_spec(), request.param, capture=False, **keys)
    try:
        assert built.sidecar.index is not None and built.sidecar.index.compact_sealed()
    finally:
        built.sidecar.close()
    cfg = built.cfg
    if request.param == "posix":
        root = Path(cfg.tiered_store_file_path)
        yield Tier(cfg, DirectoryOracle(root), lambda name: (root / name).unlink())
        return
    client = request.getfixturevalue("moto_s3").client()
    bucket = cfg.object_store_bucket

    def delete(name: str) -> None:
        client.delete_object(Bucket=bucket, Key=name)

    yield Tier(cfg, BotoOracle(client, bucket), delete)


# --- reading the metadata and the tier directly ----------------------------------------------


def records(doc: MetadataDocument, kind: FileSegmentType, path: str) -> list[FileSegmentMetadata]:
    table = doc.segment_table(kind).get(path, {})
    return [table[b] for b in sorted(table)]


def key(cfg: TieredConfig, path: str, file_type: FileType, base: int) -> str:
    _, topic, queue = path.split("/")
    return segment_key(cfg.broker_cluster_name, cfg.broker_name, topic, int(queue), file_type, base)


def write_document(cfg: TieredConfig, doc: MetadataDocument) -> None:
    path = Path(cfg.tiered_data_dir) / "config" / "tieredStoreMetadata.json"
    path.write_text(dump_metadata(doc), encoding="utf-8")


def found(report: ScrubReport) -> Found:
    return {(a.kind, a.key) for a in report.anomalies}


def plant_damage(tier: Tier) -> tuple[Found, Found]:
    """Damage the tier through its backend and metadata file; returns what a scrub must report
    and what only ``--deep`` adds."""
    cfg, oracle = tier.cfg, tier.oracle
    doc = read_document(cfg)
    cl_table = doc.segment_table(FileSegmentType.COMMIT_LOG)
    cq_table = doc.segment_table(FileSegmentType.CONSUME_QUEUE)
    paths = sorted(cl_table)
    assert len(paths) == 6 and all(len(cl_table[p]) >= 2 for p in paths)
    gap_path = max(paths, key=lambda p: len(cq_table[p]))
    assert len(cq_table[gap_path]) >= 3
    missing, truncated, overlap, flipped, orphaned = [p for p in paths if p != gap_path]

    def cl(path: str, i: int) -> str:
        return key(
            cfg,
            path,
            FileType.COMMIT_LOG,
            records(doc, FileSegmentType.COMMIT_LOG, path)[i].base_offset,
        )

    def cq(path: str, i: int) -> str:
        bases = records(doc, FileSegmentType.CONSUME_QUEUE, path)
        return key(cfg, path, FileType.CONSUME_QUEUE, bases[i].base_offset)

    # a deleted segment object
    tier.delete(cl(missing, 0))
    # a truncated one (a sealed segment: a whole object on S3 too)
    data = oracle.get(cl(truncated, 0))
    assert data
    oracle.put(cl(truncated, 0), data[: len(data) // 2])
    # an overlapping record: the first segment's record (and object) reach into the second
    first = records(doc, FileSegmentType.COMMIT_LOG, overlap)[0]
    oracle.put(cl(overlap, 0), (oracle.get(cl(overlap, 0)) or b"") + bytes(100))
    cl_table[overlap][first.base_offset] = first.model_copy(update={"size": first.size + 100})
    # a unit pointing past its commitlog segment: the last unit of the first segment
    units = bytearray(oracle.get(cq(gap_path, 0)) or b"")
    units[-CQ_UNIT_SIZE : -CQ_UNIT_SIZE + 8] = (1 << 40).to_bytes(8, "big")
    oracle.put(cq(gap_path, 0), bytes(units))
    # a gap: the middle consumequeue segment gone with its record
    middle = records(doc, FileSegmentType.CONSUME_QUEUE, gap_path)[1]
    tier.delete(cq(gap_path, 1))
    del cq_table[gap_path][middle.base_offset]
    # an orphan, and an object outside any segment directory (not the scrubber's business)
    topic, queue = orphaned.split("/")[1:]
    orphan = segment_key(cfg.broker_cluster_name, cfg.broker_name, topic, int(queue),
                         FileType.COMMIT_LOG, 10**12)  # fmt: skip
    oracle.put(orphan, b"not recorded")
    oracle.put(f"{cl(orphaned, 0).split('/', 1)[0]}/{cfg.broker_name}/config/notes.txt", b"x")
    # an uploaded index file whose magic is not a compacted file's
    index_path = f"{cfg.broker_name}/{INDEX_TOPIC}/0"
    index_base = records(doc, FileSegmentType.INDEX, index_path)[0].base_offset
    index_key = segment_key(cfg.broker_cluster_name, cfg.broker_name, INDEX_TOPIC, 0,
                            FileType.INDEX, index_base)  # fmt: skip
    header = bytearray(oracle.get(index_key) or b"")
    header[0] ^= 0xFF
    oracle.put(index_key, bytes(header))
    # --deep: a flipped body byte and a flipped queue offset, in a sealed commitlog segment
    units_of = decode_units(oracle.get(cq(flipped, 0)) or b"")
    segment = bytearray(oracle.get(cl(flipped, 0)) or b"")
    (body_at, queue_at), (body_size, queue_size) = (
        [int(units_of[field][i]) for i in (5, 9)] for field in ("offset", "size")
    )
    assert body_at + body_size <= len(segment) and queue_at + queue_size <= len(segment)
    message = msgcodec.decode(bytes(segment[body_at : body_at + body_size]))
    segment[body_at + bytes(segment[body_at:]).index(message.body) + 3] ^= 0x5A
    segment[queue_at + msgcodec.QUEUE_OFFSET_POSITION + 7] ^= 0x01
    oracle.put(cl(flipped, 0), bytes(segment))
    write_document(cfg, doc)
    expected = {
        ("missing", cl(missing, 0)),
        ("size_mismatch", cl(truncated, 0)),
        ("offset_overlap", cl(overlap, 1)),
        ("unit_out_of_range", cq(gap_path, 0)),
        ("offset_gap", key(cfg, gap_path, FileType.CONSUME_QUEUE,
                           records(doc, FileSegmentType.CONSUME_QUEUE, gap_path)[1].base_offset)),
        ("orphan", orphan),
        ("index_header", index_key),
    }  # fmt: skip
    return expected, {("crc", cl(flipped, 0)), ("queue_offset", cl(flipped, 0))}


# --- the tests -------------------------------------------------------------------------------


def test_scrub_reports_each_planted_damage_exactly(tier: Tier) -> None:
    for thorough in (False, True):
        clean = tier.scrub(deep=thorough)
        assert clean.clean and clean.anomalies == [] and clean.notes == [], clean.anomalies
        assert clean.queues == 6 and clean.index_files > 0 and clean.segments == clean.objects
        assert (clean.units, clean.messages) == ((3000, 3000) if thorough else (clean.units, 0))
    expected, deep_only = plant_damage(tier)
    before = tier.fingerprint()
    counts = RequestCounts()
    report = tier.scrub(counts=counts)
    assert found(report) == expected and len(report.anomalies) == len(expected)
    assert report.notes == []
    # sizes come from the listing, not a request per object (a LIST per directory on posix);
    # S3 lists once more only to read an unsealed segment (its chunks): each queue's last
    # consumequeue segment here
    assert not counts.counts["STAT"] and not counts.counts["HEAD"], counts.counts
    if tier.cfg.tiered_backend_service_provider == "s3":
        assert counts.counts["LIST"] <= 1 + report.queues < report.objects, counts.counts
    deep = tier.scrub(deep=True, counts=counts)
    assert found(deep) == expected | deep_only and len(deep.anomalies) == len(expected) + 2
    flips = sorted(
        (a.kind, a.queue_offset, a.count)
        for a in deep.anomalies
        if a.kind in {"crc", "queue_offset"}
    )
    assert flips == [("crc", 5, 1), ("queue_offset", 9, 1)]
    # read-only: no byte changed, only reads and listings sent
    assert tier.fingerprint() == before
    assert set(counts.counts) <= READS, counts.counts


def test_recorded_gaps_and_pending_deletes_are_notes_not_damage(
    offload_case: SidecarCase,
) -> None:
    store = offload_case.store()
    cfg = offload_case.config(store, "posix")
    with Sidecar(cfg) as sidecar:
        assert sidecar.dispatcher.run_pass(flush=True).messages == 3000
    offload_case.append(store, seed=5, messages=3000)
    for f in sorted((store / "commitlog").iterdir())[:-1]:  # the broker deleted its old files
        f.unlink()
    with Sidecar(cfg) as sidecar:
        report = sidecar.dispatcher.run_pass(flush=True)
    assert report.gaps and not report.errors
    # an object whose record expiry removed, its deletion logged for a retry
    doc = read_document(cfg)
    path = sorted(doc.segment_table(FileSegmentType.COMMIT_LOG))[0]
    pending = key(cfg, path, FileType.COMMIT_LOG, 10**12)
    (Path(cfg.tiered_store_file_path) / pending).parent.mkdir(parents=True, exist_ok=True)
    (Path(cfg.tiered_store_file_path) / pending).write_bytes(b"expired")
    OrphanLog(Path(cfg.tiered_data_dir) / "config").add([pending])
    with build_provider(cfg) as provider:
        scrubbed = scrub(cfg, provider)
        assert scrubbed.clean, scrubbed.anomalies
        gaps = {
            (a.topic, a.queue_id, a.offset, a.found)
            for a in scrubbed.notes
            if a.kind == "recorded_gap"
        }
        assert gaps == {(t, q, g.start, g.end) for t, q, g in report.gaps}
        assert [(a.kind, a.key) for a in scrubbed.notes if a.kind != "recorded_gap"] == [
            ("pending_delete", pending)
        ]
        # without the dispatcher's record of them, the same gaps are damage
        (Path(cfg.tiered_data_dir) / "status" / "dispatcher.json").unlink()
        (Path(cfg.tiered_data_dir) / "status" / "dispatcher.json.bak").unlink(missing_ok=True)
        blind = scrub(cfg, provider)
    assert {(a.topic, a.queue_id, a.offset, a.found) for a in blind.anomalies} == gaps
    assert {a.kind for a in blind.anomalies} == {"offset_gap"}


def cli(*args: str | Path, code: int) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == code, (result.output, result.exception)
    return result.output


def test_the_command_exit_codes_and_json_report(tmp_path: Path) -> None:
    built = build_sample_tier(
        tmp_path, rolling_spec(messages=600), "posix", capture=False, **SMALL_SEGMENTS
    )
    built.sidecar.close()
    conf = write_conf(built.cfg, tmp_path / "sidecar.conf")
    out = cli("scrub", "--config", conf, code=0)
    assert "clean" in out.splitlines()[-1]
    report = json.loads(cli("scrub", "--config", conf, "--json", "--deep", code=0))
    assert set(report) == {
        "cluster", "broker", "deep", "topic", "startedMs", "seconds", "metadata", "checked",
        "clean", "counts", "anomalies", "notes",
    }  # fmt: skip
    assert report["clean"] and report["deep"] and report["checked"]["messages"] == 600
    assert report["counts"] == dict.fromkeys(KINDS, 0)
    orphan = segment_key(
        "DefaultCluster", "broker-a", "GenTopic1", 2, FileType.CONSUME_QUEUE, 20 * 10**9
    )
    (Path(built.cfg.tiered_store_file_path) / orphan).write_bytes(b"\0" * 20)
    out = cli("scrub", "--config", conf, code=1)
    assert "orphan" in out and orphan in out.replace("\n", "")
    report = json.loads(cli("scrub", "--config", conf, "--json", code=1))
    assert not report["clean"] and report["counts"]["orphan"] == 1
    (anomaly,) = report["anomalies"]
    assert anomaly == {
        "kind": "orphan", "key": orphan, "topic": "GenTopic1", "queueId": 2,
        "fileType": "consume_queue", "offset": None, "queueOffset": None, "expected": None,
        "found": 20, "count": 1, "detail": anomaly["detail"],
    }  # fmt: skip
    # a topic glob: the other topic's queues only (the index is left out)
    only = json.loads(cli("scrub", "--config", conf, "--json", "--topic", "GenTopic0", code=0))
    assert only["checked"]["queues"] == 3 and only["clean"]
    assert (
        json.loads(cli("scrub", "-c", conf, "--json", "--topic", "Gen*1", code=1))["counts"][
            "orphan"
        ]
        == 1
    )
    # usage and configuration errors
    cli("scrub", "--config", conf, "--bogus", code=2)
    cli("scrub", "--config", tmp_path / "absent.conf", code=2)
    cli("scrub", "--config", conf, "--topic", "a/b", code=2)


def test_the_daemon_scrubs_on_its_interval_and_sets_the_gauge(tmp_path: Path) -> None:
    built = build_sample_tier(
        tmp_path, rolling_spec(messages=600), "posix", capture=False, **SMALL_SEGMENTS
    )
    built.sidecar.close()
    cfg = built.cfg.model_copy(update={"tiered_scrub_interval_ms": 100})
    orphan = segment_key("DefaultCluster", "broker-a", "GenTopic0", 1, FileType.COMMIT_LOG, 10**12)
    (Path(cfg.tiered_store_file_path) / orphan).write_bytes(b"x")

    def gauge(kind: str) -> float | None:
        return REGISTRY.get_sample_value("rocketmq_tiered_store_scrub_anomalies", {"kind": kind})

    daemon = Daemon(cfg)
    done: list[int] = []
    thread = threading.Thread(target=lambda: done.append(daemon.run(install_signals=False)))
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while gauge("orphan") != 1:
            assert time.monotonic() < deadline, "no scrub set the gauge"
            time.sleep(0.05)
        assert gauge("missing") == 0 and gauge("crc") == 0
        (Path(cfg.tiered_store_file_path) / orphan).unlink()
        while gauge("orphan") != 0:
            assert time.monotonic() < deadline, "the next scrub did not clear it"
            time.sleep(0.05)
    finally:
        daemon.stop.set()
        thread.join(timeout=30)
    assert done == [0]


def test_a_scrub_beside_a_running_offload_finds_nothing(offload_case: SidecarCase) -> None:
    store = offload_case.store(messages=12000)
    cfg = offload_case.config(store, "posix", tieredStoreDispatchIntervalMs=20)
    daemon = Daemon(cfg)
    done: list[int] = []
    thread = threading.Thread(target=lambda: done.append(daemon.run(install_signals=False)))
    scrubs: list[ScrubReport] = []
    thread.start()
    try:
        with build_provider(cfg) as provider:
            deadline = time.monotonic() + 60
            while not scrubs or scrubs[-1].units < 12000:
                assert time.monotonic() < deadline, "the offload did not finish"
                scrubs.append(scrub(cfg, provider, deep=len(scrubs) % 2 == 1))
                assert scrubs[-1].clean, scrubs[-1].anomalies
                assert scrubs[-1].notes == []
    finally:
        daemon.stop.set()
        thread.join(timeout=30)
    assert done == [0]
    during = [s for s in scrubs if s.deep and 0 < s.messages < 12000]
    assert len(during) >= 2, [(s.deep, s.segments, s.messages) for s in scrubs]
