"""`jbod_runtime.kafka_frames` over real loopback sockets: frames of every size (empty, small, at
the scratch buffer's edges, megabytes) arrive whole and in order however the sender splits them;
a bad size prefix ends the stream after the frames before it; a frame that stops half way times
out, an idle connection ends, and a peer that closes ends the stream after what it sent; a slow
reader holds the sender back instead of buffering without bound."""

from __future__ import annotations

import asyncio
import random
import socket
import struct
from collections.abc import AsyncIterator, Callable

import pytest
import pytest_asyncio

from jbod_runtime import kafka_frames

pytestmark = pytest.mark.integration


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


async def _pair(
    **options: int,
) -> tuple[kafka_frames.FrameConnection, socket.socket, Callable[[], None]]:
    """A FrameConnection on one end of a loopback TCP connection, a blocking socket on the other."""
    loop = asyncio.get_running_loop()
    listener = socket.create_server(("127.0.0.1", 0))
    peer = socket.create_connection(listener.getsockname())
    accepted, _ = listener.accept()
    listener.close()
    accepted.setblocking(False)
    _transport, conn = await loop.connect_accepted_socket(
        lambda: kafka_frames.FrameConnection(
            max_frame_bytes=options.get("max", 8 << 20), max_queued=options.get("queued", 5)
        ),
        accepted,
    )

    def close() -> None:
        conn.close()
        peer.close()

    return conn, peer, close


@pytest_asyncio.fixture
async def pair() -> AsyncIterator[tuple[kafka_frames.FrameConnection, socket.socket]]:
    conn, peer, close = await _pair()
    yield conn, peer
    close()


async def _send(peer: socket.socket, data: bytes, *, pieces: int, seed: int) -> None:
    """Send `data` cut at random points, from a thread (the socket blocks when buffers fill)."""
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(data)), min(pieces, len(data) - 1))) if len(data) > 1 else []
    chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]

    def send_all() -> None:
        for chunk in chunks:
            peer.sendall(chunk)

    await asyncio.to_thread(send_all)


SIZES = [0, 1, 3, 4, 100, 4092, 65_531, 65_532, 65_536, 65_540, 200_000, 3 << 20]


@pytest.mark.asyncio
async def test_frames_of_every_size_arrive_whole_and_in_order(
    pair: tuple[kafka_frames.FrameConnection, socket.socket],
) -> None:
    conn, peer = pair
    rng = random.Random(7)
    payloads = [rng.randbytes(size) for size in SIZES * 3]
    sender = asyncio.create_task(_send(peer, b"".join(frame(p) for p in payloads), pieces=400, seed=1))
    for expected in payloads:
        got = await conn.next_frame(idle_timeout=10, read_timeout=10)
        assert got is not None and got.readonly
        assert bytes(got) == expected
    await sender


@pytest.mark.asyncio
async def test_a_bad_size_ends_the_stream_after_the_frames_before_it(
    pair: tuple[kafka_frames.FrameConnection, socket.socket],
) -> None:
    conn, peer = pair
    await _send(peer, frame(b"one") + frame(b"two") + struct.pack(">i", -1) + b"rest", pieces=3, seed=2)
    assert bytes(await conn.next_frame(idle_timeout=5, read_timeout=5) or b"") == b"one"
    assert bytes(await conn.next_frame(idle_timeout=5, read_timeout=5) or b"") == b"two"
    with pytest.raises(kafka_frames.FrameSizeError) as raised:
        await conn.next_frame(idle_timeout=5, read_timeout=5)
    assert raised.value.size == -1


@pytest.mark.asyncio
async def test_a_frame_over_the_limit_is_refused_without_reading_it() -> None:
    conn, peer, close = await _pair(max=1000)
    try:
        await _send(peer, struct.pack(">i", 1001), pieces=1, seed=3)
        with pytest.raises(kafka_frames.FrameSizeError, match="1001 bytes"):
            await conn.next_frame(idle_timeout=5, read_timeout=5)
    finally:
        close()


@pytest.mark.asyncio
async def test_a_frame_that_stops_half_way_times_out(
    pair: tuple[kafka_frames.FrameConnection, socket.socket],
) -> None:
    conn, peer = pair
    await _send(peer, frame(b"x" * 100)[:50], pieces=1, seed=4)
    with pytest.raises(kafka_frames.FrameTimeoutError):
        await conn.next_frame(idle_timeout=30, read_timeout=0.3)


@pytest.mark.asyncio
async def test_idle_ends_without_error_and_a_closed_peer_ends_after_its_frames(
    pair: tuple[kafka_frames.FrameConnection, socket.socket],
) -> None:
    conn, peer = pair
    assert await conn.next_frame(idle_timeout=0.2, read_timeout=30) is None
    assert not conn.closed
    await _send(peer, frame(b"last"), pieces=1, seed=5)
    peer.shutdown(socket.SHUT_WR)
    assert bytes(await conn.next_frame(idle_timeout=5, read_timeout=5) or b"") == b"last"
    assert await conn.next_frame(idle_timeout=5, read_timeout=5) is None
    assert conn.closed
    with pytest.raises(ConnectionResetError):
        await conn.drain()


@pytest.mark.asyncio
async def test_a_slow_reader_holds_the_sender_back() -> None:
    """With two frames queued the connection stops reading: the sender's bytes stay in the
    kernel's buffers (its sendall blocks), and every frame still arrives once read."""
    conn, peer, close = await _pair(queued=2)
    try:
        payload = b"y" * (1 << 20)
        frames_sent = 40  # 40 MiB: far more than loopback's socket buffers hold
        sender = asyncio.create_task(_send(peer, frame(payload) * frames_sent, pieces=50, seed=6))
        done, _ = await asyncio.wait({sender}, timeout=1.0)
        assert not done  # held back: nothing reads
        for _ in range(frames_sent):
            got = await conn.next_frame(idle_timeout=10, read_timeout=10)
            assert got is not None and len(got) == len(payload)
        await sender
    finally:
        close()


@pytest.mark.asyncio
async def test_writes_reach_the_peer_in_order(
    pair: tuple[kafka_frames.FrameConnection, socket.socket],
) -> None:
    conn, peer = pair
    conn.write(b"head")
    conn.writelines([b"-a", memoryview(b"-b"), bytearray(b"-c")])
    await conn.drain()
    received = b""
    while len(received) < 10:
        received += await asyncio.to_thread(peer.recv, 100)
    assert received == b"head-a-b-c"


def test_under_uvloop_as_the_brokers_run_it() -> None:
    """The brokers' event loop is uvloop (`jbod_runtime.event_loop`), whose transports feed a
    BufferedProtocol through their own code path."""
    uvloop = pytest.importorskip("uvloop")

    async def scenario() -> None:
        conn, peer, close = await _pair()
        try:
            rng = random.Random(9)
            payloads = [rng.randbytes(size) for size in SIZES]
            sender = asyncio.create_task(
                _send(peer, b"".join(frame(p) for p in payloads), pieces=200, seed=8)
            )
            for expected in payloads:
                got = await conn.next_frame(idle_timeout=10, read_timeout=10)
                assert got is not None and bytes(got) == expected
            await sender
            peer.close()
            assert await conn.next_frame(idle_timeout=5, read_timeout=5) is None
        finally:
            close()

    uvloop.run(scenario())
