"""The timeline of a small hand-written log: every incident type, with its duration."""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import SparkSession

from jbod_pipeline import inputs, timeline

DIR_A = "ECfE0cOGu8QeL-uJQUw0PA"
DIR_B = "YS52lqbOzBs1v5ktyenGFg"
TOPIC = "kbdYSiJlsfXNYT4w2PFq3w"
INC = "ws5vRH7U1Xt45RBhcxHYow"


def test_timeline_finds_incidents_and_their_durations(spark: SparkSession, tmp_path: Path) -> None:
    log = [
        (
            "RegisterBrokerRecord",
            {"brokerId": 1, "brokerEpoch": 0, "incarnationId": INC, "logDirs": [DIR_A, DIR_B]},
        ),
        (
            "RegisterBrokerRecord",
            {
                "brokerId": 2,
                "brokerEpoch": 1,
                "incarnationId": INC.replace("w", "A"),
                "logDirs": ["xGRxWcMkyYWyIhpYAAAAAA"],
            },
        ),
        ("BrokerRegistrationChangeRecord", {"brokerId": 1, "brokerEpoch": 0, "fenced": False}),
        ("BrokerRegistrationChangeRecord", {"brokerId": 2, "brokerEpoch": 1, "fenced": False}),
        ("TopicRecord", {"name": "t", "topicId": TOPIC}),
        (
            "PartitionRecord",
            {
                "topicId": TOPIC,
                "partitionId": 0,
                "replicas": [1, 2],
                "isr": [1, 2],
                "leader": 1,
                "leaderEpoch": 0,
                "partitionEpoch": 0,
                "directories": [DIR_A, "xGRxWcMkyYWyIhpYAAAAAA"],
            },
        ),
        (
            "BrokerRegistrationChangeRecord",
            {"brokerId": 1, "brokerEpoch": 0, "logDirs": [DIR_B], "offlineLogDirs": [DIR_A]},
        ),
        (
            "PartitionChangeRecord",
            {"topicId": TOPIC, "partitionId": 0, "partitionEpoch": 1, "isr": [2], "leader": 2},
        ),
        ("PartitionChangeRecord", {"topicId": TOPIC, "partitionId": 0, "partitionEpoch": 2, "leader": -1}),
        ("BrokerRegistrationChangeRecord", {"brokerId": 2, "brokerEpoch": 1, "fenced": True}),
        (
            "RegisterBrokerRecord",
            {
                "brokerId": 1,
                "brokerEpoch": 10,
                "incarnationId": INC,
                "logDirs": [DIR_A, DIR_B],
                "fenced": False,
            },
        ),
        (
            "PartitionChangeRecord",
            {"topicId": TOPIC, "partitionId": 0, "partitionEpoch": 3, "leader": 1, "isr": [1]},
        ),
    ]
    path = tmp_path / "log.jsonl"
    path.write_text(
        "".join(json.dumps({"offset": i, "type": t, "data": d}) + "\n" for i, (t, d) in enumerate(log))
    )
    records = inputs.read_metadata(spark, str(path)).records
    rows = [
        (r["offset"], r["type"], r["brokerId"], r["directoryId"], r["topic"], r["partition"], r["detail"])
        for r in timeline.timeline(records).collect()
    ]
    assert rows == [
        (2, "broker-unfenced", 1, None, None, None, "fenced since offset 0 (2 records)"),
        (3, "broker-unfenced", 2, None, None, None, "fenced since offset 1 (2 records)"),
        (6, "dir-offline", 1, DIR_A, None, None, "online again at offset 10 (4 records later)"),
        (7, "leader-change", 1, None, "t", 0, "leader 1 -> 2"),
        (
            8,
            "leader-change",
            2,
            None,
            "t",
            0,
            "leader 2 -> none: partition offline, led again at offset 11 (3 records later)",
        ),
        (9, "broker-fenced", 2, None, None, None, "still fenced"),
        (11, "leader-change", None, None, "t", 0, "leader none -> 1"),
    ]
