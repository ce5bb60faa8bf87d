"""The README stays true to the code: every configuration key with its documented default and unit,
every command, every HTTP path. (The metrics table is checked against a live scrape in
tests/read/test_metrics_catalogue.py.)"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from typing import cast

import click
import pytest

from tiered.cli import main
from tiered.config import TieredConfig
from tiered.http.app import create_app
from tiered.http.key_routes import keys_router

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
EXAMPLE_CONF = ROOT / "config" / "tiered.conf"


def section(title: str) -> str:
    """The text of the ``## title`` section (up to the next ``## ``)."""
    match = re.search(rf"(?ms)^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README)
    assert match, f"README has no '## {title}' section"
    return match.group(1)


def documented_keys() -> dict[str, tuple[str, str]]:
    """``key -> (default, unit)`` as config/tiered.conf documents them."""
    out: dict[str, tuple[str, str]] = {}
    comment: list[str] = []
    for line in EXAMPLE_CONF.read_text(encoding="utf-8").splitlines():
        match = re.fullmatch(r"#?([a-z][A-Za-z0-9]*)=.*", line)
        if match and comment:
            text = " ".join(c[1:].strip() for c in comment)
            found = re.search(r"Default: (.+?)\. Unit: (.+?)\.$", text)
            assert found, f"{match.group(1)}: no 'Default: … Unit: ….' line in tiered.conf"
            out[match.group(1)] = (found.group(1), found.group(2))
            comment = []
        elif line.startswith("#") and line.strip() != "#" and not line.startswith("# ===="):
            comment.append(line)
        else:
            comment = []
    return out


def table_rows(text: str) -> dict[str, list[str]]:
    """Markdown table rows whose first cell is a backticked name: ``name -> other cells``."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        match = re.fullmatch(r"\| `([^`]+)`[^|]*\|(.*)\|", line)
        if match:
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", match.group(2))]
            rows[match.group(1)] = cells
    return rows


def test_configuration_table_lists_every_key_with_the_documented_default_and_unit() -> None:
    rows = table_rows(section("Configuration"))
    documented = documented_keys()
    assert sorted(documented) == TieredConfig.model_keys()
    assert sorted(rows) == sorted(documented), "README config table and tiered.conf differ"
    for key, (default, unit) in documented.items():
        assert rows[key][:2] == [default, unit], f"{key}: README says {rows[key][:2]}"
        assert rows[key][2], f"{key}: no meaning in the README"


def test_command_table_lists_every_command() -> None:
    text = section("The command line")
    for name in main.list_commands(click.Context(main)):
        assert f"`rmq-tiered {name}" in text, f"README command table lacks {name}"


@pytest.mark.parametrize("title", ["Quick start", "Architecture", "Operations", "Benchmarks"])
def test_required_sections_exist(title: str) -> None:
    assert section(title).strip()


def test_quick_start_is_the_two_commands() -> None:
    first = README.index("## ")
    assert README[first:].startswith("## Quick start")
    block = re.search(r"```sh\n(.*?)```", section("Quick start"), re.S)
    assert block
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert commands == ["make demo", "make test"]


def test_every_http_path_is_documented() -> None:
    store = cast(Any, object())  # building the schema calls no route

    def checks() -> dict[str, str]:
        return {}

    app = create_app(
        store,
        status=lambda query: {},
        ready=checks,
        alive=checks,
        extra_routers=[keys_router(lambda: None)],
    )
    text = section("Cold reads: HTTP API, `fetch`, `explain`")
    for path in app.openapi()["paths"]:
        assert path in text, f"{path} is not in the README's HTTP API table"
