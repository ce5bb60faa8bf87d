"""The ``run``, ``dispatch``, ``status`` and ``recover`` commands."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tiered.providers import build_provider

from tiered.broker.consumequeue import ConsumeQueue
from tiered.cli import main
from tiered.cli.common import Rows
from tiered.metadata import mirror_key_for
from tiered.testing.http import get
from tiered.testing.sample_tier import SidecarCase
from tiered.testing.sidecar_process import Sidecar as RunProcess
from tiered.testing.tier_check import check_tier
from tiered.testing.tier_check import read_document
from tiered.testing.tier_check import store_fingerprint

RMQ_TIERED = Path(sys.executable).parent / "rmq-tiered"


def cli(*args: str | Path, code: int = 0) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == code, (result.output, result.exception)
    return result.output


def cli_json(*args: str | Path) -> dict[str, Any]:
    lines = [line for line in cli(*args).splitlines() if line.startswith("{")]
    obj: dict[str, Any] = json.loads(lines[-1])
    return obj


def test_dispatch_once_then_status(offload_case: SidecarCase) -> None:
    store = offload_case.store()
    cfg = offload_case.config(store, "posix")
    conf = offload_case.conf_file(cfg)
    before = cli_json("status", "--config", conf, "--json")
    assert before["role"] == "master" and before["totals"]["lagMessages"] == 3000
    summary = cli_json("dispatch", "--config", conf, "--once", "--flush", "--json")
    assert summary["messages"] == 3000 and summary["queues"] == 6
    assert summary["requests"]["total"] > 0 and summary["bytes"] > 0
    status = cli_json("status", "--config", conf, "--json")
    assert status["totals"] == {
        "queues": 6,
        "laggingQueues": 0,
        "listed": 6,
        "lagMessages": 0,
        "lagBytes": 0,
        "tieredBytes": status["totals"]["tieredBytes"],
        "gapMessages": 0,
        "indexLagMessages": 0,
    }
    for q in status["queues"]:
        assert q["tieredCommit"] == q["localMax"] and q["tieredMin"] == q["localMin"] == 0
        assert q["lastUploadMs"] > 0
    table = cli("status", "-c", conf)  # -c as the broker's own `mqbroker -c broker.conf`
    assert "role master" in table and "GenTopic0" in table
    lines = table.splitlines()
    head = lines.index(next(line for line in lines if line.startswith("queue ")))
    assert set(lines[head + 1]) == {"\u2500"}
    rows = [line.split("  ") for line in lines[head + 2 : head + 2 + len(status["queues"])]]
    for q, row in zip(status["queues"], rows, strict=True):
        cells = [cell.strip() for cell in row if cell.strip()]
        assert cells[:3] == [
            f"{q['topic']}/{q['queueId']}",
            f"[{q['localMin']}, {q['localMax']})",
            f"[{q['tieredMin']}, {q['tieredCommit']})",
        ]
    again = cli_json("dispatch", "--config", conf, "--once", "--json")
    assert again["messages"] == 0
    assert check_tier(cfg, build_provider(cfg)).problems == []


def test_status_picks_topics_lagging_queues_and_a_page(offload_case: SidecarCase) -> None:
    """``--topic`` (a glob), ``--lagging`` (most behind first) and ``--limit``: the summary line
    and the totals always count every queue matched; what is listed is chosen among them."""
    store = offload_case.store()  # 2 topics x 3 queues, 3000 messages
    cfg = offload_case.config(store, "posix")
    conf = offload_case.conf_file(cfg)
    cli_json("dispatch", "--config", conf, "--once", "--flush", "--json")
    offload_case.append(store, seed=9, messages=90)
    every = cli_json("status", "--config", conf, "--json")
    behind = {(q["topic"], q["queueId"]): q["lagMessages"] for q in every["queues"]}
    assert sum(behind.values()) == 90 and every["totals"]["laggingQueues"] >= 2
    size = cfg.effective_cq_file_size_bytes
    for q in every["queues"]:  # the lag's bytes: the kernel's, from the dispatcher's last max
        cq = ConsumeQueue.for_queue(cfg.consume_queue_dir, q["topic"], q["queueId"], file_size=size)
        units = cq.read_units(q["tieredCommit"], q["lagMessages"])
        assert len(units) == q["lagMessages"]
        assert q["lagBytes"] == int(units["size"].astype("int64").sum())
    lagging = cli_json("status", "--config", conf, "--json", "--lagging", "--limit", "2")
    rows = [q["lagMessages"] for q in lagging["queues"]]
    assert rows == sorted((v for v in behind.values() if v), reverse=True)[:2]
    assert lagging["totals"]["queues"] == 6 and lagging["totals"]["listed"] == 2
    assert lagging["totals"]["lagMessages"] == 90
    left = lagging["totals"]["laggingQueues"] - 2
    assert lagging["page"] == {"offset": 0, "next": 2 if left > 0 else None}
    one = cli_json("status", "--config", conf, "--json", "--topic", "GenTopic1")
    assert {q["topic"] for q in one["queues"]} == {"GenTopic1"} and one["totals"]["queues"] == 3
    assert cli_json("status", "--config", conf, "--json", "--topic", "Nope*")["queues"] == []
    table = cli("status", "--config", conf, "--lagging", "--limit", "1")
    first = table.splitlines()[2]
    assert first.startswith("6 queues, ") and "behind; lag 90 messages" in first
    assert "listed 1 of" in table


def test_a_table_aligns_its_columns_in_terminal_cells_block_by_block(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Left- and right-aligned columns two spaces apart, a rule under the header, the last
    column unpadded; a wide character takes two cells, a control character is shown escaped;
    a later block's wider cell widens its column from there on."""
    with Rows(["queue", "lag", "note"], right={"lag"}, block=2) as rows:
        rows.add("\u4e3b\u9898/0", "7", "")
        rows.add("T/12", "1234", "x\ny")
        rows.add("Topic/123", "5", "z")
    assert capsys.readouterr().out.splitlines() == [
        "queue    lag  note",
        "\u2500" * 18,
        "\u4e3b\u9898/0     7",
        "T/12    1234  x\\ny",
        "Topic/123     5  z",
    ]
    with pytest.raises(ValueError, match="2 cells for 3 columns"):
        Rows(["a", "b", "c"]).add("1", "2")


def test_status_names_a_damaged_queue_and_reads_the_others(offload_case: SidecarCase) -> None:
    """The queues are read in one call of the kernel; one it cannot answer (here a truncated
    consumequeue file) is read again by the Python reader, whose error its row shows."""
    store = offload_case.store()
    cfg = offload_case.config(store, "posix")
    conf = offload_case.conf_file(cfg)
    cli_json("dispatch", "--config", conf, "--once", "--flush", "--json")
    size = cfg.effective_cq_file_size_bytes
    (cfg.consume_queue_dir / "GenTopic0" / "1" / f"{size:020d}").write_bytes(bytes(180))
    rows = {
        (q["topic"], q["queueId"]): q for q in cli_json("status", "-c", conf, "--json")["queues"]
    }
    damaged = rows.pop(("GenTopic0", 1))
    assert damaged["error"].startswith("local store: ") and "size 180" in damaged["error"]
    assert len(rows) == 5
    for q in rows.values():
        assert q["error"] == "" and q["tieredCommit"] == q["localMax"] > 0


def test_dispatch_needs_once(offload_case: SidecarCase) -> None:
    conf = offload_case.conf_file(offload_case.config(offload_case.store()))
    assert "pass --once" in cli("dispatch", "--config", conf, code=2)


def test_status_of_a_slave_says_standby(offload_case: SidecarCase) -> None:
    conf = offload_case.conf_file(
        offload_case.config(offload_case.store(), "posix", brokerRole="SLAVE", brokerId=1)
    )
    summary = cli_json("dispatch", "--config", conf, "--once", "--flush", "--json")
    assert summary["messages"] == 0 and summary["role"] == "standby"
    assert cli_json("status", "--config", conf, "--json")["role"] == "standby"
    assert "stands by" in cli("status", "--config", conf)


def test_status_shows_the_key_index(offload_case: SidecarCase) -> None:
    cfg = offload_case.config(
        offload_case.store(),
        "posix",
        messageIndexEnable="true",
        tieredStoreIndexFileMaxHashSlotNum=1000,
        tieredStoreIndexFileMaxIndexNum=100000,
    )
    conf = offload_case.conf_file(cfg)
    cli("dispatch", "--config", conf, "--once", "--flush")
    index = cli_json("status", "--config", conf, "--json")["index"]
    assert index["enabled"] and index["lagMessages"] == 0 and index["uploadedFiles"] == 0
    [open_file] = index["localFiles"]
    assert open_file["status"] == "UNSEALED" and open_file["items"] >= 3000  # KEYS + UNIQ_KEY
    assert "key index: 1 open file" in cli("status", "--config", conf)
    cli("compact-index", "--config", conf, "--seal", "--engine", "numpy")
    status = cli_json("status", "--config", conf, "--json")
    after = status["index"]
    assert after["uploadedFiles"] == 1 and after["uploadedBytes"] > 0
    assert [f["status"] for f in after["localFiles"]] in ([], ["UNSEALED"])
    assert all(q["indexedOffset"] == q["tieredCommit"] for q in status["queues"])
    assert "1 uploaded" in cli("status", "--config", conf)
    off = offload_case.conf_file(
        offload_case.config(offload_case.store(name="other"), "posix", messageIndexEnable="false")
    )
    assert cli_json("status", "--config", off, "--json")["index"]["enabled"] is False


def test_recover_from_the_mirror_then_from_the_segments(offload_case: SidecarCase) -> None:
    store = offload_case.store()
    cfg = offload_case.config(store, "posix")
    conf = offload_case.conf_file(cfg)
    cli("dispatch", "--config", conf, "--once", "--flush")
    original = read_document(cfg)
    assert "exists and is valid" in cli("recover", "--config", conf, code=2)
    shutil.rmtree(cfg.tiered_data_dir)  # the local disk is lost
    out = cli("recover", "--config", conf)
    assert "from the mirror" in out
    recovered = read_document(cfg)
    recovered.topic_metadata_table = original.topic_metadata_table
    assert recovered == original
    # the mirror is lost too: rebuild from the segments themselves
    shutil.rmtree(cfg.tiered_data_dir)
    provider = build_provider(cfg)
    provider.delete(mirror_key_for(cfg.broker_cluster_name, cfg.broker_name))
    assert "--from-backend" in cli("recover", "--config", conf, code=2)
    assert "from the backend" in cli("recover", "--config", conf, "--from-backend")
    rebuilt = read_document(cfg)
    for kind in ("commit_log_file_segment_table", "consume_queue_file_segment_table"):
        old, new = getattr(original, kind), getattr(rebuilt, kind)
        assert {p: {b: s.size for b, s in v.items()} for p, v in new.items()} == {
            p: {b: s.size for b, s in v.items()} for p, v in old.items()
        }
    assert cli_json("dispatch", "--config", conf, "--once", "--flush", "--json")["messages"] == 0
    offload_case.append(store, seed=4, messages=500)
    assert cli_json("dispatch", "--config", conf, "--once", "--flush", "--json")["messages"] == 500
    check_tier(cfg, provider).assert_ok(3500)


def test_a_lost_data_dir_is_restored_from_the_mirror_at_start(offload_case: SidecarCase) -> None:
    """A new data volume (an emptyDir after the pod moved): the next start restores the metadata
    from the backend mirror by itself and goes on where the lost copy stopped."""
    store = offload_case.store()
    cfg = offload_case.config(store, "posix")
    conf = offload_case.conf_file(cfg)
    cli("dispatch", "--config", conf, "--once", "--flush")
    original = read_document(cfg)
    shutil.rmtree(cfg.tiered_data_dir)
    offload_case.append(store, seed=5, messages=300)
    assert cli_json("dispatch", "--config", conf, "--once", "--flush", "--json")["messages"] == 300
    restored = read_document(cfg)
    assert restored.topic_metadata_table.keys() == original.topic_metadata_table.keys()
    check_tier(cfg, build_provider(cfg)).assert_ok(3300)
    # without a mirror nothing is guessed: queues whose objects exist are refused, not re-uploaded
    shutil.rmtree(cfg.tiered_data_dir)
    build_provider(cfg).delete(mirror_key_for(cfg.broker_cluster_name, cfg.broker_name))
    tier = Path(cfg.tiered_store_file_path)

    def sizes() -> dict[Path, int]:
        files = (f for f in tier.rglob("*") if f.is_file() and "config" not in f.parts)
        return {f: f.stat().st_size for f in files}

    before = sizes()
    status = cli_json("dispatch", "--config", conf, "--once", "--flush", "--json")
    assert status["messages"] == 0
    assert "rmq-tiered recover" in cli("status", "--config", conf)
    assert sizes() == before


def _wait(predicate: Callable[[], bool], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_run_follows_the_broker_status_works_meanwhile_and_sigterm_exits_0(
    offload_case: SidecarCase, tmp_path: Path
) -> None:
    store = offload_case.store()
    cfg = offload_case.config(store, "posix")
    conf = offload_case.conf_file(cfg)
    proc = subprocess.Popen(
        [RMQ_TIERED, "run", "--config", conf], stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )
    try:

        def lag() -> int:
            status = cli_json("status", "--config", conf, "--json")
            return int(status["totals"]["lagMessages"]) if status["daemon"]["running"] else -1

        _wait(lambda: lag() == 0)
        assert cli_json("status", "--config", conf, "--json")["daemon"]["pid"] == proc.pid
        second = cli("dispatch", "--config", conf, "--once", code=2)
        assert f"in use by another rmq-tiered (pid {proc.pid})" in second
        offload_case.append(store, seed=8, messages=800)
        _wait(lambda: lag() == 0)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "stopped cleanly" in err
    assert not cli_json("status", "--config", conf, "--json")["daemon"]["running"]
    check_tier(cfg, build_provider(cfg)).assert_ok(3800)


def test_the_running_sidecars_status_is_its_memory_and_the_files_agree(
    offload_case: SidecarCase,
) -> None:
    """``/v1/status`` of ``run`` reads the sidecar's memory (the metadata as it holds it, the
    dispatcher's queue states, the key index's progress) where ``status --json`` parses the
    files they are written from: the same answer once the files have caught up, paged and by
    a topic glob, which picks the topics listed too."""
    store = offload_case.store()  # 2 topics x 3 queues
    cfg = offload_case.config(store, "posix", messageIndexEnable="true")
    conf = offload_case.conf_file(cfg)
    run = RunProcess(conf, offload_case.work / "run")
    run.start()

    def both(**query: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        live = get(run.http, "/v1/status", **query).json()
        args = [f"--{k}={v}" for k, v in query.items() if k != "offset"]
        return live, cli_json("status", "--config", conf, "--json", *args)

    def same(**query: Any) -> bool:
        live, files = both(**query)
        assert live["metadata"].endswith("(as the running sidecar holds it)")
        ignored = ("metadata", "stateUpdatedMs")
        return {k: v for k, v in live.items() if k not in ignored} == {
            k: v for k, v in files.items() if k not in ignored
        }

    try:
        _wait(lambda: same() and both()[0]["totals"]["lagMessages"] == 0)
        live, files = both()
        assert files["metadata"].startswith(str(cfg.tiered_data_dir))  # (written by now)
        assert live["totals"]["queues"] == 6 and live["index"]["lagMessages"] == 0
        assert all(q["lastUploadMs"] > 0 and q["indexedOffset"] >= 0 for q in live["queues"])
        _wait(lambda: same(topic="GenTopic1"))
        one = both(topic="GenTopic1")[0]
        assert {q["topic"] for q in one["queues"]} == {"GenTopic1"}
        assert [t["topic"] for t in one["topics"]] == ["GenTopic1"]
        page = get(run.http, "/v1/status", limit=4, offset=4).json()
        assert page["page"] == {"offset": 4, "next": None} and len(page["queues"]) == 2
        assert page["queues"] == live["queues"][4:]
        # the topics come with the first page alone, not again with every page after it
        assert [t["topic"] for t in live["topics"]] == ["GenTopic0", "GenTopic1"]
        assert page["topics"] == [] and page["topicsSource"] == "on the first page (offset 0)"
    finally:
        run.stop()


def _ro_bind_works(tmp_path: Path) -> bool:
    probe = tmp_path / "ro-probe"
    probe.mkdir()
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    script = f"mount --bind -o ro {probe} {probe} && ! touch {probe}/x 2>/dev/null"
    return (
        subprocess.run(
            [unshare, "-m", "sh", "-c", script], check=False, capture_output=True
        ).returncode
        == 0
    )


def test_the_broker_store_is_read_only_to_the_sidecar(
    offload_case: SidecarCase, tmp_path: Path
) -> None:
    store = offload_case.store()
    cfg = offload_case.config(store, "posix")
    conf = offload_case.conf_file(cfg)
    before = store_fingerprint(store)
    command = f"{RMQ_TIERED} dispatch --config {conf} --once --flush --json"
    if _ro_bind_works(tmp_path):  # the store mounted read-only for the sidecar's process
        args = ["unshare", "-m", "sh", "-c", f"mount --bind -o ro {store} {store} && {command}"]
    else:
        args = ["sh", "-c", command]
    done = subprocess.run(
        args, check=False, capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["messages"] == 3000
    assert store_fingerprint(store) == before  # same bytes, sizes and mtimes
    assert check_tier(cfg, build_provider(cfg)).problems == []


@pytest.mark.parametrize("flag", ["--help"])
def test_help_of_every_command(flag: str) -> None:
    for command in ("run", "dispatch", "status", "recover"):
        assert "--config" in cli(command, flag)
