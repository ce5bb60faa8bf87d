"""The SQL guide's example runs as a new user runs it: pasted into a fresh Python in the repository
root, with a default Spark session -- so the source must find its worker Python, read without
pushdown when the session has it off, and import from the source tree as installed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pyspark.sql.datasource import DataSourceReader
from pyspark.sql.types import StringType
from pyspark.sql.types import StructField
from pyspark.sql.types import StructType
from tiered.jobs.tier_source import FilteringTierReader
from tiered.jobs.tier_source import TierReader
from tiered.jobs.tier_source import TierSource
from tiered.jobs.tier_source import check_worker_python

from tiered.errors import MissingDependencyError
from tiered.testing.sql_tier import SqlTier

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "sql.md"
HEADING = "SQL over the tier"
GUIDE_CONFIG = "/etc/rocketmq-tiered/tiered.conf"
"""The one thing of the example a test replaces: the path of the tier's configuration."""

_HEADING = re.compile(r"(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"(\s*)(`{3,})\s*([^`\s]*)")


def code_block(path: Path, heading: str, *, lang: str = "python", index: int = 0) -> str:
    """The ``index``-th fenced ``lang`` block (verbatim) of the Markdown section under ``heading``,
    up to the next heading of the same or a higher level: what a reader of that page copies.

    Raises:
        LookupError: no such heading, or fewer blocks under it.
    """
    level = 0  # the heading's, once found
    fence: tuple[str, str, bool] | None = None  # an open fence: indent, backticks, wanted
    body: list[str] = []
    blocks: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        if fence is not None:
            indent, ticks, wanted = fence
            if line.strip() == ticks:
                if wanted:
                    blocks.append("".join(body))
                fence = None
            else:
                body.append(line.removeprefix(indent))
        elif opening := _FENCE.fullmatch(line.rstrip("\n")):
            fence = (opening.group(1), opening.group(2), level > 0 and opening.group(3) == lang)
            body = []
        elif title := _HEADING.fullmatch(line.rstrip("\n")):
            depth = len(title.group(1))
            if level and depth <= level:
                break
            if not level and title.group(2) == heading:
                level = depth
    if not level:
        raise LookupError(f"{path} has no heading {heading!r}")
    if index >= len(blocks):
        raise LookupError(f"{path}, {heading!r}: {len(blocks)} {lang} block(s), no #{index}")
    return blocks[index]


def new_user_env(**extra: str) -> dict[str, str]:
    """This environment without what the tests' own Spark sessions set (``PYSPARK_*``,
    ``SPARK_*``, ``PYTHON*``: a ``PYTHONSAFEPATH`` would hide the source tree), bound to
    127.0.0.1 as every Spark of the tests is."""
    drop = ("PYSPARK_", "SPARK_", "PYTHON")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    return {**env, "SPARK_LOCAL_IP": "127.0.0.1", **extra}


@pytest.fixture
def python3_without_the_package(tmp_path: Path) -> str:
    """A PATH whose ``python3`` is a plain Python without rocketmq-tiered (nor this checkout)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python3 = bin_dir / "python3"
    plain = Path(sys.base_prefix) / "bin" / "python{}.{}".format(*sys.version_info)  # no venv
    python3.write_text(f'#!/bin/sh\nexec {plain} -I "$@"\n')
    python3.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("pyspark_python", [True, False], ids=["PYSPARK_PYTHON", "nothing-set"])
def test_the_sql_guide_example_runs_as_written(
    posix_tier: SqlTier, python3_without_the_package: str, pyspark_python: bool
) -> None:
    """As the guide says (``PYSPARK_PYTHON`` set), and as a user who skipped that runs it: the
    workers would start PATH's ``python3``, and registering switches them to this Python."""
    code = code_block(GUIDE, HEADING)
    assert code.count(GUIDE_CONFIG) == 1, code
    code = code.replace(GUIDE_CONFIG, str(posix_tier.conf))
    env = new_user_env(PATH=python3_without_the_package)
    if pyspark_python:
        env["PYSPARK_PYTHON"] = sys.executable
    done = subprocess.run(
        [sys.executable, "-"],  # pasted into a Python started in the repository root
        input=code, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-6000:]
    shown = {t: int(n) for t, n in re.findall(r"(?m)^\|\s*(\S+)\|\s*(\d+)\|$", done.stdout)}
    assert shown == Counter(topic for topic, _, _ in posix_tier.fetched), done.stdout
    switched = "switched this session's workers to " + sys.executable
    assert (switched in done.stderr) is not pyspark_python, done.stderr[-6000:]


def test_the_source_tree_imports_as_installed() -> None:
    """A Python that puts the repository root first on ``sys.path`` (``-c``; ``-m``, as Spark
    starts its workers) imports the checkout's ``tiered/``, whose ``providers`` and ``jobs`` are
    found beside it, as installed; no other folder of the checkout is a ``tiered`` package."""
    probe = """
import importlib.util
import tiered._kernel, tiered.jobs.tier_scan, tiered.providers.testing
print(tiered._kernel.__file__, tiered.jobs.__file__, tiered.providers.testing.__file__)
print([n for n in ("tests", "helm", "docs", "build") if importlib.util.find_spec("tiered." + n)])
print(importlib.util.find_spec("tiered.config").origin)
"""
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT, env=new_user_env(), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    files, others, config = done.stdout.splitlines()
    assert [Path(f) for f in files.split()] == [
        ROOT / "tiered" / Path(files.split()[0]).name,
        ROOT / "jobs" / "__init__.py",
        ROOT / "providers" / "testing" / "__init__.py",
    ]
    assert others == "[]" and Path(config).is_relative_to(ROOT / "tiered")  # not config/


@pytest.fixture
def fake_python(tmp_path: Path) -> str:
    """An executable that fails as a Python without rocketmq-tiered fails its import."""
    path = tmp_path / "python3"
    path.write_text("#!/bin/sh\necho \"No module named 'tiered'\" >&2\nexit 1\n")
    path.chmod(0o755)
    return str(path)


def test_a_worker_python_without_the_package_is_replaced_locally_or_named(
    fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    fine = SimpleNamespace(pythonExec=sys.executable, master="local[2]")
    check_worker_python(fine)
    assert fine.pythonExec == sys.executable

    local = SimpleNamespace(pythonExec=fake_python, master="local[*]")
    with pytest.warns(RuntimeWarning, match=f"would run '{fake_python}'.*PYSPARK_PYTHON="):
        check_worker_python(local)
    assert local.pythonExec == sys.executable

    cluster = SimpleNamespace(pythonExec=fake_python, master="spark://10.0.0.1:7077")
    named = rf"run '{fake_python}'.*PYSPARK_PYTHON={re.escape(sys.executable)}.*spark\.pyspark"
    with pytest.raises(MissingDependencyError, match=named):
        check_worker_python(cluster)
    monkeypatch.setenv("PYSPARK_PYTHON", fake_python)  # the user's choice: not overridden
    chosen = SimpleNamespace(pythonExec=fake_python, master="local[2]")
    with pytest.raises(MissingDependencyError, match="PYSPARK_PYTHON="):
        check_worker_python(chosen)
    missing = SimpleNamespace(pythonExec="no-such-python3", master="yarn")
    with pytest.raises(MissingDependencyError, match="'no-such-python3'"):
        check_worker_python(missing)


def _reader_from(module: str, source: TierSource, *, as_main: bool = False) -> Any:
    """``source.reader()`` called from code of ``module`` (run as ``__main__``, or imported)."""
    schema = StructType([StructField("topic", StringType())])
    scope: dict[str, Any] = {"__name__": module, "source": source, "schema": schema}
    if as_main:
        scope |= {"__name__": "__main__", "__spec__": ModuleSpec(module, None)}
    exec("reader = source.reader(schema)", scope)
    return scope["reader"]


def test_only_spark_s_pushdown_worker_gets_a_reader_that_pushes(posix_tier: SqlTier) -> None:
    """PySpark's planning worker refuses a reader with ``pushFilters`` when the session has
    pushdown off; its pushdown worker, which runs only when it is on, gets one."""
    push = "pyspark.sql.worker.data_source_pushdown_filters"
    plan = "pyspark.sql.worker.plan_data_source_read"
    source = TierSource(posix_tier.options)
    for reader in (_reader_from(push, source), _reader_from(push, source, as_main=True)):
        assert type(reader) is FilteringTierReader
    for reader in (
        _reader_from(plan, source),
        _reader_from(plan, source, as_main=True),
        _reader_from(push, TierSource({**posix_tier.options, "pushdown": "false"})),
    ):
        assert type(reader) is TierReader
        # PySpark's own test (plan_data_source_read.py) for a reader that implements pushdown
        assert getattr(reader.pushFilters, "__func__", None) is DataSourceReader.pushFilters
