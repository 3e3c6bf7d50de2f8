"""BrokerRegistration decisions (protocol §3.1) with fake time: exact records, then replayed state."""

from __future__ import annotations

import pytest

from jbod_core import brokers, records
from jbod_core.errors import ErrorCode
from jbod_core.ids import LOST_DIR, MIGRATING_DIR, UNASSIGNED_DIR, Uuid
from jbod_core.messages import RegisterBrokerRequest
from tests.core.support import SESSION_TIMEOUT, TOPIC, Cluster, change, d, incarnation


def _rbr(
    broker_id: int,
    epoch: int,
    dirs: tuple[Uuid, ...],
    *,
    generation: int = 0,
    fenced: bool = True,
    in_controlled_shutdown: bool = False,
    offline: tuple[Uuid, ...] = (),
    has_offline_log_dirs: bool = False,
) -> records.RegisterBrokerRecord:
    return records.RegisterBrokerRecord(
        broker_id=broker_id,
        broker_epoch=epoch,
        incarnation_id=incarnation(broker_id, generation),
        log_dirs=dirs,
        has_offline_log_dirs=has_offline_log_dirs,
        fenced=fenced,
        in_controlled_shutdown=in_controlled_shutdown,
        listeners=(),
        rack=None,
        offline_log_dirs=offline,
    )


def test_first_registration_gets_the_offset_of_its_record_and_starts_fenced() -> None:
    cluster = Cluster()
    produced, reply = cluster.register(1, [d(1), d(2)])
    assert produced == [_rbr(1, 0, (d(1), d(2)))]
    assert (reply.error_code, reply.broker_epoch) == (0, 0)
    cluster.apply(produced)
    reg = cluster.image.brokers[1]
    assert (reg.broker_epoch, reg.fenced, reg.in_controlled_shutdown) == (0, True, False)
    assert cluster.image.dir_owner == {d(1): 1, d(2): 1}

    produced, reply = cluster.register(2, [d(3)])
    assert produced == [_rbr(2, 1, (d(3),))]
    assert reply.broker_epoch == 1


def test_registration_keeps_listeners_rack_and_offline_flag() -> None:
    cluster = Cluster()
    request = RegisterBrokerRequest.model_validate(
        {
            "brokerId": 4,
            "clusterId": "test-cluster",
            "incarnationId": str(incarnation(4)),
            "logDirs": [str(d(4))],
            "hasOfflineLogDirs": True,
            "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9092}],
            "rack": "rack-a",
        }
    )
    produced, reply = brokers.register_broker(
        cluster.image,
        cluster.sessions,
        request,
        cluster_id="test-cluster",
        now=0.0,
        session_timeout=SESSION_TIMEOUT,
    )
    assert produced == [
        records.RegisterBrokerRecord(
            broker_id=4,
            broker_epoch=0,
            incarnation_id=incarnation(4),
            log_dirs=(d(4),),
            has_offline_log_dirs=True,
            fenced=True,
            in_controlled_shutdown=False,
            listeners=(records.Listener(name="PLAINTEXT", host="127.0.0.1", port=9092),),
            rack="rack-a",
        )
    ]
    assert reply.error_code == 0


def test_wrong_cluster_id_is_104_and_writes_nothing() -> None:
    cluster = Cluster()
    produced, reply = cluster.register(1, [d(1)], cluster_id="other")
    assert produced == []
    assert reply.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID  # 104
    assert reply.broker_epoch == -1
    assert reply.error_message and "other" in reply.error_message


@pytest.mark.parametrize(
    "log_dirs",
    [
        [],
        [UNASSIGNED_DIR],
        [d(1), LOST_DIR],
        [MIGRATING_DIR],
        [Uuid(0, 99)],
        [d(1), d(1)],
        [d(1), d(2), d(1)],
        [d(5)],  # online in broker 2
        [d(1), d(5)],
    ],
)
def test_bad_dir_lists_are_42_and_write_nothing(log_dirs: list[Uuid]) -> None:
    cluster = Cluster()
    cluster.add_broker(2, [d(5)])
    before = cluster.image.canonical()
    produced, reply = cluster.register(1, log_dirs)
    assert produced == []
    assert reply.error_code == ErrorCode.INVALID_REQUEST  # 42
    assert reply.error_message
    assert cluster.image.canonical() == before


def test_own_dirs_of_the_same_broker_are_fine_and_a_dir_offline_elsewhere_is_free() -> None:
    cluster = Cluster()
    cluster.add_broker(2, [d(5), d(6)])
    produced, _ = cluster.heartbeat(2, offline=[d(6)])
    cluster.apply(produced)
    assert cluster.image.dir_owner == {d(5): 2}
    produced, reply = cluster.register(1, [d(6)])
    assert reply.error_code == 0
    cluster.apply(produced)
    assert cluster.image.dir_owner == {d(5): 2, d(6): 1}
    # Broker 2 re-registering (same incarnation) may name its own online dir again.
    produced, reply = cluster.register(2, [d(5)])
    assert reply.error_code == 0


def test_new_incarnation_with_a_live_session_is_101() -> None:
    cluster = Cluster()
    cluster.add_broker(1, [d(1)])
    cluster.now = SESSION_TIMEOUT  # still within the timeout
    produced, reply = cluster.register(1, [d(1)], generation=1)
    assert produced == []
    assert reply.error_code == ErrorCode.DUPLICATE_BROKER_REGISTRATION  # 101


def test_new_incarnation_while_in_controlled_shutdown_with_a_live_session_is_101() -> None:
    cluster = Cluster()
    cluster.add_broker(1, [d(1)])
    cluster.add_topic([([1], [1], 1, [d(1)])])
    cluster.apply(cluster.heartbeat(1, want_shut_down=True)[0])
    assert cluster.image.brokers[1].in_controlled_shutdown
    produced, reply = cluster.register(1, [d(1)], generation=1)
    assert (produced, reply.error_code) == ([], 101)


def test_new_incarnation_replaces_a_fenced_one_at_once() -> None:
    cluster = Cluster()
    cluster.add_broker(1, [d(1), d(2)], unfence=False)
    assert cluster.image.brokers[1].fenced
    end = cluster.image.end_offset
    produced, reply = cluster.register(1, [d(2), d(3)], generation=1)
    assert produced == [_rbr(1, end, (d(2), d(3)), generation=1)]
    assert reply.broker_epoch == end
    cluster.apply(produced)
    reg = cluster.image.brokers[1]
    assert (reg.broker_epoch, reg.incarnation_id, reg.fenced) == (end, incarnation(1, 1), True)
    assert cluster.image.dir_owner == {d(2): 1, d(3): 1}


def test_new_incarnation_fences_an_expired_unfenced_one_first() -> None:
    cluster = Cluster()
    old_epoch = cluster.add_broker(1, [d(1)])
    cluster.add_broker(2, [d(2)])
    cluster.add_topic(
        [
            ([1, 2], [1, 2], 1, [d(1), d(2)]),  # led by 1: leadership moves to 2
            ([2, 1], [2, 1], 2, [d(2), d(1)]),  # 1 leaves the ISR
            ([1], [1], 1, [d(1)]),  # last ISR member stays listed, no leader
            ([2], [2], 2, [d(2)]),  # untouched
        ]
    )
    cluster.now = SESSION_TIMEOUT + 0.5
    cluster.touch(2)
    end = cluster.image.end_offset
    produced, reply = cluster.register(1, [d(1)], generation=1)
    assert produced == [
        change(0, epoch=1, isr=[2], leader=2, leader_epoch=1),
        change(1, epoch=1, isr=[2]),
        change(2, epoch=1, leader=-1, leader_epoch=1),
        records.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=old_epoch, fenced=True),
        _rbr(1, end + 4, (d(1),), generation=1),
    ]
    assert (reply.error_code, reply.broker_epoch) == (0, end + 4)
    cluster.apply(produced)
    assert cluster.image.brokers[1].broker_epoch == end + 4
    assert cluster.image.brokers[1].fenced
    assert [(p.isr, p.leader) for _, p in sorted(cluster.image.topics[TOPIC].partitions.items())] == [
        ((2,), 2),
        ((2,), 2),
        ((1,), -1),
        ((2,), 2),
    ]


def test_new_incarnation_without_any_session_fences_the_old_one() -> None:
    # After a controller restart every unfenced broker gets a session; a missing one is not alive.
    cluster = Cluster()
    old_epoch = cluster.add_broker(1, [d(1)])
    del cluster.sessions[1]
    end = cluster.image.end_offset
    produced, reply = cluster.register(1, [d(1)], generation=1)
    assert produced == [
        records.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=old_epoch, fenced=True),
        _rbr(1, end + 1, (d(1),), generation=1),
    ]
    assert reply.broker_epoch == end + 1


def test_same_incarnation_keeps_epoch_and_unfenced_state() -> None:
    cluster = Cluster()
    epoch = cluster.add_broker(1, [d(1), d(2)])
    cluster.now = 100.0  # the session does not matter for the same incarnation
    produced, reply = cluster.register(1, [d(2), d(1)])
    assert produced == [_rbr(1, epoch, (d(2), d(1)), fenced=False)]
    assert reply.broker_epoch == epoch
    cluster.apply(produced)
    reg = cluster.image.brokers[1]
    assert (reg.broker_epoch, reg.fenced, reg.log_dirs) == (epoch, False, tuple(sorted((d(1), d(2)))))


def test_same_incarnation_keeps_fenced_state() -> None:
    cluster = Cluster()
    epoch = cluster.add_broker(1, [d(1)], unfence=False)
    cluster.apply(cluster.register(1, [d(1)])[0])  # a second time: nothing else happened in between
    produced, reply = cluster.register(1, [d(1)])
    assert produced == [_rbr(1, epoch, (d(1),), fenced=True)]
    assert reply.broker_epoch == epoch


def test_same_incarnation_keeps_controlled_shutdown_state() -> None:
    cluster = Cluster()
    epoch = cluster.add_broker(1, [d(1)])
    cluster.add_broker(2, [d(2)])
    cluster.add_topic([([1, 2], [1, 2], 1, [d(1), d(2)])])
    cluster.apply(cluster.heartbeat(1, want_shut_down=True)[0])
    produced, reply = cluster.register(1, [d(1)])
    assert produced == [_rbr(1, epoch, (d(1),), fenced=False, in_controlled_shutdown=True)]
    assert reply.broker_epoch == epoch
    cluster.apply(produced)
    assert cluster.image.brokers[1].in_controlled_shutdown


def test_same_incarnation_keeps_offline_dirs_offline() -> None:
    cluster = Cluster()
    epoch = cluster.add_broker(1, [d(1), d(2)])
    cluster.apply(cluster.heartbeat(1, offline=[d(2)])[0])
    produced, reply = cluster.register(1, [d(1), d(2)])
    assert produced == [_rbr(1, epoch, (d(1),), fenced=False, offline=(d(2),))]
    assert reply.broker_epoch == epoch
    cluster.apply(produced)
    reg = cluster.image.brokers[1]
    assert (reg.log_dirs, reg.offline_log_dirs) == ((d(1),), (d(2),))
    assert cluster.image.dir_owner == {d(1): 1}


def test_same_incarnation_dropping_an_online_dir_takes_it_offline() -> None:
    cluster = Cluster()
    epoch = cluster.add_broker(1, [d(1), d(2)])
    cluster.add_broker(2, [d(3)])
    cluster.add_topic([([1, 2], [1, 2], 1, [d(2), d(3)])])
    produced, reply = cluster.register(1, [d(1)])
    assert produced == [
        records.BrokerRegistrationChangeRecord(
            broker_id=1, broker_epoch=epoch, log_dirs=(d(1),), offline_log_dirs=(d(2),)
        ),
        change(0, epoch=1, isr=[2], leader=2, leader_epoch=1),
        _rbr(1, epoch, (d(1),), fenced=False, offline=(d(2),)),
    ]
    assert reply.broker_epoch == epoch
    cluster.apply(produced)
    assert (cluster.part().isr, cluster.part().leader) == ((2,), 2)


def test_registration_after_unregistration_is_a_new_registration() -> None:
    cluster = Cluster()
    cluster.add_broker(1, [d(1)])
    cluster.apply(brokers.unregister_broker(cluster.image, 1)[0])
    end = cluster.image.end_offset
    produced, reply = cluster.register(1, [d(1)])
    assert produced == [_rbr(1, end, (d(1),))]
    assert reply.broker_epoch == end
