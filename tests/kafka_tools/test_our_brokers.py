"""Apache Kafka 4.3.1's own tools against our brokers, run as a user runs them (issues 22, 23).

One cluster for the module: a controller and three brokers with two plain log dirs each, every
broker with a SASL_PLAINTEXT listener. Every tool logs in through `--command-config` with the
properties `jbodctl local client-properties` prints (`client_properties`), as the `admin`
principal unless a test says otherwise, and what the tools print is checked against the
controller's own view (`cluster.admin`) and the brokers' dirs. Each test uses topics of its own.

The console consumer reads by assignment (`--partition 0 --offset earliest`) and in a consumer
group (issue 23); `kafka-consumer-groups.sh` lists, describes (partitions, committed offsets,
lag), resets and deletes a group; `kafka-producer-perf-test.sh` and `kafka-consumer-perf-test.sh`
(in a group) run to completion. A tool that fails shows the tail of every broker's `agent.log`
beside its own output.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from e2e import kafka_tools
from e2e.kafka_tools import AdminCallError, JavaAdmin, KafkaInstall, Replica
from e2e.wait import wait_for
from jbod_client.controller import ControllerClient
from jbod_core import group_records
from jbod_local.kafka_clients import client_properties
from tests.kafka_api.conftest import KafkaCluster, start_kafka_cluster
from tests.kafka_tools.test_harness import install  # noqa: F401  the module's fixture: Kafka's jars or a skip

pytestmark = [pytest.mark.slow, pytest.mark.integration]

BROKERS = (1, 2, 3)
LOG_TAIL_LINES = 15


@dataclasses.dataclass(frozen=True)
class Cluster:
    """Our cluster as Kafka's tools reach it: the bootstrap servers and the admin's properties file."""

    kafka: KafkaCluster
    install: KafkaInstall
    admin_properties: Path

    @property
    def controller(self) -> ControllerClient:
        return self.kafka.cluster.admin

    def run(
        self, script: str, args: list[str], *, config: Path | None = None, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`bin/<script> --bootstrap-server ... --command-config <config or the admin's> args`."""
        return kafka_tools.run_tool(
            script,
            args,
            bootstrap=self.kafka.bootstrap,
            command_config=config or self.admin_properties,
            input=input,
            install=self.install,
        )

    def ok(self, proc: subprocess.CompletedProcess[str]) -> str:
        """The tool's stdout, asserting it exited 0 (else its output and the brokers' log tails)."""
        assert proc.returncode == 0, (
            f"{' '.join(proc.args[proc.args.index('-cp') + 2 :])}\nexit {proc.returncode}\nstdout: {proc.stdout}\n"
            f"stderr: {proc.stderr}\n{self.log_tails()}"
        )
        return proc.stdout

    def log_tails(self) -> str:
        tails = []
        for node_id, broker in sorted(self.kafka.cluster.brokers.items()):
            lines = broker.log_path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
            tails.append(f"--- b{node_id}/agent.log ({broker.log_path})\n" + "\n".join(lines))
        return "\n".join(tails)

    def java_admin(self) -> JavaAdmin:
        return JavaAdmin(self.kafka.bootstrap, self.admin_properties, self.install)

    def log_dir_paths(self, node_id: int) -> set[str]:
        return {str(p) for p in self.kafka.cluster.brokers[node_id].log_dirs}

    def dir_path_by_id(self) -> dict[str, str]:
        """Every broker's log dirs: directory id (as the controller names it) → path."""
        return {
            d["directoryId"]: d["path"] for node_id in BROKERS for d in self.kafka.cluster.log_dirs(node_id)
        }


@pytest.fixture(scope="module")
def cluster(install: KafkaInstall, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:  # noqa: F811
    base = tmp_path_factory.mktemp("ours")
    with contextlib.ExitStack() as stack:
        kafka = start_kafka_cluster(
            stack, base, brokers=len(BROKERS), loop=False, group_initial_rebalance_delay_ms="300"
        )
        admin_properties = base / "admin.properties"
        admin_properties.write_text(client_properties(kafka.admin_password))
        yield Cluster(kafka, install, admin_properties)


Partitions = dict[int, tuple[int, list[int], list[int]]]  # partition → (leader, replicas, ISR)
Described = tuple[dict[str, str], Partitions]  # the topic line's fields, and its partitions


def _fields(line: str) -> dict[str, str]:
    """One line of `kafka-topics.sh --describe`: tab-separated `Key: value` fields."""
    pairs = (field.partition(":") for field in line.strip().split("\t"))
    return {key.strip(): value.strip() for key, _, value in pairs}


def _ids(text: str) -> list[int]:
    return [int(i) for i in text.split(",") if i]


def _describe(cluster: Cluster, topic: str) -> Described:
    """`kafka-topics.sh --describe`: the topic line, and partition → (leader, replicas, ISR)."""
    header, *rows = (
        cluster.ok(cluster.run("kafka-topics.sh", ["--describe", "--topic", topic])).strip().splitlines()
    )
    partitions = {}
    for row in map(_fields, rows):
        partitions[int(row["Partition"])] = (int(row["Leader"]), _ids(row["Replicas"]), _ids(row["Isr"]))
    return _fields(header), partitions


def _controller_partitions(cluster: Cluster, topic: str) -> Partitions:
    return {
        p["partitionIndex"]: (p["leader"], p["replicas"], p["isr"])
        for p in cluster.controller.describe_topic(topic)["partitions"]
    }


def _described_as_by_the_controller(cluster: Cluster, topic: str) -> Described:
    """`_describe` once its partitions (leaders, replicas, ISR) are the controller's: a broker's
    metadata may trail the controller's for a moment."""

    def matching() -> Described | None:
        shown = _describe(cluster, topic)
        return shown if shown[1] == _controller_partitions(cluster, topic) else None

    return wait_for(
        matching, timeout=30, what=f"kafka-topics.sh --describe of {topic} to match the controller"
    )


def _create(cluster: Cluster, topic: str, *, partitions: int = 1) -> None:
    args = ["--create", "--topic", topic, "--partitions", str(partitions), "--replication-factor", "3"]
    assert cluster.ok(cluster.run("kafka-topics.sh", args)).strip() == f"Created topic {topic}."
    wait_for(lambda: cluster.kafka.cluster.placed(topic), timeout=30, what=f"placements of {topic}")


def _offsets(cluster: Cluster, topic: str) -> dict[int, int]:
    """`kafka-get-offsets.sh` lines `topic:partition:offset` → {partition: latest offset}."""
    out = cluster.ok(cluster.run("kafka-get-offsets.sh", ["--topic", topic]))
    return {int(line.split(":")[-2]): int(line.split(":")[-1]) for line in out.split()}


def _consume(cluster: Cluster, topic: str, count: int) -> list[str]:
    """`kafka-console-consumer.sh` of partition 0 from its earliest offset (assign(), no group)."""
    args = ["--topic", topic, "--partition", "0", "--offset", "earliest", "--max-messages", str(count),
            "--timeout-ms", "60000"]  # fmt: skip
    return cluster.ok(cluster.run("kafka-console-consumer.sh", args)).splitlines()


@dataclasses.dataclass(frozen=True)
class LogDir:
    """One `logDirs` entry of `kafka-log-dirs.sh --describe`: its error, and partition (`topic-N`) → entry."""

    error: str | None
    partitions: Mapping[str, Mapping[str, Any]]


Report = Mapping[int, Mapping[str, LogDir]]


def _log_dirs_report(cluster: Cluster, topic: str) -> Report:
    """`kafka-log-dirs.sh --describe` of `topic` (its last line is JSON): broker → path → `LogDir`."""
    args = ["--describe", "--broker-list", ",".join(map(str, BROKERS)), "--topic-list", topic]
    report = json.loads(cluster.ok(cluster.run("kafka-log-dirs.sh", args)).strip().splitlines()[-1])
    return {
        b["broker"]: {
            d["logDir"]: LogDir(d["error"], {p["partition"]: p for p in d["partitions"]})
            for d in b["logDirs"]
        }
        for b in report["brokers"]
    }


def _replica_dirs(report: Report, name: str) -> dict[int, list[str]]:
    """broker → the dirs in which the report lists partition `name` (`topic-N`), current or future."""
    return {b: [path for path, d in dirs.items() if name in d.partitions] for b, dirs in report.items()}


def _sizes(report: Report, name: str) -> dict[int, int]:
    """broker → the size the report gives partition `name` in the dir that holds it."""
    holding = _replica_dirs(report, name)
    return {b: dirs[path].partitions[name]["size"] for b, dirs in report.items() for path in holding[b]}


def _controller_dir(cluster: Cluster, replica: Replica) -> str:
    """The path of the dir the controller's metadata assigns `replica` to."""
    [partition] = [
        p
        for p in cluster.controller.describe_topic(replica.topic)["partitions"]
        if p["partitionIndex"] == replica.partition
    ]
    directory_id = partition["directories"][partition["replicas"].index(replica.broker)]
    return cluster.dir_path_by_id()[directory_id]


# --- kafka-topics.sh ------------------------------------------------------------------------------


def test_topics_create_describe_list_alter_delete(cluster: Cluster) -> None:
    topic = "tools-topics"
    created = cluster.run(
        "kafka-topics.sh",
        ["--create", "--topic", topic, "--partitions", "3", "--replication-factor", "3",
         "--config", "retention.ms=3600000"],
    )  # fmt: skip
    assert cluster.ok(created).strip() == f"Created topic {topic}."
    described = cluster.controller.describe_topic(topic)
    assert described["configs"]["retention.ms"] == "3600000"

    header, partitions = _described_as_by_the_controller(cluster, topic)
    assert header["Topic"] == topic and header["TopicId"] == described["topicId"]
    assert header["PartitionCount"] == "3" and header["ReplicationFactor"] == "3"
    assert header["Configs"] == "retention.ms=3600000"
    assert sorted(partitions) == [0, 1, 2]
    for leader, replicas, isr in partitions.values():
        assert sorted(replicas) == list(BROKERS) and sorted(isr) == list(BROKERS) and leader in replicas

    assert topic in cluster.ok(cluster.run("kafka-topics.sh", ["--list"])).split()

    cluster.ok(cluster.run("kafka-topics.sh", ["--alter", "--topic", topic, "--partitions", "5"]))
    assert sorted(_controller_partitions(cluster, topic)) == [0, 1, 2, 3, 4]
    header, partitions = _described_as_by_the_controller(cluster, topic)
    assert header["PartitionCount"] == "5" and sorted(partitions) == [0, 1, 2, 3, 4]

    cluster.ok(cluster.run("kafka-topics.sh", ["--delete", "--topic", topic]))

    def describe_refused() -> subprocess.CompletedProcess[str] | None:
        proc = cluster.run("kafka-topics.sh", ["--describe", "--topic", topic])
        return proc if proc.returncode != 0 else None

    refused = wait_for(
        describe_refused, timeout=30, what=f"kafka-topics.sh --describe to refuse deleted {topic}"
    )
    assert f"Topic '{topic}' does not exist" in refused.stdout + refused.stderr
    assert topic not in cluster.ok(cluster.run("kafka-topics.sh", ["--list"])).split()


# --- kafka-configs.sh -----------------------------------------------------------------------------


def test_configs_add_describe_and_delete_a_topic_config(cluster: Cluster) -> None:
    topic = "tools-configs"
    _create(cluster, topic)
    entity = ["--entity-type", "topics", "--entity-name", topic]

    altered = cluster.run("kafka-configs.sh", ["--alter", *entity, "--add-config", "min.insync.replicas=2"])
    assert cluster.ok(altered).strip() == f"Completed updating config for topic {topic}."
    assert cluster.controller.describe_topic(topic)["configs"] == {"min.insync.replicas": "2"}
    shown = cluster.ok(cluster.run("kafka-configs.sh", ["--describe", *entity])).splitlines()
    assert shown[0] == f"Dynamic configs for topic {topic} are:"
    assert [line.split()[0] for line in shown[1:]] == ["min.insync.replicas=2"]

    deleted = cluster.run("kafka-configs.sh", ["--alter", *entity, "--delete-config", "min.insync.replicas"])
    assert cluster.ok(deleted).strip() == f"Completed updating config for topic {topic}."
    assert cluster.controller.describe_topic(topic)["configs"] == {}
    shown = cluster.ok(cluster.run("kafka-configs.sh", ["--describe", *entity])).splitlines()
    assert shown == [f"Dynamic configs for topic {topic} are:"]


def _add_scram_user(cluster: Cluster, user: str, password: str) -> None:
    altered = cluster.run(
        "kafka-configs.sh",
        ["--alter", "--add-config", f"SCRAM-SHA-512=[iterations=8192,password={password}]",
         "--entity-type", "users", "--entity-name", user],
    )  # fmt: skip
    assert cluster.ok(altered).strip() == f"Completed updating config for user {user}."


def test_configs_adds_a_scram_user_who_produces_but_cannot_administer(
    cluster: Cluster, tmp_path: Path
) -> None:
    _add_scram_user(cluster, "alice", "alice-secret")
    topic = "tools-alice"
    _create(cluster, topic)
    alice = tmp_path / "alice.properties"
    alice.write_text(client_properties("alice-secret", user="alice"))
    # The authorizer is always on: alice writes once an ACL allows it (WRITE implies DESCRIBE).
    granted = cluster.run(
        "kafka-acls.sh",
        ["--add", "--allow-principal", "User:alice", "--operation", "Write", "--topic", topic],
    )
    cluster.ok(granted)

    produced = cluster.run(
        "kafka-console-producer.sh", ["--topic", topic], config=alice, input="a1\na2\na3\n"
    )
    cluster.ok(produced)
    assert _offsets(cluster, topic) == {0: 3}
    assert _consume(cluster, topic, 3) == ["a1", "a2", "a3"]

    refused = cluster.run("kafka-topics.sh", ["--create", "--topic", "tools-by-alice"], config=alice)
    assert refused.returncode != 0
    # The refusal's message is ours (Kafka's says "Authorization failed."): it names who, what and which.
    assert "TopicAuthorizationException: User:alice may not CREATE topic tools-by-alice" in refused.stderr, (
        refused.stderr
    )
    assert "tools-by-alice" not in cluster.ok(cluster.run("kafka-topics.sh", ["--list"])).split()

    wrong = tmp_path / "wrong.properties"
    wrong.write_text(client_properties("not-alice-secret", user="alice"))
    denied = cluster.run("kafka-topics.sh", ["--list"], config=wrong)
    assert denied.returncode != 0
    assert "SaslAuthenticationException: Authentication failed" in denied.stderr, denied.stderr


def test_configs_describes_scram_users(cluster: Cluster) -> None:
    _add_scram_user(cluster, "bob", "bob-secret")
    shown = cluster.ok(cluster.run("kafka-configs.sh", ["--describe", "--entity-type", "users"]))
    assert "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-512=iterations=8192" in shown


# --- kafka-log-dirs.sh and the Java Admin ---------------------------------------------------------


def test_log_dirs_lists_every_dir_and_each_replica_in_the_dir_the_controller_assigned(
    cluster: Cluster,
) -> None:
    topic = "tools-log-dirs"
    _create(cluster, topic, partitions=3)
    before = _log_dirs_report(cluster, topic)
    keyed = "".join(f"k{i}:v{i}\n" for i in range(30))  # murmur2 spreads these keys over all 3 partitions
    args = ["--topic", topic, "--property", "parse.key=true", "--property", "key.separator=:"]
    cluster.ok(cluster.run("kafka-console-producer.sh", args, input=keyed))
    offsets = _offsets(cluster, topic)
    assert sorted(offsets) == [0, 1, 2] and all(offsets.values()) and sum(offsets.values()) == 30

    report = _log_dirs_report(cluster, topic)
    assert sorted(report) == list(BROKERS)
    for node_id, dirs in report.items():
        assert set(dirs) == cluster.log_dir_paths(node_id) and len(dirs) == 2
        assert all(d.error is None for d in dirs.values())
    path_by_id = cluster.dir_path_by_id()
    for p in cluster.controller.describe_topic(topic)["partitions"]:
        name = f"{topic}-{p['partitionIndex']}"
        holding = _replica_dirs(report, name)
        assert {b for b, paths in holding.items() if paths} == set(p["replicas"])
        for node_id, directory_id in zip(p["replicas"], p["directories"], strict=True):
            assert holding[node_id] == [path_by_id[directory_id]], (name, node_id, report[node_id])
            entry = report[node_id][holding[node_id][0]].partitions[name]
            assert entry["isFuture"] is False and entry["offsetLag"] == 0
        sizes, sizes_before = _sizes(report, name), _sizes(before, name)
        assert all(sizes[b] > max(sizes_before[b], 0) for b in p["replicas"]), (sizes_before, sizes)


def test_log_dirs_size_is_the_bytes_of_the_log_segments_as_in_kafka(cluster: Cluster) -> None:
    topic = "tools-log-dir-size"
    _create(cluster, topic)
    empty = _log_dirs_report(cluster, topic)
    name = f"{topic}-0"
    assert _sizes(empty, name) == dict.fromkeys(BROKERS, 0)
    cluster.ok(cluster.run("kafka-console-producer.sh", ["--topic", topic], input="x\ny\n"))
    sizes = _sizes(_log_dirs_report(cluster, topic), name)
    assert len(set(sizes.values())) == 1, f"the replicas of one batch differ in size: {sizes}"


def test_java_admin_moves_the_leaders_replica_to_its_other_dir(cluster: Cluster) -> None:
    topic = "tools-move"
    _create(cluster, topic)
    records = [f"moved-{i}" for i in range(20)]
    cluster.ok(cluster.run("kafka-console-producer.sh", ["--topic", topic], input="\n".join(records) + "\n"))
    [partition] = cluster.controller.describe_topic(topic)["partitions"]
    replica = Replica(topic, 0, partition["leader"])
    admin = cluster.java_admin()
    [before] = admin.describe_replica_log_dirs([replica]).values()
    assert before.current_dir in cluster.log_dir_paths(replica.broker) and before.future_dir is None
    [target] = cluster.log_dir_paths(replica.broker) - {before.current_dir}

    admin.alter_replica_log_dirs({replica: target})

    def moved() -> bool:
        info = admin.describe_replica_log_dirs([replica])[replica]
        return info.current_dir == target and info.future_dir is None

    wait_for(moved, timeout=90, interval=1, what=f"{replica} to move to {target}")
    report = _log_dirs_report(cluster, topic)
    assert _replica_dirs(report, f"{topic}-0")[replica.broker] == [target]
    assert report[replica.broker][target].partitions[f"{topic}-0"]["isFuture"] is False
    wait_for(
        lambda: _controller_dir(cluster, replica) == target,
        timeout=30,
        what=f"the controller to place {replica} in {target}",
    )
    assert _offsets(cluster, topic) == {0: len(records)}
    assert _consume(cluster, topic, len(records)) == records

    with pytest.raises(AdminCallError, match=r"LogDirNotFoundException: The user-specified log directory"):
        admin.alter_replica_log_dirs({replica: "/not/a/log/dir"})


# --- console producer, get-offsets, console consumer ----------------------------------------------


def test_console_producer_get_offsets_and_console_consumer_by_assignment(cluster: Cluster) -> None:
    topic = "tools-console"
    _create(cluster, topic)
    records = [f"line-{i}" for i in range(50)]
    cluster.ok(cluster.run("kafka-console-producer.sh", ["--topic", topic], input="\n".join(records) + "\n"))
    assert _offsets(cluster, topic) == {0: 50}
    assert _consume(cluster, topic, 50) == records


def test_console_consumer_in_a_group(cluster: Cluster) -> None:
    topic = "tools-group"
    _create(cluster, topic)
    cluster.ok(cluster.run("kafka-console-producer.sh", ["--topic", topic], input="g1\ng2\n"))
    args = ["--topic", topic, "--group", "tools", "--from-beginning", "--max-messages", "2",
            "--timeout-ms", "30000"]  # fmt: skip
    consumed = cluster.run("kafka-console-consumer.sh", args)
    assert cluster.ok(consumed).splitlines() == ["g1", "g2"]


# --- kafka-consumer-groups.sh ---------------------------------------------------------------------


def _consumer_groups(cluster: Cluster, args: list[str]) -> str:
    return cluster.ok(cluster.run("kafka-consumer-groups.sh", args))


def _described_group(cluster: Cluster, group: str) -> dict[int, dict[str, str]]:
    """`kafka-consumer-groups.sh --describe --group`: partition → the row's columns by header."""
    lines = [
        line.split() for line in _consumer_groups(cluster, ["--describe", "--group", group]).splitlines()
    ]
    [header] = [line for line in lines if line[:1] == ["GROUP"]]
    rows = [dict(zip(header, line, strict=True)) for line in lines if line and line[0] == group]
    return {int(row["PARTITION"]): row for row in rows}


def _offsets_topic_records(cluster: Cluster, group: str, formatter: str) -> list[dict[str, Any]]:
    """The records of `group` in its partition of `__consumer_offsets`, printed as JSON by one of
    Kafka's formatters (the others' records are left out)."""
    partition = group_records.partition_for(group, group_records.DEFAULT_PARTITIONS)
    records: list[dict[str, Any]] = []
    # The consumer stops once nothing came for its timeout, counted from its start: on a loaded
    # machine its first fetch may come later than that, so an empty read is tried again, longer.
    for timeout_ms in ("5000", "20000", "60000"):
        args = ["--topic", group_records.OFFSETS_TOPIC, "--partition", str(partition), "--offset", "earliest",
                "--formatter", formatter, "--timeout-ms", timeout_ms]  # fmt: skip
        out = cluster.run("kafka-console-consumer.sh", args).stdout  # exits 1 on its timeout
        decoder, position = json.JSONDecoder(), 0
        while (start := out.find("{", position)) >= 0:
            record, position = decoder.raw_decode(out, start)
            if record["key"]["data"]["group"] == group:
                records.append(record)
        if records:
            break
    return records


def test_consumer_groups_describe_lag_reset_list_and_delete(cluster: Cluster) -> None:
    topic, group = "tools-groups", "tools-groups-g"
    _create(cluster, topic, partitions=3)
    keyed = "".join(f"k{i}:v{i}\n" for i in range(30))
    args = ["--topic", topic, "--property", "parse.key=true", "--property", "key.separator=:"]
    cluster.ok(cluster.run("kafka-console-producer.sh", args, input=keyed))
    consumed = cluster.run(
        "kafka-console-consumer.sh",
        [
            "--topic",
            topic,
            "--group",
            group,
            "--from-beginning",
            "--max-messages",
            "30",
            "--timeout-ms",
            "90000",
        ],
    )
    assert sorted(cluster.ok(consumed).split()) == sorted(f"v{i}" for i in range(30))
    cluster.ok(cluster.run("kafka-console-producer.sh", ["--topic", topic], input="late1\nlate2\nlate3\n"))
    ends = _offsets(cluster, topic)
    assert sum(ends.values()) == 33

    assert group in _consumer_groups(cluster, ["--list"]).split()
    described = _described_group(cluster, group)
    assert sorted(described) == [0, 1, 2]
    lags = {}
    for partition, row in described.items():
        assert row["TOPIC"] == topic and int(row["LOG-END-OFFSET"]) == ends[partition]
        lags[partition] = int(row["LAG"])
        assert int(row["CURRENT-OFFSET"]) + lags[partition] == ends[partition]
        assert row["CONSUMER-ID"] == "-"  # the console consumer left: no active member
    assert sum(lags.values()) == 3  # committed after the 30 read; the 3 late records are the lag

    reset = _consumer_groups(
        cluster, ["--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute"]
    )
    assert sorted(line.split()[2:] for line in reset.splitlines() if line.startswith(group)) == [
        [str(p), "0"] for p in range(3)
    ]
    assert {
        p: (int(r["CURRENT-OFFSET"]), int(r["LAG"])) for p, r in _described_group(cluster, group).items()
    } == {p: (0, end) for p, end in ends.items()}

    # What the coordinator wrote, as Kafka's own formatters read __consumer_offsets.
    offsets = _offsets_topic_records(
        cluster, group, "org.apache.kafka.tools.consumer.OffsetsMessageFormatter"
    )
    latest = {
        r["key"]["data"]["partition"]: r["value"] for r in offsets if r["key"]["data"]["topic"] == topic
    }
    assert {p: (v["version"], v["data"]["offset"]) for p, v in latest.items()} == dict.fromkeys(
        range(3), (3, 0)
    )
    metadata = _offsets_topic_records(
        cluster, group, "org.apache.kafka.tools.consumer.GroupMetadataMessageFormatter"
    )
    assert metadata and metadata[-1]["value"]["data"]["protocolType"] == "consumer"
    assert metadata[-1]["value"]["data"]["members"] == []  # the console consumer left

    deleted = _consumer_groups(cluster, ["--delete", "--group", group])
    assert f"Deletion of requested consumer groups ('{group}') was successful." in deleted
    assert group not in _consumer_groups(cluster, ["--list"]).split()
    gone = cluster.run("kafka-consumer-groups.sh", ["--describe", "--group", group])
    # As Kafka 4.3.1 answers it (DescribeGroups v6, KIP-1043):
    assert f"GroupIdNotFoundException: Group {group} not found." in gone.stdout


# --- kafka-producer-perf-test.sh and kafka-consumer-perf-test.sh ---------------------------------


def test_producer_perf_test_writes_every_record_with_acks_all(cluster: Cluster) -> None:
    topic = "tools-perf"
    _create(cluster, topic, partitions=3)
    args = ["--topic", topic, "--num-records", "5000", "--record-size", "1024", "--throughput", "-1",
            "--command-property", "acks=all", "enable.idempotence=true"]  # fmt: skip
    out = cluster.ok(cluster.run("kafka-producer-perf-test.sh", args))
    # The last line sums the run up: "5000 records sent, ... records/sec (... MB/sec), ... ms avg
    # latency, ... ms max latency, ... ms 50th, ... ms 99.9th."
    summary = out.strip().splitlines()[-1]
    assert summary.startswith("5000 records sent,") and summary.endswith("99.9th."), out
    assert sum(_offsets(cluster, topic).values()) == 5000


def test_consumer_perf_test_reads_every_record_in_a_group(cluster: Cluster) -> None:
    topic, group = "tools-perf-consumed", "tools-perf-g"
    _create(cluster, topic, partitions=3)
    produced = cluster.run(
        "kafka-producer-perf-test.sh",
        ["--topic", topic, "--num-records", "3000", "--record-size", "512", "--throughput", "-1"],
    )
    cluster.ok(produced)
    args = ["--topic", topic, "--messages", "3000", "--group", group, "--timeout", "60000"]
    out = cluster.ok(cluster.run("kafka-consumer-perf-test.sh", args))
    # A CSV header (start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, ...)
    # and one row of the run's totals.
    header, row = (line.split(", ") for line in out.strip().splitlines()[-2:])
    stats = dict(zip(header, row, strict=True))
    assert int(stats["data.consumed.in.nMsg"]) == 3000, out
    # It consumed in the group, and closing committed its positions: no lag left.
    described = _described_group(cluster, group)
    assert {p: int(r["LAG"]) for p, r in described.items()} == dict.fromkeys(range(3), 0)


# --- kafka-configs.sh --entity-type brokers (issue 24) -------------------------------------------


def _described_configs(cluster: Cluster, entity: list[str]) -> list[str]:
    return cluster.ok(cluster.run("kafka-configs.sh", ["--describe", *entity])).splitlines()


def test_configs_set_describe_and_delete_dynamic_broker_configs(cluster: Cluster) -> None:
    broker = ["--entity-type", "brokers", "--entity-name", "1"]
    default = ["--entity-type", "brokers", "--entity-default"]
    rates = "follower.replication.throttled.rate=100000,leader.replication.throttled.rate=200000"
    altered = cluster.run("kafka-configs.sh", ["--alter", *broker, "--add-config", rates])
    assert cluster.ok(altered).strip() == "Completed updating config for broker 1."
    shown = _described_configs(cluster, broker)
    assert shown[0] == "Dynamic configs for broker 1 are:"
    assert sorted(line.split()[0] for line in shown[1:]) == [
        "follower.replication.throttled.rate=100000",
        "leader.replication.throttled.rate=200000",
    ]
    assert all("DYNAMIC_BROKER_CONFIG" in line for line in shown[1:])

    altered = cluster.run(
        "kafka-configs.sh",
        ["--alter", *default, "--add-config", "replica.alter.log.dirs.io.max.bytes.per.second=5000"],
    )
    assert cluster.ok(altered).strip() == "Completed updating default config for brokers in the cluster."
    shown = _described_configs(cluster, default)
    assert shown[0] == "Default configs for brokers in the cluster are:"
    assert [line.split()[0] for line in shown[1:]] == ["replica.alter.log.dirs.io.max.bytes.per.second=5000"]
    assert "DYNAMIC_DEFAULT_BROKER_CONFIG" in shown[1]
    # Broker 2 has nothing of its own: `--all` shows the cluster default as its source.
    every = _described_configs(cluster, ["--entity-type", "brokers", "--entity-name", "2", "--all"])
    moved = [
        line for line in every if line.strip().startswith("replica.alter.log.dirs.io.max.bytes.per.second=")
    ]
    assert moved and "DYNAMIC_DEFAULT_BROKER_CONFIG" in moved[0]

    for entity, keys in (
        (broker, "follower.replication.throttled.rate,leader.replication.throttled.rate"),
        (default, "replica.alter.log.dirs.io.max.bytes.per.second"),
    ):
        cluster.ok(cluster.run("kafka-configs.sh", ["--alter", *entity, "--delete-config", keys]))
    assert _described_configs(cluster, broker) == ["Dynamic configs for broker 1 are:"]
    assert _described_configs(cluster, default) == ["Default configs for brokers in the cluster are:"]


def test_configs_refuses_what_is_not_a_dynamic_broker_config(cluster: Cluster) -> None:
    broker = ["--entity-type", "brokers", "--entity-name", "1"]
    for config, words in (
        ("log.retention.hours=5", "Cannot update these configs dynamically: [log.retention.hours]"),
        ("leader.replication.throttled.rate=-5", "leader.replication.throttled.rate"),
        ("cordoned.log.dirs=/no/such/dir", "is not one of this broker's log dirs"),
    ):
        refused = cluster.run("kafka-configs.sh", ["--alter", *broker, "--add-config", config])
        assert refused.returncode != 0, refused.stdout
        assert words in refused.stdout + refused.stderr
    assert _described_configs(cluster, broker) == ["Dynamic configs for broker 1 are:"]


def test_configs_cordon_a_log_dir_reaches_the_controller_and_new_topics_avoid_it(cluster: Cluster) -> None:
    broker = ["--entity-type", "brokers", "--entity-name", "3"]
    dirs = cluster.kafka.cluster.log_dirs(3)
    cordoned = dirs[0]
    cluster.ok(
        cluster.run(
            "kafka-configs.sh", ["--alter", *broker, "--add-config", f"cordoned.log.dirs={cordoned['path']}"]
        )
    )
    try:
        wait_for(
            lambda: cluster.controller.broker(3)["cordonedLogDirs"] == [cordoned["directoryId"]],
            timeout=30,
            what="the controller records broker 3's cordoned dir",
        )
        topic = "tools-cordoned"
        _create(cluster, topic, partitions=6)
        for part in cluster.controller.describe_topic(topic)["partitions"]:
            assert part["directories"][part["replicas"].index(3)] != cordoned["directoryId"], part
        assert {d["directoryId"]: d["cordoned"] for d in cluster.kafka.cluster.log_dirs(3)} == {
            d["directoryId"]: d is cordoned for d in dirs
        }
        # Cordoning every dir takes the broker out of automatic placement (it keeps its replicas).
        cluster.ok(
            cluster.run("kafka-configs.sh", ["--alter", *broker, "--add-config", "cordoned.log.dirs=*"])
        )
        wait_for(
            lambda: not cluster.controller.broker(3)["acceptsNewReplicas"],
            timeout=30,
            what="broker 3 accepts no new replica",
        )
        refused = cluster.run(
            "kafka-topics.sh",
            ["--create", "--topic", "tools-cordoned-rf3", "--partitions", "1", "--replication-factor", "3"],
        )
        assert refused.returncode != 0
        assert "InvalidReplicationFactorException" in refused.stdout + refused.stderr
    finally:
        cluster.ok(
            cluster.run("kafka-configs.sh", ["--alter", *broker, "--delete-config", "cordoned.log.dirs"])
        )
        wait_for(
            lambda: cluster.controller.broker(3)["cordonedLogDirs"] == [],
            timeout=30,
            what="broker 3 uncordoned",
        )


def test_configs_set_the_throttled_replicas_of_a_topic(cluster: Cluster) -> None:
    topic = "tools-throttled"
    _create(cluster, topic)
    entity = ["--entity-type", "topics", "--entity-name", topic]
    throttles = "leader.replication.throttled.replicas=[0:1,0:2],follower.replication.throttled.replicas=*"
    cluster.ok(cluster.run("kafka-configs.sh", ["--alter", *entity, "--add-config", throttles]))
    assert cluster.controller.describe_topic(topic)["configs"] == {
        "leader.replication.throttled.replicas": "0:1,0:2",
        "follower.replication.throttled.replicas": "*",
    }
    shown = _described_configs(cluster, entity)
    assert sorted(line.split()[0] for line in shown[1:]) == [
        "follower.replication.throttled.replicas=*",
        "leader.replication.throttled.replicas=0:1,0:2",
    ]
    refused = cluster.run(
        "kafka-configs.sh", ["--alter", *entity, "--add-config", "leader.replication.throttled.replicas=x"]
    )
    assert refused.returncode != 0 and "[partitionId]:[brokerId]" in refused.stdout + refused.stderr
