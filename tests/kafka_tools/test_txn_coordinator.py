"""The transaction coordinator on our brokers (issue 33, increment 2), with librdkafka's
transactional producer, raw requests and Apache Kafka 4.3.1's `kafka-transactions.sh`.

One cluster of three brokers. A transactional id is found (FindCoordinator key type 1: the leader
of its partition of `__transaction_state`, created on first use), initialized by librdkafka; a
second producer with the same id fences the first (PRODUCER_FENCED: a fatal error for it). The
second producer's transaction is driven with raw requests (the partition leaders do not take
transactional batches in this increment): partitions and a group's offsets added, described and
listed by `kafka-transactions.sh` as Ongoing, then EndTxn commit answered once PrepareCommit is
written. The coordinator's broker is then killed with SIGKILL: the new leader of the partition
loads `__transaction_state` and describes the same transaction.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from e2e.kafka_tools import KafkaInstall
from e2e.wait import wait_for
from jbod_core import group_records, txn_records
from jbod_kafka import protocol
from jbod_local.kafka_clients import client_properties
from tests.kafka_api.conftest import start_kafka_cluster
from tests.kafka_api.raw_client import RawConnection
from tests.kafka_api.test_librdkafka import new_topic
from tests.kafka_tools.test_harness import install  # noqa: F401  the module's fixture: Kafka's jars or a skip
from tests.kafka_tools.test_our_brokers import Cluster

pytestmark = [pytest.mark.slow, pytest.mark.integration]

LISTENER = "SASL_PLAINTEXT"
INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN, DESCRIBE_TXNS = 22, 24, 25, 26, 65


@pytest.fixture(scope="module")
def cluster(install: KafkaInstall, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:  # noqa: F811
    base = tmp_path_factory.mktemp("txn")
    with contextlib.ExitStack() as stack:
        # Timed-out transactions are looked for every 200 ms (Kafka's default: 10 s).
        kafka = start_kafka_cluster(
            stack, base, brokers=3, transaction_abort_timed_out_transaction_cleanup_interval_ms="200"
        )
        admin_properties = base / "admin.properties"
        admin_properties.write_text(client_properties(kafka.admin_password))
        yield Cluster(kafka, install, admin_properties)


def _ask(cluster: Cluster, node_id: int, api_key: int, version: int, **fields: Any) -> Any:
    address = cluster.kafka.cluster.brokers[node_id].kafka[LISTENER]
    with RawConnection(address) as conn:
        assert int(conn.authenticate("admin", cluster.kafka.admin_password).error_code) == 0
        return conn.request(
            api_key, version, protocol.build(protocol.request_type(api_key, version), **fields)
        )


def _coordinator(cluster: Cluster, transactional_id: str, *, avoid: int | None = None) -> int:
    """The node FindCoordinator (v4, key type 1) names, asked of a live broker."""
    asked = next(n for n in sorted(cluster.kafka.cluster.brokers) if n != avoid)

    def found() -> int | None:
        [answer] = _ask(cluster, asked, 10, 4, key_type=1, coordinator_keys=[transactional_id]).coordinators
        node = int(answer.node_id)
        return node if int(answer.error_code) == 0 and node != avoid else None

    node: int = wait_for(found, timeout=60, what=f"a coordinator for {transactional_id}")
    return node


def _described(cluster: Cluster, node_id: int, transactional_id: str) -> Any:
    [state] = _ask(
        cluster, node_id, DESCRIBE_TXNS, 0, transactional_ids=[transactional_id]
    ).transaction_states
    return state


def _tool_described(cluster: Cluster, transactional_id: str) -> dict[str, str]:
    """`kafka-transactions.sh describe`: its first columns (up to TransactionState), by header."""
    out = cluster.ok(
        cluster.run("kafka-transactions.sh", ["describe", "--transactional-id", transactional_id])
    )
    header, values = (line.split() for line in out.strip().splitlines()[:2])
    return dict(zip(header[:5], values[:5], strict=True))


def _leader_of(cluster: Cluster, transactional_id: str) -> int:
    index = txn_records.partition_for(transactional_id, txn_records.DEFAULT_PARTITIONS)
    partitions = cluster.controller.describe_topic(txn_records.TRANSACTION_STATE_TOPIC)["partitions"]
    [partition] = [p for p in partitions if p["partitionIndex"] == index]
    leader: int = partition["leader"]
    return leader


def _add_partitions(
    cluster: Cluster, node: int, transactional_id: str, pid: int, epoch: int, topic: str
) -> list[int]:
    """AddPartitionsToTxn v3 of partitions 0 and 1 of `topic`: the error of each."""
    added = _ask(
        cluster,
        node,
        ADD_PARTITIONS,
        3,
        v3_and_below_transactional_id=transactional_id,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[{"name": topic, "partitions": [0, 1]}],
    )
    return [
        int(p.partition_error_code)
        for r in added.results_by_topic_v3_and_below
        for p in r.results_by_partition
    ]


def test_kafka_acls_on_transactional_ids_decide_who_may_use_them(cluster: Cluster, tmp_path: Path) -> None:
    """`kafka-acls.sh --transactional-id` grants WRITE on a prefix: the user initializes a
    transactional producer there and is refused (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, fatal)
    elsewhere; `kafka-transactions.sh list` shows it only the ids it may DESCRIBE."""
    kafka = cluster.kafka
    scram = "SCRAM-SHA-512=[iterations=8192,password=dora-secret]"
    cluster.ok(
        cluster.run(
            "kafka-configs.sh",
            f"--alter --add-config {scram} --entity-type users --entity-name dora".split(),
        )
    )
    grant = "--add --allow-principal User:dora --operation Write --transactional-id dora-"
    granted = cluster.ok(cluster.run("kafka-acls.sh", f"{grant} --resource-pattern-type prefixed".split()))
    assert "ResourcePattern(resourceType=TRANSACTIONAL_ID, name=dora-, patternType=PREFIXED)" in granted
    dora = {"sasl.username": "dora", "sasl.password": "dora-secret"}
    allowed = Producer(kafka.client_config(**dora, **{"transactional.id": "dora-1"}))
    allowed.init_transactions(60)
    admins = Producer(kafka.client_config(**{"transactional.id": "admins-1"}))
    admins.init_transactions(60)
    refused = Producer(kafka.client_config(**dora, **{"transactional.id": "admins-1"}))
    with pytest.raises(KafkaException) as denied:
        refused.init_transactions(30)
    assert denied.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, denied.value
    doras = tmp_path / "dora.properties"
    doras.write_text(client_properties("dora-secret", user="dora"))
    listed = cluster.ok(cluster.run("kafka-transactions.sh", ["list"], config=doras))
    assert "dora-1" in listed and "admins-1" not in listed, listed
    assert "admins-1" in cluster.ok(cluster.run("kafka-transactions.sh", ["list"]))
    for producer in (allowed, admins):
        producer.flush(0)


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(cluster: Cluster) -> None:
    """InitProducerId (v4) with `transaction.timeout.ms` 1000, partitions added: the coordinator
    aborts the transaction with the epoch bumped; the producer's EndTxn is then PRODUCER_FENCED."""
    topic = new_topic(cluster.kafka, partitions=2)
    transactional_id = f"slow-{uuid.uuid4().hex[:6]}"
    node = _coordinator(cluster, transactional_id)

    def initialized() -> tuple[int, int] | None:
        answer = _ask(
            cluster, node, INIT_PRODUCER_ID, 4, transactional_id=transactional_id, transaction_timeout=1000,
            producer_id=-1, producer_epoch=-1,
        )  # fmt: skip
        return (int(answer.producer_id), int(answer.producer_epoch)) if int(answer.error_code) == 0 else None

    pid, epoch = wait_for(initialized, timeout=30, what="InitProducerId answered")
    assert epoch == 0
    assert _add_partitions(cluster, node, transactional_id, pid, epoch, topic) == [0, 0]

    def aborted() -> Any:
        state = _described(cluster, node, transactional_id)
        return state if state.transaction_state in ("PrepareAbort", "CompleteAbort") else None

    state = wait_for(aborted, timeout=30, what="the coordinator to abort the timed-out transaction")
    assert (int(state.producer_id), int(state.producer_epoch)) == (pid, 1)
    ids = {"transactional_id": transactional_id, "producer_id": pid, "producer_epoch": epoch}
    assert int(_ask(cluster, node, END_TXN, 4, **ids, committed=True).error_code) == 90


@pytest.mark.skipif(
    27 not in protocol.APIS, reason="the leaders take markers (WriteTxnMarkers) with txn-partition's part"
)
def test_a_read_committed_consumer_sees_exactly_the_committed_transactions(cluster: Cluster) -> None:
    """librdkafka's transactional producer commits, aborts and commits across three partitions; a
    read_committed consumer reads exactly the committed records, and the coordinator completed
    each transaction (CompleteCommit last). An AddPartitionsToTxn right behind an EndTxn waits
    for that transaction's markers instead of being answered CONCURRENT_TRANSACTIONS."""
    kafka = cluster.kafka
    topic = new_topic(kafka, partitions=3)
    transactional_id = f"e2e-{uuid.uuid4().hex[:6]}"
    producer = Producer(kafka.client_config(**{"transactional.id": transactional_id}))
    producer.init_transactions(60)
    committed = []
    for n, commit in enumerate((True, False, True)):
        producer.begin_transaction()
        values = [f"{n}-{i}" for i in range(6)]
        for i, value in enumerate(values):
            producer.produce(topic, value.encode(), partition=i % 3)
        if commit:
            producer.commit_transaction(60)
            committed += values
        else:
            producer.flush(30)
            producer.abort_transaction(60)
    consumer = Consumer(
        kafka.client_config(
            **{
                "group.id": f"g-{transactional_id}",
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
    )
    consumer.assign([TopicPartition(topic, p) for p in range(3)])
    seen: list[str] = []

    def read_all() -> bool:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            seen.append(message.value().decode())
        return len(seen) >= len(committed)

    wait_for(read_all, timeout=60, what="the committed records")
    assert sorted(seen) == sorted(committed)
    consumer.close()
    node = _coordinator(cluster, transactional_id)
    wait_for(
        lambda: _described(cluster, node, transactional_id).transaction_state == "CompleteCommit",
        timeout=30,
        what="the last transaction completed",
    )

    # The next transaction's AddPartitionsToTxn pipelined right behind an EndTxn, so it arrives
    # while the coordinator writes that transaction's markers: it is decided once they and
    # CompleteCommit are written (NONE), not answered CONCURRENT_TRANSACTIONS at once.
    described = _described(cluster, node, transactional_id)
    pid, epoch = int(described.producer_id), int(described.producer_epoch)
    assert _add_partitions(cluster, node, transactional_id, pid, epoch, topic) == [0, 0]
    end = protocol.build(
        protocol.request_type(END_TXN, 4),
        transactional_id=transactional_id, producer_id=pid, producer_epoch=epoch, committed=True,
    )  # fmt: skip
    add = protocol.build(
        protocol.request_type(ADD_PARTITIONS, 3),
        v3_and_below_transactional_id=transactional_id,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[{"name": topic, "partitions": [2]}],
    )
    with RawConnection(kafka.cluster.brokers[node].kafka[LISTENER]) as conn:
        assert int(conn.authenticate("admin", kafka.admin_password).error_code) == 0
        end_id, add_id = conn.send(END_TXN, 4, end), conn.send(ADD_PARTITIONS, 3, add)
        assert int(conn.receive(end_id, END_TXN, 4, end).error_code) == 0
        added = conn.receive(add_id, ADD_PARTITIONS, 3, add)
    assert [
        int(p.partition_error_code)
        for r in added.results_by_topic_v3_and_below
        for p in r.results_by_partition
    ] == [0]
    ongoing = _described(cluster, node, transactional_id)
    assert ongoing.transaction_state == "Ongoing"
    assert {(t.topic, int(p)) for t in ongoing.topics for p in t.partitions} == {(topic, 2)}


def test_a_transaction_is_coordinated_fenced_described_and_survives_its_coordinator(
    cluster: Cluster, tmp_path: Path
) -> None:
    kafka = cluster.kafka
    topic = new_topic(kafka, partitions=3)
    transactional_id = f"txn-{uuid.uuid4().hex[:6]}"
    config = kafka.client_config(**{"transactional.id": transactional_id, "transaction.timeout.ms": 60_000})

    zombie = Producer(config)
    zombie.init_transactions(60)
    node = _coordinator(cluster, transactional_id)
    assert node == _leader_of(cluster, transactional_id)
    topic_configs = cluster.controller.describe_topic(txn_records.TRANSACTION_STATE_TOPIC)
    assert len(topic_configs["partitions"]) == txn_records.DEFAULT_PARTITIONS
    first = _tool_described(cluster, transactional_id)
    assert (first["CoordinatorId"], first["TransactionState"], first["ProducerEpoch"]) == (
        str(node),
        "Empty",
        "0",
    )

    # The same transactional id again: the epoch is bumped, the first producer is a zombie.
    producer = Producer(config)
    producer.init_transactions(60)
    second = _tool_described(cluster, transactional_id)
    assert (second["TransactionState"], second["ProducerId"], second["ProducerEpoch"]) == (
        "Empty",
        first["ProducerId"],
        "1",
    )
    zombie.begin_transaction()
    zombie.produce(topic, b"late", partition=0)
    with pytest.raises(KafkaException) as fenced:
        zombie.commit_transaction(30)
    assert fenced.value.args[0].fatal(), fenced.value
    assert "fenced" in str(fenced.value).lower()

    # The live producer's transaction, driven with raw requests.
    pid, epoch = int(second["ProducerId"]), 1
    ids = {"transactional_id": transactional_id, "producer_id": pid, "producer_epoch": epoch}
    assert _add_partitions(cluster, node, transactional_id, pid, epoch, topic) == [0, 0]
    # A stale epoch changes nothing (PRODUCER_FENCED), another broker is NOT_COORDINATOR.
    stale = _ask(cluster, node, ADD_OFFSETS, 4, **{**ids, "producer_epoch": 0}, group_id="g")
    assert int(stale.error_code) == 90
    other = next(n for n in kafka.cluster.brokers if n != node)
    assert int(_ask(cluster, other, ADD_OFFSETS, 4, **ids, group_id="g").error_code) == 16
    assert int(_ask(cluster, node, ADD_OFFSETS, 4, **ids, group_id="g").error_code) == 0
    offsets = (
        group_records.OFFSETS_TOPIC,
        group_records.partition_for("g", group_records.DEFAULT_PARTITIONS),
    )

    ongoing = _described(cluster, node, transactional_id)
    assert ongoing.transaction_state == "Ongoing"
    assert {(t.topic, int(p)) for t in ongoing.topics for p in t.partitions} == {
        (topic, 0),
        (topic, 1),
        offsets,
    }
    # A partition leader's verification (v4, verify only, KIP-890 part 1): in it, or not.
    verified = _ask(
        cluster,
        node,
        ADD_PARTITIONS,
        4,
        transactions=[{**ids, "verify_only": True, "topics": [{"name": topic, "partitions": [0, 2]}]}],
    )
    assert int(verified.error_code) == 0
    assert [
        (int(p.partition_index), int(p.partition_error_code))
        for t in verified.results_by_transaction
        for r in t.topic_results
        for p in r.results_by_partition
    ] == [(0, 0), (2, 120)]  # TRANSACTION_ABORTABLE
    listed = cluster.ok(cluster.run("kafka-transactions.sh", ["list"]))
    [row] = [line.split() for line in listed.splitlines() if transactional_id in line]
    assert row[1:] == [str(node), str(pid), "Ongoing"], listed
    fields = _tool_described(cluster, transactional_id)
    assert (
        fields["CoordinatorId"],
        fields["ProducerId"],
        fields["ProducerEpoch"],
        fields["TransactionState"],
    ) == (
        str(node),
        str(pid),
        "1",
        "Ongoing",
    ), fields

    # EndTxn is answered once PrepareCommit is written; the leaders write the markers once they
    # take them (txn-partition), then CompleteCommit.
    assert int(_ask(cluster, node, END_TXN, 4, **ids, committed=True).error_code) == 0
    prepared = _described(cluster, node, transactional_id)
    assert prepared.transaction_state in ("PrepareCommit", "CompleteCommit")
    # A retry while the markers are written: CONCURRENT_TRANSACTIONS (or NONE once complete).
    assert int(_ask(cluster, node, END_TXN, 4, **ids, committed=True).error_code) in (51, 0)

    # The coordinator's broker killed: the new leader loads the partition and answers the same.
    kafka.cluster.brokers[node].kill()
    successor = _coordinator(cluster, transactional_id, avoid=node)

    def reloaded() -> Any:
        state = _described(cluster, successor, transactional_id)
        return state if int(state.error_code) == 0 else None  # 14, 16 while it moves and loads

    after = wait_for(reloaded, timeout=60, what="the new coordinator to describe the transaction")
    assert (after.transaction_state in ("PrepareCommit", "CompleteCommit"), int(after.producer_id)) == (
        True,
        pid,
    )
    assert int(after.producer_epoch) == epoch
    if after.transaction_state == "PrepareCommit":
        assert {(t.topic, int(p)) for t in after.topics for p in t.partitions} == {
            (topic, 0),
            (topic, 1),
            offsets,
        }
    producer.flush(0)
    zombie.flush(0)
