"""The alert rules (config/prometheus-rules.yml, shipped by the chart too) under ``promtool``:
they parse, each alert fires on its input series and stays silent on the others
(tests/ops/rules_test.yml), the chart's copy is the same file, and the metrics guide has a
runbook line for every alert."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "config" / "prometheus-rules.yml"
CHART_RULES = ROOT / "helm" / "rocketmq-tiered" / "files" / "prometheus-rules.yml"
UNIT_TESTS = Path(__file__).parent / "rules_test.yml"


def promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    assert tool, "promtool is missing: `make test` installs Debian's prometheus package"
    return subprocess.run(
        [tool, *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )


def alerts() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def test_promtool_checks_the_rules() -> None:
    done = promtool("check", "rules", RULES)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in done.stdout


def test_every_alert_fires_when_it_should_and_only_then() -> None:
    done = promtool("test", "rules", UNIT_TESTS)
    assert done.returncode == 0, done.stdout + done.stderr
    cases = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    checks = [c for t in cases for c in t["alert_rule_test"]]
    for alert in alerts():
        mine = [c for c in checks if c["alertname"] == alert["alert"]]
        assert any(c["exp_alerts"] for c in mine), f"{alert['alert']}: no case where it fires"
        assert any(not c["exp_alerts"] for c in mine), f"{alert['alert']}: no silent case"


@pytest.mark.parametrize("alert", [a["alert"] for a in alerts()])
def test_each_alert_has_for_severity_summary_and_a_runbook_line(alert: str) -> None:
    (rule,) = [a for a in alerts() if a["alert"] == alert]
    assert rule.get("for") and rule["labels"]["severity"] in {"warning", "critical"}
    assert rule["annotations"]["summary"] and rule["annotations"]["runbook"]
    guide = (ROOT / "docs" / "guides" / "metrics.md").read_text()
    section = guide.split("## Alerts and runbook", 1)[1].split("\n## ", 1)[0]
    assert f"`{alert}`" in section, f"docs/guides/metrics.md 'Alerts and runbook' lacks {alert}"


def test_the_chart_ships_the_same_rules() -> None:
    assert CHART_RULES.read_bytes() == RULES.read_bytes()
