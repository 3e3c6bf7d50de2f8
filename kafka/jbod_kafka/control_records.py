"""Kafka's end-transaction markers: the control batch a partition leader appends when the
transaction coordinator commits or aborts a producer's transaction (WriteTxnMarkers).

Layout, as Kafka 4.3.1 writes it (`MemoryRecords.withEndTransactionMarker`, checked byte for byte
against Kafka's own segments by tests/kafka_tools/test_control_records_vs_kafka.py):

* a RecordBatch v2 (`record_batch`) whose attributes are transactional (0x10) and control (0x20),
  uncompressed, CreateTime; the transaction's producer id and epoch; base sequence -1; base and
  max timestamp the marker's time; one record at offset delta 0 with timestamp delta 0;
* the record's key: version int16 0 | type int16 (`ControlRecordType`: 0 ABORT, 1 COMMIT);
* the record's value (`EndTxnMarker`): version int16 0 | coordinator epoch int32; no headers.

Guarantees:
* `marker_batch(...)` builds that batch (the record by aiokafka's builder, as every batch here),
  CRC-32C computed; `read_marker(marker_batch(...))` gives back every field it was built with.
* `read_marker(batch)` decodes exactly one whole batch (CRC checked) that is such a marker into a
  typed `Marker`; it raises ValueError (a `CorruptBatchError` for bytes that are not a valid batch)
  and nothing else for anything that is not one: a data batch, a control batch that is not
  transactional or holds other than one record, another control type (Kafka's LEADER_CHANGE and
  KRaft's snapshot and voter records), a key or value too short or of a negative version. Like
  Kafka, a key or value of a newer version is read as version 0 (its first fields).
  A control batch with no record (what a cleaned log keeps of a marker) is not a marker either:
  Kafka's producer state skips it, and so must a caller replaying a log.
* A `Marker` is also a logged batch's header as `jbod_core.producer_state` reads one (producer id
  and epoch, base sequence -1, last offset delta 0, the marker's timestamp, transactional and
  control), with the marker's two fields: the producer state is built from it directly.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Final

import crc32c
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from jbod_kafka import record_batch

_I16X2: Final = struct.Struct(">hh")
_VALUE: Final = struct.Struct(">hi")
_U16: Final = struct.Struct(">H")
_U32: Final = struct.Struct(">I")
_I64: Final = struct.Struct(">q")
_I32: Final = struct.Struct(">i")

CONTROL_KEY_VERSION: Final = 0  # Kafka's ControlRecordType.CURRENT_CONTROL_RECORD_KEY_VERSION
END_TXN_MARKER_VERSION: Final = 0  # EndTxnMarker.json's only version
NO_PARTITION_LEADER_EPOCH: Final = -1  # a batch not yet stamped by a leader
TRANSACTIONAL_FLAG: Final = 0x10
CONTROL_FLAG: Final = 0x20
_ATTRIBUTES_AT: Final = 21
_CRC_AT: Final = 17


class ControlRecordType(enum.IntEnum):
    """The control record types of an end-transaction marker (Kafka's `ControlRecordType`)."""

    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True, slots=True)
class Marker:
    """One end-transaction marker: the control record's fields and its batch's header fields."""

    control_type: ControlRecordType
    coordinator_epoch: int
    producer_id: int
    producer_epoch: int
    base_offset: int
    leader_epoch: int
    timestamp_ms: int

    @property
    def aborted(self) -> bool:
        return self.control_type is ControlRecordType.ABORT

    # --- a logged batch's header, as jbod_core.producer_state reads it ---

    @property
    def base_sequence(self) -> int:
        return record_batch.NO_SEQUENCE

    @property
    def last_offset_delta(self) -> int:
        return 0

    @property
    def max_timestamp_ms(self) -> int:
        return self.timestamp_ms

    @property
    def is_transactional(self) -> bool:
        return True

    @property
    def is_control(self) -> bool:
        return True


def marker_batch(  # noqa: PLR0913  one keyword per field of the marker and its batch
    *,
    control_type: ControlRecordType,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp_ms: int,
    base_offset: int = 0,
    leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """The end-transaction marker batch of these fields (the module's layout); ValueError for a
    field out of its wire range."""
    if not 0 <= producer_id <= 2**63 - 1:
        raise ValueError(f"Producer id {producer_id} is out of range")
    if not 0 <= producer_epoch <= 2**15 - 1:
        raise ValueError(f"Producer epoch {producer_epoch} is out of range")
    if not -(2**31) <= coordinator_epoch <= 2**31 - 1:
        raise ValueError(f"Coordinator epoch {coordinator_epoch} is out of range")
    if base_offset < 0:
        raise ValueError(f"Base offset {base_offset} is out of range")
    builder = DefaultRecordBatchBuilder(
        magic=record_batch.MAGIC,
        compression_type=0,
        is_transactional=1,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=record_batch.NO_SEQUENCE,
        batch_size=record_batch.MAX_LENGTH,
    )
    builder.append(
        offset=0,
        timestamp=timestamp_ms,
        key=_I16X2.pack(CONTROL_KEY_VERSION, int(ControlRecordType(control_type))),
        value=_VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch),
        headers=[],
    )
    frame: bytearray = builder.build()
    _I64.pack_into(frame, 0, base_offset)
    _I32.pack_into(frame, 12, leader_epoch)
    (attributes,) = _U16.unpack_from(frame, _ATTRIBUTES_AT)
    _U16.pack_into(frame, _ATTRIBUTES_AT, attributes | TRANSACTIONAL_FLAG | CONTROL_FLAG)
    _U32.pack_into(frame, _CRC_AT, crc32c.crc32c(memoryview(frame)[record_batch.CRC_START :]))
    return bytes(frame)


def read_marker(batch: bytes | bytearray | memoryview) -> Marker:
    """The marker in `batch` (exactly one whole batch); ValueError if it is not one (the module's
    guarantee)."""
    header = next(record_batch.iter_headers(batch), None)
    if header is None:
        raise ValueError("No batch")
    if header.size != len(batch):
        raise ValueError(f"Expected exactly one batch of {header.size} bytes, got {len(batch)} bytes")
    if not header.is_control:
        raise ValueError(f"The batch at offset {header.base_offset} is not a control batch")
    if not header.is_transactional:
        raise ValueError(f"The control batch at offset {header.base_offset} is not transactional")
    if header.record_count != 1 or header.last_offset_delta != 0:
        raise ValueError(
            f"An end-transaction marker holds one record, the control batch at offset "
            f"{header.base_offset} holds {header.record_count}"
        )
    try:
        records = list(DefaultRecordBatch(bytes(batch)))
    except Exception as exc:  # aiokafka raises CorruptRecordException, codec errors
        raise ValueError(f"Bad control record: {exc}") from None
    if len(records) != 1:
        raise ValueError(f"An end-transaction marker holds one record, not {len(records)}")
    (record,) = records
    key, value = record.key, record.value
    if key is None or len(key) < _I16X2.size:
        raise ValueError("A control record's key holds a version and a type (4 bytes)")
    key_version, type_id = _I16X2.unpack_from(key)
    if key_version < 0:
        raise ValueError(f"Invalid control record key version {key_version}")
    if type_id not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise ValueError(f"Control record type {type_id} is not an end-transaction marker")
    if value is None or len(value) < _VALUE.size:
        raise ValueError("An end-transaction marker's value holds a version and a coordinator epoch")
    value_version, coordinator_epoch = _VALUE.unpack_from(value)
    if value_version < 0:
        raise ValueError(f"Invalid end-transaction marker version {value_version}")
    return Marker(
        control_type=ControlRecordType(type_id),
        coordinator_epoch=coordinator_epoch,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_offset=header.base_offset,
        leader_epoch=header.leader_epoch,
        timestamp_ms=record.timestamp,
    )
