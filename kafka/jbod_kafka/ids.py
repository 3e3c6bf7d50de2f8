"""Kafka's wire UUIDs (kio's `uuid.UUID`) and the core's `Uuid`: the two are inverse translations
of the same 16 bytes. Both are memoized (a cluster has few topic ids, and every fetch and
produce names them: the translations ran per partition per request)."""

from __future__ import annotations

import functools
import uuid

from jbod_core.ids import Uuid


@functools.lru_cache(maxsize=1 << 14)
def kafka_uuid(value: Uuid) -> uuid.UUID:
    return uuid.UUID(bytes=value.to_bytes())


@functools.lru_cache(maxsize=1 << 14)
def jbod_uuid(value: uuid.UUID) -> Uuid:
    return Uuid.from_bytes(value.bytes)
