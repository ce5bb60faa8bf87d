"""``make demo`` runs ``rmq-tiered demo``: the embedded end-to-end job must work."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from tiered.cli import main


@pytest.mark.spark
@pytest.mark.slow
def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    r = CliRunner().invoke(
        main, ["demo", "--workdir", str(tmp_path), "--messages", "2000"], catch_exceptions=False
    )
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())  # rich wraps long lines at the terminal width
    assert "offloaded 2000 messages" in text
    assert "fetched 3 cold messages" in text
    assert "1 hit(s) before and 1 after compaction" in text
    assert re.search(r"exported [1-9]\d* region=eu messages to Parquet", text)
    for step in ("dispatch", "status", "fetch", "query", "compact-index", "export"):
        assert f"$ rmq-tiered {step}" in text
    # the tier holds the Java layout: cluster dir, broker, topic, queue, COMMIT_LOG, segment name
    segments = sorted((tmp_path / "tier").glob("212d6b50_DefaultCluster/broker-a/*/*/COMMIT_LOG/*"))
    assert len(segments) == 8
    assert all(p.name == "cfcd208400000000000000000000" for p in segments)
