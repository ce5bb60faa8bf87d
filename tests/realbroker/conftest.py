"""A real RocketMQ name server and broker (RocketMQ 5.3.3 from Maven Central, ``make rmq``),
started once per test session on loopback and shared by the tests that do not stop it; the
Java driver (``java/Driver.java``) produces, consumes and runs mqadmin.

Tests that kill or restart a broker start their own (:func:`own_broker`) beside the shared name
server.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path

import pytest

from tiered.testing.realbroker import Broker
from tiered.testing.realbroker import NameServer
from tiered.testing.realbroker import Runtime


@pytest.fixture(scope="session")
def rocketmq(tmp_path_factory: pytest.TempPathFactory) -> Runtime:
    """The RocketMQ jars and the compiled Java driver (a missing jar is a failure: ``make test``
    copies them)."""
    try:
        return Runtime.prepare(tmp_path_factory.mktemp("rmq-home"))
    except RuntimeError as e:
        pytest.fail(str(e))


@pytest.fixture(scope="session")
def namesrv(rocketmq: Runtime, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NameServer]:
    server = NameServer(rocketmq, "namesrv", tmp_path_factory.mktemp("namesrv"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def broker(
    rocketmq: Runtime, namesrv: NameServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Broker]:
    """The shared broker (cluster RealCluster, broker-a); ``started_at`` is its start time (its
    file-cleaning task first runs 60 s later)."""
    b = Broker(rocketmq, "broker", tmp_path_factory.mktemp("broker-a"), namesrv=namesrv.address)
    b.start()
    try:
        b.wait_registered()
        yield b
    finally:
        b.stop()


OwnBroker = Callable[..., Broker]


@pytest.fixture
def own_broker(rocketmq: Runtime, namesrv: NameServer, tmp_path: Path) -> Iterator[OwnBroker]:
    """``own_broker(name, **broker_conf_keys)``: a broker of this test alone (stopped at the
    test's end)."""
    made: list[Broker] = []

    def make(name: str, **keys: object) -> Broker:
        b = Broker(
            rocketmq, name, tmp_path / name, namesrv=namesrv.address,
            conf_keys={"brokerName": name, **keys},
        )  # fmt: skip
        b.workdir.mkdir()
        made.append(b)
        return b

    yield make
    for b in made:
        b.stop()
