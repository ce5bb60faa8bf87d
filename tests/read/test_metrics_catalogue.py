"""Every metric the sidecar exports, after a real run: in the docs' metrics reference
(docs/reference/metrics.md, generated from the registry; names and labels, both ways), listed
in :mod:`tiered.metrics`' docstring, and recorded.

One run for the module: a generated store offloaded to a posix tier by the real dispatcher (its
keys put into small index files that seal), an index upload failed on purpose, then every SEALED
file compacted with numpy and uploaded; the HTTP API on a real uvicorn server answers messages,
an offset by time, a key query, a health check and a 404; a metadata mirror put fails (fault
injection); a header byte of a tiered segment is flipped and read through the API (502); an
absent object is read from the backend (a provider error); last, an expiry run past every
reserve time whose deletes the backend refuses (expiry lag). Then ``/metrics`` is scraped and
parsed with prometheus_client's text parser.
"""

from __future__ import annotations

import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from tiered.providers import FaultInjectingProvider
from tiered.providers import FaultPlan
from tiered.providers import PosixProvider
from tiered.providers import Provider
from tiered.providers import unwrap

from tiered import metrics
from tiered.broker import message as msgcodec
from tiered.broker.generator import GenSpec
from tiered.errors import AccessDeniedError
from tiered.errors import InjectedFaultError
from tiered.errors import SegmentNotFoundError
from tiered.http.app import create_app
from tiered.http.key_routes import keys_router
from tiered.http.server import HttpServer
from tiered.testing.http import get
from tiered.testing.sample_tier import SampleTier
from tiered.testing.sample_tier import build_sample_tier

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "metrics.md"
PREFIX = "rocketmq_"
IGNORED_LABELS = {"le", "quantile"}
TOPIC, QID = "GenTopic0", 0
DAMAGED = ("GenTopic1", 1, 30)  # read nowhere else in the run (no cached copy)

Scrape = dict[str, Metric]
"""Families by the name they are exposed under (counters with ``_total``)."""


def parse(text: str) -> Scrape:
    """The ``rocketmq_`` families of a text exposition, without the ``_created`` series that
    the 0.0.4 text format shows as separate gauges."""
    found = {f.name: f for f in text_string_to_metric_families(text)}
    out: Scrape = {}
    for name, family in found.items():
        base = found.get(name.removesuffix("_created"))
        if not name.startswith(PREFIX) or (base is not family and base is not None):
            continue
        out[f"{name}_total" if family.type == "counter" else name] = family
    return out


def total(scrape: Scrape, sample: str, **labels: str) -> float:
    """The sum of the samples named ``sample`` whose labels include ``labels``."""
    return sum(
        s.value
        for family in scrape.values()
        for s in family.samples
        if s.name == sample and labels.items() <= s.labels.items()
    )


def sample_labels(family: Metric) -> set[str]:
    return {k for s in family.samples for k in s.labels} - IGNORED_LABELS


def reference_table() -> dict[str, tuple[str, tuple[str, ...]]]:
    """The metrics reference's table: full name -> (type, label names)."""
    text = REFERENCE.read_text(encoding="utf-8")
    rows: dict[str, tuple[str, tuple[str, ...]]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        name = re.fullmatch(r"`([a-z_:][a-z0-9_:]*)`", cells[0]) if len(cells) >= 4 else None
        if name is None:
            continue
        assert name.group(1) not in rows, f"{name.group(1)} is in the reference table twice"
        labels = [re.match(r"`?([a-z_][a-z0-9_]*)", part.strip()) for part in cells[2].split(",")]
        rows[name.group(1)] = (cells[1], tuple(m.group(1) for m in labels if m is not None))
    assert rows, f"{REFERENCE} has no table rows"
    return rows


@dataclass
class Run:
    before: Scrape
    after: Scrape
    statuses: dict[str, int] = field(default_factory=dict)
    waiting: list[float] = field(default_factory=list)  # SEALED files before/after compaction
    mirror_failed: float = 0.0  # delta of metadata_mirror_total{result="failed"}
    upload_failed: float = 0.0  # delta of index_failures_total{stage="upload"}
    uploaded: int = 0


def _flip_queue_offset(tier: SampleTier, topic: str, qid: int, offset: int) -> None:
    """Flip a bit of the stored queue offset of one message in its posix segment file."""
    flat = tier.sidecar.flat_store.get(topic, qid)
    assert flat is not None
    unit = flat.consume_queue.read_units(offset, 1)
    physical = int(unit["offset"][0])
    base = max(s.base for s in flat.commitlog.segments if s.base <= physical)
    posix = unwrap(tier.provider)
    assert isinstance(posix, PosixProvider)
    position = physical - base + msgcodec.QUEUE_OFFSET_POSITION + 7
    fd = os.open(posix.path(flat.commitlog.key(base)), os.O_RDWR)
    try:
        os.pwrite(fd, bytes([os.pread(fd, 1, position)[0] ^ 0x01]), position)
    finally:
        os.close(fd)


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, read_spec: GenSpec) -> Iterator[Run]:
    # (a module fixture is made before the function-scoped _queue_metrics of its first test:
    # without this, a worker that starts with this module records it at the default detail)
    metrics.set_detail("queue")
    before = parse(generate_latest(REGISTRY).decode())
    faults: list[FaultInjectingProvider] = []

    def wrap(provider: Provider) -> FaultInjectingProvider:
        faults.append(FaultInjectingProvider(provider))
        return faults[-1]

    tier = build_sample_tier(
        tmp_path_factory.mktemp("metrics"),
        read_spec,
        "posix",
        wrap=wrap,
        capture=False,
        tieredStoreIndexFileMaxHashSlotNum="97",
        tieredStoreIndexFileMaxIndexNum="500",
        tieredIndexCompactionIntervalMs="0",
        tieredStorageLevel="FORCE",
    )
    fault = faults[0]
    out = Run(before, {})
    server: HttpServer | None = None
    try:
        index = tier.sidecar.index
        assert index is not None
        out.waiting.append(_value("rocketmq_tiered_store_index_files_waiting"))
        # an index upload refused by the backend, then every SEALED file uploaded
        failed = "rocketmq_tiered_store_index_failures_total"
        was = _value(failed, stage="upload")
        fault.set_plan(FaultPlan(rate=1.0, operations={"put"}, error=AccessDeniedError))
        assert [r.action for r in index.compact_sealed()] == ["failed"]
        out.upload_failed = _value(failed, stage="upload") - was
        fault.set_plan(FaultPlan())
        index.seal()
        results = index.compact_sealed()
        assert results and {r.action for r in results} == {"uploaded"}
        out.uploaded = len(results)
        out.waiting.append(_value("rocketmq_tiered_store_index_files_waiting"))
        # an expiry run an hour after the oldest message: nothing goes, the reserve-time gauges
        # are set (the generated messages are years old: now_ms() would expire them all)
        oldest = min(f.min_timestamp() for f in tier.sidecar.flat_store.files() if f.initialized)
        assert tier.sidecar.expire(oldest + 3_600_000).segments == 0
        # a metadata mirror put that fails (the local file is written)
        mirror = "rocketmq_tiered_store_metadata_mirror_total"
        was = _value(mirror, result="failed")
        fault.set_plan(FaultPlan(nth={1}, operations={"put"}))
        with pytest.raises(InjectedFaultError):
            tier.sidecar.metadata.persist()
        out.mirror_failed = _value(mirror, result="failed") - was
        fault.set_plan(FaultPlan())
        tier.sidecar.metadata.persist()
        _flip_queue_offset(tier, *DAMAGED)
        # the HTTP API
        app = create_app(
            tier.store(),
            status=lambda query: {},
            ready=lambda: {"metadata": "ok"},
            alive=lambda: {"process": "ok"},
            extra_routers=[keys_router(lambda: index)],
        )
        server = HttpServer(app, "127.0.0.1", 0)
        server.start()
        base = f"{server.url}/v1/topics/{TOPIC}/queues/{QID}"
        reply = get(f"{base}/messages?offset=0&maxCount=8")
        status, body = reply.status, reply.body
        out.statuses["messages"] = status
        msg_id = re.search(rb'"msgId":\s*"([^"]+)"', body)
        assert msg_id is not None, body[:200]
        key = urllib.parse.quote(msg_id.group(1).decode(), safe="")
        out.statuses["offsets"] = get(f"{base}/offsets?timestamp=0").status
        out.statuses["keys"] = get(f"{server.url}/v1/topics/{TOPIC}/keys/{key}").status
        out.statuses["healthz"] = get(f"{server.url}/healthz").status
        out.statuses["missing"] = get(f"{server.url}/no/such/path").status
        topic, qid, offset = DAMAGED
        damaged = f"{server.url}/v1/topics/{topic}/queues/{qid}/messages?offset={offset}"
        out.statuses["damaged"] = get(damaged).status
        flat = tier.sidecar.flat_store.get(TOPIC, QID)
        assert flat is not None
        with pytest.raises(SegmentNotFoundError):  # no segment starts there: a failed fetch
            tier.provider.read(flat.commitlog.key(1 << 40), 0, 1)
        # every segment is past its reserve time and the backend refuses the deletes: each
        # queue's first record goes (its object is orphaned), the rest stay: expiry lag
        fault.set_plan(FaultPlan(rate=1.0, operations={"delete"}, error=AccessDeniedError))
        assert tier.sidecar.expire(10**15).behind_segments > 0
        fault.set_plan(FaultPlan())
        reply = get(f"{server.url}/metrics")
        status, body = reply.status, reply.body
        assert status == 200
        out.after = parse(body.decode())
        yield out
    finally:
        if server is not None:
            server.stop()
        tier.sidecar.close()


def test_the_run_answered_as_expected(run: Run) -> None:
    assert run.statuses == {
        "messages": 200,
        "offsets": 200,
        "keys": 200,
        "healthz": 200,
        "missing": 404,
        "damaged": 502,
    }


def test_every_family_is_in_the_package_catalogue_and_its_docstring(run: Run) -> None:
    catalogue = metrics.families()
    assert set(run.after) == set(catalogue)
    doc = metrics.__doc__ or ""
    for name in catalogue:
        short = name.removeprefix("rocketmq_tiered_store_")
        assert f"``{short}``" in doc, f"{name} is not in tiered.metrics' docstring table"
    for name, family in run.after.items():
        kind, labels = catalogue[name]
        assert family.type == kind, name
        if family.samples:
            assert sample_labels(family) == set(labels), name


def test_every_family_is_in_the_reference_and_back(run: Run) -> None:
    table = reference_table()
    exposed = set(run.after)
    assert sorted(exposed - set(table)) == [], "exposed but not in the metrics reference"
    assert sorted(set(table) - exposed) == [], "in the metrics reference but not exposed"


def test_reference_labels_are_the_family_labels(run: Run) -> None:
    table = reference_table()
    catalogue = metrics.families()
    for name, (kind, labels) in table.items():
        assert name in catalogue, name
        assert set(labels) == set(catalogue[name][1]), f"{name}: reference labels {labels}"
        assert kind.split()[0].rstrip(",;") in {"counter", "gauge", "histogram"}, (name, kind)
        assert kind.startswith(catalogue[name][0]), (name, kind)
        family = run.after.get(name)
        if family is not None and family.samples:
            assert set(labels) == sample_labels(family), name


def grew(run: Run, sample: str, **labels: str) -> float:
    return total(run.after, sample, **labels) - total(run.before, sample, **labels)


@pytest.mark.parametrize(
    ("sample", "labels"),
    [
        ("rocketmq_tiered_store_messages_dispatch_total", {"file_type": "commit_log"}),
        ("rocketmq_tiered_store_dispatch_bytes_total", {}),
        ("rocketmq_tiered_store_dispatch_rounds_total", {}),
        ("rocketmq_tiered_store_provider_requests_total", {"provider": "posix"}),
        ("rocketmq_tiered_store_provider_rpc_latency_count", {"operation": "write"}),
        ("rocketmq_tiered_store_provider_upload_bytes_count", {"file_type": "index"}),
        ("rocketmq_tiered_store_provider_download_bytes_count", {"file_type": "commit_log"}),
        ("rocketmq_tiered_store_api_latency_count", {"operation": "get_message"}),
        ("rocketmq_tiered_store_api_latency_count", {"operation": "get_offset_by_time"}),
        ("rocketmq_tiered_store_api_latency_count", {"operation": "query_message"}),
        ("rocketmq_tiered_store_messages_out_total", {"topic": TOPIC}),
        ("rocketmq_tiered_store_read_ahead_cache_access_total", {}),
        ("rocketmq_tiered_store_read_crc_failures_total", {"topic": DAMAGED[0]}),
        ("rocketmq_tiered_store_index_keys_total", {}),
        ("rocketmq_tiered_store_index_files_sealed_total", {}),
        ("rocketmq_tiered_store_index_files_compacted_total", {"engine": "numpy"}),
        ("rocketmq_tiered_store_index_compaction_duration_seconds_count", {"engine": "numpy"}),
        ("rocketmq_tiered_store_index_files_uploaded_total", {}),
        ("rocketmq_tiered_store_metadata_persist_total", {"result": "ok"}),
        ("rocketmq_tiered_store_metadata_mirror_total", {"result": "ok"}),
        ("rocketmq_tiered_store_http_requests_total", {"route": "/healthz"}),
    ],
)
def test_the_run_recorded(run: Run, sample: str, labels: dict[str, str]) -> None:
    assert grew(run, sample, **labels) > 0, (sample, labels)


def test_gauges_after_the_run(run: Run) -> None:
    queue = {"topic": TOPIC, "queue_id": str(QID)}
    assert total(run.after, "rocketmq_storage_size", file_type="index") > 0
    assert total(run.after, "rocketmq_storage_size", file_type="commit_log") > 0
    assert total(run.after, "rocketmq_storage_message_reserve_time", **queue) > 0
    assert total(run.after, "rocketmq_tiered_store_dispatch_behind", **queue) == 0  # caught up
    assert total(run.after, "rocketmq_tiered_store_dispatch_standby") == 0
    assert total(run.after, "rocketmq_tiered_store_dispatch_behind_commitlog_files") == 0
    for file_type in ("commit_log", "consume_queue"):
        lag = {**queue, "file_type": file_type}
        assert total(run.after, "rocketmq_tiered_store_expiry_behind_segments", **lag) > 0
        assert total(run.after, "rocketmq_tiered_store_expiry_behind_bytes", **lag) > 0
    assert total(run.after, "rocketmq_tiered_store_read_ahead_cache_messages") > 0
    assert total(run.after, "rocketmq_tiered_store_metadata_last_persist_timestamp_seconds") > 0
    assert total(run.after, "rocketmq_tiered_store_metadata_last_mirror_timestamp_seconds") > 0
    waiting_before, waiting_after = run.waiting
    assert waiting_before >= 1 and waiting_after == 0


def test_injected_failures_are_counted(run: Run) -> None:
    assert run.mirror_failed == 1
    assert run.upload_failed == 1
    assert grew(run, "rocketmq_tiered_store_read_crc_failures_total", topic=DAMAGED[0]) == 1
    assert grew(run, "rocketmq_tiered_store_index_failures_total", stage="upload") == 1
    assert grew(run, "rocketmq_tiered_store_metadata_mirror_total", result="failed") == 1
    errors = "rocketmq_tiered_store_provider_errors_total"
    assert grew(run, errors, operation="read") == 1  # the absent object
    assert grew(run, errors, operation="delete") == 0  # refused outside the metrics wrapper


def test_http_requests_are_counted_by_route_template(run: Run) -> None:
    requests = run.after["rocketmq_tiered_store_http_requests_total"]
    routes = {s.labels["route"] for s in requests.samples if s.name.endswith("_total")}
    assert "/v1/topics/{topic}/queues/{queueId}/messages" in routes
    assert "/v1/topics/{topic}/keys/{key}" in routes
    assert not [r for r in routes if "GenTopic" in r or "no/such" in r], routes
    assert grew(run, "rocketmq_tiered_store_http_requests_total", route="other", status="404") == 1
    messages = {"method": "GET", "route": "/v1/topics/{topic}/queues/{queueId}/messages"}
    assert grew(run, "rocketmq_tiered_store_http_requests_total", **messages, status="502") == 1
    assert grew(run, "rocketmq_tiered_store_http_request_duration_count", **messages) == 2
