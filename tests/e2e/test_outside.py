"""The host-side client helpers of the kind tier (`tests.e2e.outside`) on their own: no cluster,
no Docker, librdkafka against an address nobody listens on."""

from __future__ import annotations

import socket

from e2e.wait import wait_for
from tests.e2e.outside import SteadyProducer


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port  # closed again: nothing listens there


def test_the_steady_producer_waits_for_room_when_its_queue_is_full() -> None:
    """librdkafka's `produce` raises BufferError while its local queue is full (here: one message,
    no broker to take it); the producer keeps going once a message leaves the queue (it times
    out), rather than its thread dying on the first full queue."""
    config = {
        "bootstrap.servers": f"127.0.0.1:{_closed_port()}",
        "queue.buffering.max.messages": 1,
        "message.timeout.ms": 300,
        "log_level": 0,
    }
    steady = SteadyProducer(config, "nowhere").start()
    try:
        wait_for(lambda: steady.sent >= 3, timeout=30, what="3 records queued one after the other")
    finally:
        unflushed = steady.stop()
    assert unflushed == 0
    assert all("timed out" in error for error in steady.fatal), steady.fatal[:3]
