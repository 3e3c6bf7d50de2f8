"""Unclean leader election (`unclean.leader.election.enable`, `jbod_core.election`): when no ISR
member can lead and the topic (else the cluster default) allows it, the first replica that may
lead is elected and the ISR becomes it alone; checked at fencing, dir failure, controlled
shutdown, unfencing and when the config is turned on."""

from __future__ import annotations

from typing import Any

import pytest

from jbod_core import brokers, config_changes, election, records
from jbod_core.draft import Draft
from jbod_core.messages import AlterTopicConfigsRequest
from tests.core.support import TOPIC, Cluster, change, d

KEY = (TOPIC, 0)
UNCLEAN = "unclean.leader.election.enable"


def _isr_of_one(*, topic: str | None = None, default: str | None = None) -> Cluster:
    """Brokers 1, 2, 3 unfenced; partition 0 = replicas [1,2,3], ISR [1] (2 and 3 fell out),
    leader 1; the topic's and the cluster default's `unclean.leader.election.enable` if given."""
    cluster = Cluster()
    for broker_id in (1, 2, 3):
        cluster.add_broker(broker_id, [d(broker_id)])
    cluster.add_topic([([1, 2, 3], [1], 1, [d(1), d(2), d(3)])])
    if topic is not None:
        cluster.apply([records.ConfigRecord(topic_id=TOPIC, name=UNCLEAN, value=topic)])
    if default is not None:
        cluster.apply([records.BrokerConfigRecord(broker="", name=UNCLEAN, value=default)])
    return cluster


def _fence(cluster: Cluster, broker_id: int) -> list[records.Record]:
    draft = Draft(cluster.image)
    election.fence_broker(draft, broker_id)
    cluster.apply(draft.records)
    return draft.records


def _partition_changes(produced: list[records.Record]) -> list[records.Record]:
    return [r for r in produced if isinstance(r, records.PartitionChangeRecord)]


@pytest.mark.parametrize(
    ("topic", "default", "unclean"),
    [
        (None, None, False),  # Kafka's default
        ("false", None, False),
        ("true", None, True),
        ("TRUE", None, True),  # read as Kafka reads a boolean
        (None, "true", True),  # the cluster-wide dynamic default
        ("false", "true", False),  # the topic's value wins
        ("true", "false", True),
    ],
)
def test_fencing_the_last_isr_member(topic: str | None, default: str | None, *, unclean: bool) -> None:
    cluster = _isr_of_one(topic=topic, default=default)
    assert election.unclean_election_enabled(cluster.image, TOPIC) is unclean
    produced = _fence(cluster, 1)
    if unclean:
        # The first replica that may lead, the ISR that leader alone, the leader epoch bumped.
        assert _partition_changes(produced) == [change(epoch=1, isr=[2], leader=2, leader_epoch=1)]
        # It then stays leader like any other: fencing it moves on only if another may lead.
        assert _partition_changes(_fence(cluster, 2)) == [change(epoch=2, isr=[3], leader=3, leader_epoch=2)]
        assert _partition_changes(_fence(cluster, 3)) == [change(epoch=3, leader=-1, leader_epoch=3)]
        assert cluster.part().isr == (3,)
    else:
        assert _partition_changes(produced) == [change(epoch=1, leader=-1, leader_epoch=1)]
        assert cluster.part().isr == (1,)
    assert cluster.replayed_from_scratch().canonical() == cluster.image.canonical()


def test_only_replicas_that_may_lead_are_elected() -> None:
    cluster = _isr_of_one(topic="true")
    # Broker 2 fenced (out of the ISR already: no change); broker 3's replica dir goes offline:
    # the ISR member 1 stays leader.
    assert _partition_changes(_fence(cluster, 2)) == []
    draft = Draft(cluster.image)
    election.handle_offline_dirs(draft, 3, [d(3)])
    cluster.apply(draft.records)
    assert _partition_changes(draft.records) == []
    # The leader's own dir fails: no replica may lead, so no unclean election either.
    draft = Draft(cluster.image)
    election.handle_offline_dirs(draft, 1, [d(1)])
    cluster.apply(draft.records)
    assert _partition_changes(draft.records) == [change(epoch=1, leader=-1, leader_epoch=1)]
    # Broker 2 unfences: it is not in the ISR, the topic allows an unclean election.
    produced, reply = cluster.heartbeat(2)
    assert reply.error_code == 0 and not reply.is_fenced
    cluster.apply(produced)
    assert _partition_changes(produced) == [change(epoch=2, isr=[2], leader=2, leader_epoch=2)]


def test_a_dir_failure_and_a_controlled_shutdown_elect_uncleanly_too() -> None:
    cluster = _isr_of_one(topic="true")
    draft = Draft(cluster.image)
    election.handle_offline_dirs(draft, 1, [d(1)])
    assert _partition_changes(draft.records) == [change(epoch=1, isr=[2], leader=2, leader_epoch=1)]
    cluster.apply(draft.records)
    # Broker 2 shuts down (controlled): leadership moves on to 3, outside the ISR [2].
    produced, reply = cluster.heartbeat(2, want_shut_down=True)
    assert reply.error_code == 0
    cluster.apply(produced)
    assert _partition_changes(produced) == [change(epoch=2, isr=[3], leader=3, leader_epoch=2)]


def test_unfencing_a_replica_outside_the_isr() -> None:
    for unclean in (False, True):
        cluster = _isr_of_one(topic=str(unclean).lower())
        for broker_id in (2, 3, 1):
            _fence(cluster, broker_id)
        assert (cluster.part().leader, cluster.part().isr) == (-1, (1,))
        produced, reply = cluster.heartbeat(3)
        assert reply.error_code == 0 and not reply.is_fenced
        cluster.apply(produced)
        expected = [change(epoch=2, isr=[3], leader=3, leader_epoch=2)] if unclean else []
        assert _partition_changes(produced) == expected
        # The old ISR member comes back: the leader stays; it rejoins by AlterPartition later.
        produced, _ = cluster.heartbeat(1)
        cluster.apply(produced)
        assert _partition_changes(produced) == (
            [] if unclean else [change(epoch=2, leader=1, leader_epoch=2)]
        )


def _alter(cluster: Cluster, *ops: dict[str, Any], validate_only: bool = False) -> list[records.Record]:
    request = AlterTopicConfigsRequest.model_validate({"configs": list(ops), "validateOnly": validate_only})
    produced, reply = config_changes.alter_topic_configs(cluster.image, "t", request)
    assert reply.error_code == 0, reply
    return produced


def test_turning_the_config_on_elects_leaderless_partitions() -> None:
    on = {"name": UNCLEAN, "op": "SET", "value": "true"}
    off = {"name": UNCLEAN, "op": "SET", "value": "false"}
    cluster = _isr_of_one()
    for broker_id in (2, 1):
        _fence(cluster, broker_id)  # leaderless, ISR [1]; only 3 may lead (outside the ISR)
    assert _alter(cluster, on, validate_only=True) == []
    produced = _alter(cluster, off)
    assert produced == [records.ConfigRecord(topic_id=TOPIC, name=UNCLEAN, value="false")]
    cluster.apply(produced)
    produced = _alter(cluster, on)
    assert produced == [
        records.ConfigRecord(topic_id=TOPIC, name=UNCLEAN, value="true"),
        change(epoch=2, isr=[3], leader=3, leader_epoch=2),
    ]
    cluster.apply(produced)
    assert _alter(cluster, on) == []  # a repeat writes nothing

    # The topic's `false` deleted while the cluster default is `true`: turned on too.
    cluster = _isr_of_one(topic="false", default="true")
    for broker_id in (3, 2, 1):
        _fence(cluster, broker_id)
    # No replica may lead: the config changes, nothing is elected.
    produced = _alter(cluster, {"name": UNCLEAN, "op": "DELETE"})
    assert produced == [records.ConfigRecord(topic_id=TOPIC, name=UNCLEAN, value=None)]
    cluster.apply(produced)
    produced, _ = cluster.heartbeat(2)
    assert _partition_changes(produced) == [change(epoch=2, isr=[2], leader=2, leader_epoch=2)]


def test_expired_sessions_elect_uncleanly() -> None:
    cluster = _isr_of_one(topic="true")
    cluster.now = 100.0
    cluster.touch(2)
    cluster.touch(3)
    produced, fenced = brokers.expire_sessions(
        cluster.image, cluster.sessions, now=cluster.now, session_timeout=9.0
    )
    assert fenced == [1]
    assert _partition_changes(produced) == [change(epoch=1, isr=[2], leader=2, leader_epoch=1)]
