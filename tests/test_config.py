"""Tests of ``tiered.config``: properties syntax, precedence, validation, the documented example."""

from __future__ import annotations

import pickle
import re
import socket
from pathlib import Path

import pytest

from tiered.config import BrokerRole
from tiered.config import StorageLevel
from tiered.config import TieredConfig
from tiered.config import load_config
from tiered.config import parse_properties
from tiered.config.broker_keys import KNOWN_BROKER_KEYS
from tiered.config.keyed import FieldValueError
from tiered.config.overrides import TopicOverride
from tiered.errors import ConfigError

EXAMPLE_CONF = Path(__file__).resolve().parents[1] / "config" / "tiered.conf"

# Spec section 11 (upstream code defaults), by upstream key, as the model exposes them.
SPEC_DEFAULTS: dict[str, object] = {
    "brokerClusterName": "DefaultCluster",
    "tieredStorageLevel": StorageLevel.NOT_IN_DISK,
    "messageIndexEnable": True,
    "recordGetMessageResult": False,
    "tieredStoreCommitLogMaxSize": 1073741824,
    "tieredStoreConsumeQueueMaxSize": 104857600,
    "tieredStoreIndexFileMaxHashSlotNum": 5000000,
    "tieredStoreIndexFileMaxIndexNum": 20000000,
    "tieredMetadataServiceProvider": "default",  # ...metadata.DefaultMetadataStore
    "tieredBackendServiceProvider": "memory",  # ...provider.MemoryFileSegment
    "tieredStoreDeleteFileEnable": True,
    "tieredStoreFileReservedTime": 72,
    "tieredStoreDeleteFileInterval": 3600000,
    "commitLogRollingInterval": 24,
    "commitLogRollingMinimumSize": 16777216,
    "tieredStoreGroupCommit": True,
    "tieredStoreGroupCommitTimeout": 30000,
    "tieredStoreGroupCommitCount": 4096,
    "tieredStoreGroupCommitSize": 4194304,
    "tieredStoreMaxGroupCommitCount": 10000,
    "readAheadCacheEnable": True,
    "readAheadMessageCountThreshold": 4096,
    "readAheadMessageSizeThreshold": 16777216,
    "readAheadCacheExpireDuration": 15000,
    "readAheadCacheSizeThresholdRate": 0.3,
    "tieredStoreMaxPendingLimit": 10000,
    "tieredStoreCrcCheckEnable": False,
    "tieredStoreFilePath": "",
    "objectStoreEndpoint": "",
    "objectStoreBucket": "",
    "objectStoreAccessKey": "",
    # broker keys (store MessageStoreConfig / BrokerConfig, spec 1.3)
    "brokerId": 0,
    "brokerRole": BrokerRole.ASYNC_MASTER,
    "mappedFileSizeCommitLog": 1073741824,
    "mappedFileSizeConsumeQueue": 6000000,
    "enableConsumeQueueExt": False,
    # sidecar keys
    "objectStorePrefix": "",
    "objectStoreRegion": "us-east-1",
    "objectStorePathStyle": False,
    "tieredStoreFsspecUrl": "",
}

TYPICAL_BROKER_CONF = """\
# a typical broker.conf of a 2m-2s-async cluster
brokerClusterName = ProdCluster
brokerName = broker-a
brokerId = 1
deleteWhen = 04
fileReservedTime = 48
brokerRole = SLAVE
flushDiskType = ASYNC_FLUSH
namesrvAddr = 10.0.0.1:9876;10.0.0.2:9876
listenPort = 10911
storePathRootDir = {root}
autoCreateTopicEnable = false
"""


def by_key(config: TieredConfig) -> dict[str, object]:
    """The model's values keyed by upstream key name."""
    fields = TieredConfig.model_fields
    return {str(f.validation_alias): getattr(config, name) for name, f in fields.items()}


def config_error(mapping: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as info:
        TieredConfig.from_properties(mapping)
    return str(info.value)


# --- defaults and keys ---------------------------------------------------------------------------


def test_defaults_are_the_upstream_code_defaults() -> None:
    config = load_config([], env={})
    values = by_key(config)
    assert {key: values[key] for key in SPEC_DEFAULTS} == SPEC_DEFAULTS
    assert values["storePathRootDir"] == Path.home() / "store"
    assert values["tieredDataDir"] == Path.home() / "rmq-tiered"
    assert values["brokerName"] == (socket.gethostname() or "DEFAULT_BROKER")
    assert config.object_store_secret_key.get_secret_value() == ""


def test_model_keys_are_sorted_upstream_names_and_include_the_spec_table() -> None:
    keys = TieredConfig.model_keys()
    assert keys == sorted(keys)
    assert set(SPEC_DEFAULTS) <= set(keys)
    assert {"storePathRootDir", "brokerName", "objectStoreSecretKey", "tieredDataDir"} <= set(keys)
    assert all(re.fullmatch(r"[a-z][A-Za-z0-9]+", key) for key in keys)


def test_known_broker_keys_hold_the_common_broker_conf_keys() -> None:
    common = {"namesrvAddr", "listenPort", "flushDiskType", "deleteWhen", "fileReservedTime"}
    assert common | {"brokerIP1", "autoCreateTopicEnable", "haListenPort"} <= KNOWN_BROKER_KEYS
    assert "tieredStorageLevl" not in KNOWN_BROKER_KEYS


# --- properties syntax ---------------------------------------------------------------------------


def test_parse_properties_follows_java_properties() -> None:
    text = (
        "\ufeff# comment\n"
        "! another comment\n"
        "\n"
        "   a = 1  \r\n"
        "b:2\r"
        "c 3\n"
        "d\t=\t spaced value here \n"
        "e = first \\\n"
        "      second\n"
        "f = tab\\there\\u0041\n"
        "g = keep trailing\\ \n"
        "# h = commented out\n"
        "i\n"
        "j = a\\\n"
        "  tb\n"
        "a = 4\n"
    )
    assert parse_properties(text, "t") == {
        "a": "4",
        "b": "2",
        "c": "3",
        "d": "spaced value here",
        "e": "first second",
        "f": "tab\thereA",
        "g": "keep trailing ",
        "i": "",
        "j": "atb",
    }


@pytest.mark.parametrize(
    ("text", "needle"),
    [("k = \\u12G4\n", "malformed \\uXXXX"), ("= value\n", "has no key")],
)
def test_parse_properties_errors_name_source_and_line(text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=re.escape("conf.properties:1: ")) as info:
        parse_properties(text, "conf.properties")
    assert needle in str(info.value)


# --- files, environment, overrides ---------------------------------------------------------------


def test_later_files_win_then_env_then_overrides(tmp_path: Path) -> None:
    first, second = tmp_path / "broker.conf", tmp_path / "tiered.conf"
    first.write_text("tieredStoreGroupCommitCount=100\nreadAheadCacheEnable=false\nbrokerId=3\n")
    second.write_text("tieredStoreGroupCommitCount=200\ntieredStorageLevel=NOT_IN_MEM\n")
    env = {
        "RMQ_TIERED_tieredStorageLevel": "FORCE",
        "RMQ_TIERED_brokerId": "5",
        "RMQ_TIERED_TIEREDSTOREFILERESERVEDTIME": "24",  # upper-case form of the key
        "tieredStoreGroupCommitCount": "999",  # no prefix: not ours
    }
    config = load_config([first, str(second)], env=env, overrides={"brokerId": "7"})
    assert config.tiered_store_group_commit_count == 200
    assert config.read_ahead_cache_enable is False
    assert config.tiered_storage_level is StorageLevel.FORCE
    assert config.tiered_store_file_reserved_time_hours == 24
    assert config.broker_id == 7


def test_a_single_path_is_one_file(tmp_path: Path) -> None:
    conf = tmp_path / "tiered.conf"
    conf.write_text("brokerName=solo\n")
    assert load_config(str(conf), env={}).broker_name == "solo"
    assert load_config(conf, env={}).broker_name == "solo"


def test_env_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RMQ_TIERED_tieredStorageLevel", "2")
    assert load_config([]).tiered_storage_level is StorageLevel.NOT_IN_MEM


def test_unknown_env_key_names_the_variable() -> None:
    with pytest.raises(ConfigError) as info:
        load_config([], env={"RMQ_TIERED_readAheadCacheEnabled": "true"})
    message = str(info.value)
    assert "environment variable RMQ_TIERED_readAheadCacheEnabled" in message
    assert "did you mean 'readAheadCacheEnable'?" in message


def test_typical_broker_conf_is_read_and_its_other_keys_ignored(tmp_path: Path) -> None:
    store = tmp_path / "store"
    broker_conf = tmp_path / "broker.conf"
    broker_conf.write_text(TYPICAL_BROKER_CONF.format(root=store))
    config = load_config([broker_conf], env={})
    assert config.broker_cluster_name == "ProdCluster"
    assert config.broker_name == "broker-a"
    assert config.broker_id == 1
    assert config.broker_role is BrokerRole.SLAVE
    assert config.store_path_root_dir == store
    assert config.commitlog_dirs == (store / "commitlog",)
    assert config.consume_queue_dir == store / "consumequeue"
    assert config.tiered_store_file_reserved_time_hours == 72  # fileReservedTime is the broker's


def test_unknown_key_in_a_file_names_file_line_and_suggestion(tmp_path: Path) -> None:
    conf = tmp_path / "tiered.conf"
    conf.write_text("brokerName=b\n\ntieredStorageLevl=FORCE\nbrokerNmae=x\n")
    with pytest.raises(ConfigError) as info:
        load_config([conf], env={})
    message = str(info.value)
    assert (
        f"{conf}:3: unknown key 'tieredStorageLevl' (did you mean 'tieredStorageLevel'?)" in message
    )
    assert f"{conf}:4: unknown key 'brokerNmae' (did you mean 'brokerName'?)" in message
    assert "\n" not in message


def test_unknown_key_without_a_close_match_has_no_suggestion() -> None:
    message = config_error({"zzzQqq": "1"})
    assert message.startswith("unknown key 'zzzQqq': ")
    assert "did you mean" not in message


def test_legacy_spellings_are_read_as_todays_keys(tmp_path: Path) -> None:
    conf = tmp_path / "old-broker.conf"
    conf.write_text("mapedFileSizeCommitLog=536870912\ntieredStoreFilepath=/mnt/tiered\n")
    config = load_config([conf], env={})
    assert config.mapped_file_size_commit_log_bytes == 536870912
    assert config.tiered_store_file_path == "/mnt/tiered"
    both = {"mapedFileSizeConsumeQueue": "40", "mappedFileSizeConsumeQueue": "60"}
    assert TieredConfig.from_properties(both).mapped_file_size_consume_queue_bytes == 60


def test_the_former_acl_keys_are_read_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tiered.config import loader

    monkeypatch.setattr(loader, "_warned", set())
    conf = tmp_path / "tiered.conf"
    conf.write_text("tieredRemotingAclEnable=true\ntieredRemotingAclFile=/etc/acl.yml\n")
    for _ in range(3):
        config = load_config([conf], env={})
        assert config.tiered_acl_enable and config.tiered_acl_file == "/etc/acl.yml"
    warned = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    assert len(warned) == 2  # one per key, not one per load
    assert any("rename it tieredAclEnable" in w and "tiered.conf:1" in w for w in warned)
    from_env = load_config([], env={"RMQ_TIERED_TIEREDREMOTINGACLENABLE": "true",
                                     "RMQ_TIERED_tieredAclFile": "/a.yml"})  # fmt: skip
    assert from_env.tiered_acl_enable


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"tieredHttpTlsMode": "enforcing"}, "tieredHttpTlsMode=enforcing needs tieredTlsCertFile"),
        ({"tieredRemotingTlsMode": "Permissive"}, "tieredRemotingTlsMode=permissive needs"),
        ({"tieredHttpTlsMode": "strict"}, "disabled, permissive, enforcing"),
        ({"tieredTlsClientCaFile": "/ca.pem"}, "both tieredHttpTlsMode and tieredRemotingTlsMode"),
        ({"tieredAclEnable": "true"}, "tieredAclEnable=true needs tieredAclFile"),
    ],
)
def test_tls_and_acl_keys_that_do_not_go_together(keys: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        TieredConfig.from_properties(keys)


# --- values --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "level"),
    [("DISABLE", 0), ("NOT_IN_DISK", 1), ("NOT_IN_MEM", 2), ("FORCE", 3), ("0", 0), (" 3 ", 3)],
)
def test_storage_level_accepts_names_and_numbers(value: str, level: int) -> None:
    config = TieredConfig.from_properties({"tieredStorageLevel": value})
    assert config.tiered_storage_level == level
    assert config.tiered_storage_level.check(StorageLevel.DISABLE)


def test_storage_level_check_compares_levels() -> None:
    assert StorageLevel.FORCE.check(StorageLevel.NOT_IN_MEM)
    assert not StorageLevel.NOT_IN_DISK.check(StorageLevel.NOT_IN_MEM)


@pytest.mark.parametrize(
    ("value", "provider"),
    [
        ("posix", "posix"),
        ("S3", "s3"),
        (" fsspec ", "fsspec"),
        ("org.apache.rocketmq.tieredstore.provider.PosixFileSegment", "posix"),
        ("org.apache.rocketmq.tieredstore.provider.MemoryFileSegment", "memory"),
        ("org.apache.rocketmq.tieredstore.provider.posix.PosixFileSegment", "posix"),
        ("acme_store", "acme_store"),  # third party, resolved later by the registry
    ],
)
def test_provider_names_and_java_aliases(value: str, provider: str) -> None:
    extra = {"objectStoreBucket": "b", "tieredStoreFsspecUrl": "memory://x"}
    config = TieredConfig.from_properties({"tieredBackendServiceProvider": value, **extra})
    assert config.tiered_backend_service_provider == provider


def test_metadata_provider_java_alias() -> None:
    value = "org.apache.rocketmq.tieredstore.metadata.DefaultMetadataStore"
    config = TieredConfig.from_properties({"tieredMetadataServiceProvider": value})
    assert config.tiered_metadata_service_provider == "default"
    assert "tieredMetadataServiceProvider='x.Y' is not supported" in config_error(
        {"tieredMetadataServiceProvider": "x.Y"}
    )


def test_per_topic_overrides_are_parsed_once_and_print_as_written() -> None:
    config = TieredConfig.from_properties(
        {
            "tieredStorageLevelOverrides": " Ord*:NOT_IN_MEM , Orders:FORCE,audit-*:DISABLE,",
            "tieredStoreFileReservedTimeOverrides": "Orders:720, Audit*:2160",
        }
    )
    assert config.tiered_storage_level_overrides == (
        TopicOverride("Ord*", StorageLevel.NOT_IN_MEM),
        TopicOverride("Orders", StorageLevel.FORCE),
        TopicOverride("audit-*", StorageLevel.DISABLE),
    )
    assert config.tiered_store_file_reserved_time_overrides == (
        TopicOverride("Orders", 720),
        TopicOverride("Audit*", 2160),
    )
    properties = config.as_properties()
    assert (
        properties["tieredStorageLevelOverrides"] == "Ord*:NOT_IN_MEM,Orders:FORCE,audit-*:DISABLE"
    )
    assert properties["tieredStoreFileReservedTimeOverrides"] == "Orders:720,Audit*:2160"
    assert TieredConfig.from_properties(properties) == config
    # the first match wins, case-sensitively; no match falls back
    assert config.storage_level_for("Orders") is StorageLevel.NOT_IN_MEM
    assert config.storage_level_for("audit-x") is StorageLevel.DISABLE
    assert config.storage_level_for("Audit-x") is StorageLevel.NOT_IN_DISK
    assert config.storage_level_override("other") is None
    assert config.reserved_time_hours_for("Orders", metadata_hours=24) == 720
    assert config.reserved_time_hours_for("other", metadata_hours=24) == 24
    assert config.reserved_time_hours_for("other") == 72
    assert config.longest_reserved_time_hours() == 2160
    assert config.longest_reserved_time_hours(metadata_hours=9000) == 9000
    assert TieredConfig.from_properties({}).longest_reserved_time_hours() == 72


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        (
            "tieredStorageLevelOverrides",
            "Orders:SOMETIMES",
            (
                "tieredStorageLevelOverrides='Orders:SOMETIMES' holds 'Orders:SOMETIMES'; write "
                "topic:LEVEL with LEVEL one of DISABLE, NOT_IN_DISK, NOT_IN_MEM, FORCE"
            ),
        ),
        ("tieredStorageLevelOverrides", "FORCE", "holds 'FORCE'; write topic:LEVEL"),
        ("tieredStorageLevelOverrides", "Orders:3", "holds 'Orders:3'; write topic:LEVEL"),
        (
            "tieredStoreFileReservedTimeOverrides",
            "A,B:2",
            (
                "tieredStoreFileReservedTimeOverrides='A,B:2' holds 'A'; write topic:hours, e.g. "
                "TopicA:48,Orders*:720"
            ),
        ),
        ("tieredStoreFileReservedTimeOverrides", "a b:3", "holds 'a b:3'; write topic:hours"),
        ("tieredStoreFileReservedTimeOverrides", "A:0", "holds 'A:0'; hours must be 1..2147483647"),
    ],
)
def test_bad_per_topic_overrides_name_the_entry_and_the_form(
    key: str, value: str, expected: str
) -> None:
    assert expected in config_error({key: value})


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        (
            "tieredStorageLevel",
            "SOMETIMES",
            "tieredStorageLevel='SOMETIMES' is not one of DISABLE, NOT_IN_DISK, NOT_IN_MEM, FORCE",
        ),
        ("tieredStorageLevel", "force", "did you mean 'FORCE'?"),
        ("tieredStorageLevel", "4", "tieredStorageLevel='4' is out of range (allowed: 0..3"),
        (
            "brokerId",
            "abc",
            "brokerId='abc' is not a whole number (allowed: 0..9223372036854775807)",
        ),
        ("brokerId", "", "brokerId='' is not a whole number"),
        (
            "brokerRole",
            "MASTER",
            "brokerRole='MASTER' is not one of ASYNC_MASTER, SYNC_MASTER, SLAVE",
        ),
        (
            "mappedFileSizeCommitLog",
            "0",
            "mappedFileSizeCommitLog='0' is out of range (allowed: 1..",
        ),
        ("tieredStoreGroupCommitSize", "-4", "tieredStoreGroupCommitSize='-4' is out of range"),
        ("tieredStoreCommitLogMaxSize", "1.5", "tieredStoreCommitLogMaxSize='1.5' is not a whole"),
        ("tieredStoreGroupCommitCount", "2147483648", "(allowed: 1..2147483647)"),
        ("tieredStoreMaxPendingLimit", "3", "tieredStoreMaxPendingLimit='3' is out of range"),
        (
            "readAheadCacheEnable",
            "yes",
            "readAheadCacheEnable='yes' is not a boolean (allowed: true",
        ),
        (
            "readAheadCacheSizeThresholdRate",
            "1.5",
            "'1.5' is not a fraction (allowed: a number > 0",
        ),
        ("readAheadCacheSizeThresholdRate", "NaN", "readAheadCacheSizeThresholdRate='NaN' is not"),
        ("tieredBackendServiceProvider", "com.acme.Store", "posix, memory, s3, fsspec"),
        (
            "objectStoreEndpoint",
            "minio:9000",
            "objectStoreEndpoint='minio:9000' is not an endpoint",
        ),
        ("objectStoreBucket", "bucket/prefix", "put a key prefix in objectStorePrefix"),
        ("brokerName", " ", "brokerName=' ' must not be empty"),
        ("tieredDataDir", "", "tieredDataDir='' must not be empty"),
    ],
)
def test_bad_values_name_key_value_and_what_is_allowed(key: str, value: str, expected: str) -> None:
    assert expected in config_error({key: value})


def test_bad_value_in_a_file_names_the_file_and_line(tmp_path: Path) -> None:
    conf = tmp_path / "tiered.conf"
    conf.write_text("# header\ntieredStoreGroupCommitTimeout=-1\nreadAheadCacheEnable=on\n")
    with pytest.raises(ConfigError) as info:
        load_config([conf], env={})
    message = str(info.value)
    assert f"{conf}:2: tieredStoreGroupCommitTimeout='-1' is out of range (allowed: 0.." in message
    assert f"{conf}:3: readAheadCacheEnable='on' is not a boolean" in message
    assert "\n" not in message


@pytest.mark.parametrize(("text", "expected"), [("TRUE", True), ("False", False), (" true", True)])
def test_booleans_are_true_or_false_in_any_case(text: str, expected: bool) -> None:
    assert (
        TieredConfig.from_properties({"objectStorePathStyle": text}).object_store_path_style
        is expected
    )


def test_commitlog_dirs_and_cq_file_size() -> None:
    config = TieredConfig.from_properties(
        {
            "storePathRootDir": "/data/store",
            "storePathCommitLog": "/disk1/commitlog, /disk2/commitlog",
            "mappedFileSizeConsumeQueue": "6000001",
        }
    )
    assert config.commitlog_dirs == (Path("/disk1/commitlog"), Path("/disk2/commitlog"))
    assert config.effective_cq_file_size_bytes == 6000020
    assert config.mapped_file_size_consume_queue_bytes == 6000001
    assert TieredConfig.from_properties({}).effective_cq_file_size_bytes == 6000000


def test_paths_expand_the_home_directory() -> None:
    config = TieredConfig.from_properties({"storePathRootDir": "~/broker/store"})
    assert config.store_path_root_dir == Path.home() / "broker" / "store"
    assert config.checkpoint_file == Path.home() / "broker" / "store" / "checkpoint"


# --- rules across keys ---------------------------------------------------------------------------


def test_tiered_data_dir_inside_the_broker_store_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    message = config_error({"storePathRootDir": str(store), "tieredDataDir": str(store / "tiered")})
    assert f"tieredDataDir='{store / 'tiered'}' is inside the broker store" in message
    assert f"storePathRootDir='{store}'" in message
    assert "set tieredDataDir to a directory outside it" in message
    assert "tieredDataDir=" in config_error(
        {"storePathRootDir": str(store), "tieredDataDir": f"{store}/x/../."}
    )


def test_tiered_data_dir_inside_a_separate_commitlog_dir_is_refused(tmp_path: Path) -> None:
    mapping = {
        "storePathRootDir": str(tmp_path / "store"),
        "storePathCommitLog": f"{tmp_path / 'cl1'},{tmp_path / 'cl2'}",
        "tieredDataDir": str(tmp_path / "cl2" / "sidecar"),
    }
    assert f"storePathCommitLog='{tmp_path / 'cl2'}'" in config_error(mapping)


def test_tiered_data_dir_beside_the_store_is_accepted(tmp_path: Path) -> None:
    mapping = {"storePathRootDir": str(tmp_path / "store"), "tieredDataDir": str(tmp_path / "st")}
    assert TieredConfig.from_properties(mapping).tiered_data_dir == tmp_path / "st"


def test_tiered_data_dir_reached_through_a_symlink_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (tmp_path / "link").symlink_to(store)
    mapping = {"storePathRootDir": str(store), "tieredDataDir": str(tmp_path / "link" / "t")}
    assert "is inside the broker store" in config_error(mapping)


def test_posix_base_dir_inside_the_store_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    mapping = {
        "storePathRootDir": str(store),
        "tieredBackendServiceProvider": "posix",
        "tieredStoreFilePath": str(store / "tiered"),
    }
    assert "tieredStoreFilePath=" in config_error(mapping)


def test_s3_needs_a_bucket_and_fsspec_a_url() -> None:
    assert "set objectStoreBucket" in config_error({"tieredBackendServiceProvider": "s3"})
    assert "set it to a base URL" in config_error({"tieredBackendServiceProvider": "fsspec"})
    config = TieredConfig.from_properties(
        {"tieredBackendServiceProvider": "s3", "objectStoreBucket": "tiered-data"}
    )
    assert config.object_store_bucket == "tiered-data"


def test_index_file_must_fit_the_java_format() -> None:
    message = config_error({"tieredStoreIndexFileMaxIndexNum": "100000000"})
    assert "index file of 3240000028 bytes" in message


def test_secret_is_never_shown() -> None:
    config = TieredConfig.from_properties({"objectStoreSecretKey": "hunter2"})
    assert config.object_store_secret_key.get_secret_value() == "hunter2"
    assert "hunter2" not in repr(config)
    assert "hunter2" not in str(config.as_properties())
    message = config_error({"objectStoreSecretKey": "hunter2", "objectStoreBucket": "a b"})
    assert "hunter2" not in message


# --- the model object ----------------------------------------------------------------------------


def test_model_is_frozen() -> None:
    config = TieredConfig.from_properties({})
    with pytest.raises(AttributeError, match="frozen"):
        config.broker_id = 3
    with pytest.raises(AttributeError, match="frozen"):
        del config.broker_id


def test_direct_construction_validates_every_field() -> None:
    with pytest.raises(FieldValueError) as info:
        TieredConfig(broker_id="x", tieredStorageLevel="LOUD", no_such_field=1)
    assert [p.key for p in info.value.problems] == [
        "brokerId",
        "tieredStorageLevel",
        "no_such_field",
    ]
    assert "brokerId='x' is not a whole number" in str(info.value)
    assert isinstance(info.value, ConfigError)


def test_copies_pickles_and_compares_by_value() -> None:
    config = TieredConfig.from_properties({"brokerName": "b", "objectStoreSecretKey": "s3cr3t"})
    again = pickle.loads(pickle.dumps(config))
    assert again == config and hash(again) == hash(config)
    assert again.model_fields_set == {"broker_name", "object_store_secret_key"}
    assert again.object_store_secret_key.get_secret_value() == "s3cr3t"
    assert "s3cr3t" not in repr(config)
    level = config.model_copy(update={"tiered_storage_level": StorageLevel.FORCE})
    assert level.tiered_storage_level is StorageLevel.FORCE and level != config
    assert config.tiered_storage_level is StorageLevel.NOT_IN_DISK
    assert "tiered_storage_level" in level.model_fields_set
    with pytest.raises(AttributeError, match="no field"):
        config.model_copy(update={"tiered_storage_levle": StorageLevel.FORCE})


def test_python_names_work_too() -> None:
    config = TieredConfig(broker_name="b", tiered_storage_level=StorageLevel.FORCE)
    assert config.broker_name == "b"
    assert config.tiered_storage_level is StorageLevel.FORCE


def test_as_properties_round_trips() -> None:
    config = TieredConfig.from_properties(
        {"brokerName": "b", "storePathCommitLog": "/a,/b", "tieredStorageLevel": "3"}
    )
    properties = config.as_properties()
    assert properties["tieredStorageLevel"] == "FORCE"
    assert properties["storePathCommitLog"] == "/a,/b"
    assert list(properties) == TieredConfig.model_keys()
    assert TieredConfig.from_properties(properties) == config


# --- unreadable files ----------------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.conf"
    with pytest.raises(ConfigError, match=f"config file {re.escape(str(missing))} does not exist"):
        load_config([missing], env={})


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"config file {re.escape(str(tmp_path))} is a directory"):
        load_config([tmp_path], env={})


def test_non_utf8_file(tmp_path: Path) -> None:
    conf = tmp_path / "latin1.conf"
    conf.write_bytes("brokerName=br\xf6ker\n".encode("latin-1"))
    with pytest.raises(ConfigError) as info:
        load_config([conf], env={})
    assert f"config file {conf} is not UTF-8 text (byte 0xf6 at offset 13)" in str(info.value)


# --- the documented example ----------------------------------------------------------------------


def example_blocks() -> dict[str, list[str]]:
    """Each key line of the example (``#key=...`` or ``key=...``) with the comments above it."""
    blocks: dict[str, list[str]] = {}
    comment: list[str] = []
    for line in EXAMPLE_CONF.read_text(encoding="utf-8").splitlines():
        match = re.fullmatch(r"#?([a-z][A-Za-z0-9]*)=.*", line)
        if match:
            assert match.group(1) not in blocks, f"{match.group(1)} documented twice"
            blocks[match.group(1)] = comment
            comment = []
        elif line.startswith("#"):
            comment.append(line)
        else:
            comment = []
    return blocks


def test_example_conf_parses() -> None:
    assert load_config([EXAMPLE_CONF], env={}) == load_config([], env={})


def test_example_conf_documents_every_key_with_meaning_default_and_unit() -> None:
    blocks = example_blocks()
    assert sorted(blocks) == TieredConfig.model_keys()
    for key, comment in blocks.items():
        text = " ".join(comment)
        assert comment and comment[0].startswith(f"# {key}: "), f"{key}: no meaning"
        assert re.search(r"# Default: .+\. Unit: .+\.", text), f"{key}: no default/unit line"


def test_example_conf_default_lines_equal_the_model_defaults() -> None:
    lines = EXAMPLE_CONF.read_text(encoding="utf-8").splitlines()
    shown = "\n".join(line[1:] for line in lines if re.fullmatch(r"#[a-z][A-Za-z0-9]*=.*", line))
    values, defaults = (
        by_key(TieredConfig.from_properties(parse_properties(shown, "x"))),
        by_key(TieredConfig.from_properties({})),
    )
    del values["brokerName"], defaults["brokerName"]  # the local host name
    assert values == defaults


def test_every_field_has_a_key_a_meaning_and_a_parser() -> None:
    for name, field in TieredConfig.model_fields.items():
        assert field.name == name and field.validation_alias and field.description
        assert field.annotation is not None and callable(field.parse)
        assert name not in type.__dict__  # the instance's value answers, not the field
    assert len({f.validation_alias for f in TieredConfig.model_fields.values()}) > 100
