"""CreatePartitions (`topics.create_partitions`): Kafka's rules and codes, the exact new
PartitionRecords (placed as a create places them), then replay."""

from __future__ import annotations

import random
from typing import Any

import pytest

from jbod_core import records, topics
from jbod_core.errors import ErrorCode
from jbod_core.ids import UNASSIGNED_DIR
from jbod_core.messages import CreatePartitionsReply, CreatePartitionsRequest, CreateTopicRequest
from tests.core.support import Cluster, d


def _cluster() -> Cluster:
    """Brokers 1 (one dir), 2 (two dirs), 3 (one dir) active; 4 fenced; topic `t` with 2
    partitions of 2 replicas."""
    cluster = Cluster()
    cluster.add_broker(1, [d(1)])
    cluster.add_broker(2, [d(2), d(22)])
    cluster.add_broker(3, [d(3)])
    cluster.add_broker(4, [d(4)], unfence=False)
    produced, reply = topics.create_topic(
        cluster.image,
        CreateTopicRequest(name="t", replica_assignment=[[1, 2], [2, 3]]),
        rng=random.Random(0),
    )
    assert reply.error_code == 0
    cluster.apply(produced)
    return cluster


def _topic_id(cluster: Cluster) -> Any:
    return cluster.image.topic_ids_by_name["t"]


def _add(
    cluster: Cluster, name: str = "t", seed: int = 0, **fields: Any
) -> tuple[list[records.Record], CreatePartitionsReply]:
    request = CreatePartitionsRequest.model_validate(fields)
    return topics.create_partitions(cluster.image, name, request, rng=random.Random(seed))


def test_a_manual_assignment_adds_partitions_placed_as_a_create_places_them() -> None:
    cluster = _cluster()
    topic_id = _topic_id(cluster)
    produced, reply = _add(cluster, totalCount=5, assignment=[[3, 1], [2, 4], [4, 1]])
    assert produced == [
        records.PartitionRecord(
            topic_id=topic_id,
            partition_id=2,
            replicas=(3, 1),
            isr=(3, 1),
            leader=3,
            leader_epoch=0,
            partition_epoch=0,
            directories=(d(3), d(1)),
        ),
        records.PartitionRecord(
            topic_id=topic_id,
            partition_id=3,
            replicas=(2, 4),
            isr=(2,),  # broker 4 is fenced: not in the ISR
            leader=2,
            leader_epoch=0,
            partition_epoch=0,
            directories=(UNASSIGNED_DIR, d(4)),  # broker 2 has two dirs
        ),
        records.PartitionRecord(
            topic_id=topic_id,
            partition_id=4,
            replicas=(4, 1),
            isr=(1,),
            leader=1,  # the first active replica
            leader_epoch=0,
            partition_epoch=0,
            directories=(d(4), d(1)),
        ),
    ]
    assert (reply.error_code, reply.topic_id, reply.total_count) == (0, topic_id, 5)
    cluster.apply(produced)
    assert sorted(cluster.image.topics[topic_id].partitions) == [0, 1, 2, 3, 4]
    assert cluster.image.unassigned_count(2) == 3  # partitions 0 and 1, and the new partition 3
    assert cluster.replayed_from_scratch().canonical() == cluster.image.canonical()


def test_automatic_placement_keeps_the_replication_factor_on_active_brokers() -> None:
    cluster = _cluster()
    produced, reply = _add(cluster, seed=3, totalCount=12)
    assert reply.error_code == 0
    assert [r.partition_id for r in produced if isinstance(r, records.PartitionRecord)] == list(range(2, 12))
    expected = topics.stripe_replicas([1, 2, 3], partitions=10, replication_factor=2, rng=random.Random(3))
    for record, replicas in zip(produced, expected, strict=True):
        assert isinstance(record, records.PartitionRecord)
        assert list(record.replicas) == replicas
        assert record.isr == record.replicas and record.leader == replicas[0]
    cluster.apply(produced)
    assert len(cluster.image.topics[_topic_id(cluster)].partitions) == 12


def test_validate_only_writes_nothing() -> None:
    cluster = _cluster()
    produced, reply = _add(cluster, totalCount=3, validateOnly=True)
    assert produced == []
    assert (reply.error_code, reply.total_count) == (0, 3)
    produced, reply = _add(cluster, totalCount=2, validateOnly=True)
    assert (produced, reply.error_code) == ([], ErrorCode.INVALID_PARTITIONS)


def _refused(cluster: Cluster, code: int, name: str = "t", **fields: Any) -> str:
    before = cluster.image.canonical()
    produced, reply = _add(cluster, name, **fields)
    assert produced == []
    assert reply.error_code == code
    assert reply.error_message
    assert reply.topic_id is None
    assert cluster.image.canonical() == before
    return reply.error_message


def test_unknown_topic_is_3() -> None:
    assert "'u'" in _refused(_cluster(), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name="u", totalCount=3)


@pytest.mark.parametrize("total", [0, 1, 2, 10_003])
def test_no_increase_or_too_many_is_37(total: int) -> None:
    _refused(_cluster(), ErrorCode.INVALID_PARTITIONS, totalCount=total)


def test_a_replication_factor_above_the_active_brokers_is_38() -> None:
    cluster = Cluster()
    cluster.add_broker(1, [d(1)])
    cluster.add_broker(2, [d(2)])
    cluster.add_topic([([1, 2], [1, 2], 1, [d(1), d(2)])])
    cluster.apply(cluster.heartbeat(2, want_fence=True)[0])  # one active broker left
    _refused(cluster, ErrorCode.INVALID_REPLICATION_FACTOR, totalCount=2)


@pytest.mark.parametrize(
    "assignment",
    [
        [[1, 2]],  # two new partitions, one assignment
        [[1, 2], [1, 2], [1, 2]],  # three assignments
        [[1, 2], [3]],  # another replication factor
        [[1, 2], [1, 2, 3]],
        [[1, 2], []],
        [[1, 1], [1, 2]],  # a broker twice
        [[1, 9], [1, 2]],  # an unregistered broker
        [[4, 1], [4, 4]],
        [[1, 2], [4, 4]],
    ],
)
def test_bad_assignments_are_39(assignment: list[list[int]]) -> None:
    _refused(_cluster(), ErrorCode.INVALID_REPLICA_ASSIGNMENT, totalCount=4, assignment=assignment)


def test_an_assignment_without_an_active_broker_is_39() -> None:
    cluster = _cluster()
    cluster.add_broker(5, [d(5)], unfence=False)
    message = _refused(cluster, ErrorCode.INVALID_REPLICA_ASSIGNMENT, totalCount=3, assignment=[[4, 5]])
    assert "Partition 2" in message
