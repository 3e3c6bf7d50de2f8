"""The Kafka tools harness (issue 22) proven on a real Apache Kafka: Kafka's own scripts, run from the
jars on Maven Central by `e2e.kafka_tools`, do what a user sees them do against a single-node Kafka
that the same jars run (`kafka-delete-records.sh`'s output is what tests/kafka_api/test_delete_records.py
expects of our brokers). Later tests point the same harness at our brokers.

One Kafka for the module (SASL_PLAINTEXT with SCRAM-SHA-512 user `admin`, two log dirs), so every
tool also proves it logs in through `--command-config`. Each test uses topics of its own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from e2e import kafka_tools
from e2e.kafka_tools import AdminCallError, KafkaCluster, KafkaInstall, Replica, ScramUser
from e2e.wait import wait_for
from tests.kafka_api.conftest import delete_records_with_the_tool, tool_deleted_records

pytestmark = [pytest.mark.slow, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def install() -> KafkaInstall:
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        reason = f"{' and '.join(missing)} not on PATH (Kafka's tools run from Maven Central's jars)"
        if os.environ.get("JBOD_E2E_REQUIRED"):
            pytest.fail(f"Kafka tools required (JBOD_E2E_REQUIRED=1) but {reason}")
        pytest.skip(reason)
    return KafkaInstall.ensure()


@pytest.fixture(scope="module")
def kafka(install: KafkaInstall) -> Iterator[KafkaCluster]:
    with KafkaCluster(install, log_dir_count=2, scram=ScramUser()) as cluster:
        print(f"Kafka {kafka_tools.KAFKA_VERSION} started in {cluster.started_in:.1f} s")
        yield cluster


def _create(kafka: KafkaCluster, topic: str) -> None:
    _ok(kafka.run_tool("kafka-topics.sh", ["--create", "--topic", topic]))


def _offsets(kafka: KafkaCluster, topic: str) -> dict[str, int]:
    """`kafka-get-offsets.sh` lines `topic:partition:offset` → {"topic:partition": latest offset}."""
    out = _ok(kafka.run_tool("kafka-get-offsets.sh", ["--topic", topic]))
    return {line.rsplit(":", 1)[0]: int(line.rsplit(":", 1)[1]) for line in out.split()}


def test_topics_create_describe_delete(kafka: KafkaCluster) -> None:
    created = kafka.run_tool(
        "kafka-topics.sh",
        ["--create", "--topic", "orders", "--partitions", "3", "--replication-factor", "1",
         "--config", "retention.ms=3600000"],
    )  # fmt: skip
    assert _ok(created).strip() == "Created topic orders."

    described = _ok(kafka.run_tool("kafka-topics.sh", ["--describe", "--topic", "orders"]))
    header, *partitions = described.strip().splitlines()
    assert "PartitionCount: 3" in header and "ReplicationFactor: 1" in header
    assert "retention.ms=3600000" in header
    assert sorted(p.split("\t")[2] for p in partitions) == ["Partition: 0", "Partition: 1", "Partition: 2"]
    assert all(f"Leader: {kafka.node_id}" in p for p in partitions)

    _ok(kafka.run_tool("kafka-topics.sh", ["--delete", "--topic", "orders"]))

    def describe_refused() -> subprocess.CompletedProcess[str] | None:
        proc = kafka.run_tool("kafka-topics.sh", ["--describe", "--topic", "orders"])
        return proc if proc.returncode != 0 else None

    missing = wait_for(
        describe_refused, timeout=30, what="kafka-topics.sh --describe to refuse deleted orders"
    )
    assert "Topic 'orders' does not exist" in missing.stderr + missing.stdout


def test_console_producer_then_get_offsets_and_console_consumer(kafka: KafkaCluster) -> None:
    _create(kafka, "lines")
    records = [f"record-{i}" for i in range(7)]
    _ok(kafka.run_tool("kafka-console-producer.sh", ["--topic", "lines"], input="\n".join(records) + "\n"))

    assert _offsets(kafka, "lines") == {"lines:0": 7}
    consumed = kafka.run_tool(
        "kafka-console-consumer.sh",
        ["--topic", "lines", "--from-beginning", "--max-messages", "7", "--timeout-ms", "60000"],
    )
    assert _ok(consumed).splitlines() == records


def test_delete_records_from_a_json_offsets_file(kafka: KafkaCluster, tmp_path: Path) -> None:
    """What `kafka-delete-records.sh` prints, as tests/kafka_api/test_delete_records.py expects
    of our brokers too."""
    _ok(kafka.run_tool("kafka-topics.sh", ["--create", "--topic", "purged", "--partitions", "3"]))
    assert kafka.scram is not None
    producer = Producer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": kafka.scram.mechanism,
            "sasl.username": kafka.scram.name,
            "sasl.password": kafka.scram.password,
        }
    )
    for i in range(10):
        producer.produce("purged", f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    ran = delete_records_with_the_tool(
        lambda args: kafka.run_tool("kafka-delete-records.sh", args), "purged", tmp_path
    )
    assert ran == tool_deleted_records("purged")


def test_configs_alter_a_topic_config_and_add_a_scram_user(kafka: KafkaCluster) -> None:
    _create(kafka, "configured")
    topic = ["--entity-type", "topics", "--entity-name", "configured"]
    _ok(kafka.run_tool("kafka-configs.sh", ["--alter", *topic, "--add-config", "retention.ms=1234"]))
    assert "retention.ms=1234" in _ok(kafka.run_tool("kafka-configs.sh", ["--describe", *topic]))

    alice = ScramUser(name="alice", password="alice-secret")
    user = ["--entity-type", "users", "--entity-name", "alice"]
    _ok(
        kafka.run_tool(
            "kafka-configs.sh", ["--alter", *user, "--add-config", "SCRAM-SHA-512=[password=alice-secret]"]
        )
    )

    def topics_as(who: ScramUser) -> subprocess.CompletedProcess[str]:
        return kafka_tools.run_tool(
            "kafka-topics.sh", ["--list"], bootstrap=kafka.bootstrap, command_config=who.client_config(),
            install=kafka.install,
        )  # fmt: skip

    assert "configured" in _ok(topics_as(alice)).split()
    refused = topics_as(ScramUser(name="alice", password="wrong"))
    assert refused.returncode != 0
    assert "Authentication failed" in refused.stderr + refused.stdout


def test_log_dirs_describe_is_json_naming_the_partitions_dir(kafka: KafkaCluster) -> None:
    _create(kafka, "placed")
    out = _ok(kafka.run_tool("kafka-log-dirs.sh", ["--describe", "--topic-list", "placed"]))
    report = json.loads(out.strip().splitlines()[-1])
    [broker] = report["brokers"]
    assert broker["broker"] == kafka.node_id
    assert sorted(d["logDir"] for d in broker["logDirs"]) == [str(d) for d in kafka.log_dirs]
    holding = [
        d["logDir"] for d in broker["logDirs"] if any(p["partition"] == "placed-0" for p in d["partitions"])
    ]
    assert len(holding) == 1, broker
    assert (Path(holding[0]) / "placed-0").is_dir()


def test_java_admin_moves_a_replica_to_the_other_log_dir(kafka: KafkaCluster) -> None:
    _create(kafka, "moving")
    _ok(kafka.run_tool("kafka-console-producer.sh", ["--topic", "moving"], input="a\nb\nc\n"))
    admin = kafka.admin()
    replica = Replica("moving", 0, kafka.node_id)
    [before] = admin.describe_replica_log_dirs([replica]).values()
    assert before.current_dir in {str(d) for d in kafka.log_dirs} and before.future_dir is None
    [target] = [str(d) for d in kafka.log_dirs if str(d) != before.current_dir]

    admin.alter_replica_log_dirs({replica: target})

    def moved() -> bool:
        info = admin.describe_replica_log_dirs([replica])[replica]
        return info.current_dir == target and info.future_dir is None

    wait_for(moved, timeout=60, interval=1, what=f"{replica} to move to {target}")
    assert (Path(target) / "moving-0").is_dir()
    assert _offsets(kafka, "moving") == {"moving:0": 3}


def test_java_admin_failure_exits_non_zero_with_the_exception(kafka: KafkaCluster) -> None:
    _create(kafka, "stays")
    with pytest.raises(AdminCallError, match=r"LogDirNotFoundException: The user-specified log directory"):
        kafka.admin().alter_replica_log_dirs({Replica("stays", 0, kafka.node_id): "/not/a/log/dir"})


def test_the_command_line_runs_a_script_as_a_user_would(kafka: KafkaCluster, tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in kafka.client_config.items()))
    created = subprocess.run(
        [sys.executable, "-m", "e2e.kafka_tools", "run", "kafka-topics.sh",
         "--bootstrap-server", kafka.bootstrap, "--command-config", str(config), "--create", "--topic", "typed"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert _ok(created).strip() == "Created topic typed."
    assert "SLF4J" not in created.stderr and "WARN" not in created.stderr


def test_a_half_finished_download_is_resolved_again(install: KafkaInstall, tmp_path: Path) -> None:
    """Resolved from the local Maven repository the real cache already holds: no download."""
    maven_repo = kafka_tools.cache_root() / "m2"
    lines: list[str] = []
    libs = kafka_tools.ensure_jars(tmp_path, log=lines.append, maven_repo=maven_repo)
    assert sorted(p.name for p in libs.glob("*.jar")) == sorted(p.name for p in install.libs.glob("*.jar"))

    (libs / f"kafka-clients-{kafka_tools.KAFKA_VERSION}.jar").unlink()  # as if cut off mid-copy
    kafka_tools.ensure_jars(tmp_path, log=lines.append, maven_repo=maven_repo)
    assert (libs / f"kafka-clients-{kafka_tools.KAFKA_VERSION}.jar").is_file()

    kafka_tools.ensure_jars(tmp_path, log=lines.append, maven_repo=maven_repo)
    assert [line.split()[0] for line in lines] == ["Resolved", "Resolved", "Kafka"], lines
