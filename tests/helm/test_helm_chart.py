"""The Helm chart ``helm/rocketmq-tiered``, rendered and linted by the real Helm v4 engine.

Every rendered manifest is validated with ``kubernetes-validate --strict`` against Kubernetes
1.34 and the newest version it bundles; the sidecar mode's kustomize Component is validated by
applying its patch to broker StatefulSets laid out like the community charts'. The configuration
the chart writes is loaded with :func:`tiered.config.load_config`, and the schema's ``config``
block is checked against :class:`tiered.config.TieredConfig` key by key.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from tiered.config import TieredConfig
from tiered.config import load_config
from tiered.config.broker_keys import KNOWN_BROKER_KEYS
from tiered.testing.helm_values import merged

CHART = Path(__file__).resolve().parents[2] / "helm" / "rocketmq-tiered"
EXAMPLES = CHART / "examples" / "post-renderer"
K8S_VERSIONS = ("1.34.0", "1.37.0")  # a current release, and the newest kubernetes-validate has
RELEASE, NAMESPACE = "rmq", "mq"
FULLNAME = "rmq-rocketmq-tiered"
MODEL_KEYS = frozenset(TieredConfig.model_keys())
SECRET = "s3cr3t-value-never-in-a-configmap"

S3 = {
    "config": {
        "tieredBackendServiceProvider": "s3",
        "objectStoreBucket": "rocketmq-tiered",
        "objectStoreRegion": "eu-west-1",
        "objectStorePrefix": "prod",
        "objectStoreEndpoint": "https://s3.eu-west-1.amazonaws.com",
        "tieredStoreFileReservedTime": 720,
        "readAheadCacheSizeThresholdRate": 0.25,
    }
}
IRSA = {"serviceAccount": {"irsaRoleArn": "arn:aws:iam::123456789012:role/rmq-tiered"}}
KEYS = {"s3Credentials": {"accessKey": "AKIAEXAMPLE", "secretKey": SECRET}}
SIDECAR = {"mode": "sidecar"}
PATCH = {"mode": "sidecar", "sidecar": {"emit": "component"}}
COMMUNITY = {
    "broker": {
        "name": "broker-g$(POD_INDEX)",
        "store": {
            "volumeName": "broker-storage",
            "subPath": "rocketmq-broker/store",
            "mountPath": "/home/rocketmq/store",
        },
    },
    "sidecar": {"targetStatefulSet": "rocketmq-broker-master"},
}
MONITOR = {
    "metrics": {
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "grafanaDashboard": {"enabled": True},
    }
}
# Every free-form value, to check the templates indent them right.
EXTRAS = {
    "commonLabels": {"team": "messaging"},
    "imagePullSecrets": [{"name": "registry"}],
    "broker": {
        "podLabels": {"tier": "broker"},
        "podAnnotations": {"example.com/note": "x"},
        "nodeSelector": {"disk": "ssd"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "mq"}],
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 5, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}
                ]
            }
        },
        "priorityClassName": "high",
        "config": {"deleteWhen": "04", "autoCreateTopicEnable": False},
    },
    "sidecar": {
        "extraArgs": ["-v"],
        "extraEnv": [{"name": "TZ", "value": "UTC"}],
        "extraVolumes": [{"name": "tiered-posix", "persistentVolumeClaim": {"claimName": "nfs"}}],
        "extraVolumeMounts": [{"name": "tiered-posix", "mountPath": "/mnt/tiered"}],
    },
    "config": {"tieredBackendServiceProvider": "posix", "tieredStoreFilePath": "/mnt/tiered"},
    "service": {"annotations": {"example.com/scrape": "true"}},
}


# Full and sidecar sets: defaults, S3 with IRSA, S3 with keys in a Secret, and a ServiceMonitor.
CLUSTER_REPLAY = {
    "remoting": {
        "namesrvAddr": "replay-namesrv:9876",
        "peers": [
            "broker-b-0.broker-b-headless.mq.svc:10941",
            "broker-c-0.broker-c-headless:10941",
        ],
    }
}
# Accounts and TLS (security.*; tests/helm/test_helm_security.py has the details). Permissive TLS
# on HTTP keeps the probes plain.
TLS_CERT_MANAGER = {
    "security": {
        "acl": {"accounts": [{"accessKey": "replay-reader", "secretKey": "a-long-secret"}]},
        "tls": {
            "httpMode": "permissive",
            "remotingMode": "enforcing",
            "mutual": True,
            "certManager": {"enabled": True, "issuerRef": {"name": "internal-ca"}},
        },
    }
}
TLS_EXISTING = {
    "security": {
        "acl": {"existingSecret": "rmq-accounts"},
        "tls": {"remotingMode": "enforcing", "existingSecret": "rmq-tls"},
    }
}
VALUE_SETS = {
    "statefulset-defaults": {},
    "statefulset-cluster-replay": CLUSTER_REPLAY,
    "statefulset-s3-irsa": merged(S3, IRSA, MONITOR),
    "statefulset-s3-keys": merged(S3, KEYS, {"broker": {"replicas": 2}}),
    "statefulset-pvc": merged(
        {"broker": {"persistence": {"enabled": False}}, "data": {"persistence": {"enabled": True}}}
    ),
    "statefulset-extras": EXTRAS,
    "sidecar-defaults": SIDECAR,
    "sidecar-extras": merged(SIDECAR, EXTRAS),
    "sidecar-s3-irsa": merged(SIDECAR, S3, IRSA, MONITOR, COMMUNITY),
    "sidecar-s3-keys": merged(SIDECAR, S3, KEYS, COMMUNITY),
    "statefulset-tls-cert-manager": merged(MONITOR, TLS_CERT_MANAGER),
    "sidecar-tls-existing-secrets": merged(SIDECAR, COMMUNITY, TLS_EXISTING),
}
PATCH_SETS = {
    "patch-defaults": PATCH,
    "patch-s3-irsa": merged(PATCH, S3, IRSA, COMMUNITY),
    "patch-s3-keys": merged(PATCH, S3, KEYS, COMMUNITY),
}


# --- rendering ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rendered:
    """One render of the chart: its manifests as dicts, and NOTES.txt."""

    docs: list[dict[str, Any]]
    notes: str

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [d for d in self.all(kind) if name is None or d["metadata"]["name"] == name]
        assert len(found) == 1, f"{kind} {name}: {[d['metadata']['name'] for d in found]}"
        return found[0]

    def pod_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self.one("StatefulSet")["spec"]["template"]["spec"]
        return spec

    def container(self, name: str = "rmq-tiered") -> dict[str, Any]:
        (found,) = [c for c in self.pod_spec()["containers"] if c["name"] == name]
        return dict(found)

    def conf(self, configmap: str, key: str) -> dict[str, str]:
        text = self.one("ConfigMap", configmap)["data"][key]
        return properties(text)


def properties(text: str) -> dict[str, str]:
    """A generated properties file: ``key=value`` lines, ``#`` comments; duplicates refused."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"not key=value: {line!r}"
        assert key not in out, f"{key} written twice"
        out[key] = value
    return out


def parse_manifests(files: dict[str, str]) -> list[dict[str, Any]]:
    docs = []
    for name, text in sorted(files.items()):
        if not name.endswith(".yaml"):
            continue
        for part in re.split(r"^---[ \t]*$", text, flags=re.MULTILINE):
            body = "\n".join(ln for ln in part.splitlines() if not ln.lstrip().startswith("#"))
            if body.strip():
                docs.append(helm.values_from_yaml(part))
    return docs


def render(chart: helm.Chart, values: dict[str, Any]) -> Rendered:
    files = chart.render(values, name=RELEASE, namespace=NAMESPACE)
    notes = next((t for n, t in files.items() if n.endswith("NOTES.txt")), "")
    return Rendered(parse_manifests(files), notes)


CRD_KINDS = ("ServiceMonitor", "PrometheusRule", "Certificate")


def kube_validate(docs: list[dict[str, Any]], tmp_path: Path) -> None:
    """``kubernetes-validate --strict`` on ``docs``; only the ServiceMonitor, PrometheusRule and
    cert-manager Certificate (CRDs it has no schema for) may be unvalidated, and every other
    document must pass for every version."""
    tool = shutil.which("kubernetes-validate", path=str(Path(sys.executable).parent))
    assert tool, "kubernetes-validate is not installed in this venv: pip install -e '.[helm]'"
    manifest = tmp_path / "rendered.yaml"
    manifest.write_text("\n---\n".join(json.dumps(d) for d in docs))
    versions = [arg for v in K8S_VERSIONS for arg in ("-k", v)]
    run = subprocess.run(
        [tool, "--strict", *versions, str(manifest)], capture_output=True, text=True, check=False
    )
    lines = run.stdout.splitlines()
    bad = [
        ln
        for ln in lines
        if not ln.startswith("INFO") and not any(f"kind {k}" in ln for k in CRD_KINDS)
    ]
    assert run.returncode == 0 and not bad, run.stdout + run.stderr
    expected = sum(d["kind"] not in CRD_KINDS for d in docs) * len(K8S_VERSIONS)
    assert sum(" passed for resource " in ln for ln in lines) == expected, run.stdout


# --- strategic merge of the sidecar patch into a community-chart broker --------------------------


# patchMergeKey of the Kubernetes list fields the patch can reach
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "imagePullSecrets": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
}


def strategic_merge(base: Any, patch: Any, field: str = "") -> Any:
    """Kubernetes strategic merge for what the patch touches: maps merge recursively, the lists
    of ``MERGE_KEYS`` merge item by item on their key, other values are replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            out[key] = strategic_merge(base[key], value, key) if key in base else value
        return out
    if isinstance(base, list) and isinstance(patch, list) and field in MERGE_KEYS:
        key = MERGE_KEYS[field]
        items = {x[key]: x for x in base}
        for x in patch:
            items[x[key]] = strategic_merge(items[x[key]], x) if x[key] in items else x
        return list(items.values())
    return patch


def community_broker(
    mount_path: str, sub_path: str, name: str = "rocketmq-broker-master"
) -> dict[str, Any]:
    """A broker StatefulSet laid out like the common community charts: container "broker",
    store PVC "broker-storage" mounted with a subPath, uid/fsGroup 3000."""
    labels = {"app.kubernetes.io/name": "rocketmq", "component": "broker"}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "serviceName": "",
            "replicas": 2,
            "selector": {"matchLabels": dict(labels)},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "securityContext": {"runAsUser": 3000, "fsGroup": 3000},
                    "containers": [
                        {
                            "name": "broker",
                            "image": "apache/rocketmq:5.3.2",
                            "command": ["sh", "mqbroker"],
                            "ports": [{"name": "main", "containerPort": 10911}],
                            "volumeMounts": [
                                {
                                    "name": "broker-storage",
                                    "mountPath": mount_path,
                                    "subPath": sub_path,
                                },
                                {
                                    "name": "broker-storage",
                                    "mountPath": "/home/rocketmq/logs",
                                    "subPath": "rocketmq-broker/logs",
                                },
                            ],
                        }
                    ],
                },
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "broker-storage"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "8Gi"}},
                    },
                }
            ],
        },
    }


def target(values: dict[str, Any]) -> str:
    """The StatefulSet the sidecar mode's Component patches."""
    return str(values.get("sidecar", {}).get("targetStatefulSet", "rocketmq-broker"))


def patched(chart: helm.Chart, values: dict[str, Any], base: dict[str, Any]) -> Rendered:
    """The Component rendered from ``values`` applied to ``base``, as kustomize would."""
    (component,) = render(chart, values).docs
    assert component["apiVersion"] == "kustomize.config.k8s.io/v1alpha1"
    assert component["kind"] == "Component"
    (entry,) = component["patches"]
    name = target(values)
    assert entry["target"] == {
        "group": "apps",
        "version": "v1",
        "kind": "StatefulSet",
        "name": name,
    }
    patch = helm.values_from_yaml(entry["patch"])
    assert (patch["apiVersion"], patch["kind"], patch["metadata"]) == (
        "apps/v1",
        "StatefulSet",
        {"name": name},
    )
    assert base["metadata"]["name"] == name
    return Rendered([strategic_merge(base, patch)], "")


# --- lint and render in both modes ---------------------------------------------------------------


@pytest.mark.parametrize(
    "values", [*VALUE_SETS.values(), *PATCH_SETS.values()], ids=[*VALUE_SETS, *PATCH_SETS]
)
def test_lint_is_clean(values: dict[str, Any]) -> None:
    report = helm.lint(CHART, values, strict=True, kube_version="v1.34.0")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_lint_reports_bad_values() -> None:
    report = helm.lint(CHART, {"http": {"port": -1}}, strict=True, kube_version="v1.34.0")
    assert any("/http/port" in e for e in report["errors"])


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS)
def test_every_manifest_is_valid_kubernetes(
    chart: helm.Chart, values: dict[str, Any], tmp_path: Path
) -> None:
    rendered = render(chart, values)
    kube_validate(rendered.docs, tmp_path)
    for doc in rendered.docs:
        assert doc["metadata"]["namespace"] == NAMESPACE
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE


@pytest.mark.parametrize("layout", ["/home/rocketmq/store", "/root/store"])
@pytest.mark.parametrize("values", PATCH_SETS.values(), ids=PATCH_SETS)
def test_patched_community_broker_is_valid_kubernetes(
    chart: helm.Chart, values: dict[str, Any], layout: str, tmp_path: Path
) -> None:
    sub_path = values.get("broker", {}).get("store", {}).get("subPath", "")
    values = merged(values, {"broker": {"store": {"mountPath": layout}}})
    base = community_broker(layout, sub_path or "store/rocketmq-broker", target(values))
    result = patched(chart, values, base)
    kube_validate(result.docs, tmp_path)
    assert result.container("broker") == base["spec"]["template"]["spec"]["containers"][0]
    assert [c["name"] for c in result.pod_spec()["containers"]] == ["broker", "rmq-tiered"]
    volumes = [v["name"] for v in result.pod_spec()["volumes"]]
    assert volumes == ["rmq-tiered-config", "rmq-tiered-data", "rmq-tiered-tmp", "rmq-tiered-acl"]
    template = result.one("StatefulSet")["spec"]["template"]
    selector = result.one("StatefulSet")["spec"]["selector"]["matchLabels"]
    assert selector.items() <= template["metadata"]["labels"].items()
    assert (
        template["spec"]["securityContext"] == base["spec"]["template"]["spec"]["securityContext"]
    )


def test_objects_rendered_per_mode(chart: helm.Chart) -> None:
    def kinds(values: dict[str, Any]) -> list[tuple[str, str]]:
        return sorted((d["kind"], d["metadata"]["name"]) for d in render(chart, values).docs)

    assert kinds({}) == [
        ("ConfigMap", f"{FULLNAME}-broker"),
        ("ConfigMap", f"{FULLNAME}-config"),
        ("Secret", f"{FULLNAME}-acl"),
        ("Service", FULLNAME),
        ("Service", f"{FULLNAME}-headless"),
        ("ServiceAccount", FULLNAME),
        ("StatefulSet", FULLNAME),
    ]
    assert kinds(merged(SIDECAR, KEYS, MONITOR)) == [
        ("ConfigMap", f"{FULLNAME}-config"),
        ("ConfigMap", f"{FULLNAME}-dashboard"),
        ("PrometheusRule", FULLNAME),
        ("Secret", f"{FULLNAME}-acl"),
        ("Secret", f"{FULLNAME}-s3"),
        ("Service", FULLNAME),
        ("ServiceAccount", FULLNAME),
        ("ServiceMonitor", FULLNAME),
    ]
    assert kinds(PATCH) == [("Component", f"{FULLNAME}-sidecar")]
    assert "--set sidecar.emit=component" in render(chart, SIDECAR).notes


# --- configuration the sidecar reads -------------------------------------------------------------


def sidecar_inputs(rendered: Rendered) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """The files the sidecar is started with (``--config`` order) and its RMQ_TIERED_* env."""
    files = {"tiered.conf": rendered.conf(f"{FULLNAME}-config", "tiered.conf")}
    args = rendered.container()["args"]
    if "/etc/rocketmq/broker.conf" in args:
        files = {"broker.conf": rendered.conf(f"{FULLNAME}-broker", "broker.conf"), **files}
    env = {
        e["name"]: e.get("value", "from-a-secret")
        for e in rendered.container()["env"]
        if e["name"].startswith("RMQ_TIERED_")
    }
    return files, env


def resources_and_pod(chart: helm.Chart, values: dict[str, Any]) -> Rendered:
    """Statefulset mode as rendered; sidecar mode as its objects plus its patch applied to a
    community-chart broker (what runs in the cluster)."""
    rendered = render(chart, values)
    if values.get("mode") != "sidecar":
        return rendered
    store = merged(chart.values["broker"]["store"], values.get("broker", {}).get("store", {}))
    base = community_broker(store["mountPath"], store["subPath"], target(values))
    pod = patched(chart, merged(values, {"sidecar": {"emit": "component"}}), base)
    return Rendered(rendered.docs + pod.docs, rendered.notes)


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS)
def test_every_key_written_is_a_sidecar_or_broker_key(
    chart: helm.Chart, values: dict[str, Any]
) -> None:
    files, env = sidecar_inputs(resources_and_pod(chart, values))
    for name, props in files.items():
        unknown = set(props) - MODEL_KEYS - KNOWN_BROKER_KEYS
        assert not unknown, f"{name} writes keys tiered.config does not know: {sorted(unknown)}"
    tiered_keys = set(files["tiered.conf"]) | {k.removeprefix("RMQ_TIERED_") for k in env}
    unknown = tiered_keys - MODEL_KEYS
    assert not unknown, f"sidecar keys missing from TieredConfig: {sorted(unknown)}"


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS)
def test_rendered_configuration_loads(
    chart: helm.Chart, values: dict[str, Any], tmp_path: Path
) -> None:
    files, env = sidecar_inputs(resources_and_pod(chart, values))
    paths = []
    for name, props in files.items():
        paths.append(tmp_path / name)
        paths[-1].write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    env = {
        k: v.replace("$(POD_INDEX)", "0").replace("$(POD_IP)", "10.1.2.3") for k, v in env.items()
    }
    cfg = load_config(paths, env=env)
    effective = cfg.as_properties()
    assert effective["tieredHttpHost"] == "0.0.0.0"
    assert effective["tieredHttpPort"] == "8081"
    remoting = merged(chart.values["remoting"], values.get("remoting", {}))
    assert cfg.tiered_remoting_enable is remoting["enabled"]
    assert (cfg.tiered_remoting_host, cfg.tiered_remoting_port) == ("0.0.0.0", remoting["port"])
    assert cfg.tiered_remoting_advertised_address == f"10.1.2.3:{remoting['port']}"
    assert ";".join(cfg.tiered_remoting_namesrv_addr) == remoting["namesrvAddr"]
    assert list(cfg.tiered_remoting_peers) == remoting["peers"]
    assert effective["tieredDataDir"] == "/var/lib/rmq-tiered"
    assert cfg.broker_id == 0 and cfg.uploads
    for key, value in values.get("config", {}).items():
        assert effective[key] == str(value), key
    broker = merged(chart.values["broker"], values.get("broker", {}))
    assert cfg.broker_name == broker["name"].replace("$(POD_INDEX)", "0")
    assert str(cfg.store_path_root_dir) == broker["store"]["mountPath"]


def test_numbers_are_written_as_properties(chart: helm.Chart) -> None:
    values = merged(
        S3,
        {
            "broker": {"mappedFileSizeCommitLog": 1073741824},
            "config": {"tieredStoreCommitLogMaxSize": 10737418240, "tieredStorageLevel": 2},
        },
    )
    conf = render(chart, values).conf(f"{FULLNAME}-config", "tiered.conf")
    assert conf["mappedFileSizeCommitLog"] == "1073741824"
    assert conf["tieredStoreCommitLogMaxSize"] == "10737418240"
    assert conf["readAheadCacheSizeThresholdRate"] == "0.25"
    assert conf["tieredStorageLevel"] == "2"


def test_broker_conf_of_the_full_statefulset(chart: helm.Chart) -> None:
    values = {"broker": {"namesrvAddr": "ns-0.ns:9876;ns-1.ns:9876", "config": {"deleteWhen": 4}}}
    rendered = render(chart, values)
    conf = rendered.conf(f"{FULLNAME}-broker", "broker.conf")
    assert conf["namesrvAddr"] == "ns-0.ns:9876;ns-1.ns:9876"
    assert conf["storePathRootDir"] == "/home/rocketmq/store"
    assert (conf["brokerName"], conf["brokerId"], conf["deleteWhen"]) == ("broker-a", "0", "4")
    broker = rendered.container("broker")
    assert broker["image"] == "apache/rocketmq:5.3.2"
    assert {"name": "NAMESRV_ADDR", "value": conf["namesrvAddr"]} in broker["env"]


# --- the sidecar container: read-only store, non-root, probes ------------------------------------


def store_mount(container: dict[str, Any], volume: str) -> dict[str, Any]:
    (mount,) = [
        m
        for m in container["volumeMounts"]
        if m["name"] == volume and "logs" not in (m.get("subPath", "") + m["mountPath"])
    ]
    return dict(mount)


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS)
def test_sidecar_is_locked_down(chart: helm.Chart, values: dict[str, Any]) -> None:
    rendered = resources_and_pod(chart, values)
    pod, sidecar = rendered.pod_spec(), rendered.container()
    statefulset = rendered.one("StatefulSet")
    volume = values.get("broker", {}).get("store", {}).get("volumeName", "broker-storage")

    # the broker store: read-only, the same volume and subPath the broker writes
    mount = store_mount(sidecar, volume)
    broker_mount = store_mount(rendered.container("broker"), volume)
    assert mount["readOnly"] is True
    assert not broker_mount.get("readOnly", False)
    assert mount.get("subPath", "") == broker_mount.get("subPath", "")
    assert mount["mountPath"] == broker_mount["mountPath"]
    claims = [c["metadata"]["name"] for c in statefulset["spec"].get("volumeClaimTemplates", [])]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volume in volumes or volume in claims

    # a read-only root filesystem; the data dir and /tmp are the only writable mounts
    conf = rendered.conf(f"{FULLNAME}-config", "tiered.conf")
    writable = {m["mountPath"]: m["name"] for m in sidecar["volumeMounts"] if not m.get("readOnly")}
    extra = {
        m["mountPath"]: m["name"] for m in values.get("sidecar", {}).get("extraVolumeMounts", [])
    }
    assert writable == {conf["tieredDataDir"]: "rmq-tiered-data", "/tmp": "rmq-tiered-tmp", **extra}
    assert "rmq-tiered-data" in volumes or "rmq-tiered-data" in claims
    assert conf["storePathRootDir"] == mount["mountPath"]

    # non-root, as the broker's uid/gid; nothing to escalate to
    security = sidecar["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["runAsNonRoot"] is True
    assert security["runAsUser"] == 3000 and security["runAsGroup"] == 3000
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    if values.get("mode") != "sidecar":
        assert pod["securityContext"]["fsGroup"] == 3000
        assert pod["securityContext"]["runAsUser"] == 3000

    # probes on the named HTTP port, which is tieredHttpPort; the Service reaches it, and not the
    # replay endpoint's port unless asked (it serves every message to whoever reaches it)
    port, replay = sidecar["ports"]
    assert (port["name"], str(port["containerPort"])) == ("http", conf["tieredHttpPort"])
    assert (replay["name"], str(replay["containerPort"])) == (
        "remoting",
        conf["tieredRemotingPort"],
    )
    assert sidecar["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert sidecar["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert conf["tieredHttpHost"] == "0.0.0.0"
    service = rendered.one("Service", FULLNAME)
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"]
    pod_labels = statefulset["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert sidecar["resources"]["limits"]["memory"]


def test_the_replay_port_is_on_the_service_only_when_asked(chart: helm.Chart) -> None:
    exposed = render(chart, {"remoting": {"service": {"enabled": True, "port": 9876}}})
    ports = {p["name"]: p for p in exposed.one("Service", FULLNAME)["spec"]["ports"]}
    assert (ports["remoting"]["port"], ports["remoting"]["targetPort"]) == (9876, "remoting")
    off = render(chart, {"remoting": {"enabled": False, "service": {"enabled": True, "port": 1}}})
    assert [p["name"] for p in off.container()["ports"]] == ["http"]
    assert [p["name"] for p in off.one("Service", FULLNAME)["spec"]["ports"]] == ["http"]


def test_sidecar_runs_as_the_configured_broker_user(chart: helm.Chart) -> None:
    rendered = render(chart, {"broker": {"uid": 1001, "gid": 1002}})
    security = rendered.container()["securityContext"]
    assert (security["runAsUser"], security["runAsGroup"]) == (1001, 1002)
    assert rendered.pod_spec()["securityContext"]["fsGroup"] == 1002


# --- credentials ---------------------------------------------------------------------------------


def secret_env(container: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {
        e["name"]: (e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
        for e in container["env"]
        if "secretKeyRef" in e.get("valueFrom", {})
    }


def s3_secrets(rendered: Rendered) -> list[dict[str, Any]]:
    """The Secrets the chart makes for S3 keys (the accounts' Secret is another one)."""
    return [s for s in rendered.all("Secret") if s["metadata"]["name"] != f"{FULLNAME}-acl"]


@pytest.mark.parametrize("mode", [{}, SIDECAR])
def test_keys_come_from_a_secret(chart: helm.Chart, mode: dict[str, Any]) -> None:
    rendered = resources_and_pod(chart, merged(mode, S3, KEYS))
    secret = rendered.one("Secret", f"{FULLNAME}-s3")
    assert base64.b64decode(secret["data"]["secretKey"]).decode() == SECRET
    assert secret_env(rendered.container()) == {
        "RMQ_TIERED_objectStoreAccessKey": (secret["metadata"]["name"], "accessKey"),
        "RMQ_TIERED_objectStoreSecretKey": (secret["metadata"]["name"], "secretKey"),
    }
    for configmap in rendered.all("ConfigMap"):
        assert SECRET not in json.dumps(configmap)
        assert "AKIAEXAMPLE" not in json.dumps(configmap)


def test_keys_from_an_existing_secret(chart: helm.Chart) -> None:
    values = merged(S3, {"s3Credentials": {"existingSecret": "aws", "secretKeyKey": "sk"}})
    rendered = render(chart, values)
    assert s3_secrets(rendered) == []
    assert secret_env(rendered.container())["RMQ_TIERED_objectStoreSecretKey"] == ("aws", "sk")


@pytest.mark.parametrize("mode", [{}, SIDECAR])
def test_irsa_uses_an_annotated_service_account(chart: helm.Chart, mode: dict[str, Any]) -> None:
    rendered = resources_and_pod(chart, merged(mode, S3, IRSA))
    account = rendered.one("ServiceAccount")
    annotation = account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
    assert annotation == IRSA["serviceAccount"]["irsaRoleArn"]
    assert rendered.pod_spec()["serviceAccountName"] == account["metadata"]["name"]
    assert s3_secrets(rendered) == [] and secret_env(rendered.container()) == {}


def test_service_monitor_scrapes_the_api_service(chart: helm.Chart) -> None:
    rendered = render(
        chart,
        merged(MONITOR, {"metrics": {"serviceMonitor": {"labels": {"release": "prometheus"}}}}),
    )
    monitor = rendered.one("ServiceMonitor")
    service = rendered.one("Service", FULLNAME)
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    headless = rendered.one("Service", f"{FULLNAME}-headless")
    assert (
        not monitor["spec"]["selector"]["matchLabels"].items()
        <= headless["metadata"]["labels"].items()
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["port"] in [p["name"] for p in service["spec"]["ports"]]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}


# --- the documented kustomize / post-renderer example -------------------------------------------


def test_post_renderer_example(chart: helm.Chart, tmp_path: Path) -> None:
    kustomization = helm.values_from_yaml((EXAMPLES / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["broker.yaml", "tiered.yaml"]
    assert kustomization["components"] == ["sidecar"]
    script = EXAMPLES / "post-render.sh"
    assert script.stat().st_mode & 0o111
    subprocess.run(["sh", "-n", str(script)], check=True)
    for name in ("kustomization.yaml", "tiered.yaml", "sidecar/kustomization.yaml"):
        assert name in script.read_text()
    plugin = helm.values_from_yaml((EXAMPLES / "plugin.yaml").read_text())
    assert plugin["type"] == "postrenderer/v1"
    (command,) = plugin["runtimeConfig"]["platformCommand"]
    assert command["command"] == "${HELM_PLUGIN_DIR}/post-render.sh"
    assert "examples/" in (CHART / ".helmignore").read_text().split()
    assert not [f for f in chart.files if f["name"].startswith("examples/")]

    values = helm.values_from_yaml((EXAMPLES / "values-sidecar.yaml").read_text())
    chart.validate_schema(values)
    store = values["broker"]["store"]
    base = community_broker(store["mountPath"], store["subPath"])
    resources = render(chart, values)
    pod = patched(chart, merged(values, {"sidecar": {"emit": "component"}}), base)
    kube_validate(resources.docs + pod.docs, tmp_path)
    service = resources.one("Service", FULLNAME)
    labels = pod.one("StatefulSet")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()


def test_alert_rules_and_dashboard_ship_when_asked(chart: helm.Chart) -> None:
    root = Path(__file__).resolve().parents[2]
    values = {
        "metrics": {
            "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}},
            "grafanaDashboard": {"enabled": True},
        }
    }
    rendered = render(chart, values)
    rule = rendered.one("PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    rules = yaml.safe_load((root / "config" / "prometheus-rules.yml").read_text())
    assert rule["spec"] == {"groups": rules["groups"]}
    board = rendered.one("ConfigMap", f"{FULLNAME}-dashboard")
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads(board["data"]["rocketmq-tiered.json"])
    assert shipped == json.loads((root / "config" / "grafana-dashboard.json").read_text())
    off = render(chart, {})
    assert not [d for d in off.docs if d["kind"] == "PrometheusRule"]
    assert not [d for d in off.docs if d["metadata"]["name"].endswith("-dashboard")]


# --- the read replica (replica.enabled) ----------------------------------------------------------

REPLICA = {
    "replica": {"enabled": True, "refreshMs": 15000, "peers": ["replica-b:10941"]},
    "remoting": {"namesrvAddr": "replay-ns:9876", "peers": ["broker-b-0:10941"]},  # the writers'
}


def replica_pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    assert deployment["metadata"]["name"] == f"{FULLNAME}-replica"
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize("mode", [{}, SIDECAR], ids=["statefulset", "sidecar"])
def test_the_replica_serves_the_tier_with_no_broker_store(
    chart: helm.Chart, mode: dict[str, Any], tmp_path: Path
) -> None:
    rendered = render(chart, merged(mode, KEYS, REPLICA))
    kube_validate(rendered.docs, tmp_path)
    pod = replica_pod(rendered.docs)
    (container,) = pod["containers"]
    assert container["args"] == ["serve", "--config", "/etc/rmq-tiered/tiered.conf"]
    assert [v["name"] for v in pod["volumes"]] == [
        "rmq-tiered-config", "rmq-tiered-data", "rmq-tiered-tmp", "rmq-tiered-acl",
    ]  # fmt: skip
    assert pod["volumes"][1] == {"name": "rmq-tiered-data", "emptyDir": {}}  # never the writer's
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert not any("store" in m for m in mounts), mounts  # no broker store
    deployment = next(d for d in rendered.docs if d["kind"] == "Deployment")
    labels = deployment["spec"]["selector"]["matchLabels"]
    services = {d["metadata"]["name"]: d for d in rendered.docs if d["kind"] == "Service"}
    assert services[f"{FULLNAME}-replica"]["spec"]["selector"] == labels
    assert services[FULLNAME]["spec"]["selector"].items() - labels.items()  # not the writer's

    conf = next(d for d in rendered.docs if d["metadata"]["name"] == f"{FULLNAME}-config")
    path = tmp_path / "tiered.conf"
    props = properties(conf["data"]["tiered.conf"])
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    env = {
        e["name"]: e.get("value", "from-a-secret").replace("$(POD_IP)", "10.1.2.3")
        for e in container["env"]
        if e["name"].startswith("RMQ_TIERED_")
    }
    cfg = load_config([path], env=env)
    assert cfg.tiered_replica_refresh_ms == 15000
    assert cfg.broker_name == chart.values["broker"]["name"].replace("$(POD_INDEX)", "0")
    assert (cfg.tiered_remoting_peers, cfg.tiered_remoting_namesrv_addr) == (
        ("replica-b:10941",),
        (),
    )


def test_no_replica_unless_asked(chart: helm.Chart) -> None:
    assert not [d for d in render(chart, KEYS).docs if d["kind"] == "Deployment"]
