"""The chart's ``security`` block (issue #30): accounts and TLS on both ports, mounted from Secrets
as whole volumes, and a render that refuses to put a port on a Service with neither ACL nor
enforcing TLS unless ``security.allowInsecure`` says so."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from tiered.config import load_config
from tiered.testing.helm_values import merged

RELEASE, NAMESPACE = "rmq", "mq"
FULLNAME = "rmq-rocketmq-tiered"
SECRET_KEY = "a-long-random-secret"
ACCOUNT: dict[str, Any] = {"accessKey": "replay-reader", "secretKey": SECRET_KEY, "admin": True}
NO_ACL = {"security": {"acl": {"enabled": False}}}
INSECURE = {"security": {"allowInsecure": True}}
REPLAY_ON_SERVICE = {"remoting": {"service": {"enabled": True}}}
TLS_SECRET = {"security": {"tls": {"existingSecret": "rmq-tls"}}}
CERT_MANAGER = {
    "security": {
        "tls": {
            "certManager": {"enabled": True, "issuerRef": {"name": "ca", "kind": "ClusterIssuer"}}
        }
    }
}
SIDECAR = {"mode": "sidecar"}
PATCH = {"mode": "sidecar", "sidecar": {"emit": "component"}}


def tls(http: str = "disabled", remoting: str = "disabled", **more: Any) -> dict[str, Any]:
    return {"security": {"tls": {"httpMode": http, "remotingMode": remoting, **more}}}


class Rendered:
    """One render: its manifests, NOTES.txt, and the sidecar's pod spec (StatefulSet or patch)."""

    def __init__(self, files: dict[str, str]) -> None:
        notes = [t for n, t in files.items() if n.endswith("NOTES.txt") and "patch/" not in n]
        self.notes = notes[0] if notes else ""
        self.docs: list[dict[str, Any]] = [
            d
            for n, text in sorted(files.items())
            if n.endswith(".yaml")
            for d in yaml.safe_load_all(text)
            if d
        ]
        for component in [d for d in self.docs if d["kind"] == "Component"]:
            self.docs.append(yaml.safe_load(component["patches"][0]["patch"]))

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        (found,) = [d for d in self.all(kind) if name in (None, d["metadata"]["name"])]
        return found

    def pod(self) -> dict[str, Any]:
        spec: dict[str, Any] = self.one("StatefulSet")["spec"]["template"]["spec"]
        return spec

    def sidecar(self) -> dict[str, Any]:
        (found,) = [c for c in self.pod()["containers"] if c["name"] == "rmq-tiered"]
        return dict(found)

    def volume(self, name: str) -> dict[str, Any] | None:
        return next((v for v in self.pod()["volumes"] if v["name"] == name), None)

    def mount(self, name: str) -> dict[str, Any] | None:
        return next((m for m in self.sidecar()["volumeMounts"] if m["name"] == name), None)

    def conf(self) -> dict[str, str]:
        text = self.one("ConfigMap", f"{FULLNAME}-config")["data"]["tiered.conf"]
        pairs = [ln.split("=", 1) for ln in text.splitlines() if ln and not ln.startswith("#")]
        return dict(pairs)


def render(chart: helm.Chart, *values: dict[str, Any]) -> Rendered:
    """The chart rendered from ``values``; in sidecar mode with ``emit=resources`` the patch of
    the same values too (the pod that runs)."""
    values_ = merged(*values)
    files = chart.render(values_, name=RELEASE, namespace=NAMESPACE)
    if values_.get("mode") == "sidecar" and values_.get("sidecar", {}).get("emit") is None:
        patch = merged(values_, {"sidecar": {"emit": "component"}})
        pod = chart.render(patch, name=RELEASE, namespace=NAMESPACE)
        files |= {f"patch/{n}": text for n, text in pod.items()}
    return Rendered(files)


def secret_items(volume: dict[str, Any] | None) -> tuple[str, dict[str, str]]:
    assert volume is not None
    secret = volume["secret"]
    return secret["secretName"], {i["key"]: i["path"] for i in secret["items"]}


# --- the refusal ---------------------------------------------------------------------------------

INSECURE_SETS = {
    "http-without-acl": (NO_ACL, "the HTTP port"),
    "http-permissive-tls-only": (
        merged(NO_ACL, TLS_SECRET, tls("permissive", "enforcing")),
        "the HTTP port",
    ),
    "replay-permissive-tls-only": (
        merged(NO_ACL, TLS_SECRET, tls("enforcing", "permissive"), REPLAY_ON_SERVICE),
        "the replay port",
    ),
    "sidecar-mode": (merged(SIDECAR, NO_ACL), "the HTTP port"),
    "sidecar-patch": (merged(PATCH, NO_ACL), "the HTTP port"),
}


@pytest.mark.parametrize(("values", "port"), INSECURE_SETS.values(), ids=INSECURE_SETS)
def test_a_port_on_a_service_with_neither_acl_nor_tls_fails_the_render(
    chart: helm.Chart, values: dict[str, Any], port: str
) -> None:
    chart.validate_schema(values)
    with pytest.raises(helm.HelmRenderError) as caught:
        render(chart, values)
    message = str(caught.value)
    assert port in message
    for fix in ("security.allowInsecure=true", "security.acl.enabled=true", "security.tls"):
        assert fix in message


@pytest.mark.parametrize(("values", "port"), INSECURE_SETS.values(), ids=INSECURE_SETS)
def test_allow_insecure_renders_and_warns(
    chart: helm.Chart, values: dict[str, Any], port: str
) -> None:
    rendered = render(chart, values, INSECURE)
    assert rendered.volume("rmq-tiered-acl") is None and rendered.mount("rmq-tiered-acl") is None
    if values.get("sidecar", {}).get("emit") != "component":
        assert rendered.conf()["tieredAclEnable"] == "false"
        assert "tieredAclFile" not in rendered.conf()
        assert not [s for s in rendered.all("Secret") if s["metadata"]["name"].endswith("-acl")]
        assert re.search(rf"WARNING \(security.allowInsecure=true\): {port}", rendered.notes)


def test_enforcing_tls_secures_a_port_without_acl(chart: helm.Chart) -> None:
    rendered = render(chart, NO_ACL, TLS_SECRET, tls("enforcing", "enforcing"), REPLAY_ON_SERVICE)
    conf = rendered.conf()
    assert (conf["tieredHttpTlsMode"], conf["tieredRemotingTlsMode"]) == ("enforcing", "enforcing")
    assert "WARNING (security.allowInsecure" not in rendered.notes


def test_a_replay_port_off_the_service_needs_nothing(chart: helm.Chart) -> None:
    """Only Service ports count: with ACL on and the replay port on the pod IP only, TLS off."""
    rendered = render(chart, {})
    ports = [p["name"] for p in rendered.one("Service", FULLNAME)["spec"]["ports"]]
    assert ports == ["http"]


# --- accounts ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [{}, SIDECAR, PATCH], ids=["statefulset", "sidecar", "patch"])
def test_defaults_turn_acl_on_with_the_accounts_secret_mounted(
    chart: helm.Chart, mode: dict[str, Any]
) -> None:
    rendered = render(chart, mode)
    name, items = secret_items(rendered.volume("rmq-tiered-acl"))
    assert (name, items) == (f"{FULLNAME}-acl", {"plain_acl.yml": "plain_acl.yml"})
    mount = rendered.mount("rmq-tiered-acl")
    # the whole volume, never a subPath: kubelet then swaps the file in place on a Secret update
    assert mount == {"name": "rmq-tiered-acl", "mountPath": "/etc/rmq-tiered-acl", "readOnly": True}
    if mode != PATCH:
        conf = rendered.conf()
        assert conf["tieredAclEnable"] == "true"
        assert conf["tieredAclFile"] == "/etc/rmq-tiered-acl/plain_acl.yml"
        assert conf["tieredHttpMetricsAuth"] == "false"
        assert (conf["tieredHttpTlsMode"], conf["tieredRemotingTlsMode"]) == ("disabled",) * 2
        secret = rendered.one("Secret", f"{FULLNAME}-acl")
        assert yaml.safe_load(base64.b64decode(secret["data"]["plain_acl.yml"])) == {"accounts": []}
        assert "nobody reads until you add one" in rendered.notes


def test_accounts_from_values_land_in_the_secret_only(chart: helm.Chart) -> None:
    rendered = render(chart, {"security": {"acl": {"accounts": [ACCOUNT]}}})
    secret = rendered.one("Secret", f"{FULLNAME}-acl")
    accounts = yaml.safe_load(base64.b64decode(secret["data"]["plain_acl.yml"]))
    assert accounts == {"accounts": [ACCOUNT]}
    for doc in rendered.all("ConfigMap") + rendered.all("StatefulSet"):
        assert SECRET_KEY not in yaml.safe_dump(doc)
    annotations = rendered.one("StatefulSet")["spec"]["template"]["metadata"]["annotations"]
    assert not [a for a in annotations if "acl" in a]  # an update must not roll the pods


def test_accounts_from_an_existing_secret(chart: helm.Chart) -> None:
    values = {"security": {"acl": {"existingSecret": "rmq-accounts", "existingSecretKey": "a.yml"}}}
    rendered = render(chart, values)
    assert rendered.all("Secret") == []
    assert secret_items(rendered.volume("rmq-tiered-acl")) == (
        "rmq-accounts",
        {"a.yml": "plain_acl.yml"},
    )
    assert rendered.conf()["tieredAclFile"] == "/etc/rmq-tiered-acl/plain_acl.yml"


def test_metrics_auth_and_the_service_monitor(chart: helm.Chart) -> None:
    monitor = {"metrics": {"serviceMonitor": {"enabled": True, "basicAuthSecret": "scraper"}}}
    rendered = render(chart, {"security": {"metricsAuth": True}}, monitor)
    assert rendered.conf()["tieredHttpMetricsAuth"] == "true"
    (endpoint,) = rendered.one("ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["basicAuth"] == {
        "username": {"name": "scraper", "key": "username"},
        "password": {"name": "scraper", "key": "password"},
    }
    assert "scheme" not in endpoint


# --- TLS -----------------------------------------------------------------------------------------


def test_tls_from_an_existing_secret(chart: helm.Chart) -> None:
    rendered = render(chart, TLS_SECRET, tls("enforcing", "permissive"))
    assert secret_items(rendered.volume("rmq-tiered-tls")) == (
        "rmq-tls",
        {"tls.crt": "tls.crt", "tls.key": "tls.key"},
    )
    mount = rendered.mount("rmq-tiered-tls")
    assert mount == {"name": "rmq-tiered-tls", "mountPath": "/etc/rmq-tiered-tls", "readOnly": True}
    conf = rendered.conf()
    assert conf["tieredTlsCertFile"] == "/etc/rmq-tiered-tls/tls.crt"
    assert conf["tieredTlsKeyFile"] == "/etc/rmq-tiered-tls/tls.key"
    assert "tieredTlsClientCaFile" not in conf
    assert (conf["tieredHttpTlsMode"], conf["tieredRemotingTlsMode"]) == ("enforcing", "permissive")
    sidecar = rendered.sidecar()
    assert sidecar["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert sidecar["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert rendered.all("Certificate") == []


def test_mutual_tls_mounts_the_ca(chart: helm.Chart) -> None:
    rendered = render(chart, TLS_SECRET, tls("permissive", "enforcing", mutual=True))
    _, items = secret_items(rendered.volume("rmq-tiered-tls"))
    assert items["ca.crt"] == "ca.crt"
    assert rendered.conf()["tieredTlsClientCaFile"] == "/etc/rmq-tiered-tls/ca.crt"
    assert "scheme" not in rendered.sidecar()["livenessProbe"]["httpGet"]  # plain still answers


@pytest.mark.parametrize("mode", [{}, SIDECAR], ids=["statefulset", "sidecar"])
def test_tls_from_cert_manager(chart: helm.Chart, mode: dict[str, Any]) -> None:
    monitor = {"metrics": {"serviceMonitor": {"enabled": True}}}
    rendered = render(chart, mode, CERT_MANAGER, tls("enforcing", "enforcing"), monitor)
    cert = rendered.one("Certificate")
    assert cert["apiVersion"] == "cert-manager.io/v1"
    spec = cert["spec"]
    assert spec["secretName"] == f"{FULLNAME}-tls"
    assert spec["issuerRef"] == {"name": "ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    assert (spec["duration"], spec["renewBefore"]) == ("2160h", "360h")
    assert "server auth" in spec["usages"]
    assert f"{FULLNAME}.{NAMESPACE}.svc" in spec["dnsNames"]
    headless = f"*.{FULLNAME}-headless.{NAMESPACE}.svc"
    assert (headless in spec["dnsNames"]) is (mode != SIDECAR)
    (endpoint,) = rendered.one("ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"] == {
        "serverName": f"{FULLNAME}.{NAMESPACE}.svc",
        "ca": {"secret": {"name": f"{FULLNAME}-tls", "key": "ca.crt"}},
    }
    if mode != SIDECAR:
        name, items = secret_items(rendered.volume("rmq-tiered-tls"))
        assert (name, set(items)) == (f"{FULLNAME}-tls", {"tls.crt", "tls.key"})


def test_cert_manager_dns_names_from_values(chart: helm.Chart) -> None:
    names = {"security": {"tls": {"certManager": {"dnsNames": ["replay.example.com"]}}}}
    rendered = render(chart, CERT_MANAGER, names, tls(remoting="enforcing"))
    assert rendered.one("Certificate")["spec"]["dnsNames"] == ["replay.example.com"]


def test_the_patch_carries_the_tls_volume(chart: helm.Chart) -> None:
    rendered = render(chart, PATCH, CERT_MANAGER, tls(remoting="enforcing"))
    assert rendered.all("Certificate") == []  # with the resources, not the patch
    name, _ = secret_items(rendered.volume("rmq-tiered-tls"))
    assert name == f"{FULLNAME}-tls"
    assert rendered.mount("rmq-tiered-tls") is not None


# --- settings that do not go together -----------------------------------------------------------

CONFLICTS = {
    "tls-without-certificate": (tls(remoting="enforcing"), "need a certificate"),
    "certificate-without-tls": (TLS_SECRET, "both disabled"),
    "mutual-without-tls": ({"security": {"tls": {"mutual": True}}}, "mutual needs TLS"),
    "mutual-with-https-probes": (
        merged(TLS_SECRET, tls("enforcing", mutual=True)),
        "probes cannot present a client certificate",
    ),
    "metrics-auth-without-acl": (
        merged(NO_ACL, INSECURE, {"security": {"metricsAuth": True}}),
        "needs security.acl.enabled=true",
    ),
    "metrics-auth-unscrapable": (
        {"security": {"metricsAuth": True}, "metrics": {"serviceMonitor": {"enabled": True}}},
        "basicAuthSecret",
    ),
}


@pytest.mark.parametrize(("values", "message"), CONFLICTS.values(), ids=CONFLICTS)
def test_security_conflicts_fail_the_render(
    chart: helm.Chart, values: dict[str, Any], message: str
) -> None:
    chart.validate_schema(values)
    with pytest.raises(helm.HelmRenderError, match=re.escape(message)):
        render(chart, values)


def test_the_sidecar_accepts_the_security_keys(chart: helm.Chart, tmp_path: Path) -> None:
    """What the chart writes for ACL, metrics auth and mutual TLS loads as the sidecar's config."""
    values = merged(
        CERT_MANAGER,
        tls("permissive", "enforcing", mutual=True),
        {"security": {"metricsAuth": True, "acl": {"accounts": [ACCOUNT]}}},
    )
    conf = render(chart, values).conf()
    path = tmp_path / "tiered.conf"
    path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
    env = {"RMQ_TIERED_brokerName": "broker-a", "RMQ_TIERED_brokerId": "0"}
    effective = load_config([path], env=env).as_properties()
    for key in ("tieredAclEnable", "tieredHttpMetricsAuth", "tieredTlsClientCaFile"):
        assert effective[key] == conf[key], key
    assert effective["tieredRemotingTlsMode"] == "enforcing"
