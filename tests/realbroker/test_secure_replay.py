"""The real Java client (RocketMQ 5.3.3) replays through a sidecar with accounts and TLS on its
replay port: ``AclClientRPCHook`` with the right and a wrong secret, RocketMQ's own
``-Dtls.enable=true`` client TLS (``TlsSystemConfig``: trust path, client certificate for mutual
TLS) against an enforcing and a permissive port, and a plain client against an enforcing port."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tiered.testing.certs import Pki
from tiered.testing.certs import make_pki
from tiered.testing.realbroker import Broker
from tiered.testing.realbroker import NameServer
from tiered.testing.realbroker import Runtime
from tiered.testing.replay_check import assert_same
from tiered.testing.replay_check import messages
from tiered.testing.replay_check import sidecar_conf
from tiered.testing.sidecar_process import Sidecar

TOPIC = "RealSecure"
COUNT = 300
ACCOUNTS = f"""
accounts:
  - accessKey: reader
    secretKey: reader-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - {TOPIC}=SUB
"""
RIGHT = {"accessKey": "reader", "secretKey": "reader-secret"}
WRONG = {"accessKey": "reader", "secretKey": "guessed"}


@dataclass
class Setup:
    rocketmq: Runtime
    pki: Pki
    reference: dict[Any, Any]
    enforcing: Sidecar
    permissive: Sidecar

    def tls_flags(self, *, certificate: bool) -> tuple[str, ...]:
        flags: tuple[str, ...] = (
            "-Dtls.enable=true",
            "-Dtls.test.mode.enable=false",  # true (the default) trusts any server, sends no cert
            "-Dtls.client.authServer=true",
            f"-Dtls.client.trustCertPath={self.pki.ca}",
        )
        if certificate:
            flags += (
                f"-Dtls.client.certPath={self.pki.client_cert}",
                f"-Dtls.client.keyPath={self.pki.client_key}",
            )
        return flags

    def consume(self, car: Sidecar, group: str, flags: tuple[str, ...], **credentials: str) -> Any:
        lines = self.rocketmq.driver(
            "consume", mode="lite", group=group, topics=[TOPIC], maxMs=60_000, routeMs=3000,
            namesrv=car.name_server, java_flags=flags, **credentials,
        )  # fmt: skip
        return messages(lines)


@pytest.fixture(scope="module")
def setup(
    broker: Broker, namesrv: NameServer, rocketmq: Runtime, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    work = tmp_path_factory.mktemp("secure")
    pki = make_pki(work / "pki")
    accounts = work / "plain_acl.yml"
    accounts.write_text(ACCOUNTS)
    common: dict[str, Any] = {"namesrv": namesrv.address, "broker": broker.address}
    rocketmq.driver("bulk", seed=41, topic=TOPIC, count=COUNT, size=300, keyEvery=10, tag="s",
                    topics={TOPIC: 2}, **common)  # fmt: skip
    reference = messages(rocketmq.driver("consume", mode="lite", group="it-secure-reference",
                                         topics=[TOPIC], maxMs=60_000, **common))  # fmt: skip
    assert len(reference) == COUNT
    tls = {"tieredAclEnable": "true", "tieredAclFile": accounts,
           "tieredTlsCertFile": pki.server_cert, "tieredTlsKeyFile": pki.server_key}  # fmt: skip
    cars = []
    for mode, extra in (("enforcing", {"tieredTlsClientCaFile": pki.ca}), ("permissive", {})):
        d = work / mode
        d.mkdir()
        conf = sidecar_conf(d / "sidecar.conf", d, tieredRemotingTlsMode=mode, **tls, **extra)
        car = Sidecar(conf, d / "run", broker_conf=broker.conf)
        car.start()
        cars.append(car)
    try:
        yield Setup(rocketmq, pki, reference, *cars)
    finally:
        for car in cars:
            car.stop()


def test_a_signed_tls_client_with_its_certificate_replays_everything(setup: Setup) -> None:
    got = setup.consume(
        setup.enforcing, "it-secure-mtls", setup.tls_flags(certificate=True), **RIGHT
    )
    assert_same(got, setup.reference)


def test_a_wrong_secret_is_refused_and_says_so(setup: Setup) -> None:
    with pytest.raises(AssertionError, match="does not match"):
        setup.consume(setup.enforcing, "it-secure-wrong", setup.tls_flags(certificate=True),
                      **WRONG)  # fmt: skip
    assert setup.enforcing.metric(
        "rocketmq_tiered_store_access_denied_total", port="remoting", reason="bad_credentials"
    )


def test_a_plain_client_on_an_enforcing_port_is_told_to_use_tls(setup: Setup) -> None:
    with pytest.raises(AssertionError, match="tieredRemotingTlsMode=enforcing"):
        setup.consume(setup.enforcing, "it-secure-plain", (), **RIGHT)
    assert setup.enforcing.metric(
        "rocketmq_tiered_store_access_denied_total", port="remoting", reason="tls_required"
    )


def test_mutual_tls_refuses_a_client_without_a_certificate(setup: Setup) -> None:
    with pytest.raises(AssertionError):
        setup.consume(setup.enforcing, "it-secure-nocert", setup.tls_flags(certificate=False),
                      **RIGHT)  # fmt: skip
    assert setup.enforcing.metric(
        "rocketmq_tiered_store_access_denied_total", port="remoting", reason="tls_handshake"
    )


@pytest.mark.parametrize("tls", [True, False], ids=["tls", "plain"])
def test_a_permissive_port_serves_tls_and_plain_clients(setup: Setup, tls: bool) -> None:
    flags = setup.tls_flags(certificate=False) if tls else ()
    got = setup.consume(setup.permissive, f"it-secure-permissive-{tls}", flags, **RIGHT)
    assert_same(got, setup.reference)


def test_the_sidecar_logs_no_secret(setup: Setup, tmp_path: Path) -> None:
    for car in (setup.enforcing, setup.permissive):
        logs = "".join(p.read_text(errors="replace") for p in car.log.parent.glob("*.log"))
        assert "access denied on the remoting port" in logs or car is setup.permissive
        assert "reader-secret" not in logs and "guessed" not in logs
