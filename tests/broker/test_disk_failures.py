"""Agents as real processes with log dirs on real volumes that really fail (issue 3)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from typing import Any

import httpx

from jbod_agent.disks.probe import PROBE_FILE
from jbod_local.processes import console_script
from tests.broker.conftest import UNASSIGNED, Cluster, wait_for
from tests.fs import loop_ext4, requires_root, tmpfs

pytestmark = requires_root


def _hosted_in(topic: dict, broker: int, directory: str) -> list[int]:
    return [
        p["partitionIndex"]
        for p in topic["partitions"]
        if broker in p["replicas"] and p["directories"][p["replicas"].index(broker)] == directory
    ]


def test_leader_dir_fails_at_runtime_with_eio(cluster: Cluster) -> None:
    for node in (1, 2, 3):
        cluster.add_broker(node)
    wait_for(lambda: cluster.all_unfenced(3), what="three unfenced brokers")
    topic = cluster.create_placed_topic("orders")
    failed = cluster.dir_id(1, 0)
    hosted = _hosted_in(topic, 1, failed)
    led = [
        p["partitionIndex"] for p in topic["partitions"] if p["leader"] == 1 and p["partitionIndex"] in hosted
    ]
    assert hosted and led, "broker 1 should lead some partitions in its first dir"

    cluster.mounts[(1, 0)].shutdown()  # every I/O on the volume now returns EIO

    def moved() -> bool:
        t = cluster.admin.describe_topic("orders")
        return (
            all(t["partitions"][i]["leader"] != 1 and 1 not in t["partitions"][i]["isr"] for i in hosted)
            and failed in cluster.admin.broker(1)["offlineLogDirs"]
        )

    wait_for(moved, timeout=15, what="leadership and ISR to leave the failed dir")
    after = cluster.admin.describe_topic("orders")
    for i in hosted:
        assert 1 in after["partitions"][i]["offlineReplicas"]
    # The broker keeps serving its healthy dir: still registered, unfenced, leading elsewhere.
    assert cluster.brokers[1].process is not None and cluster.brokers[1].process.poll() is None
    assert not cluster.admin.broker(1)["fenced"]
    view = {d["directoryId"]: d for d in cluster.log_dirs(1)}
    assert view[failed]["state"] == "offline" and "EIO" in (view[failed]["error"] or "")
    assert view[cluster.dir_id(1, 1)]["state"] == "online"
    metrics = httpx.get(cluster.brokers[1].url + "/metrics").text
    assert "jbod_offline_log_directory_count 1.0" in metrics
    assert f"jbod_offline_replica_count {float(len(hosted))}" in metrics


def test_follower_volume_detached(cluster: Cluster) -> None:
    for node in (1, 2, 3):
        cluster.add_broker(node)
    wait_for(lambda: cluster.all_unfenced(3), what="three unfenced brokers")
    topic = cluster.create_placed_topic("events")
    failed = cluster.dir_id(2, 1)
    hosted = _hosted_in(topic, 2, failed)
    assert hosted
    cluster.mounts[(2, 1)].detach()  # the volume is pulled away from under the agent

    def shrunk() -> bool:
        t = cluster.admin.describe_topic("events")
        return all(2 not in t["partitions"][i]["isr"] and t["partitions"][i]["leader"] != 2 for i in hosted)

    wait_for(shrunk, timeout=15, what="the follower to leave the ISRs")
    assert failed in cluster.admin.broker(2)["offlineLogDirs"]
    error = next(d for d in cluster.log_dirs(2) if d["directoryId"] == failed)["error"]
    assert "changed under the path" in error or "vanished" in error


def test_broker_starts_with_an_unreadable_dir(cluster: Cluster) -> None:
    broker = cluster.add_broker(1, start=False)
    cluster.mounts[(1, 1)].shutdown()
    broker.start()
    wait_for(lambda: cluster.all_unfenced(1), what="broker 1 unfenced")
    info = cluster.admin.broker(1)
    assert info["hasOfflineLogDirs"] is True
    assert len(info["logDirs"]) == 1
    dirs = cluster.log_dirs(1)
    offline = [d for d in dirs if d["state"] == "offline"]
    assert len(offline) == 1 and offline[0]["directoryId"] is None
    assert offline[0]["path"] == str(cluster.mounts[(1, 1)].path)


def test_restart_with_a_replaced_empty_volume_recreates_its_replicas(cluster: Cluster) -> None:
    for node in (1, 2, 3):
        cluster.add_broker(node)
    wait_for(lambda: cluster.all_unfenced(3), what="three unfenced brokers")
    topic = cluster.create_placed_topic("logs")
    old = cluster.dir_id(1, 0)
    hosted = _hosted_in(topic, 1, old)
    assert hosted
    broker = cluster.brokers[1]
    assert broker.stop() == 0
    mount = cluster.mounts[(1, 0)]
    mount.detach()
    replacement = cluster.stack.enter_context(loop_ext4(mount.path))  # a new, empty disk
    cluster.mounts[(1, 0)] = replacement
    broker.format()  # --ignore-formatted: only the new volume gets a (new) directory id
    broker.start()
    new = cluster.dir_id(1, 0)
    assert new != old

    def recreated() -> bool:
        t = cluster.admin.describe_topic("logs")
        dirs = [t["partitions"][i]["directories"][t["partitions"][i]["replicas"].index(1)] for i in hosted]
        return all(d not in (old, UNASSIGNED) for d in dirs) and not cluster.admin.broker(1)["fenced"]

    wait_for(recreated, what="the replicas of the lost volume to be placed again")
    names = {(r["topic"], r["partition"]) for d in cluster.log_dirs(1) for r in d["replicas"]}
    assert {("logs", i) for i in hosted} <= names


def test_duplicate_directory_ids_refuse_to_start(cluster: Cluster) -> None:
    broker = cluster.add_broker(1, start=False)
    first, second = cluster.mounts[(1, 0)].path, cluster.mounts[(1, 1)].path
    shutil.copy(first / "meta.properties", second / "meta.properties")
    result = subprocess.run(
        [console_script("jbod-agent"), "--config", str(broker.config_path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("jbod-agent: error: duplicate directory id")
    assert str(first) in lines[-1] and str(second) in lines[-1]
    assert "Traceback" not in result.stderr


def test_unreported_failure_of_a_led_dir_shuts_the_broker_down(cluster: Cluster) -> None:
    for node in (1, 2, 3):
        cluster.add_broker(node, log_dir_failure_timeout_ms="1500")
    wait_for(lambda: cluster.all_unfenced(3), what="three unfenced brokers")
    topic = cluster.create_placed_topic("critical")
    failed = cluster.dir_id(1, 0)
    assert [
        p
        for p in topic["partitions"]
        if p["leader"] == 1 and p["partitionIndex"] in _hosted_in(topic, 1, failed)
    ]
    cluster.controller.kill()  # the controller is unreachable from now on
    started = time.monotonic()
    cluster.mounts[(1, 0)].shutdown()
    process = cluster.brokers[1].process
    assert process is not None
    code = process.wait(timeout=30)
    elapsed = time.monotonic() - started
    assert code == 3
    assert elapsed >= 1.5
    assert "could not tell the controller" in cluster.brokers[1].log_path.read_text()


def test_full_disk_is_not_a_failure_and_gets_no_new_replicas(cluster: Cluster) -> None:
    broker = cluster.add_broker(1, start=False)
    small = cluster.stack.enter_context(tmpfs(cluster.base / "b1" / "small", size_kb=256))
    broker.log_dirs = [broker.log_dirs[0], small]
    broker.format()
    broker.start()
    wait_for(lambda: cluster.all_unfenced(1), what="broker 1 unfenced")
    small_id = next(d["directoryId"] for d in cluster.log_dirs(1) if d["path"] == str(small))
    (small / PROBE_FILE).unlink(missing_ok=True)
    with open(small / "filler", "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
        except OSError:
            pass
    wait_for(
        lambda: next(d for d in cluster.log_dirs(1) if d["directoryId"] == small_id)["state"] == "full",
        what="the dir to be reported full",
    )
    topic = cluster.create_placed_topic("new", partitions=8, rf=1)
    assert all(
        p["directories"] == [p["directories"][0]] and p["directories"][0] != small_id
        for p in topic["partitions"]
    )
    assert not cluster.admin.broker(1)["offlineLogDirs"]
    metrics = httpx.get(cluster.brokers[1].url + "/metrics").text
    assert f'jbod_log_directory_full{{directory_id="{small_id}",path="{small}"}} 1.0' in metrics


def test_multi_dir_broker_stays_fenced_until_placements_are_confirmed(cluster: Cluster) -> None:
    for node in (1, 2, 3):
        cluster.add_broker(node)
    wait_for(lambda: cluster.all_unfenced(3), what="three unfenced brokers")
    third = cluster.brokers[3]
    assert third.stop() == 0  # SIGTERM: a controlled shutdown, the controller fences it at once
    assert cluster.admin.broker(3)["fenced"]
    # A topic created while broker 3 is down: its replicas on broker 3 start UNASSIGNED.
    reply = cluster.admin.create_topic("pending", replica_assignment=[[3, 1], [3, 2], [1, 3], [2, 3]])
    assert reply["errorCode"] == 0
    before = cluster.admin.cluster()["metadataEndOffset"]
    third.start()
    wait_for(lambda: not cluster.admin.broker(3)["fenced"], what="broker 3 unfenced again")

    def unfencing(records: list[dict[str, Any]]) -> list[int]:
        return [
            r["offset"]
            for r in records
            if r["type"] == "BrokerRegistrationChangeRecord"
            and r["data"]["brokerId"] == 3
            and r["data"].get("fenced") is False
        ]

    # The controller's view may show the unfencing before its record is readable from the log
    # (a loaded machine): read the log until it holds it.
    records = wait_for(
        lambda: (
            (found := list(cluster.admin.iter_metadata(from_offset=before))) and unfencing(found) and found
        ),
        what="broker 3's unfencing in the metadata log",
    )
    registered = max(
        r["offset"] for r in records if r["type"] == "RegisterBrokerRecord" and r["data"]["brokerId"] == 3
    )
    unfenced = min(unfencing(records))
    topic = cluster.admin.describe_topic("pending")
    position = {p["partitionIndex"]: p["replicas"].index(3) for p in topic["partitions"]}
    placed = {
        r["data"]["partitionId"]: r["offset"]
        for r in records
        if r["type"] == "PartitionChangeRecord"
        and r["data"]["topicId"] == topic["topicId"]
        and "directories" in r["data"]
        and r["data"]["directories"][position[r["data"]["partitionId"]]] != UNASSIGNED
        and r["offset"] > registered
    }
    assert set(placed) == {0, 1, 2, 3}, "broker 3 must report every placement"
    assert max(placed.values()) < unfenced  # all placed before the controller unfenced it
    assert cluster.placed("pending")


def test_deleting_a_topic_removes_its_replica_dirs(cluster: Cluster) -> None:
    cluster.add_broker(1)
    wait_for(lambda: cluster.all_unfenced(1), what="broker 1 unfenced")
    cluster.create_placed_topic("doomed", partitions=4, rf=1)
    names = lambda: {(r["topic"], r["partition"]) for d in cluster.log_dirs(1) for r in d["replicas"]}  # noqa: E731
    assert names() == {("doomed", i) for i in range(4)}
    assert cluster.admin.delete_topic("doomed")["errorCode"] == 0
    wait_for(lambda: not names(), what="the replica dirs of the deleted topic to go")
    for n in (0, 1):
        assert not list(cluster.mounts[(1, n)].path.glob("doomed-*"))


def test_losing_the_last_data_dir_stops_the_broker(cluster: Cluster) -> None:
    broker = cluster.add_broker(1, dirs=1)
    wait_for(lambda: cluster.all_unfenced(1), what="broker 1 unfenced")
    cluster.mounts[(1, 0)].shutdown()
    assert broker.process is not None
    assert broker.process.wait(timeout=15) == 4
    assert "the last online log dir failed" in broker.log_path.read_text()


def test_losing_the_metadata_dir_stops_the_broker(cluster: Cluster) -> None:
    metadata = cluster.stack.enter_context(loop_ext4(cluster.base / "b1-metadata"))
    broker = cluster.add_broker(1, start=False)
    broker.metadata_dir = metadata.path
    broker.format()
    broker.start()
    wait_for(lambda: cluster.all_unfenced(1), what="broker 1 unfenced")
    metadata.shutdown()
    assert broker.process is not None
    assert broker.process.wait(timeout=15) == 4
    assert "metadata log dir" in broker.log_path.read_text()


def test_a_paused_broker_does_not_take_its_healthy_dirs_for_hung_ones(cluster: Cluster) -> None:
    """A process frozen longer than the probe timeout (SIGSTOP, VM pause) while a probe is in
    flight: the frozen time is not the disk's, so no dir goes offline and the broker stays up."""
    broker = cluster.add_broker(1, log_dir_probe_interval_ms="10", log_dir_probe_timeout_ms="500")
    wait_for(lambda: cluster.all_unfenced(1), what="broker 1 unfenced")
    process = broker.process
    assert process is not None
    for _ in range(4):
        process.send_signal(signal.SIGSTOP)
        time.sleep(1.0)  # fixed wait: twice the probe timeout, far below the 9 s session timeout
        process.send_signal(signal.SIGCONT)
        time.sleep(0.3)  # fixed wait: it probes (every 10 ms) again, so the next pause freezes a probe
    # fixed wait: a probe that counted the pause would end within one 50 ms step of its bound after
    # the resume and take its dir offline at once, as the broker's own view below shows.
    time.sleep(0.5)
    assert process.poll() is None, broker.log_path.read_text()[-2000:]
    assert cluster.admin.broker(1)["offlineLogDirs"] == []
    assert all(d["state"] == "online" for d in cluster.log_dirs(1))
