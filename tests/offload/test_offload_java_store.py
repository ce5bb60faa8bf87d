"""A store as a 5.3.3 broker writes it for a Java client (delays, transactions, batches, system
topics, the broker's config files) offloads its user topics only, each unit exactly once."""

from __future__ import annotations

from tiered.providers import MemoryProvider

from tiered.broker import java_props as jp
from tiered.broker.generator import topic_names
from tiered.core.sidecar import Sidecar
from tiered.source.local_source import LocalSource
from tiered.source.topic_filter import is_system_topic
from tiered.testing.sample_tier import SidecarCase
from tiered.testing.sample_tier import rolling_spec
from tiered.testing.tier_check import check_tier
from tiered.testing.tier_check import read_document

JAVA = rolling_spec(
    messages=1500,
    max_body=5000,
    compress_fraction=0.0,
    java_client=True,
    client_ipv6_fraction=0.5,
    user_property_fraction=0.2,
    delay_fraction=0.1,
    transaction_fraction=0.15,
    batch_fraction=0.03,
    batch_size=6,
    broker_files=True,
)


def test_system_topics_stay_and_user_topics_offload_once(offload_case: SidecarCase) -> None:
    store = offload_case.store(JAVA)
    cfg = offload_case.config(store)
    local = LocalSource(cfg)
    system = {jp.SCHEDULE_TOPIC, jp.HALF_TOPIC, jp.OP_TOPIC}
    assert {t for t, _ in local.queues()} == set(topic_names(JAVA.topics)) | system
    assert all(is_system_topic(t, cfg.broker_cluster_name, cfg.broker_name) for t in system)
    user = {
        (t, q): local.max_offset(t, q) - local.min_offset(t, q)
        for t, q in local.queues()
        if t not in system
    }
    provider = MemoryProvider()
    with Sidecar(cfg, provider) as sidecar:
        report = sidecar.dispatcher.run_pass(flush=True)
    assert not report.errors, report.errors
    assert report.messages == sum(user.values()) > JAVA.messages * 0.8  # re-puts and commits in
    check = check_tier(cfg, provider, topics=set(topic_names(JAVA.topics)))
    check.assert_ok(sum(user.values()))
    doc = read_document(cfg)
    assert set(doc.queue_metadata_table) == set(topic_names(JAVA.topics))  # no system topic
