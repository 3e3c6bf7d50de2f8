"""Intra-broker replica moves on real volumes: copy, confirm, switch; cancel and failure revert."""

from __future__ import annotations

import os
import re
from typing import Any

import httpx

from jbod_core.errors import ErrorCode
from tests.broker.conftest import UNASSIGNED, Cluster, wait_for
from tests.broker.data import fetch, fetch_all, produce
from tests.fs import requires_root

pytestmark = requires_root


def _move(cluster: Cluster, broker: int, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{cluster.brokers[broker].url}/v1/log-dirs/move",
        json=body,
        headers={"Authorization": f"Bearer {cluster.cluster_token}"},
        timeout=10,
    )


def _setup(cluster: Cluster, records: int = 2000) -> tuple[str, str, list[bytes]]:
    """One broker, two dirs, topic `t` (1 partition) with data; returns (source dir, other dir, values)."""
    cluster.add_broker(1, dirs=2)
    wait_for(lambda: cluster.all_unfenced(1), what="the broker")
    cluster.admin.create_topic("t", partitions=1, replication_factor=1)
    wait_for(
        lambda: cluster.admin.describe_topic("t")["partitions"][0]["directories"][0] != UNASSIGNED,
        what="placement",
    )
    values = [os.urandom(1000) for _ in range(records)]
    for start in range(0, records, 500):
        assert produce(cluster, 1, "t", 0, values[start : start + 500])["errorCode"] == 0
    source = cluster.admin.describe_topic("t")["partitions"][0]["directories"][0]
    other = next(d["directoryId"] for d in cluster.log_dirs(1) if d["directoryId"] != source)
    return source, other, values


def _where(cluster: Cluster) -> dict[str, list[bool]]:
    """directoryId → [future flag of each replica of `t`] as the broker reports it."""
    return {
        d["directoryId"]: [r["future"] for r in d["replicas"] if r["topic"] == "t"]
        for d in cluster.log_dirs(1)
    }


def _assigned(cluster: Cluster) -> str:
    directory: str = cluster.admin.describe_topic("t")["partitions"][0]["directories"][0]
    return directory


def _copied(cluster: Cluster, directory: str) -> int:
    """The bytes copied so far into the future replica in `directory` (0 when there is none)."""
    return sum(
        r["copiedBytes"]
        for d in cluster.log_dirs(1)
        if d["directoryId"] == directory
        for r in d["replicas"]
        if r["future"]
    )


def _moved_bytes(cluster: Cluster) -> dict[tuple[str, str], float]:
    """`jbod_log_dir_moved_bytes_total` of broker 1: (directory id, direction) → bytes."""
    text = httpx.get(cluster.brokers[1].url + "/metrics", timeout=10).text
    found = re.findall(
        r'jbod_log_dir_moved_bytes_total\{direction="(in|out)",directory_id="([^"]+)"\} (\S+)', text
    )
    return {(directory, direction): float(value) for direction, directory, value in found}


def test_move_switches_only_after_the_copy_and_keeps_every_record(cluster: Cluster) -> None:
    source, other, values = _setup(cluster)
    slow = {"topic": "t", "partition": 0, "directoryId": other, "maxBytesPerSecond": 100_000}
    assert _move(cluster, 1, slow).json() == {"errorCode": 0, "outcome": "started"}
    # Mid-copy (a tenth of the 2 MB at 100 kB/s): still placed, and served, in the source dir.
    wait_for(lambda: _copied(cluster, other) >= 200_000, what="a tenth of the copy")
    assert _assigned(cluster) == source
    assert _where(cluster) == {source: [False], other: [True]}
    # Writes continue during the move.
    extra = [os.urandom(1000) for _ in range(300)]
    assert produce(cluster, 1, "t", 0, extra)["errorCode"] == 0
    assert _assigned(cluster) == source
    # Unthrottled from now on: the copy catches up, and only then does the placement switch.
    fast = {**slow, "maxBytesPerSecond": 10**9}
    assert _move(cluster, 1, fast).json() == {"errorCode": 0, "outcome": "in-progress"}
    wait_for(lambda: _where(cluster) == {source: [], other: [False]}, timeout=30, what="the move to finish")
    assert _assigned(cluster) == other
    assert [v for _, v in fetch_all(cluster, 1, "t", 0)] == values + extra
    # The mover's traffic per dir: everything it copied left the source and entered the other dir.
    moved = _moved_bytes(cluster)
    assert moved[(source, "out")] == moved[(other, "in")] >= sum(map(len, values + extra)), moved
    assert (source, "in") not in moved and (other, "out") not in moved, moved
    # The old copy is gone from the source volume; the broker restarts cleanly on the new layout.
    source_path = next(d["path"] for d in cluster.log_dirs(1) if d["directoryId"] == source)
    wait_for(lambda: not [n for n in os.listdir(source_path) if n.startswith("t-0")], what="old copy deleted")
    cluster.brokers[1].stop()
    cluster.brokers[1].start()
    wait_for(lambda: cluster.all_unfenced(1), what="the broker after restart")
    assert _where(cluster) == {source: [], other: [False]}
    # Unfenced is not yet leading: the partition is served once the broker replayed its leadership.
    wait_for(lambda: fetch(cluster, 1, "t", 0, 0)["errorCode"] == 0, what="the partition served again")
    assert [v for _, v in fetch_all(cluster, 1, "t", 0)] == values + extra


def test_move_back_to_the_current_dir_cancels_and_keeps_the_placement(cluster: Cluster) -> None:
    source, other, values = _setup(cluster)
    slow = {"topic": "t", "partition": 0, "directoryId": other, "maxBytesPerSecond": 100_000}
    assert _move(cluster, 1, slow).json() == {"errorCode": 0, "outcome": "started"}
    wait_for(lambda: _where(cluster)[other] == [True], what="a future replica in the destination")
    assert _move(cluster, 1, slow).json() == {"errorCode": 0, "outcome": "in-progress"}
    back = {"topic": "t", "partition": 0, "directoryId": source}
    assert _move(cluster, 1, back).json() == {"errorCode": 0, "outcome": "cancelled"}
    wait_for(lambda: _where(cluster) == {source: [False], other: []}, what="the future replica dropped")
    other_path = next(d["path"] for d in cluster.log_dirs(1) if d["directoryId"] == other)
    wait_for(
        lambda: not [n for n in os.listdir(other_path) if n.startswith("t-0")], what="future files deleted"
    )
    assert _assigned(cluster) == source
    assert [v for _, v in fetch_all(cluster, 1, "t", 0)] == values
    # Once nothing moves, a move to the current dir is a no-op that starts no copy.
    assert _move(cluster, 1, back).json() == {"errorCode": 0, "outcome": "already-there"}
    assert _where(cluster) == {source: [False], other: []}


def test_destination_failure_reverts_the_move(cluster: Cluster) -> None:
    source, other, values = _setup(cluster)
    slow = {"topic": "t", "partition": 0, "directoryId": other, "maxBytesPerSecond": 100_000}
    assert _move(cluster, 1, slow).json() == {"errorCode": 0, "outcome": "started"}
    wait_for(lambda: _where(cluster)[other] == [True], what="a future replica in the destination")
    index = next(i for i in (0, 1) if str(cluster.mounts[(1, i)].path) in _paths(cluster, other))
    cluster.mounts[(1, index)].shutdown()
    wait_for(
        lambda: _where(cluster)[source] == [False] and not _where(cluster)[other], what="the move reverted"
    )
    assert _assigned(cluster) == source
    assert produce(cluster, 1, "t", 0, [b"after"])["errorCode"] == 0
    assert [v for _, v in fetch_all(cluster, 1, "t", 0)] == [*values, b"after"]


def _paths(cluster: Cluster, directory: str) -> str:
    return next(d["path"] for d in cluster.log_dirs(1) if d["directoryId"] == directory)


def test_move_errors(cluster: Cluster) -> None:
    source, other, _ = _setup(cluster, records=10)
    unknown_dir = "AAAAAAAAAAAAAAAAAAAAAQ"  # LOST_DIR: valid, never a real dir
    assert _move(cluster, 1, {"topic": "t", "partition": 0, "directoryId": "Q" * 22}).json()["errorCode"] == (
        ErrorCode.LOG_DIR_NOT_FOUND
    )
    assert _move(cluster, 1, {"topic": "nope", "partition": 0, "directoryId": other}).json()["errorCode"] == (
        ErrorCode.REPLICA_NOT_AVAILABLE
    )
    assert _move(cluster, 1, {"topic": "t", "partition": 3, "directoryId": other}).json()["errorCode"] == (
        ErrorCode.REPLICA_NOT_AVAILABLE
    )
    bad = _move(cluster, 1, {"topic": "t", "partition": 0, "directoryId": "not-a-uuid"})
    assert bad.status_code == 400 and "directoryId" in bad.json()["errorMessage"]
    assert _move(cluster, 1, {"topic": "t", "partition": 0, "directoryId": unknown_dir}).json()[
        "errorCode"
    ] == (ErrorCode.LOG_DIR_NOT_FOUND)
    index = next(i for i in (0, 1) if str(cluster.mounts[(1, i)].path) == _paths(cluster, other))
    cluster.mounts[(1, index)].shutdown()
    wait_for(
        lambda: next(d["state"] for d in cluster.log_dirs(1) if d["directoryId"] == other) == "offline",
        what="the other dir offline",
    )
    assert _move(cluster, 1, {"topic": "t", "partition": 0, "directoryId": other}).json()["errorCode"] == (
        ErrorCode.KAFKA_STORAGE_ERROR
    )
    # Nothing moved.
    assert _assigned(cluster) == source
