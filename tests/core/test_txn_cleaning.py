"""`jbod_core.txn_cleaning` against naive references: a random log of transactions (producers
interleaved, some aborted) replayed batch by batch."""

from __future__ import annotations

import random

from jbod_core.txn_cleaning import AbortedRanges, TxnScan
from jbod_core.txn_index import AbortedTxn


def test_aborted_ranges_and_marker_decisions_follow_a_replay_of_the_log() -> None:
    for seed in range(200):
        rng = random.Random(seed)
        # a log: ("data", producer, offset, kept) and ("marker", producer, offset, aborted, timestamp)
        log: list[tuple[str, int, int, bool, int]] = []
        open_first: dict[int, int] = {}
        entries: list[AbortedTxn] = []
        for offset in range(rng.randint(1, 60)):
            producer = rng.randrange(4)
            if producer in open_first and rng.random() < 0.3:
                aborted = rng.random() < 0.5
                log.append(("marker", producer, offset, aborted, rng.choice([0, 50, 100])))
                if aborted:
                    entries.append(AbortedTxn(producer, open_first[producer], offset, offset + 1))
                del open_first[producer]
            else:
                open_first.setdefault(producer, offset)
                log.append(("data", producer, offset, rng.random() < 0.5, 0))
        ranges = AbortedRanges.of(rng.sample(entries, len(entries)))
        scan = TxnScan(ranges, now_ms=160, delete_retention_ms=100)
        since_marker: dict[int, list[bool]] = {}
        for kind, producer, offset, flag, timestamp in log:
            naive_aborted = any(
                e.producer_id == producer and e.first_offset <= offset < e.last_offset for e in entries
            )
            assert ranges.aborted(producer, offset) == naive_aborted
            assert ranges.has_marker(producer, offset) == (
                kind == "marker" and flag and any(e.last_offset == offset for e in entries)
            )
            if kind == "data":
                kept = flag and not naive_aborted
                scan.data_batch(producer, kept=kept)
                since_marker.setdefault(producer, []).append(kept)
                continue
            data = since_marker.pop(producer, [])
            decision = scan.marker(producer, timestamp_ms=timestamp)
            expired = timestamp + 100 < 160
            assert decision.keep == (bool(data) or not expired)
            assert decision.keep_index_entry == bool(data)
            if not decision.keep or any(data):
                assert decision.due_ms is None
            else:
                assert decision.due_ms == timestamp + 100
