"""Transactions with Apache Kafka 4.3.1's own Java clients and `kafka-transactions.sh`, on our
cluster and on a real Kafka side by side (issue 33): the same program, the same assertions.

One cluster of ours (three brokers) and one single-node Kafka for the module, both logged in with
SCRAM. `e2e/kafka/JavaTransactions.java` (kafka-clients' producer, consumer and Admin) commits and
aborts transactions, reads them read_committed and read_uncommitted, runs consume-transform-produce
with `sendOffsetsToTransaction` (the group's offset committed with the transaction, not before, not
by an aborted one) and fences a zombie producer: what it prints is the same on both.

`kafka-transactions.sh` against a transaction left open by a producer that never ends it (a
transaction timeout of 15 minutes): `list` and `describe` show it Ongoing, `describe-producers` its
first offset, and `abort
--start-offset` (WriteTxnMarkers from the Admin client to the leader, with the coordinator epoch
the partition last saw: -1 here) ends it: the LSO advances past it and read_committed readers skip
it. And against an orphan: a transactional batch written with raw requests, an hour old, that no
coordinator knows of (both clusters with `transaction.partition.verification.enable=false`, or a
leader would refuse it): `find-hanging` finds it, `abort` ends it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from e2e import kafka_tools
from e2e.kafka_tools import JavaAdmin, KafkaInstall, ScramUser
from e2e.wait import wait_for
from jbod_agent.config import BrokerConfig
from jbod_kafka import protocol, record_batch
from jbod_local.kafka_clients import client_properties
from tests.kafka_api.conftest import start_kafka_cluster
from tests.kafka_api.raw_client import RawConnection
from tests.kafka_tools.test_harness import install  # noqa: F401  the module's fixture: Kafka's jars or a skip

pytestmark = [pytest.mark.slow, pytest.mark.integration]

# Whether our brokers verify a transactional produce with the coordinator (KIP-890 part 1), which
# the orphan transaction below must get past, as on Kafka with the same key.
_VERIFYING = "transaction_partition_verification_enable" in {f.name for f in dataclasses.fields(BrokerConfig)}


@dataclasses.dataclass(frozen=True)
class Target:
    """A cluster as the clients see it: Kafka's tools and Java programs, and librdkafka."""

    name: str
    bootstrap: str
    command_config: Path
    librdkafka: dict[str, Any]
    install: KafkaInstall
    leader: Callable[[str, int], int]
    leader_address: Callable[[str, int], str]
    password: str
    log_tail: Callable[[], str]

    def run(self, script: str, args: list[str]) -> subprocess.CompletedProcess[str]:
        return kafka_tools.run_tool(
            script, args, bootstrap=self.bootstrap, command_config=self.command_config, install=self.install
        )

    def ok(self, proc: subprocess.CompletedProcess[str]) -> str:
        assert proc.returncode == 0, (
            f"{self.name}: exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}\n{self.log_tail()}"
        )
        return proc.stdout

    def java(self) -> JavaAdmin:
        return JavaAdmin(self.bootstrap, self.command_config, self.install)


def _tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


@pytest.fixture(scope="module")
def targets(install: KafkaInstall, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Target]]:  # noqa: F811
    base = tmp_path_factory.mktemp("java-txn")
    with contextlib.ExitStack() as stack:
        # A transactional batch no coordinator knows of is written with verification off (on both).
        unverified = {"transaction_partition_verification_enable": "false"} if _VERIFYING else {}
        ours = start_kafka_cluster(stack, base / "ours", brokers=3, **unverified)
        ours_properties = base / "ours.properties"
        ours_properties.write_text(client_properties(ours.admin_password))

        def our_leader(topic: str, partition: int) -> int:
            partitions = ours.cluster.admin.describe_topic(topic)["partitions"]
            leader: int = next(p["leader"] for p in partitions if p["partitionIndex"] == partition)
            return leader

        def our_leader_address(topic: str, partition: int) -> str:
            address: str = ours.cluster.brokers[our_leader(topic, partition)].kafka["SASL_PLAINTEXT"]
            return address

        def our_logs() -> str:
            return "\n".join(
                f"--- b{n} agent.log\n{_tail(b.log_path, 15)}"
                for n, b in sorted(ours.cluster.brokers.items())
            )

        scram = ScramUser()
        kafka = stack.enter_context(
            kafka_tools.KafkaCluster(
                install, scram=scram, properties={"transaction.partition.verification.enable": "false"}
            )
        )
        kafka_properties = base / "kafka.properties"
        kafka_properties.write_text("".join(f"{k}={v}\n" for k, v in scram.client_config().items()))
        kafka_librdkafka = {
            "bootstrap.servers": kafka.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": scram.mechanism,
            "sasl.username": scram.name,
            "sasl.password": scram.password,
        }
        yield [
            Target(
                "ours",
                ours.bootstrap,
                ours_properties,
                ours.client_config(),
                install,
                our_leader,
                our_leader_address,
                ours.admin_password,
                our_logs,
            ),
            Target(
                "kafka",
                kafka.bootstrap,
                kafka_properties,
                kafka_librdkafka,
                install,
                lambda _topic, _partition: kafka.node_id,
                lambda _topic, _partition: kafka.bootstrap,
                scram.password,
                lambda: _tail(kafka.server_log),
            ),
        ]


def test_java_clients_commit_abort_send_offsets_and_fence_as_on_kafka(targets: list[Target]) -> None:
    seen = {}
    for target in targets:
        proc = target.java().run("JavaTransactions", [f"j-{uuid.uuid4().hex[:8]}"], timeout=300)
        seen[target.name] = json.loads(target.ok(proc))
    ours, kafka = seen["ours"], seen["kafka"]
    # Partition by partition (c0, c3 | c1, a1 | c2, a2 ... as the program sends them round robin).
    assert kafka["read_committed"] == ["c0", "c3", "c1", "c2"]
    assert kafka["read_uncommitted"] == ["c0", "a0", "c3", "c1", "a1", "c2", "a2"]
    # The group's offset: none before the first commit, 5 after; the aborted round leaves it at 5.
    assert kafka["group_offset_before_and_after_each_end"] == [None, 5, 5, 5]
    assert kafka["transformed"] == ["X0", "X1", "X2", "X3", "X4"]
    assert kafka["transformed_uncommitted"] == ["X0", "X1", "X2", "X3", "X4", "X5", "X6"]
    assert kafka["zombie_fenced_by"] in ("ProducerFencedException", "InvalidProducerEpochException")
    assert kafka["zombie_topic_committed"] == ["successor-0"]
    assert ours == kafka, json.dumps(seen)


def _columns(out: str) -> list[dict[str, str]]:
    """A table `kafka-transactions.sh` prints: one dict per row, by header (columns split on blanks)."""
    header, *rows = (line.split() for line in out.strip().splitlines())
    return [dict(zip(header, row, strict=False)) for row in rows]


def _last_stable_offset(target: Target, topic: str) -> int:
    admin = AdminClient(target.librdkafka)
    partition = TopicPartition(topic, 0)
    answer = admin.list_offsets(
        {partition: OffsetSpec.latest()}, isolation_level=IsolationLevel.READ_COMMITTED
    )
    offset: int = answer[partition].result(30).offset
    return offset


def _read_committed(target: Target, topic: str, end: int) -> list[str]:
    consumer = Consumer(
        {
            **target.librdkafka,
            "group.id": f"r-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[str] = []

    def read() -> bool:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            values.append(message.value().decode())
        [position] = consumer.position([TopicPartition(topic, 0)])
        return position.offset >= end

    wait_for(read, timeout=60, what=f"{target.name}: {topic} read up to {end}")
    consumer.close()
    return values


def _open_transaction(target: Target) -> dict[str, Any]:
    """Three records committed to partition 0 of a new topic, then two in a transaction that its
    producer never ends; what `kafka-transactions.sh` says of it, and after `abort`."""
    topic, transactional_id = f"h-{uuid.uuid4().hex[:8]}", f"hang-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(target.librdkafka)
    admin.create_topics([NewTopic(topic, 1)])[topic].result(60)
    plain = Producer(target.librdkafka)
    for i in range(3):
        plain.produce(topic, f"committed-{i}".encode(), partition=0)
    assert plain.flush(60) == 0
    producer = Producer(
        {**target.librdkafka, "transactional.id": transactional_id, "transaction.timeout.ms": 900_000}
    )
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(2):
        producer.produce(topic, f"open-{i}".encode(), partition=0)
    assert producer.flush(60) == 0
    found: dict[str, Any] = {"lso_open": _last_stable_offset(target, topic)}

    listed = _columns(target.ok(target.run("kafka-transactions.sh", ["list"])))
    [row] = [r for r in listed if r["TransactionalId"] == transactional_id]
    found["list"] = (row["TransactionState"], row["ProducerId"] != "-1")
    described = target.ok(
        target.run("kafka-transactions.sh", ["describe", "--transactional-id", transactional_id])
    )
    header, values = (line.split() for line in described.strip().splitlines()[:2])
    description = dict(zip(header[:5], values[:5], strict=True))
    found["describe"] = (
        description["TransactionState"],
        description["ProducerEpoch"],
        f"{topic}-0" in described,
    )
    producers_args = ["describe-producers", "--topic", topic, "--partition", "0"]
    [open_producer] = [
        p
        for p in _columns(target.ok(target.run("kafka-transactions.sh", producers_args)))
        if p["ProducerId"] == row["ProducerId"]
    ]
    found["describe-producers"] = (
        open_producer["CurrentTransactionStartOffset"],
        open_producer["LatestCoordinatorEpoch"],
    )
    abort = target.run(
        "kafka-transactions.sh", ["abort", "--topic", topic, "--partition", "0", "--start-offset", "3"]
    )
    found["abort"] = abort.returncode
    target.ok(abort)
    found["lso_after_abort"] = wait_for(
        lambda: (lso := _last_stable_offset(target, topic)) > 3 and lso,
        timeout=30,
        what=f"{target.name}: the LSO past the aborted transaction",
    )
    found["read_committed"] = _read_committed(target, topic, found["lso_after_abort"])
    after = _columns(target.ok(target.run("kafka-transactions.sh", producers_args)))
    found["describe-producers-after"] = [
        p["CurrentTransactionStartOffset"] for p in after if p["ProducerId"] == row["ProducerId"]
    ]
    producer.abort_transaction(60)
    return found


def _orphan_transaction(target: Target) -> dict[str, Any]:
    """A transactional batch written with raw requests (Produce v9, the producer id and epoch of
    an initialized transactional id that never adds the partition), timestamped an hour ago: an
    open transaction no coordinator knows of. What `find-hanging` and `abort` do with it."""
    topic, transactional_id = f"o-{uuid.uuid4().hex[:8]}", f"orphan-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(target.librdkafka)
    admin.create_topics([NewTopic(topic, 1)])[topic].result(60)
    producer = Producer({**target.librdkafka, "transactional.id": transactional_id})
    producer.init_transactions(60)
    described = target.ok(
        target.run("kafka-transactions.sh", ["describe", "--transactional-id", transactional_id])
    )
    header, values = (line.split() for line in described.strip().splitlines()[:2])
    ids = dict(zip(header[:5], values[:5], strict=True))
    pid, epoch = int(ids["ProducerId"]), int(ids["ProducerEpoch"])
    an_hour_ago = int(time.time() * 1000) - 3_600_000
    batch = record_batch.encode_batch(
        0, -1, an_hour_ago, [(None, b"orphan-0"), (None, b"orphan-1")],
        producer_id=pid, producer_epoch=epoch, transactional=True,
    )  # fmt: skip
    with RawConnection(target.leader_address(topic, 0)) as conn:
        assert int(conn.authenticate_scram("admin", target.password).error_code) == 0
        answer = conn.request(
            0,
            9,
            protocol.build(
                protocol.request_type(0, 9),
                transactional_id=transactional_id,
                acks=-1,
                timeout=30000,
                topic_data=[{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
            ),
        )
    found: dict[str, Any] = {"produced": int(answer.responses[0].partition_responses[0].error_code)}
    found["lso_open"] = _last_stable_offset(target, topic)
    leader = target.leader(topic, 0)
    hanging = target.run("kafka-transactions.sh", ["find-hanging", "--broker-id", str(leader)])
    found["find-hanging"] = (
        hanging.returncode,
        [
            (row["Topic"] == topic, row["Partition"], row["ProducerId"] == str(pid), row["StartOffset"])
            for row in _columns(hanging.stdout)
        ],
    )
    abort = ["abort", "--topic", topic, "--partition", "0", "--start-offset", "0"]
    found["abort"] = target.run("kafka-transactions.sh", abort).returncode
    found["lso_after_abort"] = wait_for(
        lambda: (lso := _last_stable_offset(target, topic)) > 0 and lso,
        timeout=30,
        what=f"{target.name}: the LSO past the orphan transaction",
    )
    plain = Producer(target.librdkafka)
    plain.produce(topic, b"after", partition=0)
    assert plain.flush(60) == 0
    found["read_committed"] = _read_committed(target, topic, found["lso_after_abort"] + 1)
    after = target.run("kafka-transactions.sh", ["find-hanging", "--broker-id", str(leader)])
    found["find-hanging-after"] = (after.returncode, len(_columns(after.stdout)))
    producer.flush(0)
    return found


def test_kafka_transactions_sh_finds_and_aborts_an_orphan_transaction_as_on_kafka(
    targets: list[Target],
) -> None:
    seen = {target.name: _orphan_transaction(target) for target in targets}
    kafka = seen["kafka"]
    assert kafka["produced"] == 0
    assert kafka["lso_open"] == 0
    assert kafka["find-hanging"] == (0, [(True, "0", True, "0")])
    assert kafka["abort"] == 0
    assert kafka["lso_after_abort"] == 3  # the two records and the abort marker
    assert kafka["read_committed"] == ["after"]
    assert kafka["find-hanging-after"] == (0, 0)
    assert seen["ours"] == kafka, seen


def test_kafka_transactions_sh_lists_describes_and_aborts_an_open_transaction_as_on_kafka(
    targets: list[Target],
) -> None:
    seen = {target.name: _open_transaction(target) for target in targets}
    kafka = seen["kafka"]
    assert kafka["lso_open"] == 3
    assert kafka["list"] == ("Ongoing", True)
    assert kafka["describe"] == ("Ongoing", "0", True)
    assert kafka["describe-producers"] == ("3", "-1")
    assert kafka["abort"] == 0
    assert kafka["read_committed"] == ["committed-0", "committed-1", "committed-2"]
    assert seen["ours"] == kafka, seen
