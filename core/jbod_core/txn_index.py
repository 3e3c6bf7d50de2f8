"""Kafka's aborted-transactions index (`.txnindex`) and the partition's last stable offset (LSO).

A read_committed consumer reads a partition up to its LSO, and drops the records of every aborted
transaction, which the fetch response lists (producer id, first offset) for the range it returns.
The LSO is the first offset a transaction may still change: the smallest first offset of an
ongoing transaction (`producer_state.first_unstable_offset`), capped by the high watermark
(`last_stable_offset`). Each segment keeps, in append order, one `AbortedTxn` per transaction that
was aborted with its marker in that segment (Kafka's `TransactionIndex`, one file per segment):
the producer, the transaction's first offset, the marker's offset (last offset) and the LSO when
the marker was appended (`aborted_txn`: Kafka's `ProducerStateManager.lastStableOffset` of a
completed transaction: the first offset of another producer's ongoing transaction, else the
offset after the marker), which lets a fetch stop before the indexes of later segments.

How the next increment uses it (not wired yet): the leader, after appending a marker, asks
`producer_state.completed_txn` for the transaction it completes, records the marker, and for an
aborted one appends `encode_entries([aborted_txn(...)])` to the `.txnindex` of the segment the
marker went to (rebuilt from the log on recovery, like the other indexes: a replay of
`producer_state.record` over the segment); a read_committed Fetch answers up to the LSO and
collects `collect_aborted` over the indexes of the segments from the one holding the fetch offset
onwards, with the upper bound the offset after the last batch it returns, until a search is
complete; the partition's LSO is `last_stable_offset` of the producer state's first unstable offset
and the high watermark (ListOffsets latest under read_committed, Fetch's last_stable_offset).

Guarantees (pure: no I/O, frozen values):
* `decode_entries(encode_entries(e)) == e` for every valid sequence of entries; the file format is
  Kafka's (34 bytes an entry, big-endian: version i16 0 | producer id i64 | first offset i64 |
  last offset i64 | last stable offset i64), byte for byte.
* `decode_entries` raises ValueError, never anything else, for bytes that are not entries this
  module could have written: a length not a multiple of 34 (Kafka's reader ignores a torn tail;
  here it is damage, and the index is rebuilt from the log), a version other than 0 (Kafka refuses
  a newer one), a negative producer id or offset, a first offset after the last offset, a last
  stable offset after the offset after the marker, last offsets not strictly increasing (Kafka's
  append refuses that too).
* `collect_aborted` is Kafka's `TransactionIndex.collectAbortedTxns`: in index order, every entry
  whose last offset >= the fetch offset and whose first offset < the upper bound; the search is
  complete at the first entry whose last stable offset >= the upper bound (no later segment can
  hold an aborted transaction the fetched range overlaps). `aborted_between` is its list alone.
* `last_stable_offset(first_unstable, high_watermark)` = min of both, the high watermark when no
  transaction is ongoing (Kafka's `UnifiedLog.lastStableOffset`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

VERSION: Final = 0  # Kafka's AbortedTxn.CURRENT_VERSION
_ENTRY: Final = struct.Struct(">hqqqq")
ENTRY_SIZE: Final = _ENTRY.size  # 34, Kafka's AbortedTxn.TOTAL_SIZE
_MAX_I64: Final = 2**63 - 1


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One entry of the index (Kafka's `AbortedTxn`)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the abort marker's offset
    last_stable_offset: int  # the partition's LSO once the marker was appended

    def __post_init__(self) -> None:
        if not 0 <= self.producer_id <= _MAX_I64:
            raise ValueError(f"Producer id {self.producer_id} is out of range")
        if not 0 <= self.first_offset <= self.last_offset < _MAX_I64:
            raise ValueError(f"Bad transaction offsets {self.first_offset} to {self.last_offset}")
        if not 0 <= self.last_stable_offset <= self.last_offset + 1:
            raise ValueError(
                f"Last stable offset {self.last_stable_offset} is after the marker at {self.last_offset}"
            )


def aborted_txn(
    *, producer_id: int, first_offset: int, last_offset: int, first_unstable_offset: int | None
) -> AbortedTxn:
    """The entry of an aborted transaction whose marker is at `last_offset`, with the partition's
    `first_unstable_offset` once the marker was recorded (no longer counting this transaction):
    Kafka's last stable offset of a completed transaction."""
    lso = last_offset + 1 if first_unstable_offset is None else min(first_unstable_offset, last_offset + 1)
    return AbortedTxn(producer_id, first_offset, last_offset, lso)


def last_stable_offset(first_unstable_offset: int | None, high_watermark: int) -> int:
    """The partition's LSO: the first unstable offset capped by the high watermark."""
    return high_watermark if first_unstable_offset is None else min(first_unstable_offset, high_watermark)


def encode_entries(entries: Iterable[AbortedTxn]) -> bytes:
    """The entries in Kafka's `.txnindex` format (appending them to a file's bytes appends them)."""
    return b"".join(
        _ENTRY.pack(VERSION, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset)
        for e in entries
    )


def decode_entries(data: bytes | bytearray | memoryview) -> tuple[AbortedTxn, ...]:
    """The entries of a `.txnindex`; ValueError for damage (the module's guarantee)."""
    if len(data) % ENTRY_SIZE:
        raise ValueError(
            f"Transaction index of {len(data)} bytes ends inside an entry ({ENTRY_SIZE} bytes each)"
        )
    entries: list[AbortedTxn] = []
    for position in range(0, len(data), ENTRY_SIZE):
        version, producer_id, first, last, lso = _ENTRY.unpack_from(data, position)
        if version != VERSION:
            raise ValueError(f"Unexpected aborted transaction version {version} at byte {position}")
        try:
            entry = AbortedTxn(producer_id, first, last, lso)
        except ValueError as exc:
            raise ValueError(f"{exc} at byte {position}") from None
        if entries and entry.last_offset <= entries[-1].last_offset:
            raise ValueError(
                f"Last offset {entry.last_offset} at byte {position} is not after {entries[-1].last_offset}"
            )
        entries.append(entry)
    return tuple(entries)


@dataclass(frozen=True, slots=True)
class SearchResult:
    """What one segment's index gives a fetch (Kafka's `TxnIndexSearchResult`)."""

    aborted: tuple[AbortedTxn, ...]
    complete: bool  # no later segment's index can add to it


def collect_aborted(entries: Sequence[AbortedTxn], *, fetch_offset: int, upper_bound: int) -> SearchResult:
    """The aborted transactions of `entries` that overlap [`fetch_offset`, `upper_bound`)."""
    found: list[AbortedTxn] = []
    for entry in entries:
        if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound:
            found.append(entry)
        if entry.last_stable_offset >= upper_bound:
            return SearchResult(tuple(found), complete=True)
    return SearchResult(tuple(found), complete=False)


def aborted_between(
    entries: Sequence[AbortedTxn], fetch_offset: int, upper_bound: int
) -> tuple[AbortedTxn, ...]:
    """Every aborted transaction of `entries` whose last offset >= `fetch_offset` and whose first
    offset < `upper_bound`, in index order (Kafka's fetch over the whole index)."""
    return tuple(e for e in entries if e.last_offset >= fetch_offset and e.first_offset < upper_bound)
