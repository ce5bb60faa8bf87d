"""What starting ``rmq-tiered`` costs the broker's node: no BLAS threads, no unused imports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tiered.broker.generator import GenSpec
from tiered.broker.generator import generate_store
from tiered.cli import UNSERVED


def _run(code: str, **env: str) -> list[str]:
    blas = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")  # OpenBLAS reads all
    environ = {k: v for k, v in os.environ.items() if k not in blas}
    environ.update(env)
    done = subprocess.run(
        [sys.executable, "-P", "-c", code], env=environ, capture_output=True, text=True, check=True
    )
    return done.stdout.split()


@pytest.mark.skipif(os.cpu_count() == 1, reason="OpenBLAS starts no thread on one core")
def test_numpy_starts_no_blas_thread_under_the_command_line() -> None:
    threads = "import os, numpy; print(len(os.listdir('/proc/self/task')))"
    assert int(_run(threads)[0]) > 1  # what the setting saves: one OpenBLAS thread per core
    code = (
        "import os, tiered.cli, numpy; "
        "print(os.environ['OPENBLAS_NUM_THREADS'], len(os.listdir('/proc/self/task')))"
    )
    assert _run(code) == ["1", "1"]


def test_an_operators_blas_setting_is_kept() -> None:
    code = "import os, tiered.cli; print(os.environ['OPENBLAS_NUM_THREADS'])"
    assert _run(code, OPENBLAS_NUM_THREADS="2") == ["2"]


def test_dispatch_does_not_import_the_http_app_or_the_object_store_clients() -> None:
    code = (
        "import sys; from tiered.cli import main; main.get_command(None, 'dispatch'); "
        "print(sorted(m for m in ('fastapi', 'uvicorn', 'boto3', 's3fs', 'pyspark') "
        "if m in sys.modules) or ['none'])"
    )
    assert _run(code) == ["['none']"]


def test_status_loads_neither_the_offload_machinery_nor_rich_for_json() -> None:
    """``status`` only reads: no dispatcher, sidecar or index service (the data-dir lock's holder
    is found through :mod:`tiered.core.data_dir_lock`), and rich only for the table."""
    code = (
        "import sys; from tiered.cli import main; main.get_command(None, 'status'); "
        "print(sorted(m for m in ('tiered.core.sidecar', 'tiered.offload.dispatcher', "
        "'tiered.index.service', 'rich', 'fastapi', 'boto3', 'pyspark') "
        "if m in sys.modules) or ['none'])"
    )
    assert _run(code) == ["['none']"]


def test_the_console_script_loads_its_command_without_the_collector_then_turns_it_on() -> None:
    code = (
        "import gc, sys; from tiered.cli import entry; "
        "sys.argv = ['rmq-tiered', 'dispatch', '--help']\n"
        "try:\n    entry()\nexcept SystemExit:\n    pass\n"
        "print('GC', gc.isenabled(), gc.get_freeze_count() > 1000, 'numpy' in sys.modules)"
    )
    # on for the command's work (a long run must collect its cycles), what loaded frozen
    out = _run(code)
    assert out[out.index("GC") :] == ["GC", "True", "True", "True"]


def _entry(command: str, **env: str) -> list[str]:
    """Run ``rmq-tiered COMMAND --help`` through the console script's ``entry`` in a fresh
    process: what the command's lookup left behind."""
    code = (
        "import os, sys; from tiered.cli import entry; "
        f"sys.argv = ['rmq-tiered', {command!r}, '--help']\n"
        "try:\n    entry()\nexcept SystemExit:\n    pass\n"
        "from tiered import metrics\n"
        "print('OUT', metrics.discarded(), 'pythonjsonlogger' in sys.modules, "
        "os.environ['PYDANTIC_DISABLE_PLUGINS'], 'importlib.metadata' in sys.modules)"
    )
    out = _run(code, **env)
    return out[out.index("OUT") + 1 :]


@pytest.mark.parametrize("command", sorted(UNSERVED))
def test_a_one_shot_command_run_by_the_console_script_records_no_metrics(command: str) -> None:
    # nothing serves /metrics in a one-shot command's process; the sidecar uses no pydantic
    # plugin, so pydantic's plugin loader (and the importlib.metadata it imports) is not loaded
    out = _entry(command)
    assert out[0] == "True"
    if command == "dispatch":
        assert out == ["True", "False", "__all__", "False"]


def test_a_provider_outside_the_sidecar_labels_one_series_for_the_broker() -> None:
    """Until ``tieredMetricsDetail`` is set (``run`` and ``serve`` set it), the provider families
    label every queue's objects as the broker's (the key's default), not one series each."""
    code = (
        "from tiered.providers.memory import MemoryProvider\n"
        "from tiered.providers.wrappers import MetricsProvider\n"
        "from tiered.providers.layout import FileType, segment_key\n"
        "from tiered import metrics\n"
        "p = MetricsProvider(MemoryProvider())\n"
        "for q in range(3):\n"
        "    p.append(segment_key('c', 'b', 'T', q, FileType.COMMIT_LOG, 0), b'x', 0)\n"
        "paths = {s.labels['path'] for m in metrics.REGISTRY.collect()\n"
        "         if m.name.endswith('provider_upload_bytes') for s in m.samples}\n"
        "print(sorted(paths))"
    )
    assert _run(code) == ["['']"]


def test_run_records_its_metrics_and_an_operators_plugin_setting_is_kept() -> None:
    out = _entry("run", PYDANTIC_DISABLE_PLUGINS="logfire")
    assert out == ["False", "False", "logfire", "True"]  # pydantic's own loader: it looked


def test_dispatch_called_in_another_program_records_its_metrics() -> None:
    code = (
        "import os; from click.testing import CliRunner; from tiered.cli import main; "
        "CliRunner().invoke(main, ['dispatch', '--help'], catch_exceptions=False); "
        "from tiered import metrics; "
        "print(metrics.discarded(), os.environ.get('PYDANTIC_DISABLE_PLUGINS', 'unset'))"
    )
    assert _run(code) == ["False", "unset"]


@pytest.mark.parametrize("index", [False, True])
def test_a_one_shot_dispatch_loads_the_key_index_only_when_it_is_on(
    tmp_path: Path, index: bool
) -> None:
    """Nor expiry (the daemon's), the fault-injection wrappers, or, with no encryption-at-rest
    key set, the s3 provider's encryption module; nor pydantic (the HTTP app's, a third of a
    one-shot command's instructions): the configuration and the metadata records are not
    pydantic models."""
    store = tmp_path / "store"
    generate_store(store, GenSpec(seed=1, queues=2, messages=50))
    conf = tmp_path / "tiered.conf"
    conf.write_text(
        f"storePathRootDir={store}\nbrokerName=broker-a\ntieredDataDir={tmp_path / 'data'}\n"
        f"tieredBackendServiceProvider=posix\ntieredStoreFilePath={tmp_path / 'tier'}\n"
        f"messageIndexEnable={str(index).lower()}\n",
        encoding="utf-8",
    )
    code = (
        "import sys; from tiered.cli import entry; "
        f"sys.argv = ['rmq-tiered', 'dispatch', '--config', {str(conf)!r}, '--once', '--json']\n"
        "try:\n    entry()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "print('OUT', *(m in sys.modules for m in ('tiered.index.service', "
        "'tiered.offload.expiry', 'tiered.providers.faults', 'tiered.providers.s3_encryption')),"
        " sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core')))"
    )
    out = _run(code)
    # (the one pydantic name: entry()'s stand-in for its plugin loader, a bare module)
    loaded = "['pydantic.plugin._loader']"
    assert out[out.index("OUT") + 1 :] == [str(index), "False", "False", "False", loaded]
