"""The replay port behind accounts and TLS, through the project's own client over real TLS:
permissive and enforcing modes, mutual TLS, the failure limit, the audit, and TLS garbage."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tiered import metrics
from tiered.access.accounts import Acl
from tiered.access.guard import Guard
from tiered.access.guard import Penalty
from tiered.access.security import Security
from tiered.broker.generator import GenSpec
from tiered.remoting.client import RemotingClient
from tiered.remoting.codes import FLAG_SUSPEND
from tiered.remoting.codes import RequestCode as Req
from tiered.remoting.codes import ResponseCode as Res
from tiered.remoting.frame import Command
from tiered.testing.certs import Pki
from tiered.testing.certs import make_pki
from tiered.testing.http import get
from tiered.testing.sample_tier import SampleTier
from tiered.testing.sidecar_process import Sidecar

from .conftest import TOPIC
from .conftest import Endpoint
from .conftest import EndpointFactory
from .conftest import build_history

ACCOUNTS = f"""
accounts:
  - accessKey: reader
    secretKey: reader-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - {TOPIC}=SUB
  - accessKey: other
    secretKey: other-secret
    defaultTopicPerm: DENY
"""
SECRETS = ("reader-secret", "other-secret")
SidecarFactory = Callable[..., Sidecar]
READER = ("reader", "reader-secret")


def pull(c: RemotingClient, offset: int = 0) -> Command:
    return c.call(
        Req.PULL_MESSAGE, consumerGroup="G", topic=TOPIC, queueId=1, queueOffset=offset,
        maxMsgNums=4, sysFlag=0, commitOffset=0, suspendTimeoutMillis=0,
    )  # fmt: skip


@dataclass
class Secured:
    ep: Endpoint
    pki: Pki
    security: Security

    def client(
        self, *, tls: ssl.SSLContext | None = None, credentials: tuple[str, str] | None = None
    ) -> RemotingClient:
        return RemotingClient("127.0.0.1", self.ep.server.port, tls=tls, credentials=credentials)


def _secured(
    history: SampleTier, endpoint: EndpointFactory, tmp: Path, mode: str, *, mutual: bool = False
) -> Secured:
    pki = make_pki(tmp / "pki")
    accounts = tmp / "plain_acl.yml"
    accounts.write_text(ACCOUNTS)
    security = Security(
        accounts_file=accounts,
        cert_file=pki.server_cert,
        key_file=pki.server_key,
        client_ca_file=pki.ca if mutual else None,
        remoting_tls_mode=mode,
        max_failures_per_minute=3,
        failed_auth_delay_s=0.0,
    )
    return Secured(endpoint(history, security=security), pki, security)


@pytest.fixture
def enforcing(history: SampleTier, endpoint: EndpointFactory, tmp_path: Path) -> Secured:
    return _secured(history, endpoint, tmp_path, "enforcing")


@pytest.fixture
def permissive(history: SampleTier, endpoint: EndpointFactory, tmp_path: Path) -> Secured:
    return _secured(history, endpoint, tmp_path, "permissive")


def denied(reason: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "rocketmq_tiered_store_access_denied_total", {"port": "remoting", "reason": reason}
    )
    return value or 0.0


def test_enforcing_serves_signed_tls_clients_and_refuses_plain_ones_with_a_remark(
    enforcing: Secured,
) -> None:
    tls = enforcing.pki.client_context()
    with enforcing.client(tls=tls, credentials=READER) as c:
        assert pull(c).code == Res.SUCCESS
        assert pull(c, 4).code == Res.SUCCESS  # the same TLS connection goes on
    with enforcing.client(tls=tls, credentials=("reader", "wrong")) as c:
        assert pull(c).code == Res.NO_PERMISSION
    with enforcing.client(tls=tls) as c:
        assert pull(c).code == Res.NO_PERMISSION
    before = denied("tls_required")
    with enforcing.client(credentials=READER) as c:
        refused = pull(c)
        assert refused.code == Res.NO_PERMISSION
        assert "tieredRemotingTlsMode=enforcing" in (refused.remark or "")
        assert "-Dtls.enable=true" in (refused.remark or "")
        with pytest.raises(ConnectionError):
            pull(c)  # and the connection is closed
    assert denied("tls_required") == before + 1


def test_permissive_serves_plain_and_tls_clients_on_one_port(permissive: Secured) -> None:
    with permissive.client(credentials=READER) as plain:
        a = pull(plain)
    with permissive.client(tls=permissive.pki.client_context(), credentials=READER) as secure:
        b = pull(secure)
    assert a.code == b.code == Res.SUCCESS and a.body == b.body


def test_mutual_tls_refuses_a_client_without_a_trusted_certificate(
    history: SampleTier, endpoint: EndpointFactory, tmp_path: Path
) -> None:
    secured = _secured(history, endpoint, tmp_path, "enforcing", mutual=True)
    with secured.client(tls=secured.pki.client_context(certificate=True), credentials=READER) as c:
        assert pull(c).code == Res.SUCCESS
    before = denied("tls_handshake")
    for context in (secured.pki.client_context(), secured.pki.client_context(stranger=True)):
        with (
            pytest.raises((ssl.SSLError, ConnectionError, OSError)),
            secured.client(tls=context, credentials=READER) as c,
        ):
            pull(c)
    deadline = time.monotonic() + 10
    while denied("tls_handshake") < before + 2:
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_past_the_failure_limit_failures_are_throttled_and_the_right_secret_still_works(
    permissive: Secured,
) -> None:
    clock = [1000.0]
    permissive.security.guard = Guard(3, failure_delay_s=0.0, clock=lambda: clock[0])
    before = denied("throttled")
    with permissive.client(credentials=("reader", "guess")) as c:
        for _ in range(3):
            assert "does not match" in (pull(c).remark or "")
        limited = pull(c)
        assert limited.code == Res.NO_PERMISSION
        assert "does not match" in (limited.remark or "")
        assert "answered one per 20 s" in (limited.remark or "")
    assert denied("throttled") == before + 1
    with permissive.client(credentials=READER) as c:
        assert pull(c).code == Res.SUCCESS  # the same account, right secret: at once


def test_a_changed_accounts_file_is_used_without_restart(permissive: Secured) -> None:
    assert permissive.security.accounts is not None
    path = permissive.security.accounts.paths[0]
    path.write_text(ACCOUNTS.replace("reader-secret", "rotated-secret"))
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 1_000_000_000))
    permissive.security.reload()
    with permissive.client(credentials=READER) as c:
        assert pull(c).code == Res.NO_PERMISSION
    with permissive.client(credentials=("reader", "rotated-secret")) as c:
        assert pull(c).code == Res.SUCCESS


def test_no_secret_in_a_log_line(permissive: Secured, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    for credentials in [READER, ("reader", "reader-secretX"), ("other", "other-secret"),
                        ("nobody", "reader-secret")]:  # fmt: skip
        with permissive.client(credentials=credentials) as c:
            pull(c)
    logged = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert "access denied on the remoting port" in logged
    for secret in SECRETS:
        assert secret not in logged


TLS_GARBAGE = st.one_of(
    st.binary(max_size=600).map(lambda b: b"\x16" + b),
    st.binary(max_size=40).map(lambda b: b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b),
    st.just(b"\x16\x03\x03\xff\xff" + b"\x00" * 100),
    st.just(b"\x16"),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(garbage=TLS_GARBAGE)
def test_tls_garbage_closes_that_connection_and_no_other(
    permissive: Secured, garbage: bytes
) -> None:
    with permissive.client(credentials=READER) as bystander:
        with socket.create_connection(("127.0.0.1", permissive.ep.server.port), timeout=10) as s:
            s.settimeout(10)
            try:
                s.sendall(garbage)
                s.shutdown(socket.SHUT_WR)
                while s.recv(4096):
                    pass
            except OSError:
                pass  # closed or reset by the endpoint (it may be done before we are)
        assert pull(bystander).code == Res.SUCCESS


def test_a_retry_topic_is_read_with_the_group_permission(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACCOUNTS)
    reader = Acl.load(path).accounts["reader"]
    assert reader.may_read_topic("%RETRY%G")  # defaultGroupPerm: SUB
    assert not reader.may_read_topic("%DLQ%G") and not reader.may_read_topic("RETRY%G")
    other = Acl.load(path).accounts["other"]
    assert not other.may_read_topic("%RETRY%G")  # no group permission


def test_held_pulls_answered_from_other_threads_while_the_reader_waits_over_tls(
    permissive: Secured,
) -> None:
    """Long-polled pulls are answered by the holder's threads while the connection's own thread
    reads the next requests: over TLS both go through one TLS state, never at once, and every
    answer arrives whole, once, decrypted."""
    with permissive.client(tls=permissive.pki.client_context(), credentials=READER) as c:
        end = int(c.call(Req.GET_MAX_OFFSET, topic=TOPIC, queueId=1).ext_fields["offset"])
        sent: dict[int, int] = {}
        for i in range(60):
            held = Command(
                Req.PULL_MESSAGE, opaque=10_000 + i,
                ext_fields={k: str(v) for k, v in {
                    "consumerGroup": "G", "topic": TOPIC, "queueId": 1, "queueOffset": end,
                    "maxMsgNums": 4, "sysFlag": FLAG_SUSPEND, "commitOffset": 0,
                    "suspendTimeoutMillis": 100 + (i % 7) * 40,
                }.items()},
            )  # fmt: skip
            asked = Command(
                Req.GET_MAX_OFFSET, opaque=20_000 + i,
                ext_fields={"topic": TOPIC, "queueId": str(i % 4)},
            )  # fmt: skip
            for command in (held, asked):
                c.send(command)
                sent[command.opaque] = command.code
        answers = [c.receive() for _ in sent]
    assert sorted(a.opaque for a in answers) == sorted(sent)
    for a in answers:
        want = Res.PULL_NOT_FOUND if sent[a.opaque] == Req.PULL_MESSAGE else Res.SUCCESS
        assert a.code == want, (a.opaque, a.code, a.remark)


def test_the_guard_slows_one_account_at_one_address_and_nobody_else() -> None:
    clock = [0.0]
    guard = Guard(3, failure_delay_s=0.5, clock=lambda: clock[0])
    assert [guard.failed("remoting", "10.0.0.1", "A") for _ in range(3)] == [
        Penalty(0.5, False)
    ] * 3
    past = [guard.failed("http", "10.0.0.1", "A") for _ in range(4)]
    assert [p.throttled for p in past] == [True] * 4
    assert [p.wait_s for p in past] == [0.5, 20.5, 40.5, 60.0]  # one per 20 s, a minute at most
    assert guard.failed("remoting", "10.0.0.1", "B") == Penalty(0.5, False)  # another account
    assert guard.failed("remoting", "10.0.0.2", "A") == Penalty(0.5, False)  # another address
    clock[0] += 61
    assert guard.failed("remoting", "10.0.0.1", "A") == Penalty(0.5, False)  # a new minute


TWO_ACCOUNTS = """
accounts:
  - accessKey: alice
    secretKey: alice-secret
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
  - accessKey: bob
    secretKey: bob-secret
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
"""


def test_forty_wrong_secrets_for_one_account_lock_nobody_out_of_either_port(
    tmp_path: Path, replay_spec: GenSpec, sidecar: SidecarFactory
) -> None:
    """``rmq-tiered run`` with its defaults (10 failures a minute, answers after 500 ms): 40 wrong
    secrets for alice from 127.0.0.1, half on each port, each on its own connection; meanwhile
    bob's and alice's correct requests on both ports are answered at once, and the guesses are
    answered slowly (it refused every account at the address for the rest of the minute)."""
    tier = build_history(tmp_path / "h", dataclasses.replace(replay_spec, messages=400), 0)
    accounts = tmp_path / "plain_acl.yml"
    accounts.write_text(TWO_ACCOUNTS)
    car = sidecar(tier, tieredAclEnable="true", tieredAclFile=accounts)
    answered: list[tuple[str, float]] = []
    started = time.monotonic()

    def guess_remoting() -> None:
        with contextlib.suppress(OSError), RemotingClient(
            "127.0.0.1", car.port, credentials=("alice", "wrong"), timeout_s=120
        ) as c:  # fmt: skip
            reply = pull(c)
            assert reply.code == Res.NO_PERMISSION
            answered.append(("remoting", time.monotonic() - started))

    def guess_http() -> None:
        with contextlib.suppress(OSError):
            reply = get(car.http, f"/v1/topics/{TOPIC}/queues/1/messages", offset=0,
                        auth=("alice", "wrong"), timeout=120)  # fmt: skip
            assert reply.status in (401, 429)
            answered.append(("http", time.monotonic() - started))

    threads = [threading.Thread(target=guess_remoting if i % 2 else guess_http, daemon=True)
               for i in range(40)]  # fmt: skip
    for t in threads:
        t.start()
    time.sleep(2.0)  # the first ten were answered after their 500 ms; the rest wait their turn
    for who in ("bob", "alice"):
        secret = f"{who}-secret"
        t0 = time.monotonic()
        with RemotingClient("127.0.0.1", car.port, credentials=(who, secret)) as c:
            assert pull(c).code == Res.SUCCESS, who
        reply = get(car.http, f"/v1/topics/{TOPIC}/queues/1/messages", offset=0,
                    auth=(who, secret))  # fmt: skip
        assert reply.status == 200, (who, reply.status, reply.body[:200])
        assert time.monotonic() - t0 < 1.0, f"{who}'s correct requests waited"
    slow = len(answered)
    assert 10 <= slow < 40, answered  # slowed, not refused at once
    assert car.metric("rocketmq_tiered_store_access_denied_total", reason="throttled") >= 1
    car.stop()  # the guesses still waiting are answered as the ports stop
    for t in threads:
        t.join(30)
    print(f"{slow} of 40 wrong guesses answered within 2 s; bob and alice served at once")
