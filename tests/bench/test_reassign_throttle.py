"""`bench.reassign_throttle` (issue 24): its pure parts (the reassignment it asks for, the latency
window, the throttle's bound, the steady rate, the metric it reads), and one `--quick` run on real
processes that checks what the benchmark reports, not how fast anything was: both reassignments
completed with every byte on the receiving broker, every latency record was acknowledged, and the
table shows the rate against the throttle."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench.reassign_throttle import (
    BULK_ASSIGNMENT,
    REPLICA_FETCH_MAX_BYTES,
    SentRecord,
    latency_of,
    moved_assignment,
    reassignment_json,
    steady_rate,
    throttle_bound,
    throttled_bytes,
)
from e2e.kafka_tools import KafkaInstall
from tests.kafka_tools.test_harness import install  # noqa: F401  Kafka's jars or a skip


def test_broker_1_is_replaced_by_broker_4_in_place() -> None:
    assert moved_assignment(BULK_ASSIGNMENT, source=1, target=4) == ((4, 2, 3), (2, 3, 4), (3, 4, 2))
    with pytest.raises(ValueError, match="already holds"):
        moved_assignment(((1, 4),), source=1, target=4)


def test_the_reassignment_file_is_kafkas() -> None:
    assert reassignment_json("bulk", ((4, 2), (2, 4))) == {
        "version": 1,
        "partitions": [
            {"topic": "bulk", "partition": 0, "replicas": [4, 2]},
            {"topic": "bulk", "partition": 1, "replicas": [2, 4]},
        ],
    }


def test_latency_counts_the_records_sent_in_the_window_and_their_fates() -> None:
    records = [
        SentRecord(sent_at=0.5, latency=0.001),  # before the window
        *(SentRecord(sent_at=1.0 + i / 100, latency=(i + 1) / 1000) for i in range(100)),
        SentRecord(sent_at=1.9, error="timed out"),
        SentRecord(sent_at=2.0, latency=5.0),  # the window is [1, 2)
    ]
    lat = latency_of(records, 1.0, 2.0)
    assert (lat.sent, lat.acked, lat.failed) == (101, 100, 1)
    assert (lat.p50, lat.p99, lat.max) == (0.05, 0.099, 0.1)
    empty = latency_of(records, 10.0, 11.0)
    assert empty.sent == 0 and math.isnan(empty.p99)


def test_the_bound_is_the_rate_a_second_of_burst_and_one_fetch() -> None:
    assert throttle_bound(1_000_000, 10.0) == 11_000_000 + REPLICA_FETCH_MAX_BYTES


def test_the_steady_rate_skips_the_start_and_the_plateau() -> None:
    samples = [
        (0.0, 0),
        (0.5, 5_000_000),
        (2.0, 6_000_000),
        (4.0, 10_000_000),
        (5.0, 12_000_000),
        (6.0, 12_000_000),
    ]
    assert steady_rate(samples, after=2.0) == 2_000_000  # 6 MB at 2 s -> 12 MB at 5 s
    assert math.isnan(steady_rate([(0.0, 0), (0.1, 12_000_000)], after=2.0))


def test_the_throttled_bytes_are_read_by_side() -> None:
    page = (
        "# TYPE jbod_replication_throttled_bytes counter\n"
        'jbod_replication_throttled_bytes_total{side="leader"} 1024.0\n'
        'jbod_replication_throttled_bytes_total{side="follower"} 2.5e+06\n'
        'jbod_replication_throttle_skips_total{side="leader"} 3.0\n'
    )
    assert throttled_bytes(page) == {"leader": 1024.0, "follower": 2_500_000.0}


@pytest.mark.slow
@pytest.mark.integration
def test_a_quick_run_moves_everything_and_every_record_is_acknowledged(
    install: KafkaInstall,  # noqa: F811
    tmp_path: Path,
) -> None:
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.reassign_throttle", "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, f"stdout: {proc.stdout[-3000:]}\nstderr: {proc.stderr[-3000:]}"
    result = json.loads(out.read_text())
    size = result["parameters"]["size_bytes"]
    labels = [row["label"] for row in result["rows"]]
    assert labels == ["no reassignment", "reassignment throttled at 2.5 MB/s", "reassignment unthrottled"]
    for row in result["rows"]:
        lat = row["latency"]
        assert lat["sent"] > 0 and lat["acked"] == lat["sent"] and lat["failed"] == 0, row
        assert lat["p50"] <= lat["p99"] <= lat["max"], row
    for row, receiver in zip(result["rows"][1:], (4, 1), strict=True):
        moved = row["reassignment"]
        assert moved["completed"] and moved["receiver"] == receiver, row
        assert moved["moved_bytes"] >= size and moved["rate_bytes_per_second"] > 0, row
    assert result["rows"][1]["reassignment"]["throttle_bytes_per_second"] == 2_500_000
    assert result["rows"][1]["reassignment"]["rate_over_throttle"] > 0
    assert result["rows"][2]["reassignment"]["throttle_bytes_per_second"] is None
    records = result["latency_records"]
    assert records["sent"] == records["acked"] > 0 and records["failed"] == records["unflushed"] == 0
    assert "rate / throttle" in proc.stdout and "reassignment throttled at 2.5 MB/s" in proc.stdout
