"""A history checker for produce/consume runs: every acknowledged record consumed once, in order.

Guarantees:
* Values carry a unique id (`make_value` / `record_id`), so a consumed record is matched to the
  send that produced it whatever offset it landed at.
* `History.check` reports, per run:
  - `missing`: acknowledged ids never consumed (data loss);
  - `moved`: acknowledged ids consumed at another offset than the one acknowledged (history was
    rewritten under a committed record);
  - `duplicated`: ids consumed more than once whose batch was never retried (a retried batch may
    legitimately land twice: the producer is not idempotent) — those are counted apart as
    `retried_duplicates`;
  - `reordered`: pairs of acknowledged records of one partition consumed in an order other than
    the order they were sent in;
  - `unknown`: consumed values that no producer sent.
  `Report.ok` is true only when the first five lists are empty.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

PREFIX = b"jbod:"


def make_value(run: str, sequence: int, size: int = 1024) -> bytes:
    head = PREFIX + f"{run}:{sequence}:".encode()
    return head + b"x" * max(0, size - len(head))


def record_id(value: bytes) -> tuple[str, int] | None:
    if not value.startswith(PREFIX):
        return None
    parts = value[len(PREFIX) :].split(b":", 2)
    if len(parts) < 3:
        return None
    try:
        return parts[0].decode(), int(parts[1])
    except (UnicodeDecodeError, ValueError):
        return None


@dataclass
class Report:
    acknowledged: int = 0
    consumed: int = 0
    missing: list[tuple[str, int]] = field(default_factory=list)
    moved: list[tuple[tuple[str, int], int, int]] = field(default_factory=list)
    duplicated: list[tuple[str, int]] = field(default_factory=list)
    retried_duplicates: int = 0
    reordered: list[tuple[tuple[str, int], tuple[str, int]]] = field(default_factory=list)
    unknown: int = 0

    @property
    def ok(self) -> bool:
        return not (self.missing or self.moved or self.duplicated or self.reordered or self.unknown)

    def summary(self) -> str:
        return (
            f"acknowledged={self.acknowledged} consumed={self.consumed} missing={len(self.missing)} "
            f"moved={len(self.moved)} duplicated={len(self.duplicated)} "
            f"retried_duplicates={self.retried_duplicates} reordered={len(self.reordered)} unknown={self.unknown}"
        )


@dataclass
class History:
    """What the producers did: sends, acknowledgements and retries."""

    sent: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)  # id -> (topic, partition)
    acked: dict[tuple[str, int], int] = field(default_factory=dict)  # id -> acknowledged offset
    retried: set[tuple[str, int]] = field(default_factory=set)
    order: dict[tuple[str, int], list[tuple[str, int]]] = field(default_factory=dict)  # per partition

    def on_send(self, rid: tuple[str, int], topic: str, partition: int) -> None:
        self.sent[rid] = (topic, partition)
        self.order.setdefault((topic, partition), []).append(rid)

    def on_ack(self, rid: tuple[str, int], offset: int) -> None:
        self.acked[rid] = offset

    def on_retry(self, rids: Iterable[tuple[str, int]]) -> None:
        self.retried.update(rids)

    def check(self, consumed: Iterable[tuple[str, int, int, bytes]]) -> Report:
        """`consumed`: (topic, partition, offset, value) as read back."""
        report = Report(acknowledged=len(self.acked))
        seen: dict[tuple[str, int], list[int]] = {}
        for _topic, _partition, offset, value in consumed:
            report.consumed += 1
            rid = record_id(value)
            if rid is None or rid not in self.sent:
                report.unknown += 1
                continue
            seen.setdefault(rid, []).append(offset)
        for rid, offset in self.acked.items():
            offsets = seen.get(rid)
            if not offsets:
                report.missing.append(rid)
            elif offset >= 0 and offset not in offsets:
                report.moved.append((rid, offset, offsets[0]))
        for rid, offsets in seen.items():
            if len(offsets) > 1:
                if rid in self.retried:
                    report.retried_duplicates += 1
                else:
                    report.duplicated.append(rid)
        for sequence in self.order.values():
            previous: tuple[tuple[str, int], int] | None = None
            for rid in sequence:
                if rid not in self.acked or rid not in seen:
                    continue
                first = min(seen[rid])
                if previous is not None and first < previous[1]:
                    report.reordered.append((previous[0], rid))
                previous = (rid, first)
        return report
