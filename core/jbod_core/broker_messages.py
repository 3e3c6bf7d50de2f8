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
from pydantic import Field

from jbod_core.messages import (
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
