"""``kill -9`` of a running ``rmq-tiered run`` at many random moments loses and duplicates nothing.

A broker store keeps growing (the test appends to it between and during runs) while a ``run``
subprocess offloads it to a posix tier with tiny batches, a 50 ms dispatch interval and tiny
segments (so rolls happen all the time). The subprocess is killed with SIGKILL at a random moment
after it started working, and restarted, KILLS times. Then one ``dispatch --once --flush`` and the
independent checker: every queue offset of every queue is in the tier exactly once, in order,
with the broker's bytes (28..35 = flat offset).
"""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from tiered.providers import build_provider

from tiered.broker.generator import generate_store
from tiered.testing.processes import wait_running
from tiered.testing.sample_tier import SidecarCase
from tiered.testing.sample_tier import rolling_spec
from tiered.testing.tier_check import check_tier

RMQ_TIERED = Path(sys.executable).parent / "rmq-tiered"
KILLS = 55


@pytest.mark.slow
@pytest.mark.parametrize(
    ("journal", "kills"), [("262144", KILLS), ("0", KILLS)], ids=["whole-file", "journal"]
)
def test_kill_9_at_random_moments_loses_and_duplicates_nothing(
    tmp_path: Path, offload_case: SidecarCase, journal: str, kills: int
) -> None:
    """With ``journal``, every metadata persist appends to the journal (and a kill lands
    between appends, compactions and the stop's compaction)."""
    spec = rolling_spec(
        seed=1, queues=4, max_body=900, v2_fraction=0.2, ipv6_fraction=0.2, compress_fraction=0.2
    )
    store = tmp_path / "store"
    generate_store(store, spec)
    cfg = offload_case.config(
        store,
        "posix",
        spec=spec,
        tieredStoreGroupCommitCount=16,
        tieredStoreGroupCommitSize=8 << 10,
        tieredStoreCommitLogMaxSize=48 << 10,
        tieredStoreConsumeQueueMaxSize=60 * 20,
        tieredStoreDispatchIntervalMs=50,
        tieredMetadataJournalMinBytes=journal,
    )
    conf = offload_case.conf_file(cfg)
    rng = random.Random(20261122)
    total = spec.messages
    reconciled = 0
    for kill in range(kills):
        log = tmp_path / f"run-{kill}.log"
        with log.open("wb") as err:
            proc = subprocess.Popen([RMQ_TIERED, "run", "--config", conf], stderr=err, cwd=tmp_path)
        appender = None
        try:
            wait_running(log, proc)
            if kill % 3 == 0:  # the broker writes while the sidecar runs
                more = dataclasses.replace(spec, seed=1000 + kill, messages=400, append=True)
                appender = threading.Thread(target=generate_store, args=(store, more))
                appender.start()
                total += more.messages
            time.sleep(rng.uniform(0.0, 0.6))
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            if appender is not None:
                appender.join()
        assert proc.returncode == -signal.SIGKILL
        text = log.read_text(errors="replace")
        assert "Traceback" not in text, text[-3000:]
        reconciled += "reconciled with the backend" in text
        if kill % 3 != 0:  # and between runs (so most runs start with a backlog)
            more = dataclasses.replace(spec, seed=5000 + kill, messages=500, append=True)
            generate_store(store, more)
            total += more.messages
    done = subprocess.run(
        [RMQ_TIERED, "dispatch", "--config", conf, "--once", "--flush", "--json"],
        check=False,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    check = check_tier(cfg, build_provider(cfg))
    assert check.problems == []
    assert check.messages == total and len(check.ranges) == 8
    assert all(first == 0 for first, _ in check.ranges.values())
    assert reconciled > 0  # some kills did leave uploaded-but-unrecorded bytes behind
    print(f"\n{kills} kill -9 points, {total} messages, {reconciled} restarts reconciled")
