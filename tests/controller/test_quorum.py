"""The controller quorum on etcd (§3.8), with real etcd members and real controller processes.

What is checked: one active controller; standbys answer writes with errorCode 41 and change
nothing; `kill -9` of the active one, a paused active one, a killed etcd member and a restarted
etcd lose nothing acknowledged; no broker is fenced by a failover; offsets are the same on every
controller; a snapshot lets etcd drop the log below it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from e2e.wait import wait_for
from tests.controller.conftest import Api, bring_up
from tests.controller.quorum_support import ADMIN_TOKEN, CLUSTER_TOKEN, Quorum

pytestmark = pytest.mark.quorum
#: What a controller logs each time its keep-alive thread fails to renew its etcd lease.
RENEWAL_FAILED = "Could not renew the etcd lease"


@pytest.fixture
def quorum(tmp_path: Path) -> Iterator[Quorum]:
    with Quorum(tmp_path) as started:
        yield started


def records_of(quorum: Quorum, node_id: int) -> list[dict[str, Any]]:
    api = Api(quorum.nodes[node_id])
    try:
        found, _ = api.all_records()
        return found
    finally:
        api.close()


def wait_for_end(quorum: Quorum, node_id: int, end: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        described = quorum.cluster(node_id)
        if described is not None and described["metadataEndOffset"] >= end:
            return
        assert time.monotonic() < deadline, f"controller {node_id} did not reach offset {end}: {described}"
        time.sleep(0.05)


WRITES: list[tuple[str, str, dict[str, Any] | None]] = [
    (
        "POST",
        "/v1/brokers/register",
        {
            "brokerId": 9,
            "clusterId": "test-cluster",
            "incarnationId": "x5XgNUxXRZ2dEYcGl2iIzg",
            "logDirs": ["ZuyA37rHQQS8Umi9UKZP3w"],
        },
    ),
    ("POST", "/v1/brokers/heartbeat", {"brokerId": 9, "brokerEpoch": 0, "currentMetadataOffset": 0}),
    ("POST", "/v1/assignments", {"brokerId": 9, "brokerEpoch": 0, "directories": []}),
    ("POST", "/v1/partitions/alter", {"brokerId": 9, "brokerEpoch": 0, "topics": []}),
    ("POST", "/v1/topics", {"name": "refused", "numPartitions": 1, "replicationFactor": 1}),
    ("DELETE", "/v1/topics/kept", None),
    ("DELETE", "/v1/brokers/1", None),
]


def test_one_active_and_standbys_refuse_writes(quorum: Quorum) -> None:
    active = quorum.active()
    api = Api(quorum.nodes[active])
    brokers = bring_up(api, [1, 2, 3])
    api.create_topic("kept", numPartitions=2, replicationFactor=3)
    end = api.end_offset()
    api.close()
    info = {"nodeId": active, "url": quorum.nodes[active].url}
    for node_id, node in quorum.nodes.items():
        wait_for_end(quorum, node_id, end)
        assert httpx.get(node.url + "/readyz").status_code == 200
        described = quorum.cluster(node_id)
        assert described is not None
        assert described["activeController"] == info
        assert [(c["nodeId"], c["active"]) for c in described["controllers"]] == [
            (n, n == active) for n in (1, 2, 3)
        ]
        if node_id == active:
            continue
        token = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        for method, path, body in WRITES:
            response = httpx.request(method, node.url + path, json=body, headers=token, timeout=10)
            assert response.status_code == 200, (path, response.text)
            reply = response.json()
            assert reply["errorCode"] == 41, (path, reply)
            assert reply["activeController"] == info, (path, reply)
        # Reads are served by the standby from the committed log.
        standby = Api(node)
        assert [t["name"] for t in standby.topics()] == ["kept"]
        assert {b["brokerId"] for b in standby.brokers()} == set(brokers)
        metrics = httpx.get(node.url + "/metrics").text
        assert "jbod_controller_active 0.0" in metrics
        standby.close()
    for node_id in quorum.nodes:
        assert quorum.cluster(node_id)["metadataEndOffset"] == end  # type: ignore[index]
    assert "jbod_controller_active 1.0" in httpx.get(quorum.nodes[active].url + "/metrics").text
    reference = records_of(quorum, active)
    for node_id in quorum.nodes:
        assert records_of(quorum, node_id) == reference


class TopicWriter:
    """Creates topics one after another on whichever controller is active; records the acked ones."""

    def __init__(self, quorum: Quorum) -> None:
        self.quorum = quorum
        self.acked: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        number = 0
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        while not self.stop.is_set():
            name = f"t{number}"
            for node in list(self.quorum.nodes.values()):
                try:
                    reply = httpx.post(
                        node.url + "/v1/topics",
                        json={"name": name, "numPartitions": 3, "replicationFactor": 3},
                        headers=headers,
                        timeout=5,
                    ).json()
                except (httpx.HTTPError, ValueError):
                    continue
                if reply["errorCode"] == 0:
                    self.acked.append(name)
                    number += 1
                    break
                if reply["errorCode"] == 36:  # created by an attempt whose reply was lost
                    number += 1
                    break
            else:
                time.sleep(0.05)

    def __enter__(self) -> TopicWriter:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)


class QuorumHeartbeater:
    """Keeps brokers' sessions alive on whichever controller is active, like a broker would."""

    def __init__(self, quorum: Quorum, brokers: dict[int, Any]) -> None:
        self.quorum = quorum
        self.brokers = brokers
        self.stop = threading.Event()
        self.fenced_replies: list[dict[str, Any]] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        headers = {"Authorization": f"Bearer {CLUSTER_TOKEN}"}
        url = ""
        while not self.stop.is_set():
            for broker in self.brokers.values():
                candidates = (
                    [url] + [n.url for n in self.quorum.nodes.values()]
                    if url
                    else [n.url for n in self.quorum.nodes.values()]
                )
                for candidate in candidates:
                    try:
                        reply = httpx.post(
                            candidate + "/v1/brokers/heartbeat",
                            json={
                                "brokerId": broker.broker_id,
                                "brokerEpoch": broker.epoch,
                                "currentMetadataOffset": 2**62,
                            },
                            headers=headers,
                            timeout=2,
                        ).json()
                    except (httpx.HTTPError, ValueError):
                        continue
                    if reply["errorCode"] == 41:
                        continue
                    url = candidate
                    if reply["errorCode"] != 0 or reply.get("isFenced"):
                        self.fenced_replies.append(reply)
                    break
            self.stop.wait(0.25)

    def __enter__(self) -> QuorumHeartbeater:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)


@contextlib.contextmanager
def live_brokers(quorum: Quorum) -> Iterator[QuorumHeartbeater]:
    """Three registered brokers kept alive by heartbeats to whichever controller is active."""
    api = Api(quorum.nodes[quorum.active()])
    brokers = bring_up(api, [1, 2, 3])
    api.close()
    with QuorumHeartbeater(quorum, brokers) as heartbeats:
        yield heartbeats


def test_kill_9_of_the_active_loses_nothing_and_fences_no_broker(quorum: Quorum) -> None:
    first = quorum.active()
    api = Api(quorum.nodes[first])
    brokers = bring_up(api, [1, 2, 3])
    api.close()
    with QuorumHeartbeater(quorum, brokers) as heartbeats, TopicWriter(quorum) as writer:
        wait_for(lambda: len(writer.acked) >= 5, timeout=30, what="5 topics created before the kill")
        killed_at = time.monotonic()
        quorum.nodes[first].kill()
        second = quorum.active(other_than=first)
        failover = time.monotonic() - killed_at
        acked_before = len(writer.acked)
        wait_for(
            lambda: len(writer.acked) >= acked_before + 5,
            timeout=30,
            what="5 topics created after the failover",
        )
    assert heartbeats.fenced_replies == []
    print(f"failover seen by the controllers in {failover:.2f} s; {len(writer.acked)} topics acked")
    metrics = httpx.get(quorum.nodes[second].url + "/metrics").text
    assert "jbod_controller_elections_total 1.0" in metrics and "jbod_controller_active 1.0" in metrics
    survivors = [n for n in quorum.nodes if n != first]
    end = quorum.cluster(second)["metadataEndOffset"]  # type: ignore[index]
    for node_id in survivors:
        wait_for_end(quorum, node_id, end)
    reference = records_of(quorum, second)
    assert records_of(quorum, survivors[0]) == reference
    assert [r["offset"] for r in reference] == list(range(len(reference)))
    new_api = Api(quorum.nodes[second])
    names = {t["name"] for t in new_api.topics()}
    assert set(writer.acked) <= names
    assert new_api.cluster()["fencedBrokers"] == 0
    new_api.close()
    # The killed controller comes back as a standby with the same log.
    quorum.restart(first)
    wait_for_end(quorum, first, end)
    assert records_of(quorum, first)[: len(reference)] == reference


def test_a_paused_active_is_deposed_and_cannot_write_when_resumed(quorum: Quorum) -> None:
    with live_brokers(quorum) as heartbeats:
        _pause_the_active(quorum)
    assert heartbeats.fenced_replies == []


def _pause_the_active(quorum: Quorum) -> None:
    first = quorum.active()
    pid = quorum.nodes[first].process.pid  # type: ignore[union-attr]
    os.kill(pid, signal.SIGSTOP)
    try:
        second = quorum.active(other_than=first, timeout=30)
        Api(quorum.nodes[second]).create_topic("after-pause", numPartitions=1, replicationFactor=1)
    finally:
        os.kill(pid, signal.SIGCONT)
    end = quorum.cluster(second)["metadataEndOffset"]  # type: ignore[index]
    # At once after resuming, the old active refuses writes (its lease deadline passed while paused).
    reply = httpx.post(
        quorum.nodes[first].url + "/v1/topics",
        json={"name": "from-the-deposed", "numPartitions": 1, "replicationFactor": 1},
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        timeout=10,
    )
    assert reply.json()["errorCode"] == 41, reply.text
    wait_for_end(quorum, first, end)
    assert quorum.active() == second
    for node_id in quorum.nodes:
        names = [t["name"] for t in Api(quorum.nodes[node_id]).topics()]
        assert names == ["after-pause"], (node_id, names)
    reference = records_of(quorum, second)
    assert records_of(quorum, first) == reference


def test_one_etcd_member_of_three_killed(quorum: Quorum) -> None:
    with live_brokers(quorum) as heartbeats:
        _kill_an_etcd_member(quorum)
    assert heartbeats.fenced_replies == []


def _kill_an_etcd_member(quorum: Quorum) -> None:
    assert quorum.etcd is not None
    active = quorum.active()
    api = Api(quorum.nodes[active])
    api.create_topic("before", numPartitions=1, replicationFactor=1)
    leader = quorum.etcd.leader()
    quorum.etcd.kill_member(leader if leader is not None else 0)
    for number in range(20):
        Api(quorum.nodes[quorum.active()]).create_topic(
            f"during-{number}", numPartitions=1, replicationFactor=1
        )
    end = quorum.cluster(quorum.active())["metadataEndOffset"]  # type: ignore[index]
    for node_id in quorum.nodes:
        wait_for_end(quorum, node_id, end)
        names = {t["name"] for t in Api(quorum.nodes[node_id]).topics()}
        assert names == {"before", *(f"during-{n}" for n in range(20))}
    quorum.etcd.start_member(leader if leader is not None else 0)
    Api(quorum.nodes[quorum.active()]).create_topic("after", numPartitions=1, replicationFactor=1)


def test_etcd_restarted(quorum: Quorum) -> None:
    with live_brokers(quorum) as heartbeats:
        _restart_etcd(quorum)
    # No controller could write while etcd was down, so none could fence a broker either; the
    # one active after the restart starts every broker's session afresh.
    assert heartbeats.fenced_replies == []


def _restart_etcd(quorum: Quorum) -> None:
    assert quorum.etcd is not None
    active = quorum.active()
    Api(quorum.nodes[active]).create_topic("before", numPartitions=1, replicationFactor=1)
    failed_renewals = quorum.nodes[active].stderr().count(RENEWAL_FAILED)
    quorum.etcd.stop()
    # Without etcd no controller may write: the active one's lease deadline passes. Its keep-alive
    # thread tries every TTL / 4 (0.5 s): the lease's deadline (the last renewal sent + the 2 s TTL)
    # has passed once a fourth try after the stop has failed.
    wait_for(
        lambda: quorum.nodes[active].stderr().count(RENEWAL_FAILED) >= failed_renewals + 4,
        timeout=30,
        what=f"controller {active} to fail renewing its lease 4 times",
    )
    reply = httpx.post(
        quorum.nodes[active].url + "/v1/topics",
        json={"name": "while-down", "numPartitions": 1, "replicationFactor": 1},
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        timeout=30,
    ).json()
    assert reply["errorCode"] == 41, reply
    quorum.etcd.start()
    deadline = time.monotonic() + 60
    while True:
        try:
            Api(quorum.nodes[quorum.active(timeout=60)]).create_topic(
                "after", numPartitions=1, replicationFactor=1
            )
            break
        except AssertionError:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    end = quorum.cluster(quorum.active())["metadataEndOffset"]  # type: ignore[index]
    for node_id in quorum.nodes:
        wait_for_end(quorum, node_id, end)
        names = {t["name"] for t in Api(quorum.nodes[node_id]).topics()}
        assert names == {"before", "after"}, (node_id, names)


def test_snapshots_let_etcd_drop_the_log(tmp_path: Path) -> None:
    with Quorum(tmp_path, controllers=2, extra_args=["--snapshot-interval-records", "40"]) as quorum:
        assert quorum.etcd is not None
        stack = contextlib.ExitStack()
        stack.enter_context(live_brokers(quorum))
        api = Api(quorum.nodes[quorum.active()])
        for number in range(30):
            api.create_topic(f"t{number}", numPartitions=2, replicationFactor=1)
        end = api.end_offset()
        assert end >= 90
        prefix = b"/jbod/test-cluster"
        deadline = time.monotonic() + 30
        while True:
            pointer = _etcd_range(quorum.etcd.client_urls[0], prefix + b"/snapshot")
            if pointer:
                break
            assert time.monotonic() < deadline, "no snapshot was published"
            time.sleep(0.1)
        snapshot_offset = pointer[0]["offset"]
        assert snapshot_offset >= 40
        deadline = time.monotonic() + 30
        while (
            _etcd_log_offsets(quorum.etcd.client_urls[0], prefix)
            and min(_etcd_log_offsets(quorum.etcd.client_urls[0], prefix)) < snapshot_offset
        ):
            assert time.monotonic() < deadline, "the log below the snapshot was not deleted"
            time.sleep(0.1)
        # A controller that joins now starts from the snapshot and serves the same state.
        quorum.nodes[3] = quorum._node(3).start()
        wait_for_end(quorum, 3, end)
        joined = Api(quorum.nodes[3])
        assert {t["name"] for t in joined.topics()} == {f"t{n}" for n in range(30)}
        page = joined.metadata(0)
        assert page["snapshot"] is True
        joined.close()
        stack.close()


def _etcd_range(url: str, key: bytes) -> list[dict[str, Any]]:
    import base64

    import orjson

    body = httpx.post(url + "/v3/kv/range", json={"key": base64.b64encode(key).decode()}).json()
    return [orjson.loads(base64.b64decode(kv["value"])) for kv in body.get("kvs", [])]


def _etcd_log_offsets(url: str, prefix: bytes) -> list[int]:
    import base64

    start, end = prefix + b"/log/", prefix + b"/log0"
    body = httpx.post(
        url + "/v3/kv/range",
        json={
            "key": base64.b64encode(start).decode(),
            "range_end": base64.b64encode(end).decode(),
            "keys_only": True,
        },
    ).json()
    return [int(base64.b64decode(kv["key"])[len(start) :]) for kv in body.get("kvs", [])]
