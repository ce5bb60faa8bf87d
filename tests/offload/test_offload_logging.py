"""The log lines of the installed ``rmq-tiered`` (subprocesses): JSON and text formats, one DEBUG
line per uploaded batch, one WARNING line per failed step naming the object, uvicorn in JSON."""

from __future__ import annotations

import bisect
import itertools
import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

from tiered.providers.layout import FileType
from tiered.providers.layout import logical_path
from tiered.providers.layout import segment_key

from tiered.metadata import FileSegmentType
from tiered.offload.dispatcher import MAX_FAILURES
from tiered.source.local_source import LocalSource
from tiered.testing.sample_tier import SidecarCase
from tiered.testing.tier_check import read_document

RMQ_TIERED = Path(sys.executable).parent / "rmq-tiered"
ISO_MS_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
TEXT_LINE = re.compile(
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) [\w.]+: \S.*"
)
BATCH_FIELDS = {
    "topic",
    "queueId",
    "fromOffset",
    "toOffset",
    "messages",
    "bytes",
    "commitLogKey",
    "consumeQueueKey",
    "ms",
}


def dispatch(conf: Path, *flags: str, code: int = 0) -> tuple[dict[str, Any], str]:
    """``rmq-tiered dispatch --once --flush --json`` as a subprocess: (summary, stderr)."""
    done = subprocess.run(
        [RMQ_TIERED, "dispatch", "--config", conf, "--once", "--flush", "--json", *flags],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == code, done.stderr
    summary: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return summary, done.stderr


def json_lines(stderr: str) -> list[dict[str, Any]]:
    """Every stderr line parsed; each must be a JSON object with the four standard fields."""
    out = []
    for line in stderr.splitlines():
        obj = json.loads(line)
        assert isinstance(obj, dict), line
        assert ISO_MS_UTC.fullmatch(obj["time"]), line
        assert obj["level"] in ("DEBUG", "INFO", "WARNING", "ERROR"), line
        assert obj["logger"] and isinstance(obj["message"], str), line
        out.append(obj)
    return out


def test_json_debug_dispatch_logs_one_line_per_batch(offload_case: SidecarCase) -> None:
    store = offload_case.store()
    cfg = offload_case.config(store, "posix", tieredLogLevel="debug", tieredLogFormat="json")
    summary, stderr = dispatch(offload_case.conf_file(cfg))  # no -v: the configured level applies
    lines = json_lines(stderr)
    batches = [o for o in lines if o["message"].startswith("uploaded batch ")]
    assert batches and all(o["level"] == "DEBUG" for o in batches)
    assert all(o.keys() >= BATCH_FIELDS for o in batches)
    # the provider's counts: each batch is one commitlog and one consumequeue append (one
    # pwrite each), the metadata mirror puts one WRITE per RENAME
    requests = summary["requests"]
    assert requests["WRITE"] - requests["RENAME"] == 2 * len(batches)
    assert sum(o["messages"] for o in batches) == summary["messages"] == 3000
    assert sum(o["bytes"] for o in batches) == summary["bytes"]
    doc = read_document(cfg)
    by_queue: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for o in batches:
        by_queue[(o["topic"], o["queueId"])].append(o)
    assert len(by_queue) == summary["queues"] == 6
    for (topic, qid), seen in by_queue.items():
        path = logical_path(cfg.broker_name, topic, qid)
        cl = doc.segment_table(FileSegmentType.COMMIT_LOG)[path]
        cq = doc.segment_table(FileSegmentType.CONSUME_QUEUE)[path]
        seen.sort(key=lambda o: o["fromOffset"])
        # contiguous offsets from 0 to what the consumequeue recorded, messages = their span
        assert seen[0]["fromOffset"] == 0
        for a, b in itertools.pairwise(seen):
            assert a["toOffset"] == b["fromOffset"]
        assert all(o["toOffset"] - o["fromOffset"] == o["messages"] > 0 for o in seen)
        last_cq = max(cq.values(), key=lambda m: m.base_offset)
        assert seen[-1]["toOffset"] * 20 == last_cq.base_offset + last_cq.size
        assert sum(o["bytes"] for o in seen) == sum(m.size for m in cl.values())
        # each batch names the segments it went to (flat commitlog offsets are contiguous)
        cl_bases, cq_bases = sorted(cl), sorted(cq)
        flat = 0
        for o in seen:
            base = cl_bases[bisect.bisect_right(cl_bases, flat) - 1]
            want = segment_key(
                cfg.broker_cluster_name, cfg.broker_name, topic, qid, FileType.COMMIT_LOG, base
            )
            assert o["commitLogKey"] == want and want in o["message"]
            base = cq_bases[bisect.bisect_right(cq_bases, o["fromOffset"] * 20) - 1]
            want = segment_key(
                cfg.broker_cluster_name, cfg.broker_name, topic, qid, FileType.CONSUME_QUEUE, base
            )
            assert o["consumeQueueKey"] == want
            flat += o["bytes"]
    assert len({o["commitLogKey"] for o in batches}) > 6  # segments rolled meanwhile


def test_a_failing_queue_logs_one_warning_per_failed_step_with_its_object_key(
    offload_case: SidecarCase,
) -> None:
    store = offload_case.store()
    cfg = offload_case.config(store, "posix", tieredLogFormat="json", tieredLogLevel="INFO")
    key = segment_key(
        cfg.broker_cluster_name, cfg.broker_name, "GenTopic0", 1, FileType.COMMIT_LOG, 0
    )
    # a directory where the queue's first commitlog object goes: every append to it fails
    (Path(cfg.tiered_store_file_path) / key).mkdir(parents=True)
    summary, stderr = dispatch(offload_case.conf_file(cfg), code=1)
    *logs, last = stderr.splitlines()
    assert last.startswith("error: 1 queues could not be offloaded: broker-a/GenTopic0/1")
    lines = json_lines("\n".join(logs))
    problems = [o for o in lines if o["level"] in ("WARNING", "ERROR")]
    assert summary["failures"] == MAX_FAILURES == len(problems)
    for attempt, o in enumerate(problems, start=1):
        assert o["objectKey"] == key and key in o["message"]
        assert (o["topic"], o["queueId"]) == ("GenTopic0", 1)
        assert f"dispatch failed (attempt {attempt}," in o["message"]
        assert "exc_info" not in o
    assert "Traceback" not in stderr
    failing = LocalSource(cfg).max_offset("GenTopic0", 1)
    assert summary["queues"] == 5 and summary["messages"] == 3000 - failing  # the others went up


def test_text_by_default_and_quiet_one_shot_commands(offload_case: SidecarCase) -> None:
    store = offload_case.store()
    conf = offload_case.conf_file(offload_case.config(store, "posix"))
    text = conf.read_text(encoding="utf-8")  # as an operator writes it: no log keys
    conf.write_text(re.sub(r"(?m)^tieredLog\w+=.*\n", "", text), encoding="utf-8")
    summary, stderr = dispatch(conf, "-v")
    lines = stderr.splitlines()
    assert summary["messages"] == 3000 and lines
    assert all(TEXT_LINE.fullmatch(line) for line in lines), stderr
    assert any(" INFO tiered.offload.dispatcher: " in line for line in lines)
    assert not any(line.startswith("{") for line in lines)
    assert not any(" DEBUG " in line for line in lines)  # -v is INFO; -vv would be DEBUG
    summary, stderr = dispatch(conf)  # nothing to do; quiet without -v or tieredLogLevel
    assert summary["messages"] == 0 and stderr == ""


def test_run_in_json_sends_uvicorn_through_the_same_handler(
    offload_case: SidecarCase, tmp_path: Path
) -> None:
    store = offload_case.store()
    cfg = offload_case.config(store, "posix", tieredLogFormat="json", tieredLogLevel="DEBUG")
    received: list[str] = []
    with subprocess.Popen(
        [RMQ_TIERED, "run", "--config", offload_case.conf_file(cfg)],
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    ) as proc:
        reader = threading.Thread(target=lambda: received.extend(proc.stderr or ()), daemon=True)
        reader.start()
        try:
            url = _wait_for(received, re.compile(r"HTTP API listening on (http://[\w.:\[\]]+)"))
            with urllib.request.urlopen(f"{url}/healthz", timeout=10) as answer:
                assert answer.status == 200
            _wait_for(received, re.compile(r"GET /healthz"))
            _wait_for(received, re.compile(r"uploaded batch "))
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
            reader.join(10)
    assert proc.returncode == 0, "".join(received)
    lines = json_lines("".join(received))
    access = [o for o in lines if o["logger"] == "uvicorn.access"]
    assert len(access) == 1 and "GET /healthz" in access[0]["message"]
    assert not [o for o in lines if o["logger"] == "uvicorn.error"]  # no startup chatter
    assert any(o["message"].startswith("uploaded batch ") for o in lines)
    assert lines[-1]["message"] == "rmq-tiered stopped cleanly"


def _wait_for(received: list[str], pattern: re.Pattern[str], seconds: float = 30.0) -> str:
    """The first group (or whole match) of ``pattern`` in the lines received so far."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for line in list(received):
            found = pattern.search(line)
            if found:
                return found.group(1) if pattern.groups else found.group(0)
        time.sleep(0.05)
    raise AssertionError(f"no {pattern.pattern!r} in {''.join(received)}")
