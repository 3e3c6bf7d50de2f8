"""Durability of a real controller process (protocol §3.7): kill -9, torn tails and snapshots.

Covers: acknowledged writes (topic creations, assignments, heartbeats) surviving SIGKILL at a
random moment with the same offsets and broker epochs; a torn or corrupt tail of the last segment
truncated on restart with everything acknowledged intact; snapshots cut every 50 records giving the
same state after a restart; and, once old segments are deleted, a fetch from offset 0 that starts
with the snapshot (`snapshot: true`) describing the same image.
"""

from __future__ import annotations

import random
import struct
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.controller.conftest import (
    Api,
    Broker,
    assert_read_api_matches_log,
    bring_up,
    random_uuid,
    replay_records,
)
from tests.harness import ControllerProcess


def segment_files(proc: ControllerProcess) -> list[Path]:
    return sorted((proc.data_dir / "metadata").glob("*.log"))


class Workload:
    """Client threads sending acknowledged writes, and a follower recording committed records."""

    def __init__(self, proc: ControllerProcess, brokers: dict[int, Broker], *, round_no: int) -> None:
        self.proc = proc
        self.brokers = brokers
        self.round_no = round_no
        self.acked_topics: dict[str, str] = {}  # name -> topic id
        self.acked_assignments: dict[tuple[str, int, int], str] = {}  # (topic id, partition, broker) -> dir
        self.seen: dict[int, dict[str, Any]] = {}  # records the follower fetched, by offset
        self.acked_registrations: dict[int, tuple[int, bool]] = {}  # broker id -> (epoch, unfenced)
        self.failures: list[str] = []
        self._topics_to_assign: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._create_topics, args=("a",), daemon=True),
            threading.Thread(target=self._create_topics, args=("b",), daemon=True),
            threading.Thread(target=self._assign, daemon=True),
            threading.Thread(target=self._follow, daemon=True),
            threading.Thread(target=self._register, daemon=True),
        ]

    def _guard(self, step: Callable[[httpx.Client], None], client: httpx.Client) -> bool:
        try:
            step(client)
        except httpx.TransportError:
            return False  # the controller died under us: this write is not acknowledged
        return True

    def _create_topics(self, prefix: str) -> None:
        with self.proc.admin(timeout=10) as client:
            for i in range(100_000):
                if self._stop.is_set():
                    return
                name = f"r{self.round_no}-{prefix}-{i}"

                def step(client: httpx.Client, name: str = name) -> None:
                    response = client.post(
                        "/v1/topics", json={"name": name, "numPartitions": 4, "replicationFactor": 2}
                    )
                    if response.status_code != 200:
                        self.failures.append(f"create {name}: HTTP {response.status_code} {response.text}")
                        return
                    reply = response.json()
                    if reply["errorCode"] == 0:
                        with self._lock:
                            self.acked_topics[name] = reply["topicId"]
                            self._topics_to_assign.append((name, reply["topicId"]))
                    else:
                        self.failures.append(f"create {name}: {reply}")

                if not self._guard(step, client):
                    return

    def _assign(self) -> None:
        rng = random.Random()
        with self.proc.broker(timeout=10) as client:
            while not self._stop.is_set():
                with self._lock:
                    todo = self._topics_to_assign.pop(0) if self._topics_to_assign else None
                if todo is None:
                    time.sleep(0.005)
                    continue
                _name, topic_id = todo
                for broker in self.brokers.values():
                    directory = rng.choice(broker.dirs)

                    def step(
                        client: httpx.Client,
                        broker: Broker = broker,
                        directory: str = directory,
                        topic_id: str = topic_id,
                    ) -> None:
                        response = client.post(
                            "/v1/assignments",
                            json={
                                "brokerId": broker.broker_id,
                                "brokerEpoch": broker.epoch,
                                "directories": [
                                    {
                                        "id": directory,
                                        "topics": [
                                            {
                                                "topicId": topic_id,
                                                "partitions": [{"partitionIndex": p} for p in range(4)],
                                            }
                                        ],
                                    }
                                ],
                            },
                        )
                        if response.status_code != 200:
                            self.failures.append(f"assign: HTTP {response.status_code} {response.text}")
                            return
                        reply = response.json()
                        if reply["errorCode"] != 0:
                            self.failures.append(f"assign: {reply}")
                            return
                        for result in reply["directories"][0]["topics"][0]["partitions"]:
                            if result["errorCode"] == 0:
                                key = (topic_id, result["partitionIndex"], broker.broker_id)
                                self.acked_assignments[key] = directory

                    if not self._guard(step, client):
                        return

    def _register(self) -> None:
        """New single-dir brokers register and unfence (acknowledged epochs and unfencings)."""
        with self.proc.broker(timeout=10) as client:
            for broker_id in range(100 + 100 * self.round_no, 200 + 100 * self.round_no):
                if self._stop.is_set():
                    return

                def step(client: httpx.Client, broker_id: int = broker_id) -> None:
                    response = client.post(
                        "/v1/brokers/register",
                        json={
                            "brokerId": broker_id,
                            "clusterId": self.proc.cluster_id,
                            "incarnationId": random_uuid(),
                            "logDirs": [random_uuid()],
                        },
                    )
                    if response.status_code != 200:
                        self.failures.append(f"register {broker_id}: HTTP {response.status_code}")
                        return
                    reply = response.json()
                    if reply["errorCode"] != 0:
                        self.failures.append(f"register {broker_id}: {reply}")
                        return
                    epoch = reply["brokerEpoch"]
                    self.acked_registrations[broker_id] = (epoch, False)
                    beat = client.post(
                        "/v1/brokers/heartbeat",
                        json={"brokerId": broker_id, "brokerEpoch": epoch, "currentMetadataOffset": epoch},
                    ).json()
                    if beat["errorCode"] != 0 or beat["isFenced"]:
                        self.failures.append(f"heartbeat {broker_id}: {beat}")
                        return
                    self.acked_registrations[broker_id] = (epoch, True)

                if not self._guard(step, client):
                    return
                time.sleep(0.02)  # fixed wait: paces the registrations among the other writers

    def _follow(self) -> None:
        offset = 0
        with self.proc.broker(timeout=10) as client:
            while not self._stop.is_set():

                def step(client: httpx.Client) -> None:
                    nonlocal offset
                    page = client.get(
                        "/v1/metadata", params={"fromOffset": offset, "maxWaitMs": 200, "maxRecords": 500}
                    ).json()
                    for record in page["records"]:
                        self.seen[record["offset"]] = record
                    if page["records"]:
                        offset = page["records"][-1]["offset"] + 1

                if not self._guard(step, client):
                    return

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def join(self) -> None:
        self._stop.set()
        for thread in self.threads:
            thread.join(timeout=30)
            assert not thread.is_alive()


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra_args",
    [[], ["--snapshot-interval-records", "50"]],
    ids=["log-only", "with-snapshots"],
)
def test_kill_9_loses_nothing_acknowledged(make_controller: Any, extra_args: list[str]) -> None:
    # A long session timeout: no broker is fenced by the clock while the test runs. With frequent
    # snapshots the crash may also land while a snapshot is being written.
    controller: ControllerProcess = make_controller(session_timeout_ms=120_000, extra_args=extra_args)
    api = Api(controller)
    try:
        _crash_rounds(controller, api)
    finally:
        api.close()


def _crash_rounds(controller: ControllerProcess, api: Api) -> None:
    brokers = bring_up(api, [1, 2, 3])
    epochs_before = {b["brokerId"]: (b["brokerEpoch"], b["incarnationId"]) for b in api.brokers()}
    rng = random.Random()
    acked_topics: dict[str, str] = {}
    acked_assignments: dict[tuple[str, int, int], str] = {}
    acked_registrations: dict[int, tuple[int, bool]] = {}
    seen: dict[int, dict[str, Any]] = {}
    for round_no in range(2):
        workload = Workload(controller, brokers, round_no=round_no)
        workload.start()
        # Wait until some writes were acknowledged, then crash at a random moment.
        deadline = time.monotonic() + 30
        while len(workload.acked_topics) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.8))  # fixed wait: the crash's random moment is the scenario
        controller.kill()
        workload.join()
        assert not workload.failures, workload.failures[:5]
        assert workload.acked_topics, "no write was acknowledged before the crash"
        acked_topics.update(workload.acked_topics)
        acked_assignments.update(workload.acked_assignments)
        acked_registrations.update(workload.acked_registrations)
        seen.update(workload.seen)

        controller.start()
        records, snapshot = api.all_records()
        assert snapshot is False
        assert [r["offset"] for r in records] == list(range(len(records)))
        for offset, record in seen.items():
            assert records[offset] == record, f"record at offset {offset} changed across the crash"

        topics = {t["name"]: t for t in api.topics()}
        for name, topic_id in acked_topics.items():
            assert name in topics, f"acknowledged topic {name} was lost"
            assert topics[name]["topicId"] == topic_id
        by_id = {t["topicId"]: t for t in topics.values()}
        for (topic_id, index, broker_id), directory in acked_assignments.items():
            part = by_id[topic_id]["partitions"][index]
            assert part["directories"][part["replicas"].index(broker_id)] == directory
        registered = {b["brokerId"]: b for b in api.brokers()}
        for broker_id, (epoch, incarnation) in epochs_before.items():
            assert (registered[broker_id]["brokerEpoch"], registered[broker_id]["incarnationId"]) == (
                epoch,
                incarnation,
            )
            assert registered[broker_id]["fenced"] is False, "unfenced brokers get a fresh session"
        for broker_id, (epoch, unfenced) in acked_registrations.items():
            assert broker_id in registered, f"acknowledged registration of broker {broker_id} was lost"
            assert registered[broker_id]["brokerEpoch"] == epoch
            if unfenced:
                assert registered[broker_id]["fenced"] is False, f"acknowledged unfencing of {broker_id} lost"
        assert_read_api_matches_log(api)

    # The restarted controller goes on appending right after the recovered end.
    end = api.end_offset()
    created = api.create_topic("after-crash", numPartitions=1, replicationFactor=1)
    [record] = api.metadata(end, maxRecords=1)["records"]
    assert (record["offset"], record["type"], record["data"]["topicId"]) == (
        end,
        "TopicRecord",
        created["topicId"],
    )


def _frame(payload: bytes) -> bytes:
    return struct.pack(">II", len(payload), zlib.crc32(payload)) + payload


def _next_record(offset: int) -> bytes:
    return orjson.dumps(
        {
            "offset": offset,
            "type": "TopicRecord",
            "data": {"name": "never-acknowledged", "topicId": "ws5vRH7U1Xt45RBhcxHYow", "configs": {}},
        }
    )


TAILS: dict[str, Callable[[int], bytes]] = {
    "garbage": lambda offset: random.Random(offset).randbytes(37),
    "partial-header": lambda offset: _frame(_next_record(offset))[:5],
    "partial-frame": lambda offset: _frame(_next_record(offset))[:-9],
    "bad-crc": lambda offset: struct.pack(">II", len(_next_record(offset)), 12345) + _next_record(offset),
    "huge-length": lambda offset: struct.pack(">II", 2**31, 0) + b"{}" * 10,
    "zeros": lambda offset: bytes(4096),
}


@pytest.mark.parametrize("tail", sorted(TAILS))
def test_torn_tail_is_truncated(controller: ControllerProcess, api: Api, tail: str) -> None:
    brokers = bring_up(api, [1, 2])
    created = api.create_topic("kept", numPartitions=3, replicationFactor=2)
    api.assign(1, brokers[1].epoch, {brokers[1].dirs[0]: {created["topicId"]: [0, 1, 2]}})
    records_before, _ = api.all_records()
    state_before = api.state()
    end = api.end_offset()

    controller.kill()
    [segment] = segment_files(controller)
    size = segment.stat().st_size
    with segment.open("ab") as handle:
        handle.write(TAILS[tail](end))

    controller.start()
    assert segment.stat().st_size == size, "the torn tail must be truncated"
    records_after, _ = api.all_records()
    assert records_after == records_before
    assert api.state() == state_before
    assert api.end_offset() == end

    # New records land right after the truncation point and survive another crash.
    created = api.create_topic("after-tail", numPartitions=1, replicationFactor=1)
    controller.restart()
    names = [t["name"] for t in api.topics()]
    assert names == ["after-tail", "kept"]
    records, _ = api.all_records()
    assert records[:end] == records_before
    assert records[end]["type"] == "TopicRecord"
    assert records[end]["data"]["topicId"] == created["topicId"]
    assert_read_api_matches_log(api)


def _write_many(api: Api, brokers: dict[int, Broker], *, topics: int) -> None:
    for i in range(topics):
        created = api.create_topic(f"snap-{i}", numPartitions=10, replicationFactor=2)
        for broker in brokers.values():
            api.assign(
                broker.broker_id, broker.epoch, {broker.dirs[i % 2]: {created["topicId"]: list(range(10))}}
            )


def test_snapshots_restart_to_the_same_state(make_controller: Any) -> None:
    proc: ControllerProcess = make_controller(extra_args=["--snapshot-interval-records", "50"])
    api = Api(proc)
    try:
        brokers = bring_up(api, [1, 2, 3])
        _write_many(api, brokers, topics=12)
        api.heartbeat(3, brokers[3].epoch, offlineLogDirs=[brokers[3].dirs[0]])
        api.admin.delete("/v1/topics/snap-0")
        end = api.end_offset()
        assert end > 200
        deadline = time.monotonic() + 30
        while not list((proc.data_dir / "metadata").glob("*.snapshot")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list((proc.data_dir / "metadata").glob("*.snapshot")), "no snapshot was cut"
        records_before, _ = api.all_records()
        state_before = api.state()

        proc.restart()
        assert api.end_offset() == end
        assert api.state() == state_before
        records_after, snapshot = api.all_records()
        assert snapshot is False, "no segment was deleted, so the log is still whole"
        assert records_after == records_before
        # Decisions after recovery see the same image (e.g. the fencing gate, the offline dir).
        assert api.heartbeat(3, brokers[3].epoch, offlineLogDirs=[brokers[3].dirs[0]])["errorCode"] == 0
        assert api.end_offset() == end
        assert_read_api_matches_log(api)
    finally:
        api.close()


@pytest.mark.slow
def test_fetch_from_zero_after_segments_were_deleted_starts_with_the_snapshot(make_controller: Any) -> None:
    proc: ControllerProcess = make_controller(
        extra_args=["--snapshot-interval-records", "50", "--log-retention-bytes", "1"]
    )
    api = Api(proc)
    try:
        brokers = bring_up(api, [1, 2, 3])
        # Fill the first segment past its 64 MiB roll size with a few huge (then deleted) topics,
        # so that a later snapshot covers a whole segment that retention may delete. The API
        # rejects such configs (errorCode 40), so they go straight into the log while the
        # controller is down, as an old log may hold them.
        blob = "x" * (10 * 1024 * 1024)
        offset = api.end_offset()
        proc.kill()
        [segment] = segment_files(proc)
        with segment.open("ab") as handle:
            for i in range(7):
                topic_id = random_uuid()
                for kind, data in (
                    ("TopicRecord", {"name": f"huge-{i}", "topicId": topic_id, "configs": {"blob": blob}}),
                    ("RemoveTopicRecord", {"topicId": topic_id}),
                ):
                    handle.write(_frame(orjson.dumps({"offset": offset, "type": kind, "data": data})))
                    offset += 1
        proc.start()
        assert api.end_offset() == offset
        _write_many(api, brokers, topics=8)
        api.heartbeat(2, brokers[2].epoch, offlineLogDirs=[brokers[2].dirs[1]])
        deadline = time.monotonic() + 60
        while len(segment_files(proc)) != 1 or segment_files(proc)[0].name == f"{0:020d}.log":
            assert time.monotonic() < deadline, f"old segments were not deleted: {segment_files(proc)}"
            time.sleep(0.05)
        start = int(segment_files(proc)[0].stem)
        state = api.state()
        end = api.end_offset()

        def check_snapshot_fetch() -> None:
            page = api.metadata(0)
            assert page["errorCode"] == 0
            assert page["snapshot"] is True
            assert page["endOffset"] == end
            records = page["records"]
            snapshot_offset = records[0]["offset"]
            assert start <= snapshot_offset + 1 <= end
            image_part = [r for r in records if r["offset"] == snapshot_offset]
            tail = records[len(image_part) :]
            assert [r["offset"] for r in tail] == list(range(snapshot_offset + 1, end))
            assert {r["type"] for r in image_part} <= {
                "RegisterBrokerRecord",
                "TopicRecord",
                "PartitionRecord",
            }
            replayed = replay_records(records)
            brokers_now, topics_now = api.state()
            derived = ("unassignedReplicas", "acceptsNewReplicas")
            assert [{k: v for k, v in b.items() if k not in derived} for b in brokers_now] == (
                replayed.describe_brokers()
            )
            for topic in topics_now:
                for part in topic["partitions"]:
                    del part["offlineReplicas"]
            assert topics_now == replayed.describe_topics()
            # Paging on from the end of the snapshot reaches the same end.
            more, snapshot = api.all_records(snapshot_offset + 1)
            assert snapshot is False
            assert more == tail
            # A fetch inside the retained log is an ordinary one.
            ordinary = api.metadata(start, maxRecords=3)
            assert ordinary["snapshot"] is False
            assert ordinary["records"][0]["offset"] == start

        check_snapshot_fetch()
        proc.restart()
        assert api.state() == state
        assert api.end_offset() == end
        check_snapshot_fetch()
    finally:
        api.close()
