"""Leader elections on request and the automatic preferred-leader balance, with the exact records
written and each partition's answer."""

from __future__ import annotations

from jbod_core import leader_election, records
from jbod_core.errors import ErrorCode
from jbod_core.messages import ElectLeadersRequest
from tests.core.support import OTHER_TOPIC as OTHER
from tests.core.support import TOPIC, Cluster, change, d


def _cluster() -> Cluster:
    """Brokers 1-3 (broker n owns dir d(n)); topic t, its preferred replicas first:
    p0 [1, 2] led by 2 (1 in the ISR), p1 [2, 3] led by 2 (preferred), p2 [3, 1] led by 1 with
    ISR [1] (3 out of it), p3 [1, 3] without a leader (ISR [1] and 1 is fenced later)."""
    cluster = Cluster()
    for broker_id in (1, 2, 3):
        cluster.add_broker(broker_id, [d(broker_id)])
    cluster.add_topic(
        [
            ([1, 2], [1, 2], 2, [d(1), d(2)]),
            ([2, 3], [2, 3], 2, [d(2), d(3)]),
            ([3, 1], [1], 1, [d(3), d(1)]),
            ([1, 3], [1], -1, [d(1), d(3)]),
        ]
    )
    return cluster


def _elect(
    cluster: Cluster, kind: int, partitions: list[int] | None
) -> tuple[list[records.Record], list[tuple[int, int, str | None]]]:
    request = ElectLeadersRequest.model_validate(
        {
            "electionType": kind,
            "partitions": None if partitions is None else [{"topic": "t", "partitions": partitions}],
        }
    )
    produced, reply = leader_election.elect_leaders(cluster.image, request)
    answers = [(p.partition, p.error_code, p.error_message) for t in reply.results for p in t.partitions]
    return produced, answers


def test_a_preferred_election_moves_leadership_only_where_the_preferred_replica_may_lead() -> None:
    cluster = _cluster()
    produced, answers = _elect(cluster, 0, [0, 1, 2, 3, 9])
    assert answers == [
        (0, 0, None),
        (1, ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."),
        (2, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, "The preferred leader was not available."),
        (3, 0, None),  # leaderless, its preferred replica 1 in the ISR and alive
        (9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "No such partition as t-9"),
    ]
    assert produced == [
        change(0, epoch=1, leader=1, leader_epoch=1),
        change(3, epoch=1, leader=1, leader_epoch=1),
    ]
    cluster.apply(produced)
    assert cluster.part(0).leader == 1 and cluster.part(0).isr == (1, 2)


def test_every_partition_leaves_out_those_that_need_no_election() -> None:
    cluster = _cluster()
    _produced, answers = _elect(cluster, 0, None)
    assert [a[:2] for a in answers] == [(0, 0), (2, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE), (3, 0)]


def test_an_unknown_topic_is_named() -> None:
    cluster = _cluster()
    request = ElectLeadersRequest.model_validate(
        {"electionType": 0, "partitions": [{"topic": "nope", "partitions": [0]}]}
    )
    produced, reply = leader_election.elect_leaders(cluster.image, request)
    assert produced == []
    assert reply.results[0].topic == "nope"
    assert reply.results[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert reply.results[0].partitions[0].error_message == "No such topic as nope"


def test_an_unclean_election_elects_outside_the_isr_only_when_no_leader_is_left() -> None:
    cluster = _cluster()
    # p3's only ISR member goes: fence broker 1 (p0 and p2 move or lose their leader too).
    cluster.apply(
        [records.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=cluster.epoch(1), fenced=True)]
    )
    cluster.apply([change(2, epoch=1, leader=-1, leader_epoch=1)])
    produced, answers = _elect(cluster, 1, [1, 2, 3])
    assert [a[:2] for a in answers] == [(1, ErrorCode.ELECTION_NOT_NEEDED), (2, 0), (3, 0)]
    assert produced == [
        change(2, epoch=2, isr=[3], leader=3, leader_epoch=2),
        change(3, epoch=1, isr=[3], leader=3, leader_epoch=1),
    ]
    # Nothing may lead: ELIGIBLE_LEADERS_NOT_AVAILABLE and no record.
    cluster.apply(
        [records.BrokerRegistrationChangeRecord(broker_id=3, broker_epoch=cluster.epoch(3), fenced=True)]
    )
    produced, answers = _elect(cluster, 1, [3])
    assert produced == [] and answers[0][1] == ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE


def test_the_balance_moves_leadership_back_to_preferred_replicas_within_its_limit() -> None:
    cluster = _cluster()
    cluster.add_topic([([2, 1], [1, 2], 1, [d(2), d(1)])], topic_id=OTHER, name="u")
    everything = leader_election.preferred_leader_balance(cluster.image)
    assert {
        (r.topic_id, r.partition_id, r.leader)
        for r in everything
        if isinstance(r, records.PartitionChangeRecord)
    } == {
        (TOPIC, 0, 1),
        (TOPIC, 3, 1),
        (OTHER, 0, 2),
    }
    assert len(leader_election.preferred_leader_balance(cluster.image, limit=1)) == 1
    cluster.apply(everything)
    assert leader_election.preferred_leader_balance(cluster.image) == []
