"""Requests of the broker's data-plane API (protocol §4.4 plus the replication extension).

Guarantees:
* Same conventions as `jbod_core.messages`: strict, frozen, camelCase on the wire, unknown fields
  ignored, int32/int64 ranges checked, Uuids parsed; `validation_message` names the field.
* `decode_produce_records` turns the base64 keys and values of a produce request into bytes, or
  raises `ValueError` naming the first bad field (`records[3].value: not base64`); nothing is
  appended unless every record decodes.
* `parse_produce` is the produce hot path: a well-formed body is checked by hand (no model per
  record); anything else goes through `ProduceRequest`, so a bad body gets the same one-line
  message naming the field either way.
* A request may carry at most `MAX_RECORDS_PER_PRODUCE` records and `MAX_PARTITIONS_PER_REQUEST`
  partitions (a replica fetch: as many again in `forgotten`).
"""

from __future__ import annotations

import binascii
from dataclasses import dataclass
from typing import Any, Final, Literal

import orjson
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

MAX_RECORDS_PER_PRODUCE: Final = 100_000
MAX_TIMEOUT_MS: Final = 300_000


class ProduceRecordModel(Message):
    key: str | None = None
    value: str


class ProduceRequest(Message):
    topic: str
    partition: Int32
    acks: Literal[-1, 0, 1]
    records: list[ProduceRecordModel] = Field(max_length=MAX_RECORDS_PER_PRODUCE)
    timeout_ms: int = Field(default=30_000, ge=1, le=MAX_TIMEOUT_MS)


def _b64(text: str) -> bytes:
    return binascii.a2b_base64(text, strict_mode=True)


def decode_produce_records(request: ProduceRequest) -> list[tuple[bytes | None, bytes]]:
    out: list[tuple[bytes | None, bytes]] = []
    field = "value"
    index = 0
    try:
        for index, record in enumerate(request.records):  # noqa: B007 - used in the message
            field = "key"
            key = None if record.key is None else _b64(record.key)
            field = "value"
            out.append((key, _b64(record.value)))
    except (binascii.Error, ValueError):
        raise ValueError(f"records[{index}].{field}: not base64") from None
    return out


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


@dataclass(frozen=True, slots=True)
class ProduceCall:
    topic: str
    partition: int
    acks: int
    timeout_ms: int
    records: list[tuple[bytes | None, bytes]]


def _well_formed(data: Any) -> bool:
    if not isinstance(data, dict):
        return False
    topic, partition, acks = data.get("topic"), data.get("partition"), data.get("acks")
    timeout = data.get("timeoutMs", 30_000)
    records = data.get("records")
    return (
        isinstance(topic, str)
        and type(partition) is int
        and 0 <= partition <= 2**31 - 1
        and type(acks) is int
        and acks in (-1, 0, 1)
        and type(timeout) is int
        and 1 <= timeout <= MAX_TIMEOUT_MS
        and isinstance(records, list)
        and len(records) <= MAX_RECORDS_PER_PRODUCE
        and all(
            isinstance(r, dict)
            and isinstance(r.get("value"), str)
            and (r.get("key") is None or isinstance(r.get("key"), str))
            for r in records
        )
    )


def parse_produce(body: bytes) -> ProduceCall:
    """A produce body, decoded; `ValidationError` or `ValueError` (naming the field) if it is bad."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    if not _well_formed(data):
        model = ProduceRequest.model_validate_json(body)  # raises with the field named
        return ProduceCall(
            model.topic, model.partition, model.acks, model.timeout_ms, decode_produce_records(model)
        )
    out: list[tuple[bytes | None, bytes]] = []
    a2b = binascii.a2b_base64
    index = 0
    field = "value"
    try:
        for index, record in enumerate(data["records"]):  # noqa: B007 - used in the message
            key = record.get("key")
            field = "key"
            decoded_key = None if key is None else a2b(key, strict_mode=True)
            field = "value"
            out.append((decoded_key, a2b(record["value"], strict_mode=True)))
    except (binascii.Error, ValueError):
        raise ValueError(f"records[{index}].{field}: not base64") from None
    return ProduceCall(data["topic"], data["partition"], data["acks"], data.get("timeoutMs", 30_000), out)
