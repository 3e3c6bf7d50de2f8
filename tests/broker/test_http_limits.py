"""The HTTP limits (issue 12, item 3): idle and read timeouts of the broker and the controller,
request sizes of the broker's HTTP API and the record size its Kafka listener takes; and the
brokers' HTTP API serves no data plane (issue 31): records go through the Kafka listeners only.

Real `jbod-controller` and `jbod-agent` processes on plain directories, raw sockets. Limits are
configured small through `server.properties`; assertions are on behaviour (a connection closed,
a request refused before its body was sent, nothing appended), never on durations.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
import pytest

from jbod_agent.config import ConfigError, parse_config
from jbod_local.processes import LocalBroker, LocalController, console_script
from tests.broker.conftest import Cluster, start_cluster, wait_for
from tests.broker.data import fetch, produce

MESSAGE_MAX_BYTES = 10_000
LIMITS = {
    "connections.max.idle.ms": "1000",
    "request.read.timeout.ms": "1000",
    "message.max.bytes": str(MESSAGE_MAX_BYTES),
}
#: `POST /v1/log-dirs/move` reads at most this much (`jbod_agent.lifecycle.http_api.SMALL_BODY_BYTES`).
MOVE_BODY_LIMIT = 64 * 1024


@dataclass
class Broker:
    cluster: Cluster
    broker: LocalBroker

    @property
    def token(self) -> str:
        return self.cluster.cluster_token

    def connect(self) -> socket.socket:
        host, port = self.broker.url.removeprefix("http://").split(":")
        return socket.create_connection((host, int(port)), timeout=30)


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[Broker]:
    with contextlib.ExitStack() as stack:
        cluster = start_cluster(stack, tmp_path, cluster_id="limits")
        broker = cluster.add_broker(1, dirs=1, loop=False, properties=LIMITS)
        wait_for(lambda: cluster.all_unfenced(1), timeout=60, what="the broker unfenced")
        assert cluster.admin.create_topic("t", partitions=1, replication_factor=1)["errorCode"] == 0
        # The broker leads the partition only once it has read the topic from the metadata log.
        wait_for(
            lambda: fetch(cluster, 1, "t", 0, 0)["errorCode"] == 0, timeout=60, what="the broker serving t-0"
        )
        yield Broker(cluster=cluster, broker=broker)


def _closed_by_server(sock: socket.socket, trickle: bytes = b"") -> bool:
    """Keep the connection busy with `trickle` (one byte at a time) until the server closes it."""
    deadline = time.monotonic() + 30
    sock.settimeout(0.2)
    for byte in trickle * 1000:
        if time.monotonic() > deadline:
            return False
        try:
            sock.sendall(bytes([byte]))
            if sock.recv(65536) == b"":
                return True
        except TimeoutError:
            continue
        except OSError:
            return True
    while time.monotonic() < deadline:
        try:
            data = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            return True
        if data == b"":
            return True
    return False


def test_an_idle_connection_is_closed(limited: Broker) -> None:
    with limited.connect() as sock:
        assert _closed_by_server(sock)


def test_a_request_whose_headers_trickle_in_is_closed(limited: Broker) -> None:
    with limited.connect() as sock:
        sock.sendall(b"GET /v1/log-dirs HTTP/1.1\r\nHost: x\r\n")
        assert _closed_by_server(sock, trickle=b"X-Slow: ")


def test_a_body_that_trickles_in_is_refused(limited: Broker) -> None:
    with limited.connect() as sock:
        sock.sendall(
            b"POST /v1/log-dirs/move HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
            + f"Authorization: Bearer {limited.token}\r\n\r\n".encode()
        )
        assert _closed_by_server(sock, trickle=b"{")


def test_an_oversized_body_is_refused_before_it_is_read(limited: Broker) -> None:
    # 100 MB announced; only the headers are sent, so the answer proves nothing was waited for.
    with limited.connect() as sock:
        sock.sendall(
            b"POST /v1/log-dirs/move HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {limited.token}\r\nContent-Length: 100000000\r\n\r\n".encode()
        )
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            assert chunk, f"connection closed without an answer: {reply!r}"
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), head
    assert orjson.loads(body)["errorCode"] == 42
    # One byte over the endpoint's limit is refused the same way; the limit itself is read.
    auth = {"Authorization": f"Bearer {limited.token}", "Content-Type": "application/json"}
    over = httpx.post(
        f"{limited.broker.url}/v1/log-dirs/move", content=b" " * (MOVE_BODY_LIMIT + 1), headers=auth
    )
    assert (over.status_code, over.json()["errorCode"]) == (413, 42), over.text
    at = httpx.post(f"{limited.broker.url}/v1/log-dirs/move", content=b" " * MOVE_BODY_LIMIT, headers=auth)
    assert (at.status_code, at.json()["errorCode"]) == (400, 42), at.text  # read, then refused as no JSON


def test_a_record_batch_over_message_max_bytes_appends_nothing(limited: Broker) -> None:
    """The Kafka listener refuses a batch larger than `message.max.bytes` with MESSAGE_TOO_LARGE."""
    refused = produce(limited.cluster, 1, "t", 0, [b"x" * (MESSAGE_MAX_BYTES + 1)], acks=1)
    assert refused["errorCode"] == 10, refused
    assert fetch(limited.cluster, 1, "t", 0, 0)["highWatermark"] == 0
    assert produce(limited.cluster, 1, "t", 0, [b"x" * 100], acks=1) == {"errorCode": 0, "baseOffset": 0}


@pytest.mark.parametrize(
    ("method", "path"), [("POST", "/v1/produce"), ("GET", "/v1/fetch"), ("POST", "/v1/replica/fetch")]
)
def test_the_http_api_serves_no_produce_or_fetch(limited: Broker, method: str, path: str) -> None:
    """Records are produced and consumed, and replicated, on the Kafka listeners only (issue 31):
    the routes of the brokers' former HTTP data plane are not there, whatever the token."""
    for token in (limited.token, limited.cluster.kafka_config()["sasl.password"]):
        reply = httpx.request(
            method,
            f"{limited.broker.url}{path}",
            params={"topic": "t", "partition": 0, "offset": 0} if method == "GET" else None,
            json=None if method == "GET" else {"topic": "t", "partition": 0, "acks": 1, "records": []},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert reply.status_code == 404, (method, path, reply.status_code, reply.text)
    assert fetch(limited.cluster, 1, "t", 0, 0)["highWatermark"] == 0


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("message.max.bytes", "-1"),
        ("message.max.bytes", "big"),
        ("socket.request.max.bytes", "100"),
        ("connections.max.idle.ms", "-1"),
        ("request.read.timeout.ms", "1.5"),
    ],
)
def test_a_bad_limit_is_a_config_error_naming_the_key(key: str, value: str) -> None:
    text = (
        "node.id=1\nlog.dirs=/tmp/d0\nmetadata.log.dir=/tmp/m\ncontroller.url=http://127.0.0.1:9093\n"
        f"cluster.token.file=/tmp/t\n{key}={value}\n"
    )
    with pytest.raises(ConfigError, match=key):
        parse_config(text)


def test_the_controller_closes_idle_and_slow_connections(tmp_path: Path) -> None:
    """The controller's `--connections-max-idle-ms` and `--request-read-timeout-ms` (defaults
    600000 and 30000, as the broker's keys)."""
    controller = LocalController(
        data_dir=tmp_path / "controller",
        cluster_id="limits",
        extra_args=["--connections-max-idle-ms", "1000", "--request-read-timeout-ms", "1000"],
    ).start()
    try:
        host, port = controller.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as idle:
            assert _closed_by_server(idle)
        with socket.create_connection((host, int(port)), timeout=30) as slow:
            slow.sendall(b"GET /healthz HTTP/1.1\r\n")
            assert _closed_by_server(slow, trickle=b"X-Slow: 1\r\n")
        with httpx.Client(timeout=10) as client:  # a prompt request is still served
            assert client.get(f"{controller.url}/healthz").status_code == 200
    finally:
        controller.kill()


@pytest.mark.parametrize("flag", ["--connections-max-idle-ms", "--request-read-timeout-ms"])
def test_a_bad_controller_limit_is_one_line(tmp_path: Path, flag: str) -> None:
    data_dir = str(tmp_path / "c")
    result = subprocess.run(
        [console_script("jbod-controller"), "--data-dir", data_dir, "--cluster-id", "x", flag, "5"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"jbod-controller: error: {flag} must be between 100 and {2**31 - 1}, got 5"
    ]
    assert not (tmp_path / "c").exists()
