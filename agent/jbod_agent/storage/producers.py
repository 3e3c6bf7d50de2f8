"""The producer state snapshot of a replica (Kafka's `.snapshot`): the idempotent and transactional
producers' state (`jbod_core.producer_state`) that `PartitionLog` keeps, saved at every segment
roll (`PartitionLog`), with the periodic flush when it changed and at a clean shutdown
(`log_upkeep`), so a rebuild replays only the batches after it.

Guarantees:
* `read_snapshot(log)` is (end offset, state) of the newest snapshot when it still describes a
  prefix of this log (the batch just before its offset has the CRC it recorded: a follower that
  truncated and re-fetched since has other batches there), else None; `PartitionLog` replays
  every batch after it (or from the log start). A damaged snapshot is ignored (logged), never
  trusted. `load(log)` is the log's state (`PartitionLog.producer_state`).
* `save(log, state)` writes the snapshot of `state` at the log's end offset, atomically (temp
  file and rename; it is derived data, made durable with the log's next flush). A snapshot at
  an end offset of 0 is not written.
* The state is changed only by `PartitionLog`'s appends (leader and follower; the leader's
  produce path checks a batch and appends it with no await in between, so two produce requests
  of one producer cannot both pass the same check), and by `producer_state.expire` just before a
  snapshot is saved (`log_upkeep`).
"""

from __future__ import annotations

import logging
import struct
from pathlib import Path
from typing import Final, Protocol

from jbod_core import producer_state
from jbod_core.producer_state import ProducerState
from jbod_kafka.record_batch import BatchHeader
from jbod_runtime import durable_files


class SnapshotLog(Protocol):
    """What a snapshot needs of a replica's log (`partition_log.PartitionLog` is one)."""

    @property
    def path(self) -> Path: ...
    @property
    def end_offset(self) -> int: ...
    @property
    def producer_state(self) -> ProducerState: ...
    def batch_before(self, offset: int) -> BatchHeader | None: ...


log = logging.getLogger("jbod_agent.producers")

SNAPSHOT_FILE: Final = "producer-state.snapshot"
_HEADER: Final = struct.Struct(">4sHqIq")  # magic, version, end offset, last batch CRC, its base offset
_MAGIC: Final = b"JPSS"
_VERSION: Final = 1


def _path(log_: SnapshotLog) -> Path:
    return log_.path / SNAPSHOT_FILE


def read_snapshot(log_: SnapshotLog) -> tuple[int, ProducerState] | None:
    """(end offset, state) of the replica's snapshot, if it is whole and still fits the log."""
    try:
        data = _path(log_).read_bytes()
    except FileNotFoundError:
        return None
    try:
        if len(data) < _HEADER.size:
            raise ValueError("shorter than its header")
        magic, version, end, crc, base = _HEADER.unpack_from(data)
        if magic != _MAGIC or version != _VERSION:
            raise ValueError(f"not a version {_VERSION} producer snapshot")
        state = producer_state.decode_snapshot(data[_HEADER.size :])
    except ValueError as exc:
        log.warning("Ignored the producer snapshot of %s: %s", log_.path.name, exc)
        return None
    before = log_.batch_before(end)
    if before is None or before.crc != crc or before.base_offset != base or before.next_offset != end:
        return None  # the log changed under it (truncated, or retention passed it)
    return end, state


def load(log_: SnapshotLog) -> ProducerState:
    """The producer state of `log_` (the module's guarantee)."""
    return log_.producer_state


def save(log_: SnapshotLog, state: ProducerState) -> None:
    """Write the snapshot of `state` at `log_`'s end offset (the module's guarantee)."""
    end = log_.end_offset
    before = log_.batch_before(end)
    if before is None:
        return
    header = _HEADER.pack(_MAGIC, _VERSION, end, before.crc, before.base_offset)
    durable_files.replace_atomically(_path(log_), header + producer_state.encode_snapshot(state))
