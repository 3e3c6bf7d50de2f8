"""`unclean.leader.election.enable` on a cluster of ours (docs/decisions.md, "Unclean leader
election"), as Kafka 4.3.1 behaves in the same scenario (there the election waits for the
controller's periodic check, `unclean.leader.election.interval.ms`, 5 minutes; here it is
immediate).

Two brokers; two topics `kept` and `unclean`, RF 2 with the leader on broker 1,
min.insync.replicas=1. Records `a0..a4` are replicated; broker 2 is killed and leaves the ISRs;
`b0..b4` are acknowledged by broker 1 alone; broker 1 is killed and broker 2 restarted. No
replica in the ISR can lead: both partitions stay leaderless (clients get LEADER_NOT_AVAILABLE,
a produce times out) until IncrementalAlterConfigs sets `unclean.leader.election.enable=true`
on `unclean`, whose partition then gets broker 2 as leader (ISR [2], leader epoch bumped) and
takes writes; `b0..b4` are lost, as on Kafka. `kept` stays leaderless until broker 1 comes back,
then has every record. Broker 1 truncates its `unclean` replica to broker 2's log: once broker 2
is stopped and broker 1 leads again, `unclean` reads `a0..a4, c0`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from tests.broker.conftest import wait_for
from tests.kafka_api.conftest import KafkaCluster, earliest_and_values, start_kafka_cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

KEPT = "kept"
UNCLEAN = "unclean"
TIMEOUT = 30.0
SETTINGS = {"broker_session_timeout_ms": "3000", "replica_lag_time_max_ms": "3000"}


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaCluster]:
    with contextlib.ExitStack() as stack:
        yield start_kafka_cluster(stack, tmp_path, brokers=2, **SETTINGS)


def _partition(kafka: KafkaCluster, topic: str) -> dict[str, Any]:
    part: dict[str, Any] = kafka.cluster.admin.describe_topic(topic)["partitions"][0]
    return part


def _produce(
    kafka: KafkaCluster, topic: str, values: list[str], *, timeout_ms: int = 30_000
) -> list[KafkaError]:
    """Produce with acks=all; the delivery errors (none when every record was acknowledged)."""
    errors: list[KafkaError] = []
    producer = Producer(kafka.client_config(**{"acks": "all", "message.timeout.ms": timeout_ms}))
    for value in values:
        producer.produce(topic, value.encode(), partition=0, on_delivery=lambda e, _m: e and errors.append(e))
    assert producer.flush(timeout_ms / 1000 + 10) == 0
    return errors


def _values(kafka: KafkaCluster, topic: str) -> list[str]:
    return [v.decode() for v in earliest_and_values(kafka.client_config(), topic, timeout=TIMEOUT)[1]]


def _unfenced(kafka: KafkaCluster, broker_id: int) -> bool:
    return any(b["brokerId"] == broker_id and not b["fenced"] for b in kafka.cluster.admin.brokers())


def test_a_replica_outside_the_isr_leads_only_once_the_topic_allows_it(kafka: KafkaCluster) -> None:
    admin = kafka.cluster.admin
    for topic in (KEPT, UNCLEAN):
        reply = admin.create_topic(topic, replica_assignment=[[1, 2]], configs={"min.insync.replicas": "1"})
        assert reply["errorCode"] == 0, reply
    for topic in (KEPT, UNCLEAN):
        wait_for(lambda t=topic: kafka.cluster.placed(t), timeout=TIMEOUT, what=f"{topic} placed")
        assert _produce(kafka, topic, [f"a{i}" for i in range(5)]) == []
        wait_for(
            lambda t=topic: _partition(kafka, t)["isr"] == [1, 2],
            timeout=TIMEOUT,
            what=f"{topic}: ISR [1, 2]",
        )

    # The follower dies and leaves the ISRs; the leader alone acknowledges more records.
    kafka.cluster.brokers[2].kill()
    for topic in (KEPT, UNCLEAN):
        wait_for(
            lambda t=topic: _partition(kafka, t)["isr"] == [1], timeout=TIMEOUT, what=f"{topic}: ISR [1]"
        )
        assert _produce(kafka, topic, [f"b{i}" for i in range(5)]) == []

    # The leader dies; the follower comes back: no ISR member can lead.
    kafka.cluster.brokers[1].kill()
    kafka.cluster.brokers[2].start()
    wait_for(
        lambda: _unfenced(kafka, 2) and not _unfenced(kafka, 1), timeout=TIMEOUT, what="2 unfenced, 1 fenced"
    )
    for topic in (KEPT, UNCLEAN):
        part = _partition(kafka, topic)
        assert (part["leader"], part["isr"], part["leaderEpoch"]) == (-1, [1], 1)
    client = AdminClient(kafka.client_config())
    seen = client.list_topics(UNCLEAN, timeout=TIMEOUT).topics[UNCLEAN].partitions[0]
    assert (seen.leader, seen.error.code()) == (-1, KafkaError.LEADER_NOT_AVAILABLE)
    [error] = _produce(kafka, UNCLEAN, ["refused"], timeout_ms=3000)
    assert error.code() == KafkaError._MSG_TIMED_OUT

    # Turned on for one topic: its partition gets the replica outside the ISR as leader.
    change = ConfigResource(
        ConfigResource.Type.TOPIC,
        UNCLEAN,
        incremental_configs=[
            ConfigEntry("unclean.leader.election.enable", "true", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    client.incremental_alter_configs([change])[change].result(TIMEOUT)
    elected = wait_for(
        lambda: (p := _partition(kafka, UNCLEAN))["leader"] != -1 and p,
        timeout=TIMEOUT,
        what="unclean: a leader",
    )
    assert (elected["leader"], elected["isr"], elected["leaderEpoch"]) == (2, [2], 2)
    warned = "Unclean leader election: broker 2 leads unclean-0 (leader epoch 2), outside the ISR [1]"
    assert warned in kafka.cluster.controller.log_path.read_text()
    assert _produce(kafka, UNCLEAN, ["c0"]) == []
    assert _values(kafka, UNCLEAN) == ["a0", "a1", "a2", "a3", "a4", "c0"]  # b0..b4 lost, as on Kafka
    assert _partition(kafka, KEPT)["leader"] == -1

    # The old leader comes back: `kept` gets it back (clean), `unclean` takes it in as a follower
    # that first drops the records only it had.
    kafka.cluster.brokers[1].start()
    wait_for(lambda: _partition(kafka, KEPT)["leader"] == 1, timeout=TIMEOUT, what="kept: leader 1")
    assert _values(kafka, KEPT) == [f"a{i}" for i in range(5)] + [f"b{i}" for i in range(5)]
    wait_for(
        lambda: sorted(_partition(kafka, UNCLEAN)["isr"]) == [1, 2],
        timeout=TIMEOUT,
        what="unclean: ISR [1, 2]",
    )
    assert kafka.cluster.brokers[2].stop() == 0  # a controlled shutdown: leadership moves to 1
    wait_for(lambda: _partition(kafka, UNCLEAN)["leader"] == 1, timeout=TIMEOUT, what="unclean: leader 1")
    assert _values(kafka, UNCLEAN) == ["a0", "a1", "a2", "a3", "a4", "c0"]
