"""`server.properties` parsing (protocol §4.2, `jbod_agent.config`).

Covers: every key with its default and with an explicit value; unknown keys, non-integers,
out-of-range values (each numeric key at and beyond its bounds), missing required keys, bad URLs
and listeners, bad booleans and cluster ids, empty paths, duplicate log dirs, the metadata dir
listed in `log.dirs`, heartbeat >= session timeout, format-on-start without a cluster id — each a
`ConfigError` whose message starts with the key; `--set` overrides beating the file; `load_config`
of a missing, undecodable or directory path.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jbod_agent import config
from jbod_agent.config import BrokerConfig, ConfigError, HttpListener

BASE = {
    "node.id": "1",
    "log.dirs": "/data/a,/data/b",
    "metadata.log.dir": "/data/meta",
    "controller.url": "http://127.0.0.1:9093",
    "cluster.token.file": "/etc/jbod/cluster.token",
}
MAX_INT = 2**31 - 1


def text(values: dict[str, str], *, drop: tuple[str, ...] = ()) -> str:
    lines = ["# a broker", "! also a comment", ""]
    lines += [f"{k}={v}" for k, v in values.items() if k not in drop]
    return "\n".join(lines) + "\n"


def parse(**changes: str) -> BrokerConfig:
    return config.parse_config(text({**BASE, **{k.replace("_", "."): v for k, v in changes.items()}}))


def expect_error(source: str, key: str, overrides: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        config.parse_config(source, overrides)
    message = str(info.value)
    assert message.startswith(f"{key}:"), message
    return message


def test_minimal_config_takes_every_default() -> None:
    parsed = config.parse_config(text(BASE))
    assert parsed == BrokerConfig(
        node_id=1,
        log_dirs=(Path("/data/a"), Path("/data/b")),
        metadata_log_dir=Path("/data/meta"),
        controller_url="http://127.0.0.1:9093",
        listener=HttpListener(scheme="http", host="127.0.0.1", port=9092),
        cluster_token_file=Path("/etc/jbod/cluster.token"),
        # No Kafka listener configured: one for replication, on a port of its own choosing.
        kafka_listeners=(config.KafkaListener("SASL_PLAINTEXT", "127.0.0.1", 0),),
    )
    # The defaults the contract names, spelled out.
    assert parsed.listener.url == "http://127.0.0.1:9092"
    assert parsed.admin_token_file is None
    assert parsed.heartbeat_interval_ms == 2000
    assert parsed.session_timeout_ms == 9000
    assert parsed.log_dir_failure_timeout_ms == 30000
    assert parsed.log_dir_probe_interval_ms == 1000
    assert parsed.log_dir_probe_timeout_ms == 5000
    assert parsed.min_insync_replicas == 1
    assert parsed.replica_lag_time_max_ms == 30000
    assert parsed.rack is None
    assert parsed.format_on_start is False
    assert parsed.cluster_id is None
    # Topic auto-creation: Kafka's defaults (on, 1 partition, replication factor 1).
    assert parsed.auto_create_topics_enable is True
    assert (parsed.num_partitions, parsed.default_replication_factor) == (1, 1)
    assert parsed.given_keys == frozenset(BASE)


@pytest.mark.parametrize(
    ("key", "value", "attribute", "expected"),
    [
        ("node.id", "0", "node_id", 0),
        ("node.id", str(MAX_INT), "node_id", MAX_INT),
        ("log.dirs", " /d/x , /d/y,/d/z ", "log_dirs", (Path("/d/x"), Path("/d/y"), Path("/d/z"))),
        ("log.dirs", "/d/only", "log_dirs", (Path("/d/only"),)),
        ("metadata.log.dir", "/var/meta", "metadata_log_dir", Path("/var/meta")),
        ("controller.url", "https://ctl.example:443/", "controller_url", "https://ctl.example:443"),
        ("controller.url", "http://[::1]:9093", "controller_url", "http://[::1]:9093"),
        ("listeners", "http://0.0.0.0:19092", "listener", HttpListener("http", "0.0.0.0", 19092)),
        (
            "advertised.listeners",
            "http://broker-0.brokers.ns.svc:9092",
            "advertised_listener",
            HttpListener("http", "broker-0.brokers.ns.svc", 9092),
        ),
        ("cluster.token.file", "/run/token", "cluster_token_file", Path("/run/token")),
        ("admin.token.file", "/run/admin", "admin_token_file", Path("/run/admin")),
        ("broker.heartbeat.interval.ms", "500", "heartbeat_interval_ms", 500),
        ("broker.session.timeout.ms", "18000", "session_timeout_ms", 18000),
        ("log.dir.failure.timeout.ms", "1", "log_dir_failure_timeout_ms", 1),
        ("log.dir.probe.interval.ms", "250", "log_dir_probe_interval_ms", 250),
        ("log.dir.probe.timeout.ms", "750", "log_dir_probe_timeout_ms", 750),
        ("min.insync.replicas", "2", "min_insync_replicas", 2),
        ("replica.lag.time.max.ms", "10000", "replica_lag_time_max_ms", 10000),
        ("broker.rack", " rack-a ", "rack", "rack-a"),
        ("log.dirs.format.on.start", "false", "format_on_start", False),
        ("cluster.id", "Ab_9-z", "cluster_id", "Ab_9-z"),
        ("offsets.topic.num.partitions", "3", "offsets_topic_num_partitions", 3),
        ("offsets.topic.replication.factor", "1", "offsets_topic_replication_factor", 1),
        ("offsets.commit.timeout.ms", "2000", "offsets_commit_timeout_ms", 2000),
        ("offsets.retention.minutes", "1", "offsets_retention_minutes", 1),
        ("offsets.retention.check.interval.ms", " 1000 ", "offsets_retention_check_interval_ms", 1000),
        ("offset.metadata.max.bytes", "0", "offset_metadata_max_bytes", 0),
        ("group.initial.rebalance.delay.ms", "0", "group_initial_rebalance_delay_ms", 0),
        ("group.min.session.timeout.ms", "1000", "group_min_session_timeout_ms", 1000),
        ("group.max.session.timeout.ms", "60000", "group_max_session_timeout_ms", 60000),
        ("auto.create.topics.enable", "false", "auto_create_topics_enable", False),
        ("auto.create.topics.enable", " True ", "auto_create_topics_enable", True),
        ("num.partitions", "6", "num_partitions", 6),
        ("default.replication.factor", "3", "default_replication_factor", 3),
    ],
)
def test_each_key_parses(key: str, value: str, attribute: str, expected: object) -> None:
    parsed = config.parse_config(text({**BASE, key: value}))
    assert getattr(parsed, attribute) == expected


@pytest.mark.parametrize("value", ["true", "TRUE", "yes", "1", " True "])
def test_format_on_start_true_spellings(value: str) -> None:
    parsed = config.parse_config(text({**BASE, "log.dirs.format.on.start": value, "cluster.id": "c1"}))
    assert parsed.format_on_start is True
    assert parsed.cluster_id == "c1"


def test_properties_syntax_colon_and_spaces() -> None:
    source = "node.id : 4\nlog.dirs = /d/a\nmetadata.log.dir:/d/m\ncontroller.url=http://h:1\ncluster.token.file=/t\n"
    parsed = config.parse_config(source)
    assert (parsed.node_id, parsed.log_dirs, parsed.metadata_log_dir) == (4, (Path("/d/a"),), Path("/d/m"))


# -- errors that name the key ------------------------------------------------------------------

INT_BOUNDS = [
    ("node.id", 0, MAX_INT),
    ("broker.heartbeat.interval.ms", 10, MAX_INT),
    ("broker.session.timeout.ms", 100, MAX_INT),
    ("log.dir.failure.timeout.ms", 1, MAX_INT),
    ("log.dir.probe.interval.ms", 10, MAX_INT),
    ("log.dir.probe.timeout.ms", 10, MAX_INT),
    ("replica.lag.time.max.ms", 1, MAX_INT),
    ("num.partitions", 1, 10_000),  # the partitions one create may make
    ("default.replication.factor", 1, 2**15 - 1),  # an int16 in CreateTopics
]


def _consistent(key: str, value: int) -> dict[str, str]:
    """The base config with `key=value`, keeping heartbeat < session timeout where possible."""
    values = {**BASE, key: str(value)}
    if key == "broker.session.timeout.ms":
        values["broker.heartbeat.interval.ms"] = "10"
    if key == "broker.heartbeat.interval.ms":
        values["broker.session.timeout.ms"] = str(MAX_INT)
        if value >= MAX_INT:
            values[key] = str(MAX_INT - 1)
    return values


@pytest.mark.parametrize(("key", "low", "high"), INT_BOUNDS)
def test_integer_bounds(key: str, low: int, high: int) -> None:
    config.parse_config(text(_consistent(key, low)))
    config.parse_config(text(_consistent(key, high)))
    message = expect_error(text({**BASE, key: str(low - 1)}), key)
    assert "out of range" in message
    message = expect_error(text({**BASE, key: str(high + 1)}), key)
    assert "out of range" in message


@pytest.mark.parametrize(("key", "low", "high"), INT_BOUNDS)
@pytest.mark.parametrize("value", ["abc", "1.5", "", "0x10", "1e3", "12 ms"])
def test_non_integer(key: str, low: int, high: int, value: str) -> None:
    message = expect_error(text({**BASE, key: value}), key)
    assert "not an integer" in message


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("offsets.retention.minutes", "0", "Value must be at least 1"),
        ("offsets.retention.minutes", "2147483648", "Not a number of type INT"),
        ("offsets.retention.check.interval.ms", "0", "Value must be at least 1"),
    ],
)
def test_the_offsets_expiry_settings_are_refused_as_kafka_refuses_them(
    key: str, value: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as info:
        config.parse_config(text({**BASE, key: value}))
    assert str(info.value) == f"Invalid value {value} for configuration {key}: {problem}"


def test_log_dir_failure_timeout_zero_is_out_of_range() -> None:
    message = expect_error(text({**BASE, "log.dir.failure.timeout.ms": "0"}), "log.dir.failure.timeout.ms")
    assert "out of range [1," in message


@given(st.sampled_from(INT_BOUNDS), st.integers(min_value=-(2**40), max_value=2**40))
def test_any_integer_is_accepted_iff_in_range(bound: tuple[str, int, int], value: int) -> None:
    key, low, high = bound
    values = {**BASE, key: str(value)}
    if key == "broker.session.timeout.ms":
        values["broker.heartbeat.interval.ms"] = "10"
    source = text(values)
    # A heartbeat interval at or above the (default 9000 ms) session timeout is refused too, by
    # the same key.
    if low <= value <= high and not (key == "broker.heartbeat.interval.ms" and value >= 9000):
        config.parse_config(source)
    else:
        expect_error(source, key)


@pytest.mark.parametrize("key", ["log.retention.days", "node_id", "LOG.DIRS", "listener"])
def test_unknown_key(key: str) -> None:
    message = expect_error(text({**BASE, key: "1"}), key)
    assert "unknown" in message


def test_unknown_key_reported_before_bad_values() -> None:
    expect_error(text({**BASE, "node.id": "x", "zzz.unknown": "1"}), "zzz.unknown")


@pytest.mark.parametrize("key", config.REQUIRED)
def test_missing_required_key(key: str) -> None:
    message = expect_error(text(BASE, drop=(key,)), key)
    assert "missing" in message


@pytest.mark.parametrize(
    "value",
    [
        "ftp://ctl:9093",
        "ctl:9093",
        "127.0.0.1:9093",
        "http://",
        "http://:9093",
        "http://ctl:99999",
        "http://ctl:port",
        "",
    ],
)
def test_bad_controller_url(value: str) -> None:
    expect_error(text({**BASE, "controller.url": value}), "controller.url")


@pytest.mark.parametrize(
    "value",
    [
        "http://127.0.0.1",  # no port
        "127.0.0.1:9092",
        "http://127.0.0.1:70000",
        "http://127.0.0.1:x",
        "http://a:1,http://b:2",  # at most one http:// listener
        "",
        "http://a:1,https://b:2",  # at most one HTTP API listener
        "SASL_PLAINTEXT://127.0.0.1:1,SASL_PLAINTEXT://127.0.0.1:2",  # one listener per name
        "SASL_PLAINTEXT://127.0.0.1",
        "SASL_PLAINTEXT://127.0.0.1:9092/path",
        "BRO-KER://127.0.0.1:9092",  # not a listener name
    ],
)
def test_bad_listener(value: str) -> None:
    expect_error(text({**BASE, "listeners": value}), "listeners")


def test_kafka_listeners_beside_the_http_api() -> None:
    parsed = config.parse_config(
        text(
            {
                **BASE,
                "listeners": "http://0.0.0.0:9192,SASL_PLAINTEXT://0.0.0.0:9092,PLAINTEXT://127.0.0.1:9093",
                "advertised.listeners": "http://b-1.svc:9192,SASL_PLAINTEXT://b-1.svc:9092",
            }
        )
    )
    assert parsed.listener == HttpListener("http", "0.0.0.0", 9192)
    assert [str(k) for k in parsed.kafka_listeners] == [
        "SASL_PLAINTEXT://0.0.0.0:9092",
        "PLAINTEXT://127.0.0.1:9093",
    ]
    assert parsed.advertised_listener == HttpListener("http", "b-1.svc", 9192)
    assert [str(k) for k in parsed.advertised_kafka_listeners] == ["SASL_PLAINTEXT://b-1.svc:9092"]


def test_without_an_http_listener_the_api_takes_a_port_of_its_own() -> None:
    parsed = config.parse_config(text({**BASE, "listeners": "SASL_PLAINTEXT://127.0.0.1:9092"}))
    assert parsed.listener == HttpListener("http", "127.0.0.1", 0)
    assert [k.name for k in parsed.kafka_listeners] == ["SASL_PLAINTEXT"]


@pytest.mark.parametrize(
    ("advertised", "problem"),
    [
        ("PLAINTEXT://b:9092", "PLAINTEXT is not one of listeners"),
        ("SASL_PLAINTEXT://b:9092", "the http:// listener of listeners is not advertised"),
    ],
)
def test_advertised_listeners_name_configured_ones(advertised: str, problem: str) -> None:
    values = {
        **BASE,
        "listeners": "http://0.0.0.0:1,SASL_PLAINTEXT://0.0.0.0:2",
        "advertised.listeners": advertised,
    }
    assert problem in expect_error(text(values), "advertised.listeners")


@pytest.mark.parametrize("value", ["maybe", "", "2", "on"])
def test_bad_boolean(value: str) -> None:
    expect_error(
        text({**BASE, "log.dirs.format.on.start": value, "cluster.id": "c"}), "log.dirs.format.on.start"
    )


@pytest.mark.parametrize("value", ["maybe", "", "yes", "1", "on"])
def test_auto_create_takes_only_true_or_false_as_kafka(value: str) -> None:
    expect_error(text({**BASE, "auto.create.topics.enable": value}), "auto.create.topics.enable")


@pytest.mark.parametrize("value", ["", "has space", "a" * 65, "dots.not.allowed", "tab\there", "é"])
def test_bad_cluster_id(value: str) -> None:
    expect_error(text({**BASE, "cluster.id": value}), "cluster.id")


@pytest.mark.parametrize("key", ["metadata.log.dir", "cluster.token.file", "admin.token.file", "broker.rack"])
def test_empty_value(key: str) -> None:
    expect_error(text({**BASE, key: "  "}), key)


@pytest.mark.parametrize("value", ["", "/d/a,", ",/d/a", "/d/a,,/d/b", " , "])
def test_log_dirs_with_an_empty_entry(value: str) -> None:
    expect_error(text({**BASE, "log.dirs": value}), "log.dirs")


@pytest.mark.parametrize(
    "value", ["/d/a,/d/a", "/d/a,/d/a/", "/d/a,/d/./a", "/d/a,/d/x/../a", "/d/a,/d/b,/d/a"]
)
def test_duplicate_log_dirs(value: str) -> None:
    message = expect_error(text({**BASE, "log.dirs": value}), "log.dirs")
    assert "more than once" in message


def test_duplicate_log_dirs_through_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    expect_error(text({**BASE, "log.dirs": f"{tmp_path / 'real'},{tmp_path / 'link'}"}), "log.dirs")


@pytest.mark.parametrize("metadata_dir", ["/data/a", "/data/b/", "/data/x/../a"])
def test_metadata_dir_listed_in_log_dirs(metadata_dir: str) -> None:
    message = expect_error(text({**BASE, "metadata.log.dir": metadata_dir}), "metadata.log.dir")
    assert "log.dirs" in message


@pytest.mark.parametrize(("heartbeat", "session"), [("9000", "9000"), ("10000", "9000"), ("2000", "2000")])
def test_heartbeat_not_below_session_timeout(heartbeat: str, session: str) -> None:
    values = {**BASE, "broker.heartbeat.interval.ms": heartbeat, "broker.session.timeout.ms": session}
    message = expect_error(text(values), "broker.heartbeat.interval.ms")
    assert "broker.session.timeout.ms" in message


def test_default_heartbeat_against_a_short_session_timeout() -> None:
    expect_error(text({**BASE, "broker.session.timeout.ms": "1500"}), "broker.heartbeat.interval.ms")


def test_group_session_timeout_bounds_in_order() -> None:
    values = {**BASE, "group.min.session.timeout.ms": "7000", "group.max.session.timeout.ms": "6999"}
    message = expect_error(text(values), "group.min.session.timeout.ms")
    assert "group.max.session.timeout.ms" in message


def test_format_on_start_needs_a_cluster_id() -> None:
    message = expect_error(text({**BASE, "log.dirs.format.on.start": "true"}), "cluster.id")
    assert "log.dirs.format.on.start" in message


# -- --set overrides -----------------------------------------------------------------------------


def test_parse_overrides() -> None:
    assert config.parse_overrides([]) == {}
    assert config.parse_overrides(["node.id=7", " broker.rack =r1", "controller.url=http://h:1/?a=b"]) == {
        "node.id": "7",
        "broker.rack": "r1",
        "controller.url": "http://h:1/?a=b",
    }
    # The last of two --set for one key wins.
    assert config.parse_overrides(["node.id=1", "node.id=2"]) == {"node.id": "2"}
    assert config.parse_overrides(["broker.rack="]) == {"broker.rack": ""}


@pytest.mark.parametrize("item", ["node.id", "=5", " =5", ""])
def test_parse_overrides_rejects_items_without_a_key(item: str) -> None:
    with pytest.raises(ConfigError) as info:
        config.parse_overrides([item])
    assert str(info.value).startswith("--set")


def test_overrides_win_over_the_file() -> None:
    overrides = config.parse_overrides(
        ["node.id=7", "log.dirs=/o/a,/o/b,/o/c", "listeners=http://0.0.0.0:1234", "min.insync.replicas=3"]
    )
    parsed = config.parse_config(text({**BASE, "min.insync.replicas": "2"}), overrides)
    assert parsed.node_id == 7
    assert parsed.log_dirs == (Path("/o/a"), Path("/o/b"), Path("/o/c"))
    assert parsed.listener == HttpListener("http", "0.0.0.0", 1234)
    assert parsed.min_insync_replicas == 3
    assert parsed.metadata_log_dir == Path("/data/meta")  # untouched keys come from the file


def test_overrides_supply_a_missing_required_key() -> None:
    parsed = config.parse_config(text(BASE, drop=("node.id",)), {"node.id": "5"})
    assert parsed.node_id == 5


def test_overrides_are_validated_like_the_file() -> None:
    expect_error(text(BASE), "no.such.key", {"no.such.key": "1"})
    expect_error(text(BASE), "node.id", {"node.id": "-1"})
    expect_error(text(BASE), "broker.heartbeat.interval.ms", {"broker.session.timeout.ms": "2000"})
    expect_error(text(BASE), "metadata.log.dir", {"metadata.log.dir": "/data/b"})
    expect_error(text(BASE), "cluster.id", {"log.dirs.format.on.start": "true"})


def test_an_override_can_fix_a_bad_file_value() -> None:
    parsed = config.parse_config(text({**BASE, "node.id": "oops"}), {"node.id": "3"})
    assert parsed.node_id == 3


# -- load_config -----------------------------------------------------------------------------


def test_load_config(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(text(BASE), encoding="utf-8")
    assert config.load_config(path) == config.parse_config(text(BASE))
    assert config.load_config(path, {"node.id": "9"}).node_id == 9


def test_load_config_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.properties"
    with pytest.raises(ConfigError) as info:
        config.load_config(path)
    assert str(path) in str(info.value)
    assert "No such file" in str(info.value)


def test_load_config_undecodable_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_bytes(b"node.id=1\nbroker.rack=\xff\xfe\n")
    with pytest.raises(ConfigError) as info:
        config.load_config(path)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_load_config_of_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        config.load_config(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_controller_url_takes_a_comma_separated_list() -> None:
    parsed = parse(controller_url=" http://c1:9093/ , https://c2.example:443,,http://[::1]:9093")
    assert parsed.controller_url == "http://c1:9093,https://c2.example:443,http://[::1]:9093"
    assert parsed.controller_urls == ["http://c1:9093", "https://c2.example:443", "http://[::1]:9093"]
    assert parse().controller_urls == ["http://127.0.0.1:9093"]


@pytest.mark.parametrize("value", ["http://c1:9093,ctl:9093", "http://c1:9093,http://c2:port", " , "])
def test_a_bad_url_in_the_controller_list_is_refused(value: str) -> None:
    expect_error(text({**BASE, "controller.url": value}), "controller.url")


def test_the_authorizer_keys_are_kafkas() -> None:
    parsed = config.parse_config(
        text({**BASE, "super.users": "User:ops; User:etl", "allow.everyone.if.no.acl.found": "true"})
    )
    assert parsed.super_users == frozenset({"User:ops", "User:etl"})
    assert parsed.allow_everyone_if_no_acl_found is True
    default = config.parse_config(text(BASE))
    assert default.super_users == frozenset() and default.allow_everyone_if_no_acl_found is False
    with pytest.raises(ConfigError, match=r"^super.users: 'ops' is not a principal Type:name"):
        config.parse_config(text({**BASE, "super.users": "ops"}))


def test_tls_listeners_and_their_files() -> None:
    parsed = parse(
        listeners="SASL_SSL://127.0.0.1:9094,SSL://127.0.0.1:9095",
        ssl_keystore_location="/etc/jbod/broker.pem",
        ssl_truststore_location="/etc/jbod/ca.pem",
        ssl_client_auth="required",
        ssl_keystore_type="PEM",
    )
    assert [(k.name, k.tls, k.authenticates) for k in parsed.kafka_listeners] == [
        ("SASL_SSL", True, True),
        ("SSL", True, False),
    ]
    assert parsed.listener == HttpListener("https", "127.0.0.1", 0)  # no plaintext HTTP API
    files = parsed.tls_files
    assert (files.keystore, files.truststore, files.client_auth) == (
        Path("/etc/jbod/broker.pem"),
        Path("/etc/jbod/ca.pem"),
        "required",
    )
    assert files.protocols == ("TLSv1.2", "TLSv1.3")
    assert (
        parse(listeners="https://127.0.0.1:9092", ssl_keystore_location="/k.pem").listener.scheme == "https"
    )


def test_client_certificates_are_asked_for_per_listener_as_in_kafka() -> None:
    """KIP-684: `ssl.client.auth` reaches the SSL listener (and the https API), never SASL_SSL;
    `listener.name.<name>.ssl.client.auth` sets one listener's own."""
    tls_base = {
        **BASE,
        "listeners": "SASL_SSL://127.0.0.1:9094,SSL://127.0.0.1:9095",
        "ssl.keystore.location": "/etc/jbod/broker.pem",
        "ssl.truststore.location": "/etc/jbod/ca.pem",
    }

    def modes(**keys: str) -> tuple[str, str, str]:
        parsed = config.parse_config(text({**tls_base, **keys}))
        sasl_ssl, ssl = parsed.kafka_listeners
        return parsed.tls_files.client_auth, parsed.client_auth_of(sasl_ssl), parsed.client_auth_of(ssl)

    assert modes() == ("none", "none", "none")
    assert modes(**{"ssl.client.auth": "required"}) == ("required", "none", "required")
    assert modes(
        **{
            "ssl.client.auth": "requested",
            "listener.name.ssl.ssl.client.auth": "required",
            "listener.name.sasl_ssl.ssl.client.auth": "requested",
        }
    ) == ("requested", "requested", "required")
    without_truststore = {k: v for k, v in tls_base.items() if k != "ssl.truststore.location"}
    message = expect_error(
        text({**without_truststore, "listener.name.sasl_ssl.ssl.client.auth": "required"}),
        "ssl.truststore.location",
    )
    assert "listener.name.sasl_ssl.ssl.client.auth=required" in message
    expect_error(
        text({**tls_base, "listener.name.ssl.ssl.client.auth": "always"}), "listener.name.ssl.ssl.client.auth"
    )


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"listeners": "SSL://127.0.0.1:9092"}, "ssl.keystore.location"),
        ({"listeners": "https://127.0.0.1:9092"}, "ssl.keystore.location"),
        ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type"),
        ({"ssl.truststore.type": "PKCS12"}, "ssl.truststore.type"),
        ({"ssl.client.auth": "required"}, "ssl.truststore.location"),
        ({"ssl.client.auth": "sometimes"}, "ssl.client.auth"),
        ({"ssl.enabled.protocols": "TLSv1.1,TLSv1.2"}, "ssl.enabled.protocols"),
        ({"ssl.enabled.protocols": "SSLv3"}, "ssl.enabled.protocols"),
        ({"ssl.principal.mapping.rules": "RULE:^CN=(.*"}, "ssl.principal.mapping.rules"),
    ],
)
def test_bad_tls_settings(changes: dict[str, str], key: str) -> None:
    expect_error(text({**BASE, **changes}), key)


def test_replication_uses_the_first_kafka_listener_unless_kafkas_keys_name_another() -> None:
    both = "http://127.0.0.1:1,SASL_SSL://127.0.0.1:2,SSL://127.0.0.1:3"
    tls = {"ssl.keystore.location": "/k.pem", "ssl.truststore.location": "/ca.pem"}
    parsed = config.parse_config(text({**BASE, **tls, "listeners": both}))
    assert str(parsed.inter_broker_listener) == "SASL_SSL://127.0.0.1:2"
    assert parsed.sasl_mechanism_inter_broker_protocol == "SCRAM-SHA-512"
    for key in ("inter.broker.listener.name", "security.inter.broker.protocol"):
        parsed = config.parse_config(text({**BASE, **tls, "listeners": both, key: "ssl"}))
        assert str(parsed.inter_broker_listener) == "SSL://127.0.0.1:3"
    parsed = config.parse_config(text({**BASE, "sasl.mechanism.inter.broker.protocol": "PLAIN"}))
    assert parsed.sasl_mechanism_inter_broker_protocol == "PLAIN"


def test_a_broker_with_only_the_http_api_gets_a_kafka_listener_for_replication() -> None:
    parsed = config.parse_config(
        text({**BASE, "listeners": "http://0.0.0.0:9192", "advertised.listeners": "http://b-1.svc:9192"})
    )
    assert [str(k) for k in parsed.kafka_listeners] == ["SASL_PLAINTEXT://0.0.0.0:0"]
    assert [str(k) for k in parsed.advertised_kafka_listeners] == ["SASL_PLAINTEXT://b-1.svc:0"]
    assert parsed.inter_broker_listener.name == "SASL_PLAINTEXT"
    tls = {"ssl.keystore.location": "/k.pem"}
    parsed = config.parse_config(text({**BASE, **tls, "listeners": "https://127.0.0.1:1"}))
    assert [str(k) for k in parsed.kafka_listeners] == ["SASL_SSL://127.0.0.1:0"]


@pytest.mark.parametrize(
    ("changes", "key", "problem"),
    [
        ({"inter.broker.listener.name": "SSL"}, "inter.broker.listener.name", "SSL is not one of listeners"),
        ({"security.inter.broker.protocol": "BROKER"}, "security.inter.broker.protocol", "is not one of"),
        (
            {
                "inter.broker.listener.name": "SASL_PLAINTEXT",
                "security.inter.broker.protocol": "SASL_PLAINTEXT",
            },
            "security.inter.broker.protocol",
            "only one of it and inter.broker.listener.name",
        ),
        (
            {"sasl.mechanism.inter.broker.protocol": "GSSAPI"},
            "sasl.mechanism.inter.broker.protocol",
            "not one of",
        ),
    ],
)
def test_bad_inter_broker_settings_name_their_key(changes: dict[str, str], key: str, problem: str) -> None:
    values = {**BASE, "listeners": "http://127.0.0.1:1,SASL_PLAINTEXT://127.0.0.1:2", **changes}
    assert problem in expect_error(text(values), key)


def test_named_listeners_take_their_protocol_from_the_map() -> None:
    tls = {"ssl.keystore.location": "/k.pem", "ssl.truststore.location": "/ca.pem"}
    values = {
        **BASE,
        **tls,
        "listeners": "http://0.0.0.0:9192,REPLICATION://0.0.0.0:9091,internal://0.0.0.0:9092,EXTERNAL://0.0.0.0:9095",
        "advertised.listeners": "http://b.svc:9192,REPLICATION://b.svc:9091,INTERNAL://b.svc:9092,EXTERNAL://1.2.3.4:31001",
        "listener.security.protocol.map": "REPLICATION:SASL_PLAINTEXT,INTERNAL:sasl_plaintext,EXTERNAL:SSL",
        "inter.broker.listener.name": "replication",
        "listener.name.external.ssl.client.auth": "required",
    }
    parsed = config.parse_config(text(values))
    assert [(k.name, k.security_protocol, k.port) for k in parsed.kafka_listeners] == [
        ("REPLICATION", "SASL_PLAINTEXT", 9091),
        ("INTERNAL", "SASL_PLAINTEXT", 9092),
        ("EXTERNAL", "SSL", 9095),
    ]
    assert [(k.name, k.host, k.authenticates, k.tls) for k in parsed.advertised_kafka_listeners] == [
        ("REPLICATION", "b.svc", True, False),
        ("INTERNAL", "b.svc", True, False),
        ("EXTERNAL", "1.2.3.4", False, True),
    ]
    assert parsed.inter_broker_listener.name == "REPLICATION"
    external = parsed.kafka_listeners[2]
    assert parsed.client_auth_of(external) == "required"
    assert (
        config.parse_config(
            text({**values, "listener.name.external.ssl.client.auth": "none"})
        ).client_auth_of(external)
        == "none"
    )
    # Without its own setting an SSL-protocol listener follows ssl.client.auth (KIP-684).
    del values["listener.name.external.ssl.client.auth"]
    assert (
        config.parse_config(text({**values, "ssl.client.auth": "requested"})).client_auth_of(external)
        == "requested"
    )
    problems = {
        "listener.security.protocol.map": ({"listener.security.protocol.map": "INTERNAL:SSL"}, "REPLICATION"),
        "listener.name.external.ssl.client.auth": (
            {"listener.name.external.ssl.client.auth": "maybe"},
            "maybe",
        ),
    }
    for key, (changes, problem) in problems.items():
        assert problem in expect_error(text({**values, **changes}), key)
    for bad in ("INTERNAL:TLS", "INTERNAL", "INTERNAL:SSL,internal:SSL"):
        expect_error(
            text({**values, "listener.security.protocol.map": bad}), "listener.security.protocol.map"
        )


def test_file_references_are_read_through_kafkas_file_config_provider(tmp_path: Path) -> None:
    node = tmp_path / "node.properties"
    node.write_text("rack=zone-a\nadvertised.host.EXTERNAL=10.0.0.7\n")
    values = {
        **BASE,
        "config.providers": "file",
        "config.providers.file.class": config.FILE_CONFIG_PROVIDER,
        "listeners": "http://0.0.0.0:9192,SASL_PLAINTEXT://0.0.0.0:9092,EXTERNAL://0.0.0.0:9095",
        "advertised.listeners": f"http://b.svc:9192,SASL_PLAINTEXT://b.svc:9092,EXTERNAL://${{file:{node}:advertised.host.EXTERNAL}}:31001",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,EXTERNAL:SASL_PLAINTEXT",
        "broker.rack": f"${{file:{node}:rack}}",
    }
    source = tmp_path / "server.properties"
    source.write_text(text(values))
    assert config.file_references(source.read_text()) == [str(node)]
    parsed = config.load_config(source)
    assert parsed.rack == "zone-a"
    assert str(parsed.advertised_kafka_listeners[1]) == "EXTERNAL://10.0.0.7:31001"
    with pytest.raises(ConfigError, match=re.escape(f"broker.rack: {node} has no key zone")):
        config.parse_config(
            text({**values, "broker.rack": f"${{file:{node}:zone}}"}),
            None,
            {str(node): {"rack": "a", "advertised.host.EXTERNAL": "h"}},
        )
    with pytest.raises(ConfigError, match=r"advertised\.listeners: cannot read"):
        config.parse_config(text(values))
    with pytest.raises(ConfigError, match=r"config\.providers is not file"):
        config.parse_config(text({**values, "config.providers": ""}).replace("config.providers=\n", ""))
    expect_error(text({**BASE, "config.providers": "vault"}), "config.providers")
    source.write_text(text({**values, "broker.rack": f"${{file:{tmp_path}/missing.properties:rack}}"}))
    with pytest.raises(ConfigError, match="cannot read"):
        config.load_config(source)
