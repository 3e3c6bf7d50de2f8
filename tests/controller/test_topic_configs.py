"""Topic configs at create, against a real controller process (protocol §3.5, errorCode 40).

Every key of `jbod_core.topic_configs` with a value that does not parse or is out of range, an
unknown key, and `min.insync.replicas` above the replication factor (given, defaulted by the
controller, or implied by an assignment) are rejected with 200 / errorCode 40 naming the key, and
nothing is appended to the metadata log. Good values are kept in the TopicRecord as given.
"""

from __future__ import annotations

from typing import Any

import pytest

from jbod_core.topic_configs import BY_NAME
from tests.controller.conftest import Api, bring_up

BAD_VALUES = {
    "min.insync.replicas": ["banana", "0", "-1", "1.5", "²", str(2**31)],
    "retention.ms": ["banana", "-2", "1e3", str(2**63)],
    "retention.bytes": ["banana", "", str(2**63)],
    "segment.bytes": ["banana", "0", "1048575", str(2**31)],
    "cleanup.policy": ["compacted", "compact,Delete"],
    "compression.type": ["brotli"],
    "message.timestamp.type": ["AppendTime"],
    "min.cleanable.dirty.ratio": ["1.01", "half"],
    "preallocate": ["yes"],
}


def _rejected(api: Api, configs: dict[str, str], key: str, **body: Any) -> None:
    end = api.end_offset()
    reply = api.create_topic("ok4", expect=40, configs=configs, **body)
    assert key in reply["errorMessage"], reply
    assert reply.get("topicId") is None, reply
    assert api.end_offset() == end
    assert api.topics() == []


def test_every_key_with_a_bad_value_is_40_and_writes_nothing(api: Api) -> None:
    assert set(BAD_VALUES) <= set(BY_NAME)
    bring_up(api, [1, 2, 3])
    for key, values in BAD_VALUES.items():
        for value in values:
            _rejected(api, {key: value}, key, numPartitions=1, replicationFactor=3)
            _rejected(api, {"retention.ms": "1000", key: value}, key, replicaAssignment=[[1, 2]])


def test_unknown_keys_and_min_insync_above_the_replication_factor_are_40(api: Api) -> None:
    bring_up(api, [1, 2, 3])
    end = api.end_offset()
    reply = api.create_topic(
        "tiered", expect=40, configs={"remote.storage.enable": "true"}, numPartitions=1, replicationFactor=1
    )
    assert "Tiered Storage functionality is disabled" in reply["errorMessage"] and api.end_offset() == end
    _rejected(api, {"cleanup.polcy": "compact"}, "cleanup.polcy", numPartitions=1, replicationFactor=1)
    _rejected(api, {"retention.ms ": "1"}, "retention.ms ", numPartitions=1, replicationFactor=1)
    _rejected(api, {"min.insync.replicas": "3"}, "min.insync.replicas", numPartitions=1, replicationFactor=2)
    _rejected(api, {"min.insync.replicas": "2"}, "min.insync.replicas", replicaAssignment=[[1], [2]])


def test_good_configs_are_kept_as_given(api: Api) -> None:
    bring_up(api, [1, 2, 3])
    configs = {
        "min.insync.replicas": "3",
        "retention.ms": "-1",
        "retention.bytes": "1048576",
        "segment.bytes": "1048576",
        "cleanup.policy": "compact,delete",
        "message.timestamp.type": "LogAppendTime",
        "min.cleanable.dirty.ratio": "0.25",
        "preallocate": "TRUE",
    }
    api.create_topic("ok4", numPartitions=2, replicationFactor=3, configs=configs)
    assert api.topic("ok4")["configs"] == configs


def test_min_insync_above_the_default_replication_factor_is_40(make_controller: Any) -> None:
    api = Api(make_controller(extra_args=["--default-replication-factor", "2"]))
    try:
        bring_up(api, [1, 2, 3])
        _rejected(api, {"min.insync.replicas": "3"}, "min.insync.replicas", numPartitions=1)
        api.create_topic("fits", numPartitions=1, configs={"min.insync.replicas": "2"})
    finally:
        api.close()


@pytest.mark.parametrize("replication_factor", [1, 2])
def test_the_default_min_insync_is_capped_at_the_replication_factor(
    make_controller: Any, replication_factor: int
) -> None:
    api = Api(make_controller(extra_args=["--default-min-insync-replicas", "2"]))
    try:
        bring_up(api, [1, 2, 3])
        api.create_topic("t", numPartitions=1, replicationFactor=replication_factor)
        assert api.topic("t")["configs"] == {"min.insync.replicas": str(replication_factor)}
    finally:
        api.close()
