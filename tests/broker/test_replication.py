"""The data plane with real processes: produce, replicate, fetch, ISR changes, truncation (issue 4)."""

from __future__ import annotations

import concurrent.futures
import signal
import time

from jbod_core.errors import ErrorCode
from tests.broker.conftest import UNASSIGNED, Cluster, wait_for
from tests.broker.data import fetch, fetch_all, isr, leader, produce, wait_for_isr
from tests.fs import requires_root

pytestmark = requires_root

INVALID_REQUIRED_ACKS = 21  # Kafka's, for acks other than -1, 0, 1


def _three(cluster: Cluster, **settings: str) -> None:
    for node in (1, 2, 3):
        cluster.add_broker(node, **settings)
    wait_for(lambda: cluster.all_unfenced(3), what="three unfenced brokers")


def _placed(cluster: Cluster, name: str, **kwargs: object) -> dict:
    reply = cluster.admin.create_topic(name, **kwargs)  # type: ignore[arg-type]
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


def test_acks_all_is_replicated_to_every_isr_member_and_fetchable(cluster: Cluster) -> None:
    _three(cluster)
    _placed(cluster, "orders", partitions=2, replication_factor=3, configs={"min.insync.replicas": "2"})
    lead = leader(cluster, "orders", 0)
    values = [f"order-{i}".encode() for i in range(500)]
    first = produce(cluster, lead, "orders", 0, values[:250])
    second = produce(cluster, lead, "orders", 0, values[250:], acks=1)
    assert (first["errorCode"], first["baseOffset"]) == (0, 0)
    assert (second["errorCode"], second["baseOffset"]) == (0, 250)
    wait_for(lambda: fetch(cluster, lead, "orders", 0, 0)["highWatermark"] == 500, what="HW 500")
    assert fetch_all(cluster, lead, "orders", 0) == list(enumerate(values))
    # acks=0: answered without an offset, yet appended and replicated like the others.
    fire = produce(cluster, lead, "orders", 0, [b"fire-and-forget"], acks=0)
    assert (fire["errorCode"], fire["baseOffset"]) == (0, -1)
    wait_for(lambda: fetch(cluster, lead, "orders", 0, 0)["highWatermark"] == 501, what="HW 501")
    assert fetch_all(cluster, lead, "orders", 0)[-1] == (500, b"fire-and-forget")
    # A long-poll fetch at the end waits for new data and returns it, woken by it (long before its
    # 30 s are up).
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(fetch, cluster, lead, "orders", 0, 501, max_wait_ms=30_000)
        time.sleep(0.5)  # fixed wait: the long poll must still be waiting after half a second
        assert not waiting.done(), waiting.result()  # still waiting: nothing past offset 500 yet
        assert produce(cluster, lead, "orders", 0, [b"late"])["errorCode"] == 0
        woken = waiting.result(timeout=15)
    assert [(r["offset"], r["value"]) for r in woken["records"]] == [(501, b"late")]
    # Every follower holds the data on disk.
    for node in (1, 2, 3):
        sizes = [
            r["sizeBytes"]
            for d in cluster.log_dirs(node)
            for r in d["replicas"]
            if r["topic"] == "orders" and r["partition"] == 0
        ]
        assert sizes and sizes[0] > 500 * 7, (node, sizes)


def test_non_leader_answers_6_and_bad_acks_answer_21(cluster: Cluster) -> None:
    _three(cluster)
    _placed(cluster, "t", partitions=1, replication_factor=2)
    topic = cluster.admin.describe_topic("t")["partitions"][0]
    lead = topic["leader"]
    follower = next(r for r in topic["replicas"] if r != lead)
    outsider = next(n for n in (1, 2, 3) if n not in topic["replicas"])
    assert produce(cluster, follower, "t", 0, [b"x"])["errorCode"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert produce(cluster, outsider, "t", 0, [b"x"])["errorCode"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert fetch(cluster, outsider, "t", 0, 0)["errorCode"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert fetch(cluster, follower, "t", 0, 0)["errorCode"] == 0  # a follower serves consumers (KIP-392)
    assert produce(cluster, lead, "nope", 0, [b"x"])["errorCode"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert produce(cluster, lead, "t", 7, [b"x"])["errorCode"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert fetch(cluster, lead, "t", 0, 5)["errorCode"] == ErrorCode.OFFSET_OUT_OF_RANGE
    assert produce(cluster, lead, "t", 0, [b"x"], acks=2)["errorCode"] == INVALID_REQUIRED_ACKS
    # Nothing was appended by any of the refused requests.
    assert fetch(cluster, lead, "t", 0, 0)["highWatermark"] == 0


def test_lagging_follower_leaves_the_isr_then_min_isr_refuses_and_it_rejoins(cluster: Cluster) -> None:
    _three(cluster, replica_lag_time_max_ms="1500")
    _placed(
        cluster,
        "t",
        replica_assignment=[[1, 2, 3]],
        configs={"min.insync.replicas": "3"},
    )
    assert produce(cluster, 1, "t", 0, [b"a"])["errorCode"] == 0
    follower = cluster.brokers[3].process
    assert follower is not None
    follower.send_signal(signal.SIGSTOP)  # a stuck follower: alive for the controller's session? no, briefly
    try:
        started = time.monotonic()
        timed_out = produce(cluster, 1, "t", 0, [b"b"], timeout_ms=300)
        assert timed_out["errorCode"] == ErrorCode.REQUEST_TIMED_OUT, timed_out
        # Appended while the ISR was whole; the high watermark covers it only once the stuck
        # follower left the ISR, which is then below min.insync.replicas: not acknowledged.
        after_append = produce(cluster, 1, "t", 0, [b"b2"], timeout_ms=15_000)
        assert after_append["errorCode"] == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, after_append
        wait_for_isr(cluster, "t", 0, {1, 2}, timeout=15)
        assert time.monotonic() - started >= 1.0  # not before the lag allowance
        refused = produce(cluster, 1, "t", 0, [b"c"])
        assert refused["errorCode"] == ErrorCode.NOT_ENOUGH_REPLICAS, refused
        assert produce(cluster, 1, "t", 0, [b"d"], acks=1)["errorCode"] == 0
    finally:
        follower.send_signal(signal.SIGCONT)
    wait_for_isr(cluster, "t", 0, {1, 2, 3}, timeout=20)
    # The controller shows the expanded ISR a moment before the leader has its AlterPartition
    # answer: until then the leader refuses with 19 before appending (retriable, nothing
    # written), as Kafka's does; any other answer ends the wait.
    deadline = time.monotonic() + 10
    while (code := produce(cluster, 1, "t", 0, [b"e"])["errorCode"]) == ErrorCode.NOT_ENOUGH_REPLICAS:
        assert time.monotonic() < deadline, "the leader never took the expanded ISR"
        time.sleep(0.1)
    assert code == 0
    values = [v for _, v in fetch_all(cluster, 1, "t", 0)]
    assert values == [b"a", b"b", b"b2", b"d", b"e"]


def test_follower_truncates_divergent_history_after_a_leader_change(cluster: Cluster) -> None:
    _three(cluster, replica_lag_time_max_ms="5000", broker_session_timeout_ms="3000")
    _placed(cluster, "t", replica_assignment=[[1, 2]], configs={"min.insync.replicas": "1"})
    assert produce(cluster, 1, "t", 0, [b"committed"])["errorCode"] == 0
    stuck = cluster.brokers[2].process
    assert stuck is not None
    stuck.send_signal(signal.SIGSTOP)
    # fixed wait: the leader holds the stopped follower's in-flight long poll at most 500 ms
    # (replica.fetch.wait.max.ms) and answers it empty, so no reply can carry what follows.
    time.sleep(1.0)
    # acks=1: only the leader has these; they are never acknowledged by the ISR.
    assert produce(cluster, 1, "t", 0, [b"lost-1", b"lost-2"], acks=1)["errorCode"] == 0
    cluster.brokers[1].kill()
    stuck.send_signal(signal.SIGCONT)
    wait_for(lambda: leader(cluster, "t", 0) == 2, timeout=20, what="broker 2 to lead")
    assert produce(cluster, 2, "t", 0, [b"new-1", b"new-2", b"new-3"])["errorCode"] == 0
    cluster.brokers[1].start()
    wait_for_isr(cluster, "t", 0, {1, 2}, timeout=30)
    # Make broker 1 the leader again: it must serve broker 2's history, not its own old suffix.
    cluster.brokers[2].kill()
    wait_for(lambda: leader(cluster, "t", 0) == 1, timeout=20, what="broker 1 to lead again")
    wait_for(
        lambda: fetch(cluster, 1, "t", 0, 0)["highWatermark"] >= 4, timeout=20, what="HW on the new leader"
    )
    assert [v for _, v in fetch_all(cluster, 1, "t", 0)] == [b"committed", b"new-1", b"new-2", b"new-3"]


def test_offline_dir_answers_56_and_healthy_dir_keeps_serving(cluster: Cluster) -> None:
    _three(cluster)
    topic = _placed(cluster, "t", partitions=6, replication_factor=3)
    failed = cluster.dir_id(1, 0)
    in_failed = [
        p["partitionIndex"] for p in topic["partitions"] if p["directories"][p["replicas"].index(1)] == failed
    ]
    healthy = [p["partitionIndex"] for p in topic["partitions"] if p["partitionIndex"] not in in_failed]
    assert in_failed and healthy
    cluster.mounts[(1, 0)].shutdown()
    wait_for(lambda: failed in cluster.admin.broker(1)["offlineLogDirs"], what="the dir reported offline")
    for index in in_failed:
        reply = produce(cluster, 1, "t", index, [b"x"])
        assert reply["errorCode"] == ErrorCode.KAFKA_STORAGE_ERROR, reply
        assert fetch(cluster, 1, "t", index, 0)["errorCode"] == ErrorCode.KAFKA_STORAGE_ERROR
    wait_for(
        lambda: all(leader(cluster, "t", i) != 1 for i in in_failed), what="leadership off the failed dir"
    )
    for index in range(6):
        lead = leader(cluster, "t", index)
        reply = produce(cluster, lead, "t", index, [f"after-{index}".encode()])
        assert reply["errorCode"] == 0, (index, lead, reply)
    # Broker 1 still replicates its healthy-dir partitions.
    for index in healthy:
        assert 1 in isr(cluster, "t", index)
