"""The HTTP API behind accounts and TLS: real TLS (Python's ssl and Debian's curl), Basic
credentials, per-topic permission, the failure limit, reloads without restart, the audit."""

from __future__ import annotations

import base64
import logging
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tiered import metrics
from tiered.access.guard import Guard
from tiered.access.security import Security
from tiered.core.status_report import collect_status
from tiered.http.app import create_app
from tiered.http.server import HttpServer
from tiered.http.server import Tls
from tiered.testing.certs import Pki
from tiered.testing.certs import make_pki
from tiered.testing.http import get
from tiered.testing.sample_tier import SampleTier

TOPIC, OTHER_TOPIC = "GenTopic0", "GenTopic1"
SECRETS = ("reader-secret", "other-secret", "root-secret", "rotated-secret", "metrics-secret")
ACCOUNTS = f"""
accounts:
  - accessKey: reader
    secretKey: {{reader}}
    defaultTopicPerm: DENY
    topicPerms:
      - {TOPIC}=SUB
  - accessKey: other
    secretKey: other-secret
    defaultTopicPerm: DENY
  - accessKey: root
    secretKey: root-secret
    admin: true
"""
MESSAGES = f"/v1/topics/{TOPIC}/queues/0/messages"


@dataclass
class Site:
    url: str
    port: int
    pki: Pki
    security: Security
    accounts: Path


def _serve(tier: SampleTier, security: Security, mode: str) -> HttpServer:
    app = create_app(
        tier.store(),
        status=lambda query: collect_status(tier.cfg, query).to_json(),
        ready=lambda: {"metadata": "ok"},
        alive=lambda: {"process": "ok"},
        security=security,
    )
    reloading = security.tls
    tls = None
    if reloading is not None:
        tls = Tls(mode, lambda: reloading.value.context, security.guard)
    server = HttpServer(app, "127.0.0.1", 0, tls)
    server.start()
    return server


def _site(
    tmp: Path, tier: SampleTier, mode: str, *, mutual: bool = False, metrics_auth: bool = False
) -> Iterator[Site]:
    pki = make_pki(tmp / "pki")
    accounts = tmp / "plain_acl.yml"
    accounts.write_text(ACCOUNTS.format(reader="reader-secret"))
    security = Security(
        accounts_file=accounts,
        cert_file=pki.server_cert,
        key_file=pki.server_key,
        client_ca_file=pki.ca if mutual else None,
        http_tls_mode=mode,
        metrics_auth=metrics_auth,
        max_failures_per_minute=5,
        failed_auth_delay_s=0.0,
        reload_interval_s=0.05,
    )
    security.start()
    server = _serve(tier, security, mode)
    yield Site(server.url, server.port, pki, security, accounts)
    server.stop()
    security.stop()


@pytest.fixture(scope="module")
def enforcing(module_tier: SampleTier, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    yield from _site(tmp_path_factory.mktemp("enforcing"), module_tier, "enforcing")


@pytest.fixture(scope="module")
def permissive(module_tier: SampleTier, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    yield from _site(tmp_path_factory.mktemp("permissive"), module_tier, "permissive")


@pytest.fixture(scope="module")
def mutual(module_tier: SampleTier, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    yield from _site(tmp_path_factory.mktemp("mutual"), module_tier, "enforcing", mutual=True)


def denied(port: str, reason: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "rocketmq_tiered_store_access_denied_total", {"port": port, "reason": reason}
    )
    return value or 0.0


def test_allowed_forbidden_missing_and_wrong_credentials(enforcing: Site) -> None:
    tls = enforcing.pki.client_context()
    ok = get(
        enforcing.url, MESSAGES, offset=0, maxCount=2, auth=("reader", "reader-secret"), tls=tls
    )
    assert ok.status == 200 and len(ok.json()["messages"]) == 2
    before = denied("http", "forbidden")
    forbidden = get(enforcing.url, f"/v1/topics/{OTHER_TOPIC}/queues/0/messages", offset=0,
                    auth=("reader", "reader-secret"), tls=tls)  # fmt: skip
    assert forbidden.status == 403 and denied("http", "forbidden") == before + 1
    missing = get(enforcing.url, "/v1/topics/NoSuchTopic/queues/0/messages", offset=0,
                  auth=("reader", "reader-secret"), tls=tls)  # fmt: skip
    assert missing.status == 403 and missing.body == forbidden.body  # existence not revealed
    anonymous = get(enforcing.url, MESSAGES, offset=0, tls=tls)
    assert anonymous.status == 401
    assert anonymous.headers["www-authenticate"].startswith('Basic realm="rocketmq-tiered"')
    wrong = get(enforcing.url, MESSAGES, offset=0, auth=("reader", "nope"), tls=tls)
    assert wrong.status == 401 and "www-authenticate" in wrong.headers
    admin = get(enforcing.url, f"/v1/topics/{OTHER_TOPIC}/queues/0/offsets",
                auth=("root", "root-secret"), tls=tls)  # fmt: skip
    assert admin.status == 200
    assert get(enforcing.url, "/healthz", tls=tls).status == 200
    assert get(enforcing.url, "/readyz", tls=tls).status == 200
    assert get(enforcing.url, "/metrics", tls=tls).status == 200  # open unless metricsAuth


def test_status_lists_only_what_the_account_may_read(enforcing: Site) -> None:
    tls = enforcing.pki.client_context()
    mine = get(enforcing.url, "/v1/status", auth=("reader", "reader-secret"), tls=tls).json()
    everything = get(enforcing.url, "/v1/status", auth=("root", "root-secret"), tls=tls).json()
    assert {q["topic"] for q in mine["queues"]} == {TOPIC}
    assert {q["topic"] for q in everything["queues"]} > {TOPIC}


def test_curl_over_tls_with_basic_credentials(enforcing: Site) -> None:
    curl = shutil.which("curl")
    assert curl, "curl (Debian package curl) is needed"

    def status(*args: str) -> str:
        out = subprocess.run(
            [curl, "-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert",
             str(enforcing.pki.ca), *args],
            check=False, capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        return out.stdout

    url = f"https://127.0.0.1:{enforcing.port}{MESSAGES}?offset=0&maxCount=1"
    assert status("-u", "reader:reader-secret", url) == "200"
    assert status("-u", "reader:wrong", url) == "401"
    assert status(url) == "401"
    other = url.replace(TOPIC, OTHER_TOPIC)
    assert status("-u", "reader:reader-secret", other) == "403"
    plain = subprocess.run([curl, "-s", url.replace("https", "http")], check=False,
                           capture_output=True, text=True, timeout=30)  # fmt: skip
    assert "HTTPS only" in plain.stdout and "tieredHttpTlsMode=enforcing" in plain.stdout


def test_a_rotated_secret_and_certificate_take_effect_without_restart(
    module_tier: SampleTier, tmp_path: Path
) -> None:
    site_iter = _site(tmp_path, module_tier, "enforcing")
    site = next(site_iter)
    try:
        tls = site.pki.client_context()
        auth = ("reader", "reader-secret")
        assert get(site.url, MESSAGES, offset=0, auth=auth, tls=tls).status == 200
        site.accounts.write_text(ACCOUNTS.format(reader="rotated-secret"))
        deadline = time.monotonic() + 10
        while get(site.url, MESSAGES, offset=0, auth=auth, tls=tls).status == 200:
            assert time.monotonic() < deadline, "the new secret was not picked up"
            time.sleep(0.05)
        rotated = ("reader", "rotated-secret")
        assert get(site.url, MESSAGES, offset=0, auth=rotated, tls=tls).status == 200
        # a file that does not parse keeps the last good accounts and says so with a metric
        site.accounts.write_text("accounts: [ {accessKey: x")
        ok = {"file": "acl"}
        while metrics.REGISTRY.get_sample_value("rocketmq_tiered_store_security_file_ok", ok):
            assert time.monotonic() < deadline + 10, "the bad file was not noticed"
            time.sleep(0.05)
        assert get(site.url, MESSAGES, offset=0, auth=rotated, tls=tls).status == 200
        # a new certificate is served to the next connections
        expiry = site.pki.reissue_server(days=3)
        while abs(_served_not_after(site.port, site.pki) - expiry.timestamp()) > 1:
            assert time.monotonic() < deadline + 20, "the new certificate was not served"
            time.sleep(0.05)
        name = "rocketmq_tiered_store_tls_certificate_expiry_timestamp_seconds"
        while metrics.REGISTRY.get_sample_value(name, {"file": "tls"}) != expiry.timestamp():
            assert time.monotonic() < deadline + 20, "the new expiry was not exported"
            time.sleep(0.05)
    finally:
        next(site_iter, None)


def _served_not_after(port: int, pki: Pki) -> float:
    from cryptography import x509

    context = pki.client_context()
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).not_valid_after_utc.timestamp()


def test_permissive_serves_plain_and_tls_on_one_port(permissive: Site) -> None:
    auth = ("reader", "reader-secret")
    plain = get(permissive.url.replace("https", "http"), MESSAGES, offset=0, auth=auth)
    secure = get(permissive.url, MESSAGES, offset=0, auth=auth, tls=permissive.pki.client_context())
    assert plain.status == secure.status == 200 and plain.body == secure.body


def test_mutual_tls_refuses_a_client_without_a_trusted_certificate(mutual: Site) -> None:
    auth = ("reader", "reader-secret")
    good = mutual.pki.client_context(certificate=True)
    assert get(mutual.url, MESSAGES, offset=0, auth=auth, tls=good).status == 200
    before = denied("http", "tls_handshake")
    for context in (mutual.pki.client_context(), mutual.pki.client_context(stranger=True)):
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            get(mutual.url, MESSAGES, offset=0, auth=auth, tls=context)
    deadline = time.monotonic() + 10  # the server counts after the client saw the alert
    while denied("http", "tls_handshake") < before + 2:
        assert time.monotonic() < deadline, denied("http", "tls_handshake") - before
        time.sleep(0.02)
    assert get(mutual.url, MESSAGES, offset=0, auth=auth, tls=good).status == 200


def test_past_the_failure_limit_failures_get_429_and_the_right_secret_still_works(
    module_tier: SampleTier, tmp_path: Path
) -> None:
    site_iter = _site(tmp_path, module_tier, "enforcing")
    site = next(site_iter)
    clock = [1000.0]
    site.security.guard = Guard(5, failure_delay_s=0.0, clock=lambda: clock[0])
    try:
        tls = site.pki.client_context()
        for _ in range(5):
            assert (
                get(site.url, MESSAGES, offset=0, auth=("reader", "guess"), tls=tls).status == 401
            )
        limited = get(site.url, MESSAGES, offset=0, auth=("reader", "guess"), tls=tls)
        assert limited.status == 429 and int(limited.headers["retry-after"]) == 12
        right = ("reader", "reader-secret")
        assert get(site.url, MESSAGES, offset=0, auth=right, tls=tls).status == 200
    finally:
        next(site_iter, None)


HEADER_VALUES = st.one_of(
    st.text(max_size=300),
    st.binary(max_size=300).map(lambda b: "Basic " + base64.b64encode(b).decode()),
    st.text(max_size=100).map(lambda t: "Basic " + t),
    st.just("Basic " + "A" * 10_000),
    st.just("Basic !!!notbase64"),
    st.just("Basic " + base64.b64encode("reader:reader-secret\u00e9".encode()).decode()),
    st.just("Bearer x"),
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=HEADER_VALUES)
def test_any_authorization_header_is_a_4xx_never_a_500(permissive: Site, value: str) -> None:
    import http.client

    permissive.security.guard._failures.clear()  # the limit is not what this checks
    conn = http.client.HTTPConnection("127.0.0.1", permissive.port, timeout=30)
    try:
        try:
            conn.putrequest("GET", f"{MESSAGES}?offset=0")
            conn.putheader("Authorization", value.encode("utf-8", "surrogatepass"))
            conn.endheaders()
        except ValueError:  # http.client refuses CR/LF in a header: nothing sent
            return
        status = conn.getresponse().status
    finally:
        conn.close()
    assert status in (400, 401, 431), (value[:80], status)
    auth = ("reader", "reader-secret")
    assert get(permissive.url.replace("https", "http"), MESSAGES, offset=0, auth=auth).status == 200


def test_no_secret_in_a_log_line_or_a_metric(
    enforcing: Site, caplog: pytest.LogCaptureFixture
) -> None:
    tls = enforcing.pki.client_context()
    caplog.set_level(logging.DEBUG)
    enforcing.security.guard._failures.clear()
    for auth in [("reader", "reader-secret"), ("reader", "reader-secretX"),
                 ("root", "other-secret"), ("other", "other-secret"),
                 ("nobody", "root-secret")]:  # fmt: skip
        get(enforcing.url, MESSAGES, offset=0, auth=auth, tls=tls)
        get(enforcing.url, "/v1/status", auth=auth, tls=tls)
    exposition = get(enforcing.url, "/metrics", tls=tls).body.decode()
    logged = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert "access denied on the http port" in logged  # the audit lines are there
    for secret in SECRETS:
        assert secret not in logged and secret not in exposition
    enforcing.security.guard._failures.clear()


def test_metrics_behind_an_account_when_asked(module_tier: SampleTier, tmp_path: Path) -> None:
    site_iter = _site(tmp_path, module_tier, "permissive", metrics_auth=True)
    site = next(site_iter)
    try:
        plain = site.url.replace("https", "http")
        assert get(plain, "/metrics").status == 401
        assert get(plain, "/metrics", auth=("other", "other-secret")).status == 200
        assert get(plain, "/healthz").status == 200
    finally:
        next(site_iter, None)
