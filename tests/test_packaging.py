"""The wheel installs exactly one top-level package, ``tiered``, with providers and jobs inside;
``make wheel``'s binary wheel installs and runs without a Rust toolchain."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_directory_is_listed_in_pyproject() -> None:
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    mapping = {"tiered": "tiered", "providers": "tiered.providers", "jobs": "tiered.jobs"}
    found = set()
    for top, name in mapping.items():
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top).parts
            found.add(".".join((name, *rel)))
    assert found == listed


@pytest.mark.slow
def test_wheel_has_one_top_level_package_and_imports(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(dist),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = dist.glob("rocketmq_tiered-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"tiered"}
    assert "tiered/providers/__init__.py" in names
    assert "tiered/jobs/__init__.py" in names
    assert "tiered/py.typed" in names
    assert "tiered/_kernel.abi3.so" in names  # the compiled kernel (abi3: any CPython >= 3.11)

    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env)
    py = env / "bin" / "python"
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
    )
    # dependencies come from this test run's environment; its .pth files are not processed,
    # so the editable checkout cannot shadow the wheel
    site = Path(sysconfig.get_paths()["purelib"])
    fresh_site = next((env / "lib").glob("python3*/site-packages"))
    (fresh_site / "deps.pth").write_text(f"{site}\n")
    probe = (
        "import tiered, tiered.providers, tiered.jobs, tiered.broker.commitlog;"
        "from tiered.process.native import kernel; kernel();"
        "print(tiered.__file__)"
    )
    out = subprocess.run(
        [str(py), "-c", probe], check=True, capture_output=True, text=True, cwd=tmp_path
    ).stdout
    assert out.strip().startswith(str(fresh_site))
    version = subprocess.run(
        [str(env / "bin" / "rmq-tiered"), "--version"],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    ).stdout
    assert "0.1.0" in version


# Written into the fresh venv's site-packages with a .pth that imports it: at the exit of every
# Python process of the venv it notes where tiered._kernel was loaded from, if it was.
KERNEL_ORIGIN = """\
import atexit
import os
import sys


def _note() -> None:
    kernel = sys.modules.get("tiered._kernel")
    if kernel is not None:
        with open(os.environ["KERNEL_ORIGIN_LOG"], "a") as log:
            log.write(f"{kernel.__file__}\\n")


if "KERNEL_ORIGIN_LOG" in os.environ:
    atexit.register(_note)
"""


@pytest.mark.slow
@pytest.mark.spark
def test_make_wheel_installs_and_runs_the_demo_without_rust(tmp_path: Path) -> None:
    """``make wheel``'s wheel (cp311-abi3, tagged manylinux by auditwheel) into a fresh venv with
    plain pip, no cargo or rustc on the PATH; ``rmq-tiered demo`` runs on its compiled kernel."""
    dist = tmp_path / "dist"
    built = subprocess.run(
        ["make", "-s", "wheel", f"DIST={dist}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = dist.glob("rocketmq_tiered-*.whl")
    _, version, python, abi, platform = wheel.name.removesuffix(".whl").split("-")
    assert (version, python, abi) == ("0.1.0", "cp311", "abi3")
    assert platform.startswith("manylinux_") and platform.endswith("_x86_64"), platform

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    path = os.pathsep.join((str(env_dir / "bin"), "/usr/bin"))
    assert shutil.which("cargo", path=path) is None
    assert shutil.which("rustc", path=path) is None
    assert shutil.which("java", path=path), "the demo's local Spark session needs java"
    # nothing of this test run's Python, Spark or Rust settings: Spark's Python workers are the
    # venv's python3, found on the PATH
    drop = ("PYTHON", "VIRTUAL_ENV", "PYSPARK", "SPARK", "CARGO", "RUSTUP", "PYO3")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env |= {"PATH": path, "COLUMNS": "200"}
    installed = subprocess.run(
        [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", f"{wheel}[spark]"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    (site,) = (env_dir / "lib").glob("python3*/site-packages")
    assert (site / "tiered" / "_kernel.abi3.so").is_file()
    (site / "kernel_origin.py").write_text(KERNEL_ORIGIN)
    (site / "kernel_origin.pth").write_text("import kernel_origin\n")

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    log = tmp_path / "kernel-origin.log"
    demo = subprocess.run(
        [
            str(env_dir / "bin" / "rmq-tiered"),
            "demo",
            "--workdir",
            str(tmp_path / "demo"),
            "--messages",
            "2000",
        ],
        env={**env, "KERNEL_ORIGIN_LOG": str(log)},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    text = " ".join(demo.stdout.split())
    assert "offloaded 2000 messages" in text
    assert "fetched 3 cold messages" in text
    assert "1 hit(s) before and 1 after compaction" in text
    for step in ("dispatch", "status", "fetch", "query", "compact-index", "export"):
        assert f"$ rmq-tiered {step}" in text
    origins = log.read_text().splitlines()
    assert origins, "the demo never loaded tiered._kernel"
    assert set(origins) == {str(site / "tiered" / "_kernel.abi3.so")}
