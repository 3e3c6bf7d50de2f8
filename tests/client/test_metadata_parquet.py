"""The typed Parquet export keeps every record: typed when it fits the columns, verbatim otherwise."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from jbod_cli import metadata_parquet
from jbod_core import records
from jbod_core.ids import random_uuid

RNG = random.Random(7)
DIR_A, DIR_B, TOPIC, INC = (random_uuid(RNG) for _ in range(4))

EVERY_TYPE: list[records.Record] = [
    records.RegisterBrokerRecord(
        broker_id=1,
        broker_epoch=2**40,
        incarnation_id=INC,
        log_dirs=(DIR_A, DIR_B),
        listeners=(records.Listener("http", "127.0.0.1", 9092),),
        rack="r1",
        offline_log_dirs=(DIR_B,),
    ),
    records.RegisterBrokerRecord(broker_id=2, broker_epoch=3, incarnation_id=INC, log_dirs=(DIR_A,)),
    records.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=2**40, fenced=False, log_dirs=(DIR_A,)),
    records.TopicRecord(name="t", topic_id=TOPIC, configs={"min.insync.replicas": "2"}),
    records.PartitionRecord(
        topic_id=TOPIC,
        partition_id=0,
        replicas=(1, 2),
        isr=(1,),
        leader=1,
        leader_epoch=0,
        partition_epoch=0,
        directories=(DIR_A, DIR_B),
    ),
    records.PartitionChangeRecord(topic_id=TOPIC, partition_id=0, partition_epoch=1, leader=2, isr=(2,)),
    records.UnregisterBrokerRecord(broker_id=2, broker_epoch=3),
    records.ConfigRecord(topic_id=TOPIC, name="retention.ms", value="1000"),
    records.ConfigRecord(topic_id=TOPIC, name="retention.ms", value=None),
    records.RemoveTopicRecord(topic_id=TOPIC),
    records.UserScramCredentialRecord(
        name="alice", mechanism=2, salt=b"salt", stored_key=b"s" * 64, server_key=b"k" * 64, iterations=4096
    ),
    records.RemoveUserScramCredentialRecord(name="alice", mechanism=2),
    records.ProducerIdsRecord(broker_id=1, broker_epoch=2**40, next_producer_id=2**40 + 1000),
    records.BrokerConfigRecord(broker="", name="cordoned.log.dirs", value="*"),
    records.BrokerConfigRecord(broker="1", name="leader.replication.throttled.rate", value=None),
    records.AccessControlEntryRecord(
        id=INC,
        resource_type=2,
        resource_name="orders-",
        pattern_type=4,
        principal="User:alice",
        host="*",
        operation=4,
        permission_type=3,
    ),
    records.RemoveAccessControlEntryRecord(id=INC),
    records.RegisterBrokerRecord(
        broker_id=3, broker_epoch=4, incarnation_id=INC, log_dirs=(DIR_A,), cordoned_log_dirs=(DIR_A,)
    ),
    records.BrokerRegistrationChangeRecord(broker_id=3, broker_epoch=4, cordoned_log_dirs=()),
]


def _exported(items: list[records.Record]) -> list[dict[str, Any]]:
    return [{"offset": i, "type": r.TYPE, "data": r.to_data()} for i, r in enumerate(items)]


def test_every_record_type_is_typed_and_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "m.parquet"
    exported = _exported(EVERY_TYPE)
    assert metadata_parquet.write(exported, path) == len(exported)
    table = pq.read_table(path)
    assert table.schema == metadata_parquet.SCHEMA
    assert table.column("data").null_count == len(exported)  # nothing fell back to JSON text
    back = metadata_parquet.read(path)
    # `rack: null` and `value: null` are the fields a typed row cannot tell from absent.
    want = [{**e, "data": {k: v for k, v in e["data"].items() if v is not None}} for e in exported]
    assert back == want
    assert [records.decode(r["type"], r["data"]) for r in back] == EVERY_TYPE


GOOD_CHANGE = {"topicId": str(TOPIC), "partitionId": 0, "partitionEpoch": 1}


@pytest.mark.parametrize(
    "data",
    [
        {**GOOD_CHANGE, "leader": "2"},  # a string for an int
        {**GOOD_CHANGE, "leader": True},  # a bool is not an int
        {**GOOD_CHANGE, "leader": 2**31},  # out of int32
        {**GOOD_CHANGE, "leader": 1.0},  # a float
        {**GOOD_CHANGE, "isr": [1, "x"]},
        {**GOOD_CHANGE, "isr": [1, None]},
        {**GOOD_CHANGE, "leader": None},  # only rack may be null
        {**GOOD_CHANGE, "directories": "abc"},
        {"name": "t", "topicId": str(TOPIC), "configs": {"retention.ms": 5}},
        {"brokerId": 1, "listeners": [{"name": "http", "host": "h", "port": "80"}]},
        {"brokerId": 1, "listeners": [None]},
        [1, 2],
        "text",
        None,
    ],
)
def test_a_record_that_does_not_fit_is_kept_verbatim(tmp_path: Path, data: object) -> None:
    path = tmp_path / "m.parquet"
    metadata_parquet.write([{"offset": 5, "type": "PartitionChangeRecord", "data": data}], path)
    row = pq.read_table(path).to_pylist()[0]
    assert json.loads(row["data"]) == data
    assert all(row[f.name] is None for f in metadata_parquet.FIELDS)  # no half-typed row
    assert metadata_parquet.read(path) == [{"offset": 5, "type": "PartitionChangeRecord", "data": data}]


def test_bad_offset_and_type_become_null_and_unknown_fields_are_dropped(tmp_path: Path) -> None:
    path = tmp_path / "m.parquet"
    metadata_parquet.write(
        [
            {"offset": "7", "type": 3, "data": {"topicId": str(TOPIC)}},
            {"offset": 8, "type": "RemoveTopicRecord", "data": {"topicId": str(TOPIC), "future": [1]}},
        ],
        path,
    )
    first, second = metadata_parquet.read(path)
    assert (first["offset"], first["type"]) == (None, None)
    assert second == {"offset": 8, "type": "RemoveTopicRecord", "data": {"topicId": str(TOPIC)}}


def test_writes_in_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metadata_parquet, "BATCH", 3)
    path = tmp_path / "m.parquet"
    exported = _exported(EVERY_TYPE * 2)
    assert metadata_parquet.write(iter(exported), path) == len(exported)
    assert pq.ParquetFile(path).metadata.num_row_groups >= 2
    assert [r["offset"] for r in metadata_parquet.read(path)] == list(range(len(exported)))
