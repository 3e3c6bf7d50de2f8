"""Kafka's partitioning of its internal topics by a string key: Java's `String.hashCode()` and
`Utils.abs(hash) % partitions`.

Kafka places a consumer group in `__consumer_offsets` and a transactional id in
`__transaction_state` this way (`GroupCoordinatorService.partitionFor`,
`TransactionStateManager.partitionFor`).

Guarantees (pure): `java_string_hash` equals Java's `String.hashCode()` for every string (UTF-16
code units, int32 overflow); `partition_for(key, n)` is in `[0, n)` and equals Kafka's choice,
including for the hash -2^31 (Kafka's `Utils.abs` maps it to 0).
"""

from __future__ import annotations


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode()`: `s[0]*31^(n-1) + ... + s[n-1]` over UTF-16 code units, as int32."""
    units = text.encode("utf-16-be", "surrogatepass")
    value = 0
    for i in range(0, len(units), 2):
        value = (31 * value + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def partition_for(key: str, partitions: int) -> int:
    """The partition of an internal topic of `partitions` partitions holding `key`."""
    if partitions <= 0:
        raise ValueError(f"A topic of {partitions} partitions")
    value = java_string_hash(key)
    return (0 if value == -(1 << 31) else abs(value)) % partitions
