"""Slow log dirs in the controller (issue 35): heartbeats carry them, the exact records, a newly
slow dir's leaderships move to ISR members in dirs that are not slow (the slow replica stays in
the ISR), later elections and preferred elections avoid slow dirs, and the image replays."""

from __future__ import annotations

from jbod_core import leader_election, records
from jbod_core.errors import ErrorCode
from jbod_core.ids import Uuid
from jbod_core.messages import ElectLeadersRequest
from tests.core.support import TOPIC, Cluster, change, d

A1, A2, B1, C1 = d(11), d(12), d(21), d(31)


def _beat(cluster: Cluster, broker_id: int, slow: list[Uuid] | None) -> tuple[list[records.Record], int]:
    produced, reply = cluster.heartbeat(broker_id, slow=slow)
    return produced, reply.error_code


def _three_brokers() -> Cluster:
    cluster = Cluster()
    cluster.add_broker(1, [A1, A2])
    cluster.add_broker(2, [B1])
    cluster.add_broker(3, [C1])
    cluster.add_topic(
        [
            ([1, 2, 3], [1, 2, 3], 1, [A1, B1, C1]),  # led from the dir that turns slow
            ([1, 2, 3], [1, 2, 3], 1, [A2, B1, C1]),  # led from the other dir of broker 1
            ([1, 2], [1], 1, [A1, B1]),  # no other ISR member: the slow leader stays
            ([2, 1, 3], [2, 1, 3], 2, [B1, A1, C1]),  # led elsewhere already
        ]
    )
    return cluster


def test_a_newly_slow_dir_loses_its_leaderships_to_the_isr_and_stays_in_it() -> None:
    cluster = _three_brokers()
    produced, code = _beat(cluster, 1, [A1])
    assert code == 0
    epoch = cluster.epoch(1)
    assert produced == [
        records.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=epoch, slow_log_dirs=(A1,)),
        change(0, epoch=1, leader=2, leader_epoch=1),
    ]
    cluster.apply(produced)
    assert cluster.image.brokers[1].slow_log_dirs == (A1,)
    assert cluster.part(0).isr == (1, 2, 3) and cluster.part(1).leader == 1 and cluster.part(2).leader == 1
    assert _beat(cluster, 1, [A1]) == ([], 0), "an unchanged report writes nothing"
    assert _beat(cluster, 1, None) == ([], 0), "an old agent leaves them as registered"
    assert cluster.replayed_from_scratch().brokers[1] == cluster.image.brokers[1]
    snapshot = [r for r in cluster.image.to_records() if isinstance(r, records.RegisterBrokerRecord)]
    assert next(r for r in snapshot if r.broker_id == 1).slow_log_dirs == (A1,)


def test_elections_and_preferred_elections_avoid_a_slow_dir_until_it_recovers() -> None:
    cluster = _three_brokers()
    cluster.apply(_beat(cluster, 1, [A1])[0])
    # Broker 2 fails: partition 0's new leader is broker 3, not the slow replica of broker 1.
    produced, _reply = cluster.heartbeat(2, want_shut_down=True)
    cluster.apply(produced)
    assert cluster.part(0).leader == 3 and 1 in cluster.part(0).isr
    # A preferred election does not give leadership back to a slow dir.
    request = ElectLeadersRequest(election_type=0, partitions=[{"topic": "t", "partitions": [0]}])
    produced, reply = leader_election.elect_leaders(cluster.image, request)
    assert (
        produced == []
        and reply.results[0].partitions[0].error_code == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    )
    assert not any(r.partition_id == 0 for r in leader_election.preferred_leader_balance(cluster.image))
    # Recovered: the automatic balance brings leadership back to the preferred replica.
    produced, code = _beat(cluster, 1, [])
    assert code == 0 and produced == [
        records.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=cluster.epoch(1), slow_log_dirs=())
    ]
    cluster.apply(produced)
    balanced = leader_election.preferred_leader_balance(cluster.image)
    assert any(
        isinstance(r, records.PartitionChangeRecord) and r.partition_id == 0 and r.leader == 1
        for r in balanced
    )


def test_a_slow_dir_the_broker_never_registered_is_refused_and_changes_nothing() -> None:
    cluster = _three_brokers()
    produced, code = _beat(cluster, 1, [B1])
    assert (produced, code) == ([], ErrorCode.LOG_DIR_NOT_FOUND)
    assert cluster.image.brokers[1].slow_log_dirs == ()
    assert cluster.part(0).leader == 1
    assert TOPIC in cluster.image.topics
