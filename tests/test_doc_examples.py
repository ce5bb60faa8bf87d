"""The examples of the README and the docs are right as written: every properties block loads as
a configuration (java.util.Properties has no trailing comments, so ``key=value  # note`` would
put the note into the value), every YAML and JSON block parses, and every ``rmq-tiered`` command
names a command and options that exist. (The SQL guide's Python example is run for real in
tests/sql/test_examples.py.)"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import click
import pytest
import yaml

from tiered.cli import main
from tiered.config import load_config
from tiered.config import parse_properties

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"(?ms)^```(\w*)\n(.*?)^```")


def blocks(lang: str | None = None) -> list[tuple[str, str]]:
    """``(where, text)`` of every fenced block (of ``lang``, or any) in the README and docs."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            if lang is None or match.group(1) == lang:
                line = text.count("\n", 0, match.start()) + 1
                found.append((f"{page.relative_to(ROOT)}:{line}", match.group(2)))
    return found


def ids(found: list[tuple[str, str]]) -> list[str]:
    return [where for where, _ in found]


@pytest.mark.parametrize(("where", "text"), blocks("properties"), ids=ids(blocks("properties")))
def test_properties_blocks_load_as_written(where: str, text: str, tmp_path: Path) -> None:
    for key, value in parse_properties(text, where).items():
        assert "#" not in value, f"{where}: {key}'s value has a trailing comment: {value!r}"
    conf = tmp_path / "example.conf"
    conf.write_text(text, encoding="utf-8")
    load_config([conf], env={})


@pytest.mark.parametrize(("where", "text"), blocks("yaml"), ids=ids(blocks("yaml")))
def test_yaml_blocks_parse(where: str, text: str) -> None:
    assert yaml.safe_load(text), where


@pytest.mark.parametrize(("where", "text"), blocks("json"), ids=ids(blocks("json")))
def test_json_blocks_parse(where: str, text: str) -> None:
    for line in [text] if text.lstrip().startswith("{\n") else text.splitlines():
        json.loads(line)


def command_lines() -> list[tuple[str, list[str]]]:
    """Every ``rmq-tiered …`` line of a code block or inline code span, as words, with
    ``[optional]`` parts kept."""
    lines = [(w, line) for w, text in blocks() for line in text.replace("\\\n", " ").splitlines()]
    for page in PAGES:
        spans = re.findall(r"`(rmq-tiered [^`]+)`", page.read_text(encoding="utf-8"))
        lines.extend((str(page.relative_to(ROOT)), span.replace("\\|", "|")) for span in spans)
    found = []
    for where, raw in lines:
        line = raw.strip().removeprefix("$ ")
        if line.startswith("rmq-tiered "):
            words = shlex.split(line.replace("|", " "), comments=True)
            found.append((where, [w.strip("[]") for w in words[1:]]))
    return found


def test_every_documented_command_and_option_exists() -> None:
    found = command_lines()
    assert len(found) > 10
    ctx = click.Context(main)
    for where, words in found:
        command: click.Command | None = main
        path = ["rmq-tiered"]
        while isinstance(command, click.Group) and words and not words[0].startswith("-"):
            command = command.get_command(ctx, words[0])
            assert command is not None, f"{where}: no command {' '.join([*path, words[0]])}"
            path.append(words.pop(0))
        assert command is not None
        options = {o for p in command.get_params(ctx) for o in (*p.opts, *p.secondary_opts)}
        for word in words:
            name = word.split("=", 1)[0]
            if re.fullmatch(r"--?[a-z][\w-]*", name):
                assert name in options, f"{where}: {' '.join(path)} has no option {name}"
