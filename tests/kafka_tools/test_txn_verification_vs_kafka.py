"""KIP-890 part 1 on the partition leader, side by side with Apache Kafka 4.3.1 (issue 33): a
transactional produce to a partition not yet added to the transaction is verified with the
coordinator first, so a late write never lands in the next transaction.

The same raw requests go to a single Kafka node and to a cluster of two of our brokers (a topic
of two partitions, so that one partition's leader asks a coordinator on the other broker over the
inter-broker listener and the other asks its own). With a producer id and epoch from
InitProducerId of a transactional id, each partition in turn: a transactional batch to a partition
never added to the transaction is refused (INVALID_TXN_STATE for Produce v9, TRANSACTION_ABORTABLE
for v11+), nothing appended; after AddPartitionsToTxn the same batch and the next are appended; once
EndTxn(abort) completed, a late batch with the next sequence and a retry of an old one are both
refused; in the next transaction the old batch is a duplicate (answered with its original offset,
not appended again) and the next sequence is appended; after EndTxn(commit) completed a late batch
is refused again. Every answer (error code and base offset) is Kafka's, and the partition holds
the same records and markers on both (ListOffsets: the same end offset).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from confluent_kafka.admin import AdminClient, NewTopic

from e2e.kafka_tools import KafkaCluster as ApacheKafka
from e2e.kafka_tools import KafkaInstall
from e2e.wait import wait_for
from jbod_kafka import protocol
from tests.kafka_api.conftest import start_kafka_cluster
from tests.kafka_api.raw_client import RawConnection
from tests.kafka_tools.test_harness import install  # noqa: F401  the module's fixture: Kafka's jars or a skip

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(600)]

PRODUCE, LIST_OFFSETS, FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS, END_TXN, DESCRIBE_TXNS = (
    0,
    2,
    10,
    22,
    24,
    26,
    65,
)
RETRIED = frozenset({14, 15, 16, 51})  # load in progress, not available, not coordinator, concurrent


@dataclass
class Side:
    """One cluster as the raw requests reach it."""

    name: str
    address_of: Callable[[int], str]
    leader_of: Callable[[str, int], int]
    login: tuple[str, str] | None
    first_node: int

    def ask(self, node: int, api_key: int, version: int, **fields: Any) -> Any:
        with RawConnection(self.address_of(node)) as conn:
            if self.login is not None:
                assert int(conn.authenticate(*self.login).error_code) == 0
            return conn.request(
                api_key, version, protocol.build(protocol.request_type(api_key, version), **fields)
            )


def _batch(values: list[bytes], *, pid: int, epoch: int, sequence: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=1,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
        batch_size=1 << 20,
    )
    for i, value in enumerate(values):
        builder.append(offset=i, timestamp=int(time.time() * 1000), key=None, value=value, headers=[])
    return bytes(builder.build())


class Transaction:
    """A transactional id driven with raw requests on one side."""

    def __init__(self, side: Side, transactional_id: str, topic: str) -> None:
        self.side = side
        self.transactional_id = transactional_id
        self.topic = topic
        self.last = -1
        self.coordinator = wait_for(self._find, timeout=90, what=f"{side.name}: a coordinator")
        answer = wait_for(
            lambda: self._retried(
                INIT_PRODUCER_ID,
                4,
                transactional_id=transactional_id,
                transaction_timeout=60000,
                producer_id=-1,
                producer_epoch=-1,
            ),
            timeout=90,
            what=f"{side.name}: InitProducerId",
        )
        assert int(answer.error_code) == 0
        self.pid, self.epoch = int(answer.producer_id), int(answer.producer_epoch)

    def _find(self) -> int | None:
        [found] = self.side.ask(
            self.side.first_node, FIND_COORDINATOR, 4, key_type=1, coordinator_keys=[self.transactional_id]
        ).coordinators
        return int(found.node_id) if int(found.error_code) == 0 else None

    def _retried(self, api_key: int, version: int, **fields: Any) -> Any | None:
        answer = self.side.ask(self.coordinator, api_key, version, **fields)
        return None if int(getattr(answer, "error_code", 0)) in RETRIED else answer

    def add(self, partition: int) -> int:
        [answer] = wait_for(
            lambda: self._added(partition),
            timeout=60,
            what=lambda: f"{self.side.name}: AddPartitionsToTxn (last answered {self.last})",
        )
        return int(answer)

    def _added(self, partition: int) -> tuple[int] | None:
        answer = self.side.ask(
            self.coordinator,
            ADD_PARTITIONS,
            3,
            v3_and_below_transactional_id=self.transactional_id,
            v3_and_below_producer_id=self.pid,
            v3_and_below_producer_epoch=self.epoch,
            v3_and_below_topics=[{"name": self.topic, "partitions": [partition]}],
        )
        code = int(answer.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)
        self.last = code
        return None if code in RETRIED else (code,)

    def end(self, *, commit: bool) -> None:
        """EndTxn, then until the coordinator wrote every marker (Complete*)."""
        answer = wait_for(
            lambda: self._retried(
                END_TXN,
                3,
                transactional_id=self.transactional_id,
                producer_id=self.pid,
                producer_epoch=self.epoch,
                committed=commit,
            ),
            timeout=60,
            what=f"{self.side.name}: EndTxn",
        )
        assert int(answer.error_code) == 0
        done = "CompleteCommit" if commit else "CompleteAbort"
        wait_for(lambda: self._state() == done, timeout=60, what=f"{self.side.name}: {done}")

    def _state(self) -> str:
        [state] = self.side.ask(
            self.coordinator, DESCRIBE_TXNS, 0, transactional_ids=[self.transactional_id]
        ).transaction_states
        return str(state.transaction_state)

    def produce(self, partition: int, sequence: int, *, version: int = 9) -> tuple[int, int]:
        """(error code, base offset) of a transactional batch of one record at `sequence`."""
        records = _batch([f"s{sequence}".encode()], pid=self.pid, epoch=self.epoch, sequence=sequence)
        answer = self.side.ask(
            self.side.leader_of(self.topic, partition),
            PRODUCE,
            version,
            transactional_id=self.transactional_id,
            acks=-1,
            timeout=30000,
            topic_data=[{"name": self.topic, "partition_data": [{"index": partition, "records": records}]}],
        )
        result = answer.responses[0].partition_responses[0]
        return int(result.error_code), int(result.base_offset)

    def end_offset(self, partition: int) -> int:
        answer = self.side.ask(
            self.side.leader_of(self.topic, partition),
            LIST_OFFSETS,
            5,
            replica_id=-1,
            isolation_level=0,
            topics=[{"name": self.topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}],
        )
        return int(answer.topics[0].partitions[0].offset)


def coordinated_by(side: Side, topic: str, partition: int, *, remote: bool) -> str:
    """A transactional id whose coordinator is (`remote`: is not) the leader of `partition`."""
    leader = side.leader_of(topic, partition)
    for i in range(200):
        transactional_id = f"verify-{uuid.uuid4().hex[:6]}-{i}"
        [found] = wait_for(
            lambda transactional_id=transactional_id: (
                side.ask(
                    side.first_node, FIND_COORDINATOR, 4, key_type=1, coordinator_keys=[transactional_id]
                ).coordinators
            ),
            timeout=60,
            what="FindCoordinator",
        )
        node = int(found.node_id)
        if int(found.error_code) == 0 and (node != leader) == remote:
            return transactional_id
    raise AssertionError(f"no transactional id coordinated {'away from' if remote else 'by'} broker {leader}")


def scenario(side: Side, topic: str, partition: int, transactional_id: str) -> list[tuple[str, Any]]:
    """Every answer of the module docstring's steps on `partition`, named."""
    txn = Transaction(side, transactional_id, topic)
    seen: list[tuple[str, Any]] = []
    seen.append(("never added, Produce v9", txn.produce(partition, 0)))
    seen.append(("never added, Produce v11", txn.produce(partition, 0, version=11)))
    seen.append(("end offset", txn.end_offset(partition)))
    seen.append(("added", txn.add(partition)))
    seen.append(("seq 0", txn.produce(partition, 0)))
    seen.append(("seq 1", txn.produce(partition, 1)))
    txn.end(commit=False)
    seen.append(("late seq 2 after abort", txn.produce(partition, 2)))
    seen.append(("retried seq 1 after abort", txn.produce(partition, 1)))
    seen.append(("late seq 2 after abort, Produce v11", txn.produce(partition, 2, version=11)))
    seen.append(("added again", txn.add(partition)))
    seen.append(("old seq 1 in the next transaction", txn.produce(partition, 1)))
    seen.append(("seq 2 in the next transaction", txn.produce(partition, 2)))
    txn.end(commit=True)
    seen.append(("late seq 3 after commit", txn.produce(partition, 3)))
    seen.append(("end offset", txn.end_offset(partition)))
    return seen


@pytest.fixture(scope="module")
def sides(install: KafkaInstall, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Side, Side]]:  # noqa: F811
    with contextlib.ExitStack() as stack:
        apache = stack.enter_context(ApacheKafka(install))
        ours = start_kafka_cluster(stack, tmp_path_factory.mktemp("verify"), brokers=2)
        topic = "verified"
        admin = AdminClient({"bootstrap.servers": apache.bootstrap})
        admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(60)
        ours.cluster.admin.create_topic(topic, partitions=2, replication_factor=2)

        def our_leader(name: str, partition: int) -> int:
            partitions = ours.cluster.admin.describe_topic(name)["partitions"]
            [found] = [p for p in partitions if p["partitionIndex"] == partition]
            return int(found["leader"])

        wait_for(lambda: all(our_leader(topic, p) >= 0 for p in (0, 1)), timeout=60, what="leaders")
        yield (
            Side(
                "kafka", lambda _node: apache.bootstrap, lambda _t, _p: apache.node_id, None, apache.node_id
            ),
            Side(
                "ours",
                lambda node: ours.cluster.brokers[node].kafka["SASL_PLAINTEXT"],
                our_leader,
                ("admin", ours.admin_password),
                1,
            ),
        )


def test_a_late_write_never_lands_in_the_next_transaction(sides: tuple[Side, Side]) -> None:
    kafka, ours = sides
    for partition in (0, 1):
        expected = scenario(kafka, "verified", partition, f"verify-{uuid.uuid4().hex[:6]}")
        # partition 0's leader asks a coordinator on the other broker, partition 1's its own
        transactional_id = coordinated_by(ours, "verified", partition, remote=partition == 0)
        assert scenario(ours, "verified", partition, transactional_id) == expected
        answers = dict(expected)
        assert answers["never added, Produce v9"][0] == 48  # INVALID_TXN_STATE
        assert answers["late seq 2 after abort"][0] == 48
        assert answers["old seq 1 in the next transaction"] == answers["seq 1"]  # a duplicate
