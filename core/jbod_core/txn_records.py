"""The records of Kafka's internal topic `__transaction_state`, in Kafka 4.3.1's own binary
schemas, and which of its partitions holds a transactional id.

A transaction coordinator keeps each transactional id in one partition of `__transaction_state`:
`abs(String.hashCode(id)) % partition count` (`jbod_core.kafka_hash`). Every record is a Kafka
record whose key and value are these big-endian structures, each opening with an int16, exactly as
Kafka 4.3.1 writes them (`transaction-coordinator/src/main/resources/common/message/*.json`,
`TransactionLog.keyToBytes` / `valueToBytes`), so Kafka's own readers (`kafka-dump-log.sh
--transaction-log-decoder`, `TransactionLogMessageFormatter`) print what the brokers wrote:

| part  | version | fields |
|-------|---------|--------|
| key   | 0 (the coordinator record type) | TransactionalId string |
| value | 0 | ProducerId i64, ProducerEpoch i16, TransactionTimeoutMs i32, TransactionStatus i8, TransactionPartitions [Topic string, PartitionIds [i32]]?, TransactionLastUpdateTimestampMs i64, TransactionStartTimestampMs i64 |
| value | 1 (flexible) | the same fields, compact strings and arrays, a tagged-field section after each partition entry and after the value; tags 0 PreviousProducerId i64 (default -1), 1 NextProducerId i64 (-1), 2 ClientTransactionVersion i16 (0), 3 NextProducerEpoch i16 (-1) |

Kafka writes value version 1 when the cluster's finalized `transaction.version` is 1 or more
(`TransactionVersion.transactionLogValueVersion`), with PreviousProducerId and NextProducerId
set, and version 0 (without them) below; a tagged field is written only when it is not its
default, in tag order. `TransactionPartitions` is null in state Empty and a list otherwise (empty
in the Complete states). A null value is a tombstone: the transactional id expired (it was Dead).

`TransactionStatus` is a `TransactionState` id; its names are the strings Kafka's
DescribeTransactions and ListTransactions answer (`org.apache.kafka.clients.admin.TransactionState`).

Guarantees (pure, no I/O):
* `decode(encode(r)) == r` for every record this module builds; `encode(decode(k, v)) == (k, v)`
  for every record Kafka 4.3.1 writes (partition order and unknown tagged fields are kept as read,
  checked against a real Kafka in tests/kafka_tools/test_txn_records_vs_kafka.py).
* `decode` reads value versions 0 and 1 and raises ValueError, never anything else, for bytes that
  are not exactly one such structure (an unknown key version or state id included).
* `partition_for(transactional_id, n)` is Kafka's partition for the transactional id.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Final

from jbod_core import kafka_hash
from jbod_core.record_structs import I16, I64, StructReader, StructWriter

TRANSACTION_STATE_TOPIC: Final = "__transaction_state"
# `transaction.state.log.*` as Kafka 4.3.1 has them (TransactionLogConfig).
DEFAULT_PARTITIONS: Final = 50  # transaction.state.log.num.partitions
DEFAULT_REPLICATION_FACTOR: Final = 3  # transaction.state.log.replication.factor
DEFAULT_MIN_ISR: Final = 2  # transaction.state.log.min.isr
DEFAULT_SEGMENT_BYTES: Final = 104_857_600  # transaction.state.log.segment.bytes
DEFAULT_LOAD_BUFFER_SIZE: Final = 5_242_880  # transaction.state.log.load.buffer.size

KEY_VERSION: Final = 0  # CoordinatorRecordType.TRANSACTION_LOG
VALUE_VERSION: Final = 1  # what Kafka 4.3.1 writes with transaction.version >= 1 finalized

NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1


_TAG_PREVIOUS_PRODUCER_ID: Final = 0
_TAG_NEXT_PRODUCER_ID: Final = 1
_TAG_CLIENT_TRANSACTION_VERSION: Final = 2
_TAG_NEXT_PRODUCER_EPOCH: Final = 3


def partition_for(transactional_id: str, partitions: int) -> int:
    """The partition of `__transaction_state` holding `transactional_id`."""
    return kafka_hash.partition_for(transactional_id, partitions)


class TransactionState(enum.Enum):
    """Kafka's transaction states: `value` is the record's TransactionStatus id, `kafka_name` the
    string DescribeTransactions and ListTransactions answer."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return _KAFKA_NAMES[self]

    @classmethod
    def from_kafka_name(cls, name: str) -> TransactionState | None:
        return _BY_KAFKA_NAME.get(name)


_KAFKA_NAMES: Final = {
    TransactionState.EMPTY: "Empty",
    TransactionState.ONGOING: "Ongoing",
    TransactionState.PREPARE_COMMIT: "PrepareCommit",
    TransactionState.PREPARE_ABORT: "PrepareAbort",
    TransactionState.COMPLETE_COMMIT: "CompleteCommit",
    TransactionState.COMPLETE_ABORT: "CompleteAbort",
    TransactionState.DEAD: "Dead",
    TransactionState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_KAFKA_NAME: Final = {name: state for state, name in _KAFKA_NAMES.items()}


@dataclass(frozen=True, slots=True, order=True)
class TopicPartitions:
    """One entry of TransactionPartitions: a topic and its partitions, in the order written."""

    topic: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    """TransactionLogValue; `partitions` None is the schema's null (state Empty)."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    state: TransactionState
    partitions: tuple[TopicPartitions, ...] | None
    last_update_timestamp_ms: int
    start_timestamp_ms: int
    previous_producer_id: int = NO_PRODUCER_ID  # version 1, tag 0
    next_producer_id: int = NO_PRODUCER_ID  # version 1, tag 1
    client_transaction_version: int = 0  # version 1, tag 2
    next_producer_epoch: int = NO_PRODUCER_EPOCH  # version 1, tag 3 (Kafka 4.3.1 never sets it)
    version: int = VALUE_VERSION
    unknown_tags: tuple[tuple[int, bytes], ...] = ()  # version 1 tags this schema does not know

    def __post_init__(self) -> None:
        if self.version not in (0, 1):
            raise ValueError(f"TransactionLogValue version {self.version} is not 0 or 1")
        if self.version == 0 and (
            self.previous_producer_id != NO_PRODUCER_ID
            or self.next_producer_id != NO_PRODUCER_ID
            or self.client_transaction_version != 0
            or self.next_producer_epoch != NO_PRODUCER_EPOCH
            or self.unknown_tags
        ):
            raise ValueError("TransactionLogValue version 0 has no tagged fields")


@dataclass(frozen=True, slots=True)
class TxnRecord:
    """One record of `__transaction_state`: `value` None is a tombstone."""

    transactional_id: str
    value: TransactionLogValue | None


# --- Encoding ----------------------------------------------------------------------------------


def encode_key(transactional_id: str) -> bytes:
    out = StructWriter(flexible=False)
    out.i16(KEY_VERSION)
    out.string(transactional_id)
    return out.done()


def encode_value(value: TransactionLogValue | None) -> bytes | None:
    if value is None:
        return None
    out = StructWriter(flexible=value.version >= 1)
    out.i16(value.version)
    out.i64(value.producer_id)
    out.i16(value.producer_epoch)
    out.i32(value.transaction_timeout_ms)
    out.i8(value.state.value)
    if value.partitions is None:
        out.length(None)
    else:
        out.length(len(value.partitions))
        for entry in value.partitions:
            out.string(entry.topic)
            out.length(len(entry.partitions))
            for partition in entry.partitions:
                out.i32(partition)
            out.tags([])
    out.i64(value.last_update_timestamp_ms)
    out.i64(value.start_timestamp_ms)
    tags = list(value.unknown_tags)
    if value.previous_producer_id != NO_PRODUCER_ID:
        tags.append((_TAG_PREVIOUS_PRODUCER_ID, I64.pack(value.previous_producer_id)))
    if value.next_producer_id != NO_PRODUCER_ID:
        tags.append((_TAG_NEXT_PRODUCER_ID, I64.pack(value.next_producer_id)))
    if value.client_transaction_version != 0:
        tags.append((_TAG_CLIENT_TRANSACTION_VERSION, I16.pack(value.client_transaction_version)))
    if value.next_producer_epoch != NO_PRODUCER_EPOCH:
        tags.append((_TAG_NEXT_PRODUCER_EPOCH, I16.pack(value.next_producer_epoch)))
    out.tags(tags)
    return out.done()


def encode(record: TxnRecord) -> tuple[bytes, bytes | None]:
    """The record's (key, value) bytes; value None for a tombstone."""
    return encode_key(record.transactional_id), encode_value(record.value)


# --- Decoding ----------------------------------------------------------------------------------


def decode_key(data: bytes) -> str:
    """The transactional id of a key."""
    reader = StructReader(data)
    version = reader.i16()
    if version != KEY_VERSION:
        raise ValueError(f"Key version {version} is not one of __transaction_state")
    transactional_id = reader.string()
    reader.end()
    return transactional_id


def _tag_int(data: bytes, codec: struct.Struct, tag: int) -> int:
    if len(data) != codec.size:
        raise ValueError(f"Tagged field {tag} of {len(data)} bytes, expected {codec.size}")
    return int(codec.unpack(data)[0])


def decode_value(data: bytes) -> TransactionLogValue:
    reader = StructReader(data)
    version = reader.i16()
    if version not in (0, 1):
        raise ValueError(f"TransactionLogValue version {version} is not one Kafka 4.3.1 writes (0-1)")
    reader.flexible = version >= 1
    producer_id = reader.i64()
    producer_epoch = reader.i16()
    timeout_ms = reader.i32()
    status = reader.i8()
    try:
        state = TransactionState(status)
    except ValueError:
        raise ValueError(f"Unknown transaction state id {status}") from None
    count = reader.length()
    partitions: tuple[TopicPartitions, ...] | None = None
    if count is not None:
        entries = []
        for _ in range(count):
            topic = reader.string()
            ids = reader.length()
            if ids is None:
                raise ValueError(f"A null partition list of topic {topic}")
            entries.append(TopicPartitions(topic, tuple(reader.i32() for _ in range(ids))))
            if reader.tags():
                raise ValueError(f"Tagged fields in the partitions of topic {topic}")
        partitions = tuple(entries)
    last_update_ms = reader.i64()
    start_ms = reader.i64()
    previous_id = next_id = NO_PRODUCER_ID
    next_epoch = NO_PRODUCER_EPOCH
    client_version = 0
    unknown: list[tuple[int, bytes]] = []
    for tag, raw in reader.tags():
        if tag == _TAG_PREVIOUS_PRODUCER_ID:
            previous_id = _tag_int(raw, I64, tag)
        elif tag == _TAG_NEXT_PRODUCER_ID:
            next_id = _tag_int(raw, I64, tag)
        elif tag == _TAG_CLIENT_TRANSACTION_VERSION:
            client_version = _tag_int(raw, I16, tag)
        elif tag == _TAG_NEXT_PRODUCER_EPOCH:
            next_epoch = _tag_int(raw, I16, tag)
        else:
            unknown.append((tag, raw))
    reader.end()
    return TransactionLogValue(
        producer_id,
        producer_epoch,
        timeout_ms,
        state,
        partitions,
        last_update_ms,
        start_ms,
        previous_producer_id=previous_id,
        next_producer_id=next_id,
        client_transaction_version=client_version,
        next_producer_epoch=next_epoch,
        version=version,
        unknown_tags=tuple(unknown),
    )


def decode(key: bytes, value: bytes | None) -> TxnRecord:
    """The record of a `__transaction_state` record's key and value (the module's guarantees)."""
    return TxnRecord(decode_key(key), None if value is None else decode_value(value))
