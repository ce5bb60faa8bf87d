"""``rmq-tiered inspect`` and ``gen-store`` as an operator runs them, bad input included."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner
from click.testing import Result

from tiered.broker.generator import GenSpec
from tiered.broker.generator import generate_store
from tiered.cli import main


def _run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _no_traceback(r: Result) -> None:
    assert "Traceback" not in r.output
    assert "Traceback" not in r.stderr


def test_every_real_commitlog_prints_every_message_with_good_crc(real_data: Path) -> None:
    files = sorted(real_data.rglob("commitlog/*"))
    total = 0
    for f in files:
        r = _run("inspect", "commitlog", "--json", str(f))
        assert r.exit_code == 0, r.stderr
        lines = [json.loads(line) for line in r.stdout.splitlines()]
        assert all(m["crcOk"] for m in lines)
        assert all(m["topic"] == "abc" and m["magic"] == "v1" for m in lines)
        assert all(m["bodyBase64"] == "T25jZSwgdGhlcmUgd2FzIGEgY2hhbmNlIGZvciBtZSE=" for m in lines)
        total += len(lines)
    assert total == 320
    first = json.loads(_run("inspect", "commitlog", "--json", str(files[0])).stdout.splitlines()[0])
    for field in ("topic", "queueId", "queueOffset", "physicalOffset", "storeTimestamp",
                  "bornTimestamp", "bornHost", "storeHost", "sysFlag", "bodyCRC", "crcOk",
                  "magic", "keys", "tags", "properties", "bodyBase64"):  # fmt: skip
        assert field in first


def test_real_commitlog_dir_as_a_table(real_data: Path) -> None:
    d = real_data / "EricPanGopher__rocketmq/store/unit_test_store/commitlog"
    r = _run("inspect", "commitlog", str(d))
    assert r.exit_code == 0
    assert "47 messages, ends at position 8084 with a BLANK unit" in r.stdout
    assert "38 messages" in r.stdout
    lines = [line.split() for line in r.stdout.splitlines()]
    rows = [cells for cells in lines if cells[:1] and cells[0].isdigit()]  # (not "000..: 47")
    assert len(rows) == 3 * 47 + 38 and all(row[1] == "abc" and row[7] == "ok" for row in rows)
    assert r.stdout.splitlines()[0].split()[:3] == ["phys", "offset", "topic"]


def test_real_consumequeues_cross_check_with_ext_tags(real_data: Path) -> None:
    store = real_data / "EricPanGopher__rocketmq/store/unit_test_store"
    r = _run("inspect", "store", "--json", "--commitlog-file-size", "8192",
             "--cq-file-size", "200", str(store))  # fmt: skip
    assert r.exit_code == 0, r.stderr
    (queue,) = [json.loads(line) for line in r.stdout.splitlines()]
    assert queue["topic"] == "abc"
    assert queue["checked"] == queue["maxOffset"] - queue["minOffset"] > 0
    assert queue["extTags"] == queue["checked"]  # ConsumeQueueExt is on in that store
    assert queue["problems"] == []


def test_real_consumequeue_checkpoint_and_configs(real_data: Path) -> None:
    cq = real_data / "EricPanGopher__rocketmq/store/unit_test_store/consumequeue/abc/0"
    r = _run("inspect", "consumequeue", "--json", str(cq / "00000000000000000200"))
    assert r.exit_code == 0
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [row["queueOffset"] for row in rows] == list(range(10, 10 + len(rows)))
    for ck in real_data.rglob("checkpoint"):
        r = _run("inspect", "checkpoint", "--json", str(ck))
        assert r.exit_code == 0, ck
        assert "physicMsgTimestamp" in json.loads(r.stdout)
    for cfg in real_data.rglob("config/*.json*"):
        r = _run("inspect", "config", "--json", str(cfg))
        assert r.exit_code == 0, (cfg, r.stderr)
        json.loads(r.stdout)


@pytest.fixture
def small_store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    generate_store(root, GenSpec(seed=2, messages=300, commitlog_file_size=1 << 16,
                                 cq_file_entries=100, with_index=True, index_slots=97,
                                 index_max_items=1000))  # fmt: skip
    return root


def test_gen_store_then_inspect_index(tmp_path: Path) -> None:
    root = tmp_path / "s"
    r = _run("gen-store", str(root), "--messages", "200", "--with-index", "--ipv6-fraction", "0.5",
             "--compress-fraction", "0.5", "--v2-fraction", "0.5",
             "--commitlog-file-size", str(1 << 16))  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert "wrote 200 messages" in r.stdout
    (idx,) = (root / "index").iterdir()
    r = _run("inspect", "index", str(idx), "--topic", "GenTopic0", "--key", "GenTopic0-0-0-0",
             "--commitlog", str(root / "commitlog"), "--commitlog-file-size", str(1 << 16),
             "--json")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    (hit,) = [json.loads(line) for line in r.stdout.splitlines()]
    assert hit["message"]["keys"] == ["GenTopic0-0-0-0"]
    r = _run("inspect", "index", str(idx), "--topic", "GenTopic0", "--key", "nope")
    assert r.exit_code == 1
    r = _run("gen-store", str(root), "--messages", "10")
    assert r.exit_code == 2
    assert "already holds a store; pass --append" in r.stderr
    r = _run("gen-store", str(root), "--messages", "50", "--append",
             "--commitlog-file-size", str(1 << 16))  # fmt: skip
    assert r.exit_code == 0, r.stderr
    r = _run("inspect", "store", "--commitlog-file-size", str(1 << 16), str(root))
    assert r.exit_code == 0, r.stderr


def test_bad_magic_in_the_middle_is_named(small_store: Path, tmp_path: Path) -> None:
    f = sorted((small_store / "commitlog").iterdir())[0]
    raw = bytearray(f.read_bytes())
    second = struct.unpack_from(">i", raw, 0)[0]
    raw[second + 4 : second + 8] = b"\0\0\0\x07"
    bad = tmp_path / f.name
    bad.write_bytes(bytes(raw))
    r = _run("inspect", "commitlog", "--json", str(bad))
    assert r.exit_code == 1
    _no_traceback(r)
    assert len(r.stdout.splitlines()) == 1  # the message before it, nothing after
    assert f"corrupt unit at position {second} (physical offset {second})" in r.stderr
    assert "bad magic code 0x00000007" in r.stderr


def test_crc_mismatch_is_reported_not_hidden(small_store: Path, tmp_path: Path) -> None:
    f = sorted((small_store / "commitlog").iterdir())[0]
    raw = bytearray(f.read_bytes())
    body_at = 84 + 4 + 8  # IPv4 hosts: body length at 84, body at 88
    raw[body_at] ^= 0xFF
    bad = tmp_path / f.name
    bad.write_bytes(bytes(raw))
    r = _run("inspect", "commitlog", "--json", str(bad))
    assert r.exit_code == 1
    first = json.loads(r.stdout.splitlines()[0])
    assert first["crcOk"] is False
    assert "body CRC mismatch at position 0 (physical offset 0)" in r.stderr


def test_truncated_commitlog(small_store: Path, tmp_path: Path) -> None:
    f = sorted((small_store / "commitlog").iterdir())[0]
    size = struct.unpack_from(">i", f.read_bytes(), 0)[0]
    bad = tmp_path / f.name
    bad.write_bytes(f.read_bytes()[: size + 40])
    r = _run("inspect", "commitlog", str(bad))
    assert r.exit_code == 1
    _no_traceback(r)
    assert f"corrupt unit at position {size}" in r.stderr


def test_consumequeue_not_a_multiple_of_20(tmp_path: Path) -> None:
    f = tmp_path / "00000000000000000000"
    f.write_bytes(b"\0" * 50)
    r = _run("inspect", "consumequeue", str(f))
    assert r.exit_code == 2
    _no_traceback(r)
    assert "50 bytes is not a whole number of 20-byte" in r.stderr


def test_non_json_and_unreadable_configs(tmp_path: Path) -> None:
    f = tmp_path / "topics.json"
    f.write_text("{not json")
    r = _run("inspect", "config", str(f))
    assert r.exit_code == 2
    _no_traceback(r)
    assert "topics.json" in r.stderr
    d = tmp_path / "dir.json"
    d.mkdir()
    r = _run("inspect", "config", str(d))
    assert r.exit_code == 2
    _no_traceback(r)


def test_corrupt_config_falls_back_to_bak(real_data: Path, tmp_path: Path) -> None:
    src = real_data / "super-golden__rocketMq/store/config/consumerOffset.json"
    shutil.copy(src, tmp_path / "consumerOffset.json.bak")
    (tmp_path / "consumerOffset.json").write_text('{"offsetTable": {')
    r = _run("inspect", "config", "--json", str(tmp_path / "consumerOffset.json"))
    assert r.exit_code == 0, r.stderr
    assert (
        json.loads(r.stdout)["offsetTable"]["TopicTest@please_rename_unique_group_name_4"]["2"]
        == 251
    )


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    r = _run("inspect", "commitlog", str(tmp_path / "nope"))
    assert r.exit_code == 2
    _no_traceback(r)
