"""The cluster image: replay is the only mutation, impossible records fail loudly, snapshots round trip."""

from __future__ import annotations

import pytest

from jbod_core import records
from jbod_core.ids import LOST_DIR, UNASSIGNED_DIR, Uuid
from jbod_core.image import BrokerRegistration, ClusterImage, PartitionRegistration, ReplayError
from tests.core.support import TOPIC, Cluster, change, d, incarnation


def _register(
    broker_id: int, epoch: int, dirs: tuple[Uuid, ...], **kwargs: object
) -> records.RegisterBrokerRecord:
    return records.RegisterBrokerRecord(
        broker_id=broker_id,
        broker_epoch=epoch,
        incarnation_id=incarnation(broker_id),
        log_dirs=dirs,
        **kwargs,  # type: ignore[arg-type]
    )


def _partition(index: int = 0, **kwargs: object) -> records.PartitionRecord:
    fields: dict[str, object] = {
        "topic_id": TOPIC,
        "partition_id": index,
        "replicas": (1, 2),
        "isr": (1, 2),
        "leader": 1,
        "leader_epoch": 0,
        "partition_epoch": 0,
        "directories": (d(1), d(2)),
    }
    fields.update(kwargs)
    return records.PartitionRecord(**fields)  # type: ignore[arg-type]


def _two_brokers_one_topic() -> Cluster:
    cluster = Cluster()
    cluster.apply(
        [
            _register(1, 0, (d(1), d(11)), fenced=False),
            _register(2, 1, (d(2),), fenced=False),
            records.TopicRecord(name="t", topic_id=TOPIC, configs={"min.insync.replicas": "1"}),
            _partition(0),
            _partition(1, replicas=(2, 1), isr=(2,), leader=2, directories=(d(2), UNASSIGNED_DIR)),
        ]
    )
    return cluster


def test_replay_builds_state_and_indexes() -> None:
    cluster = _two_brokers_one_topic()
    image = cluster.image
    assert image.end_offset == 5
    assert image.brokers[1] == BrokerRegistration(
        broker_id=1,
        broker_epoch=0,
        incarnation_id=incarnation(1),
        log_dirs=tuple(sorted((d(1), d(11)))),
        offline_log_dirs=(),
        has_offline_log_dirs=False,
        fenced=False,
        in_controlled_shutdown=False,
        listeners=(),
        rack=None,
    )
    assert image.topic_ids_by_name == {"t": TOPIC}
    assert image.partition((TOPIC, 1)) == PartitionRegistration(
        replicas=(2, 1),
        isr=(2,),
        directories=(d(2), UNASSIGNED_DIR),
        leader=2,
        leader_epoch=0,
        partition_epoch=0,
    )
    assert image.replicas_by_broker == {1: {(TOPIC, 0), (TOPIC, 1)}, 2: {(TOPIC, 0), (TOPIC, 1)}}
    assert image.replicas_by_dir == {(1, d(1)): {(TOPIC, 0)}, (2, d(2)): {(TOPIC, 0), (TOPIC, 1)}}
    assert image.unassigned_by_broker == {1: {(TOPIC, 1)}}
    assert image.unassigned_count(1) == 1
    assert image.leaders_by_broker == {1: {(TOPIC, 0)}, 2: {(TOPIC, 1)}}
    assert image.leader_count(2) == 1
    assert image.leaderless == set()
    assert image.dir_owner == {d(1): 1, d(11): 1, d(2): 2}
    assert image.partition_count == 2


def test_registration_sorts_dirs_in_signed_order() -> None:
    image = ClusterImage()
    low, high = Uuid(-5, 0), Uuid(3, 0)
    image.replay(_register(1, 0, (high, low)), 0)
    assert image.brokers[1].log_dirs == (low, high)


def test_partition_change_replay() -> None:
    cluster = _two_brokers_one_topic()
    cluster.apply([change(0, epoch=1, isr=[2], leader=2, leader_epoch=1)])
    assert cluster.part(0) == PartitionRegistration(
        replicas=(1, 2), isr=(2,), directories=(d(1), d(2)), leader=2, leader_epoch=1, partition_epoch=1
    )
    # A leader without an explicit epoch bumps the leader epoch by one.
    cluster.apply(
        [records.PartitionChangeRecord(topic_id=TOPIC, partition_id=0, partition_epoch=2, leader=-1)]
    )
    assert (cluster.part(0).leader, cluster.part(0).leader_epoch) == (-1, 2)
    assert cluster.image.leaderless == {(TOPIC, 0)}
    # Changing only directories leaves the leader epoch alone.
    cluster.apply([change(0, epoch=3, directories=[LOST_DIR, d(2)])])
    assert cluster.part(0).leader_epoch == 2
    assert (1, d(1)) not in cluster.image.replicas_by_dir


def test_partition_change_of_replicas_keeps_dirs_of_kept_replicas() -> None:
    cluster = _two_brokers_one_topic()
    cluster.apply(
        [records.PartitionChangeRecord(topic_id=TOPIC, partition_id=0, partition_epoch=1, replicas=(2, 3))]
    )
    assert cluster.part(0).directories == (d(2), UNASSIGNED_DIR)
    assert cluster.image.unassigned_by_broker[3] == {(TOPIC, 0)}


def test_broker_change_replay() -> None:
    cluster = _two_brokers_one_topic()
    cluster.apply(
        [
            records.BrokerRegistrationChangeRecord(
                broker_id=1, broker_epoch=0, log_dirs=(d(11),), offline_log_dirs=(d(1),)
            )
        ]
    )
    reg = cluster.image.brokers[1]
    assert (reg.log_dirs, reg.offline_log_dirs, reg.fenced) == ((d(11),), (d(1),), False)
    assert cluster.image.dir_owner == {d(11): 1, d(2): 2}
    cluster.apply(
        [records.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=0, in_controlled_shutdown=True)]
    )
    assert cluster.image.controlled_shutdown_offsets == {1: 5 + 1}
    cluster.apply(
        [
            records.BrokerRegistrationChangeRecord(
                broker_id=1, broker_epoch=0, fenced=True, in_controlled_shutdown=False
            )
        ]
    )
    assert cluster.image.controlled_shutdown_offsets == {}
    assert cluster.image.brokers[1].fenced


def test_unregister_and_remove_topic_replay() -> None:
    cluster = _two_brokers_one_topic()
    cluster.apply(
        [
            records.UnregisterBrokerRecord(broker_id=2, broker_epoch=1),
            records.RemoveTopicRecord(topic_id=TOPIC),
        ]
    )
    assert set(cluster.image.brokers) == {1}
    assert cluster.image.dir_owner == {d(1): 1, d(11): 1}
    assert cluster.image.topics == {}
    assert cluster.image.topic_ids_by_name == {}
    assert cluster.image.replicas_by_broker == {}
    assert cluster.image.partition_count == 0


def test_a_freed_dir_can_be_registered_by_another_broker() -> None:
    cluster = _two_brokers_one_topic()
    cluster.apply(
        [
            records.BrokerRegistrationChangeRecord(
                broker_id=2, broker_epoch=1, log_dirs=(), offline_log_dirs=(d(2),)
            )
        ]
    )
    cluster.apply([_register(3, 7, (d(2),))])
    assert cluster.image.dir_owner[d(2)] == 3


@pytest.mark.parametrize(
    ("record", "match"),
    [
        (
            records.BrokerRegistrationChangeRecord(broker_id=9, broker_epoch=0, fenced=True),
            "unregistered broker 9",
        ),
        (records.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=3, fenced=True), "epoch"),
        (records.UnregisterBrokerRecord(broker_id=9, broker_epoch=0), "broker 9"),
        (records.UnregisterBrokerRecord(broker_id=1, broker_epoch=1), "broker 1"),
        (_register(3, 9, (d(3), d(2))), "already online in broker 2"),
        (
            records.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=0, log_dirs=(d(2),)),
            "already online",
        ),
        (records.TopicRecord(name="t", topic_id=Uuid(5, 5)), "name t exists"),
        (records.TopicRecord(name="u", topic_id=TOPIC), "exists already"),
        (_partition(0), "exists already"),
        (_partition(0, topic_id=Uuid(5, 5)), "unknown topic"),
        (_partition(2, directories=(d(1),)), "directories"),
        (change(0, epoch=2, isr=[1]), "expected 1"),  # skips an epoch
        (change(0, epoch=0, isr=[1]), "expected 1"),  # repeats one
        (change(5, epoch=1, isr=[1]), "unknown partition"),
        (change(0, epoch=1, topic_id=Uuid(5, 5)), "unknown partition"),
        (change(0, epoch=1, directories=[d(1)]), "directories"),
        (records.RemoveTopicRecord(topic_id=Uuid(5, 5)), "unknown topic"),
    ],
)
def test_replay_rejects_impossible_records(record: records.Record, match: str) -> None:
    cluster = _two_brokers_one_topic()
    with pytest.raises(ReplayError, match=match):
        cluster.image.replay(record, cluster.image.end_offset)


def test_replay_rejects_an_offset_behind_the_image() -> None:
    cluster = _two_brokers_one_topic()
    with pytest.raises(ReplayError, match="behind"):
        cluster.image.replay(change(0, epoch=1, isr=[1]), 2)
    # Snapshot records all carry the snapshot's last offset: the same offset again is fine.
    cluster.image.replay(change(0, epoch=1, isr=[1]), 4)
    assert cluster.image.end_offset == 5


def test_offline_replicas() -> None:
    cluster = _two_brokers_one_topic()
    image = cluster.image
    assert image.offline_replicas(cluster.part(0)) == []
    cluster.apply(
        [
            records.BrokerRegistrationChangeRecord(
                broker_id=1, broker_epoch=0, log_dirs=(d(11),), offline_log_dirs=(d(1),)
            )
        ]
    )
    assert image.offline_replicas(cluster.part(0)) == [1]
    assert image.offline_replicas(cluster.part(1)) == []  # UNASSIGNED is online
    cluster.apply([records.BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=1, fenced=True)])
    assert image.offline_replicas(cluster.part(1)) == [2]
    cluster.apply([records.UnregisterBrokerRecord(broker_id=2, broker_epoch=1)])
    assert image.offline_replicas(cluster.part(0)) == [1, 2]


def _rich_cluster() -> Cluster:
    cluster = _two_brokers_one_topic()
    cluster.apply(
        [
            change(0, epoch=1, isr=[2], leader=2, leader_epoch=1),
            records.BrokerRegistrationChangeRecord(
                broker_id=1, broker_epoch=0, log_dirs=(d(11),), offline_log_dirs=(d(1),)
            ),
            records.BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=1, in_controlled_shutdown=True),
            records.TopicRecord(name="other", topic_id=Uuid(-9, 9), configs={}),
            records.PartitionRecord(
                topic_id=Uuid(-9, 9),
                partition_id=0,
                replicas=(1,),
                isr=(1,),
                leader=-1,
                leader_epoch=3,
                partition_epoch=5,
                directories=(LOST_DIR,),
            ),
            _register(3, 10, (d(3),), listeners=(records.Listener("PLAINTEXT", "h", 1),), rack="r"),
        ]
    )
    return cluster


def test_to_records_round_trip() -> None:
    cluster = _rich_cluster()
    snapshot = cluster.image.to_records()
    fresh = ClusterImage()
    for offset, record in enumerate(snapshot):
        fresh.replay(record, offset)
    fresh.check_indexes()
    assert fresh.canonical() == cluster.image.canonical()
    assert fresh.dir_owner == cluster.image.dir_owner
    assert fresh.topic_ids_by_name == cluster.image.topic_ids_by_name
    # All snapshot records at one offset (how the controller loads a snapshot).
    at_one_offset = ClusterImage()
    for record in snapshot:
        at_one_offset.replay(record, 99)
    assert at_one_offset.canonical() == cluster.image.canonical()
    assert at_one_offset.end_offset == 100


def test_to_records_is_the_exact_snapshot() -> None:
    cluster = _rich_cluster()
    kinds = [type(r).__name__ for r in cluster.image.to_records()]
    assert kinds == [
        "RegisterBrokerRecord",
        "RegisterBrokerRecord",
        "RegisterBrokerRecord",
        "TopicRecord",
        "PartitionRecord",
        "PartitionRecord",
        "TopicRecord",
        "PartitionRecord",
    ]
    register_1 = cluster.image.to_records()[0]
    assert register_1 == records.RegisterBrokerRecord(
        broker_id=1,
        broker_epoch=0,
        incarnation_id=incarnation(1),
        log_dirs=(d(11),),
        has_offline_log_dirs=False,
        fenced=False,
        in_controlled_shutdown=False,
        listeners=(),
        rack=None,
        offline_log_dirs=(d(1),),
    )


def test_canonical_ignores_history_but_not_state() -> None:
    a, b = _two_brokers_one_topic(), _two_brokers_one_topic()
    assert a.image.canonical() == b.image.canonical()
    b.apply([change(1, epoch=1, isr=[2])])  # epoch moved although the ISR is unchanged
    assert a.image.canonical() != b.image.canonical()


def test_copy_for_snapshot_is_independent_and_cheap() -> None:
    cluster = _rich_cluster()
    copy = cluster.image.copy_for_snapshot()
    assert copy.canonical() == cluster.image.canonical()
    assert copy.end_offset == cluster.image.end_offset
    assert copy.brokers[1] is cluster.image.brokers[1]  # frozen values are shared
    assert copy.to_records() == cluster.image.to_records()
    cluster.apply([change(0, epoch=2, leader=-1), records.RemoveTopicRecord(topic_id=Uuid(-9, 9))])
    assert copy.canonical() != cluster.image.canonical()
    assert copy.partition((TOPIC, 0)) == PartitionRegistration(
        replicas=(1, 2), isr=(2,), directories=(d(1), d(2)), leader=2, leader_epoch=1, partition_epoch=1
    )
    assert Uuid(-9, 9) in copy.topics


def test_check_indexes_detects_drift() -> None:
    cluster = _two_brokers_one_topic()
    cluster.image.leaders_by_broker[1].discard((TOPIC, 0))
    with pytest.raises(AssertionError, match="leaders_by_broker"):
        cluster.image.check_indexes()
    cluster = _two_brokers_one_topic()
    cluster.image.dir_owner[d(99)] = 1
    with pytest.raises(AssertionError, match="dir_owner"):
        cluster.image.check_indexes()
