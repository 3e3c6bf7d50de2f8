"""The admin extensions' records (docs/api.md) in the pipeline's input: a real controller's log
with config changes, SCRAM credentials, producer-id blocks, a broker config and a reassignment
in progress, exported by `jbodctl metadata
export` as JSON lines and as typed Parquet, reads with no bad line, and every topic's configs
(so `min.insync.replicas`) are the controller's effective ones; the new types' malformed records
are bad lines; a typed export written before their columns existed still reads."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from jbod_cli import metadata_parquet
from jbod_core import records
from jbod_pipeline import inputs, replay, schemas
from tests.controller.conftest import Api, bring_up
from tests.harness import ControllerProcess
from tests.pipeline.conftest import jbodctl_export


def _post(api: Api, path: str, body: Any, *, broker: bool = False) -> dict[str, Any]:
    response = (api.broker if broker else api.admin).post(path, json=body)
    assert response.status_code == 200, response.text
    reply: dict[str, Any] = response.json()
    assert reply["errorCode"] == 0, reply
    return reply


def _upsertion(user: str) -> dict[str, Any]:
    salted = hashlib.pbkdf2_hmac("sha512", b"pw", b"salt", 4096)
    return {
        "name": user,
        "mechanism": 2,
        "iterations": 4096,
        "salt": base64.b64encode(b"salt").decode(),
        "saltedPassword": base64.b64encode(salted).decode(),
    }


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, dict[str, str]], Path]:
    """A controller's log with every extension record type; its topics' configs by name."""
    tmp_path = tmp_path_factory.mktemp("admin-records")
    with ControllerProcess(data_dir=tmp_path / "controller") as controller:
        api = Api(controller)
        try:
            brokers = bring_up(api, [1, 2, 3])
            api.create_topic("a", numPartitions=2, replicationFactor=3, configs={"min.insync.replicas": "1"})
            api.create_topic("b", numPartitions=1, replicationFactor=2, configs={"retention.ms": "1000"})
            set_a = {"configs": [{"name": "min.insync.replicas", "op": "SET", "value": "3"}]}
            _post(api, "/v1/topics/a/configs", set_a)
            change_b = {
                "configs": [
                    {"name": "min.insync.replicas", "op": "SET", "value": "2"},
                    {"name": "retention.ms", "op": "DELETE"},
                ]
            }
            _post(api, "/v1/topics/b/configs", change_b)
            _post(api, "/v1/topics/b/configs", {"configs": [{"name": "min.insync.replicas", "op": "DELETE"}]})
            _post(api, "/v1/topics/b/partitions", {"totalCount": 3})
            _post(api, "/v1/scram-credentials", {"upsertions": [_upsertion("alice"), _upsertion("bob")]})
            _post(api, "/v1/scram-credentials", {"deletions": [{"name": "bob", "mechanism": 2}]})
            _post(api, "/v1/producer-ids", {"brokerId": 1, "brokerEpoch": brokers[1].epoch}, broker=True)
            throttle = {
                "configs": [{"name": "follower.replication.throttled.rate", "op": "SET", "value": "1000"}]
            }
            _post(api, "/v1/brokers/1/configs", throttle)
            acl = {
                "resourceType": "TOPIC",
                "resourceName": "b",
                "principal": "User:alice",
                "operation": "READ",
                "permissionType": "ALLOW",
            }
            created = api.admin.post("/v1/acls", json={"creations": [acl, {**acl, "operation": "WRITE"}]})
            assert created.json()["results"][0]["errorCode"] == 0, created.text
            deleted = api.admin.post("/v1/acls/delete", json={"filters": [{"operation": "WRITE"}]})
            assert len(deleted.json()["results"][0]["matchingAcls"]) == 1, deleted.text
            # A reassignment left running (no broker process fetches): adding/removing replicas.
            moving = {"partitions": [{"topic": "b", "partition": 0, "replicas": [1, 2, 3]}]}
            reassigned = api.admin.post("/v1/reassignments", json=moving).json()
            assert reassigned["results"][0]["errorCode"] == 0, reassigned
            configs = {t["name"]: t["configs"] for t in api.topics()}
            jbodctl_export(controller, tmp_path / "export.jsonl")
            jbodctl_export(controller, tmp_path / "export.parquet")
        finally:
            api.close()
    return configs, tmp_path


def test_the_controllers_export_has_every_extension_type(
    exported: tuple[dict[str, dict[str, str]], Path],
) -> None:
    configs, tmp_path = exported
    assert configs == {"a": {"min.insync.replicas": "3"}, "b": {}}
    lines = [json.loads(line) for line in (tmp_path / "export.jsonl").read_text().splitlines()]
    assert {
        "ConfigRecord",
        "UserScramCredentialRecord",
        "RemoveUserScramCredentialRecord",
        "ProducerIdsRecord",
        "BrokerConfigRecord",
        "AccessControlEntryRecord",
        "RemoveAccessControlEntryRecord",
    } <= {line["type"] for line in lines}
    assert any(line["data"].get("addingReplicas") for line in lines)
    typed = metadata_parquet.read(tmp_path / "export.parquet")
    assert pq.read_table(tmp_path / "export.parquet").column("data").null_count == len(lines)
    # Typed rows drop a null `value`; the decoded records are the same.
    assert [records.decode(r["type"], r["data"]) for r in typed] == [
        records.decode(line["type"], line["data"]) for line in lines
    ]


@pytest.mark.parametrize("name", ["export.jsonl", "export.parquet"])
def test_topics_get_the_effective_configs(
    spark: SparkSession, exported: tuple[dict[str, dict[str, str]], Path], name: str
) -> None:
    configs, tmp_path = exported
    read = inputs.read_metadata(spark, str(tmp_path / name))
    assert read.report.bad_lines == 0, read.report.summary()
    topics = {r["name"]: r for r in replay.replay_topics(read.records).collect()}
    assert {n: dict(r["configs"]) for n, r in topics.items()} == configs
    assert {n: r["minIsr"] for n, r in topics.items()} == {"a": 3, "b": 1}
    frames = replay.replay(read.records)
    assert {(r["topic"], r["minIsr"]) for r in frames.partitions.collect()} == {("a", 3), ("b", 1)}
    assert frames.partitions.count() == 5


def test_a_snapshot_topic_record_hides_older_config_records(spark: SparkSession, tmp_path: Path) -> None:
    topic = "kbdYSiJlsfXNYT4w2PFq3w"
    lines = [
        {"offset": 0, "type": "TopicRecord", "data": {"name": "t", "topicId": topic, "configs": {}}},
        {
            "offset": 1,
            "type": "ConfigRecord",
            "data": {"topicId": topic, "name": "min.insync.replicas", "value": "3"},
        },
        # A snapshot at offset 4: the image's TopicRecord carries the effective configs.
        {"offset": 4, "type": "TopicRecord", "data": {"name": "t", "topicId": topic, "configs": {"x": "1"}}},
        {"offset": 5, "type": "ConfigRecord", "data": {"topicId": topic, "name": "y", "value": "2"}},
        {"offset": 6, "type": "ConfigRecord", "data": {"topicId": topic, "name": "x", "value": None}},
    ]
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    read = inputs.read_metadata(spark, str(path))
    assert read.report.bad_lines == 0, read.report.summary()
    [row] = replay.replay_topics(read.records).collect()
    assert (dict(row["configs"]), row["minIsr"]) == ({"y": "2"}, 1)


def test_malformed_extension_records_are_bad_lines(spark: SparkSession, tmp_path: Path) -> None:
    topic = "kbdYSiJlsfXNYT4w2PFq3w"
    bad = {
        json.dumps(
            {"offset": 0, "type": "ConfigRecord", "data": {"topicId": topic}}
        ): "ConfigRecord field name",
        json.dumps(
            {"offset": 1, "type": "RemoveUserScramCredentialRecord", "data": {"name": "a", "mechanism": "2"}}
        ): "RemoveUserScramCredentialRecord field mechanism",
        json.dumps(
            {"offset": 2, "type": "ProducerIdsRecord", "data": {"brokerId": 1, "brokerEpoch": 0}}
        ): "ProducerIdsRecord field nextProducerId",
    }
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(bad) + "\n")
    read = inputs.read_metadata(spark, str(path))
    assert read.report.bad_lines == 3
    problems = [b.problem for b in read.report.examples]
    for expected, problem in zip(bad.values(), problems, strict=True):
        assert problem.startswith(expected), problem


def test_a_typed_export_without_the_extension_columns_still_reads(
    spark: SparkSession, exported: tuple[dict[str, dict[str, str]], Path], tmp_path: Path
) -> None:
    _, source = exported
    lines = [json.loads(line) for line in (source / "export.jsonl").read_text().splitlines()]
    older = [line for line in lines if line["type"] in schemas.RECORD_TYPES[:7]]
    metadata_parquet.write(older, tmp_path / "full.parquet")
    table = pq.read_table(tmp_path / "full.parquet").drop_columns(list(schemas.LATER_FIELDS))
    pq.write_table(table, tmp_path / "older.parquet")
    read = inputs.read_metadata(spark, str(tmp_path / "older.parquet"))
    assert read.report.bad_lines == 0, read.report.summary()
    assert read.records.count() == len(older)
