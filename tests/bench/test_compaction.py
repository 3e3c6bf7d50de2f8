"""`bench.compaction` reads the cleaners' and the coordinators' log lines as the brokers write
them (issue 32): Kafka 4.3's multi-line cleaner report under its timed line, among the other
lines of its server log, its coordinator's load line, and our agent's lines."""

from __future__ import annotations

import datetime

from bench.compaction import OURS_CLEANED, KafkaCleaning, parse_kafka_cleanings, parse_load

# As Kafka 4.3.1 wrote them in a run of the benchmark (a long line shortened).
KAFKA_SERVER_LOG = """\
[2026-12-04 19:44:29,622] INFO Cleaner 1: Growing cleaner I/O buffers from 524288 bytes to 1048576 bytes. (org.apache.kafka.storage.internals.log.Cleaner)
[2026-12-04 19:44:30,547] INFO Cleaner 1: Swapping in cleaned segment LogSegment(baseOffset=189090, size=11407954) (org.apache.kafka.storage.internals.log.Cleaner)
[2026-12-04 19:44:30,662] INFO [kafka-log-cleaner-thread-1]: \n\
\tLog cleaner thread 1 cleaned log compacted-0 (dirty section = [0, 204800])
\t204.3 MB of log processed in 8.4 seconds (24.3 MB/sec).
\tIndexed 204.3 MB in 3.7 seconds (55.9 Mb/sec, 43.5% of total time)
\tBuffer utilization: 0.4%
\tCleaned 204.3 MB in 4.7 seconds (43.1 Mb/sec, 56.5% of total time)
\tStart size: 204.3 MB (204,800 messages)
\tEnd size: 20.4 MB (20,478 messages)
\t90.0% size reduction (90.0% fewer messages)
 (org.apache.kafka.storage.internals.log.LogCleaner$CleanerThread)
[2026-12-04 19:44:30,918] INFO [kafka-log-cleaner-thread-0]: \n\
\tLog cleaner thread 0 cleaned log compacted-1 (dirty section = [0, 204800])
\t1,204.3 MB of log processed in 48.7 seconds (24.7 MB/sec).
\tStart size: 1,204.3 MB (1,204,800 messages)
"""


def test_kafka_cleaner_reports_and_load_lines_are_read_as_written() -> None:
    at = datetime.datetime(2026, 12, 4, 19, 44, 30, 662000).timestamp()
    # The second report is cut short (no end size yet): not taken.
    assert parse_kafka_cleanings(KAFKA_SERVER_LOG) == [
        KafkaCleaning(
            at=at,
            partition="compacted-0",
            dirty_end=204800,
            mib=204.3,
            seconds=204.3 / 24.3,  # from the rate: the printed seconds have one decimal only
            mib_per_s=24.3,
            start_messages=204_800,
            end_messages=20_478,
        )
    ]
    load = (
        "[2026-12-04 19:46:02,001] INFO [GroupCoordinator id=1] Finished loading of metadata from "
        "__consumer_offsets-0 with epoch 2 in 1480ms where 1ms was spent in the scheduler. Loaded 1000001 "
        "records which total to 93421003 bytes. (org.apache.kafka.coordinator.common.runtime.CoordinatorRuntime)"
    )
    assert parse_load("kafka", load) == (1_000_001, 1.48)
    assert parse_load("kafka", load.replace("__consumer_offsets-0", "__consumer_offsets-1")) is None
    ours = (
        "2026-12-04 19:46:21,485 INFO jbod_agent.groups: Loaded 100 consumer groups of __consumer_offsets-0 "
        "from 100001 records in 0.78 s (leader epoch 2)"
    )
    assert parse_load("ours", ours) == (100_001, 0.78)
    cleaned = OURS_CLEANED.search(
        "2026-12-04 19:44:03,299 INFO jbod_agent.cleaner: compacted-0: cleaned up to offset 204800: 184322 "
        "record(s) removed, 21429714 of 428440644 bytes kept, 7 segment(s) swapped"
    )
    assert cleaned is not None
    assert cleaned.groups() == ("compacted-0", "204800", "184322", "21429714", "428440644", "7")
