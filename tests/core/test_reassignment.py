"""Reassignment decisions (KIP-455): starting, catching up, completing, cancelling, a target
broker fenced and a target dir failing during catch-up, with the exact records written."""

from __future__ import annotations

from jbod_core import brokers, isr, reassignment, records
from jbod_core.errors import ErrorCode
from jbod_core.ids import UNASSIGNED_DIR
from jbod_core.messages import AlterPartitionRequest, AlterReassignmentsRequest
from tests.core.support import SESSION_TIMEOUT, TOPIC, Cluster, d


def _fence(cluster: Cluster, *broker_ids: int) -> None:
    """Fence brokers the way the controller does when their sessions expire."""
    for broker_id in cluster.image.brokers:
        if broker_id not in broker_ids:
            cluster.touch(broker_id)
    cluster.now += SESSION_TIMEOUT + 1
    for broker_id in cluster.image.brokers:
        if broker_id not in broker_ids:
            cluster.touch(broker_id)
    produced, fenced = brokers.expire_sessions(
        cluster.image, cluster.sessions, now=cluster.now, session_timeout=SESSION_TIMEOUT
    )
    assert fenced == sorted(broker_ids)
    cluster.apply(produced)


def _cluster() -> Cluster:
    """Brokers 1-4 (broker n owns dirs d(n), d(10+n)); topic t: partition 0 on [1, 2] led by 1,
    partition 1 on [2, 3] led by 2."""
    cluster = Cluster()
    for broker_id in (1, 2, 3, 4):
        cluster.add_broker(broker_id, [d(broker_id), d(10 + broker_id)])
    cluster.add_topic([([1, 2], [1, 2], 1, [d(1), d(2)]), ([2, 3], [2, 3], 2, [d(2), d(3)])])
    return cluster


def _reassign(
    cluster: Cluster, targets: dict[int, list[int] | None], *, allow_rf: bool = True
) -> tuple[list[records.Record], list[tuple[int, int]]]:
    request = AlterReassignmentsRequest.model_validate(
        {
            "partitions": [{"topic": "t", "partition": p, "replicas": r} for p, r in targets.items()],
            "allowReplicationFactorChange": allow_rf,
        }
    )
    produced, reply = reassignment.alter_reassignments(cluster.image, request)
    return produced, [(r.partition, r.error_code) for r in reply.results]


def _try_alter_isr(cluster: Cluster, index: int, new_isr: list[int]) -> tuple[list[records.Record], int]:
    """The leader's AlterPartition to `new_isr`: its records (not applied) and its error code."""
    part = cluster.part(index)
    request = AlterPartitionRequest.model_validate(
        {
            "brokerId": part.leader,
            "brokerEpoch": cluster.epoch(part.leader),
            "topics": [
                {
                    "topicId": str(TOPIC),
                    "partitions": [
                        {
                            "partitionIndex": index,
                            "leaderEpoch": part.leader_epoch,
                            "partitionEpoch": part.partition_epoch,
                            "newIsr": new_isr,
                        }
                    ],
                }
            ],
        }
    )
    produced, reply = isr.alter_partition(cluster.image, request)
    return produced, reply.topics[0].partitions[0].error_code


def _alter_isr(cluster: Cluster, index: int, new_isr: list[int]) -> list[records.Record]:
    produced, code = _try_alter_isr(cluster, index, new_isr)
    assert code == 0, code
    cluster.apply(produced)
    return produced


def test_starting_writes_the_merged_replicas_with_adding_and_removing() -> None:
    cluster = _cluster()
    produced, codes = _reassign(cluster, {0: [3, 2]})
    assert codes == [(0, 0)]
    assert produced == [
        records.PartitionChangeRecord(
            topic_id=TOPIC,
            partition_id=0,
            partition_epoch=1,
            replicas=(3, 2, 1),
            directories=(UNASSIGNED_DIR, d(2), d(1)),
            adding_replicas=(3,),
            removing_replicas=(1,),
        )
    ]
    cluster.apply(produced)
    part = cluster.part(0)
    # As in Kafka, the replicas are the target then the leaving ones: a cancel would give (2, 1).
    assert (part.leader, part.isr, part.target_replicas, part.original_replicas) == (
        1,
        (1, 2),
        (3, 2),
        (2, 1),
    )
    assert cluster.image.reassigning == {(TOPIC, 0)}
    assert (TOPIC, 0) in cluster.image.unassigned_by_broker[3]  # broker 3 places it like any new replica
    listed = reassignment.list_reassignments(cluster.image).reassignments
    assert [(o.topic, o.partition, o.replicas, o.adding_replicas, o.removing_replicas) for o in listed] == [
        ("t", 0, [3, 2, 1], [3], [1])
    ]


def test_an_adding_replica_joining_the_isr_completes_it_and_the_leaving_leader_hands_over() -> None:
    cluster = _cluster()
    cluster.apply(_reassign(cluster, {0: [3, 2]})[0])
    # Broker 3 places its new replica, then catches up and the leader adds it to the ISR.
    cluster.apply([records.PartitionChangeRecord(TOPIC, 0, 2, directories=(d(13), d(2), d(1)))])
    produced = _alter_isr(cluster, 0, [1, 2, 3])
    assert produced[1] == records.PartitionChangeRecord(
        topic_id=TOPIC,
        partition_id=0,
        partition_epoch=4,
        replicas=(3, 2),
        isr=(2, 3),
        leader=3,
        leader_epoch=1,
        directories=(d(13), d(2)),
        adding_replicas=(),
        removing_replicas=(),
    )
    part = cluster.part(0)
    assert (part.replicas, part.isr, part.leader, part.reassigning) == ((3, 2), (2, 3), 3, False)
    assert cluster.image.reassigning == set()
    assert (TOPIC, 0) not in cluster.image.replicas_by_broker.get(1, set())
    assert reassignment.list_reassignments(cluster.image).reassignments == []


def test_catching_up_partially_does_not_complete() -> None:
    cluster = _cluster()
    cluster.apply(_reassign(cluster, {0: [3, 4]})[0])
    produced = _alter_isr(cluster, 0, [1, 2, 3])  # 4 is still behind
    assert len(produced) == 1
    part = cluster.part(0)
    assert (part.replicas, part.adding_replicas, part.removing_replicas) == ((3, 4, 1, 2), (3, 4), (1, 2))
    assert part.leader == 1


def test_a_target_within_the_isr_completes_at_once() -> None:
    cluster = _cluster()
    produced, codes = _reassign(cluster, {0: [2]})  # shrink to one replica: 2 is in the ISR
    assert codes == [(0, 0)]
    assert len(produced) == 2
    cluster.apply(produced)
    part = cluster.part(0)
    assert (part.replicas, part.isr, part.leader, part.directories, part.reassigning) == (
        (2,),
        (2,),
        2,
        (d(2),),
        False,
    )


def test_reordering_the_replicas_keeps_the_leader() -> None:
    cluster = _cluster()
    produced, _ = _reassign(cluster, {0: [2, 1]})
    cluster.apply(produced)
    part = cluster.part(0)
    assert (part.replicas, part.leader, part.leader_epoch, part.reassigning) == ((2, 1), 1, 0, False)


def test_cancel_goes_back_to_the_original_replicas_and_dirs() -> None:
    cluster = _cluster()
    cluster.apply(_reassign(cluster, {0: [3, 4]})[0])
    produced, codes = _reassign(cluster, {0: None})
    assert codes == [(0, 0)]
    assert produced == [
        records.PartitionChangeRecord(
            topic_id=TOPIC,
            partition_id=0,
            partition_epoch=2,
            replicas=(1, 2),
            directories=(d(1), d(2)),
            adding_replicas=(),
            removing_replicas=(),
        )
    ]
    cluster.apply(produced)
    assert cluster.part(0).replicas == (1, 2) and not cluster.image.reassigning


def test_cancel_after_an_adding_replica_joined_the_isr_takes_it_out() -> None:
    cluster = _cluster()
    cluster.apply(_reassign(cluster, {0: [3, 4]})[0])
    _alter_isr(cluster, 0, [1, 2, 3])
    cluster.apply(_reassign(cluster, {0: None})[0])
    part = cluster.part(0)
    assert (part.replicas, part.isr, part.leader) == ((1, 2), (1, 2), 1)


def test_a_target_equal_to_the_original_replicas_cancels() -> None:
    cluster = _cluster()
    cluster.apply(_reassign(cluster, {0: [3, 4]})[0])
    produced, codes = _reassign(cluster, {0: [1, 2]})
    assert codes == [(0, 0)]
    cluster.apply(produced)
    assert cluster.part(0).replicas == (1, 2) and not cluster.image.reassigning


def test_a_new_target_replaces_the_running_reassignment() -> None:
    cluster = _cluster()
    cluster.apply(_reassign(cluster, {0: [3, 4]})[0])
    cluster.apply(_reassign(cluster, {0: [1, 4]})[0])
    part = cluster.part(0)
    assert (part.replicas, part.adding_replicas, part.removing_replicas) == ((1, 4, 2), (4,), (2,))


def test_refusals_write_nothing_and_name_the_problem() -> None:
    cluster = _cluster()
    produced, codes = _reassign(
        cluster,
        {0: [], 1: [3, 3]},
    )
    assert produced == [] and codes == [
        (0, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (1, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    ]
    assert _reassign(cluster, {0: [1, 9]}) == ([], [(0, ErrorCode.INVALID_REPLICA_ASSIGNMENT)])
    assert _reassign(cluster, {5: [1, 2]}) == ([], [(5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)])
    assert _reassign(cluster, {0: None}) == ([], [(0, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)])
    assert _reassign(cluster, {0: [3, 4, 1]}, allow_rf=False) == (
        [],
        [(0, ErrorCode.INVALID_REPLICATION_FACTOR)],
    )
    assert _reassign(cluster, {0: [1, 2]}) == ([], [(0, 0)])  # already there: nothing to write


def test_one_refused_partition_does_not_stop_the_others() -> None:
    cluster = _cluster()
    produced, codes = _reassign(cluster, {0: [9], 1: [3, 4]})
    assert codes == [(0, ErrorCode.INVALID_REPLICA_ASSIGNMENT), (1, 0)]
    assert [
        (r.partition_id, r.replicas) for r in produced if isinstance(r, records.PartitionChangeRecord)
    ] == [(1, (3, 4, 2))]


def test_a_fenced_target_broker_holds_the_reassignment_until_it_is_back() -> None:
    cluster = _cluster()
    _fence(cluster, 4)
    assert cluster.image.brokers[4].fenced
    cluster.apply(_reassign(cluster, {0: [1, 4]})[0])  # a registered, fenced broker may be a target
    part = cluster.part(0)
    assert part.adding_replicas == (4,)
    # The leader cannot take the fenced broker into the ISR: the reassignment waits.
    produced, code = _try_alter_isr(cluster, 0, [1, 2, 4])
    assert produced == [] and code == ErrorCode.INELIGIBLE_REPLICA
    assert cluster.part(0).reassigning
    # Back: the JBOD gate keeps it fenced while its new replica is UNASSIGNED; once placed it is
    # unfenced, joins the ISR, and the reassignment completes.
    cluster.touch(4)
    cluster.apply(cluster.heartbeat(4)[0])
    assert cluster.image.brokers[4].fenced
    epoch = cluster.part(0).partition_epoch
    cluster.apply([records.PartitionChangeRecord(TOPIC, 0, epoch + 1, directories=(d(1), d(4), d(2)))])
    cluster.apply(cluster.heartbeat(4)[0])
    assert not cluster.image.brokers[4].fenced
    _alter_isr(cluster, 0, [1, 2, 4])
    part = cluster.part(0)
    assert (part.replicas, part.isr, part.leader, part.reassigning) == ((1, 4), (1, 4), 1, False)


def test_a_target_dir_failing_during_catch_up_keeps_it_out_until_placed_again() -> None:
    cluster = _cluster()
    cluster.apply(_reassign(cluster, {0: [1, 3]})[0])
    epoch = cluster.part(0).partition_epoch
    cluster.apply([records.PartitionChangeRecord(TOPIC, 0, epoch + 1, directories=(d(1), d(13), d(2)))])
    # Broker 3's dir d(13) fails before its new replica caught up.
    produced, beat = cluster.heartbeat(3, offline=[d(13)])
    assert beat.error_code == 0
    cluster.apply(produced)
    part = cluster.part(0)
    assert part.reassigning and 3 not in part.isr and part.leader == 1
    produced, code = _try_alter_isr(cluster, 0, [1, 2, 3])
    assert produced == [] and code == ErrorCode.INELIGIBLE_REPLICA  # its dir is offline
    # As for any replica of a failed dir (KIP-858), it waits for a placement: here broker 3 places
    # it in its other dir (as after the volume is replaced), catches up: completed.
    cluster.apply(
        [
            records.PartitionChangeRecord(
                TOPIC, 0, cluster.part(0).partition_epoch + 1, directories=(d(1), d(3), d(2))
            )
        ]
    )
    _alter_isr(cluster, 0, [1, 2, 3])
    part = cluster.part(0)
    assert (part.replicas, part.directories, part.reassigning) == ((1, 3), (d(1), d(3)), False)


def test_cancel_that_would_need_an_unclean_election_is_refused() -> None:
    cluster = _cluster()
    cluster.apply(_reassign(cluster, {0: [3, 4]})[0])
    _alter_isr(cluster, 0, [1, 2, 3])
    # Brokers 1 and 2 leave the ISR (fenced); only the adding replica 3 is in sync.
    _fence(cluster, 1, 2)
    assert cluster.part(0).isr == (3,)
    assert _reassign(cluster, {0: None}) == ([], [(0, ErrorCode.INVALID_REPLICA_ASSIGNMENT)])


def test_records_round_trip_and_snapshots_keep_the_reassignment() -> None:
    cluster = _cluster()
    cluster.apply(_reassign(cluster, {0: [3, 4], 1: [4, 2]})[0])
    for record in cluster.log[-2:]:
        assert records.decode(record.TYPE, record.to_data()) == record
    assert cluster.replayed_from_scratch().canonical() == cluster.image.canonical()
    from jbod_core.image import ClusterImage

    snapshot = ClusterImage()
    for record in cluster.image.to_records():
        snapshot.replay(record, cluster.image.end_offset)
    snapshot.check_indexes()
    assert snapshot.canonical() == cluster.image.canonical()
    assert snapshot.reassigning == {(TOPIC, 0), (TOPIC, 1)}


def test_a_broker_with_every_dir_cordoned_takes_no_new_replica() -> None:
    cluster = _cluster()
    reg = cluster.image.brokers[4]
    cordon = records.BrokerRegistrationChangeRecord(
        broker_id=4, broker_epoch=reg.broker_epoch, cordoned_log_dirs=tuple(reg.log_dirs)
    )
    cluster.apply([cordon])
    assert _reassign(cluster, {0: [4, 2]}) == ([], [(0, ErrorCode.INVALID_REPLICA_ASSIGNMENT)])
    # One dir back in use: it may take replicas again; replicas it has may stay or reorder.
    cluster.apply(
        [
            records.BrokerRegistrationChangeRecord(
                broker_id=4, broker_epoch=reg.broker_epoch, cordoned_log_dirs=(reg.log_dirs[0],)
            )
        ]
    )
    produced, codes = _reassign(cluster, {0: [4, 2]})
    assert codes == [(0, 0)] and produced
