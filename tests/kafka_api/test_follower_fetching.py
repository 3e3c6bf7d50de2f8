"""Racks on a real cluster (issue 34): rack-aware placement through CreateTopics, and follower
fetching (KIP-392) with librdkafka's `client.rack` — the leader points a consumer of another rack
at its rack's in-sync follower, which serves the records; a consumer without a rack reads from
the leader."""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from jbod_client.controller import read_token
from jbod_core.errors import ErrorCode
from jbod_core.replica_selector import RACK_AWARE_SELECTOR
from jbod_kafka import protocol
from tests.broker.conftest import Cluster, start_cluster, wait_for
from tests.kafka_api.raw_client import RawConnection

RACKS = {1: "a", 2: "b", 3: "c"}
RECORDS = 300
SENT = [f"record-{i}".encode() for i in range(RECORDS)]


def racked_cluster(stack: contextlib.ExitStack, base: Path) -> Cluster:
    cluster = start_cluster(stack, base)
    for node_id, rack in RACKS.items():
        cluster.add_broker(
            node_id,
            dirs=1,
            loop=False,
            properties={"broker.rack": rack, "replica.selector.class": RACK_AWARE_SELECTOR},
        )
    wait_for(
        lambda: (c := cluster.admin.cluster())["brokers"] == len(RACKS) and c["fencedBrokers"] == 0,
        what="every broker registered and unfenced",
    )
    return cluster


def follower_bytes(cluster: Cluster, node_id: int) -> float:
    text = httpx.get(f"{cluster.brokers[node_id].url}/metrics", timeout=10).text
    found = re.search(r"^jbod_fetch_follower_bytes_total (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def _read_all(config: dict[str, Any], topic: str) -> tuple[list[bytes], dict[str, Any]]:
    """Every record of `topic`'s partition 0 from the beginning, and librdkafka's last statistics
    of that partition once it has read them (its `broker`: where it fetched from)."""
    stats: dict[str, Any] = {}
    consumer = Consumer(
        {
            **config,
            "group.id": f"read-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "statistics.interval.ms": 200,
            "stats_cb": lambda text: stats.update(json.loads(text)),
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        values: list[bytes] = []
        while len(values) < RECORDS:
            message = consumer.poll(30)
            assert message is not None, f"only {len(values)} of {RECORDS} records read"
            assert message.error() is None, message.error()
            assert message.offset() == len(values)
            values.append(message.value())
        stats.clear()
        extra: list[Any] = []

        def reported() -> bool:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                extra.append(message)
            return topic in stats.get("topics", {})

        wait_for(reported, what="librdkafka's statistics")
        assert extra == []  # nothing more: exactly what was produced
        return values, stats["topics"][topic]["partitions"]["0"]
    finally:
        consumer.close()


@dataclass(frozen=True)
class Observed:
    """What `placement_and_follower_fetching` saw: partition 0's leader and the follower chosen,
    librdkafka's partition statistics of the consumer with `client.rack` and of the one without."""

    leader: int
    follower: int
    with_rack: dict[str, Any]
    without_rack: dict[str, Any]


def placement_and_follower_fetching(
    config: dict[str, Any], *, between: Callable[[int], None] = lambda _follower: None
) -> Observed:
    """The scenario, the same against our brokers and Kafka's (`config`: librdkafka's settings of
    a cluster whose brokers 1-3 are in RACKS with the rack-aware selector): topics created through
    the admin client have their replicas on distinct racks and leaders spread; a consumer with
    `client.rack` of a follower of partition 0 and one without each read every record exactly once
    in order. `between(follower)` runs after the first consumer (to read a broker's counters)."""
    admin = AdminClient(config)
    created = admin.create_topics([NewTopic("racked", 6, 3), NewTopic("pairs", 6, 2)])
    for future in created.values():
        future.result(30)
    racks = {n.id: n.rack for n in admin.describe_cluster().result(timeout=30).nodes}
    assert racks == RACKS
    for name, factor in (("racked", 3), ("pairs", 2)):
        wait_for(lambda n=name: len(admin.list_topics(n, timeout=30).topics[n].partitions) == 6, what=name)
        parts = admin.list_topics(name, timeout=30).topics[name].partitions.values()
        for part in parts:
            assert len({racks[b] for b in part.replicas}) == factor
        assert sorted(p.leader for p in parts) == [1, 1, 2, 2, 3, 3]  # leaders spread over racks

    producer = Producer({**config, "acks": "all", "enable.idempotence": True})
    for value in SENT:
        producer.produce("racked", value, partition=0)
    assert producer.flush(30) == 0
    part = admin.list_topics("racked", timeout=30).topics["racked"].partitions[0]
    follower = next(b for b in part.replicas if b != part.leader)
    wait_for(
        lambda: (
            set(admin.list_topics("racked", timeout=30).topics["racked"].partitions[0].isrs)
            == set(part.replicas)
        ),
        what="every replica in sync",
    )
    values, with_rack = _read_all({**config, "client.rack": RACKS[follower]}, "racked")
    assert values == SENT
    between(follower)
    values, without_rack = _read_all(config, "racked")
    assert values == SENT
    return Observed(part.leader, follower, with_rack, without_rack)


def _fetch(
    cluster: Cluster,
    node: int,
    version: int,
    *,
    rack: str,
    offset: int = 0,
    leader_epoch: int = -1,
    isolation_level: int = 0,
) -> Any:
    """A consumer's raw Fetch of "racked"-0 (v10 carries no rack) to broker `node` as admin: the
    partition's answer."""
    fields: dict[str, Any] = {"rack_id": rack} if version >= 11 else {}
    body = protocol.build(
        protocol.request_type(1, version),
        replica_id=-1,
        max_wait=0,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=isolation_level,
        session_id=0,
        session_epoch=-1,
        topics=[
            {
                "topic": "racked",
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": leader_epoch,
                        "fetch_offset": offset,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        forgotten_topics_data=[],
        **fields,
    )
    with RawConnection(cluster.brokers[node].kafka["SASL_PLAINTEXT"]) as conn:
        login = conn.authenticate_scram("admin", read_token(cluster.controller.admin_token_file))
        assert int(login.error_code) == 0, login
        reply = conn.request(1, version, body)
    [topic] = reply.responses
    [answer] = topic.partitions
    return answer


def _kip_392_answers(cluster: Cluster, leader: int, follower: int) -> None:
    """Kafka's answers, one by one: the leader points a consumer of the follower's rack there
    with no records and its own offsets; a client in the leader's rack, or naming no rack, reads
    from the leader; the follower serves v11+ and refuses v10; past the follower's end,
    OFFSET_OUT_OF_RANGE, except a v11 fetch without a leader epoch (empty)."""
    pointed = _fetch(cluster, leader, 11, rack=RACKS[follower])
    assert (int(pointed.error_code), int(pointed.preferred_read_replica)) == (0, follower)
    assert (bytes(pointed.records or b""), int(pointed.high_watermark)) == (b"", RECORDS)
    for rack in (RACKS[leader], "", "elsewhere"):
        served = _fetch(cluster, leader, 12, rack=rack)
        assert int(served.preferred_read_replica) == -1 and served.records, rack
    on_follower = _fetch(cluster, follower, 12, rack=RACKS[follower])
    assert (int(on_follower.error_code), int(on_follower.high_watermark)) == (0, RECORDS)
    assert int(on_follower.preferred_read_replica) == -1 and on_follower.records
    committed = _fetch(cluster, follower, 12, rack="", isolation_level=1)  # read_committed: up to its LSO
    assert (int(committed.error_code), int(committed.last_stable_offset)) == (
        0,
        RECORDS,
    ) and committed.records
    assert int(_fetch(cluster, follower, 10, rack="").error_code) == int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    past = _fetch(cluster, follower, 12, rack="", offset=RECORDS + 10, leader_epoch=0)
    assert int(past.error_code) == int(ErrorCode.OFFSET_OUT_OF_RANGE)
    stale = _fetch(cluster, follower, 11, rack="", offset=RECORDS + 10)
    assert (int(stale.error_code), bytes(stale.records or b"")) == (0, b"")


def test_placement_and_follower_fetching_by_rack(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        cluster = racked_cluster(stack, tmp_path)
        before = {b: follower_bytes(cluster, b) for b in RACKS}
        after: dict[int, float] = {}
        seen = placement_and_follower_fetching(
            cluster.kafka_config(),
            between=lambda _f: after.update({b: follower_bytes(cluster, b) for b in RACKS}),
        )
        # The consumer with client.rack fetched from its rack's follower: librdkafka says so, and
        # that broker counted the bytes; the consumer without a rack read from the leader.
        assert (seen.with_rack["leader"], seen.with_rack["broker"]) == (seen.leader, seen.follower)
        assert after[seen.follower] - before[seen.follower] >= sum(map(len, SENT))
        assert all(after[b] == before[b] for b in RACKS if b != seen.follower)
        assert seen.without_rack["broker"] == seen.leader
        assert {b: follower_bytes(cluster, b) for b in RACKS} == after
        _kip_392_answers(cluster, seen.leader, seen.follower)
