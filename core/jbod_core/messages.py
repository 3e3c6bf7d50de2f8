"""Requests and replies of the controller API (protocol §3) as strict, frozen pydantic models.

Guarantees:
* Field names are snake_case in Python and camelCase on the wire; unknown fields are ignored.
* Validation is strict: no coercion between strings, numbers and booleans; int32 and int64 fields
  are range-checked; Uuids must parse (§1); a request naming more than 10,000 partitions fails.
* `validation_message` turns a pydantic `ValidationError` into one line that names the field,
  e.g. `directories[0].topics[1].topicId: not a Uuid ('x' is not valid base64url)`.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel

from jbod_core.ids import Uuid

MAX_PARTITIONS_PER_REQUEST: Final = 10_000
INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1


def _parse_uuid(value: Any) -> Uuid:
    if isinstance(value, Uuid):
        return value
    if not isinstance(value, str):
        raise ValueError("must be a Uuid string")
    try:
        return Uuid.parse(value)
    except ValueError as exc:
        raise ValueError(f"not a Uuid ({exc})") from exc


UuidField = Annotated[
    Uuid,
    PlainValidator(_parse_uuid),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string", "pattern": "^[A-Za-z0-9_-]{22}$"}),
]


def _parse_base64(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value  # built in Python; JSON always carries text
    if not isinstance(value, str):
        raise ValueError("must be a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"not base64 ({exc})") from exc


def _base64_text(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


# Bytes on the wire: standard base64 with padding (Kafka's JSON form of a `bytes` field).
Base64Bytes = Annotated[
    bytes,
    PlainValidator(_parse_base64),
    PlainSerializer(_base64_text, return_type=str),
    WithJsonSchema({"type": "string", "contentEncoding": "base64"}),
]
Int8 = Annotated[int, Field(ge=-(2**7), le=2**7 - 1)]
Int32 = Annotated[int, Field(ge=INT32_MIN, le=INT32_MAX)]
Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]


class Message(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        strict=True,
        frozen=True,
        extra="ignore",
    )

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


def validation_message(exc: ValidationError) -> str:
    """One line naming the first offending field and what is wrong with it."""
    first = exc.errors()[0]
    path = ""
    for part in first["loc"]:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in ("function-plain", "function-after", "function-before"):
            continue
        else:
            path += f".{part}" if path else str(part)
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "missing":
        message = "required field is missing"
    return f"{path}: {message}" if path else message


# ---------------------------------------------------------------------------------------------
# Requests


class ListenerModel(Message):
    name: str
    host: str
    port: Annotated[int, Field(ge=0, le=65535)]


class RegisterBrokerRequest(Message):
    broker_id: Annotated[int, Field(ge=0, le=INT32_MAX)]
    cluster_id: str
    incarnation_id: UuidField
    log_dirs: list[UuidField]
    has_offline_log_dirs: bool = False
    listeners: list[ListenerModel] = []
    rack: str | None = None
    previous_broker_epoch: Int64 = -1
    cordoned_log_dirs: list[UuidField] = []  # extension (KIP-1066); an old agent omits it: none


class BrokerHeartbeatRequest(Message):
    broker_id: Int32
    broker_epoch: Int64
    current_metadata_offset: Int64
    want_fence: bool = False
    want_shut_down: bool = False
    offline_log_dirs: list[UuidField] = []
    # Extension (KIP-1066): the cordoned dirs; None (an old agent) leaves them as registered.
    cordoned_log_dirs: list[UuidField] | None = None
    # Extension (issue 35): the slow dirs; None (an old agent) leaves them as registered.
    slow_log_dirs: list[UuidField] | None = None


class PartitionIndex(Message):
    partition_index: Int32


class AssignTopic(Message):
    topic_id: UuidField
    partitions: list[PartitionIndex]


class AssignDirectory(Message):
    id: UuidField
    topics: list[AssignTopic]


class AssignReplicasToDirsRequest(Message):
    broker_id: Int32
    broker_epoch: Int64
    directories: list[AssignDirectory]

    @model_validator(mode="after")
    def _limit(self) -> AssignReplicasToDirsRequest:
        count = sum(len(t.partitions) for d in self.directories for t in d.topics)
        if count > MAX_PARTITIONS_PER_REQUEST:
            raise ValueError(
                f"directories: {count} partitions exceed the limit of {MAX_PARTITIONS_PER_REQUEST} per request"
            )
        return self


class AlterPartitionData(Message):
    partition_index: Int32
    leader_epoch: Int32
    partition_epoch: Int32
    new_isr: list[Int32]


class AlterPartitionTopic(Message):
    topic_id: UuidField
    partitions: list[AlterPartitionData]


class AlterPartitionRequest(Message):
    broker_id: Int32
    broker_epoch: Int64
    topics: list[AlterPartitionTopic]

    @model_validator(mode="after")
    def _limit(self) -> AlterPartitionRequest:
        count = sum(len(t.partitions) for t in self.topics)
        if count > MAX_PARTITIONS_PER_REQUEST:
            raise ValueError(
                f"topics: {count} partitions exceed the limit of {MAX_PARTITIONS_PER_REQUEST} per request"
            )
        return self


class CreateTopicRequest(Message):
    name: str
    num_partitions: Int32 | None = None
    replication_factor: Int32 | None = None
    replica_assignment: list[list[Int32]] | None = None
    configs: dict[str, str] = {}

    @model_validator(mode="after")
    def _required_without_assignment(self) -> CreateTopicRequest:
        # Config values are checked by `topics.create_topic` (errorCode 40, not a schema error).
        if self.replica_assignment is None and self.num_partitions is None:
            raise ValueError("numPartitions: required field is missing (no replicaAssignment given)")
        return self


class AlterConfigOp(Message):
    """One entry of Kafka's IncrementalAlterConfigs for a topic: `value` is required but for DELETE."""

    name: str
    op: Literal["SET", "DELETE", "APPEND", "SUBTRACT"]
    value: str | None = None

    @model_validator(mode="after")
    def _value_unless_delete(self) -> AlterConfigOp:
        if self.op != "DELETE" and self.value is None:
            raise ValueError(f"value: required for op {self.op}")
        return self


class AlterTopicConfigsRequest(Message):
    """IncrementalAlterConfigs of one topic; with `replace`, Kafka's legacy AlterConfigs: the ops
    (SET or DELETE) are the topic's whole configs, every key they do not name is deleted."""

    configs: list[AlterConfigOp]
    validate_only: bool = False
    replace: bool = False


class AlterBrokerConfigsRequest(Message):
    """Kafka's IncrementalAlterConfigs for one BROKER resource (the resource name is in the path:
    "" for the cluster default, else a broker id)."""

    configs: list[AlterConfigOp]
    validate_only: bool = False
    replace: bool = False  # Kafka's legacy AlterConfigs: keys not named go back to their defaults


class CreatePartitionsRequest(Message):
    total_count: Int32
    assignment: list[list[Int32]] | None = None  # the replicas of each new partition, in order
    validate_only: bool = False


class ReassignmentTarget(Message):
    """One partition of AlterPartitionReassignments: its target replicas, or None to cancel."""

    topic: str
    partition: Int32
    replicas: list[Int32] | None = None


class AlterReassignmentsRequest(Message):
    partitions: Annotated[list[ReassignmentTarget], Field(max_length=MAX_PARTITIONS_PER_REQUEST)]
    allow_replication_factor_change: bool = True


class ElectionTopic(Message):
    """One topic's partitions of ElectLeaders."""

    topic: str
    partitions: Annotated[list[Int32], Field(max_length=MAX_PARTITIONS_PER_REQUEST)]


class ElectLeadersRequest(Message):
    """Kafka's ElectLeaders: `election_type` 0 (preferred) or 1 (unclean); `partitions` None for
    every partition of the cluster."""

    election_type: Annotated[int, Field(ge=0, le=1)]
    partitions: Annotated[list[ElectionTopic], Field(max_length=MAX_PARTITIONS_PER_REQUEST)] | None = None


class ScramCredentialDeletion(Message):
    name: str
    mechanism: Int8


class ScramCredentialUpsertion(Message):
    name: str
    mechanism: Int8
    iterations: Int32
    salt: Base64Bytes
    salted_password: Annotated[Base64Bytes, Field(repr=False)]  # kept out of logs and reprs


class AlterScramCredentialsRequest(Message):
    """Kafka's AlterUserScramCredentials: the salted password never reaches the log."""

    deletions: list[ScramCredentialDeletion] = []
    upsertions: list[ScramCredentialUpsertion] = []


# Kafka's ACL enums by name (jbod_core.acls); which values a creation may use is decided there
# (a creation naming ANY is a per-creation INVALID_REQUEST, as Kafka answers it).
AclResourceTypeName = Literal[
    "ANY", "TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID", "DELEGATION_TOKEN", "USER"
]
AclPatternTypeName = Literal["ANY", "MATCH", "LITERAL", "PREFIXED"]
AclOperationName = Literal[
    "ANY",
    "ALL",
    "READ",
    "WRITE",
    "CREATE",
    "DELETE",
    "ALTER",
    "DESCRIBE",
    "CLUSTER_ACTION",
    "DESCRIBE_CONFIGS",
    "ALTER_CONFIGS",
    "IDEMPOTENT_WRITE",
    "CREATE_TOKENS",
    "DESCRIBE_TOKENS",
    "TWO_PHASE_COMMIT",
]
AclPermissionTypeName = Literal["ANY", "ALLOW", "DENY"]
MAX_ACLS_PER_REQUEST: Final = 10_000


class AclBindingModel(Message):
    """One ACL (a CreateAcls creation, or an ACL listed by DescribeAcls / DeleteAcls)."""

    resource_type: AclResourceTypeName
    resource_name: str
    pattern_type: AclPatternTypeName = "LITERAL"
    principal: str
    host: str = "*"
    operation: AclOperationName
    permission_type: AclPermissionTypeName


class AclFilterModel(Message):
    """Kafka's AclBindingFilter: a field left out, null or ANY matches anything."""

    resource_type: AclResourceTypeName | None = None
    resource_name: str | None = None
    pattern_type: AclPatternTypeName | None = None
    principal: str | None = None
    host: str | None = None
    operation: AclOperationName | None = None
    permission_type: AclPermissionTypeName | None = None


class CreateAclsRequest(Message):
    creations: Annotated[list[AclBindingModel], Field(max_length=MAX_ACLS_PER_REQUEST)]


class DeleteAclsRequest(Message):
    filters: Annotated[list[AclFilterModel], Field(max_length=MAX_ACLS_PER_REQUEST)]


class AllocateProducerIdsRequest(Message):
    broker_id: Int32
    broker_epoch: Int64


# ---------------------------------------------------------------------------------------------
# Replies


class RegisterBrokerReply(Message):
    error_code: int = 0
    error_message: str | None = None
    broker_epoch: int = -1


class BrokerHeartbeatReply(Message):
    error_code: int = 0
    error_message: str | None = None
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False


class AssignPartitionResult(Message):
    partition_index: int
    error_code: int


class AssignTopicResult(Message):
    topic_id: UuidField
    partitions: list[AssignPartitionResult]


class AssignDirectoryResult(Message):
    id: UuidField
    topics: list[AssignTopicResult]


class AssignReplicasToDirsReply(Message):
    throttle_time_ms: int = 0
    error_code: int = 0
    error_message: str | None = None
    directories: list[AssignDirectoryResult] = []


class AlterPartitionResult(Message):
    partition_index: int
    error_code: int
    leader: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    isr: list[int] = []


class AlterPartitionTopicResult(Message):
    topic_id: UuidField
    partitions: list[AlterPartitionResult]


class AlterPartitionReply(Message):
    error_code: int = 0
    error_message: str | None = None
    topics: list[AlterPartitionTopicResult] = []


class CreateTopicReply(Message):
    error_code: int = 0
    error_message: str | None = None
    topic_id: UuidField | None = None
    num_partitions: int = -1
    replication_factor: int = -1


class DeleteTopicReply(Message):
    error_code: int = 0
    error_message: str | None = None
    topic_id: UuidField | None = None


class UnregisterBrokerReply(Message):
    error_code: int = 0
    error_message: str | None = None


class AlterTopicConfigsReply(Message):
    error_code: int = 0
    error_message: str | None = None
    topic_id: UuidField | None = None
    configs: dict[str, str] | None = None  # the effective configs after the change (or as they would be)


class AlterBrokerConfigsReply(Message):
    error_code: int = 0
    error_message: str | None = None
    broker: str | None = None  # the resource: "" the cluster default, else a broker id
    configs: dict[str, str] | None = None  # the resource's dynamic configs after the change


class CreatePartitionsReply(Message):
    error_code: int = 0
    error_message: str | None = None
    topic_id: UuidField | None = None
    total_count: int | None = None  # the partition count after the change (or as it would be)


class ReassignmentResult(Message):
    topic: str
    partition: int
    error_code: int = 0
    error_message: str | None = None


class AlterReassignmentsReply(Message):
    error_code: int = 0
    error_message: str | None = None
    results: list[ReassignmentResult] = []


class PartitionElectionResult(Message):
    partition: int
    error_code: int = 0
    error_message: str | None = None


class TopicElectionResults(Message):
    topic: str
    partitions: list[PartitionElectionResult] = []


class ElectLeadersReply(Message):
    error_code: int = 0
    error_message: str | None = None
    results: list[TopicElectionResults] = []


class OngoingReassignment(Message):
    topic: str
    topic_id: UuidField
    partition: int
    replicas: list[int]
    adding_replicas: list[int]
    removing_replicas: list[int]


class ListReassignmentsReply(Message):
    reassignments: list[OngoingReassignment] = []


class AlterScramCredentialResult(Message):
    user: str
    error_code: int = 0
    error_message: str | None = None


class AlterScramCredentialsReply(Message):
    error_code: int = 0
    error_message: str | None = None
    results: list[AlterScramCredentialResult] = []


class ScramCredentialInfo(Message):
    mechanism: int
    iterations: int


class DescribeScramCredentialsResult(Message):
    user: str
    error_code: int = 0
    error_message: str | None = None
    credential_infos: list[ScramCredentialInfo] = []


class AllocateProducerIdsReply(Message):
    error_code: int = 0
    error_message: str | None = None
    producer_id_start: int = -1
    producer_id_len: int = 0


class AclCreationResult(Message):
    error_code: int = 0
    error_message: str | None = None


class CreateAclsReply(Message):
    results: list[AclCreationResult] = []


class DeleteAclsResult(Message):
    error_code: int = 0
    error_message: str | None = None
    matching_acls: list[AclBindingModel] = []


class DeleteAclsReply(Message):
    results: list[DeleteAclsResult] = []


class DescribeAclsReply(Message):
    acls: list[AclBindingModel] = []
