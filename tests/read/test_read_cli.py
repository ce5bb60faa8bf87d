"""``rmq-tiered fetch`` and ``explain``: separate processes beside a running sidecar, read-only."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tiered.core.data_dir_lock import DataDirLock
from tiered.errors import ConfigError
from tiered.http.app import message_json
from tiered.testing.sample_tier import SampleTier
from tiered.testing.sample_tier import write_conf

TierFactory = Callable[..., SampleTier]


RMQ_TIERED = Path(sys.executable).parent / "rmq-tiered"


def run(*args: str | Path, code: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [RMQ_TIERED, *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == code, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    return done


def lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_fetch_prints_the_api_objects_and_touches_nothing(
    make_tier: TierFactory, tmp_path: Path
) -> None:
    tier = make_tier("posix")
    conf = write_conf(tier.cfg, tmp_path / "sidecar.conf")
    metadata = tier.cfg.tiered_data_dir / "config" / "tieredStoreMetadata.json"
    before = sorted(p.name for p in metadata.parent.iterdir()), metadata.read_bytes()
    with pytest.raises(ConfigError, match="in use by another rmq-tiered"):
        DataDirLock(tier.cfg.tiered_data_dir).acquire()  # the open sidecar holds it, as `run`
    out = run("fetch", "--config", conf, "--topic", "GenTopic0", "--queue", "0",
              "--offset", "3", "--max-count", "5", "--json")  # fmt: skip
    store = tier.store()
    want = store.get_message("GenTopic0", 0, 3, 5)
    assert lines(out.stdout) == [message_json(u.data, "tiered") for u in want.units]
    assert "FOUND: 5 message(s) from the tiered store, next offset 8" in out.stderr
    assert (sorted(p.name for p in metadata.parent.iterdir()), metadata.read_bytes()) == before
    lmin = tier.local_min[("GenTopic1", 0)]
    local = run("fetch", "--config", conf, "--topic", "GenTopic1", "--queue", "0",
                "--offset", str(lmin), "--tags", "TagA", "--json")  # fmt: skip
    got = lines(local.stdout)
    assert got and all(m["tags"] == "TagA" and m["tier"] == "local" for m in got)
    table = run("fetch", "--config", conf, "--topic", "GenTopic0", "--queue", "1",
                "--offset", "0", "--max-count", "3")  # fmt: skip
    uniq = [json.loads(json.dumps(m))["msgId"] for m in lines(run(
        "fetch", "--config", conf, "--topic", "GenTopic0", "--queue", "1", "--offset", "0",
        "--max-count", "3", "--json").stdout)]  # fmt: skip
    assert all(u in table.stdout for u in uniq)


def test_fetch_statuses_and_mistakes(make_tier: TierFactory, tmp_path: Path) -> None:
    tier = make_tier("posix", deleted_files=0)
    conf = write_conf(tier.cfg, tmp_path / "sidecar.conf", tieredStorageLevel="DISABLE")
    far = run("fetch", "--config", conf, "--topic", "GenTopic0", "--queue", "0",
              "--offset", "100000", "--json")  # fmt: skip
    assert far.stdout == "" and far.stderr.startswith("OFFSET_OVERFLOW_BADLY: 0 message(s)")
    bad = run("fetch", "--config", conf, "--topic", "../etc", "--queue", "0", "--offset", "0",
              code=2)  # fmt: skip
    assert bad.stderr.strip().splitlines() == [
        "error: topic='../etc' is not a RocketMQ topic name (1-127 of A-Z a-z 0-9 % | _ -)"
    ]
    tags = run("fetch", "--config", conf, "--topic", "GenTopic0", "--queue", "0", "--offset",
               "0", "--tags", "A || || B", code=2)  # fmt: skip
    assert "tags='A || || B' has an empty tag" in tags.stderr
    negative = run("fetch", "--config", conf, "--topic", "T", "--queue", "0", "--offset", "-1",
                   code=2)  # fmt: skip
    assert "--offset" in negative.stderr


def test_explain_says_why(make_tier: TierFactory, tmp_path: Path) -> None:
    tier = make_tier("posix")
    conf = write_conf(
        tier.cfg, tmp_path / "sidecar.conf", tieredStorageLevelOverrides="GenTopic1:DISABLE"
    )
    out = run("explain", "--config", conf, "--topic", "GenTopic0", "--queue", "0",
              "--offset", "1", "--json")  # fmt: skip
    doc = json.loads(out.stdout)
    assert doc == tier.store().explain("GenTopic0", 0, 1)
    assert (doc["tier"], doc["level"], doc["levelFrom"]) == ("tiered", "NOT_IN_DISK",
                                                           "tieredStorageLevel")  # fmt: skip
    off = run("explain", "--config", conf, "--topic", "GenTopic1", "--queue", "0",
              "--offset", "1", "--json")  # fmt: skip
    doc = json.loads(off.stdout)
    assert (doc["tier"], doc["level"]) == ("local", "DISABLE")
    assert doc["levelFrom"] == "tieredStorageLevelOverrides 'GenTopic1:DISABLE'"
    table = run("explain", "--config", conf, "--topic", "GenTopic0", "--queue", "0",
                "--offset", "1")  # fmt: skip
    assert "no longer on the broker's disk" in table.stdout and "flatCommitOffset" in table.stdout
