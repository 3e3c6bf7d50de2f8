"""The shared leader/ISR rule (protocol §3.6) and the draft it works on."""

from __future__ import annotations

from jbod_core import election, records
from jbod_core.draft import Draft
from jbod_core.ids import LOST_DIR, MIGRATING_DIR, UNASSIGNED_DIR
from tests.core.support import TOPIC, Cluster, change, d

KEY = (TOPIC, 0)


def _cluster() -> Cluster:
    """Brokers 1, 2, 3 unfenced; partition 0 = replicas [1,2,3], ISR [1,2,3], leader 2."""
    cluster = Cluster()
    for broker_id in (1, 2, 3):
        cluster.add_broker(broker_id, [d(broker_id)])
    cluster.add_topic([([1, 2, 3], [1, 2, 3], 2, [d(1), d(2), d(3)])])
    return cluster


def test_no_change_is_none() -> None:
    cluster = _cluster()
    assert election.partition_change(Draft(cluster.image), KEY, cluster.part()) is None
    assert election.partition_change(Draft(cluster.image), KEY, cluster.part(), isr=[1, 2, 3]) is None
    assert election.partition_change(Draft(cluster.image), KEY, cluster.part(), remove=7) is None


def test_current_leader_stays_if_acceptable() -> None:
    cluster = _cluster()
    record = election.partition_change(Draft(cluster.image), KEY, cluster.part(), remove=3)
    assert record == change(epoch=1, isr=[1, 2])


def test_else_first_acceptable_replica_in_replica_order() -> None:
    cluster = _cluster()
    record = election.partition_change(Draft(cluster.image), KEY, cluster.part(), remove=2)
    assert record == change(epoch=1, isr=[1, 3], leader=1, leader_epoch=1)
    record = election.partition_change(
        Draft(cluster.image), KEY, cluster.part(), remove=2, directories=[LOST_DIR, d(2), d(3)]
    )
    assert record == change(epoch=1, isr=[1, 3], leader=3, leader_epoch=1, directories=[LOST_DIR, d(2), d(3)])


def test_reserved_online_dirs_are_acceptable() -> None:
    cluster = _cluster()
    for directory in (UNASSIGNED_DIR, MIGRATING_DIR):
        record = election.partition_change(
            Draft(cluster.image), KEY, cluster.part(), remove=2, directories=[directory, d(2), d(3)]
        )
        assert record is not None and record.leader == 1


def test_last_isr_member_stays_listed_without_a_leader() -> None:
    cluster = _cluster()
    cluster.apply([change(epoch=1, isr=[2])])
    record = election.partition_change(Draft(cluster.image), KEY, cluster.part(), remove=2)
    assert record == change(epoch=2, leader=-1, leader_epoch=1)


def test_leader_outside_the_target_isr_is_replaced() -> None:
    cluster = _cluster()
    record = election.partition_change(Draft(cluster.image), KEY, cluster.part(), isr=[3, 1])
    assert record == change(epoch=1, isr=[3, 1], leader=1, leader_epoch=1)


def test_draft_sees_its_own_records_and_leaves_the_image_alone() -> None:
    cluster = _cluster()
    before = cluster.image.canonical()
    draft = Draft(cluster.image)
    assert draft.next_record_offset == cluster.image.end_offset
    election.fence_broker(draft, 2)
    assert draft.records == [
        change(epoch=1, isr=[1, 3], leader=1, leader_epoch=1),
        records.BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=cluster.epoch(2), fenced=True),
    ]
    assert draft.next_record_offset == cluster.image.end_offset + 2
    part = draft.partition(KEY)
    reg = draft.broker(2)
    assert part is not None and part.leader == 1 and part.partition_epoch == 1
    assert reg is not None and reg.fenced
    assert cluster.image.canonical() == before
    # A second step of the same decision builds on the first.
    election.fence_broker(draft, 1)
    assert draft.records[2] == change(epoch=2, isr=[3], leader=3, leader_epoch=2)
    draft.append(records.UnregisterBrokerRecord(broker_id=1, broker_epoch=cluster.epoch(1)))
    assert draft.broker(1) is None
    cluster.apply(draft.records)
    assert (cluster.part().isr, cluster.part().leader) == ((3,), 3)


def test_offline_dirs_touch_only_their_partitions() -> None:
    cluster = Cluster()
    cluster.add_broker(1, [d(1), d(11)])
    cluster.add_broker(2, [d(2)])
    cluster.add_topic([([1, 2], [1, 2], 1, [d(1), d(2)]), ([1, 2], [1, 2], 1, [d(11), d(2)])])
    draft = Draft(cluster.image)
    election.handle_offline_dirs(draft, 1, [d(11)])
    assert draft.records == [
        records.BrokerRegistrationChangeRecord(
            broker_id=1, broker_epoch=cluster.epoch(1), log_dirs=(d(1),), offline_log_dirs=(d(11),)
        ),
        change(1, epoch=1, isr=[2], leader=2, leader_epoch=1),
    ]
