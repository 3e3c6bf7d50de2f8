"""AssignReplicasToDirs decisions (protocol §3.3): exact records, per-partition codes, replayed state."""

from __future__ import annotations

import pytest

from jbod_core import assignments, records
from jbod_core.errors import ErrorCode
from jbod_core.ids import LOST_DIR, MIGRATING_DIR, UNASSIGNED_DIR, Uuid
from jbod_core.image import PartitionRegistration
from jbod_core.messages import AssignReplicasToDirsReply, AssignReplicasToDirsRequest
from tests.core.support import OTHER_TOPIC, TOPIC, Cluster, change, d

UNKNOWN_TOPIC = Uuid(0x999, 0x999)


def _request(
    broker_id: int, epoch: int, placements: list[tuple[Uuid, list[tuple[Uuid, list[int]]]]]
) -> AssignReplicasToDirsRequest:
    return AssignReplicasToDirsRequest.model_validate(
        {
            "brokerId": broker_id,
            "brokerEpoch": epoch,
            "directories": [
                {
                    "id": str(directory),
                    "topics": [
                        {"topicId": str(topic), "partitions": [{"partitionIndex": i} for i in indexes]}
                        for topic, indexes in topics
                    ],
                }
                for directory, topics in placements
            ],
        }
    )


def _assign(
    cluster: Cluster,
    broker_id: int,
    placements: list[tuple[Uuid, list[tuple[Uuid, list[int]]]]],
    *,
    epoch: int | None = None,
) -> tuple[list[records.Record], AssignReplicasToDirsReply]:
    return assignments.assign_replicas_to_dirs(
        cluster.image, _request(broker_id, cluster.epoch(broker_id) if epoch is None else epoch, placements)
    )


def _codes(reply: AssignReplicasToDirsReply) -> list[tuple[Uuid, Uuid, int, int]]:
    return [
        (directory.id, topic.topic_id, part.partition_index, part.error_code)
        for directory in reply.directories
        for topic in directory.topics
        for part in topic.partitions
    ]


def _cluster() -> Cluster:
    """Broker 1 (dirs d1, d11) and broker 2 (d2), both unfenced; broker 1's replicas UNASSIGNED."""
    cluster = Cluster()
    cluster.add_broker(1, [d(1), d(11)])
    cluster.add_broker(2, [d(2)])
    cluster.add_topic(
        [
            ([1, 2], [1, 2], 1, [UNASSIGNED_DIR, d(2)]),
            ([2, 1], [2, 1], 2, [d(2), UNASSIGNED_DIR]),
            ([1], [1], 1, [UNASSIGNED_DIR]),
            ([2], [2], 2, [d(2)]),
        ]
    )
    return cluster


@pytest.mark.parametrize("known", [True, False])
def test_stale_or_unknown_broker_epoch_is_77_without_results(known: bool) -> None:
    cluster = _cluster()
    request = _request(1 if known else 7, cluster.epoch(1) + 1 if known else 0, [(d(1), [(TOPIC, [0])])])
    produced, reply = assignments.assign_replicas_to_dirs(cluster.image, request)
    assert produced == []
    assert reply.error_code == ErrorCode.STALE_BROKER_EPOCH  # 77
    assert reply.directories == []
    assert reply.throttle_time_ms == 0


def test_per_partition_codes_are_echoed() -> None:
    cluster = _cluster()
    produced, reply = _assign(
        cluster,
        1,
        [
            (d(1), [(UNKNOWN_TOPIC, [0, 1]), (TOPIC, [0, 9, 3])]),
            (d(11), [(TOPIC, [1])]),
        ],
    )
    assert reply.error_code == 0
    assert _codes(reply) == [
        (d(1), UNKNOWN_TOPIC, 0, ErrorCode.UNKNOWN_TOPIC_ID),
        (d(1), UNKNOWN_TOPIC, 1, ErrorCode.UNKNOWN_TOPIC_ID),
        (d(1), TOPIC, 0, 0),
        (d(1), TOPIC, 9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (d(1), TOPIC, 3, ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (d(11), TOPIC, 1, 0),
    ]
    assert [c for *_, c in _codes(reply)] == [100, 100, 0, 3, 6, 0]
    assert produced == [
        change(0, epoch=1, directories=[d(1), d(2)]),
        change(1, epoch=1, directories=[d(2), d(11)]),
    ]
    cluster.apply(produced)
    assert cluster.part(0).directories == (d(1), d(2))
    assert cluster.part(1).directories == (d(2), d(11))
    assert cluster.image.unassigned_by_broker == {1: {(TOPIC, 2)}}
    assert cluster.image.replicas_by_dir[(1, d(1))] == {(TOPIC, 0)}


def test_unchanged_assignment_writes_nothing() -> None:
    cluster = _cluster()
    cluster.apply(_assign(cluster, 1, [(d(1), [(TOPIC, [0])])])[0])
    produced, reply = _assign(cluster, 1, [(d(1), [(TOPIC, [0])])])
    assert produced == []
    assert _codes(reply) == [(d(1), TOPIC, 0, 0)]


def test_the_later_entry_for_a_partition_wins_within_a_request() -> None:
    cluster = _cluster()
    produced, _ = _assign(cluster, 1, [(d(1), [(TOPIC, [0])]), (d(11), [(TOPIC, [0])])])
    assert produced == [
        change(0, epoch=1, directories=[d(1), d(2)]),
        change(0, epoch=2, directories=[d(11), d(2)]),
    ]
    cluster.apply(produced)
    assert cluster.part(0).directories == (d(11), d(2))


def test_assignment_back_to_unassigned_or_migrating_is_online() -> None:
    cluster = _cluster()
    cluster.apply(_assign(cluster, 2, [(MIGRATING_DIR, [(TOPIC, [3])])])[0])
    assert cluster.part(3) == PartitionRegistration(
        replicas=(2,), isr=(2,), directories=(MIGRATING_DIR,), leader=2, leader_epoch=0, partition_epoch=1
    )


@pytest.mark.parametrize("target", [LOST_DIR, d(2), d(99)], ids=["lost", "foreign", "unknown"])
def test_assignment_to_an_offline_dir_leaves_isr_and_leadership(target: Uuid) -> None:
    cluster = _cluster()
    produced, reply = _assign(cluster, 1, [(target, [(TOPIC, [0, 1, 2])])])
    assert [c for *_, c in _codes(reply)] == [0, 0, 0]
    assert produced == [
        change(0, epoch=1, directories=[target, d(2)], isr=[2], leader=2, leader_epoch=1),
        change(1, epoch=1, directories=[d(2), target], isr=[2]),
        change(2, epoch=1, directories=[target], leader=-1, leader_epoch=1),  # last ISR member stays
    ]
    cluster.apply(produced)
    assert [(cluster.part(i).isr, cluster.part(i).leader) for i in range(3)] == [
        ((2,), 2),
        ((2,), 2),
        ((1,), -1),
    ]
    assert cluster.image.offline_replicas(cluster.part(2)) == [1]
    assert cluster.image.unassigned_count(1) == 0


def test_assignment_to_a_dir_reported_offline_is_offline() -> None:
    cluster = _cluster()
    cluster.apply(cluster.heartbeat(1, offline=[d(11)])[0])
    produced, _ = _assign(cluster, 1, [(d(11), [(TOPIC, [0])])])
    assert produced == [change(0, epoch=1, directories=[d(11), d(2)], isr=[2], leader=2, leader_epoch=1)]


def test_leaderless_partition_gets_a_leader_when_its_replica_becomes_acceptable() -> None:
    cluster = _cluster()
    cluster.apply(_assign(cluster, 1, [(LOST_DIR, [(TOPIC, [2])])])[0])
    assert (cluster.part(2).isr, cluster.part(2).leader, cluster.part(2).leader_epoch) == ((1,), -1, 1)
    produced, _ = _assign(cluster, 1, [(d(11), [(TOPIC, [2])])])
    assert produced == [change(2, epoch=2, directories=[d(11)], leader=1, leader_epoch=2)]
    cluster.apply(produced)
    assert cluster.part(2).leader == 1
    assert cluster.image.leaderless == set()


def test_moving_to_an_online_dir_does_not_readd_to_the_isr() -> None:
    cluster = _cluster()
    cluster.apply(_assign(cluster, 1, [(LOST_DIR, [(TOPIC, [0])])])[0])
    produced, _ = _assign(cluster, 1, [(d(1), [(TOPIC, [0])])])
    assert produced == [change(0, epoch=2, directories=[d(1), d(2)])]
    cluster.apply(produced)
    assert (cluster.part(0).isr, cluster.part(0).leader) == ((2,), 2)


def test_fenced_broker_may_assign_but_is_not_elected() -> None:
    cluster = _cluster()
    cluster.apply(cluster.heartbeat(1, want_fence=True)[0])
    assert (cluster.part(2).isr, cluster.part(2).leader) == ((1,), -1)
    produced, _ = _assign(cluster, 1, [(d(1), [(TOPIC, [2])])])
    assert produced == [change(2, epoch=2, directories=[d(1)])]


def test_several_topics_and_dirs_in_one_request() -> None:
    cluster = _cluster()
    cluster.add_topic([([1], [1], 1, [UNASSIGNED_DIR])], topic_id=OTHER_TOPIC, name="other")
    produced, reply = _assign(
        cluster, 1, [(d(11), [(OTHER_TOPIC, [0]), (TOPIC, [2])]), (LOST_DIR, [(TOPIC, [1])])]
    )
    assert [c for *_, c in _codes(reply)] == [0, 0, 0]
    assert produced == [
        change(0, epoch=1, topic_id=OTHER_TOPIC, directories=[d(11)]),
        change(2, epoch=1, directories=[d(11)]),
        change(1, epoch=1, directories=[d(2), LOST_DIR], isr=[2]),
    ]
    cluster.apply(produced)
    assert cluster.image.unassigned_by_broker == {1: {(TOPIC, 0)}}


def test_broker_in_controlled_shutdown_is_not_elected_by_its_assignment() -> None:
    cluster = _cluster()
    cluster.apply(cluster.heartbeat(1, want_shut_down=True)[0])
    assert cluster.image.brokers[1].in_controlled_shutdown
    assert (cluster.part(2).isr, cluster.part(2).leader) == ((1,), -1)
    produced, _ = _assign(cluster, 1, [(d(1), [(TOPIC, [2])])])
    assert produced == [change(2, epoch=2, directories=[d(1)])]
