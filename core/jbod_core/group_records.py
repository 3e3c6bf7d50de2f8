"""The records of Kafka's internal topic `__consumer_offsets`, in Kafka's own binary schemas, and
which of its partitions holds a group.

A group coordinator keeps each group it coordinates in one partition of `__consumer_offsets`:
`abs(String.hashCode(group)) % partition count` (Kafka's `GroupCoordinatorService.partitionFor`,
Java's hash over UTF-16 code units, in `jbod_core.kafka_hash`). Every record is a Kafka record whose key and value are
these big-endian structures, each opening with its schema version (int16), exactly as Kafka's
group coordinator writes them (`group-coordinator/src/main/resources/common/message/*.json`), so
Kafka's own readers (`kafka-console-consumer.sh --formatter
org.apache.kafka.tools.consumer.OffsetsMessageFormatter`) print what the brokers wrote:

| key version | key                                          | value (written version) |
|-------------|----------------------------------------------|-------------------------|
| 0, 1        | OffsetCommitKey: group, topic, partition i32 | OffsetCommitValue (3): offset i64, leaderEpoch i32, metadata, commitTimestamp i64 |
| 2           | GroupMetadataKey: group                      | GroupMetadataValue (3): protocolType, generation i32, protocol?, leader?, currentStateTimestamp i64, members [memberId, groupInstanceId?, clientId, clientHost, rebalanceTimeout i32, sessionTimeout i32, subscription bytes, assignment bytes] |
| 3 and up    | the new consumer protocol's records (KIP-848) | not kept here: `decode` returns None |

Strings are an int16 length then UTF-8 (`?`: nullable, length -1 for null), bytes an int32
length, arrays an int32 count. A null value is a tombstone: the group, or the group's offset of
that partition, is deleted.

Guarantees (pure, no I/O):
* `decode(encode(r)) == r` for every record this module builds; keys are written at version 1
  (offsets) and 2 (groups), values at version 3, as Kafka 4 writes them.
* `decode` reads value versions 0-3 of both schemas (older Kafka versions' records, with their
  defaults for the fields they lack) and raises ValueError, never anything else, for bytes that
  are not exactly one such structure; a key of version 3 or more is None (another protocol's).
* `partition_for(group, n)` is Kafka's partition for the group, for every string.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final, TypeAlias

from jbod_core import kafka_hash
from jbod_core.record_structs import I16, I32, I64, StructReader, StructWriter

OFFSETS_TOPIC: Final = "__consumer_offsets"
DEFAULT_PARTITIONS: Final = 50  # offsets.topic.num.partitions
DEFAULT_REPLICATION_FACTOR: Final = 3  # offsets.topic.replication.factor

OFFSET_COMMIT_KEY_VERSION: Final = 1
GROUP_METADATA_KEY_VERSION: Final = 2
OFFSET_COMMIT_VALUE_VERSION: Final = 3
GROUP_METADATA_VALUE_VERSION: Final = 3


def partition_for(group_id: str, partitions: int) -> int:
    """The partition of `__consumer_offsets` holding `group_id` (Kafka's `Utils.abs(hash) % n`)."""
    return kafka_hash.partition_for(group_id, partitions)


# --- Records -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int  # -1: unknown
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1  # value version 1 only; read, never written


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int  # -1 in version 0 records: the session timeout then
    session_timeout_ms: int
    subscription: bytes  # the member's metadata for the group's protocol
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int  # -1: unknown
    members: tuple[MemberMetadata, ...]


Key: TypeAlias = OffsetCommitKey | GroupMetadataKey
Value: TypeAlias = OffsetCommitValue | GroupMetadataValue


@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    """One record of `__consumer_offsets`: `value` None is a tombstone."""

    key: Key
    value: Value | None

    def __post_init__(self) -> None:
        offsets = isinstance(self.key, OffsetCommitKey)
        if self.value is not None and offsets != isinstance(self.value, OffsetCommitValue):
            raise ValueError(f"{type(self.value).__name__} cannot be the value of {type(self.key).__name__}")


def offset_commit(
    group: str, topic: str, partition: int, value: OffsetCommitValue | None
) -> CoordinatorRecord:
    return CoordinatorRecord(OffsetCommitKey(group, topic, partition), value)


def group_metadata(group: str, value: GroupMetadataValue | None) -> CoordinatorRecord:
    return CoordinatorRecord(GroupMetadataKey(group), value)


# --- Encoding ----------------------------------------------------------------------------------


def encode_key(key: Key) -> bytes:
    out = StructWriter()
    if isinstance(key, OffsetCommitKey):
        out.i16(OFFSET_COMMIT_KEY_VERSION)
        out.string(key.group)
        out.string(key.topic)
        out.i32(key.partition)
    else:
        out.i16(GROUP_METADATA_KEY_VERSION)
        out.string(key.group)
    return out.done()


def encode_value(value: Value | None) -> bytes | None:
    if value is None:
        return None
    out = StructWriter()
    if isinstance(value, OffsetCommitValue):
        out.i16(OFFSET_COMMIT_VALUE_VERSION)
        out.i64(value.offset)
        out.i32(value.leader_epoch)
        out.string(value.metadata)
        out.i64(value.commit_timestamp_ms)
        return out.done()
    out.i16(GROUP_METADATA_VALUE_VERSION)
    out.string(value.protocol_type)
    out.i32(value.generation)
    out.string(value.protocol)
    out.string(value.leader)
    out.i64(value.current_state_timestamp_ms)
    out.i32(len(value.members))
    for member in value.members:
        out.string(member.member_id)
        out.string(member.group_instance_id)
        out.string(member.client_id)
        out.string(member.client_host)
        out.i32(member.rebalance_timeout_ms)
        out.i32(member.session_timeout_ms)
        out.bytes_(member.subscription)
        out.bytes_(member.assignment)
    return out.done()


def encode(record: CoordinatorRecord) -> tuple[bytes, bytes | None]:
    """The record's (key, value) bytes; value None for a tombstone."""
    return encode_key(record.key), encode_value(record.value)


# --- Decoding ----------------------------------------------------------------------------------


def decode_key(data: bytes) -> Key | None:
    """The key in `data`; None for a key of another protocol (version 3 and up)."""
    reader = StructReader(data)
    version = reader.i16()
    key: Key
    if version in (0, 1):
        key = OffsetCommitKey(reader.string(), reader.string(), reader.i32())
    elif version == GROUP_METADATA_KEY_VERSION:
        key = GroupMetadataKey(reader.string())
    elif version > GROUP_METADATA_KEY_VERSION:
        return None
    else:
        raise ValueError(f"Key version {version} is not one of __consumer_offsets")
    reader.end()
    return key


def _offset_value(reader: StructReader) -> OffsetCommitValue:
    version = reader.i16()
    if not 0 <= version <= OFFSET_COMMIT_VALUE_VERSION:
        raise ValueError(f"OffsetCommitValue version {version} is not one this coordinator reads (0-3)")
    offset = reader.i64()
    leader_epoch = reader.i32() if version >= 3 else -1
    metadata = reader.string()
    commit_timestamp = reader.i64()
    expire_timestamp = reader.i64() if version == 1 else -1
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


def _group_value(reader: StructReader) -> GroupMetadataValue:
    version = reader.i16()
    if not 0 <= version <= GROUP_METADATA_VALUE_VERSION:
        raise ValueError(f"GroupMetadataValue version {version} is not one this coordinator reads (0-3)")
    protocol_type = reader.string()
    generation = reader.i32()
    protocol = reader.nullable_string()
    leader = reader.nullable_string()
    state_timestamp = reader.i64() if version >= 2 else -1
    count = reader.i32()
    if count < 0:
        raise ValueError(f"A member count of {count}")
    members = []
    for _ in range(count):
        member_id = reader.string()
        instance_id = reader.nullable_string() if version >= 3 else None
        client_id = reader.string()
        client_host = reader.string()
        rebalance_timeout = reader.i32() if version >= 1 else -1
        session_timeout = reader.i32()
        members.append(
            MemberMetadata(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                reader.bytes_(),
                reader.bytes_(),
            )
        )
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_timestamp, tuple(members))


_OFFSET_VALUE_V3_FIXED: Final = struct.Struct(">hqih")  # version, offset, leader epoch, metadata length


def _offset_commit_fast(key: bytes, value: bytes | None) -> CoordinatorRecord | None:
    """The common record, an OffsetCommitKey v1 with a version 3 value, read with a few
    `struct` calls (loading replays millions of them); None for anything else, which `decode`
    then reads field by field (and judges)."""
    try:
        version, group_size = I16.unpack_from(key, 0)[0], I16.unpack_from(key, 2)[0]
        topic_at = 4 + group_size
        topic_size = I16.unpack_from(key, topic_at)[0]
        partition_at = topic_at + 2 + topic_size
        if version != 1 or group_size < 0 or topic_size < 0 or partition_at + 4 != len(key):
            return None
        parsed_key = OffsetCommitKey(
            key[4:topic_at].decode("utf-8"),
            key[topic_at + 2 : partition_at].decode("utf-8"),
            I32.unpack_from(key, partition_at)[0],
        )
        if value is None:
            return CoordinatorRecord(parsed_key, None)
        value_version, offset, leader_epoch, metadata_size = _OFFSET_VALUE_V3_FIXED.unpack_from(value, 0)
        metadata_end = 16 + metadata_size
        if value_version != 3 or metadata_size < 0 or metadata_end + 8 != len(value):
            return None
        metadata = value[16:metadata_end].decode("utf-8")
        committed = OffsetCommitValue(offset, leader_epoch, metadata, I64.unpack_from(value, metadata_end)[0])
    except (struct.error, UnicodeDecodeError):
        return None
    return CoordinatorRecord(parsed_key, committed)


def decode(key: bytes, value: bytes | None) -> CoordinatorRecord | None:
    """The record of a `__consumer_offsets` record's key and value (the module's guarantees)."""
    fast = _offset_commit_fast(key, value)
    if fast is not None:
        return fast
    decoded = decode_key(key)
    if decoded is None:
        return None
    if value is None:
        return CoordinatorRecord(decoded, None)
    reader = StructReader(value)
    parsed: Value = _offset_value(reader) if isinstance(decoded, OffsetCommitKey) else _group_value(reader)
    reader.end()
    return CoordinatorRecord(decoded, parsed)
