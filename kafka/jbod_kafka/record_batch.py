"""Kafka's RecordBatch v2 (magic 2): the unit a replica appends, replicates, stores and serves.

Layout (big-endian), as Kafka's `DefaultRecordBatch`:

    baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 (2) | crc u32 |
    attributes i16 | lastOffsetDelta i32 | baseTimestamp i64 | maxTimestamp i64 |
    producerId i64 | producerEpoch i16 | baseSequence i32 | recordsCount i32 | records

`batchLength` counts the bytes after itself; the CRC-32C covers `attributes` to the end, so the
broker stamps `baseOffset` and `partitionLeaderEpoch` without recomputing it. The attributes hold
the compression (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd), the timestamp type, and the
transactional and control flags.

The header is read here with `struct` (the hot path: append, scan, recovery); records are
decoded and built by `aiokafka.record` (C-accelerated, all four codecs, Kafka's xerial snappy
framing), never by hand.

Guarantees:
* Parsing never trusts a length: every length is checked against the bytes present before
  anything is sliced, so garbage input raises nothing but `CorruptBatchError`, which says what is
  wrong and at which byte position (`incomplete` when the data merely ends inside a batch).
* `iter_headers` yields only batches that are whole and valid (magic 2, lengths, CRC-32C unless
  `verify_crc=False`) and raises at the first one that is not; `scan_frames` never raises and
  returns the batches before the first damage, which is what torn-tail recovery keeps.
* `check_produced` applies Kafka's checks of a produced batch (`LogValidator`): magic 2, CRC,
  at least one record, `lastOffsetDelta + 1 == recordsCount`, not a control batch, a producer id
  when transactional (the transaction itself is the producer state's to decide); an uncompressed batch's records must exactly fill it with offset deltas 0..n-1.
  Each refusal names its `BatchFault` (how Kafka answers it: CORRUPT_MESSAGE with or without its
  reason, or INVALID_RECORD), found in Kafka's order of checks. What passed is a `CheckedBatch`,
  which only `check_produced` makes: a leader's log takes nothing else as a produced batch, so
  every produced batch is checked once, before anything decides on it or writes it.
  A compressed batch is kept as the producer compressed it and not decompressed (its CRC covers
  the compressed bytes; consumers decompress). An uncompressed batch's record timestamps are
  kept from that check (`CheckedBatch.timestamps`), so `record_timestamps` reads them for free;
  a compressed one's are decompressed only when asked for.
* `recompressed` rebuilds a checked batch's records (aiokafka's builder) and compresses them with
  another codec at a given level (aiokafka's codecs, which take one), as a leader stores a batch
  whose codec is not its topic's `compression.type`: everything but the codec, length and CRC
  is kept.
* `with_base_offset` stamps the base offset and leader epoch into a copy, the CRC untouched.
* `rebuilt_batch` and `empty_batch` make what a cleaned (compacted) log keeps of a batch: its
  offsets, epoch, producer fields and timestamp type unchanged, fewer (or no) records, a valid CRC.
* `encode_batch` builds a batch that `iter_headers` and `decode_records` read back to the same
  values. Headers are frozen values; positions are byte positions in the parsed buffer (plus
  `position_base` where a caller parses a window of a larger file).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import crc32c
from aiokafka import codec as codecs
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
_OFFSET_AND_LENGTH: Final = struct.Struct(">qi")
_I64: Final = struct.Struct(">q")
_I32: Final = struct.Struct(">i")

HEADER_SIZE: Final[int] = _HEADER.size  # 61
LOG_OVERHEAD: Final[int] = 12  # baseOffset + batchLength: the bytes `batchLength` does not count
MIN_LENGTH: Final[int] = HEADER_SIZE - LOG_OVERHEAD  # a batchLength with no record bytes
_MIN_ANY_LENGTH: Final[int] = 14  # Kafka's smallest length of any magic (a v0 message): below, damage
MAGIC: Final[int] = 2
_MAGIC_AT: Final[int] = 16
_CRC_AT: Final[int] = 17
CRC_START: Final[int] = 21  # the CRC covers batch[CRC_START:]
_EPOCH_AT: Final[int] = 12
MAX_LENGTH: Final[int] = 0x7FFFFFFF

NO_PRODUCER_ID: Final[int] = -1
NO_PRODUCER_EPOCH: Final[int] = -1
NO_SEQUENCE: Final[int] = -1

_ATTRIBUTES_AT: Final[int] = 21
_MAX_TIMESTAMP_AT: Final[int] = 35
_U16: Final = struct.Struct(">H")
_U32: Final = struct.Struct(">I")
_COMPRESSION_MASK: Final = 0x07
_TIMESTAMP_TYPE_MASK: Final = 0x08
_TRANSACTIONAL_MASK: Final = 0x10
_CONTROL_MASK: Final = 0x20


class Compression(enum.IntEnum):
    """The compression codec in a batch's attributes (bits 0-2)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class BatchFault(enum.Enum):
    """What is wrong with a batch, as Kafka tells a producer (`check_produced`)."""

    UNREADABLE = "unreadable"  # no batch can be framed (a length below any format's, an unknown
    # magic): CORRUPT_MESSAGE, with Kafka's reason in the response
    DAMAGED = "damaged"  # framed, but its bytes are wrong (a bad CRC or length): CORRUPT_MESSAGE
    INVALID = "invalid"  # whole, but it breaks a rule (an old magic, no record...): INVALID_RECORD


class CorruptBatchError(ValueError):
    """Bytes that are not a valid batch; `position` is the byte position of the problem.

    `incomplete` is true when the data simply ends inside a batch (more bytes could complete it),
    as opposed to bytes that are wrong. `fault` says how Kafka would refuse it from a producer.
    """

    def __init__(
        self, message: str, *, position: int, incomplete: bool = False, fault: BatchFault = BatchFault.DAMAGED
    ) -> None:
        super().__init__(message)
        self.position = position
        self.incomplete = incomplete
        self.fault = fault


@dataclass(frozen=True, slots=True)
class BatchHeader:
    position: int  # byte position of the batch in the buffer it was parsed from
    size: int  # whole batch size in bytes (batchLength + 12)
    base_offset: int
    leader_epoch: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp_ms: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        """The codec number (a `Compression` value for a batch that passed `check_produced`)."""
        return self.attributes & _COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_MASK)

    @property
    def log_append_time(self) -> bool:
        """The timestamp type: LogAppendTime (True) or CreateTime (False)."""
        return bool(self.attributes & _TIMESTAMP_TYPE_MASK)


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def read_header(
    data: bytes | bytearray | memoryview, offset: int = 0, *, position_base: int = 0
) -> BatchHeader:
    """The header of the batch at `data[offset:]`, checking only what the header itself says
    (magic, lengths, record count plausible); the records need not be present and are not checked.

    The header's `position` is `position_base + offset`.
    """
    position = position_base + offset
    available = len(data) - offset
    if available < HEADER_SIZE:
        if available >= _MAGIC_AT + 1 and data[offset + _MAGIC_AT] != MAGIC:
            raise _bad_magic(data[offset + _MAGIC_AT], position)
        raise CorruptBatchError(
            f"Partial batch header at byte {position}: {max(available, 0)} of {HEADER_SIZE} bytes",
            position=position,
            incomplete=True,
        )
    (
        base_offset,
        length,
        epoch,
        magic,
        crc,
        attributes,
        last_delta,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = _HEADER.unpack_from(data, offset)
    if magic != MAGIC:
        raise _bad_magic(magic, position)
    if length < MIN_LENGTH:
        raise CorruptBatchError(f"Bad batch length {length} at byte {position}", position=position)
    if base_offset < 0:
        raise CorruptBatchError(f"Bad base offset {base_offset} at byte {position}", position=position)
    if last_delta < 0 or count < 0:
        raise CorruptBatchError(
            f"Bad last offset delta {last_delta} or record count {count} at byte {position}",
            position=position,
        )
    return BatchHeader(
        position,
        length + LOG_OVERHEAD,
        base_offset,
        epoch,
        crc,
        attributes,
        last_delta,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )


def _bad_magic(magic: int, position: int) -> CorruptBatchError:
    """Magic 0 and 1 are Kafka's old formats (invalid here), any other byte is damage."""
    return CorruptBatchError(
        f"Unsupported record batch magic {magic} at byte {position} (only magic 2 is kept)",
        position=position,
        fault=BatchFault.INVALID if magic in (0, 1) else BatchFault.UNREADABLE,
    )


def _check_frame(
    data: bytes | bytearray | memoryview, offset: int, position_base: int, verify_crc: bool
) -> BatchHeader:
    header = read_header(data, offset, position_base=position_base)
    end = offset + header.size
    if end > len(data):
        raise CorruptBatchError(
            f"Partial batch at byte {header.position}: {len(data) - offset} of {header.size} bytes",
            position=header.position,
            incomplete=True,
        )
    if verify_crc:
        actual = crc32c.crc32c(memoryview(data)[offset + CRC_START : end])
        if actual != header.crc:
            raise CorruptBatchError(
                f"Bad CRC-32C of batch at byte {header.position}: stored {header.crc:#010x}, "
                f"computed {actual:#010x}",
                position=header.position,
            )
    return header


def scan_frames(
    data: bytes | bytearray | memoryview, *, verify_crc: bool = True, position_base: int = 0
) -> tuple[list[BatchHeader], int, CorruptBatchError | None]:
    """Every batch from the start of `data` up to the first damage: (headers, byte length of that
    valid prefix, the error at its end or None when all of `data` is valid). Never raises.

    With `verify_crc=False` only headers and lengths are checked: for bytes that were verified
    when they were written.
    """
    headers: list[BatchHeader] = []
    offset = 0
    size = len(data)
    while offset < size:
        try:
            header = _check_frame(data, offset, position_base, verify_crc)
        except CorruptBatchError as exc:
            return headers, offset, exc
        headers.append(header)
        offset += header.size
    return headers, offset, None


def iter_headers(data: bytes | bytearray | memoryview, *, verify_crc: bool = True) -> Iterator[BatchHeader]:
    """Every batch of `data`; raises `CorruptBatchError` at the first bad magic, bad length, bad
    CRC or trailing partial batch."""
    offset = 0
    size = len(data)
    while offset < size:
        header = _check_frame(data, offset, 0, verify_crc)
        yield header
        offset += header.size


def scan_valid_prefix(data: bytes | bytearray | memoryview) -> tuple[list[BatchHeader], int]:
    """The batches that are whole and valid from the start of `data`, and the byte length of that
    valid prefix; never raises (torn-tail recovery keeps exactly this prefix)."""
    headers, valid_size, _error = scan_frames(data)
    return headers, valid_size


@dataclass(frozen=True, slots=True)
class CheckedBatch:
    """One batch a producer sent that passed Kafka's checks: its bytes as sent (or compressed
    again by `recompressed`), its header, and its records' timestamps when they were read on the
    way (None: not read, a compressed batch). Made only by `check_produced` and `recompressed`."""

    data: bytes
    header: BatchHeader
    timestamps: tuple[int, ...] | None = None


def check_produced(batch: bytes | bytearray | memoryview) -> CheckedBatch:
    """Kafka's checks of one produced batch (the module's guarantee); `CorruptBatchError` says
    which failed and its `fault`. `batch` must be exactly one batch."""
    if len(batch) >= LOG_OVERHEAD:  # Kafka reads the length before the magic
        (_base_offset, length) = _OFFSET_AND_LENGTH.unpack_from(batch)
        if length < _MIN_ANY_LENGTH:
            raise CorruptBatchError(
                f"Bad batch length {length} at byte 0", position=0, fault=BatchFault.UNREADABLE
            )
    try:
        header = _check_frame(batch, 0, 0, True)
    except CorruptBatchError as exc:
        if not exc.incomplete:
            raise
        raise _invalid(str(exc), exc.position) from None  # no whole batch
    if header.size != len(batch):
        raise _invalid(f"Expected exactly one batch of {header.size} bytes, got {len(batch)} bytes")
    if header.record_count < 1:
        raise _invalid("A produced batch holds no record")
    if header.last_offset_delta + 1 != header.record_count:
        raise _invalid(
            f"Inconsistent batch offset range and record count: last offset delta "
            f"{header.last_offset_delta}, {header.record_count} records"
        )
    if header.is_control:
        raise _invalid("Clients may not produce control batches")
    if header.is_transactional and header.producer_id < 0:
        raise _invalid("A transactional batch needs a producer id")
    if header.compression > Compression.ZSTD:
        raise _invalid(f"Unknown compression codec {header.compression}")
    timestamps = None
    if header.compression == Compression.NONE:
        timestamps = _check_uncompressed_records(batch, header)
    return CheckedBatch(bytes(batch), header, timestamps)


def _invalid(message: str, position: int = 0) -> CorruptBatchError:
    return CorruptBatchError(message, position=position, fault=BatchFault.INVALID)


def _check_uncompressed_records(
    batch: bytes | bytearray | memoryview, header: BatchHeader
) -> tuple[int, ...]:
    """The records exactly fill the batch, with offset deltas 0..n-1 (parsed by aiokafka, which
    checks every length against the bytes present); their timestamps."""
    records = _records(batch)
    if [record.offset for record in records] != list(
        range(header.base_offset, header.base_offset + header.record_count)
    ):
        raise _invalid("Record offset deltas are not 0, 1, 2, ...", HEADER_SIZE)
    return tuple(record.timestamp for record in records)


def _records(batch: bytes | bytearray | memoryview) -> list[Any]:
    """Every record of one batch, decompressed, as aiokafka reads them; INVALID when they
    cannot be read."""
    try:
        return list(DefaultRecordBatch(bytes(batch)))
    except Exception as exc:  # aiokafka raises CorruptRecordException, codec errors
        raise _invalid(f"Bad records in the batch: {exc}", HEADER_SIZE) from None


def record_timestamps(batch: CheckedBatch) -> tuple[int, ...]:
    """Every record's timestamp, in the batch's order: read by `check_produced` or
    `recompressed` already, else decompressed and read here."""
    if batch.timestamps is not None:
        return batch.timestamps
    return tuple(record.timestamp for record in _records(batch.data))


def _gzip(data: bytes, level: int | None) -> bytes:
    return bytes(codecs.gzip_encode(data, compresslevel=level))


def _snappy(data: bytes, _level: int | None) -> bytes:
    return bytes(codecs.snappy_encode(data))  # Kafka's xerial framing; snappy has no level


def _lz4(data: bytes, level: int | None) -> bytes:
    return bytes(codecs.lz4_encode(data, level=9 if level is None else level))


def _zstd(data: bytes, level: int | None) -> bytes:
    return bytes(codecs.zstd_encode(data, level=level))


_ENCODERS: Final = {
    Compression.GZIP: _gzip,
    Compression.SNAPPY: _snappy,
    Compression.LZ4: _lz4,
    Compression.ZSTD: _zstd,
}


def recompressed(batch: CheckedBatch, compression: int, *, level: int | None = None) -> CheckedBatch:
    """`batch` with its records in a batch of codec `compression` (Kafka's recompression of a
    produced batch whose codec is not its topic's): the same records (offset deltas 0..n-1,
    timestamps, keys, values, headers), base offset, leader epoch, attributes but the codec,
    producer id, epoch and base sequence; the records built by aiokafka and compressed with
    `level` where the codec has one (aiokafka's codecs), always, even when that makes them
    larger (as Kafka); the CRC computed over the result. INVALID when the records cannot be
    read or their offset deltas are not 0..n-1 (Kafka's check of a compressed batch's inner
    offsets)."""
    header = batch.header
    records = _records(batch.data)
    if [record.offset for record in records] != list(
        range(header.base_offset, header.base_offset + header.record_count)
    ):
        raise _invalid("Record offset deltas are not 0, 1, 2, ...", HEADER_SIZE)
    frame = _records_frame(
        header, ((delta, r.timestamp, r.key, r.value, r.headers) for delta, r in enumerate(records))
    )
    data = _stamped(frame, header, compression=compression, level=level)
    return CheckedBatch(data, read_header(data), tuple(record.timestamp for record in records))


def keyless_records(batch: bytes | bytearray | memoryview) -> tuple[int, ...]:
    """The offset deltas of the records without a key in `batch` (one checked batch, decompressed
    when compressed), empty when every record has a key: a compacted topic refuses those records
    (Kafka's INVALID_RECORD, one record error each)."""
    try:
        return tuple(
            index for index, record in enumerate(DefaultRecordBatch(bytes(batch))) if record.key is None
        )
    except Exception as exc:  # aiokafka raises CorruptRecordException and friends
        raise _invalid(f"Bad records in the batch: {exc}", HEADER_SIZE) from None


_LAST_DELTA_AT: Final[int] = 23
LOG_APPEND_TIME_FLAG: Final[int] = 0x08  # attributes bit 3: the timestamps are the broker's


def with_base_offset(
    batch: bytes | bytearray | memoryview,
    base_offset: int,
    *,
    leader_epoch: int | None = None,
    log_append_time_ms: int | None = None,
) -> bytes:
    """`batch` (exactly one) with its base offset and, when given, its leader epoch stamped; the
    CRC does not cover them and stays as it is. With `log_append_time_ms` (a topic of
    `message.timestamp.type=LogAppendTime`) the batch's timestamp type becomes LogAppendTime and
    its max timestamp that time, as Kafka's broker rewrites it, and the CRC is computed again."""
    header = read_header(batch)
    if header.size != len(batch):
        raise CorruptBatchError(
            f"Expected exactly one batch of {header.size} bytes, got {len(batch)} bytes",
            position=min(header.size, len(batch)),
            incomplete=header.size > len(batch),
        )
    if base_offset < 0 or base_offset + header.last_offset_delta > (1 << 63) - 1:
        raise ValueError(f"Base offset {base_offset} is out of range")
    stamped = bytearray(batch)
    _I64.pack_into(stamped, 0, base_offset)
    if leader_epoch is not None:
        _I32.pack_into(stamped, _EPOCH_AT, leader_epoch)
    if log_append_time_ms is not None:
        (attributes,) = _U16.unpack_from(stamped, _ATTRIBUTES_AT)
        _U16.pack_into(stamped, _ATTRIBUTES_AT, attributes | LOG_APPEND_TIME_FLAG)
        _I64.pack_into(stamped, _MAX_TIMESTAMP_AT, log_append_time_ms)
        _U32.pack_into(stamped, _CRC_AT, crc32c.crc32c(memoryview(stamped)[CRC_START:]))
    return bytes(stamped)


def encode_batch(  # noqa: PLR0913  the records and header, then a producer's fields
    base_offset: int,
    leader_epoch: int,
    timestamp_ms: int,
    records: Sequence[tuple[bytes | None, bytes | None]],
    *,
    compression: Compression = Compression.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    transactional: bool = False,
) -> bytes:
    """One batch holding `records` ((key or None, value) pairs, at least one), every record
    timestamped `timestamp_ms`, with no producer id (not idempotent) unless one is given (then
    base sequence 0, as Kafka's coordinators write; `transactional` sets the attribute)."""
    if not records:
        raise ValueError("A batch needs at least one record")
    if base_offset < 0:
        raise ValueError(f"Base offset {base_offset} is out of range")
    builder = DefaultRecordBatchBuilder(
        magic=MAGIC,
        compression_type=int(compression),
        is_transactional=int(transactional),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE if producer_id == NO_PRODUCER_ID else 0,
        batch_size=MAX_LENGTH,
    )
    append = builder.append
    for delta, (key, value) in enumerate(records):
        append(offset=delta, timestamp=timestamp_ms, key=key, value=value, headers=[])
    frame: bytearray = builder.build()
    if len(frame) - LOG_OVERHEAD > MAX_LENGTH:
        raise ValueError(f"A batch of {len(frame)} bytes does not fit a batch length")
    _I64.pack_into(frame, 0, base_offset)
    _I32.pack_into(frame, _EPOCH_AT, leader_epoch)
    return bytes(frame)


def empty_batch(  # noqa: PLR0913  one keyword per header field a cleaned log keeps
    *,
    base_offset: int,
    last_offset_delta: int,
    leader_epoch: int,
    timestamp_ms: int,
    attributes: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
) -> bytes:
    """A batch holding no record that spans offsets [base_offset, base_offset + last_offset_delta]
    (what a compacted log keeps where records were removed: the last batch of an idempotent
    producer, as Kafka keeps it, or a run of removed batches), uncompressed, CRC computed.
    `attributes` keep their timestamp type, transactional and control bits, never a codec."""
    if base_offset < 0 or last_offset_delta < 0:
        raise ValueError(f"Bad offset range {base_offset} + {last_offset_delta}")
    frame = bytearray(HEADER_SIZE)
    _HEADER.pack_into(
        frame,
        0,
        base_offset,
        HEADER_SIZE - LOG_OVERHEAD,
        leader_epoch,
        MAGIC,
        0,
        attributes & ~_COMPRESSION_MASK,
        last_offset_delta,
        timestamp_ms,
        timestamp_ms,
        producer_id,
        producer_epoch,
        base_sequence,
        0,
    )
    _U32.pack_into(frame, _CRC_AT, crc32c.crc32c(memoryview(frame)[CRC_START:]))
    return bytes(frame)


class StoredRecord(Protocol):
    """A record as `stored_records` reads it (aiokafka's, not copied): its absolute offset,
    timestamp, key, value and headers."""

    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Any: ...


def stored_records(batch: bytes | memoryview) -> list[StoredRecord]:
    """The records of a stored batch (exactly one, already verified: no CRC check), decompressed
    when compressed, as aiokafka reads them (no copy into `Record`s: the cleaner's hot path)."""
    try:
        records: list[StoredRecord] = list(DefaultRecordBatch(batch))
    except Exception as exc:  # aiokafka raises CorruptRecordException, codec errors
        raise CorruptBatchError(f"Bad records in the batch: {exc}", position=HEADER_SIZE) from None
    return records


def rebuilt_batch(header: BatchHeader, records: Sequence[StoredRecord]) -> bytes:
    """The batch `header` describes holding only `records` (some of its records, at least one,
    in order): the same base offset, last offset delta, leader epoch, attributes, producer id,
    epoch and base sequence, each record's offset, timestamp, key, value and headers kept,
    compressed with the batch's codec, CRC computed (what a cleaned log keeps of a batch).
    A LogAppendTime batch keeps its max timestamp; a CreateTime batch gets its records' newest."""
    if not records:
        raise ValueError("A rebuilt batch needs at least one record")
    for record in records:
        if not 0 <= record.offset - header.base_offset <= header.last_offset_delta:
            raise ValueError(f"Record offset {record.offset} is outside the batch at {header.base_offset}")
    frame = _records_frame(
        header,
        ((r.offset - header.base_offset, r.timestamp, r.key, r.value, r.headers) for r in records),
    )
    return _stamped(
        frame,
        header,
        compression=header.compression,
        level=None,
        last_offset_delta=header.last_offset_delta,
        max_timestamp_ms=header.max_timestamp_ms if header.log_append_time else None,
    )


def _records_frame(
    header: BatchHeader, records: Iterable[tuple[int, int, bytes | None, bytes | None, Any]]
) -> bytearray:
    """An uncompressed batch of `records` ((offset delta, timestamp, key, value, headers) each)
    with `header`'s transactional flag, producer id, epoch and base sequence (aiokafka's builder)."""
    builder = DefaultRecordBatchBuilder(
        magic=MAGIC,
        compression_type=Compression.NONE,
        is_transactional=int(header.is_transactional),
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        batch_size=MAX_LENGTH,
    )
    append = builder.append
    for delta, timestamp, key, value, headers in records:
        append(offset=delta, timestamp=timestamp, key=key, value=value, headers=headers)
    frame: bytearray = builder.build()
    return frame


def _stamped(  # noqa: PLR0913  the frame and its header, then what the caller changes
    frame: bytearray,
    header: BatchHeader,
    *,
    compression: int,
    level: int | None,
    last_offset_delta: int | None = None,
    max_timestamp_ms: int | None = None,
) -> bytes:
    """`frame`'s records compressed with `compression` (at `level`), with `header`'s base
    offset, leader epoch and attributes (the codec `compression`), the given last offset delta
    and max timestamp, the length and CRC computed."""
    if compression != Compression.NONE:
        frame[HEADER_SIZE:] = _ENCODERS[Compression(compression)](bytes(frame[HEADER_SIZE:]), level)
    if len(frame) - LOG_OVERHEAD > MAX_LENGTH:
        raise _invalid(f"A batch of {len(frame)} bytes does not fit a batch length")
    _I64.pack_into(frame, 0, header.base_offset)
    _I32.pack_into(frame, LOG_OVERHEAD - 4, len(frame) - LOG_OVERHEAD)
    _I32.pack_into(frame, _EPOCH_AT, header.leader_epoch)
    _U16.pack_into(frame, _ATTRIBUTES_AT, (header.attributes & ~_COMPRESSION_MASK) | compression)
    if last_offset_delta is not None:
        _I32.pack_into(frame, _LAST_DELTA_AT, last_offset_delta)
    if max_timestamp_ms is not None:
        _I64.pack_into(frame, _MAX_TIMESTAMP_AT, max_timestamp_ms)
    _U32.pack_into(frame, _CRC_AT, crc32c.crc32c(memoryview(frame)[CRC_START:]))
    return bytes(frame)


def decode_records(batch: bytes | bytearray | memoryview, *, verify_crc: bool = True) -> list[Record]:
    """Every record of `batch` (exactly one batch), decompressed when compressed."""
    data = bytes(batch)
    header = _check_frame(data, 0, 0, verify_crc)
    if header.size != len(data):
        raise CorruptBatchError(
            f"Expected exactly one batch of {header.size} bytes, got {len(data)} bytes", position=header.size
        )
    try:
        return [
            Record(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in DefaultRecordBatch(data)
        ]
    except Exception as exc:  # aiokafka raises CorruptRecordException, codec errors
        raise CorruptBatchError(f"Bad records in the batch: {exc}", position=HEADER_SIZE) from None
