"""Benchmark: user-space instructions of ``dispatch --once --flush``, counted by valgrind's
callgrind (deterministic where CPU-seconds on these shared machines are not), as a slope
between two store sizes: instructions per message, and the fixed work of a one-shot run
(imports, set-up) as the intercept.

Run with ``make bench`` (about four minutes: each callgrind run is ~50x slower than the
process). Stores of :data:`SMALL` and :data:`LARGE` messages of 1 KiB bodies, 16 queues, the
realistic key mix (``gen-store --key-mix realistic``), key index on and off; the bytecode is
compiled by a warm-up run first, as pip compiles it at install. The goal of the offload-cost
work: at most :data:`GOAL_PER_MESSAGE` instructions per message with the index on.

The counts are repeatable up to the sidecar's timed work: under valgrind a run takes ~50x its
time, so memos with a time to live (a queue's min offset, 1 s) expire and the index progress
is saved more often than in a real run. Each count is the least of :data:`RUNS` runs.

To look at where they go: ``valgrind --tool=callgrind --callgrind-out-file=cg.out rmq-tiered
dispatch --config C --once --flush`` on two sizes, then ``callgrind_annotate`` of each.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tiered.broker.generator import GenSpec
from tiered.broker.generator import generate_store

SMALL, LARGE = 20_000, 60_000
GOAL_PER_MESSAGE = 6_000
RUNS = 2
RMQ_TIERED = Path(sys.executable).parent / "rmq-tiered"
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _store(path: Path, messages: int) -> Path:
    spec = GenSpec(
        seed=1, topics=2, queues=8, messages=messages, min_body=1024, max_body=1024,
        keys_per_message=2, key_mix="realistic",
    )  # fmt: skip
    generate_store(path, spec)
    return path


def _conf(work: Path, store: Path, index: bool) -> Path:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    keys = {
        "storePathRootDir": store,
        "brokerName": "broker-a",
        "tieredDataDir": work / "data",
        "tieredBackendServiceProvider": "posix",
        "tieredStoreFilePath": work / "tier",
        "messageIndexEnable": str(index).lower(),
    }
    conf = work / "tiered.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in keys.items()), encoding="utf-8")
    return conf


def _instructions(conf: Path, cwd: Path) -> int:
    """Instructions callgrind collected over the whole ``dispatch`` process (every thread)."""
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
         str(RMQ_TIERED), "dispatch", "--config", str(conf), "--once", "--flush", "--json"],
        cwd=cwd, env=ENV, capture_output=True, text=True, check=True,
    )  # fmt: skip
    found = re.search(r"Collected : (\d+)", out.stderr)
    assert found, out.stderr[-2000:]
    return int(found.group(1))


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind (Debian package)")
def test_instructions_per_message(tmp_path: Path) -> None:
    small = _store(tmp_path / "small", SMALL)
    large = _store(tmp_path / "large", LARGE)
    subprocess.run(
        [str(RMQ_TIERED), "dispatch", "--config", str(_conf(tmp_path / "warm", small, True)),
         "--once", "--flush", "--json"],
        cwd=tmp_path, env=ENV, capture_output=True, check=True,
    )  # fmt: skip
    lines = [
        (
            "\ncallgrind: user-space instructions of `dispatch --once --flush`, 1 KiB bodies, "
            f"realistic key mix, {SMALL:,} and {LARGE:,} messages"
        ),
        f"{'index':>6} {'small G':>8} {'large G':>8} {'per message':>12} {'fixed G':>8}",
    ]
    per: dict[bool, float] = {}
    for index in (True, False):
        counts = [
            min(
                _instructions(_conf(tmp_path / f"w{n}", store, index), tmp_path)
                for _ in range(RUNS)
            )
            for n, store in ((SMALL, small), (LARGE, large))
        ]
        per[index] = (counts[1] - counts[0]) / (LARGE - SMALL)
        fixed = counts[0] - per[index] * SMALL
        lines.append(
            f"{'on' if index else 'off':>6} {counts[0] / 1e9:8.3f} {counts[1] / 1e9:8.3f} "
            f"{per[index]:12,.0f} {fixed / 1e9:8.3f}"
        )
    print("\n".join(lines))
    assert per[True] <= GOAL_PER_MESSAGE, f"{per[True]:,.0f} instructions per message"
