"""Topic config changes (IncrementalAlterConfigs for one topic, `jbod_core.config_changes`): the
exact ConfigRecords, then replay; every refusal and its code, with nothing written."""

from __future__ import annotations

from typing import Any

import pytest

from jbod_core import config_changes, records
from jbod_core.errors import ErrorCode
from jbod_core.image import ReplayError
from jbod_core.messages import AlterTopicConfigsReply, AlterTopicConfigsRequest
from tests.core.support import TOPIC, Cluster, d


def _cluster(configs: dict[str, str] | None = None) -> Cluster:
    """Brokers 1, 2, 3; topic `t` (TOPIC) with partitions of 3 and 2 replicas."""
    cluster = Cluster()
    for b in (1, 2, 3):
        cluster.add_broker(b, [d(b)])
    cluster.apply(
        [
            records.TopicRecord(name="t", topic_id=TOPIC, configs=configs or {}),
            records.PartitionRecord(
                topic_id=TOPIC,
                partition_id=0,
                replicas=(1, 2, 3),
                isr=(1, 2, 3),
                leader=1,
                leader_epoch=0,
                partition_epoch=0,
                directories=(d(1), d(2), d(3)),
            ),
            records.PartitionRecord(
                topic_id=TOPIC,
                partition_id=1,
                replicas=(2, 3),
                isr=(2, 3),
                leader=2,
                leader_epoch=0,
                partition_epoch=0,
                directories=(d(2), d(3)),
            ),
        ]
    )
    return cluster


def _alter(
    cluster: Cluster, *ops: dict[str, Any], name: str = "t", validate_only: bool = False
) -> tuple[list[records.Record], AlterTopicConfigsReply]:
    request = AlterTopicConfigsRequest.model_validate({"configs": list(ops), "validateOnly": validate_only})
    return config_changes.alter_topic_configs(cluster.image, name, request)


def _set(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "op": "SET", "value": value}


def _delete(name: str) -> dict[str, Any]:
    return {"name": name, "op": "DELETE"}


def _config(name: str, value: str | None) -> records.ConfigRecord:
    return records.ConfigRecord(topic_id=TOPIC, name=name, value=value)


def test_set_and_delete_write_config_records_that_replay_into_the_effective_configs() -> None:
    cluster = _cluster({"retention.ms": "1000", "segment.bytes": "8192"})
    produced, reply = _alter(
        cluster, _set("min.insync.replicas", "2"), _set("retention.ms", "-1"), _delete("segment.bytes")
    )
    assert produced == [
        _config("min.insync.replicas", "2"),
        _config("retention.ms", "-1"),
        _config("segment.bytes", None),
    ]
    effective = {"min.insync.replicas": "2", "retention.ms": "-1"}
    assert (reply.error_code, reply.topic_id, reply.configs) == (0, TOPIC, effective)
    old = cluster.image.topics[TOPIC].configs
    cluster.apply(produced)
    assert cluster.image.topics[TOPIC].configs == effective
    assert old == {"retention.ms": "1000", "segment.bytes": "8192"}  # replaced, never mutated
    assert cluster.replayed_from_scratch().canonical() == cluster.image.canonical()


def test_a_change_that_changes_nothing_writes_nothing() -> None:
    cluster = _cluster({"retention.ms": "1000"})
    produced, reply = _alter(cluster, _set("retention.ms", "1000"), _delete("segment.bytes"))
    assert produced == []
    assert (reply.error_code, reply.configs) == (0, {"retention.ms": "1000"})


def test_validate_only_decides_alike_and_writes_nothing() -> None:
    cluster = _cluster()
    produced, reply = _alter(cluster, _set("retention.bytes", "4096"), validate_only=True)
    assert produced == []
    assert (reply.error_code, reply.configs) == (0, {"retention.bytes": "4096"})
    produced, reply = _alter(cluster, _set("retention.bytes", "x"), validate_only=True)
    assert (produced, reply.error_code) == ([], ErrorCode.INVALID_CONFIG)


def _refused(cluster: Cluster, code: int, *ops: dict[str, Any], name: str = "t", naming: str = "") -> None:
    before = cluster.image.canonical()
    produced, reply = _alter(cluster, *ops, name=name)
    assert produced == []
    assert reply.error_code == code
    assert reply.error_message and naming in reply.error_message
    assert reply.configs is None
    assert cluster.image.canonical() == before


def test_unknown_topic_is_3() -> None:
    _refused(
        _cluster(), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, _set("retention.ms", "1"), name="u", naming="u"
    )


@pytest.mark.parametrize(
    "op",
    [
        _set("message.downconversion.enable", "true"),
        _delete("message.downconversion.enable"),
        {"name": "message.downconversion.enable", "op": "APPEND", "value": "true"},
    ],
)
def test_a_key_outside_the_table_is_40_naming_it(op: dict[str, Any]) -> None:
    _refused(
        _cluster(),
        ErrorCode.INVALID_CONFIG,
        _set("retention.ms", "1"),
        op,
        naming="message.downconversion.enable",
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("retention.ms", "banana"),
        ("retention.ms", "-2"),
        ("segment.bytes", "1048575"),
        ("min.insync.replicas", "0"),
        # The topic's smallest replication factor is 2 (partition 1).
        ("min.insync.replicas", "3"),
    ],
)
def test_a_bad_value_is_40_naming_the_key_and_the_whole_change_is_refused(key: str, value: str) -> None:
    _refused(_cluster(), ErrorCode.INVALID_CONFIG, _set("retention.bytes", "1"), _set(key, value), naming=key)


@pytest.mark.parametrize("op", ["APPEND", "SUBTRACT"])
def test_append_and_subtract_are_40_on_number_configs(op: str) -> None:
    _refused(
        _cluster(),
        ErrorCode.INVALID_CONFIG,
        {"name": "retention.ms", "op": op, "value": "1"},
        naming="retention.ms",
    )


def test_a_key_named_twice_is_42() -> None:
    _refused(
        _cluster(),
        ErrorCode.INVALID_REQUEST,
        _set("retention.ms", "1"),
        _delete("retention.ms"),
        naming="retention.ms",
    )


def test_the_smallest_replication_factor_bounds_min_insync() -> None:
    cluster = _cluster()
    produced, reply = _alter(cluster, _set("min.insync.replicas", "2"))
    assert (produced, reply.error_code) == ([_config("min.insync.replicas", "2")], 0)


def test_replay_refuses_configs_of_unknown_topics_and_deletes_of_unset_keys() -> None:
    cluster = _cluster({"retention.ms": "1"})
    image = cluster.image
    with pytest.raises(ReplayError, match="unknown topic"):
        image.replay(records.ConfigRecord(topic_id=d(99), name="retention.ms", value="1"), image.end_offset)
    with pytest.raises(ReplayError, match=r"segment\.bytes"):
        image.replay(_config("segment.bytes", None), image.end_offset)
    assert image.topics[TOPIC].configs == {"retention.ms": "1"}


def test_a_snapshot_carries_the_effective_configs_in_the_topic_record() -> None:
    cluster = _cluster({"retention.ms": "1"})
    cluster.apply(_alter(cluster, _set("segment.bytes", "1048576"), _delete("retention.ms"))[0])
    snapshot = cluster.image.to_records()
    assert records.TopicRecord(name="t", topic_id=TOPIC, configs={"segment.bytes": "1048576"}) in snapshot
    assert not any(isinstance(r, records.ConfigRecord) for r in snapshot)
    restored = type(cluster.image)()
    for record in snapshot:
        restored.replay(record, 7)
    assert restored.canonical() == cluster.image.canonical()


def test_replace_makes_the_ops_the_topics_whole_configs() -> None:
    """Kafka's legacy AlterConfigs: keys not named are deleted, a key kept at its value is not
    written again, and a refused value changes nothing."""
    cluster = _cluster({"retention.ms": "1000", "segment.bytes": "8192", "cleanup.policy": "compact"})
    request = AlterTopicConfigsRequest(
        configs=[
            {"name": "cleanup.policy", "op": "SET", "value": "compact"},
            _set("min.insync.replicas", "2"),
        ],
        replace=True,
    )
    produced, reply = config_changes.alter_topic_configs(cluster.image, "t", request)
    assert produced == [
        _config("min.insync.replicas", "2"),
        _config("retention.ms", None),
        _config("segment.bytes", None),
    ]
    assert reply.configs == {"cleanup.policy": "compact", "min.insync.replicas": "2"}
    refused = AlterTopicConfigsRequest(configs=[_set("segment.ms", "0")], replace=True)
    produced, reply = config_changes.alter_topic_configs(cluster.image, "t", refused)
    assert (produced, reply.error_code) == ([], ErrorCode.INVALID_CONFIG)
