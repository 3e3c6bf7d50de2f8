"""The contract's error codes (protocol §2), as one enum shared by every component."""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    UNKNOWN_SERVER_ERROR = -1  # extension: producer ids exhausted (docs/api.md)
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    UNKNOWN_TOPIC_OR_PARTITION = 3
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10  # extension: produce over message.max.bytes (docs/operations.md, "Limits")
    INVALID_TOPIC_EXCEPTION = 17
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    TOPIC_AUTHORIZATION_FAILED = 29  # a follower's fetch without CLUSTER_ACTION (issue 31)
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32  # extension: a record outside its topic's CreateTime window (docs/api.md)
    UNSUPPORTED_SASL_MECHANISM = 33  # extension: SCRAM credentials (docs/api.md)
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    FENCED_LEADER_EPOCH = 74
    PREFERRED_LEADER_NOT_AVAILABLE = 80  # extension: leader elections (docs/api.md)
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83  # extension: leader elections
    ELECTION_NOT_NEEDED = 84  # extension: leader elections
    NO_REASSIGNMENT_IN_PROGRESS = 85  # extension: reassignments (docs/api.md)
    STALE_BROKER_EPOCH = 77
    RESOURCE_NOT_FOUND = 91  # extension: SCRAM credentials
    DUPLICATE_RESOURCE = 92  # extension: SCRAM credentials
    UNACCEPTABLE_CREDENTIAL = 93  # extension: SCRAM credentials
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_CLUSTER_ID = 104
    INELIGIBLE_REPLICA = 107
    INVALID_UPDATE_VERSION = 108
