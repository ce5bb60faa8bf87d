"""The README and the docs site stay true to the code: the README is short and starts with the two
commands, the generated reference pages are what the code makes today, and the site builds with
``mkdocs build --strict`` (a broken link, a missing anchor or a page left out of the nav fails)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from tiered.cli import main
from tiered.config import TieredConfig

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = ROOT / "docs"


def section(title: str) -> str:
    """The text of the README's ``## title`` section (up to the next ``## ``)."""
    match = re.search(rf"(?ms)^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README)
    assert match, f"README has no '## {title}' section"
    return match.group(1)


def test_readme_is_short() -> None:
    lines = README.count("\n")
    assert lines <= 400, f"README.md has {lines} lines; move the detail into docs/"
    assert max(len(line) for line in README.splitlines() if not line.startswith("|")) <= 120


def test_quick_start_is_the_two_commands() -> None:
    first = README.index("## ")
    assert README[first:].startswith("## Quick start")
    block = re.search(r"```sh\n(.*?)```", section("Quick start"), re.S)
    assert block
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert commands == ["make demo", "make test"]


def test_command_table_lists_every_command() -> None:
    text = section("Commands")
    for name in main.list_commands(click.Context(main)):
        assert f"`rmq-tiered {name}" in text, f"README command table lacks {name}"


def test_headline_benchmark_table_has_at_most_ten_rows_each_reproducible() -> None:
    rows = [line for line in section("Benchmarks").splitlines() if line.startswith("| ")]
    header, *body = rows
    assert header.split("|")[1:-1][-1].strip() == "reproduce"
    assert 1 <= len(body) <= 10
    for row in body:
        assert "tests/bench/bench_" in row.split("|")[-2], row


def test_readme_links_point_at_files_that_exist() -> None:
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README links to missing {target}"


def test_reference_pages_are_what_the_code_generates() -> None:
    # a fresh process, as `make docs-reference` runs it: click caches a command's help option
    # from the first context that asks, so a test that invoked a subcommand alone changes it
    done = subprocess.run(
        [sys.executable, str(DOCS / "gen_reference.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr + "run `make docs-reference` and commit the pages"


def test_configuration_reference_has_every_key_of_the_model() -> None:
    page = (DOCS / "reference" / "configuration.md").read_text(encoding="utf-8")
    listed = re.findall(r"(?m)^\| `([A-Za-z0-9]+)` \|", page)
    assert sorted(listed) == TieredConfig.model_keys()
    assert f"All {len(TieredConfig.model_keys())} keys" in page


def test_http_reference_names_every_path() -> None:
    page = (DOCS / "reference" / "http-api.md").read_text(encoding="utf-8")
    for path in ("/v1/topics/{topic}/queues/{queueId}/messages", "/v1/status", "/metrics"):
        assert f" {path}`" in page, path


def test_site_builds_strict(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="mkdocs is in the dev extra")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "reference" / "configuration" / "index.html").exists()
