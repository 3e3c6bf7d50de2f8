"""Slow and hung disks (issue 35): a broker whose writes to one loop volume the kernel throttles
(a cgroup's blkio limits), so that dir's fsyncs really take long or never return."""

from __future__ import annotations

import re
import time
import uuid

import httpx
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker.conftest import Cluster, wait_for
from tests.fs import BlkioThrottle, requires_blkio, requires_root

pytestmark = [requires_root, requires_blkio]


def _view(cluster: Cluster, directory: str) -> dict:
    return next(d for d in cluster.log_dirs(1) if d["directoryId"] == directory)


def _metric(cluster: Cluster, name: str, directory: str) -> float:
    """Broker 1's value of the series `name` of `directory` (0 while it has none)."""
    text = httpx.get(cluster.brokers[1].url + "/metrics", timeout=10).text
    found = re.search(rf'{name}{{directory_id="{re.escape(directory)}"}} (\S+)', text)
    return float(found.group(1)) if found else 0.0


def _flushes(cluster: Cluster, directory: str) -> float:
    """How many log flushes of `directory` the broker has timed (its histogram's count)."""
    return _metric(cluster, "jbod_log_dir_flush_seconds_count", directory)


def test_a_slow_disk_is_reported_and_a_hung_one_holds_up_no_other_dir(cluster: Cluster) -> None:
    """Dir 0's writes throttled to 2 IOPS: its probes' fsyncs take ~0.5 s, over
    `log.dir.slow.threshold.ms` 200, so the broker reports it slow (view, metric) and dir 1 not;
    released, it is normal again. Then dir 0 hangs (1 byte/s): its pulse finds it stalled (100 ms
    after its last answer, by default) while it is still online; while its flush never returns,
    the logs of dir 1 are still flushed, and the probe takes dir 0 offline at its timeout."""
    broker = cluster.add_broker(
        1,
        properties={
            "log.dir.probe.interval.ms": "100",
            "log.dir.probe.timeout.ms": "3000",
            "log.dir.slow.threshold.ms": "200",
            "log.dir.stall.timeout.ms": "100",
            "log.flush.interval.ms": "100",
        },
    )
    wait_for(lambda: cluster.all_unfenced(1), what="broker 1 unfenced")
    assert broker.process is not None
    slow_dir, other_dir = cluster.dir_id(1, 0), cluster.dir_id(1, 1)
    device = cluster.mounts[(1, 0)].device
    throttle = BlkioThrottle(broker.process.pid, f"jbod-test-{uuid.uuid4().hex[:8]}")
    cluster.stack.callback(throttle.close)

    throttle.slow(device, iops=2)
    wait_for(lambda: _view(cluster, slow_dir)["slow"], timeout=30, what="dir 0 reported slow")
    seen = _view(cluster, slow_dir)
    assert seen["latencyMs"] >= 200 and seen["state"] == "online", seen
    assert not _view(cluster, other_dir)["slow"]
    metrics = httpx.get(broker.url + "/metrics", timeout=10).text
    assert f'jbod_log_directory_slow{{directory_id="{slow_dir}",path="{seen["path"]}"}} 1.0' in metrics
    assert f'jbod_log_directory_slow{{directory_id="{other_dir}"' in metrics

    throttle.release(device)
    wait_for(lambda: not _view(cluster, slow_dir)["slow"], timeout=30, what="dir 0 normal again")
    # Its pulses (a 4 KiB write every 50 ms) went unanswered for 100 ms too: stalled, and
    # released once they answer promptly for 10 s.
    wait_for(lambda: not _view(cluster, slow_dir)["stalled"], timeout=60, what="dir 0 no longer stalled")
    stalls = _view(cluster, slow_dir)["stalls"]

    # Partitions in both dirs, written all the time: each dir's logs are flushed.
    admin = AdminClient(cluster.kafka_config())
    admin.create_topics([NewTopic("both-dirs", 4, 1)])["both-dirs"].result(30)
    wait_for(lambda: cluster.placed("both-dirs"), what="the topic placed")
    dirs = {p["directories"][0] for p in cluster.admin.describe_topic("both-dirs")["partitions"]}
    assert dirs == {slow_dir, other_dir}, dirs
    producer = Producer(cluster.kafka_config(**{"acks": 1, "linger.ms": 5}))

    def produce_for(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for partition in range(4):
                producer.produce("both-dirs", b"x" * 100, partition=partition)
            producer.poll(0.02)

    written = _metric(cluster, "jbod_log_dir_written_bytes_total", other_dir)
    writes = _metric(cluster, "jbod_log_dir_writes_total", other_dir)
    produce_for(1.0)
    wait_for(
        lambda: _flushes(cluster, other_dir) > 0 and _flushes(cluster, slow_dir) > 0, what="both dirs flushed"
    )
    # The kernel's counters of each dir's loop device: the flushed appends reached the disk.
    wait_for(
        lambda: _metric(cluster, "jbod_log_dir_written_bytes_total", other_dir) > written,
        what="dir 1's device wrote",
    )
    assert _metric(cluster, "jbod_log_dir_writes_total", other_dir) > writes
    assert _metric(cluster, "jbod_log_dir_busy_seconds_total", other_dir) > 0

    throttle.hang(device)
    started = time.monotonic()
    # Found by its pulse long before the probe's timeout: stalled, still online, reported slow.
    wait_for(lambda: _view(cluster, slow_dir)["stalls"] > stalls, timeout=30, what="dir 0 stalled")
    stalled = _view(cluster, slow_dir)
    assert stalled["stalled"] and stalled["state"] == "online", stalled
    assert 100 <= stalled["stallFoundAfterMs"] < 3000, stalled
    print(f"hung dir stalled {stalled['stallFoundAfterMs']:.1f} ms after its last answered pulse")
    assert not _view(cluster, other_dir)["stalled"]
    assert f'jbod_log_directory_stalled{{directory_id="{slow_dir}",path="{stalled["path"]}"}} 1.0' in (
        httpx.get(broker.url + "/metrics", timeout=10).text
    )
    produce_for(1.0)  # appends to dir 0 reach the page cache; its next flush never returns
    hung_flushes, before = _flushes(cluster, slow_dir), _flushes(cluster, other_dir)
    produce_for(1.5)
    wait_for(lambda: _flushes(cluster, other_dir) > before, what="dir 1 flushed while dir 0 hangs")
    assert _flushes(cluster, slow_dir) == hung_flushes, "dir 0's flush returned: it did not hang"
    wait_for(
        lambda: _view(cluster, slow_dir)["state"] == "offline",
        timeout=60,
        what="the hung dir taken offline by its probe",
    )
    print(f"hung dir offline after {time.monotonic() - started:.2f} s (probe timeout 3 s)")
    assert _view(cluster, other_dir)["state"] == "online"
    assert broker.process.poll() is None
    producer.flush(10)


def test_a_slow_dir_leads_nothing_while_it_is_slow_and_leads_again_once_it_recovers(tmp_path) -> None:
    """Three brokers; broker 1's first dir slowed down (2 write IOPS): the controller moves every
    leadership of that dir to the other replicas, broker 1 stays in their ISRs and every record an
    acks=all producer had acknowledged reads back; once the dir is normal again the controller's
    automatic balance (every second here) gives the leaderships back."""
    import contextlib

    from confluent_kafka import Consumer, TopicPartition

    from tests.broker.conftest import start_cluster

    with contextlib.ExitStack() as stack:
        cluster = start_cluster(
            stack,
            tmp_path,
            controller_args=["--leader-imbalance-check-interval-seconds", "1"],
        )
        settings = {"log.dir.probe.interval.ms": "100", "log.dir.slow.threshold.ms": "200"}
        for node in (1, 2, 3):
            cluster.add_broker(node, dirs=2 if node == 1 else 1, properties=settings)
        wait_for(lambda: cluster.all_unfenced(3), what="three unfenced brokers")
        broker = cluster.brokers[1]
        assert broker.process is not None
        slow_dir = cluster.dir_id(1, 0)
        topic = cluster.create_placed_topic("led", partitions=6, rf=3)
        in_slow = [
            p["partitionIndex"]
            for p in topic["partitions"]
            if p["directories"][p["replicas"].index(1)] == slow_dir and p["replicas"][0] == 1
        ]
        assert in_slow, "broker 1 should be the preferred leader of a partition in its first dir"

        def led_by_1() -> set[int]:
            parts = cluster.admin.describe_topic("led")["partitions"]
            return {p["partitionIndex"] for p in parts if p["leader"] == 1}

        wait_for(lambda: set(in_slow) <= led_by_1(), what="broker 1 leading its preferred partitions")
        producer = Producer(cluster.kafka_config(**{"acks": "all", "enable.idempotence": True}))
        acked: list[bytes] = []

        def produce(count: int) -> None:
            for n in range(count):
                producer.produce(
                    "led",
                    f"{len(acked)}-{n}".encode(),
                    partition=in_slow[0],
                    on_delivery=lambda err, msg: acked.append(msg.value()) if err is None else None,
                )
            producer.flush(30)

        produce(200)
        throttle = BlkioThrottle(broker.process.pid, f"jbod-test-{uuid.uuid4().hex[:8]}")
        stack.callback(throttle.close)
        throttle.slow(cluster.mounts[(1, 0)].device, iops=2)
        started = time.monotonic()
        wait_for(
            lambda: slow_dir in cluster.admin.broker(1)["slowLogDirs"] and not (set(in_slow) & led_by_1()),
            timeout=60,
            what="the slow dir's leaderships moved to other brokers",
        )
        print(f"leaderships off the slow dir {time.monotonic() - started:.2f} s after it was slowed")
        for part in cluster.admin.describe_topic("led")["partitions"]:
            if part["partitionIndex"] in in_slow:
                assert 1 in part["isr"] and part["leader"] in (2, 3), part
        produce(200)
        assert len(acked) == 400
        consumer = Consumer(cluster.kafka_config(**{"group.id": "slow-check", "enable.auto.commit": False}))
        consumer.assign([TopicPartition("led", in_slow[0], 0)])
        read: set[bytes] = set()
        deadline = time.monotonic() + 60
        while not set(acked) <= read and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                read.add(message.value())
        consumer.close()
        assert set(acked) <= read, f"{len(set(acked) - read)} acknowledged records are missing"

        throttle.release(cluster.mounts[(1, 0)].device)
        wait_for(
            lambda: not cluster.admin.broker(1)["slowLogDirs"] and set(in_slow) <= led_by_1(),
            timeout=60,
            what="leadership back on the recovered dir",
        )
        assert broker.process.poll() is None


def test_with_stall_offline_0_a_hung_disk_goes_offline_at_its_stall_timeout(cluster: Cluster) -> None:
    """With `log.dir.stall.offline.ms` 0 a stall takes the dir offline at once: a dir whose disk
    hangs (1 byte/s) is offline 100 ms (`log.dir.stall.timeout.ms`) after its last answered
    pulse, long before the probe's timeout (5 s by default); the other dir stays online."""
    broker = cluster.add_broker(
        1, properties={"log.dir.stall.timeout.ms": "100", "log.dir.stall.offline.ms": "0"}
    )
    wait_for(lambda: cluster.all_unfenced(1), what="broker 1 unfenced")
    assert broker.process is not None
    hung_dir, other_dir = cluster.dir_id(1, 0), cluster.dir_id(1, 1)
    throttle = BlkioThrottle(broker.process.pid, f"jbod-test-{uuid.uuid4().hex[:8]}")
    cluster.stack.callback(throttle.close)
    throttle.hang(cluster.mounts[(1, 0)].device)
    wait_for(lambda: _view(cluster, hung_dir)["state"] == "offline", timeout=30, what="dir 0 offline")
    offline = _view(cluster, hung_dir)
    silent = float(re.search(r"stalled: its pulse unanswered for (\d+) ms", offline["error"]).group(1))  # type: ignore[union-attr]
    print(f"hung dir offline {silent:.0f} ms after its last answered pulse: {offline['error']}")
    assert 100 <= silent < 5000, offline  # the stall's timeout, not the probe's
    assert offline["stalls"] == 1 and offline["stallFoundAfterMs"] >= 100, offline
    assert _view(cluster, other_dir)["state"] == "online"
    assert broker.process.poll() is None
