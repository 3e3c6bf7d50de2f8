"""Incremental follower fetch sessions (KIP-227) with real processes: idle followers stay in the
ISR, new data on one of many partitions is replicated at once, forgotten partitions leave the
sessions, a lost session falls back to a full fetch, and a leader restart recovers."""

from __future__ import annotations

import base64
import functools
import math
import re
import uuid
from typing import Any

import httpx

from jbod_kafka import protocol
from tests.broker.conftest import UNASSIGNED, Cluster, wait_for
from tests.broker.data import fetch, isr, leader, produce, wait_for_isr
from tests.fs import requires_root
from tests.kafka_api.raw_client import RawConnection

pytestmark = requires_root

_SAMPLE = re.compile(r"^(jbod_replica_fetch_[a-z_]+)(\{[^}]*\})? ([0-9.e+-]+)$", re.M)
INCREMENTAL = 'jbod_replica_fetch_requests_total{kind="incremental"}'
INCREMENTAL_LISTED = 'jbod_replica_fetch_request_partitions_total{kind="incremental"}'
#: How long a leader holds an idle follower's request: `replica.fetch.wait.max.ms`, 500 by default.
IDLE_REQUEST_S = 0.5
#: An idle stretch that shows a follower kept in the ISR: longer than `replica.lag.time.max.ms`
#: (1.5 s here) plus the leader's ISR scan period (half of it), with 0.75 s for an AlterPartition.
PAST_THE_LAG_ALLOWANCE_S = 3.0


def _metrics(cluster: Cluster, node: int) -> dict[str, float]:
    text = httpx.get(f"{cluster.brokers[node].url}/metrics", timeout=10).text
    return {name + (labels or ""): float(value) for name, labels, value in _SAMPLE.findall(text)}


def _total(cluster: Cluster, nodes: tuple[int, ...], name: str) -> float:
    return sum(_metrics(cluster, n).get(name, 0.0) for n in nodes)


def _wait_idle_for(cluster: Cluster, leaders: tuple[int, ...], *, sessions: int, seconds: float) -> None:
    """Until the `sessions` sessions held by `leaders` served idle requests for `seconds` at least,
    counted by the leaders: each idle request is held `IDLE_REQUEST_S`, so once they served
    `sessions` x n more, one session sent n, back to back. Two more per session than the time
    needs: the request in flight at the start, and one answered early with the last news."""
    more = sessions * (math.ceil(seconds / IDLE_REQUEST_S) + 2)
    start = _total(cluster, leaders, INCREMENTAL)
    wait_for(
        lambda: _total(cluster, leaders, INCREMENTAL) - start >= more,
        timeout=60,
        what=f"{more} more incremental requests at brokers {leaders}",
    )


def _placed(cluster: Cluster, name: str, **kwargs: Any) -> dict[str, Any]:
    reply = cluster.admin.create_topic(name, **kwargs)
    assert reply["errorCode"] == 0, reply
    wait_for(
        lambda: all(
            d != UNASSIGNED
            for p in cluster.admin.describe_topic(name)["partitions"]
            for d in p["directories"]
        ),
        what=f"placements of {name}",
    )
    return cluster.admin.describe_topic(name)


def _replica_fetch(
    cluster: Cluster,
    node: int,
    *,
    replica_id: int,
    session_id: int = 0,
    session_epoch: int = -1,
    partitions: tuple[tuple[str, int], ...] = (),
) -> dict[str, Any]:
    """A follower's Fetch (v17, a replica id, `partitions` as (topic id, index) from offset 0 at
    leader epoch 0) to broker `node`'s Kafka listener, logged in as the brokers log in to each
    other (`jbod-broker`, the cluster token): the top-level error, the session id, and each
    answered partition's (index, error)."""
    topics = [
        {
            "topic_id": uuid.UUID(bytes=base64.urlsafe_b64decode(topic_id + "==")),
            "partitions": [
                {
                    "partition": index,
                    "current_leader_epoch": 0,
                    "fetch_offset": 0,
                    "partition_max_bytes": 1 << 20,
                }
            ],
        }
        for topic_id, index in partitions
    ]
    body = protocol.build(
        protocol.request_type(1, 17),
        replica_state={"replica_id": replica_id, "replica_epoch": -1},
        max_wait=0,
        min_bytes=1,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=topics,
        forgotten_topics_data=[],
        rack_id="",
    )
    with RawConnection(cluster.brokers[node].kafka["SASL_PLAINTEXT"]) as conn:
        login = conn.authenticate_scram("jbod-broker", cluster.cluster_token)
        assert int(login.error_code) == 0, login
        reply = conn.request(1, 17, body)
    return {
        "errorCode": int(reply.error_code),
        "sessionId": int(reply.session_id),
        "partitions": [
            (int(p.partition_index), int(p.error_code)) for t in reply.responses for p in t.partitions
        ],
    }


def _epochs(cluster: Cluster, topic: str) -> dict[int, tuple[int, list[int]]]:
    return {
        p["partitionIndex"]: (p["partitionEpoch"], sorted(p["isr"]))
        for p in cluster.admin.describe_topic(topic)["partitions"]
    }


def test_idle_followers_stay_in_the_isr_new_data_flows_at_once_and_forgotten_partitions_leave(
    cluster: Cluster,
) -> None:
    nodes = (1, 2, 3)
    for node in nodes:
        cluster.add_broker(node, replica_lag_time_max_ms="1500")
    wait_for(lambda: cluster.all_unfenced(3), what="three unfenced brokers")
    many = _placed(cluster, "many", partitions=30, replication_factor=3, configs={"min.insync.replicas": "3"})
    _placed(cluster, "gone", partitions=6, replication_factor=3)
    # Every follower of every partition sits in its leader's session: 2 per partition.
    wait_for(
        lambda: _total(cluster, nodes, "jbod_replica_fetch_session_partitions") == (30 + 6) * 2,
        what="36 partitions x 2 followers in the leaders' sessions",
    )
    assert (
        _total(cluster, nodes, "jbod_replica_fetch_sessions") == 6
    )  # each broker: one per leader it follows

    # Idle past the lag allowance: the followers send empty requests, and stay in the ISR.
    before = _epochs(cluster, "many")
    assert all(members == [1, 2, 3] for _, members in before.values()), before
    listed = _total(cluster, nodes, INCREMENTAL_LISTED)
    _wait_idle_for(cluster, nodes, sessions=6, seconds=PAST_THE_LAG_ALLOWANCE_S)
    assert _epochs(cluster, "many") == before  # no ISR shrink (nor shrink + expand) meanwhile
    assert _total(cluster, nodes, INCREMENTAL_LISTED) == listed

    # New data on one partition at a time: acks=-1 (every replica; that the followers' long-polls
    # are woken for it is the next test's).
    for index in range(0, 30, 2):
        lead = many["partitions"][index]["leader"]
        reply = produce(cluster, lead, "many", index, [f"record-{index}".encode()])
        assert reply["errorCode"] == 0, (index, reply)
    for index in range(0, 30, 2):
        lead = many["partitions"][index]["leader"]
        assert fetch(cluster, lead, "many", index, 0)["highWatermark"] == 1

    # A deleted topic's partitions are forgotten: they leave every session.
    assert cluster.admin.delete_topic("gone")["errorCode"] == 0
    wait_for(
        lambda: _total(cluster, nodes, "jbod_replica_fetch_session_partitions") == 30 * 2,
        what="the deleted topic's partitions to leave the sessions",
    )
    listed = _total(cluster, nodes, INCREMENTAL_LISTED)
    _wait_idle_for(cluster, nodes, sessions=6, seconds=1.0)
    assert _total(cluster, nodes, INCREMENTAL_LISTED) == listed  # those requests listed no partition
    assert all(sorted(isr(cluster, "many", i)) == [1, 2, 3] for i in range(30))
    for node in nodes:
        text = cluster.brokers[node].log_path.read_text()
        assert "Fetching from broker" not in text and "Fetcher " not in text, text[-3000:]


def test_new_data_wakes_the_followers_long_polls(cluster: Cluster) -> None:
    """The followers' idle requests wait up to 30 s at the leader (`replica.fetch.wait.max.ms`):
    an acks=-1 produce answered within its 5 s timeout, on each partition in turn, shows the
    leader answered them as soon as the new record arrived instead of at the end of their wait."""
    nodes = (1, 2, 3)
    for node in nodes:
        cluster.add_broker(node, replica_fetch_wait_max_ms="30000", replica_lag_time_max_ms="60000")
    wait_for(lambda: cluster.all_unfenced(3), what="three unfenced brokers")
    topic = _placed(
        cluster, "woken", partitions=6, replication_factor=3, configs={"min.insync.replicas": "3"}
    )
    wait_for(
        lambda: _total(cluster, nodes, "jbod_replica_fetch_session_partitions") == 6 * 2,
        what="6 partitions x 2 followers in the leaders' sessions",
    )
    for index in range(6):
        lead = topic["partitions"][index]["leader"]
        reply = produce(cluster, lead, "woken", index, [f"record-{index}".encode()], timeout_ms=5000)
        assert reply["errorCode"] == 0, (index, reply)
        assert fetch(cluster, lead, "woken", index, 0)["highWatermark"] == 1


def test_a_lost_session_falls_back_to_a_full_fetch_and_a_leader_restart_recovers(cluster: Cluster) -> None:
    for node in (1, 2):
        cluster.add_broker(node, replica_lag_time_max_ms="1500", broker_session_timeout_ms="3000")
    wait_for(lambda: cluster.all_unfenced(2), what="two unfenced brokers")
    topic = _placed(cluster, "t", replica_assignment=[[1, 2]] * 20, configs={"min.insync.replicas": "2"})
    topic_id = topic["topicId"]
    wait_for(
        lambda: _total(cluster, (1,), "jbod_replica_fetch_session_partitions") == 20,
        what="broker 2's session",
    )

    # The leader refuses an unknown session (70), another follower's session (70) and a wrong
    # epoch (71); a session's epochs count from 1.
    stranger = functools.partial(_replica_fetch, cluster, 1, replica_id=99)
    assert stranger(session_id=12345, session_epoch=1)["errorCode"] == 70
    opened = stranger(session_id=0, session_epoch=0)
    assert opened["errorCode"] == 0 and opened["sessionId"] > 0 and opened["partitions"] == []
    theirs = functools.partial(stranger, session_id=opened["sessionId"])
    assert theirs(session_epoch=5)["errorCode"] == 71
    assert theirs(session_epoch=1)["errorCode"] == 0
    assert theirs(session_epoch=1)["errorCode"] == 71
    assert theirs(replica_id=2, session_epoch=2)["errorCode"] == 70
    # Without session fields (a follower that predates sessions): a sessionless fetch, every
    # listed partition answered (6 here: broker 99 is no replica), no session kept.
    sessionless = stranger(partitions=((topic_id, 3),))
    assert sessionless["sessionId"] == 0
    assert sessionless["partitions"] == [(3, 6)]
    # A full request in broker 2's name replaces broker 2's own session on the leader, as a
    # restarted leader would have lost it: broker 2's next request is answered 70.
    ours = functools.partial(_replica_fetch, cluster, 1, replica_id=2)
    opened = ours(session_id=0, session_epoch=0)
    ours = functools.partial(ours, session_id=opened["sessionId"])
    log_2 = cluster.brokers[2].log_path
    wait_for(
        lambda: "Fetch session with broker 1 ended (errorCode 70)" in log_2.read_text(),
        what="broker 2 to find its session gone",
    )
    # ... and it fell back to a full fetch: its new session holds every partition again, and
    # acks=-1 (min.insync.replicas 2) needs it.
    wait_for(
        lambda: _total(cluster, (1,), "jbod_replica_fetch_session_partitions") == 20, what="a new session"
    )
    assert ours(session_epoch=1)["errorCode"] == 70  # ours was replaced
    for index in (0, 7, 19):
        assert produce(cluster, 1, "t", index, [b"after-70"], timeout_ms=5000)["errorCode"] == 0

    # The leader restarts (kill -9): broker 2 leads, broker 1 comes back as its follower.
    cluster.brokers[1].kill()
    wait_for(
        lambda: all(leader(cluster, "t", i) == 2 for i in range(20)), timeout=30, what="broker 2 to lead"
    )
    cluster.brokers[1].start()
    for index in range(20):
        wait_for_isr(cluster, "t", index, {1, 2}, timeout=30)
    wait_for(
        lambda: _total(cluster, (2,), "jbod_replica_fetch_session_partitions") == 20,
        what="broker 1's session",
    )
    for index in (0, 7, 19):
        reply = produce(cluster, 2, "t", index, [b"after-restart"], timeout_ms=5000)
        assert reply["errorCode"] == 0, reply
        assert fetch(cluster, 2, "t", index, 0)["highWatermark"] == 2
    # Idle again past the lag allowance: the restarted follower stays in the ISR.
    epochs = _epochs(cluster, "t")
    _wait_idle_for(cluster, (2,), sessions=1, seconds=PAST_THE_LAG_ALLOWANCE_S)
    assert _epochs(cluster, "t") == epochs
