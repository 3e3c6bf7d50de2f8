"""Kafka's wire UUIDs (kio's `uuid.UUID`) and the core's `Uuid`: the two are inverse translations
of the same 16 bytes."""

from __future__ import annotations

import uuid

from jbod_core.ids import Uuid


def kafka_uuid(value: Uuid) -> uuid.UUID:
    return uuid.UUID(bytes=value.to_bytes())


def jbod_uuid(value: uuid.UUID) -> Uuid:
    return Uuid.from_bytes(value.bytes)
