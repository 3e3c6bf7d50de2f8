"""The topic config table (`jbod_core.topic_configs`): the controller's create check and the
broker's fallback reading, on every defined key."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jbod_core import topic_configs
from jbod_core.topic_configs import BY_NAME, DEFINITIONS, ConfigProblem

# Values no defined key accepts, and per key values just outside its range.
NOT_INTEGERS = ["banana", "", " 1", "1 ", "1.0", "1e3", "0x10", "²", "+1", "--1", "1_000"]
OUT_OF_RANGE = {
    "min.insync.replicas": ["0", "-1", str(2**31)],
    "retention.bytes": ["-2", str(2**63), "9" * 40],
    "retention.ms": ["-2", str(2**63), "1" + "0" * 5000],
    "segment.bytes": ["0", "1", "4095", str(2**31)],
}
IN_RANGE = {
    "min.insync.replicas": ["1", "3"],
    "retention.bytes": ["-1", "0", str(2**63 - 1)],
    "retention.ms": ["-1", "0", "86400000"],
    "segment.bytes": ["4096", str(2**31 - 1)],
}


def test_the_table_names_every_key_once_with_a_default_in_range() -> None:
    assert sorted(BY_NAME) == sorted(OUT_OF_RANGE) == sorted(IN_RANGE)
    assert len(DEFINITIONS) == len(BY_NAME)
    for definition in DEFINITIONS:
        assert definition.low <= definition.default <= definition.high
        assert definition.doc and definition.broker_key


BAD_VALUES = [(k, v) for k in sorted(BY_NAME) for v in NOT_INTEGERS + OUT_OF_RANGE[k]]


@pytest.mark.parametrize(("key", "value"), BAD_VALUES)
def test_create_rejects_a_bad_value_naming_the_key(key: str, value: str) -> None:
    problem = topic_configs.create_error({key: value}, replication_factor=3)
    assert problem is not None
    assert (problem.key, problem.value) == (key, value)
    assert problem.message.startswith(f"{key}: ")


@pytest.mark.parametrize(("key", "value"), [(k, v) for k in sorted(IN_RANGE) for v in IN_RANGE[k]])
def test_create_accepts_values_in_range(key: str, value: str) -> None:
    assert topic_configs.create_error({key: value}, replication_factor=3) is None


def test_unknown_keys_are_rejected_and_the_first_key_in_order_is_named() -> None:
    problem = topic_configs.create_error({"cleanup.policy": "compact"}, replication_factor=1)
    assert problem is not None and problem.key == "cleanup.policy"
    assert "unknown topic config" in problem.message and "retention.ms" in problem.message
    problem = topic_configs.create_error(
        {"segment.bytes": "1", "retention.ms": "banana", "zzz": "1"}, replication_factor=1
    )
    assert problem is not None and problem.key == "retention.ms"


def test_min_insync_replicas_may_not_exceed_the_replication_factor() -> None:
    assert topic_configs.create_error({"min.insync.replicas": "2"}, replication_factor=2) is None
    problem = topic_configs.create_error({"min.insync.replicas": "3"}, replication_factor=2)
    assert problem is not None and problem.key == "min.insync.replicas"
    assert "replication factor 2" in problem.message


DEFAULTS = {"min.insync.replicas": 2, "retention.bytes": 10, "retention.ms": 20, "segment.bytes": 8192}


@pytest.mark.parametrize(("key", "value"), BAD_VALUES)
def test_the_broker_falls_back_to_its_default_for_a_bad_value(key: str, value: str) -> None:
    resolved = topic_configs.resolve({key: value, "unknown.key": "x"}, DEFAULTS)
    assert dict(resolved.values) == DEFAULTS
    assert resolved.problems == (ConfigProblem(key, value, resolved.problems[0].reason),)


def test_the_broker_uses_good_values_and_defaults_for_missing_keys() -> None:
    resolved = topic_configs.resolve({"retention.ms": "-1", "segment.bytes": "4096"}, DEFAULTS)
    assert dict(resolved.values) == {**DEFAULTS, "retention.ms": -1, "segment.bytes": 4096}
    assert resolved.problems == ()
    # Without a broker default the table's default is used.
    assert topic_configs.resolve({}, {})["segment.bytes"] == BY_NAME["segment.bytes"].default


@given(st.dictionaries(st.text(max_size=25), st.text(max_size=25), max_size=5))
def test_resolve_never_raises_and_every_value_is_in_range(configs: dict[str, str]) -> None:
    resolved = topic_configs.resolve(configs, DEFAULTS)
    for definition in DEFINITIONS:
        assert definition.low <= resolved[definition.name] <= definition.high
    accepted = topic_configs.create_error(configs, replication_factor=2**31 - 1) is None
    assert accepted == (not resolved.problems and set(configs) <= set(BY_NAME))


def test_the_agent_defaults_match_the_table() -> None:
    from jbod_agent.config import BrokerConfig

    fields = {
        "min.insync.replicas": "min_insync_replicas",
        "retention.bytes": "log_retention_bytes",
        "retention.ms": "log_retention_ms",
        "segment.bytes": "log_segment_bytes",
    }
    for key, field_name in fields.items():
        assert BrokerConfig.__dataclass_fields__[field_name].default == BY_NAME[key].default, key


@pytest.mark.parametrize("value", ["*", "", "0:1", "0:1, 1:2 ,2:3", " * "])
def test_throttled_replicas_lists_kafka_accepts(value: str) -> None:
    for key in (topic_configs.LEADER_THROTTLED_REPLICAS, topic_configs.FOLLOWER_THROTTLED_REPLICAS):
        assert topic_configs.value_error(key, value, replication_factor=1) is None


@pytest.mark.parametrize("value", ["0", "a:1", "0:1,*", "0:1;1:2", "-1:2"])
def test_throttled_replicas_lists_kafka_refuses(value: str) -> None:
    problem = topic_configs.value_error(topic_configs.LEADER_THROTTLED_REPLICAS, value, replication_factor=1)
    assert problem is not None and "[partitionId]:[brokerId]" in problem.reason


def test_throttled_replicas_reads_every_replica_or_the_listed_pairs() -> None:
    every = topic_configs.throttled_replicas("*")
    assert every.covers(7, 3)
    listed = topic_configs.throttled_replicas("0:1, 2:3")
    assert listed.covers(0, 1) and listed.covers(2, 3) and not listed.covers(0, 3)
    assert topic_configs.throttled_replicas(None) == topic_configs.NOT_THROTTLED
    assert topic_configs.throttled_replicas("bad") == topic_configs.NOT_THROTTLED
