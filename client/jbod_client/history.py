"""The history checker of produce/consume runs: every acknowledged record consumed once, in order.

One checker for the demo, the KIP-112 system tests and the end-to-end tier (`tests/e2e`).

Guarantees:
* Values carry a unique id (`make_value` / `record_id`), so a consumed record is matched to the
  send that produced it whatever offset it landed at.
* `History` records sends, acknowledgements (with their offsets) and failures. The producers it
  checks are idempotent (Kafka's, acks=all): a batch they retry is never written twice, so every
  copy of a record beyond the first is a problem.
* `History.check` reads the consumed records (the same offset read twice counts once) and reports:
  - `missing`: acknowledged ids never consumed (data loss);
  - `moved`: acknowledged ids not found at the offset they were acknowledged at (history was
    rewritten under a committed record);
  - `duplicated`: ids consumed more than once; `duplicates` counts every extra copy;
  - `reordered`: acknowledged records of one partition whose first copy comes after the first
    copy of an acknowledged record sent later to that partition (records that were never
    acknowledged carry no order promise: a request abandoned in transit may land late);
  - `unknown`: consumed values no producer sent to that topic and partition.
  `Report.ok` is true only when all five are empty.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

PREFIX = b"jbod:"
RecordId = tuple[str, int]  # (run, sequence)


def make_value(run: str, sequence: int, size: int = 1024) -> bytes:
    """`jbod:<run>:<sequence>:` followed by filler up to `size` bytes."""
    head = PREFIX + f"{run}:{sequence}:".encode()
    return head + b"x" * max(0, size - len(head))


def record_id(value: bytes | None) -> RecordId | None:
    """The (run, sequence) a value carries; None for anything else."""
    if value is None or not value.startswith(PREFIX):
        return None
    parts = value[len(PREFIX) :].split(b":", 2)
    if len(parts) < 3:
        return None
    try:
        return parts[0].decode(), int(parts[1])
    except (UnicodeDecodeError, ValueError):
        return None


class Consumed(NamedTuple):
    topic: str
    partition: int
    offset: int
    value: bytes | None


@dataclass
class Report:
    acknowledged: int = 0
    consumed: int = 0
    unique: int = 0
    missing: list[RecordId] = field(default_factory=list)
    moved: list[tuple[RecordId, int]] = field(default_factory=list)  # (id, acknowledged offset)
    duplicated: list[RecordId] = field(default_factory=list)
    duplicates: int = 0  # extra copies read back
    reordered: list[tuple[str, int, int, RecordId]] = field(
        default_factory=list
    )  # topic, partition, offset, id
    unknown: list[tuple[str, int, int]] = field(default_factory=list)  # topic, partition, offset

    @property
    def ok(self) -> bool:
        return not (self.missing or self.moved or self.duplicated or self.reordered or self.unknown)

    def problems(self) -> list[str]:
        found = []
        if self.missing:
            found.append(f"{len(self.missing)} acknowledged records missing (first: {self.missing[0]})")
        if self.moved:
            rid, offset = self.moved[0]
            found.append(
                f"{len(self.moved)} acknowledged records not at their acknowledged offset "
                f"(first: {rid}, acknowledged at offset {offset})"
            )
        if self.reordered:
            topic, partition, offset, rid = self.reordered[0]
            found.append(
                f"{len(self.reordered)} records out of order (first: {topic}-{partition} offset {offset} "
                f"holds {rid} after a record sent later)"
            )
        if self.duplicated:
            found.append(f"{len(self.duplicated)} records duplicated (first: {self.duplicated[0]})")
        if self.unknown:
            topic, partition, offset = self.unknown[0]
            found.append(
                f"{len(self.unknown)} records nobody sent there (first: {topic}-{partition} offset {offset})"
            )
        return found

    def summary(self) -> str:
        return (
            f"acknowledged={self.acknowledged} consumed={self.consumed} unique={self.unique} "
            f"missing={len(self.missing)} moved={len(self.moved)} duplicated={len(self.duplicated)} "
            f"duplicates={self.duplicates} "
            f"reordered={len(self.reordered)} "
            f"unknown={len(self.unknown)}"
        )


@dataclass
class History:
    """What the producers did: sends, acknowledgements and failures."""

    sent: dict[RecordId, tuple[str, int, int]] = field(default_factory=dict)  # id -> topic, partition, index
    acked: dict[RecordId, int] = field(default_factory=dict)  # id -> acknowledged offset
    failed: dict[RecordId, int] = field(default_factory=dict)  # id -> error code
    _sent_to: Counter[tuple[str, int]] = field(default_factory=Counter)

    def on_send(self, rid: RecordId, topic: str, partition: int) -> None:
        where = (topic, partition)
        self.sent[rid] = (topic, partition, self._sent_to[where])
        self._sent_to[where] += 1

    def on_ack(self, rid: RecordId, offset: int) -> None:
        self.acked[rid] = offset

    def on_failure(self, rid: RecordId, code: int) -> None:
        self.failed[rid] = code

    def check(self, consumed: Iterable[tuple[str, int, int, bytes | None]]) -> Report:
        """`consumed`: (topic, partition, offset, value) as read back, in any order."""
        report = Report(acknowledged=len(self.acked))
        by_offset, copies = self._read_back(consumed, report)
        report.consumed = len(by_offset)
        report.unique = len(copies)
        for rid, offset in self.acked.items():
            if not copies.get(rid):
                report.missing.append(rid)
            elif offset >= 0 and by_offset.get((*self.sent[rid][:2], offset)) != rid:
                report.moved.append((rid, offset))
        self._check_order(by_offset, report)
        for rid, count in copies.items():
            if count > 1:
                report.duplicates += count - 1
                report.duplicated.append(rid)
        return report

    def _read_back(
        self, consumed: Iterable[tuple[str, int, int, bytes | None]], report: Report
    ) -> tuple[dict[tuple[str, int, int], RecordId | None], Counter[RecordId]]:
        """(topic, partition, offset) → the record read there (None: not one this history sent,
        listed in `report.unknown`), and the copies read of each record."""
        by_offset: dict[tuple[str, int, int], RecordId | None] = {}
        copies: Counter[RecordId] = Counter()
        for topic, partition, offset, value in consumed:
            if (topic, partition, offset) in by_offset:
                continue  # the same offset read twice is one record
            rid = record_id(value)
            origin = self.sent.get(rid) if rid is not None else None
            if rid is None or origin is None or origin[:2] != (topic, partition):
                report.unknown.append((topic, partition, offset))
                rid = None
            by_offset[(topic, partition, offset)] = rid
            if rid is not None:
                copies[rid] += 1
        return by_offset, copies

    def _check_order(self, by_offset: dict[tuple[str, int, int], RecordId | None], report: Report) -> None:
        """List in `report.reordered` each acknowledged record read before one sent earlier."""
        highest: dict[tuple[str, int], int] = {}
        first_seen: set[RecordId] = set()
        for (topic, partition, offset), rid in sorted(by_offset.items()):
            if rid is None or rid in first_seen or rid not in self.acked:
                continue  # order is judged on first copies of acknowledged records
            first_seen.add(rid)
            index = self.sent[rid][2]
            if index < highest.get((topic, partition), -1):
                report.reordered.append((topic, partition, offset, rid))
            highest[(topic, partition)] = max(highest.get((topic, partition), -1), index)
