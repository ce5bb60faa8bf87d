"""A real Spark standalone cluster for tests: a master and one worker (one core, 1 GiB) started
from the ``pyspark`` package on 127.0.0.1, each waited for by its log line with a deadline."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BIN = Path(sys.executable).parent


def spark_env() -> dict[str, str]:
    """The environment of a Spark process of the tests: this venv's Python on 127.0.0.1, and
    workers that do not put their working directory first on ``sys.path``."""
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYTHONSAFEPATH": "1",
    }
    env.pop("PYTHONPATH", None)
    return env


def wait_for_line(
    log: Path, pattern: str, proc: subprocess.Popen[bytes], seconds: float = 90
) -> str:
    """The first group (or match) of ``pattern`` once ``log`` holds it.

    Raises:
        AssertionError: the process ended, or the deadline passed (with the log's tail).
    """
    deadline = time.monotonic() + seconds
    while not (m := re.search(pattern, log.read_text(errors="replace"))):
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, f"{pattern!r} not in {log}"
        time.sleep(0.2)
    return m.group(1) if m.groups() else m.group(0)


@contextmanager
def running_spark_cluster(work: Path) -> Iterator[str]:
    """``spark://127.0.0.1:PORT`` of a master with one registered worker; both stopped after."""
    env = {**spark_env(), "SPARK_LOG_DIR": str(work), "SPARK_WORKER_DIR": str(work / "worker")}
    master_log, worker_log = work / "master.log", work / "worker.log"
    cls = "org.apache.spark.deploy"
    with master_log.open("wb") as out:
        master = subprocess.Popen(
            [BIN / "spark-class", f"{cls}.master.Master", "--host", "127.0.0.1",
             "--port", "0", "--webui-port", "0"],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=work,
        )  # fmt: skip
    worker = None
    try:
        pattern = r"Starting Spark master at (spark://127\.0\.0\.1:\d+)"
        url = wait_for_line(master_log, pattern, master)
        with worker_log.open("wb") as out:
            worker = subprocess.Popen(
                [BIN / "spark-class", f"{cls}.worker.Worker", "--host", "127.0.0.1",
                 "--cores", "1", "--memory", "1g", "--webui-port", "0", url],
                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=work,
            )  # fmt: skip
        wait_for_line(master_log, r"Registering worker", master)
        yield url
    finally:
        for proc in (worker, master):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(30)
