"""Requests of the broker's own HTTP API (protocol §4.4 plus the replication extension).

Guarantees:
* Same conventions as `jbod_core.messages`: strict, frozen, camelCase on the wire, unknown fields
  ignored, int32/int64 ranges checked, Uuids parsed; `validation_message` names the field.
* A replica fetch may list at most `MAX_PARTITIONS_PER_REQUEST` partitions, and as many again in
  `forgotten`.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from jbod_core.messages import (
    INT32_MAX,
    INT64_MAX,
    MAX_PARTITIONS_PER_REQUEST,
    Int32,
    Int64,
    Message,
    UuidField,
)


class MoveReplicaRequest(Message):
    topic: str
    partition: Int32
    directory_id: UuidField
    max_bytes_per_second: Int64 | None = Field(default=None, ge=1)


class ReplicaFetchPartition(Message):
    topic_id: UuidField
    partition: Int32
    fetch_offset: int = Field(ge=0, le=INT64_MAX)
    last_fetched_epoch: Int32 = -1
    current_leader_epoch: Int32


class ReplicaFetchForgotten(Message):
    topic_id: UuidField
    partition: Int32


class ReplicaFetchRequest(Message):
    """A follower's fetch (extension `POST /v1/replica/fetch`): one request per leader.

    `sessionId` / `sessionEpoch` / `forgotten` are the incremental fetch sessions of
    `jbod_core.fetch_session` (KIP-227); left out, the request is a sessionless full fetch, as
    sent by followers that predate sessions.
    """

    replica_id: int = Field(ge=0, le=INT32_MAX)
    broker_epoch: Int64 = -1
    max_wait_ms: int = Field(default=500, ge=0, le=60_000)
    max_bytes: int = Field(default=10 * 1024 * 1024, ge=1, le=2**31 - 1)
    partition_max_bytes: int = Field(default=1024 * 1024, ge=1, le=2**31 - 1)
    session_id: int = Field(default=0, ge=0, le=INT32_MAX)
    session_epoch: int = Field(default=-1, ge=-1, le=INT32_MAX)
    partitions: list[ReplicaFetchPartition]
    forgotten: list[ReplicaFetchForgotten] = Field(default_factory=list)

    @model_validator(mode="after")
    def _limit(self) -> ReplicaFetchRequest:
        for name, items in (("partitions", self.partitions), ("forgotten", self.forgotten)):
            if len(items) > MAX_PARTITIONS_PER_REQUEST:
                raise ValueError(
                    f"{name}: {len(items)} exceed the limit of {MAX_PARTITIONS_PER_REQUEST} per request"
                )
        if self.session_epoch > 0 and self.session_id == 0:
            raise ValueError("sessionId: an incremental fetch (sessionEpoch > 0) needs a session id")
        if self.session_epoch <= 0 and self.forgotten:
            raise ValueError("forgotten: only an incremental fetch (sessionEpoch > 0) forgets partitions")
        return self
