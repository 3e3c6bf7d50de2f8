"""An OffsetCommit is answered without an error only once the group's `__consumer_offsets`
partition holds it on every in-sync replica, also when the commit writes nothing new.

The case: a commit whose record could not reach the followers within `offsets.commit.timeout.ms`
is answered COORDINATOR_NOT_AVAILABLE, though its record stays in the leader's log and takes
effect there; the client retries the same offset, which needs no new record. That retry must not
be acknowledged before the high watermark covers the first one's record: if it were, a coordinator
failing before its followers fetched would take an acknowledged commit with it (Kafka answers a
write without records once its last written offset is committed, too).

Real brokers and a bare protocol client (the exact error codes); the followers of the group's
partition are paused with SIGSTOP while the commits are made, the coordinator is killed with
SIGKILL before they resume, and the partition's new leader answers the group's offset: the last
one acknowledged. (A commit of another group of the same partition, made first while they are
paused, answers the fetches they had sent before, so the group's records never reach them.)
"""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jbod_core import group_records
from jbod_kafka import protocol
from tests.broker.conftest import wait_for
from tests.kafka_api.conftest import KafkaCluster, start_kafka_cluster
from tests.kafka_api.raw_client import RawConnection
from tests.kafka_api.test_groups import neighbour_of
from tests.kafka_api.test_librdkafka import new_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

NONE, COORDINATOR_NOT_AVAILABLE = 0, 15
# The controller fences the killed coordinator after this; the paused followers resume well within it.
CONTROLLER_ARGS = ["--broker-session-timeout-ms", "8000"]
BROKER_SETTINGS = {
    "offsets_commit_timeout_ms": "500",  # how long a commit waits for the followers
    "replica_lag_time_max_ms": "120000",  # the paused followers stay in the ISR
}


def ask(kafka: KafkaCluster, node_id: int, api_key: int, version: int, **fields: Any) -> Any:
    address = kafka.cluster.brokers[node_id].kafka["SASL_PLAINTEXT"]
    with RawConnection(address) as conn:
        assert int(conn.authenticate("admin", kafka.admin_password).error_code) == 0
        return conn.request(
            api_key, version, protocol.build(protocol.request_type(api_key, version), **fields)
        )


def group_partition(kafka: KafkaCluster, group: str) -> dict[str, Any]:
    """The group's partition of `__consumer_offsets` as the controller has it."""
    index = group_records.partition_for(group, group_records.DEFAULT_PARTITIONS)
    partitions = kafka.cluster.admin.describe_topic(group_records.OFFSETS_TOPIC)["partitions"]
    [partition] = [p for p in partitions if p["partitionIndex"] == index]
    return partition


def commit(kafka: KafkaCluster, node_id: int, group: str, topic: str, offset: int) -> int:
    """OffsetCommit v8 of a standalone group (no member) to broker `node_id`: its error code."""
    answer = ask(
        kafka,
        node_id,
        8,
        8,
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=[
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": offset,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                ],
            }
        ],
    )
    return int(answer.topics[0].partitions[0].error_code)


def fetched(kafka: KafkaCluster, node_id: int, group: str, topic: str) -> int | None:
    """The group's committed offset as OffsetFetch v7 on broker `node_id` answers it (None: an error)."""
    answer = ask(
        kafka,
        node_id,
        9,
        7,
        group_id=group,
        topics=[{"name": topic, "partition_indexes": [0]}],
        require_stable=False,
    )
    if int(answer.error_code) != NONE:
        return None
    return int(answer.topics[0].partitions[0].committed_offset)


@contextlib.contextmanager
def paused(pids: list[int]) -> Iterator[None]:
    """The processes stopped (SIGSTOP, waited for: delivery is asynchronous) inside the block."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        for pid in pids:
            wait_for(lambda p=pid: _state(p) == "T", what=f"pid {pid} stopped")
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def test_a_retried_commit_is_acknowledged_only_once_the_followers_hold_it(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        kafka = start_kafka_cluster(stack, tmp_path, controller_args=CONTROLLER_ARGS, **BROKER_SETTINGS)
        topic = new_topic(kafka, partitions=1)
        group = f"g-durable-{uuid.uuid4().hex[:6]}"
        wait_for(  # the first FindCoordinator creates __consumer_offsets
            lambda: int(ask(kafka, 1, 10, 3, key=group, key_type=0).error_code) == NONE,
            timeout=60,
            what="a coordinator for the group",
        )
        partition = wait_for(
            lambda: (
                (p := group_partition(kafka, group))["leader"] >= 0
                and sorted(p["isr"]) == sorted(p["replicas"])
                and p
            ),
            timeout=60,
            what="the group's partition led, its ISR full",
        )
        coordinator = int(partition["leader"])
        followers = [int(r) for r in partition["replicas"] if r != coordinator]
        wait_for(
            lambda: commit(kafka, coordinator, group, topic, 10) == NONE,
            timeout=60,
            what="the first commit acknowledged",
        )
        answers = [NONE]
        processes = [kafka.cluster.brokers[f].process for f in followers]
        with paused([p.pid for p in processes if p is not None]):
            # A commit of another group of the partition answers the fetches the followers sent
            # before they stopped, so no record written after it reaches them.
            assert commit(kafka, coordinator, neighbour_of(group), topic, 5) == COORDINATOR_NOT_AVAILABLE
            # Appended, not replicated within offsets.commit.timeout.ms: answered 15, in effect.
            answers.append(commit(kafka, coordinator, group, topic, 20))
            # The client's retry of the same offset writes nothing new.
            answers.append(commit(kafka, coordinator, group, topic, 20))
            kafka.cluster.brokers[coordinator].kill()
        wait_for(
            lambda: group_partition(kafka, group)["leader"] in followers,
            timeout=60,
            what="a follower to lead the group's partition",
        )
        new_coordinator = int(group_partition(kafka, group)["leader"])
        offset = wait_for(
            lambda: fetched(kafka, new_coordinator, group, topic),
            timeout=60,
            what="the new coordinator to answer OffsetFetch",
        )
        acknowledged = [o for o, answer in zip((10, 20, 20), answers, strict=True) if answer == NONE]
        assert offset == acknowledged[-1], (
            f"answers {answers}: the acknowledged commit of {acknowledged[-1]} was lost"
        )
        assert answers == [NONE, COORDINATOR_NOT_AVAILABLE, COORDINATOR_NOT_AVAILABLE]
