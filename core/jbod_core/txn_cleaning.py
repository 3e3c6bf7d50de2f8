"""Transactions in a compacted log's cleaning (Kafka's log cleaner on transactional data), free
of I/O.

A cleaning reads the log from its start to the end of its mapped section, below the last stable
offset (no ongoing transaction's data is ever cleaned). On that range Kafka's cleaner:
* removes every record of an aborted transaction (the `.txnindex` entries give each aborted
  transaction's producer and offsets), and never maps their keys (an aborted record never
  shadows a committed earlier value of its key);
* keeps a transaction's marker while a batch of that transaction was read in this cleaning (its
  data is, or was until this cleaning, in the log below the marker), so the log never holds data
  whose transaction looks open; once no such batch is left, the marker goes after
  `delete.retention.ms` (a consumer reading the log at most that long after the marker was
  written still sees it), and an abort's index entry goes at once (no data left to skip).

Guarantees:
* `AbortedRanges.aborted(p, offset)` is true exactly when an aborted transaction of producer `p`
  has its first offset at or before `offset` and its marker after it (a producer has at most one
  transaction at a time, so its data batches in such a range are that transaction's).
* `TxnScan` fed a cleaning's batches in offset order from the log start (`data_batch` for every
  transactional data batch, `marker` for every end-transaction marker) answers Kafka's decisions
  for each marker (`MarkerDecision`): kept while data of its transaction was read since the
  producer's previous marker; otherwise kept only while its timestamp is within
  `delete.retention.ms` of now; the abort's index entry kept exactly while data was read. A kept
  marker whose data is all gone after this cleaning says when it may go (`due_ms`), so the log
  is cleaned again then without new writes; a marker whose data survives says nothing (the next
  cleaning of its keys comes back to it).
* Deterministic: the answers depend only on the calls, in order.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

from jbod_core.txn_index import AbortedTxn


@dataclass(frozen=True, slots=True)
class AbortedRanges:
    """The aborted transactions of a log, by producer: first offsets and marker offsets, sorted."""

    by_producer: dict[int, tuple[list[int], list[int]]] = field(default_factory=dict)
    markers: frozenset[tuple[int, int]] = frozenset()  # (producer, marker offset) of every entry

    @classmethod
    def of(cls, entries: Iterable[AbortedTxn]) -> AbortedRanges:
        grouped: dict[int, list[tuple[int, int]]] = {}
        for entry in entries:
            grouped.setdefault(entry.producer_id, []).append((entry.first_offset, entry.last_offset))
        by_producer: dict[int, tuple[list[int], list[int]]] = {}
        for producer_id, ranges in grouped.items():
            ranges.sort()
            by_producer[producer_id] = ([first for first, _ in ranges], [last for _, last in ranges])
        return cls(
            by_producer, frozenset((p, last) for p, (_, lasts) in by_producer.items() for last in lasts)
        )

    def __bool__(self) -> bool:
        return bool(self.by_producer)

    def has_marker(self, producer_id: int, offset: int) -> bool:
        """Whether an entry names the marker of `producer_id` at `offset`."""
        return (producer_id, offset) in self.markers

    def aborted(self, producer_id: int, offset: int) -> bool:
        """Whether `offset` of producer `producer_id` lies in one of its aborted transactions."""
        ranges = self.by_producer.get(producer_id)
        if ranges is None:
            return False
        firsts, lasts = ranges
        i = bisect.bisect_right(firsts, offset) - 1
        return i >= 0 and offset < lasts[i]


@dataclass(frozen=True, slots=True)
class MarkerDecision:
    """What a cleaning does with one marker: keep it (or remove it), keep its index entry (an
    abort's), and when a kept marker may go (None: not before its data goes)."""

    keep: bool
    keep_index_entry: bool
    due_ms: int | None


class TxnScan:
    """One cleaning's walk over the transactional batches of its range (the module docstring)."""

    __slots__ = ("_data", "aborted", "delete_retention_ms", "now_ms")

    def __init__(self, aborted: AbortedRanges, *, now_ms: int, delete_retention_ms: int) -> None:
        self.aborted = aborted
        self.now_ms = now_ms
        self.delete_retention_ms = delete_retention_ms
        self._data: dict[int, bool] = {}  # producer -> data of its transaction read (any kept?)

    def data_batch(self, producer_id: int, *, kept: bool) -> None:
        """A transactional data batch of `producer_id` was read; `kept`: a record of it survives."""
        self._data[producer_id] = self._data.get(producer_id, False) or kept

    def marker(self, producer_id: int, *, timestamp_ms: int) -> MarkerDecision:
        """The decision for the marker of `producer_id` (written at `timestamp_ms`) read next."""
        data = self._data.pop(producer_id, None)
        due = timestamp_ms + self.delete_retention_ms
        if data is not None:
            return MarkerDecision(keep=True, keep_index_entry=True, due_ms=None if data else due)
        expired = timestamp_ms < self.now_ms - self.delete_retention_ms
        return MarkerDecision(keep=not expired, keep_index_entry=False, due_ms=None if expired else due)
