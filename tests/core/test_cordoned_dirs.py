"""Cordoned log dirs in the controller (KIP-1066): registration and heartbeats carry them, the
exact records, then replay; `accepts_new_replicas`; automatic placement skips a broker whose
online dirs are all cordoned."""

from __future__ import annotations

import random

from jbod_core import brokers, records, topics
from jbod_core.errors import ErrorCode
from jbod_core.ids import Uuid
from jbod_core.image import accepts_new_replicas
from jbod_core.messages import CreateTopicRequest, RegisterBrokerRequest
from tests.core.support import CLUSTER_ID, SESSION_TIMEOUT, Cluster, d, incarnation


def _register(
    cluster: Cluster, broker_id: int, dirs: list[Uuid], cordoned: list[Uuid]
) -> tuple[list[records.Record], int]:
    request = RegisterBrokerRequest(
        broker_id=broker_id,
        cluster_id=CLUSTER_ID,
        incarnation_id=incarnation(broker_id),
        log_dirs=dirs,
        cordoned_log_dirs=cordoned,
    )
    produced, reply = brokers.register_broker(
        cluster.image,
        cluster.sessions,
        request,
        cluster_id=CLUSTER_ID,
        now=cluster.now,
        session_timeout=SESSION_TIMEOUT,
    )
    return produced, reply.error_code


def _beat(cluster: Cluster, broker_id: int, cordoned: list[Uuid] | None) -> tuple[list[records.Record], int]:
    produced, reply = cluster.heartbeat(broker_id, cordoned=cordoned)
    return produced, reply.error_code


def test_registration_records_the_cordoned_dirs() -> None:
    cluster = Cluster()
    a, b = d(11), d(12)
    produced, code = _register(cluster, 1, [a, b], [b])
    assert code == 0
    assert produced[0] == records.RegisterBrokerRecord(
        broker_id=1, broker_epoch=0, incarnation_id=incarnation(1), log_dirs=(a, b), cordoned_log_dirs=(b,)
    )
    cluster.apply(produced)
    assert cluster.image.brokers[1].cordoned_log_dirs == (b,)


def test_registration_naming_a_cordoned_dir_it_does_not_register_is_refused() -> None:
    cluster = Cluster()
    produced, code = _register(cluster, 1, [d(11)], [d(12)])
    assert produced == [] and code == ErrorCode.INVALID_REQUEST


def test_heartbeat_writes_a_change_only_when_the_cordoned_dirs_change() -> None:
    cluster = Cluster()
    a, b = d(11), d(12)
    cluster.add_broker(1, [a, b])
    epoch = cluster.epoch(1)
    produced, code = _beat(cluster, 1, [b])
    assert code == 0
    assert produced == [
        records.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=epoch, cordoned_log_dirs=(b,))
    ]
    cluster.apply(produced)
    assert cluster.image.brokers[1].cordoned_log_dirs == (b,)
    assert _beat(cluster, 1, [b])[0] == []  # unchanged: nothing written
    assert _beat(cluster, 1, None)[0] == []  # an old agent: left as they are
    produced, _ = _beat(cluster, 1, [])
    assert produced == [
        records.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=epoch, cordoned_log_dirs=())
    ]
    cluster.apply(produced)
    assert cluster.replayed_from_scratch().canonical() == cluster.image.canonical()


def test_heartbeat_naming_an_unknown_cordoned_dir_is_refused_whole() -> None:
    cluster = Cluster()
    cluster.add_broker(1, [d(11), d(12)])
    produced, code = _beat(cluster, 1, [d(99)])
    assert produced == [] and code == ErrorCode.LOG_DIR_NOT_FOUND


def test_accepts_new_replicas_needs_an_active_broker_with_an_uncordoned_online_dir() -> None:
    cluster = Cluster()
    a, b = d(11), d(12)
    cluster.add_broker(1, [a, b])
    assert accepts_new_replicas(cluster.image.brokers[1])
    cluster.apply(_beat(cluster, 1, [a])[0])
    assert accepts_new_replicas(cluster.image.brokers[1])
    cluster.apply(_beat(cluster, 1, [a, b])[0])
    assert not accepts_new_replicas(cluster.image.brokers[1])
    # The uncordoned dir going offline leaves none either.
    cluster.apply(_beat(cluster, 1, [a])[0])
    produced, _ = cluster.heartbeat(1, offline=[b])
    cluster.apply(produced)
    assert not accepts_new_replicas(cluster.image.brokers[1])
    cluster.add_broker(2, [d(21)], unfence=False)
    assert not accepts_new_replicas(cluster.image.brokers[2])  # fenced


def test_automatic_placement_skips_a_broker_whose_dirs_are_all_cordoned() -> None:
    cluster = Cluster()
    for b in (1, 2, 3):
        cluster.add_broker(b, [d(b * 10 + 1), d(b * 10 + 2)])
    cluster.apply(_beat(cluster, 3, [d(31), d(32)])[0])
    cluster.apply(_beat(cluster, 2, [d(21)])[0])  # one dir of two: still takes replicas
    produced, reply = topics.create_topic(
        cluster.image,
        CreateTopicRequest(name="t", num_partitions=6, replication_factor=2),
        rng=random.Random(3),
    )
    assert reply.error_code == 0
    placed = {b for r in produced if isinstance(r, records.PartitionRecord) for b in r.replicas}
    assert placed == {1, 2}
    produced, reply = topics.create_topic(
        cluster.image,
        CreateTopicRequest(name="u", num_partitions=1, replication_factor=3),
        rng=random.Random(3),
    )
    assert produced == [] and reply.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert "cordoned" in (reply.error_message or "")
