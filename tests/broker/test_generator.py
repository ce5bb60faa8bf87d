from __future__ import annotations

import hashlib
import itertools
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tiered.broker import broker_index
from tiered.broker import consumequeue as cqmod
from tiered.broker import message as msgcodec
from tiered.broker import verify
from tiered.broker.checkpoint import read_checkpoint
from tiered.broker.commitlog import CommitLog
from tiered.broker.commitlog import list_files
from tiered.broker.commitlog import scan_file
from tiered.broker.configjson import load_topics
from tiered.broker.generator import GenSpec
from tiered.broker.generator import generate_store
from tiered.errors import ConfigError

SPEC = GenSpec(
    seed=11, topics=2, queues=3, messages=3000, min_body=0, max_body=3000,
    commitlog_file_size=1 << 20, cq_file_entries=200, v2_fraction=0.3, ipv6_fraction=0.3,
    compress_fraction=0.3, keys_per_message=2, with_index=True, index_slots=1009,
    index_max_items=2500,
)  # fmt: skip
CQ_FILE = SPEC.cq_file_entries * cqmod.CQ_UNIT_SIZE


def _read_back(root: Path) -> dict[tuple[str, int, int], tuple[str, str]]:
    """Every message reached through the consumequeues: sha256 of its unit and of its body."""
    log = CommitLog(root / "commitlog", SPEC.commitlog_file_size)
    out = {}
    for topic, qid in cqmod.list_queues(root / "consumequeue"):
        cq = cqmod.ConsumeQueue.for_queue(root / "consumequeue", topic, qid, file_size=CQ_FILE)
        units = cq.read_units(cq.min_offset(), cq.max_offset() - cq.min_offset())
        bulk = log.read_many(units["offset"].astype(np.int64), units["size"].astype(np.int64))
        for i in range(len(units)):
            m = msgcodec.decode(bulk.view(i))
            out[(topic, qid, m.queue_offset)] = (
                hashlib.sha256(bulk.view(i)).hexdigest(),
                hashlib.sha256(m.decompressed_body()).hexdigest(),
            )
    return out


def _digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def store(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[tuple[str, int, int], tuple[str, str]]]:
    root = tmp_path_factory.mktemp("gen") / "store"
    report = generate_store(root, SPEC, manifest=True)
    return root, report.manifest


def test_every_message_reads_back_exactly(
    store: tuple[Path, dict[tuple[str, int, int], tuple[str, str]]],
) -> None:
    root, manifest = store
    assert len(manifest) == SPEC.messages
    assert _read_back(root) == manifest


def test_store_has_every_variant_and_verifies(
    store: tuple[Path, dict[tuple[str, int, int], tuple[str, str]]],
) -> None:
    root, _ = store
    msgs = [
        it.message
        for f in list_files([root / "commitlog"])
        for it in scan_file(f.path)
        if it.message is not None
    ]
    assert len(msgs) == SPEC.messages
    assert {m.version for m in msgs} == {"v1", "v2"}
    assert {m.compression for m in msgs} == {None, "ZLIB", "LZ4", "ZSTD"}
    assert any(m.born_host.startswith("[") for m in msgs)
    assert any(m.store_host.startswith("[") for m in msgs)
    stamps = [m.store_timestamp for m in msgs]
    assert all(a < b for a, b in itertools.pairwise(stamps))
    check = verify.check_store(root, SPEC.commitlog_file_size, CQ_FILE)
    assert check.problems == []
    assert check.checked == SPEC.messages


def test_commitlog_files_roll_with_blank_units(
    store: tuple[Path, dict[tuple[str, int, int], tuple[str, str]]],
) -> None:
    root, _ = store
    files = list_files([root / "commitlog"])
    assert len(files) >= 3
    for f in files:
        assert f.size == SPEC.commitlog_file_size
        assert f.path.name == f"{f.base:020d}"
    for f in files[:-1]:
        last = list(scan_file(f.path))[-1]
        assert last.kind == "blank"
        assert last.position + last.size == SPEC.commitlog_file_size
    assert list(scan_file(files[-1].path))[-1].kind == "end"


def test_consumequeue_files_roll(
    store: tuple[Path, dict[tuple[str, int, int], tuple[str, str]]],
) -> None:
    root, _ = store
    cq = cqmod.ConsumeQueue.for_queue(root / "consumequeue", "GenTopic0", 0, file_size=CQ_FILE)
    files = cq.files()
    assert len(files) >= 2
    assert [f.start for f in files] == [i * CQ_FILE for i in range(len(files))]
    topics = load_topics(root / "config" / "topics.json").topic_config_table
    assert sorted(topics) == ["GenTopic0", "GenTopic1"]
    assert topics["GenTopic0"].write_queue_nums == SPEC.queues


def test_every_key_is_in_the_broker_index(
    store: tuple[Path, dict[tuple[str, int, int], tuple[str, str]]],
) -> None:
    root, _ = store
    paths = sorted((root / "index").iterdir())
    assert len(paths) == 4  # 9000 keys (uniq + 2 KEYS per message), 2499 per file
    log = CommitLog(root / "commitlog", SPEC.commitlog_file_size)
    files = [broker_index.IndexFile.open(p, slots=SPEC.index_slots) for p in paths]
    try:
        for f in list_files([root / "commitlog"]):
            for it in scan_file(f.path):
                if it.message is None or it.offset % 7:  # a sample keeps the test quick
                    continue
                m = it.message
                for key in [*m.keys, m.properties["UNIQ_KEY"]]:
                    hits = [h for idx in files for h in idx.lookup(m.topic, key)]
                    assert it.offset in [h.phys_offset for h in hits], key
                    assert log.read_message(it.offset) == m
        # the broker records a file's end in the checkpoint when it opens the next one, so the
        # newest full file (the third) is there, not the open fourth (a real 5.3.3 store with one
        # index file has indexMsgTimestamp 0)
        cp = read_checkpoint(root / "checkpoint")
        assert cp.index_msg_timestamp == files[2].header.end_timestamp
        assert cp.index_msg_timestamp < files[3].header.end_timestamp
    finally:
        for idx in files:
            idx.close()


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    spec = GenSpec(seed=5, messages=500, commitlog_file_size=1 << 16, cq_file_entries=50,
                   compress_fraction=0.5, ipv6_fraction=0.5, v2_fraction=0.5)  # fmt: skip
    generate_store(tmp_path / "a", spec)
    generate_store(tmp_path / "b", spec)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")


def test_append_continues_like_a_broker(tmp_path: Path) -> None:
    spec = GenSpec(seed=3, topics=1, queues=2, messages=400, max_body=500,
                   commitlog_file_size=1 << 16, cq_file_entries=64)  # fmt: skip
    root = tmp_path / "s"
    first = generate_store(root, spec, manifest=True)
    second = generate_store(root, replace(spec, append=True, messages=300), manifest=True)
    assert not set(first.manifest) & set(second.manifest)
    for key, (lo, _) in second.queues.items():
        assert lo == first.queues[key][1]
    check = verify.check_store(root, spec.commitlog_file_size, 64 * 20)
    assert check.problems == []
    assert check.checked == 700
    msgs = [it.message for f in list_files([root / "commitlog"]) for it in scan_file(f.path)
            if it.message is not None]  # fmt: skip
    stamps = [m.store_timestamp for m in msgs]
    assert all(a < b for a, b in itertools.pairwise(stamps))


def test_refuses_to_overwrite_and_bad_options(tmp_path: Path) -> None:
    generate_store(tmp_path / "s", GenSpec(messages=10))
    with pytest.raises(ConfigError, match="already holds a store; pass --append"):
        generate_store(tmp_path / "s", GenSpec(messages=10))
    with pytest.raises(ConfigError, match="--append given but"):
        generate_store(tmp_path / "t", GenSpec(messages=10, append=True))
    with pytest.raises(ConfigError, match=r"--v2-fraction=1\.5 must be in"):
        generate_store(tmp_path / "u", GenSpec(v2_fraction=1.5))
    with pytest.raises(ConfigError, match="--commitlog-file-size=1000 cannot hold"):
        generate_store(tmp_path / "v", GenSpec(commitlog_file_size=1000))


def test_verify_reports_at_most_max_problems(tmp_path: Path) -> None:
    spec = GenSpec(seed=2, topics=1, queues=1, messages=60, commitlog_file_size=1 << 20)
    root = tmp_path / "s"
    generate_store(root, spec)
    path = root / "consumequeue" / "GenTopic0" / "0" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    for i in range(50):  # every tag code wrong
        data[i * 20 + 12 : i * 20 + 20] = (12345).to_bytes(8, "big")
    path.write_bytes(data)
    log = CommitLog(root / "commitlog", spec.commitlog_file_size)
    size = spec.cq_file_entries * cqmod.CQ_UNIT_SIZE
    cq = cqmod.ConsumeQueue.for_queue(root / "consumequeue", "GenTopic0", 0, file_size=size)
    check = verify.check_queue(log, cq, "GenTopic0", 0, max_problems=5)
    assert len(check.problems) == 6
    assert "tag code 12345 != hash of TAGS" in check.problems[0]
    assert check.problems[-1] == "GenTopic0/0: stopped after 5 problems"
