"""The topic config table (`jbod_core.topic_configs`): Kafka 4.3's keys, types, rules and messages
(the messages are the ones Kafka 4.3.1 answers; `tests/kafka_tools/test_topic_configs_vs_kafka.py`
compares them with a running Kafka), the controller's create check and the broker's fallback
reading."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jbod_core import topic_configs
from jbod_core.kafka_topic_config_docs import DOCS as KAFKA_DOCS
from jbod_core.topic_configs import BROKER_SETTINGS, BY_NAME, DEFINITIONS

# Kafka 4.3.1's topic configs (`kafka-configs.sh --describe --all` of a topic), with their defaults.
KAFKA_DEFAULTS = {
    "cleanup.policy": "delete",
    "compression.gzip.level": "-1",
    "compression.lz4.level": "9",
    "compression.type": "producer",
    "compression.zstd.level": "3",
    "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000",
    "flush.messages": "9223372036854775807",
    "flush.ms": "9223372036854775807",
    "follower.replication.throttled.replicas": "",
    "index.interval.bytes": "4096",
    "leader.replication.throttled.replicas": "",
    "local.retention.bytes": "-2",
    "local.retention.ms": "-2",
    "max.compaction.lag.ms": "9223372036854775807",
    "max.message.bytes": "1048588",
    "message.timestamp.after.max.ms": "3600000",
    "message.timestamp.before.max.ms": "9223372036854775807",
    "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "min.insync.replicas": "1",
    "preallocate": "false",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
    "remote.storage.enable": "false",
    "retention.bytes": "-1",
    "retention.ms": "604800000",
    "segment.bytes": "1073741824",
    "segment.index.bytes": "10485760",
    "segment.jitter.ms": "0",
    "segment.ms": "604800000",
    "unclean.leader.election.enable": "false",
}

# (key, value, Kafka 4.3.1's message) as `kafka-configs.sh --alter` printed them.
KAFKA_REFUSALS = [
    (
        "cleanup.policy",
        "foo",
        "Invalid value foo for configuration cleanup.policy: String must be one of: compact, delete",
    ),
    (
        "cleanup.policy",
        "Compact",
        "Invalid value Compact for configuration cleanup.policy: String must be one of: compact, delete",
    ),
    (
        "compression.type",
        "GZIP",
        "Invalid value GZIP for configuration compression.type: String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer",
    ),
    (
        "max.message.bytes",
        "-5",
        "Invalid value -5 for configuration max.message.bytes: Value must be at least 0",
    ),
    (
        "max.message.bytes",
        "abc",
        "Invalid value abc for configuration max.message.bytes: Not a number of type INT",
    ),
    (
        "max.message.bytes",
        "99999999999",
        "Invalid value 99999999999 for configuration max.message.bytes: Not a number of type INT",
    ),
    (
        "message.timestamp.type",
        "logappendtime",
        "Invalid value logappendtime for configuration message.timestamp.type: String must be one of: CreateTime, LogAppendTime",
    ),
    (
        "min.cleanable.dirty.ratio",
        "2",
        "Invalid value 2.0 for configuration min.cleanable.dirty.ratio: Value must be no more than 1",
    ),
    (
        "min.cleanable.dirty.ratio",
        "-0.5",
        "Invalid value -0.5 for configuration min.cleanable.dirty.ratio: Value must be at least 0",
    ),
    (
        "min.cleanable.dirty.ratio",
        "x",
        "Invalid value x for configuration min.cleanable.dirty.ratio: Not a number of type DOUBLE",
    ),
    (
        "preallocate",
        "maybe",
        "Invalid value maybe for configuration preallocate: Expected value to be either true or false",
    ),
    (
        "segment.bytes",
        "1048575",
        "Invalid value 1048575 for configuration segment.bytes: Value must be at least 1048576",
    ),
    ("segment.ms", "0", "Invalid value 0 for configuration segment.ms: Value must be at least 1"),
    ("retention.ms", "-2", "Invalid value -2 for configuration retention.ms: Value must be at least -1"),
    (
        "compression.gzip.level",
        "12",
        "Invalid value 12 for configuration compression.gzip.level: Value must be between 1 and 9 or equal to -1",
    ),
    (
        "compression.lz4.level",
        "0",
        "Invalid value 0 for configuration compression.lz4.level: Value must be at least 1",
    ),
    (
        "compression.zstd.level",
        "99",
        "Invalid value 99 for configuration compression.zstd.level: Value must be no more than 22",
    ),
    (
        "compression.zstd.level",
        "-200000",
        "Invalid value -200000 for configuration compression.zstd.level: Value must be at least -131072",
    ),
    (
        "remote.storage.enable",
        "true",
        "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage.",
    ),
    (
        "unclean.leader.election.enable",
        "yes",
        "Invalid value yes for configuration unclean.leader.election.enable: Expected value to be either true or false",
    ),
    (
        "min.insync.replicas",
        "0",
        "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1",
    ),
    ("message.downconversion.enable", "true", "Unknown topic config name: message.downconversion.enable"),
    (
        "delete.retention.ms",
        "-1",
        "Invalid value -1 for configuration delete.retention.ms: Value must be at least 0",
    ),
    (
        "segment.index.bytes",
        "3",
        "Invalid value 3 for configuration segment.index.bytes: Value must be at least 4",
    ),
    ("flush.messages", "0", "Invalid value 0 for configuration flush.messages: Value must be at least 1"),
    (
        "max.compaction.lag.ms",
        "0",
        "Invalid value 0 for configuration max.compaction.lag.ms: Value must be at least 1",
    ),
    (
        "local.retention.ms",
        "-3",
        "Invalid value -3 for configuration local.retention.ms: Value must be at least -2",
    ),
    (
        "message.timestamp.after.max.ms",
        "-1",
        "Invalid value -1 for configuration message.timestamp.after.max.ms: Value must be at least 0",
    ),
    (
        "follower.replication.throttled.replicas",
        "x",
        "Invalid value [x] for configuration follower.replication.throttled.replicas: follower.replication.throttled.replicas must be the literal '*' or a list of replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...",
    ),
]

# Values Kafka 4.3.1 accepted, and how it then described them.
KAFKA_ACCEPTS = [
    ("cleanup.policy", "", ""),
    ("cleanup.policy", "compact,compact", "compact"),
    ("cleanup.policy", "compact,delete", "compact,delete"),
    ("cleanup.policy", " compact", "compact"),
    ("preallocate", "TRUE", "true"),
    ("segment.ms", "+5", "5"),
    ("retention.bytes", "-5", "-5"),
    ("min.cleanable.dirty.ratio", "1e-1", "0.1"),
    ("remote.log.copy.disable", "true", "true"),
]


def test_the_table_is_kafkas_every_key_with_its_default() -> None:
    assert {d.name: d.default for d in DEFINITIONS} == KAFKA_DEFAULTS
    assert [d.name for d in DEFINITIONS] == sorted(KAFKA_DEFAULTS)
    for definition in DEFINITIONS:
        assert definition.doc
        assert topic_configs.value_error(definition.name, definition.default, replication_factor=1) is None


def test_every_key_has_kafkas_generated_documentation() -> None:
    """`kafka_topic_config_docs` (generated from a running Kafka) documents exactly the table's keys."""
    assert sorted(KAFKA_DOCS) == [d.name for d in DEFINITIONS]
    assert all(KAFKA_DOCS[d.name].strip() for d in DEFINITIONS)


@pytest.mark.parametrize(("key", "value", "message"), KAFKA_REFUSALS)
def test_a_bad_value_is_refused_with_kafkas_message(key: str, value: str, message: str) -> None:
    problem = topic_configs.create_error({key: value}, replication_factor=3)
    assert problem is not None
    assert (problem.key, problem.value, problem.message) == (key, value, message)


@pytest.mark.parametrize(("key", "value", "shown"), KAFKA_ACCEPTS)
def test_values_kafka_accepts_are_accepted_and_shown_as_kafka_shows_them(
    key: str, value: str, shown: str
) -> None:
    assert topic_configs.create_error({key: value}, replication_factor=3) is None
    assert topic_configs.shown_value(BY_NAME[key], value) == shown


def test_the_first_key_in_order_is_named() -> None:
    problem = topic_configs.create_error(
        {"segment.bytes": "1", "retention.ms": "banana", "zzz": "1"}, replication_factor=1
    )
    assert problem is not None and problem.key == "retention.ms"


def test_min_insync_replicas_may_not_exceed_the_replication_factor() -> None:
    assert topic_configs.create_error({"min.insync.replicas": "2"}, replication_factor=2) is None
    problem = topic_configs.create_error({"min.insync.replicas": "3"}, replication_factor=2)
    assert problem is not None and problem.key == "min.insync.replicas"
    assert "replication factor 2" in problem.message


NUMBER_DEFAULTS = {
    "max.message.bytes": 1000,
    "min.insync.replicas": 2,
    "retention.bytes": 10,
    "retention.ms": 20,
    "segment.bytes": 8192,
}
DEFAULTS = {key: str(value) for key, value in NUMBER_DEFAULTS.items()}  # the broker's, as text
RESOLVED_DEFAULTS = {  # no broker default: the setting's own (Kafka's)
    **NUMBER_DEFAULTS,
    "segment.ms": 604800000,
    "index.interval.bytes": 4096,
    "segment.index.bytes": 10485760,
    "segment.jitter.ms": 0,
    "file.delete.delay.ms": 60000,
    "flush.messages": 2**63 - 1,
    "flush.ms": 2**63 - 1,
    "compression.gzip.level": -1,
    "compression.lz4.level": 9,
    "compression.zstd.level": 3,
    "message.timestamp.before.max.ms": 2**63 - 1,
    "message.timestamp.after.max.ms": 3600000,
}
BAD_SETTINGS = [
    ("max.message.bytes", "-1"),
    ("min.insync.replicas", "0"),
    ("retention.ms", "-2"),
    ("retention.ms", "1.5"),
    ("segment.bytes", "4096"),
    ("retention.bytes", "banana"),
    ("segment.ms", "0"),
]


@pytest.mark.parametrize(("key", "value"), BAD_SETTINGS)
def test_the_broker_falls_back_to_its_default_for_a_bad_value(key: str, value: str) -> None:
    resolved = topic_configs.resolve({key: value, "unknown.key": "x"}, DEFAULTS)
    assert dict(resolved.values) == RESOLVED_DEFAULTS
    assert [(p.key, p.value) for p in resolved.problems] == [(key, value)]
    assert resolved.problems[0].reason and resolved.problems[0].reason in resolved.problems[0].message


def test_the_broker_uses_good_values_and_defaults_for_missing_keys() -> None:
    resolved = topic_configs.resolve(
        {"retention.ms": "-1", "segment.bytes": "1048576", "segment.ms": "60000"}, DEFAULTS
    )
    assert dict(resolved.values) == {
        **RESOLVED_DEFAULTS,
        "retention.ms": -1,
        "segment.bytes": 1048576,
        "segment.ms": 60000,
    }
    assert resolved.problems == ()
    # Without a broker default the setting's own default is used.
    assert topic_configs.resolve({}, {})["segment.bytes"] == 64 * 1024 * 1024


@pytest.mark.parametrize(
    ("policy", "retained"),
    [("compact", True), ("", True), ("compact,delete", False), ("delete", False), ("junk", False)],
)
def test_a_topic_that_is_not_delete_is_never_cut_by_retention(policy: str, retained: bool) -> None:
    resolved = topic_configs.resolve({"cleanup.policy": policy, "retention.ms": "5"}, DEFAULTS)
    assert (resolved["retention.ms"], resolved["retention.bytes"]) == ((-1, -1) if retained else (5, 10))


@given(st.dictionaries(st.sampled_from([*sorted(BY_NAME), "zzz"]), st.text(max_size=12), max_size=5))
def test_resolve_never_raises_and_agrees_with_the_create_check(configs: dict[str, str]) -> None:
    resolved = topic_configs.resolve(configs, DEFAULTS)
    assert set(resolved.values) == {s.topic_key for s in BROKER_SETTINGS} | set(topic_configs.TOPIC_NUMBERS)
    bad_settings = {p.key for p in resolved.problems}
    for setting in BROKER_SETTINGS:
        problem = topic_configs.value_error(
            setting.topic_key, configs.get(setting.topic_key, "1048576"), replication_factor=2**31 - 1
        )
        assert (setting.topic_key in bad_settings) == (setting.topic_key in configs and problem is not None)


def test_the_agent_defaults_match_the_broker_settings() -> None:
    from jbod_agent.config import BrokerConfig

    for setting in BROKER_SETTINGS:
        field_name = setting.broker_key.replace(".", "_")
        assert BrokerConfig.__dataclass_fields__[field_name].default == setting.default, setting


@pytest.mark.parametrize("value", ["*", "", "0:1", "0:1, 1:2 ,2:3", " * "])
def test_throttled_replicas_lists_kafka_accepts(value: str) -> None:
    for key in (topic_configs.LEADER_THROTTLED_REPLICAS, topic_configs.FOLLOWER_THROTTLED_REPLICAS):
        assert topic_configs.value_error(key, value, replication_factor=1) is None


@pytest.mark.parametrize("value", ["0", "a:1", "0:1,*", "0:1;1:2", "-1:2"])
def test_throttled_replicas_lists_kafka_refuses(value: str) -> None:
    problem = topic_configs.value_error(topic_configs.LEADER_THROTTLED_REPLICAS, value, replication_factor=1)
    assert problem is not None and "[partitionId]:[brokerId]" in problem.message


def test_throttled_replicas_reads_every_replica_or_the_listed_pairs() -> None:
    every = topic_configs.throttled_replicas("*")
    assert every.covers(7, 3)
    listed = topic_configs.throttled_replicas("0:1, 2:3")
    assert listed.covers(0, 1) and listed.covers(2, 3) and not listed.covers(0, 3)
    assert topic_configs.throttled_replicas(None) == topic_configs.NOT_THROTTLED
    assert topic_configs.throttled_replicas("bad") == topic_configs.NOT_THROTTLED
