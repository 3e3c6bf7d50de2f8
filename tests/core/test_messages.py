"""Request validation (protocol §2): strict types, ranges, Uuids, the 10,000-partition limit."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from jbod_core import messages, topic_configs
from jbod_core.errors import ErrorCode
from jbod_core.ids import LOST_DIR


def _error(model: type[messages.Message], data: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(data)
    return messages.validation_message(caught.value)


def test_heartbeat_defaults_and_camel_case() -> None:
    request = messages.BrokerHeartbeatRequest.model_validate(
        {
            "brokerId": 1,
            "brokerEpoch": 5,
            "currentMetadataOffset": 7,
            "offlineLogDirs": [str(LOST_DIR)],
            "extra": 1,
        }
    )
    assert (request.want_fence, request.want_shut_down, request.offline_log_dirs) == (
        False,
        False,
        [LOST_DIR],
    )
    assert messages.BrokerHeartbeatReply().to_wire() == {
        "errorCode": 0,
        "errorMessage": None,
        "isCaughtUp": False,
        "isFenced": True,
        "shouldShutDown": False,
    }


def test_register_defaults() -> None:
    request = messages.RegisterBrokerRequest.model_validate(
        {"brokerId": 1, "clusterId": "c", "incarnationId": "AAAAAAAAAAAAAAAAAAAAZA", "logDirs": []}
    )
    assert (request.has_offline_log_dirs, request.listeners, request.rack, request.previous_broker_epoch) == (
        False,
        [],
        None,
        -1,
    )


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"brokerEpoch": 1, "currentMetadataOffset": 1}, "brokerId"),
        ({"brokerId": "1", "brokerEpoch": 1, "currentMetadataOffset": 1}, "brokerId"),
        ({"brokerId": 2**31, "brokerEpoch": 1, "currentMetadataOffset": 1}, "brokerId"),
        ({"brokerId": 1, "brokerEpoch": 2**63, "currentMetadataOffset": 1}, "brokerEpoch"),
        ({"brokerId": 1, "brokerEpoch": 1, "currentMetadataOffset": 1, "wantFence": "yes"}, "wantFence"),
        (
            {"brokerId": 1, "brokerEpoch": 1, "currentMetadataOffset": 1, "offlineLogDirs": ["x"]},
            "offlineLogDirs[0]",
        ),
    ],
)
def test_heartbeat_errors_name_the_field(data: dict[str, Any], field: str) -> None:
    assert _error(messages.BrokerHeartbeatRequest, data).startswith(field)


def test_more_than_ten_thousand_partitions_is_rejected() -> None:
    topic = {
        "topicId": "AAAAAAAAAAAAAAAAAAAAZA",
        "partitions": [{"partitionIndex": i} for i in range(10_001)],
    }
    message = _error(
        messages.AssignReplicasToDirsRequest,
        {
            "brokerId": 1,
            "brokerEpoch": 0,
            "directories": [{"id": "AAAAAAAAAAAAAAAAAAAAZA", "topics": [topic]}],
        },
    )
    assert "directories" in message and "10000" in message
    topic["partitions"] = topic["partitions"][:10_000]
    messages.AssignReplicasToDirsRequest.model_validate(
        {
            "brokerId": 1,
            "brokerEpoch": 0,
            "directories": [{"id": "AAAAAAAAAAAAAAAAAAAAZA", "topics": [topic]}],
        }
    )


def test_create_topic_needs_counts_without_an_assignment() -> None:
    assert "numPartitions" in _error(messages.CreateTopicRequest, {"name": "t", "replicationFactor": 1})
    # The replication factor may be left out: the controller fills its default or answers 400/42.
    assert (
        messages.CreateTopicRequest.model_validate({"name": "t", "numPartitions": 1}).replication_factor
        is None
    )
    messages.CreateTopicRequest.model_validate({"name": "t", "replicaAssignment": [[1]]})
    # A config value is a string map entry to the schema; whether it is usable is the create's
    # decision (errorCode 40 INVALID_CONFIG, `jbod_core.topic_configs`), not a malformed body (42).
    bad = {"name": "t", "numPartitions": 1, "replicationFactor": 1, "configs": {"min.insync.replicas": "0"}}
    request = messages.CreateTopicRequest.model_validate(bad)
    problem = topic_configs.create_error(request.configs, replication_factor=1)
    assert problem is not None and problem.key == "min.insync.replicas"


def test_error_codes_are_the_contract_table() -> None:
    assert {code.name: code.value for code in ErrorCode} == {
        "UNKNOWN_SERVER_ERROR": -1,
        "NONE": 0,
        "OFFSET_OUT_OF_RANGE": 1,
        "UNKNOWN_TOPIC_OR_PARTITION": 3,
        "NOT_LEADER_OR_FOLLOWER": 6,
        "REQUEST_TIMED_OUT": 7,
        "REPLICA_NOT_AVAILABLE": 9,
        "MESSAGE_TOO_LARGE": 10,
        "INVALID_TOPIC_EXCEPTION": 17,
        "NOT_ENOUGH_REPLICAS": 19,
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND": 20,
        "TOPIC_AUTHORIZATION_FAILED": 29,  # extension: a follower's fetch without CLUSTER_ACTION
        "CLUSTER_AUTHORIZATION_FAILED": 31,
        "INVALID_TIMESTAMP": 32,  # extension: a record outside its topic's CreateTime window
        "UNSUPPORTED_SASL_MECHANISM": 33,
        "TOPIC_ALREADY_EXISTS": 36,
        "INVALID_PARTITIONS": 37,
        "INVALID_REPLICATION_FACTOR": 38,
        "INVALID_REPLICA_ASSIGNMENT": 39,
        "INVALID_CONFIG": 40,
        "NOT_CONTROLLER": 41,
        "INVALID_REQUEST": 42,
        "KAFKA_STORAGE_ERROR": 56,
        "LOG_DIR_NOT_FOUND": 57,
        "FENCED_LEADER_EPOCH": 74,
        "PREFERRED_LEADER_NOT_AVAILABLE": 80,
        "ELIGIBLE_LEADERS_NOT_AVAILABLE": 83,
        "ELECTION_NOT_NEEDED": 84,
        "NO_REASSIGNMENT_IN_PROGRESS": 85,
        "STALE_BROKER_EPOCH": 77,
        "RESOURCE_NOT_FOUND": 91,
        "DUPLICATE_RESOURCE": 92,
        "UNACCEPTABLE_CREDENTIAL": 93,
        "UNKNOWN_TOPIC_ID": 100,
        "DUPLICATE_BROKER_REGISTRATION": 101,
        "BROKER_ID_NOT_REGISTERED": 102,
        "INCONSISTENT_CLUSTER_ID": 104,
        "INELIGIBLE_REPLICA": 107,
        "INVALID_UPDATE_VERSION": 108,
    }
