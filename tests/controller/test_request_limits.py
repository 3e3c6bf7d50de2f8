"""Bad requests the controller rejects must not cost brokers their sessions (issue 12, item 1).

Real processes: one `jbod-controller` with a short session timeout and three `jbod-agent`s on
plain directories. Oversized or expensive bodies are rejected with errorCode 42 before they are
parsed, and a stalled controller does not count its own stall against the brokers' sessions.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
import pytest

from jbod_client.controller import read_token
from jbod_controller import http_api
from jbod_local.processes import LocalBroker, LocalController
from tests.broker.conftest import start_cluster

SESSION_TIMEOUT_MS = 3000
BROKERS = (1, 2, 3)


@dataclass
class SmallCluster:
    controller: LocalController
    brokers: list[LocalBroker]

    def client(self, token_file: Path) -> httpx.Client:
        token = read_token(token_file)
        return httpx.Client(
            base_url=self.controller.url, headers={"Authorization": f"Bearer {token}"}, timeout=120
        )

    def brokers_view(self) -> list[dict[str, object]]:
        with self.client(self.controller.admin_token_file) as admin:
            reply = admin.get("/v1/brokers")
        assert reply.status_code == 200, reply.text
        brokers: list[dict[str, object]] = reply.json()
        return brokers

    def wait_all_unfenced(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            view = self.brokers_view()
            if len(view) == len(self.brokers) and not any(b["fenced"] for b in view):
                return
            assert time.monotonic() < deadline, f"brokers never all unfenced: {view}"
            time.sleep(0.1)

    def fence_lines(self) -> list[str]:
        return [line for line in self.controller.log_path.read_text().splitlines() if "Fenced broker" in line]


@pytest.fixture
def small_cluster(tmp_path: Path) -> Iterator[SmallCluster]:
    with contextlib.ExitStack() as stack:
        running = start_cluster(
            stack,
            tmp_path,
            cluster_id="limits",
            controller_args=["--broker-session-timeout-ms", str(SESSION_TIMEOUT_MS)],
        )
        timeout = {"broker.session.timeout.ms": str(SESSION_TIMEOUT_MS)}
        brokers = [running.add_broker(node_id, dirs=1, loop=False, properties=timeout) for node_id in BROKERS]
        cluster = SmallCluster(controller=running.controller, brokers=brokers)
        cluster.wait_all_unfenced()
        yield cluster


def _huge_assignments(entries: int) -> bytes:
    """An AssignReplicasToDirs body far over 10,000 partitions (one topic entry per partition)."""
    topic = "q7dAkQMnTGSNPJUNhYr3BA"
    topics = [{"topicId": topic, "partitions": [{"partitionIndex": i}]} for i in range(entries)]
    body = {"brokerId": 1, "brokerEpoch": 0, "directories": [{"id": topic, "topics": topics}]}
    return orjson.dumps(body)


def test_oversized_assignments_are_rejected_without_fencing_any_broker(small_cluster: SmallCluster) -> None:
    body = _huge_assignments(200_000)
    assert 15_000_000 < len(body) < 16 * 1024 * 1024  # under the old 16 MiB cap

    def send(_: int) -> httpx.Response:
        with small_cluster.client(small_cluster.controller.cluster_token_file) as client:
            return client.post("/v1/assignments", content=body, headers={"Content-Type": "application/json"})

    with ThreadPoolExecutor(max_workers=4) as pool:
        replies = list(pool.map(send, range(4)))
    # Several heartbeat intervals later, every broker is still unfenced and none ever was.
    # fixed wait: a broker whose heartbeats were held up is fenced within a session timeout and an
    # expiry scan (3/8 s) of the controller's answers; two session timeouts leave it time to show.
    time.sleep(2 * SESSION_TIMEOUT_MS / 1000)
    assert small_cluster.fence_lines() == []
    assert not any(b["fenced"] for b in small_cluster.brokers_view())
    for reply in replies:
        assert reply.status_code == 413, reply.text
        assert reply.json()["errorCode"] == 42


def test_an_expensive_body_under_the_limit_is_parsed_off_the_event_loop(small_cluster: SmallCluster) -> None:
    # Many small topic entries, each with a Uuid to validate: the worst a body under the
    # per-endpoint limit can cost. Rejected (over 10,000 partitions) with every broker unfenced.
    limit = http_api.BODY_LIMITS["assignments"]
    body = _huge_assignments(limit // 77)
    assert limit - 50_000 < len(body) <= limit

    def send(_: int) -> httpx.Response:
        with small_cluster.client(small_cluster.controller.cluster_token_file) as client:
            return client.post("/v1/assignments", content=body)

    with ThreadPoolExecutor(max_workers=4) as pool:
        replies = list(pool.map(send, range(8)))
    for reply in replies:
        assert reply.status_code == 400, reply.text
        assert reply.json()["errorCode"] == 42
        assert "10000" in reply.json()["errorMessage"] or "10,000" in reply.json()["errorMessage"]
    # fixed wait: a broker whose heartbeats were held up is fenced within a session timeout and an
    # expiry scan (3/8 s) of the controller's answers; two session timeouts leave it time to show.
    time.sleep(2 * SESSION_TIMEOUT_MS / 1000)
    assert not any(b["fenced"] for b in small_cluster.brokers_view())
    assert small_cluster.fence_lines() == []


def test_a_stalled_controller_does_not_fence_brokers_for_its_own_stall(small_cluster: SmallCluster) -> None:
    process = small_cluster.controller.process
    assert process is not None
    os.kill(process.pid, signal.SIGSTOP)
    try:
        time.sleep(2.5 * SESSION_TIMEOUT_MS / 1000)  # fixed wait: the stall outlasts every session
    finally:
        os.kill(process.pid, signal.SIGCONT)
    # fixed wait: a broker whose heartbeats were held up is fenced within a session timeout and an
    # expiry scan (3/8 s) of the controller's answers; two session timeouts leave it time to show.
    time.sleep(2 * SESSION_TIMEOUT_MS / 1000)
    assert not any(b["fenced"] for b in small_cluster.brokers_view())
    assert small_cluster.fence_lines() == []


def test_a_dead_broker_is_still_fenced(small_cluster: SmallCluster) -> None:
    small_cluster.brokers[0].kill()
    deadline = time.monotonic() + 30
    while not any(b["fenced"] for b in small_cluster.brokers_view() if b["brokerId"] == 1):
        assert time.monotonic() < deadline, "the killed broker was never fenced"
        time.sleep(0.2)
