"""``rmq-tiered query`` and ``rmq-tiered compact-index`` (click, in-process), and
``GET /v1/topics/{topic}/keys/{key}`` on a real uvicorn server (127.0.0.1, port 0)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from click.testing import Result
from tiered.providers import build_provider

from tiered.cli import main
from tiered.config import TieredConfig
from tiered.core.sidecar import Sidecar
from tiered.http.app import create_app
from tiered.http.app import message_json
from tiered.http.key_routes import keys_router
from tiered.http.server import HttpServer
from tiered.index.service import IndexService
from tiered.read.message_store import TieredMessageStore
from tiered.testing import http
from tiered.testing.http import Reply
from tiered.testing.index_keys import IndexCase
from tiered.testing.sample_tier import write_conf


def cli(*args: str | Path | int, code: int = 0) -> Result:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == code, (result.output, result.exception)
    return result


def json_lines(result: Result) -> list[dict[str, Any]]:
    """What a --json command printed: every line of stdout is one JSON object (the human
    summary goes to stderr)."""
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def offload(cfg: TieredConfig) -> None:
    with Sidecar(cfg, build_provider(cfg)) as sidecar:
        assert sidecar.dispatcher.run_pass(flush=True).messages == 900


def test_query_and_compact_index_commands(tmp_path: Path, index_case: IndexCase) -> None:
    cfg = index_case.config(provider="posix", tieredStorageLevel="FORCE")
    conf = write_conf(cfg, tmp_path / "sidecar.conf")
    offload(cfg)
    expected = index_case.keys()
    (topic, key), (qid, qoff, stored) = sorted(expected.items())[123]
    base: list[str | Path | int] = ["--config", conf, "--topic", topic]

    def query(*extra: str | int) -> list[dict[str, Any]]:
        return json_lines(cli("query", *base, "--key", key, "--json", *map(str, extra)))

    local = query()
    fetched = json_lines(cli("fetch", *base, "--queue", qid, "--offset", qoff, "--max-count", 1,
                             "--json"))  # fmt: skip
    assert local == fetched and local[0]["queueOffset"] == qoff and local[0]["tier"] == "tiered"
    assert query("--begin", stored + 1000) == []
    assert query("--begin", stored - 1000, "--end", stored + 1000) == local
    table = cli("query", *base, "--key", key)
    assert "1 message(s)" in table.stderr and str(qoff) in table.stdout

    report = cli("compact-index", "--config", conf)
    assert "uploaded" in report.stdout and "compaction" in report.stdout
    assert query() == local  # now from an uploaded file
    sealed = json_lines(cli("compact-index", "--config", conf, "--seal", "--json"))
    assert [r["action"] for r in sealed] == ["uploaded"]
    assert sealed[0]["engine"] == "numpy" and sealed[0]["seconds"] >= 0
    assert query() == local
    for (t, k), (_, q, _) in sorted(expected.items())[::101]:
        found = json_lines(cli("query", "--config", conf, "--topic", t, "--key", k, "--json"))
        assert [(m["topic"], m["queueOffset"]) for m in found] == [(t, q)]

    bad = cli("query", *base, "--key", key, "--begin", 5, "--end", 1, code=2)
    assert "begin=5 is after end=1" in bad.stderr and "Traceback" not in bad.output


def test_compact_index_needs_the_lock_but_stage_does_not(
    tmp_path: Path, index_case: IndexCase
) -> None:
    cfg = index_case.config(provider="posix")
    conf = write_conf(cfg, tmp_path / "sidecar.conf")
    with Sidecar(cfg, build_provider(cfg)) as sidecar:
        sidecar.dispatcher.run_pass(flush=True)
        busy = cli("compact-index", "--config", conf, code=2)
        assert "is in use by another rmq-tiered" in busy.stderr
        staged = cli("compact-index", "--config", conf, "--stage")  # beside the running one
        assert "staged" in staged.stdout
        command = staged.stdout.strip().splitlines()[-1]
        assert command.startswith("spark-submit --master spark://HOST:7077 ")
        assert "compact_index.py --pending " in command and "--slots 97" in command
        assert sidecar.index is not None
        assert sidecar.index.staging.staged() == [
            f.begin_timestamp for f in sidecar.index.local.sealed()
        ]
    memory = write_conf(index_case.config(), tmp_path / "memory.conf")
    refused = cli("compact-index", "--config", memory, "--stage", code=2)
    assert "not reachable from a Spark cluster" in refused.stderr


def get(base: str, path: str, **params: Any) -> Reply:
    return http.get(base, urllib.parse.quote(path), **params)


def test_http_keys_route(index_case: IndexCase) -> None:
    cfg = index_case.config(tieredStorageLevel="FORCE")
    expected = index_case.keys()
    with Sidecar(cfg, build_provider(cfg)) as sidecar:
        sidecar.dispatcher.run_pass(flush=True)
        index: IndexService | None = sidecar.index
        assert index is not None
        index.compact_sealed()
        store = TieredMessageStore(cfg, sidecar.flat_store, sidecar.local)
        current: list[IndexService | None] = [index]
        app = create_app(
            store,
            status=lambda query: {},
            ready=lambda: {"metadata": "ok"},
            alive=lambda: {"process": "ok"},
            extra_routers=[keys_router(lambda: current[0], max_response_bytes=1)],
        )
        server = HttpServer(app, "127.0.0.1", 0)
        server.start()
        try:
            (topic, key), (qid, qoff, stored) = sorted(expected.items())[77]
            path = f"/v1/topics/{topic}/keys/{key}"
            ok = get(server.url, path)
            assert ok.status == 200, ok.body
            assert ok.json()["key"] == key and ok.json()["truncated"] is False
            fetched = store.get_message(topic, qid, qoff, 1)
            assert ok.json()["messages"] == [message_json(fetched.units[0].data, "tiered")]
            assert get(server.url, path, begin=stored + 1000).json()["messages"] == []
            ranged = get(server.url, path, begin=stored - 1000, end=stored + 1000, maxCount=5)
            assert ranged.json()["messages"] == ok.json()["messages"]
            assert get(server.url, f"/v1/topics/{topic}/keys/a/b c").json()["messages"] == []
            for params, parameter in (
                ({"maxCount": 0}, "maxCount"),
                ({"maxCount": 5000}, "maxCount"),
                ({"begin": -1}, "begin"),
                ({"end": "soon"}, "end"),
                ({"begin": 10, "end": 5}, "begin"),
            ):
                bad = get(server.url, path, **params)
                assert (bad.status, bad.json().get("parameter")) == (400, parameter), bad.body
            bad_topic = get(server.url, f"/v1/topics/no topic!/keys/{key}")
            assert (bad_topic.status, bad_topic.json()["parameter"]) == (400, "topic")
            current[0] = None
            down = get(server.url, path)
            assert down.status == 503 and "not running" in down.json()["error"]
        finally:
            server.stop()
