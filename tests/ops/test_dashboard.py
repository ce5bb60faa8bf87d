"""The Grafana dashboard's queries, run against a real Prometheus (Debian's ``prometheus``)
scraping a real ``rmq-tiered run`` that offloads, compacts its key index and serves reads over HTTP
and the replay endpoint: every panel's PromQL is valid and returns data. And ``promtool check
metrics`` finds nothing to say about ``/metrics``."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tiered.broker.generator import GenSpec
from tiered.broker.generator import generate_store
from tiered.remoting.client import RemotingClient
from tiered.remoting.codes import RequestCode
from tiered.testing.sample_tier import sample_config

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "config" / "grafana-dashboard.json"
RMQ_TIERED = Path(sys.executable).parent / "rmq-tiered"
SETTLE_S = 120.0  # from the first scrape, for every panel to show data
TIMEOUT_S = 60.0  # of one request (an answer is late, not missing, on a loaded machine)
SPEC = GenSpec(seed=8, topics=2, queues=2, messages=1500, commitlog_file_size=256 << 10,
               cq_file_entries=400, keys_per_message=2)  # fmt: skip


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as r:
        return bytes(r.read())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, ok: Any, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            if ok():
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, f"{what} did not come up"
        time.sleep(0.2)


@dataclasses.dataclass
class Running:
    http: str
    replay_port: int
    prometheus: str


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    tool = shutil.which("prometheus")
    assert tool, "prometheus is missing: `make test` installs Debian's prometheus package"
    work = tmp_path_factory.mktemp("dashboard")
    store = work / "store"
    generate_store(store, SPEC)
    cfg = sample_config(
        store, work, SPEC, "posix",
        tieredStorageLevel="FORCE", tieredStoreFileReservedTime=1_000_000,
        tieredStoreIndexFileMaxHashSlotNum=97, tieredStoreIndexFileMaxIndexNum=500,
        tieredIndexCompactionIntervalMs=300, tieredStoreDispatchIntervalMs=200,
    )  # fmt: skip
    conf = work / "sidecar.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in cfg.as_properties().items() if v != ""))
    log = work / "run.log"
    with log.open("wb") as err:
        sidecar = subprocess.Popen([RMQ_TIERED, "run", "--config", conf], stderr=err)
    found: dict[str, str] = {}

    def started() -> bool:
        text = log.read_text()
        assert sidecar.poll() is None, text
        http = re.search(r"HTTP API listening on (\S+)", text)
        replay = re.search(r"\(RocketMQ remoting\) listening on \S+:(\d+)", text)
        if http and replay:
            found.update(http=http.group(1), replay=replay.group(1))
        return bool(found) and get(f"{found['http']}/readyz") is not None

    wait_for("rmq-tiered run", started)
    port = free_port()
    target = urllib.parse.urlparse(found["http"]).netloc
    (work / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: rocketmq-tiered\n    static_configs: [{{targets: ['{target}']}}]\n"
    )
    with (work / "prometheus.log").open("wb") as prom_log:
        prom = subprocess.Popen(
            [tool, f"--config.file={work / 'prometheus.yml'}",
             f"--web.listen-address=127.0.0.1:{port}", f"--storage.tsdb.path={work / 'tsdb'}"],
            stdout=subprocess.DEVNULL, stderr=prom_log,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for("prometheus", lambda: get(f"{url}/-/ready") is not None)
        yield Running(found["http"], int(found["replay"]), url)
    finally:
        prom.terminate()
        prom.wait(30)
        sidecar.send_signal(signal.SIGTERM)
        sidecar.wait(60)


def traffic(r: Running, store: Path, stop: threading.Event) -> None:
    """What a sidecar does, until ``stop``: offload (the broker writes), API and replay reads."""
    round_ = 0
    while not stop.is_set():
        more = dataclasses.replace(SPEC, seed=100 + round_, messages=300, append=True)
        generate_store(store, more)
        for offset in (0, 50, 0):  # the repeat hits the read-ahead cache
            get(f"{r.http}/v1/topics/GenTopic0/queues/0/messages?offset={offset}&maxCount=20")
        with RemotingClient("127.0.0.1", r.replay_port, timeout_s=TIMEOUT_S) as c:
            c.call(RequestCode.PULL_MESSAGE, consumerGroup="g", topic="GenTopic1", queueId=0,
                   queueOffset=round_ * 10 % 500, maxMsgNums=32, sysFlag=0, commitOffset=0,
                   suspendTimeoutMillis=0)  # fmt: skip
        round_ += 1
        stop.wait(0.7)


def query(r: Running, expr: str) -> tuple[str, list[float]]:
    params = urllib.parse.urlencode({"query": expr})
    answer = json.loads(get(f"{r.prometheus}/api/v1/query?{params}"))
    values = [float(s["value"][1]) for s in answer.get("data", {}).get("result", [])]
    return str(answer["status"]), values


def panel_queries() -> list[tuple[str, str]]:
    board = json.loads(DASHBOARD.read_text())
    return [
        (p["title"], t["expr"]) for p in board["panels"] if p["type"] != "row" for t in p["targets"]
    ]


@dataclasses.dataclass
class Scraped:
    running: Running
    deadline: float  # time.monotonic() by which every panel must have shown data


@pytest.fixture(scope="module")
def scraped(running: Running, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraped]:
    """Prometheus has scraped the sidecar once, and traffic goes on until the module's tests are
    done. Nothing here is a fixed sleep or one instant: on a loaded machine the first scrape comes
    when it comes, and a scrape can time out (its series are then stale: a gauge panel reads
    nothing until the next scrape succeeds), so each panel test asks again until its query has
    data, up to :data:`SETTLE_S` after the first scrape."""
    store = next(tmp_path_factory.getbasetemp().glob("dashboard*/store"))
    wait_for("the first scrape", lambda: query(running, 'up{job="rocketmq-tiered"} == 1')[1])
    stop = threading.Event()
    worker = threading.Thread(target=traffic, args=(running, store, stop), daemon=True)
    worker.start()
    try:
        yield Scraped(running, time.monotonic() + SETTLE_S)
    finally:
        stop.set()
        worker.join(TIMEOUT_S * 2)


@pytest.mark.slow
@pytest.mark.parametrize(("title", "expr"), panel_queries())
def test_every_panel_query_returns_data(scraped: Scraped, title: str, expr: str) -> None:
    status, values = query(scraped.running, expr)
    while (
        status == "success"
        and not any(map(math.isfinite, values))
        and time.monotonic() < scraped.deadline
    ):
        time.sleep(1)
        status, values = query(scraped.running, expr)
    assert status == "success", (title, expr)
    assert values, f"{title}: {expr} returned nothing"
    assert any(math.isfinite(v) for v in values), f"{title}: {expr} returned {values}"


def test_promtool_check_metrics_is_clean(running: Running) -> None:
    tool = shutil.which("promtool")
    assert tool, "promtool is missing: `make test` installs Debian's prometheus package"
    done = subprocess.run(
        [tool, "check", "metrics"], input=get(f"{running.http}/metrics"),
        capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and not done.stdout and not done.stderr, done
