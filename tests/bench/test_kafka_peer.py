"""`bench.kafka_peer` reads Kafka's perf tools as they print (issue 23): the producer perf test's
totals line and the consumer perf test's CSV header and row, with the output around them that a
real run prints (progress lines, warnings), and falls back to the whole run's consume rate when
the tool's group-join time is bogus."""

from __future__ import annotations

import math

import pytest

from bench.kafka_peer import (
    ConsumerSummary,
    ProducerSummary,
    consume_rate,
    parse_consumer_summary,
    parse_producer_summary,
)

PRODUCER_OUTPUT = """\
99233 records sent, 19846.6 records/sec (19.38 MB/sec), 1123.4 ms avg latency, 1544.0 ms max latency.
200000 records sent, 24405.125076 records/sec (23.83 MB/sec), 1020.35 ms avg latency, 1618.00 ms max latency, 1032 ms 50th, 1419 ms 95th, 1560 ms 99th, 1610 ms 99.9th.
"""

CONSUMER_OUTPUT = """\
start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
2026-11-27 16:45:01:113, 2026-11-27 16:45:06:602, 390.6250, 71.1651, 400000, 72873.0, 412, 5077, 76.9401, 78786.6
"""


def test_the_producer_totals_line_is_read_past_the_progress_lines() -> None:
    assert parse_producer_summary(PRODUCER_OUTPUT) == ProducerSummary(
        records=200_000,
        records_per_s=24405.125076,
        mb_per_s=23.83,
        avg_ms=1020.35,
        max_ms=1618.0,
        p50_ms=1032,
        p95_ms=1419,
        p99_ms=1560,
        p999_ms=1610,
    )


def test_a_producer_run_cut_short_has_no_totals() -> None:
    with pytest.raises(ValueError, match="no totals line"):
        parse_producer_summary(PRODUCER_OUTPUT.splitlines()[0])


def test_the_consumer_row_is_read_under_its_header() -> None:
    summary = parse_consumer_summary(CONSUMER_OUTPUT)
    assert summary == ConsumerSummary(
        records=400_000,
        megabytes=390.625,
        mb_per_s=71.1651,
        records_per_s=72873.0,
        rebalance_ms=412,
        fetch_ms=5077,
        fetch_mb_per_s=76.9401,
        fetch_records_per_s=78786.6,
    )
    assert consume_rate(summary) == (78786.6, 76.9401, "fetch")


def test_a_warning_between_header_and_row_is_skipped() -> None:
    header, row = CONSUMER_OUTPUT.splitlines()
    warned = f"{header}\nWARNING: Exiting before consuming the expected number of messages: timeout\n{row}\n"
    assert parse_consumer_summary(warned).records == 400_000


def test_a_bogus_join_time_falls_back_to_the_whole_run() -> None:
    # As older Kafka versions print it when no rebalance callback ran: the join "took" since 1970.
    text = (
        CONSUMER_OUTPUT.splitlines()[0]
        + "\n2021-11-04 19:11:08:397, 2021-11-04 19:11:08:733, 9.7427, 28.9962, 10216, 30404.7619, "
        "1636024268653, -1636024268317, -0.0000, -0.0000\n"
    )
    summary = parse_consumer_summary(text)
    assert summary.fetch_ms < 0 and summary.fetch_mb_per_s == 0
    assert consume_rate(summary) == (30404.7619, 28.9962, "whole run")


def test_no_header_no_summary() -> None:
    with pytest.raises(ValueError, match="no header"):
        parse_consumer_summary("ERROR something\n")
    assert not math.isnan(parse_consumer_summary(CONSUMER_OUTPUT).mb_per_s)
