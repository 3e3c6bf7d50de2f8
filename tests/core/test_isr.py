"""AlterPartition decisions (protocol §3.4): the check order, ineligible replicas and the success record."""

from __future__ import annotations

import pytest

from jbod_core import isr, records
from jbod_core.errors import ErrorCode
from jbod_core.ids import LOST_DIR, UNASSIGNED_DIR, Uuid
from jbod_core.messages import AlterPartitionReply, AlterPartitionRequest, AlterPartitionResult
from tests.core.support import TOPIC, Cluster, change, d


def _alter(
    cluster: Cluster,
    broker_id: int,
    partitions: list[tuple[int, int, int, list[int]]],
    *,
    topic_id: Uuid = TOPIC,
    epoch: int | None = None,
) -> tuple[list[records.Record], AlterPartitionReply]:
    request = AlterPartitionRequest.model_validate(
        {
            "brokerId": broker_id,
            "brokerEpoch": cluster.epoch(broker_id) if epoch is None else epoch,
            "topics": [
                {
                    "topicId": str(topic_id),
                    "partitions": [
                        {"partitionIndex": i, "leaderEpoch": le, "partitionEpoch": pe, "newIsr": new_isr}
                        for i, le, pe, new_isr in partitions
                    ],
                }
            ],
        }
    )
    return isr.alter_partition(cluster.image, request)


def _result(reply: AlterPartitionReply) -> AlterPartitionResult:
    assert reply.error_code == 0
    [topic] = reply.topics
    [result] = topic.partitions
    return result


def _cluster() -> Cluster:
    """Brokers 1, 2, 3 unfenced (2 with two dirs); partition 0 = replicas [1,2,3], ISR [1], leader 1."""
    cluster = Cluster()
    cluster.add_broker(1, [d(1)])
    cluster.add_broker(2, [d(2), d(22)])
    cluster.add_broker(3, [d(3)])
    cluster.add_topic([([1, 2, 3], [1], 1, [d(1), d(2), d(3)]), ([2, 1], [2, 1], 2, [d(2), d(1)])])
    return cluster


@pytest.mark.parametrize("known", [True, False])
def test_stale_broker_epoch_is_77(known: bool) -> None:
    cluster = _cluster()
    request = AlterPartitionRequest.model_validate(
        {"brokerId": 1 if known else 9, "brokerEpoch": cluster.epoch(1) + 1, "topics": []}
    )
    produced, reply = isr.alter_partition(cluster.image, request)
    assert produced == []
    assert reply.error_code == ErrorCode.STALE_BROKER_EPOCH  # 77
    assert reply.topics == []


def test_success_sets_the_isr_and_bumps_only_the_partition_epoch() -> None:
    cluster = _cluster()
    produced, reply = _alter(cluster, 1, [(0, 0, 0, [1, 3, 2])])
    assert produced == [change(0, epoch=1, isr=[1, 3, 2])]
    assert _result(reply) == AlterPartitionResult(
        partition_index=0, error_code=0, leader=1, leader_epoch=0, partition_epoch=1, isr=[1, 3, 2]
    )
    cluster.apply(produced)
    part = cluster.part(0)
    assert (part.isr, part.leader, part.leader_epoch, part.partition_epoch) == ((1, 3, 2), 1, 0, 1)
    # Shrinking is accepted the same way.
    produced, reply = _alter(cluster, 1, [(0, 0, 1, [1])])
    assert produced == [change(0, epoch=2, isr=[1])]
    cluster.apply(produced)
    assert cluster.part(0).isr == (1,)


def test_unchanged_isr_writes_nothing() -> None:
    cluster = _cluster()
    produced, reply = _alter(cluster, 1, [(0, 0, 0, [1])])
    assert produced == []
    assert _result(reply) == AlterPartitionResult(
        partition_index=0, error_code=0, leader=1, leader_epoch=0, partition_epoch=0, isr=[1]
    )


def test_unknown_topic_is_100_and_unknown_index_is_3() -> None:
    cluster = _cluster()
    produced, reply = _alter(cluster, 1, [(0, 0, 0, [1])], topic_id=Uuid(0x999, 1))
    assert (produced, _result(reply).error_code) == ([], ErrorCode.UNKNOWN_TOPIC_ID)
    produced, reply = _alter(cluster, 1, [(7, 0, 0, [1])])
    assert (produced, _result(reply).error_code) == ([], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


@pytest.mark.parametrize(
    ("broker_id", "leader_epoch", "partition_epoch", "new_isr", "code"),
    [
        (2, 0, 0, [2, 1], ErrorCode.NOT_LEADER_OR_FOLLOWER),  # 6: a follower
        (3, 0, 0, [3], ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (1, 1, 0, [1, 2], ErrorCode.FENCED_LEADER_EPOCH),  # 74
        (1, -1, 0, [1, 2], ErrorCode.FENCED_LEADER_EPOCH),
        (1, 0, 1, [1, 2], ErrorCode.INVALID_UPDATE_VERSION),  # 108
        (1, 0, -1, [1, 2], ErrorCode.INVALID_UPDATE_VERSION),
        (1, 0, 0, [1, 4], ErrorCode.INVALID_REQUEST),  # 42: not a subset of the replicas
        (1, 0, 0, [2, 3], ErrorCode.INVALID_REQUEST),  # 42: without the leader
        (1, 0, 0, [], ErrorCode.INVALID_REQUEST),
        (1, 0, 0, [1, 2, 2], ErrorCode.INVALID_REQUEST),  # 42: duplicates
        (1, 0, 0, [1, 1], ErrorCode.INVALID_REQUEST),
    ],
)
def test_rejections(
    broker_id: int, leader_epoch: int, partition_epoch: int, new_isr: list[int], code: int
) -> None:
    cluster = _cluster()
    produced, reply = _alter(cluster, broker_id, [(0, leader_epoch, partition_epoch, new_isr)])
    assert produced == []
    result = _result(reply)
    assert result.error_code == code
    assert result.isr == []


def test_check_order_leader_then_leader_epoch_then_partition_epoch_then_isr() -> None:
    cluster = _cluster()
    assert _result(_alter(cluster, 2, [(0, 9, 9, [7])])[1]).error_code == 6
    assert _result(_alter(cluster, 1, [(0, 9, 9, [7])])[1]).error_code == 74
    assert _result(_alter(cluster, 1, [(0, 0, 9, [7])])[1]).error_code == 108
    assert _result(_alter(cluster, 1, [(0, 0, 0, [7])])[1]).error_code == 42


def _ineligible(cluster: Cluster, new_isr: list[int]) -> None:
    produced, reply = _alter(cluster, 1, [(0, 0, 0, new_isr)])
    assert produced == []
    assert _result(reply).error_code == ErrorCode.INELIGIBLE_REPLICA  # 107


def test_adding_a_fenced_broker_is_107() -> None:
    cluster = _cluster()
    cluster.apply(cluster.heartbeat(3, want_fence=True)[0])
    _ineligible(cluster, [1, 3])
    assert _result(_alter(cluster, 1, [(0, 0, 0, [1, 2])])[1]).error_code == 0


def test_adding_an_unregistered_broker_is_107() -> None:
    cluster = Cluster()
    cluster.add_broker(1, [d(1)])
    cluster.add_topic([([1, 5], [1], 1, [d(1), UNASSIGNED_DIR])])
    _ineligible(cluster, [1, 5])


def test_adding_a_broker_in_controlled_shutdown_is_107() -> None:
    cluster = _cluster()
    cluster.apply(cluster.heartbeat(2, want_shut_down=True)[0])
    assert cluster.image.brokers[2].in_controlled_shutdown
    _ineligible(cluster, [1, 2])


def test_adding_a_replica_whose_dir_is_offline_is_107() -> None:
    cluster = _cluster()
    cluster.apply(cluster.heartbeat(2, offline=[d(2)])[0])
    _ineligible(cluster, [1, 2])
    # The same broker with the replica in an online dir is eligible again.
    cluster.apply([change(0, epoch=1, directories=[d(1), d(22), d(3)])])
    produced, reply = _alter(cluster, 1, [(0, 0, 1, [1, 2])])
    assert produced == [change(0, epoch=2, isr=[1, 2])]
    assert _result(reply).isr == [1, 2]


def test_adding_a_replica_in_lost_dir_is_107_but_unassigned_is_fine() -> None:
    cluster = _cluster()
    cluster.apply([change(0, epoch=1, directories=[d(1), LOST_DIR, UNASSIGNED_DIR])])
    rejected = _alter(cluster, 1, [(0, 0, 1, [1, 2])])
    assert rejected[0] == []
    assert _result(rejected[1]).error_code == 107
    produced, _ = _alter(cluster, 1, [(0, 0, 1, [1, 3])])
    assert produced == [change(0, epoch=2, isr=[1, 3])]


def test_several_partitions_each_get_their_own_result() -> None:
    cluster = _cluster()
    cluster.add_topic([([1, 3], [1], 1, [d(1), d(3)])], topic_id=Uuid(0x55, 5), name="u")
    produced, reply = _alter(cluster, 1, [(0, 0, 0, [1, 2]), (1, 0, 0, [1]), (0, 0, 1, [1, 2, 3])])
    assert [
        (r.partition_index, r.error_code, r.partition_epoch, r.isr) for r in reply.topics[0].partitions
    ] == [
        (0, 0, 1, [1, 2]),
        (1, 6, -1, []),
        (0, 0, 2, [1, 2, 3]),
    ]
    assert produced == [change(0, epoch=1, isr=[1, 2]), change(0, epoch=2, isr=[1, 2, 3])]
    cluster.apply(produced)
    assert cluster.part(0).isr == (1, 2, 3)
