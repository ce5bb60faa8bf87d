"""values.schema.json of the Helm chart: values it must reject, and its ``config`` block
checked key by key against :class:`tiered.config.TieredConfig` (names, integer bounds, choices)."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest

from tiered.config import PROVIDER_NAMES
from tiered.config import TieredConfig
from tiered.config.broker_keys import KNOWN_BROKER_KEYS
from tiered.errors import ConfigError
from tiered.testing.helm_values import merged

RELEASE, NAMESPACE = "rmq", "mq"
MODEL_KEYS = frozenset(TieredConfig.model_keys())
# Keys the chart sets from structured values; the schema's config block must not offer them.
MANAGED_KEYS = frozenset(
    {
        "storePathRootDir",
        "brokerClusterName",
        "brokerName",
        "brokerId",
        "brokerRole",
        "mappedFileSizeCommitLog",
        "mappedFileSizeConsumeQueue",
        "tieredDataDir",
        "tieredHttpHost",
        "tieredHttpPort",
        "tieredRemotingEnable",
        "tieredRemotingHost",
        "tieredRemotingPort",
        "tieredRemotingAdvertisedAddress",
        "tieredRemotingNamesrvAddr",
        "tieredRemotingPeers",
        "objectStoreAccessKey",
        "objectStoreSecretKey",
        # from security.*
        "tieredAclEnable",
        "tieredAclFile",
        "tieredHttpMetricsAuth",
        "tieredTlsCertFile",
        "tieredTlsKeyFile",
        "tieredTlsClientCaFile",
        "tieredHttpTlsMode",
        "tieredRemotingTlsMode",
    }
)
S3 = {"config": {"tieredBackendServiceProvider": "s3", "objectStoreBucket": "rocketmq-tiered"}}
KEYS = {"s3Credentials": {"accessKey": "AKIAEXAMPLE", "secretKey": "SECRET"}}
ACCOUNT = {"accessKey": "reader1", "secretKey": "a-long-secret"}


# --- the schema's config block against TieredConfig ---------------------------------------------


def config_schema(chart: helm.Chart) -> dict[str, Any]:
    assert chart.schema is not None
    props: dict[str, Any] = chart.schema["properties"]["config"]["properties"]
    return props


def test_schema_offers_every_sidecar_key_but_the_managed_ones(chart: helm.Chart) -> None:
    assert MANAGED_KEYS <= MODEL_KEYS | KNOWN_BROKER_KEYS
    assert set(config_schema(chart)) == MODEL_KEYS - MANAGED_KEYS


def test_schema_integer_bounds_match_the_model(chart: helm.Chart) -> None:
    def model_accepts(key: str, value: int) -> bool:
        try:
            TieredConfig.from_properties({key: str(value)})
        except ConfigError:
            return False
        return True

    def schema_accepts(key: str, value: int) -> bool:
        try:
            chart.validate_schema({"config": {key: value}})
        except helm.HelmValuesError:
            return False
        return True

    checked = 0
    for key, prop in config_schema(chart).items():
        if prop.get("type") != "integer":
            continue
        low = prop["minimum"]
        assert model_accepts(key, low) and schema_accepts(key, low), key
        assert not model_accepts(key, low - 1) and not schema_accepts(key, low - 1), key
        if "maximum" in prop:
            high = prop["maximum"] + 1
            assert not model_accepts(key, high) and not schema_accepts(key, high), key
        checked += 1
    assert checked >= 15


def test_schema_choices_are_accepted_by_the_model(chart: helm.Chart) -> None:
    props = config_schema(chart)
    providers = props["tieredBackendServiceProvider"]["enum"]
    assert set(PROVIDER_NAMES) <= set(providers)
    for key in (
        "tieredBackendServiceProvider",
        "tieredMetadataServiceProvider",
        "tieredStoreDispatchStartPolicy",
        "tieredMetricsDetail",
    ):
        for choice in props[key]["enum"]:
            extra = {"tieredStoreFsspecUrl": "memory://x", "objectStoreBucket": "b"}
            TieredConfig.from_properties({key: choice, **extra})
    for choice in props["tieredStorageLevel"]["anyOf"][0]["enum"]:
        TieredConfig.from_properties({"tieredStorageLevel": choice})


# --- values that must be rejected ---------------------------------------------------------------

REJECTED = {
    "bad-provider": ({"config": {"tieredBackendServiceProvider": "s4"}}, "/config/tiered"),
    "negative-http-port": ({"http": {"port": -1}}, "/http/port"),
    "http-port-too-big": ({"http": {"port": 70000}}, "/http/port"),
    "zero-service-port": ({"service": {"port": 0}}, "/service/port"),
    "s3-without-bucket": ({"config": {"tieredBackendServiceProvider": "s3"}}, "objectStoreBucket"),
    "s3-empty-bucket": (merged(S3, {"config": {"objectStoreBucket": ""}}), "objectStoreBucket"),
    "fsspec-without-url": ({"config": {"tieredBackendServiceProvider": "fsspec"}}, "FsspecUrl"),
    "bad-mode": ({"mode": "daemonset"}, "/mode"),
    "bad-emit": ({"mode": "sidecar", "sidecar": {"emit": "all"}}, "/sidecar/emit"),
    "root-uid": ({"broker": {"uid": 0}}, "/broker/uid"),
    "root-gid": ({"broker": {"gid": 0}}, "/broker/gid"),
    "unknown-config-key": ({"config": {"tieredStorageLvl": "FORCE"}}, "tieredStorageLvl"),
    "secret-in-configmap": ({"config": {"objectStoreSecretKey": "x"}}, "objectStoreSecretKey"),
    "managed-key": ({"config": {"tieredDataDir": "/data"}}, "tieredDataDir"),
    "bad-storage-level": ({"config": {"tieredStorageLevel": 5}}, "/config/tieredStorageLevel"),
    "level-lower-case": ({"config": {"tieredStorageLevel": "force"}}, "tieredStorageLevel"),
    "string-for-int": ({"config": {"tieredStoreGroupCommitCount": "many"}}, "GroupCommitCount"),
    "line-injection": (
        {"config": {"tieredStoreTopicInclude": "*\nobjectStoreSecretKey=x"}},
        "tieredStoreTopicInclude",
    ),
    "bucket-with-slash": (merged(S3, {"config": {"objectStoreBucket": "b/p"}}), "Bucket"),
    "rate-above-one": ({"config": {"readAheadCacheSizeThresholdRate": 1.5}}, "ThresholdRate"),
    "pvc-data-in-sidecar-mode": (
        {"mode": "sidecar", "data": {"persistence": {"enabled": True}}},
        "/data/persistence/enabled",
    ),
    "pod-ref-in-statefulset-mode": ({"broker": {"name": "b-$(POD_INDEX)"}}, "/broker/name"),
    "bad-broker-id": ({"mode": "sidecar", "broker": {"id": "$(POD_NAME)"}}, "/broker/id"),
    "access-key-alone": ({"s3Credentials": {"accessKey": "AK"}}, "secretKey"),
    "secret-key-alone": ({"s3Credentials": {"secretKey": "SK"}}, "accessKey"),
    "keys-and-existing-secret": (
        merged(KEYS, {"s3Credentials": {"existingSecret": "mine"}}),
        "accessKey",
    ),
    "bad-irsa-arn": ({"serviceAccount": {"irsaRoleArn": "my-role"}}, "irsaRoleArn"),
    "managed-broker-key": ({"broker": {"config": {"brokerName": "x"}}}, "'brokerName'"),
    "bad-namesrv": ({"broker": {"namesrvAddr": "nameserver"}}, "/broker/namesrvAddr"),
    "relative-mount": ({"data": {"mountPath": "data"}}, "/data/mountPath"),
    "unknown-top-level": ({"extraStuff": True}, "extraStuff"),
    # security: typos, the keys the chart now sets itself, and pairs that exclude each other
    "security-typo": ({"security": {"allowInsecur": True}}, "allowInsecur"),
    "acl-typo": ({"security": {"acl": {"enable": False}}}, "enable"),
    "tls-typo": ({"security": {"tls": {"certmanager": {"enabled": True}}}}, "certmanager"),
    "tls-mode-typo": ({"security": {"tls": {"httpMode": "strict"}}}, "/security/tls/httpMode"),
    "account-typo": (
        {"security": {"acl": {"accounts": [{"accessKey": "reader1", "secretKy": "x" * 8}]}}},
        "secretKy",
    ),
    "account-without-secret": (
        {"security": {"acl": {"accounts": [{"accessKey": "reader1"}]}}},
        "secretKey",
    ),
    "account-bad-perm": (
        {"security": {"acl": {"accounts": [ACCOUNT | {"topicPerms": ["Orders=READ"]}]}}},
        "topicPerms",
    ),
    "account-ip-allow-list": (
        {"security": {"acl": {"accounts": [ACCOUNT | {"whiteRemoteAddress": "10.*"}]}}},
        "whiteRemoteAddress",
    ),
    "accounts-and-existing-secret": (
        {"security": {"acl": {"existingSecret": "mine", "accounts": [ACCOUNT]}}},
        "/security/acl/accounts",
    ),
    "cert-manager-without-issuer": (
        {"security": {"tls": {"certManager": {"enabled": True}}}},
        "/security/tls/certManager/issuerRef/name",
    ),
    "cert-manager-and-existing-secret": (
        {
            "security": {
                "tls": {
                    "existingSecret": "mine",
                    "certManager": {"enabled": True, "issuerRef": {"name": "ca"}},
                }
            }
        },
        "/security/tls/certManager/enabled",
    ),
    "deprecated-acl-key": ({"config": {"tieredRemotingAclEnable": True}}, "RemotingAclEnable"),
    "managed-tls-key": ({"config": {"tieredHttpTlsMode": "enforcing"}}, "tieredHttpTlsMode"),
}


@pytest.mark.parametrize(("values", "where"), REJECTED.values(), ids=REJECTED)
def test_bad_values_are_rejected(chart: helm.Chart, values: dict[str, Any], where: str) -> None:
    with pytest.raises(helm.HelmValuesError) as caught:
        chart.validate_schema(values)
    assert where in str(caught.value)
    with pytest.raises(helm.HelmValuesError):
        chart.render(values, name=RELEASE, namespace=NAMESPACE)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"data": {"mountPath": "/home/rocketmq/store/tiered"}}, "overlap"),
        ({"broker": {"store": {"mountPath": "/var/lib"}}}, "overlap"),
        ({"data": {"mountPath": "/tmp/data"}}, "overlaps /tmp"),
        ({"http": {"port": 10911}}, "broker port"),
    ],
)
def test_conflicting_values_fail_the_render(
    chart: helm.Chart, values: dict[str, Any], message: str
) -> None:
    chart.validate_schema(values)  # each value is fine alone; together they are not
    with pytest.raises(helm.HelmRenderError, match=message):
        chart.render(values, name=RELEASE, namespace=NAMESPACE)
