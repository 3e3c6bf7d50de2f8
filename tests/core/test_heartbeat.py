"""BrokerHeartbeat decisions (protocol §3.2, Kafka's state machine of kafka-implementation-notes §4.2).

Every row of the state table, the JBOD unfencing gate, offline dirs, session expiry and
unregistration, each asserting the exact records and then the replayed state.
"""

from __future__ import annotations

import pytest

from jbod_core import brokers, records
from jbod_core.errors import ErrorCode
from jbod_core.ids import LOST_DIR, UNASSIGNED_DIR, Uuid
from jbod_core.sessions import Session
from tests.core.support import SESSION_TIMEOUT, TOPIC, Cluster, change, d


def _fence(
    broker_id: int, epoch: int, *, was_in_controlled_shutdown: bool = False
) -> records.BrokerRegistrationChangeRecord:
    return records.BrokerRegistrationChangeRecord(
        broker_id=broker_id,
        broker_epoch=epoch,
        fenced=True,
        in_controlled_shutdown=False if was_in_controlled_shutdown else None,
    )


def _unfence(broker_id: int, epoch: int) -> records.BrokerRegistrationChangeRecord:
    return records.BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=epoch, fenced=False)


def _offline(
    broker_id: int, epoch: int, online: tuple[Uuid, ...], offline: tuple[Uuid, ...]
) -> records.BrokerRegistrationChangeRecord:
    return records.BrokerRegistrationChangeRecord(
        broker_id=broker_id, broker_epoch=epoch, log_dirs=online, offline_log_dirs=offline
    )


# -- errors ------------------------------------------------------------------------------------


def test_unknown_broker_is_77() -> None:
    cluster = Cluster()
    produced, reply = cluster.heartbeat(3, epoch=0, offset=0)
    assert produced == []
    assert reply.error_code == ErrorCode.STALE_BROKER_EPOCH  # 77


@pytest.mark.parametrize("delta", [-1, 1])
def test_wrong_epoch_is_77(delta: int) -> None:
    cluster = Cluster()
    cluster.add_broker(0, [d(0)])
    epoch = cluster.add_broker(1, [d(1)], unfence=False)
    produced, reply = cluster.heartbeat(1, epoch=epoch + delta)
    assert produced == []
    assert reply.error_code == 77


@pytest.mark.parametrize(
    "offline",
    [
        [d(9)],  # never registered anywhere
        [d(2)],  # another broker's dir
        [LOST_DIR],
        [UNASSIGNED_DIR],
        [d(1), d(9)],  # one good, one unknown: rejected whole
    ],
)
def test_offline_dir_never_registered_is_57_and_nothing_happens(offline: list[Uuid]) -> None:
    cluster = Cluster()
    cluster.add_broker(1, [d(1), d(11)], unfence=False)
    cluster.add_broker(2, [d(2)])
    cluster.add_topic([([1, 2], [1, 2], 2, [d(1), d(2)])])
    # Without the unknown dir this heartbeat would unfence broker 1 and take d(1) offline.
    produced, reply = cluster.heartbeat(1, offline=offline)
    assert produced == []
    assert reply.error_code == ErrorCode.LOG_DIR_NOT_FOUND  # 57
    assert reply.is_fenced
    if d(2) not in offline:
        produced, reply = cluster.heartbeat(2, want_fence=True, offline=offline)
        assert produced == []
        assert reply.error_code == 57


# -- FENCED ------------------------------------------------------------------------------------


def test_fenced_caught_up_unfences() -> None:
    cluster = Cluster()
    epoch = cluster.add_broker(1, [d(1)], unfence=False)
    produced, reply = cluster.heartbeat(1, offset=epoch)
    assert produced == [_unfence(1, epoch)]
    assert (reply.error_code, reply.is_caught_up, reply.is_fenced, reply.should_shut_down) == (
        0,
        True,
        False,
        False,
    )
    cluster.apply(produced)
    assert not cluster.image.brokers[1].fenced


def test_fenced_not_caught_up_stays_fenced() -> None:
    cluster = Cluster()
    epoch = cluster.add_broker(1, [d(1)], unfence=False)
    produced, reply = cluster.heartbeat(1, offset=epoch - 1)
    assert produced == []
    assert (reply.is_caught_up, reply.is_fenced, reply.should_shut_down) == (False, True, False)


def test_fenced_wanting_fence_stays_fenced() -> None:
    cluster = Cluster()
    cluster.add_broker(1, [d(1)], unfence=False)
    produced, reply = cluster.heartbeat(1, want_fence=True)
    assert produced == []
    assert (reply.is_caught_up, reply.is_fenced, reply.should_shut_down) == (True, True, False)


@pytest.mark.parametrize("want_fence", [False, True])
def test_fenced_wanting_shutdown_shuts_down_now(want_fence: bool) -> None:
    cluster = Cluster()
    cluster.add_broker(1, [d(1)], unfence=False)
    produced, reply = cluster.heartbeat(1, want_fence=want_fence, want_shut_down=True)
    assert produced == []
    assert (reply.is_fenced, reply.should_shut_down) == (True, True)


def test_unfencing_elects_the_broker_where_it_is_in_the_isr_and_its_dir_is_online() -> None:
    cluster = Cluster()
    epoch = cluster.add_broker(1, [d(1), d(11)])
    cluster.add_broker(2, [d(2)])
    cluster.add_topic(
        [
            ([1, 2], [1], -1, [d(1), d(2)]),  # elected
            ([2, 1], [2, 1], 2, [d(2), d(11)]),  # has a leader: untouched
            ([1, 2], [2], -1, [d(1), LOST_DIR]),  # 1 not in the ISR: not elected
            ([1], [1], -1, [LOST_DIR]),  # dir offline: not elected
            ([1], [1], -1, [UNASSIGNED_DIR]),  # UNASSIGNED counts as online
        ]
    )
    cluster.apply(cluster.heartbeat(1, want_fence=True)[0])
    assert cluster.image.brokers[1].fenced
    # Partition 4 is UNASSIGNED on a multi-dir broker: the gate keeps it fenced.
    produced, reply = cluster.heartbeat(1)
    assert (produced, reply.is_fenced) == ([], True)
    # Broker 1 learns the placement of partition 4 (its leader stays -1 while 1 is fenced).
    cluster.apply([change(4, epoch=1, directories=[d(11)])])
    produced, reply = cluster.heartbeat(1)
    assert produced == [
        _unfence(1, epoch),
        change(0, epoch=1, leader=1, leader_epoch=1),
        change(4, epoch=2, leader=1, leader_epoch=1),
    ]
    assert not reply.is_fenced
    cluster.apply(produced)
    assert [p.leader for _, p in sorted(cluster.image.topics[TOPIC].partitions.items())] == [1, 2, -1, -1, 1]


def test_unfencing_elects_across_topics_in_signed_topic_id_order() -> None:
    cluster = Cluster()
    epoch = cluster.add_broker(1, [d(1)], unfence=False)
    negative = Uuid(-5, 0)
    cluster.add_topic([([1], [1], -1, [d(1)])], topic_id=TOPIC, name="a")
    cluster.add_topic([([1], [1], -1, [d(1)])], topic_id=negative, name="b")
    produced, _ = cluster.heartbeat(1)
    assert produced == [
        _unfence(1, epoch),
        change(0, epoch=1, leader=1, leader_epoch=1, topic_id=negative),
        change(0, epoch=1, leader=1, leader_epoch=1, topic_id=TOPIC),
    ]


# -- the JBOD gate -------------------------------------------------------------------------------


def test_multi_dir_broker_with_unassigned_replicas_stays_fenced() -> None:
    cluster = Cluster()
    epoch = cluster.add_broker(1, [d(1), d(11)], unfence=False)
    cluster.add_topic([([1], [1], -1, [UNASSIGNED_DIR]), ([1], [1], -1, [d(1)])])
    produced, reply = cluster.heartbeat(1)
    assert produced == []
    assert (reply.is_caught_up, reply.is_fenced) == (True, True)
    cluster.apply([change(0, epoch=1, directories=[d(11)])])
    produced, reply = cluster.heartbeat(1)
    assert produced == [
        _unfence(1, epoch),
        change(0, epoch=2, leader=1, leader_epoch=1),
        change(1, epoch=1, leader=1, leader_epoch=1),
    ]
    assert not reply.is_fenced


def test_gate_counts_dirs_the_registration_listed_not_the_online_ones() -> None:
    cluster = Cluster()
    cluster.add_broker(1, [d(1), d(11)])
    cluster.apply(cluster.heartbeat(1, offline=[d(11)])[0])
    cluster.apply(cluster.heartbeat(1, want_fence=True)[0])
    cluster.add_topic([([1], [1], -1, [UNASSIGNED_DIR])])
    assert cluster.image.brokers[1].log_dirs == (d(1),)
    produced, reply = cluster.heartbeat(1)
    assert (produced, reply.is_fenced) == ([], True)


def test_single_dir_broker_is_not_gated() -> None:
    cluster = Cluster()
    epoch = cluster.add_broker(1, [d(1)], unfence=False)
    cluster.add_topic([([1], [1], -1, [UNASSIGNED_DIR])])
    produced, reply = cluster.heartbeat(1)
    assert produced == [_unfence(1, epoch), change(0, epoch=1, leader=1, leader_epoch=1)]
    assert not reply.is_fenced


def test_gate_does_not_fence_an_unfenced_broker_that_gets_unassigned_replicas() -> None:
    cluster = Cluster()
    cluster.add_broker(1, [d(1), d(11)])
    cluster.add_topic([([1], [1], 1, [UNASSIGNED_DIR])])
    produced, reply = cluster.heartbeat(1)
    assert produced == []
    assert (reply.is_fenced, reply.should_shut_down) == (False, False)


# -- UNFENCED ----------------------------------------------------------------------------------


def _three_brokers() -> Cluster:
    """Brokers 1, 2, 3 unfenced; partitions led by 1 (with and without followers) and by 2."""
    cluster = Cluster()
    for broker_id in (1, 2, 3):
        cluster.add_broker(broker_id, [d(broker_id)])
    cluster.add_topic(
        [
            ([1, 2, 3], [1, 2, 3], 1, [d(1), d(2), d(3)]),  # 0: leadership moves to 2
            ([3, 1, 2], [1, 2], 1, [d(3), d(1), d(2)]),  # 1: 3 not in ISR: moves to 2
            ([1], [1], 1, [d(1)]),  # 2: last ISR member, no leader
            ([2, 1], [2, 1], 2, [d(2), d(1)]),  # 3: 1 leaves the ISR
            ([2, 3], [2, 3], 2, [d(2), d(3)]),  # 4: untouched
        ]
    )
    return cluster


def _removal_of_broker_1() -> list[records.PartitionChangeRecord]:
    return [
        change(0, epoch=1, isr=[2, 3], leader=2, leader_epoch=1),
        change(1, epoch=1, isr=[2], leader=2, leader_epoch=1),
        change(2, epoch=1, leader=-1, leader_epoch=1),
        change(3, epoch=1, isr=[2]),
    ]


def _after_removal_of_broker_1(cluster: Cluster) -> None:
    parts = cluster.image.topics[TOPIC].partitions
    assert [(parts[i].isr, parts[i].leader, parts[i].leader_epoch) for i in range(5)] == [
        ((2, 3), 2, 1),
        ((2,), 2, 1),
        ((1,), -1, 1),
        ((2,), 2, 0),
        ((2, 3), 2, 0),
    ]
    assert cluster.image.leader_count(1) == 0
    assert cluster.image.leaderless == {(TOPIC, 2)}


def test_unfenced_wanting_fence_is_fenced() -> None:
    cluster = _three_brokers()
    epoch = cluster.epoch(1)
    produced, reply = cluster.heartbeat(1, want_fence=True)
    assert produced == [*_removal_of_broker_1(), _fence(1, epoch)]
    assert (reply.is_fenced, reply.should_shut_down) == (True, False)
    cluster.apply(produced)
    _after_removal_of_broker_1(cluster)
    assert cluster.image.brokers[1].fenced


def test_unfenced_wanting_fence_and_shutdown_shuts_down_now() -> None:
    cluster = _three_brokers()
    epoch = cluster.epoch(1)
    produced, reply = cluster.heartbeat(1, want_fence=True, want_shut_down=True)
    assert produced == [*_removal_of_broker_1(), _fence(1, epoch)]
    assert (reply.is_fenced, reply.should_shut_down) == (True, True)
    cluster.apply(produced)
    _after_removal_of_broker_1(cluster)


def test_unfenced_leader_wanting_shutdown_enters_controlled_shutdown() -> None:
    cluster = _three_brokers()
    epoch = cluster.epoch(1)
    produced, reply = cluster.heartbeat(1, want_shut_down=True)
    assert produced == [
        records.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=epoch, in_controlled_shutdown=True),
        *_removal_of_broker_1(),
    ]
    assert (reply.is_fenced, reply.should_shut_down) == (False, False)
    cluster.apply(produced)
    _after_removal_of_broker_1(cluster)
    reg = cluster.image.brokers[1]
    assert (reg.fenced, reg.in_controlled_shutdown) == (False, True)


def test_unfenced_non_leader_wanting_shutdown_shuts_down_now() -> None:
    cluster = _three_brokers()
    epoch = cluster.epoch(3)
    produced, reply = cluster.heartbeat(3, want_shut_down=True)
    assert produced == [change(0, epoch=1, isr=[1, 2]), change(4, epoch=1, isr=[2]), _fence(3, epoch)]
    assert (reply.is_fenced, reply.should_shut_down) == (True, True)
    cluster.apply(produced)
    assert cluster.image.brokers[3].fenced


def test_unfenced_otherwise_stays_unfenced_and_writes_nothing() -> None:
    cluster = _three_brokers()
    produced, reply = cluster.heartbeat(1)
    assert produced == []
    assert (reply.error_code, reply.is_caught_up, reply.is_fenced, reply.should_shut_down) == (
        0,
        True,
        False,
        False,
    )
    produced, reply = cluster.heartbeat(3, offset=cluster.epoch(3) - 1)  # lagging does not fence
    assert produced == []
    assert (reply.is_caught_up, reply.is_fenced) == (False, False)


# -- CONTROLLED_SHUTDOWN ----------------------------------------------------------------------


def _in_controlled_shutdown() -> tuple[Cluster, int]:
    cluster = _three_brokers()
    cluster.apply(cluster.heartbeat(1, want_shut_down=True)[0])
    started = cluster.image.controlled_shutdown_offsets[1]
    for broker_id in (1, 2, 3):
        cluster.touch(broker_id, metadata_offset=started - 1)
    return cluster, started


def test_controlled_shutdown_waits_until_active_brokers_have_seen_it() -> None:
    cluster, started = _in_controlled_shutdown()
    produced, reply = cluster.heartbeat(1, want_shut_down=True)
    assert produced == []
    assert (reply.is_fenced, reply.should_shut_down) == (False, False)
    cluster.touch(2, metadata_offset=started)
    assert cluster.heartbeat(1, want_shut_down=True)[0] == []
    cluster.touch(3, metadata_offset=started + 5)
    epoch = cluster.epoch(1)
    produced, reply = cluster.heartbeat(1, want_shut_down=True)
    assert produced == [_fence(1, epoch, was_in_controlled_shutdown=True)]
    assert (reply.is_fenced, reply.should_shut_down) == (True, True)
    cluster.apply(produced)
    reg = cluster.image.brokers[1]
    assert (reg.fenced, reg.in_controlled_shutdown) == (True, False)
    assert cluster.image.controlled_shutdown_offsets == {}


def test_controlled_shutdown_ignores_fenced_brokers_lagging() -> None:
    cluster, started = _in_controlled_shutdown()
    cluster.touch(2, metadata_offset=started)
    cluster.apply(cluster.heartbeat(3, want_fence=True)[0])  # 3 fenced: no longer waited for
    produced, reply = cluster.heartbeat(1)
    assert produced == [_fence(1, cluster.epoch(1), was_in_controlled_shutdown=True)]
    assert reply.should_shut_down


def test_controlled_shutdown_with_leaderships_stays() -> None:
    cluster = Cluster()
    epoch = cluster.add_broker(1, [d(1)])
    cluster.add_topic([([1], [1], 1, [d(1)])])
    # A controlled-shutdown record that has not (yet) moved the leadership.
    cluster.apply(
        [records.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=epoch, in_controlled_shutdown=True)]
    )
    cluster.touch(1)
    produced, reply = cluster.heartbeat(1, want_shut_down=True)
    assert produced == []
    assert (reply.is_fenced, reply.should_shut_down) == (False, False)


# -- offline dirs ------------------------------------------------------------------------------


def _jbod_cluster() -> Cluster:
    """Broker 1 with dirs d1, d11; brokers 2 and 3 with one dir each."""
    cluster = Cluster()
    cluster.add_broker(1, [d(1), d(11)])
    cluster.add_broker(2, [d(2)])
    cluster.add_broker(3, [d(3)])
    cluster.add_topic(
        [
            ([1, 2, 3], [1, 2, 3], 1, [d(1), d(2), d(3)]),  # 0: in d1, leads: moves to 2
            ([2, 1], [2, 1], 2, [d(2), d(1)]),  # 1: in d1, follower: leaves ISR
            ([1], [1], 1, [d(1)]),  # 2: in d1, last ISR member: stays listed, leader -1
            ([1, 2], [1, 2], 1, [d(11), d(2)]),  # 3: in d11: untouched
            ([1, 3], [1, 3], 1, [UNASSIGNED_DIR, d(3)]),  # 4: unassigned: untouched
            ([3, 1], [3], 3, [d(3), d(1)]),  # 5: in d1 but not in ISR: nothing to do
        ]
    )
    return cluster


def test_new_offline_dir_moves_isr_and_leadership() -> None:
    cluster = _jbod_cluster()
    epoch = cluster.epoch(1)
    produced, reply = cluster.heartbeat(1, offline=[d(1)])
    assert produced == [
        _offline(1, epoch, (d(11),), (d(1),)),
        change(0, epoch=1, isr=[2, 3], leader=2, leader_epoch=1),
        change(1, epoch=1, isr=[2]),
        change(2, epoch=1, leader=-1, leader_epoch=1),
    ]
    assert (reply.error_code, reply.is_fenced) == (0, False)
    cluster.apply(produced)
    reg = cluster.image.brokers[1]
    assert (reg.log_dirs, reg.offline_log_dirs, reg.fenced) == ((d(11),), (d(1),), False)
    parts = cluster.image.topics[TOPIC].partitions
    assert [(parts[i].isr, parts[i].leader) for i in range(6)] == [
        ((2, 3), 2),
        ((2,), 2),
        ((1,), -1),
        ((1, 2), 1),
        ((1, 3), 1),
        ((3,), 3),
    ]
    assert cluster.image.offline_replicas(parts[2]) == [1]
    assert cluster.image.dir_owner == {d(11): 1, d(2): 2, d(3): 3}
    # Repeating the report writes nothing.
    produced, reply = cluster.heartbeat(1, offline=[d(1)])
    assert (produced, reply.error_code) == ([], 0)


def test_repeated_and_new_offline_dirs_together_handle_only_the_new_one() -> None:
    cluster = _jbod_cluster()
    epoch = cluster.epoch(1)
    cluster.apply(cluster.heartbeat(1, offline=[d(1)])[0])
    produced, _ = cluster.heartbeat(1, offline=[d(1), d(11)])
    assert produced == [
        _offline(1, epoch, (), (d(1), d(11))),
        change(3, epoch=1, isr=[2], leader=2, leader_epoch=1),
    ]
    cluster.apply(produced)
    reg = cluster.image.brokers[1]
    assert (reg.log_dirs, reg.offline_log_dirs) == ((), tuple(sorted((d(1), d(11)))))
    assert cluster.image.dir_owner == {d(2): 2, d(3): 3}
    # UNASSIGNED is online even when every registered dir is offline (protocol §1).
    assert cluster.part(4).leader == 1


def test_offline_dirs_are_handled_before_fencing() -> None:
    cluster = _jbod_cluster()
    epoch = cluster.epoch(1)
    produced, reply = cluster.heartbeat(1, want_fence=True, offline=[d(1)])
    assert produced == [
        _offline(1, epoch, (d(11),), (d(1),)),
        change(0, epoch=1, isr=[2, 3], leader=2, leader_epoch=1),
        change(1, epoch=1, isr=[2]),
        change(2, epoch=1, leader=-1, leader_epoch=1),
        change(3, epoch=1, isr=[2], leader=2, leader_epoch=1),
        change(4, epoch=1, isr=[3], leader=3, leader_epoch=1),
        _fence(1, epoch),
    ]
    assert reply.is_fenced
    cluster.apply(produced)


def test_unfencing_heartbeat_never_elects_a_replica_in_a_dir_it_reports_offline() -> None:
    cluster = Cluster()
    epoch = cluster.add_broker(1, [d(1), d(11)], unfence=False)
    cluster.add_topic([([1], [1], -1, [d(1)]), ([1], [1], -1, [d(11)])])
    produced, reply = cluster.heartbeat(1, offline=[d(1)])
    assert produced == [
        _offline(1, epoch, (d(11),), (d(1),)),
        _unfence(1, epoch),
        change(1, epoch=1, leader=1, leader_epoch=1),
    ]
    assert not reply.is_fenced
    cluster.apply(produced)
    assert (cluster.part(0).leader, cluster.part(1).leader) == (-1, 1)


def test_offline_dir_of_a_fenced_broker_keeps_last_isr_member() -> None:
    cluster = Cluster()
    epoch = cluster.add_broker(1, [d(1), d(11)])
    cluster.add_broker(2, [d(2)])
    cluster.add_topic([([1], [1], 1, [d(1)]), ([2, 1], [2, 1], 2, [d(2), d(1)])])
    cluster.apply(cluster.heartbeat(1, want_fence=True)[0])
    assert (cluster.part(0).isr, cluster.part(0).leader, cluster.part(1).isr) == ((1,), -1, (2,))
    produced, _ = cluster.heartbeat(1, want_fence=True, offline=[d(1)])
    assert produced == [_offline(1, epoch, (d(11),), (d(1),))]
    cluster.apply(produced)


# -- session expiry ----------------------------------------------------------------------------


def test_expire_sessions_fences_unfenced_brokers_not_heard_from() -> None:
    cluster = _three_brokers()
    cluster.add_broker(4, [d(4)], unfence=False)
    cluster.now = SESSION_TIMEOUT  # exactly the timeout: still alive
    assert brokers.expire_sessions(
        cluster.image, cluster.sessions, now=cluster.now, session_timeout=SESSION_TIMEOUT
    ) == ([], [])
    cluster.now = SESSION_TIMEOUT + 0.001
    cluster.touch(2)
    cluster.touch(3)
    produced, fenced = brokers.expire_sessions(
        cluster.image, cluster.sessions, now=cluster.now, session_timeout=SESSION_TIMEOUT
    )
    assert fenced == [1]
    assert produced == [*_removal_of_broker_1(), _fence(1, cluster.epoch(1))]
    cluster.apply(produced)
    _after_removal_of_broker_1(cluster)


def test_expire_sessions_includes_controlled_shutdown_and_several_brokers() -> None:
    cluster, _ = _in_controlled_shutdown()
    cluster.sessions[2] = Session(last_contact=-100.0)
    cluster.now = 1.0
    cluster.touch(3)
    cluster.sessions[1] = Session(last_contact=-50.0)
    produced, fenced = brokers.expire_sessions(
        cluster.image, cluster.sessions, now=cluster.now, session_timeout=SESSION_TIMEOUT
    )
    assert fenced == [1, 2]
    # After 1's controlled shutdown: 0 → ISR [2,3] led by 2, 1 → [2] led by 2, 3 → [2] led by 2, 4 → [2,3] led by 2.
    assert produced == [
        _fence(1, cluster.epoch(1), was_in_controlled_shutdown=True),
        change(0, epoch=2, isr=[3], leader=3, leader_epoch=2),
        change(1, epoch=2, leader=-1, leader_epoch=2),
        change(3, epoch=2, leader=-1, leader_epoch=1),
        change(4, epoch=1, isr=[3], leader=3, leader_epoch=1),
        _fence(2, cluster.epoch(2)),
    ]
    cluster.apply(produced)
    assert {b for b, r in cluster.image.brokers.items() if r.fenced} == {1, 2}


# -- unregistration ----------------------------------------------------------------------------


def test_unregister_unknown_broker_is_102() -> None:
    produced, reply = brokers.unregister_broker(Cluster().image, 5)
    assert produced == []
    assert reply.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED  # 102


def test_unregister_fences_first() -> None:
    cluster = _three_brokers()
    epoch = cluster.epoch(1)
    produced, reply = brokers.unregister_broker(cluster.image, 1)
    assert produced == [
        *_removal_of_broker_1(),
        _fence(1, epoch),
        records.UnregisterBrokerRecord(broker_id=1, broker_epoch=epoch),
    ]
    assert reply.error_code == 0
    cluster.apply(produced)
    assert 1 not in cluster.image.brokers
    assert d(1) not in cluster.image.dir_owner
    assert cluster.image.offline_replicas(cluster.part(2)) == [1]


def test_unregister_fenced_broker() -> None:
    cluster = _three_brokers()
    cluster.apply(cluster.heartbeat(1, want_fence=True)[0])
    epoch = cluster.epoch(1)
    produced, _ = brokers.unregister_broker(cluster.image, 1)
    assert produced == [records.UnregisterBrokerRecord(broker_id=1, broker_epoch=epoch)]
    cluster.apply(produced)
    assert cluster.part(2).isr == (1,)
