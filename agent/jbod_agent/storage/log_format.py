"""Which record format a replica's segments hold, and the conversion of jbod's legacy frames to
Kafka's RecordBatch v2 (`jbod-storage convert-logs`).

Guarantees:
* `find_legacy(log_dir)` lists the replica dirs of `log_dir` with at least one segment in the
  legacy format (`legacy_batch`), reading at most one frame per segment. The agent refuses to
  start while any is left, so a legacy log is never read as Kafka batches.
* `convert_replica(path)` rewrites every legacy segment of one replica dir as Kafka batches with
  the same offsets, leader epochs, timestamps, keys and values (one batch per legacy frame). Each
  segment is replaced atomically (temp file, fsync, rename, then its index is dropped and
  rebuilt on open), so an interrupted conversion leaves every segment whole in one format or the
  other, and running it again finishes the job; segments already in Kafka's format are left
  alone. Damage is refused with `ValueError` naming the file and byte, except a torn tail of
  the last segment, which is cut as recovery would cut it (reported in the result).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from jbod_agent.storage import legacy_batch, replicas
from jbod_kafka import record_batch
from jbod_runtime import durable_files

_SEGMENT: Final = re.compile(r"(\d{20})\.log")


@dataclass(frozen=True, slots=True)
class Converted:
    path: Path
    segments: int  # legacy segments rewritten
    batches: int  # legacy frames rewritten as Kafka batches
    torn_bytes: int  # bytes of a torn tail cut from the last segment


def _segments(replica: Path) -> list[Path]:
    return sorted(replica / name for name in os.listdir(replica) if _SEGMENT.fullmatch(name))


def segment_is_legacy(segment: Path) -> bool:
    """Whether `segment` starts like a legacy frame (an empty segment does not)."""
    with open(segment, "rb") as handle:
        head = handle.read(record_batch.HEADER_SIZE)
    try:
        record_batch.read_header(head)
    except record_batch.CorruptBatchError:
        return legacy_batch.looks_legacy(head)
    return False


def find_legacy(log_dir: Path) -> list[Path]:
    """The replica dirs of `log_dir` holding a legacy segment (module docstring)."""
    found = []
    for replica in replicas.scan(log_dir):
        if any(segment_is_legacy(segment) for segment in _segments(replica.path)):
            found.append(replica.path)
    return sorted(found)


def convert_replica(replica: Path) -> Converted:
    """Rewrite the legacy segments of `replica` as Kafka batches (module docstring)."""
    segments = _segments(replica)
    converted = batches = torn = 0
    for number, segment in enumerate(segments):
        if not segment_is_legacy(segment):
            continue
        data = segment.read_bytes()
        frames, valid = _frames(segment, data, last=number == len(segments) - 1)
        torn += len(data) - valid
        rewritten = b"".join(
            record_batch.encode_batch(f.base_offset, f.leader_epoch, f.max_timestamp_ms, f.records)
            for f in frames
        )
        tmp = segment.with_name(segment.name + ".tmp")
        with open(tmp, "wb") as handle:
            handle.write(rewritten)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, segment)
        segment.with_suffix(".index").unlink(missing_ok=True)
        converted += 1
        batches += len(frames)
    if converted:
        durable_files.fsync_directory(replica)
    return Converted(replica, converted, batches, torn)


def _frames(segment: Path, data: bytes, *, last: bool) -> tuple[list[legacy_batch.LegacyFrame], int]:
    """The frames of one legacy segment and the byte length they fill; a torn tail is allowed in
    the last segment only."""
    frames: list[legacy_batch.LegacyFrame] = []
    valid = 0
    try:
        for frame in legacy_batch.read_frames(data):
            frames.append(frame)
            valid = frame.position + frame.size
    except ValueError as exc:
        if not last:
            raise ValueError(f"{segment}: {exc}") from None
    return frames, valid
