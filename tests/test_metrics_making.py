"""The metric families are made on first use, all at once and in one order, or never (discard).

Each case runs in a fresh interpreter: what a process has made or imported cannot be undone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from prometheus_client.metrics import MetricWrapperBase

from tiered import metrics

PROMETHEUS = "'prometheus_client' in sys.modules"


def _run(code: str) -> Any:
    """The JSON the last line of ``code``'s output holds, run in a fresh ``python -P``."""
    done = subprocess.run(
        [sys.executable, "-P", "-c", f"import json, sys\n{code}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


def test_importing_the_module_loads_no_prometheus_client() -> None:
    assert _run(f"from tiered import metrics\nprint(json.dumps({PROMETHEUS}))") is False


def test_the_first_use_of_one_family_makes_every_family_in_order_with_its_series() -> None:
    code = f"""
from tiered import metrics
metrics.DISPATCH_ROUNDS.inc()
from prometheus_client import REGISTRY
names = [m.name for m in REGISTRY.collect() if m.name.startswith("rocketmq_")]
zero = {{
    m.name: sorted(tuple(s.labels.values()) for s in m.samples if s.name.endswith("_total"))
    for m in REGISTRY.collect() if m.name.endswith(("expiry_failures", "index_failures",
                                                   "metadata_persist", "metadata_mirror"))
}}
created = [s.name for m in REGISTRY.collect() for s in m.samples if s.name.endswith("_created")]
print(json.dumps([{PROMETHEUS}, names, zero, created, metrics.discarded()]))
"""
    loaded, names, zero, created, discarded = _run(code)
    assert loaded is True and discarded is False
    metrics.register()
    assert names == [  # the module's order (a counter's family name has no _total)
        next(iter(m.describe())).name
        for m in vars(metrics).values()
        if isinstance(m, MetricWrapperBase)
    ]
    assert zero == {
        "rocketmq_tiered_store_expiry_failures": [["commit_log"], ["consume_queue"], ["index"]],
        "rocketmq_tiered_store_index_failures": sorted([s] for s in metrics.INDEX_STAGES),
        "rocketmq_tiered_store_metadata_persist": [["failed"], ["ok"]],
        "rocketmq_tiered_store_metadata_mirror": [["failed"], ["ok"]],
    }
    assert created == []


def test_the_registry_named_here_holds_every_family_at_its_first_use() -> None:
    code = """
from tiered import metrics
value = metrics.REGISTRY.get_sample_value(
    "rocketmq_tiered_store_index_failures_total", {"stage": "put"}
)
import prometheus_client
print(json.dumps([value, metrics.REGISTRY is prometheus_client.REGISTRY]))
"""
    assert _run(code) == [0.0, True]


def test_families_made_from_two_threads_at_once_are_made_once() -> None:
    code = """
import threading
from tiered import metrics
barrier = threading.Barrier(8)
def use():
    barrier.wait()
    metrics.child(metrics.MESSAGES_OUT, "T").inc()
threads = [threading.Thread(target=use) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps(metrics.REGISTRY.get_sample_value(
    "rocketmq_tiered_store_messages_out_total", {"topic": "T"})))
"""
    assert _run(code) == 8.0


def test_a_discarding_process_records_nothing_and_loads_no_prometheus_client() -> None:
    code = f"""
from tiered import metrics
first = metrics.discard()
metrics.MESSAGES_DISPATCH.labels("T", "0", "commit_log").inc(3)
metrics.child(metrics.API_LATENCY, "get_message", "T").observe(1.5)
metrics.INDEX_FILES_WAITING.set(2)
metrics.REMOTING_CONNECTIONS.dec()
metrics.READ_AHEAD_CACHE_BYTES.set_function(lambda: 1.0)
metrics.METADATA_LAST_PERSIST.set_to_current_time()
@metrics.counts_index_failures("put")
def fails():
    raise OSError("disk")
try:
    fails()
except OSError:
    pass
print(json.dumps([first, metrics.discard(), metrics.discarded(), {PROMETHEUS}]))
"""
    assert _run(code) == [True, True, True, False]


def test_discarding_after_the_families_are_made_changes_nothing() -> None:
    code = """
from tiered import metrics
metrics.register()
first = metrics.discard()
metrics.INDEX_KEYS.inc(2)
print(json.dumps([first, metrics.discarded(),
                  metrics.REGISTRY.get_sample_value("rocketmq_tiered_store_index_keys_total")]))
"""
    assert _run(code) == [False, False, 2.0]


def test_a_failed_index_step_is_counted_under_its_stage_and_raised_unchanged() -> None:
    @metrics.counts_index_failures("compact")
    def compact() -> None:
        raise ValueError("bad file")

    before = metrics.REGISTRY.get_sample_value(
        "rocketmq_tiered_store_index_failures_total", {"stage": "compact"}
    )
    with pytest.raises(ValueError, match=r"^bad file$"):
        compact()
    after = metrics.REGISTRY.get_sample_value(
        "rocketmq_tiered_store_index_failures_total", {"stage": "compact"}
    )
    assert before is not None and after == before + 1


def test_hooks_run_before_every_collection_and_go_with_their_object() -> None:
    """A counter a hot path keeps in a plain number is published by a before_collect hook: a
    scrape (here get_sample_value) sees it current; a hook's object gone, the hook is too."""
    out = _run(
        "from tiered import metrics\n"
        "import gc\n"
        "class Reads:\n"
        "    def __init__(self): self.n = self.seen = 0\n"
        "    def sync(self):\n"
        "        metrics.READ_AHEAD_CACHE_ACCESS.inc(self.n - self.seen); self.seen = self.n\n"
        "hooks = len(metrics._BEFORE.hooks)\n"
        "reads = Reads(); metrics.before_collect(reads.sync)\n"
        "name = 'rocketmq_tiered_store_read_ahead_cache_access_total'\n"
        "before = metrics.REGISTRY.get_sample_value(name)\n"
        "reads.n += 3\n"
        "after = metrics.REGISTRY.get_sample_value(name)\n"
        "del reads; gc.collect(); metrics.REGISTRY.get_sample_value(name)\n"
        "print(json.dumps([before, after, len(metrics._BEFORE.hooks) - hooks]))"
    )
    assert out == [0.0, 3.0, 0]


_DETAIL = """
from tiered import metrics
from tiered.providers.memory import MemoryProvider
from tiered.providers.wrappers import MetricsProvider
from tiered.providers.layout import FileType, segment_key
metrics.set_detail({level!r})
sizes = []
for topic, qid, behind, age in [("A", 0, 5, 100), ("A", 1, 7, 300), ("B", 0, 1, 200)]:
    metrics.QUEUE_BEHIND.set(topic, qid, behind, "consume_queue")
    metrics.QUEUE_LATENCY.set(topic, qid, age, "consume_queue")
    labels = metrics.queue_labels(topic, qid)
    metrics.child(metrics.MESSAGES_DISPATCH, *labels, "commit_log").inc(behind)
    size = (f"broker-a/{{topic}}/{{qid}}", 10 * behind, "commit_log")
    if {bulk!r}:
        sizes.append(size)
    else:
        metrics.QUEUE_STORAGE_SIZE.set_path(*size)
metrics.QUEUE_STORAGE_SIZE.set_paths(sizes)
metrics.QUEUE_BEHIND.set("B", 0, 0, "consume_queue")  # caught up
p = MetricsProvider(MemoryProvider())
p.append(segment_key("c", "broker-a", "A", 0, FileType.COMMIT_LOG, 0), b"x", 0)
def samples(name):
    found = [
        [dict(s.labels), s.value]
        for f in metrics.REGISTRY.collect() for s in f.samples if s.name == name
    ]
    return sorted(found, key=json.dumps)
got = {{n: samples(n) for n in (
    "rocketmq_tiered_store_dispatch_behind", "rocketmq_tiered_store_dispatch_latency",
    "rocketmq_tiered_store_messages_dispatch_total", "rocketmq_storage_size",
    "rocketmq_tiered_store_provider_upload_bytes_count")}}
metrics.forget_queue("A", 1, "broker-a/A/1", tier=True)  # the broker deleted it
got["after_forget"] = samples("rocketmq_tiered_store_dispatch_behind")
got["sizes_after"] = samples("rocketmq_storage_size")
print(json.dumps(got))
"""


def _cq(topic: str, queue_id: str) -> dict[str, str]:
    return {"topic": topic, "queue_id": queue_id, "file_type": "consume_queue"}


def test_broker_detail_sums_counts_and_sizes_and_takes_the_oldest_age() -> None:
    got = _run(_DETAIL.format(level="broker", bulk=False))
    assert got["rocketmq_tiered_store_dispatch_behind"] == [[_cq("", ""), 12.0]]
    assert got["rocketmq_tiered_store_dispatch_latency"] == [[_cq("", ""), 300.0]]
    assert got["rocketmq_tiered_store_messages_dispatch_total"] == [
        [{"topic": "", "queue_id": "", "file_type": "commit_log"}, 13.0]
    ]
    assert got["rocketmq_storage_size"] == [[{"topic": "", "file_type": "commit_log"}, 130.0]]
    (upload,) = got["rocketmq_tiered_store_provider_upload_bytes_count"]
    assert upload[0]["path"] == "" and upload[1] == 1.0
    assert got["after_forget"] == [[_cq("", ""), 5.0]]
    assert got["sizes_after"] == [[{"topic": "", "file_type": "commit_log"}, 60.0]]


def test_topic_detail_has_a_series_per_topic() -> None:
    got = _run(_DETAIL.format(level="topic", bulk=False))
    assert got["rocketmq_tiered_store_dispatch_behind"] == [[_cq("A", ""), 12.0], [_cq("B", ""), 0]]
    assert got["rocketmq_tiered_store_dispatch_latency"] == [
        [_cq("A", ""), 300.0],
        [_cq("B", ""), 200.0],
    ]
    sizes = got["rocketmq_storage_size"]
    assert sizes == [
        [{"topic": "broker-a/A", "file_type": "commit_log"}, 120.0],
        [{"topic": "broker-a/B", "file_type": "commit_log"}, 10.0],
    ]
    (upload,) = got["rocketmq_tiered_store_provider_upload_bytes_count"]
    assert upload[0]["path"] == "broker-a/A"
    assert got["after_forget"] == [[_cq("A", ""), 5.0], [_cq("B", ""), 0]]


def test_queue_detail_keeps_upstreams_labels() -> None:
    got = _run(_DETAIL.format(level="queue", bulk=False))
    assert got["rocketmq_tiered_store_dispatch_behind"] == [
        [_cq("A", "0"), 5.0],
        [_cq("A", "1"), 7.0],
        [_cq("B", "0"), 0.0],
    ]
    assert [s[0]["topic"] for s in got["rocketmq_storage_size"]] == [
        "broker-a/A/0",
        "broker-a/A/1",
        "broker-a/B/0",
    ]
    assert got["after_forget"] == [[_cq("A", "0"), 5.0], [_cq("B", "0"), 0.0]]
    assert [s[0]["topic"] for s in got["sizes_after"]] == ["broker-a/A/0", "broker-a/B/0"]


@pytest.mark.parametrize("level", metrics.DETAILS)
def test_sizes_set_at_once_export_as_those_set_one_by_one(level: str) -> None:
    assert _run(_DETAIL.format(level=level, bulk=True)) == _run(
        _DETAIL.format(level=level, bulk=False)
    )


def test_an_unknown_detail_is_refused_naming_the_levels() -> None:
    with pytest.raises(ValueError, match="broker, topic, queue"):
        metrics.set_detail("partition")
