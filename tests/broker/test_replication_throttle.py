"""Kafka's replication throttles on real processes (issue 24): a follower out of the ISR catches
up no faster than its throttle allows, measured on its disk against the elapsed time, on the
follower side (`follower.replication.throttled.rate`) and on the leader side
(`leader.replication.throttled.rate`), while in-sync replication (and with it acks=all
production) is never throttled.

One cluster for the module: a controller and three brokers with one plain log dir each and
`replica.fetch.max.bytes` 64 KiB (the most one fetch moves per partition, in the bound). Each test
uses a topic of its own and sets its throttle as the cluster default, so the in-sync follower
has the same rate as the one catching up: it is not throttled because it is in the ISR.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from jbod_core.messages import AlterBrokerConfigsRequest, AlterConfigOp, AlterTopicConfigsRequest
from tests.broker.conftest import UNASSIGNED, Cluster, start_cluster, wait_for
from tests.broker.data import isr, produce, wait_for_isr

pytestmark = [pytest.mark.slow, pytest.mark.integration]

FETCH_MAX_BYTES = 65536
RATE = 250_000  # bytes per second
BURST = RATE  # the token bucket's burst: one second at the rate (jbod_core.token_bucket)
FILES_SLACK = 64 * 1024  # partition.metadata, the sparse index, the epoch checkpoint
CATCH_UP_BYTES = 1_500_000
RECORD = b"x" * 10_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with contextlib.ExitStack() as stack:
        cluster = start_cluster(stack, tmp_path_factory.mktemp("throttle"))
        for node in (1, 2, 3):
            cluster.add_broker(node, dirs=1, loop=False, replica_fetch_max_bytes=str(FETCH_MAX_BYTES))
        wait_for(lambda: cluster.all_unfenced(3), what="three unfenced brokers")
        yield cluster


def _set_broker_default(cluster: Cluster, name: str, value: str | None) -> None:
    op = AlterConfigOp(name=name, op="SET", value=value) if value else AlterConfigOp(name=name, op="DELETE")
    reply = cluster.admin.alter_broker_configs("", AlterBrokerConfigsRequest(configs=[op]))
    assert reply.error_code == 0, reply


def _topic(cluster: Cluster, name: str, throttled_key: str) -> tuple[int, int, int]:
    """A topic of one partition on the three brokers with `throttled_key` = `*`: (leader, the
    follower to stop, the follower that stays in sync)."""
    reply = cluster.admin.create_topic(
        name, partitions=1, replication_factor=3, configs={"min.insync.replicas": "2"}
    )
    assert reply["errorCode"] == 0, reply
    wait_for(
        lambda: all(
            d != UNASSIGNED for d in cluster.admin.describe_topic(name)["partitions"][0]["directories"]
        ),
        what=f"placements of {name}",
    )
    altered = cluster.admin.alter_topic_configs(
        name, AlterTopicConfigsRequest(configs=[AlterConfigOp(name=throttled_key, op="SET", value="*")])
    )
    assert altered.error_code == 0, altered
    part = cluster.admin.describe_topic(name)["partitions"][0]
    lead = part["leader"]
    stopped, in_sync = (r for r in part["replicas"] if r != lead)
    return lead, stopped, in_sync


def _size(cluster: Cluster, node: int, topic: str) -> int:
    try:
        dirs = cluster.log_dirs(node)
    except httpx.TransportError:
        return 0  # a broker starting: not listening yet
    for d in dirs:
        for replica in d["replicas"]:
            if replica["topic"] == topic:
                return int(replica["sizeBytes"])
    return 0


def _log_bytes(cluster: Cluster, node: int, topic: str) -> int:
    """The bytes of the replica's segments (its `.log` files), what replication copies byte for
    byte. `sizeBytes` counts every file of the replica dir, the offset indexes too, which each
    broker writes in batches at its own times (at a flush, a roll, every 64 entries)."""
    for d in cluster.log_dirs(node):
        for replica in d["replicas"]:
            if replica["topic"] == topic and not replica["future"]:
                replica_dir = Path(d["path"]) / f"{topic}-{replica['partition']}"
                return sum(segment.stat().st_size for segment in replica_dir.glob("*.log"))
    return 0


def _metric(cluster: Cluster, node: int, name: str, side: str) -> float:
    text = httpx.get(f"{cluster.brokers[node].url}/metrics", timeout=10).text
    found = re.search(rf'^{name}\{{side="{side}"\}} (\S+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def _catch_up_within_the_throttle(
    cluster: Cluster, topic: str, lead: int, stopped: int, in_sync: int
) -> None:
    """Stop `stopped`, produce CATCH_UP_BYTES with acks=all (the leader and `in_sync` ack), start
    it again and sample its replica's size until it has caught up: every sample within
    rate * elapsed + burst + one fetch."""
    before = _size(cluster, stopped, topic)
    cluster.brokers[stopped].kill()
    wait_for_isr(cluster, topic, 0, {lead, in_sync}, timeout=30)
    for _ in range(CATCH_UP_BYTES // (len(RECORD) * 10)):
        assert produce(cluster, lead, topic, 0, [RECORD] * 10)["errorCode"] == 0
    target = _size(cluster, lead, topic)
    # the in-sync follower has every byte already
    assert _log_bytes(cluster, in_sync, topic) == _log_bytes(cluster, lead, topic) > 0
    started = time.monotonic()
    cluster.brokers[stopped].start()
    samples: list[tuple[float, int]] = []
    while True:
        size = max(_size(cluster, stopped, topic), before)
        elapsed = time.monotonic() - started
        samples.append((elapsed, size - before))
        assert size - before <= RATE * elapsed + BURST + FETCH_MAX_BYTES + FILES_SLACK, samples
        if size >= target:
            break
        assert elapsed < 60, samples
        # Meanwhile acks=all production keeps going: the in-sync follower is never throttled.
        assert produce(cluster, lead, topic, 0, [b"during"])["errorCode"] == 0
        time.sleep(0.2)
    moved = samples[-1][1]
    # Hence the catch-up took at least (moved - burst - one fetch) / rate, measured.
    assert samples[-1][0] >= (moved - BURST - FETCH_MAX_BYTES - FILES_SLACK) / RATE
    wait_for(lambda: stopped in isr(cluster, topic, 0), timeout=30, what=f"broker {stopped} back in the ISR")


def test_follower_side_throttle_bounds_a_catching_up_follower_only(cluster: Cluster) -> None:
    topic = "throttled-follower"
    lead, stopped, in_sync = _topic(cluster, topic, "follower.replication.throttled.replicas")
    _set_broker_default(cluster, "follower.replication.throttled.rate", str(RATE))
    try:
        _catch_up_within_the_throttle(cluster, topic, lead, stopped, in_sync)
        name = "jbod_replication_throttled_bytes_total"
        assert _metric(cluster, stopped, name, "follower") >= CATCH_UP_BYTES * 0.9
        assert _metric(cluster, in_sync, name, "follower") == 0  # in the ISR: never throttled
        assert (
            _metric(cluster, stopped, "jbod_replication_throttle_rate_bytes_per_second", "follower") == RATE
        )
    finally:
        _set_broker_default(cluster, "follower.replication.throttled.rate", None)


def test_leader_side_throttle_bounds_what_a_leader_sends_a_catching_up_follower(cluster: Cluster) -> None:
    topic = "throttled-leader"
    lead, stopped, in_sync = _topic(cluster, topic, "leader.replication.throttled.replicas")
    _set_broker_default(cluster, "leader.replication.throttled.rate", str(RATE))
    try:
        before = _metric(cluster, lead, "jbod_replication_throttled_bytes_total", "leader")
        _catch_up_within_the_throttle(cluster, topic, lead, stopped, in_sync)
        sent = _metric(cluster, lead, "jbod_replication_throttled_bytes_total", "leader") - before
        # Only the catching-up follower's bytes count: the in-sync one fetched as much meanwhile.
        assert CATCH_UP_BYTES * 0.9 <= sent <= CATCH_UP_BYTES * 1.2
        assert _metric(cluster, lead, "jbod_replication_throttle_skips_total", "leader") > 0
    finally:
        _set_broker_default(cluster, "leader.replication.throttled.rate", None)
