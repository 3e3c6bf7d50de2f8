"""Kafka Connect in distributed mode (Apache Kafka 4.3.1's `connect-runtime` and `connect-file`
from Maven Central) on a cluster of ours, logged in with SCRAM (issue 32).

The worker creates its config, offset and status topics compacted and refuses to start unless
DescribeConfigs reports `cleanup.policy=compact` on them; a FileStreamSource copies a file of
lines into a topic and a FileStreamSink writes them to another file: every line arrives once.
The worker is stopped, more lines are written, a broker is restarted, and a new worker finds the
connectors in the config topic (nobody posts them again) and resumes from the committed offsets:
the new lines arrive, none twice.

With `exactly.once.source.support=enabled` (KIP-618, issue 33) the FileStreamSource's task writes
through a transactional producer (`kafka-transactions.sh list` shows its id), its lines and source
offsets in one transaction each: read_committed, every line arrives exactly once, also when the
worker is killed with SIGKILL while it copies and a new one resumes.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from e2e.kafka_tools import KafkaInstall, run_tool
from e2e.wait import wait_for
from jbod_local.kafka_clients import client_properties
from jbod_runtime import listen_ports
from tests.kafka_api.conftest import KafkaCluster, start_kafka_cluster
from tests.kafka_tools.test_harness import install  # noqa: F401  the module's fixture: Kafka's jars or a skip

pytestmark = [pytest.mark.slow, pytest.mark.integration]

FIRST, MORE = 200, 100
KILLED = 2000  # lines the exactly-once worker is copying when it is killed
# The worker's internal topics, by the prefix of their worker keys (`config.storage.topic`, ...).
INTERNAL = {"config": "connect-configs", "offset": "connect-offsets", "status": "connect-status"}


class ConnectWorker:
    """One Kafka Connect worker in distributed mode, as `connect-distributed.sh` starts it."""

    def __init__(
        self,
        kafka_install: KafkaInstall,
        kafka: KafkaCluster,
        work: Path,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        config = kafka.client_config()
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{config["sasl.username"]}" password="{config["sasl.password"]}";'
        )
        security = {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": jaas,
        }
        self.port = listen_ports.free_listen_port()
        properties = {
            "bootstrap.servers": config["bootstrap.servers"],
            "group.id": "connect-cluster",
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            **{f"{kind}.storage.topic": name for kind, name in INTERNAL.items()},
            **{f"{kind}.storage.replication.factor": "3" for kind in INTERNAL},
            "listeners": f"http://127.0.0.1:{self.port}",
            "offset.flush.interval.ms": "1000",
            "plugin.discovery": "only_scan",
            **security,
            **{
                f"{client}.{k}": v
                for client in ("producer", "consumer", "admin")
                for k, v in security.items()
            },
            **(settings or {}),
        }
        work.mkdir(parents=True, exist_ok=True)
        (work / "logs").mkdir(exist_ok=True)
        self.config_file = work / "worker.properties"
        self.config_file.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        self.install, self.work = kafka_install, work
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ConnectWorker:
        command = self.install.java_command(
            "connect-distributed.sh", [str(self.config_file)], log_dir=self.work / "logs"
        )
        with open(self.work / "worker.out", "ab") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        wait_for(self._serving, timeout=120, what=lambda: f"the Connect worker's REST API\n{self.log_tail()}")
        return self

    def _serving(self) -> bool:
        assert self.process is not None and self.process.poll() is None, self.log_tail()
        try:
            self.get("/connectors")
        except (urllib.error.URLError, ConnectionError):
            return False
        return True

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # a graceful stop commits the offsets
            self.process.wait(90)

    def kill(self) -> None:
        """SIGKILL: nothing is committed or closed (an open transaction stays open)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(30)

    def log_tail(self) -> str:
        path = self.work / "worker.out"
        return "\n".join(path.read_text(errors="replace").splitlines()[-30:]) if path.exists() else ""

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=10) as answer:
            return json.loads(answer.read())

    def post(self, path: str, body: dict[str, Any]) -> Any:
        request = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            return json.loads(answer.read())

    def running(self, connectors: tuple[str, ...] = ("sink", "source")) -> bool:
        statuses = self.get("/connectors?expand=status")
        return sorted(statuses) == sorted(connectors) and all(
            s["status"]["connector"]["state"] == "RUNNING"
            and [t["state"] for t in s["status"]["tasks"]] == ["RUNNING"]
            for s in statuses.values()
        )


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaCluster]:
    with contextlib.ExitStack() as stack:
        yield start_kafka_cluster(stack, tmp_path / "cluster", brokers=3)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_distributed_worker_copies_a_file_through_a_topic_and_resumes_after_restarts(
    install: KafkaInstall,  # noqa: F811
    kafka: KafkaCluster,
    tmp_path: Path,
) -> None:
    source, sink = tmp_path / "source.txt", tmp_path / "sink.txt"
    source.write_text("".join(f"line {i}\n" for i in range(FIRST)))
    worker = ConnectWorker(install, kafka, tmp_path / "worker").start()
    try:
        file_connector = "org.apache.kafka.connect.file.FileStream"
        worker.post(
            "/connectors",
            {
                "name": "source",
                "config": {
                    "connector.class": f"{file_connector}SourceConnector",
                    "file": str(source),
                    "topic": "lines",
                },
            },
        )
        worker.post(
            "/connectors",
            {
                "name": "sink",
                "config": {
                    "connector.class": f"{file_connector}SinkConnector",
                    "file": str(sink),
                    "topics": "lines",
                },
            },
        )
        wait_for(
            lambda: len(_lines(sink)) >= FIRST,
            timeout=90,
            what=lambda: f"{FIRST} lines in the sink\n{worker.log_tail()}",
        )
        assert _lines(sink) == [f"line {i}" for i in range(FIRST)]
        assert worker.running()
    finally:
        worker.stop()

    # The worker's own topics are compacted, as it checked before it started.
    admin = AdminClient(kafka.client_config())
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in INTERNAL.values()]
    for resource, future in admin.describe_configs(resources, request_timeout=30).items():
        assert future.result(30)["cleanup.policy"].value == "compact", resource

    with source.open("a") as more:
        more.write("".join(f"line {i}\n" for i in range(FIRST, FIRST + MORE)))
    broker = kafka.cluster.brokers[2]
    broker.stop()
    broker.start()
    wait_for(lambda: kafka.cluster.all_unfenced(3), timeout=60, what="broker 2 back")

    worker = ConnectWorker(install, kafka, tmp_path / "worker").start()
    try:
        wait_for(
            worker.running,
            timeout=90,
            what=lambda: f"the connectors from the config topic\n{worker.log_tail()}",
        )
        wait_for(
            lambda: len(_lines(sink)) >= FIRST + MORE,
            timeout=90,
            what=lambda: f"{FIRST + MORE} lines in the sink\n{worker.log_tail()}",
        )
        assert _lines(sink) == [f"line {i}" for i in range(FIRST + MORE)]
    finally:
        worker.stop()


def _read_committed(kafka: KafkaCluster, topic: str, count: int, what: str) -> list[str]:
    """The values of partition 0 of `topic` a read_committed consumer reads, once it has `count`
    and has caught up with the last stable offset (so a duplicate would be among them)."""
    consumer = Consumer(
        kafka.client_config(
            **{
                "group.id": f"eos-check-{count}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[str] = []

    def caught_up() -> bool:
        for message in consumer.consume(500, 0.5):
            if message.error() is None:
                values.append(message.value().decode())
        if len(values) < count:
            return False
        _low, last_stable = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
        [position] = consumer.position([TopicPartition(topic, 0)])
        return bool(position.offset >= last_stable)

    try:
        wait_for(caught_up, timeout=120, what=what)
    finally:
        consumer.close()
    return values


def test_exactly_once_source_support_writes_each_line_once_in_transactions_across_a_kill(
    install: KafkaInstall,  # noqa: F811
    kafka: KafkaCluster,
    tmp_path: Path,
) -> None:
    """`exactly.once.source.support=enabled` (KIP-618): the worker's leader fences the task's
    earlier producers (Admin.fenceProducers), the task's transactional producer writes the lines
    and their source offsets (to the offsets topic) in one transaction per poll, and the worker
    reads offsets read_committed. A read_committed consumer sees every line exactly once. The
    worker is then killed with SIGKILL as soon as it copies more lines, and a new worker resumes
    from the committed offsets (an open transaction of the killed one aborted): every line
    arrives, none twice. (Polls are left at their default size: FileStreamSource with a small
    `batch.size` leaves the last lines of its read buffer until the file grows, on any broker.)"""
    source = tmp_path / "source.txt"
    source.write_text("".join(f"line {i}\n" for i in range(FIRST)))
    settings = {"exactly.once.source.support": "enabled"}
    worker = ConnectWorker(install, kafka, tmp_path / "worker", settings).start()
    try:
        worker.post(
            "/connectors",
            {
                "name": "source",
                "config": {
                    "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
                    "file": str(source),
                    "topic": "eos-lines",
                    "exactly.once.support": "required",
                    "transaction.boundary": "poll",
                },
            },
        )
        first = _read_committed(kafka, "eos-lines", FIRST, f"{FIRST} lines\n{worker.log_tail()}")
        assert first == [f"line {i}" for i in range(FIRST)]
        assert worker.running(("source",))
        # The task's producer is transactional, its id `<group.id>-<connector>-<task>` (KIP-618).
        admin_properties = tmp_path / "admin.properties"
        admin_properties.write_text(client_properties(kafka.admin_password))
        listed = run_tool(
            "kafka-transactions.sh",
            ["list"],
            bootstrap=kafka.bootstrap,
            command_config=admin_properties,
            install=install,
        )
        assert listed.returncode == 0, listed.stderr
        [task] = [line.split() for line in listed.stdout.splitlines() if "connect-cluster-source-0" in line]
        assert task[-1] in ("Ongoing", "PrepareCommit", "CompleteCommit"), listed.stdout

        # Killed while it copies: some of these lines may be written, some in an open transaction.
        probe = Consumer(kafka.client_config(**{"group.id": "eos-probe"}))
        lines = TopicPartition("eos-lines", 0)
        _low, before = probe.get_watermark_offsets(lines, timeout=10, cached=False)
        with source.open("a") as more:
            more.write("".join(f"line {i}\n" for i in range(FIRST, FIRST + KILLED)))
        wait_for(
            lambda: probe.get_watermark_offsets(lines, timeout=10, cached=False)[1] > before,
            timeout=90,
            what=lambda: f"more lines copied\n{worker.log_tail()}",
        )
        probe.close()
        worker.kill()
    finally:
        worker.stop()

    total = FIRST + KILLED + MORE
    with source.open("a") as more:
        more.write("".join(f"line {i}\n" for i in range(FIRST + KILLED, total)))
    worker = ConnectWorker(install, kafka, tmp_path / "worker", settings).start()
    try:
        wait_for(lambda: worker.running(("source",)), timeout=90, what=worker.log_tail)
        every = _read_committed(kafka, "eos-lines", total, f"{total} lines\n{worker.log_tail()}")
        assert every == [f"line {i}" for i in range(total)]
    finally:
        worker.stop()
