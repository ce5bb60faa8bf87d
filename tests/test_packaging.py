"""The wheel installs exactly one top-level package, ``tiered``, with providers and jobs inside."""

from __future__ import annotations

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
        "from tiered.native import kernel; kernel();"
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
