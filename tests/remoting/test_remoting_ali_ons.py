"""ali-ons, a real third-party RocketMQ client, replays history through ``rmq-tiered run``.

The store's oldest commitlog files are deleted (those offsets exist only in the tier); the
consumer is pointed at the sidecar as its name server and nothing else. Checked: every message
exactly once with its body and keys intact, tier-only offsets included; committed offsets that
survive a consumer restart and a sidecar restart; consumeFromWhere first / timestamp / last with
``tieredRemotingNewGroupOffset=CLIENT``; an idle consumer makes a bounded number of pulls (long
polling); the broker's store is unchanged (hashes and mtimes).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from tiered.broker import message as msgcodec
from tiered.broker.generator import GenSpec
from tiered.broker.generator import generate_store
from tiered.testing.certs import make_pki
from tiered.testing.sample_tier import SampleTier
from tiered.testing.sidecar_process import Sidecar

from .conftest import TOPIC
from .conftest import Consumed
from .conftest import ali_ons
from .conftest import build_history
from .conftest import expected_messages
from .conftest import store_snapshot as snapshot

pytestmark = pytest.mark.slow
SidecarFactory = Callable[..., Sidecar]
PULLS = "rocketmq_tiered_store_remoting_requests_total"


def assert_intact(consumed: Consumed, tier: SampleTier, topic: str = TOPIC) -> None:
    """Each consumed message is the stored one: body and keys."""
    expected = expected_messages(tier, topic)
    for m in consumed.messages:
        stored = expected[(m["queueId"], m["queueOffset"])]
        assert base64.b64decode(m["body"]) == stored.body, (m["queueId"], m["queueOffset"])
        assert m["keys"] == stored.properties.get(msgcodec.PROPERTY_KEYS), m
        assert m["tags"] == stored.properties.get("TAGS"), m


def test_replay_from_the_tier_exactly_once_across_consumer_and_sidecar_restarts(
    tmp_path: Path, replay_spec: GenSpec, sidecar: SidecarFactory
) -> None:
    tier = build_history(tmp_path / "h", replay_spec)
    expected = expected_messages(tier, TOPIC)
    tier_only = {k for k in expected if k[1] < tier.local_min[(TOPIC, k[0])]}
    assert tier_only, "the broker must have deleted part of the history"
    before = snapshot(tier.cfg.store_path_root_dir)
    car = sidecar(tier)

    # the client's default CONSUME_FROM_LAST_OFFSET: a new group starts at the earliest offset
    half = len(expected) // 2
    first = ali_ons(car.name_server, "replay", stopAfter=half, expect=half, settleMs=1500)
    assert first.done["count"] == half and not first.done["errors"]
    assert_intact(first, tier)
    from_tier = tier_only & set(first.positions)
    served = car.metric("rocketmq_tiered_store_remoting_messages_served_total", tier="tiered")
    assert from_tier and served >= len(from_tier), "the tier-only history came from the tier"

    car.stop()  # the sidecar restarts between the two halves
    car.start()
    rest = ali_ons(car.name_server, "replay", expect=len(expected) - half, settleMs=2000)
    assert not rest.done["errors"]
    assert_intact(rest, tier)
    seen = Counter(first.positions + rest.positions)
    assert set(seen) == set(expected), "every message, tier-only history included"
    assert max(seen.values()) == 1, "exactly once across the restarts"
    assert tier_only <= set(seen)

    # nothing new: the idle consumer long-polls instead of spinning
    pulls = car.metric(PULLS, code="PULL_MESSAGE")
    idle = ali_ons(car.name_server, "replay", expect=0, settleMs=6000)
    assert idle.done["count"] == 0
    idle_pulls = car.metric(PULLS, code="PULL_MESSAGE") - pulls
    assert idle_pulls <= 20, f"{idle_pulls} pulls in 6 s from an idle consumer"

    car.stop()
    assert snapshot(tier.cfg.store_path_root_dir) == before, "the broker's store was changed"


def test_consume_from_where_decides_for_new_groups_with_client_offsets(
    tmp_path: Path, replay_spec: GenSpec, sidecar: SidecarFactory
) -> None:
    tier = build_history(tmp_path / "h", replay_spec)
    expected = expected_messages(tier, TOPIC)
    car = sidecar(tier, tieredRemotingNewGroupOffset="CLIENT")

    everything = ali_ons(
        car.name_server, "first", consumeFromWhere="CONSUME_FROM_FIRST_OFFSET",
        expect=len(expected), settleMs=1500,
    )  # fmt: skip
    assert Counter(everything.positions) == Counter(list(expected))
    assert_intact(everything, tier)

    # a timestamp inside the tier-only history: each queue from its first message stored then
    times = sorted(m.store_timestamp for m in expected.values())
    when = times[len(times) // 10] // 1000 * 1000
    stamp = dt.datetime.fromtimestamp(when / 1000, dt.UTC).strftime("%Y%m%d%H%M%S")
    first_after: dict[int, int] = {}
    for (q, o), m in sorted(expected.items()):
        if m.store_timestamp >= when:
            first_after.setdefault(q, o)
    want = {(q, o) for (q, o) in expected if o >= first_after.get(q, 1 << 62)}
    assert any(o < tier.local_min[(TOPIC, q)] for q, o in want)
    since = ali_ons(
        car.name_server, "since", consumeFromWhere="CONSUME_FROM_TIMESTAMP",
        consumeTimestamp=stamp, expect=len(want), settleMs=1500,
    )  # fmt: skip
    assert Counter(since.positions) == Counter(want)

    # from the last offset: only what the broker writes after the consumer started
    spec = dataclasses.replace(replay_spec, seed=32, messages=400, append=True)
    news: list[Consumed] = []

    def consume_new() -> None:
        news.append(ali_ons(car.name_server, "last", expect=1, settleMs=4000, maxMs=60_000))

    reader = threading.Thread(target=consume_new)
    reader.start()
    deadline = time.monotonic() + 60
    while car.metric(PULLS, code="GET_MAX_OFFSET") < replay_spec.queues:  # it starts at the max
        assert time.monotonic() < deadline, "the consumer never asked for the max offsets"
        time.sleep(0.1)
    time.sleep(0.5)
    generate_store(tier.cfg.store_path_root_dir, spec)
    reader.join(120)
    (new,) = news
    assert new.positions, "messages written after the start are consumed"
    maxima = {q: max(o for (qq, o) in expected if qq == q) for q in range(replay_spec.queues)}
    assert all(o > maxima[q] for q, o in new.positions), "nothing older than the start"
    assert max(Counter(new.positions).values()) == 1


def test_ali_ons_keeps_working_on_a_permissive_tls_port_with_accounts(
    tmp_path: Path, replay_spec: GenSpec, sidecar: SidecarFactory
) -> None:
    """ali-ons speaks no TLS: a port in permissive mode still serves it (plain), signed by an
    account as ali-ons signs (AccessKey, Signature and its OnsChannel field)."""
    tier = build_history(tmp_path / "h", replay_spec)
    expected = expected_messages(tier, TOPIC)
    pki = make_pki(tmp_path / "pki")
    accounts = tmp_path / "plain_acl.yml"
    accounts.write_text(
        f"accounts:\n  - accessKey: reader\n    secretKey: reader-secret\n"
        f"    defaultTopicPerm: DENY\n    defaultGroupPerm: SUB\n    topicPerms: [{TOPIC}=SUB]\n"
    )
    car = sidecar(
        tier, tieredAclEnable="true", tieredAclFile=accounts, tieredRemotingTlsMode="permissive",
        tieredTlsCertFile=pki.server_cert, tieredTlsKeyFile=pki.server_key,
    )  # fmt: skip
    got = ali_ons(
        car.name_server, "secure", consumeFromWhere="CONSUME_FROM_FIRST_OFFSET",
        expect=len(expected), settleMs=1500, accessKey="reader", secretKey="reader-secret",
    )  # fmt: skip
    assert not got.done["errors"]
    assert Counter(got.positions) == Counter(list(expected))
    assert_intact(got, tier)
