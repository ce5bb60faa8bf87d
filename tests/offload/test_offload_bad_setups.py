"""Bad setups an operator makes: no silent no-ops.

A missing or empty broker store stops ``dispatch``, ``run`` and ``status`` with one line naming
the path; a store whose files are not the configured mapped size is read with the files' sizes
(keys absent: silently right; keys wrong: a warning naming both values); a queue that cannot be
read fails the pass (exit 1) and is named.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tiered.config import TieredConfig
from tiered.testing.sample_tier import SidecarCase

RMQ_TIERED = Path(sys.executable).parent / "rmq-tiered"
MAPPED = ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue")


def write(path: Path, props: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items() if v != ""), "utf-8")
    return path


def rmq(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RMQ_TIERED, *map(str, args)], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.parametrize("command", ["dispatch", "run", "status"])
@pytest.mark.parametrize("what", ["missing", "empty"])
def test_a_missing_or_empty_store_is_one_line_and_non_zero(
    tmp_path: Path, offload_case: SidecarCase, command: str, what: str
) -> None:
    root = tmp_path / "store"
    if what == "empty":
        root.mkdir()
    conf = write(tmp_path / "s.conf", offload_case.config(root, "posix").as_properties())
    extra = ["--once"] if command == "dispatch" else []
    done = rmq(command, "--config", conf, *extra)
    assert done.returncode == 2, done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert f"storePathRootDir='{root}'" in line and "broker" in line
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "data" / "config").exists() or command == "run"


def _props_without_sizes(cfg: TieredConfig) -> dict[str, str]:
    return {k: v for k, v in cfg.as_properties().items() if k not in MAPPED}


def test_sizes_come_from_the_files_when_the_keys_are_absent(
    tmp_path: Path, offload_case: SidecarCase
) -> None:
    store = (
        offload_case.store()
    )  # 256 KiB commitlog and 8000-byte consumequeue files, not the defaults
    conf = write(tmp_path / "s.conf", _props_without_sizes(offload_case.config(store, "posix")))
    done = rmq("dispatch", "--config", conf, "--once", "--flush", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.splitlines()[-1])
    assert (summary["messages"], summary["queues"]) == (3000, 6)


def test_keys_that_disagree_with_the_files_are_overruled_with_one_warning(
    tmp_path: Path, offload_case: SidecarCase
) -> None:
    store = offload_case.store()
    props = offload_case.config(store, "posix").as_properties()
    props["mappedFileSizeConsumeQueue"] = "6000000"
    conf = write(tmp_path / "s.conf", props)
    done = rmq("dispatch", "--config", conf, "--once", "--flush", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["messages"] == 3000
    warnings = [ln for ln in done.stderr.splitlines() if "disagrees" in ln]
    assert len(warnings) == 1, done.stderr
    assert "mappedFileSizeConsumeQueue=6000000" in warnings[0] and "8000" in warnings[0]


def test_a_queue_that_cannot_be_read_fails_the_pass_and_is_named(
    tmp_path: Path, offload_case: SidecarCase
) -> None:
    store = offload_case.store()
    broken = store / "consumequeue" / "GenTopic1" / "2"
    first = sorted(broken.iterdir())[0]
    with first.open("r+b") as f:  # a torn file: not a whole number of units
        f.truncate(first.stat().st_size - 7)
    conf = write(tmp_path / "s.conf", offload_case.config(store, "posix").as_properties())
    done = rmq("dispatch", "--config", conf, "--once", "--flush", "--json")
    assert done.returncode == 1, done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert "GenTopic1/2" in line and "could not be offloaded" in line
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["queues"] == 5  # the others went up
