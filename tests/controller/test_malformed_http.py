"""Requests the HTTP parser refuses leak no token and flood no log (issue 12, item 2).

Real `jbod-controller` and `jbod-agent` processes, raw sockets: a NUL in the Authorization header
or an over-long header gets HTTP 400 with errorCode 42 and a message that does not quote the
request; the server logs one line per refusal, rate limited, never the token.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from jbod_client.controller import read_token
from jbod_local.processes import LocalBroker, LocalController
from tests.broker.conftest import start_cluster


@dataclass
class Servers:
    controller: LocalController
    broker: LocalBroker

    @property
    def token(self) -> str:
        return read_token(self.controller.cluster_token_file)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    with contextlib.ExitStack() as stack:
        cluster = start_cluster(stack, tmp_path, cluster_id="malformed")
        broker = cluster.add_broker(1, dirs=1, loop=False)
        yield Servers(controller=cluster.controller, broker=broker)


def _exchange(url: str, request: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    return reply


def _bad_requests(token: str) -> list[bytes]:
    nul = f"POST /v1/brokers/heartbeat HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\x00\r\n\r\n"
    long = f"GET /v1/log-dirs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}{'a' * 9000}\r\n\r\n"
    return [nul.encode(), long.encode()]


@pytest.mark.parametrize("server", ["controller", "broker"])
def test_refused_requests_never_echo_or_log_the_token(servers: Servers, server: str) -> None:
    process = servers.controller if server == "controller" else servers.broker
    url = process.url
    token = servers.token
    lines_before = len(process.log_path.read_text().splitlines())
    for request in _bad_requests(token):
        reply = _exchange(url, request)
        assert reply.startswith(b"HTTP/1.1 400") or reply.startswith(b"HTTP/1.0 400"), reply[:200]
        assert token.encode() not in reply
        assert b"Bearer" not in reply
        body = orjson.loads(reply.partition(b"\r\n\r\n")[2])
        assert body["errorCode"] == 42
    for n in range(200):
        _exchange(url, _bad_requests(token)[n % 2])
    log = process.log_path.read_text()
    assert token not in log
    new_lines = log.splitlines()[lines_before:]
    assert "Traceback" not in "\n".join(new_lines)
    # One line per refusal at most once a second: a handful for 202 requests, not thousands.
    assert len(new_lines) < 40, new_lines[:50]
    assert any("Rejected a malformed HTTP request" in line for line in new_lines)
