"""Requests of the broker's own HTTP API (protocol §4.4): the operator's replica moves.

Guarantees: same conventions as `jbod_core.messages`: strict, frozen, camelCase on the wire,
unknown fields ignored, int32/int64 ranges checked, Uuids parsed; `validation_message` names the
field.
"""

from __future__ import annotations

from pydantic import Field

from jbod_core.messages import (
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
