"""`jbodctl reassign`'s parsing of targets and of Kafka's reassignment JSON: what is sent, and one
clear line for each kind of mistake (the end-to-end runs are in tests/kafka_tools/test_reassign.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jbod_cli.commands import CommandError
from jbod_cli.reassign_cli import Target, parse_file, parse_target


def test_a_target_names_a_topic_a_partition_and_brokers() -> None:
    assert parse_target("orders:3=4,2,1") == Target("orders", 3, (4, 2, 1))
    # A topic name may contain ':'-free dots, dashes and underscores; the last ':' splits.
    assert parse_target("a.b-c_d:0=1") == Target("a.b-c_d", 0, (1,))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("orders:3", "expected TOPIC:PARTITION=BROKER,BROKER,..."),
        ("orders=1,2", "expected TOPIC:PARTITION"),
        (":1=1", "expected TOPIC:PARTITION"),
        ("orders:x=1", "expected TOPIC:PARTITION"),
        ("orders:1=1,,2", "the replicas must be broker ids"),
        ("orders:1=", "the replicas must be broker ids"),
    ],
)
def test_bad_targets_are_one_clear_line(text: str, message: str) -> None:
    with pytest.raises(CommandError) as raised:
        parse_target(text)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_kafkas_reassignment_json_is_read_with_its_log_dirs(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "/d/1"]},
                    {"topic": "t", "partition": 1, "replicas": [3]},
                ],
            }
        )
    )
    assert parse_file(path) == [
        Target("t", 0, (1, 2), ("any", "/d/1")),
        Target("t", 1, (3,), ("any",)),
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "is not JSON"),
        ("[]", 'expected {"version": 1, "partitions": [...]}'),
        ('{"partitions": [1]}', "partitions[0] is not an object"),
        ('{"partitions": [{"partition": 0, "replicas": [1]}]}', "partitions[0].topic must be a topic name"),
        (
            '{"partitions": [{"topic": "t", "partition": -1, "replicas": [1]}]}',
            "partition must be a partition index",
        ),
        (
            '{"partitions": [{"topic": "t", "partition": 0, "replicas": ["1"]}]}',
            "replicas must be a list of broker ids",
        ),
        (
            '{"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["any"]}]}',
            "log_dirs must list one path",
        ),
    ],
)
def test_a_bad_file_is_one_clear_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(content)
    with pytest.raises(CommandError) as raised:
        parse_file(path)
    assert message in str(raised.value) and "\n" not in str(raised.value)
    with pytest.raises(CommandError, match="cannot read"):
        parse_file(tmp_path / "missing.json")
