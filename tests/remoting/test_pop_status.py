"""``status`` (the CLI table, ``--json`` and so ``/v1/status``) reports the POP dead letters the
replay port persists in ``config/replayPopState.json``, per group and topic."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from tiered.broker.generator import generate_store
from tiered.cli import main
from tiered.core.status_report import StatusQuery
from tiered.core.status_report import collect_status
from tiered.remoting.pop_state import PopState
from tiered.testing.sample_tier import rolling_spec
from tiered.testing.sample_tier import sample_config
from tiered.testing.sample_tier import write_conf


def _dead_letter(state: PopState, key: tuple[str, str, int], offsets: list[int]) -> None:
    """Deliver ``offsets`` once, never ack them, and pop again after their lease ran out with
    no redelivery allowed: they are dead-lettered."""
    claim = state.claim(key, start=offsets[0], now=0, invisible_ms=10, max_count=len(offsets),
                        max_offset=100, max_redeliveries=0)  # fmt: skip
    assert claim is not None
    state.delivered(claim, offsets, offsets[-1] + 1)
    state.claim(key, start=0, now=20, invisible_ms=10, max_count=0, max_offset=100,
                max_redeliveries=0)  # fmt: skip


def test_status_reports_pop_dead_letters_per_group(tmp_path: Path) -> None:
    spec = rolling_spec(seed=5, queues=1, messages=10)
    generate_store(tmp_path / "store", spec)
    cfg = sample_config(tmp_path / "store", tmp_path, spec, "posix")
    assert collect_status(cfg).to_json()["popDeadLetters"] == []  # no state file: none
    state = PopState(cfg.tiered_data_dir / "config")
    _dead_letter(state, ("g1", "TopicA", 0), [0, 1, 2])
    _dead_letter(state, ("g1", "TopicB", 1), [5])
    _dead_letter(state, ("g2", "TopicA", 3), [7, 8])
    assert state.dead_letter_total() == 6
    assert state.flush()

    report = collect_status(cfg).to_json()
    assert report["popDeadLetters"] == [
        {"group": "g1", "topic": "TopicA", "count": 3, "latest": [[0, 0], [0, 1], [0, 2]]},
        {"group": "g1", "topic": "TopicB", "count": 1, "latest": [[1, 5]]},
        {"group": "g2", "topic": "TopicA", "count": 2, "latest": [[3, 7], [3, 8]]},
    ]
    assert report["popStateError"] == ""
    only_b = collect_status(cfg, StatusQuery(topic="TopicB")).pop_dead_letters
    assert [(d.group, d.topic) for d in only_b] == [("g1", "TopicB")]
    readable = collect_status(cfg, StatusQuery(readable=lambda t: t == "TopicA"))
    assert [(d.group, d.topic) for d in readable.pop_dead_letters] == [
        ("g1", "TopicA"), ("g2", "TopicA"),
    ]  # fmt: skip

    conf = write_conf(cfg, tmp_path / "sidecar.conf")
    runner = CliRunner()
    out = runner.invoke(main, ["status", "-c", str(conf), "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["popDeadLetters"] == report["popDeadLetters"]
    out = runner.invoke(main, ["status", "-c", str(conf)])
    assert out.exit_code == 0, out.output
    assert "POP dead letters" in out.output
    assert "group g1 topic TopicA: 3 (latest queue/offset 0/0 0/1 0/2)" in out.output
    assert "group g2 topic TopicA: 2 (latest queue/offset 3/7 3/8)" in out.output
