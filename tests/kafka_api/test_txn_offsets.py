"""TxnOffsetCommit (API 28) on real brokers, with a bare protocol client (the exact codes): the
offsets of a producer's open transaction are written to the group's `__consumer_offsets`
partition and stay pending — OffsetFetch does not show them, and answers UNSTABLE_OFFSET_COMMIT
for their partitions when asked `require_stable` — also on the partition's next leader, which
loads them from the log after the coordinator is killed; a zombie's commit (an older producer
epoch) is INVALID_PRODUCER_EPOCH, a member of an unknown generation ILLEGAL_GENERATION, an
unknown partition UNKNOWN_TOPIC_OR_PARTITION, and none of them changes anything.

Then WriteTxnMarkers (served by issue 33's txn-partition; until it is merged the test stops there,
skipped): the producer's COMMIT marker makes its pending offsets the committed ones, another
producer's ABORT drops its own, and the last broker, leading next, loads just that from the log;
`jbod_core.txn_offsets`' model test checks the orderings."""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path
from typing import Any

import pytest

from jbod_core import group_records
from jbod_kafka import protocol
from tests.broker.conftest import wait_for
from tests.kafka_api.conftest import KafkaCluster, start_kafka_cluster
from tests.kafka_api.test_group_durability import CONTROLLER_ARGS, ask, commit, group_partition
from tests.kafka_api.test_groups import neighbour_of
from tests.kafka_api.test_librdkafka import new_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

NONE, UNKNOWN_TOPIC_OR_PARTITION, ILLEGAL_GENERATION = 0, 3, 22
INVALID_PRODUCER_EPOCH, UNSTABLE_OFFSET_COMMIT = 47, 88
RETRIABLE = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


def txn_commit(
    kafka: KafkaCluster,
    node_id: int,
    group: str,
    topic: str,
    offsets: dict[int, int],
    *,
    producer_id: int,
    producer_epoch: int,
    generation: int = -1,
    member_id: str = "",
) -> list[int]:
    """TxnOffsetCommit v3 to broker `node_id`: the error code of each partition, in order."""
    answer = ask(
        kafka,
        node_id,
        28,
        3,
        transactional_id=f"txn-{group}",
        group_id=group,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=None,
        topics=[
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": p,
                        "committed_offset": o,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "m",
                    }
                    for p, o in offsets.items()
                ],
            }
        ],
    )
    return [int(p.error_code) for p in answer.topics[0].partitions]


def fetch(
    kafka: KafkaCluster, node_id: int, group: str, topic: str, *, require_stable: bool
) -> list[tuple[int, int]] | None:
    """OffsetFetch v8 of partitions 0-2: (offset, error code) each; None while the coordinator
    is not ready."""
    answer = ask(
        kafka,
        node_id,
        9,
        8,
        groups=[{"group_id": group, "topics": [{"name": topic, "partition_indexes": [0, 1, 2]}]}],
        require_stable=require_stable,
    )
    [fetched] = answer.groups
    if int(fetched.error_code) in RETRIABLE:
        return None
    assert int(fetched.error_code) == NONE
    return [(int(p.committed_offset), int(p.error_code)) for p in fetched.topics[0].partitions]


def write_marker(
    kafka: KafkaCluster, node_id: int, group: str, *, producer_id: int, producer_epoch: int, committed: bool
) -> int:
    """WriteTxnMarkers v1 of the group's partition of `__consumer_offsets`: its error code."""
    index = group_records.partition_for(group, group_records.DEFAULT_PARTITIONS)
    answer = ask(
        kafka,
        node_id,
        27,
        1,
        markers=[
            {
                "producer_id": producer_id,
                "producer_epoch": producer_epoch,
                "transaction_result": committed,
                "topics": [{"name": group_records.OFFSETS_TOPIC, "partition_indexes": [index]}],
                "coordinator_epoch": 0,
            }
        ],
    )
    return int(answer.markers[0].topics[0].partitions[0].error_code)


def producer_id(kafka: KafkaCluster, node_id: int) -> Any:
    """InitProducerId v4 without a transactional id; None while the broker cannot give one."""
    answer = ask(kafka, node_id, 22, 4, transactional_id=None, transaction_timeout=60000)
    return answer if int(answer.error_code) == NONE else None


def test_transactional_offsets_are_pending_until_their_marker_on_every_coordinator(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        kafka = start_kafka_cluster(stack, tmp_path, controller_args=CONTROLLER_ARGS)
        topic = new_topic(kafka, partitions=3)
        group = f"g-txn-{uuid.uuid4().hex[:6]}"
        wait_for(  # the first FindCoordinator creates __consumer_offsets
            lambda: int(ask(kafka, 1, 10, 3, key=group, key_type=0).error_code) == NONE,
            timeout=60,
            what="a coordinator for the group",
        )
        partition = wait_for(
            lambda: (
                (p := group_partition(kafka, group))["leader"] >= 0
                and sorted(p["isr"]) == sorted(p["replicas"])
                and p
            ),
            timeout=60,
            what="the group's partition led, its ISR full",
        )
        coordinator = int(partition["leader"])
        wait_for(
            lambda: commit(kafka, coordinator, group, topic, 3) == NONE, timeout=60, what="a plain commit"
        )
        producer = wait_for(lambda: producer_id(kafka, coordinator), timeout=60, what="a producer id")
        pid, epoch = int(producer.producer_id), int(producer.producer_epoch) + 1

        # The transaction's offsets: written, pending; an unknown partition is refused alone.
        answers = txn_commit(
            kafka, coordinator, group, topic, {0: 10, 1: 20, 7: 5}, producer_id=pid, producer_epoch=epoch
        )
        assert answers == [NONE, NONE, UNKNOWN_TOPIC_OR_PARTITION]
        expected_plain = [(3, NONE), (-1, NONE), (-1, NONE)]
        expected_stable = [(-1, UNSTABLE_OFFSET_COMMIT), (-1, UNSTABLE_OFFSET_COMMIT), (-1, NONE)]
        assert fetch(kafka, coordinator, group, topic, require_stable=False) == expected_plain
        assert fetch(kafka, coordinator, group, topic, require_stable=True) == expected_stable

        # Refused, changing nothing: a zombie (an older epoch of the producer); a member of a
        # generation of a group that has none.
        zombie = txn_commit(
            kafka, coordinator, group, topic, {2: 99}, producer_id=pid, producer_epoch=epoch - 1
        )
        assert zombie == [INVALID_PRODUCER_EPOCH]
        stranger = txn_commit(
            kafka,
            coordinator,
            neighbour_of(group),
            topic,
            {2: 1},
            producer_id=pid,
            producer_epoch=epoch,
            generation=3,
            member_id="m",
        )
        assert stranger == [ILLEGAL_GENERATION]
        assert fetch(kafka, coordinator, group, topic, require_stable=True) == expected_stable

        # The partition's next leader loads the open transaction's offsets as pending.
        followers = [int(r) for r in partition["replicas"] if r != coordinator]
        kafka.cluster.brokers[coordinator].kill()
        wait_for(
            lambda: group_partition(kafka, group)["leader"] in followers,
            timeout=60,
            what="a follower to lead the group's partition",
        )
        new_coordinator = int(group_partition(kafka, group)["leader"])
        stable = wait_for(
            lambda: fetch(kafka, new_coordinator, group, topic, require_stable=True),
            timeout=60,
            what="the new coordinator to answer OffsetFetch",
        )
        assert stable == expected_stable
        assert fetch(kafka, new_coordinator, group, topic, require_stable=False) == expected_plain

        if 27 not in protocol.APIS:
            pytest.skip("WriteTxnMarkers (27) is txn-partition's: the markers' part runs once it is merged")
        # The producer's COMMIT: its offsets are the committed ones, stable.
        assert (
            write_marker(kafka, new_coordinator, group, producer_id=pid, producer_epoch=epoch, committed=True)
            == NONE
        )
        committed = [(10, NONE), (20, NONE), (-1, NONE)]
        assert fetch(kafka, new_coordinator, group, topic, require_stable=True) == committed
        assert fetch(kafka, new_coordinator, group, topic, require_stable=False) == committed
        # Another producer's transaction, aborted: its offset was pending, then nothing changed.
        other = wait_for(lambda: producer_id(kafka, new_coordinator), timeout=60, what="another producer id")
        other_pid, other_epoch = int(other.producer_id), int(other.producer_epoch)
        answers = txn_commit(
            kafka, new_coordinator, group, topic, {0: 99}, producer_id=other_pid, producer_epoch=other_epoch
        )
        assert answers == [NONE]
        assert fetch(kafka, new_coordinator, group, topic, require_stable=True) == [
            (-1, UNSTABLE_OFFSET_COMMIT),
            *committed[1:],
        ]
        aborted = write_marker(
            kafka, new_coordinator, group, producer_id=other_pid, producer_epoch=other_epoch, committed=False
        )
        assert aborted == NONE
        assert fetch(kafka, new_coordinator, group, topic, require_stable=True) == committed
        # The last broker loads the same: the committed transaction's offsets, not the aborted one's.
        [last] = [f for f in followers if f != new_coordinator]
        wait_for(
            lambda: last in group_partition(kafka, group)["isr"],
            timeout=60,
            what="the last broker in the ISR of the group's partition",
        )
        kafka.cluster.brokers[new_coordinator].kill()
        wait_for(
            lambda: group_partition(kafka, group)["leader"] == last,
            timeout=60,
            what="the last broker to lead",
        )
        reloaded = wait_for(
            lambda: fetch(kafka, last, group, topic, require_stable=True),
            timeout=60,
            what="the last broker's answer",
        )
        assert reloaded == committed
