"""Kafka's size-prefixed frames over one asyncio connection, read with as few copies and wake-ups
as the event loop allows: the I/O under a broker's Kafka listener and under a follower's link to
its leader.

Guarantees:
* `FrameConnection` is an `asyncio.BufferedProtocol`: the kernel writes received bytes into a
  64 KiB scratch buffer from which small frames are cut (one copy each), and a frame that does
  not fit in what is left of the scratch is received into a buffer of its own size (what had
  arrived of it copied once, the rest in place; after such a frame the next size prefix is read
  alone, so a run of large frames is received without any copy in user space). Frames come out
  as read-only memoryviews, in order; kio and the hand codecs read them as they are.
* At most `max_queued` complete frames wait unread: beyond that the connection stops reading
  (TCP's flow control holds the peer back) until `next_frame` takes one.
* A frame whose size prefix is negative or above `max_frame_bytes` ends the stream: the frames
  before it are still returned, then `next_frame` raises `FrameSizeError` (nothing of it is
  read). A frame whose first byte arrived more than `read_timeout` seconds ago without its last
  raises `FrameTimeoutError`; waiting longer than `idle_timeout` with no frame begun returns None,
  as the end of the stream does.
* `write` / `writelines` hand buffers to the transport as they are (records uncopied);
  `drain` waits while the transport's buffer is above its high-water mark. After the connection
  is lost, `drain` and `next_frame` raise `ConnectionResetError` (frames already complete are
  returned first).
"""

from __future__ import annotations

import asyncio
import collections
import struct
import time
import typing
from collections.abc import Iterable
from typing import Any, Final

_SIZE: Final = struct.Struct(">i")
SCRATCH_BYTES: Final = 1 << 16
_MIN_ROOM: Final = 4096  # compact the scratch when less than this is left at its end


class FrameSizeError(Exception):
    """A size prefix outside 0..max_frame_bytes; `size` is the prefix."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"a frame of {size} bytes (at most {limit})")
        self.size = size


class FrameTimeoutError(Exception):
    """A frame began and did not arrive whole within the read timeout."""


class FrameConnection(asyncio.BufferedProtocol):
    """One connection's frames and writes (the module's guarantees)."""

    def __init__(self, *, max_frame_bytes: int, max_queued: int = 5) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.max_queued = max_queued
        self.transport: asyncio.Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scratch = bytearray(SCRATCH_BYTES)
        self._view = memoryview(self._scratch)
        self._start = 0  # the first unparsed byte of the scratch
        self._end = 0  # the end of what the scratch holds
        self._body: bytearray | None = None  # a large frame received in place
        self._body_filled = 0
        self._expect_large = False  # the last frame went to its own buffer
        self._frames: collections.deque[memoryview] = collections.deque()
        self._error: BaseException | None = None
        self._closed = False  # the connection was lost (or EOF)
        self._waiter: asyncio.Future[None] | None = None
        self._frame_started: float | None = None  # monotonic time of a partial frame's first byte
        self._reading_paused = False
        self._writing_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None

    # -- asyncio's protocol callbacks -----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not subclasses of asyncio.Transport, but have its methods.
        self.transport = typing.cast(asyncio.Transport, transport)
        self._loop = asyncio.get_running_loop()  # once: each lookup costs a getpid() on 3.11

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._body is not None:
            return memoryview(self._body)[self._body_filled :]
        if self._start == self._end:
            self._start = self._end = 0
            if self._expect_large:
                # After a large frame, read the next size prefix alone: if this frame is large
                # too, its body then goes straight to its own buffer instead of through the
                # scratch (one more read, but no copy of up to 64 KiB of it).
                return self._view[:4]
        elif len(self._scratch) - self._end < _MIN_ROOM:
            kept = self._end - self._start
            self._scratch[:kept] = self._view[self._start : self._end]
            self._start, self._end = 0, kept
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._body is not None:
            self._body_filled += nbytes
            if self._body_filled == len(self._body):
                self._queue(memoryview(self._body).toreadonly())
                self._body = None
                self._frame_started = None
                self._expect_large = True
            return
        self._end += nbytes
        self._parse()

    def eof_received(self) -> bool:
        self._lost(None)
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost(exc)
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionResetError("the connection was lost"))

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- reading --------------------------------------------------------------------------------

    def _parse(self) -> None:
        view, start, end = self._view, self._start, self._end
        while not self._error:
            available = end - start
            if available < 4:
                break
            (size,) = _SIZE.unpack_from(view, start)
            if size < 0 or size > self.max_frame_bytes:
                self._error = FrameSizeError(size, self.max_frame_bytes)
                self._wake()
                if self.transport is not None:
                    self.transport.pause_reading()  # nothing more is read from this stream
                start = end
                break
            if available - 4 >= size:
                self._queue(memoryview(view[start + 4 : start + 4 + size].tobytes()))
                start += 4 + size
                self._expect_large = False
                continue
            if 4 + size > len(self._scratch) - start:  # received in place from here on
                body = bytearray(size)
                body[: available - 4] = view[start + 4 : end]
                self._body, self._body_filled = body, available - 4
                start = end = 0
            break
        self._start, self._end = start, end
        if start == end and self._body is None:
            self._frame_started = None
        elif self._frame_started is None:
            self._frame_started = time.monotonic()

    def _queue(self, frame: memoryview) -> None:
        self._frames.append(frame)
        if len(self._frames) >= self.max_queued and not self._reading_paused and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def _lost(self, exc: BaseException | None) -> None:
        if not self._closed:
            self._closed = True
            if exc is not None and self._error is None:
                self._error = ConnectionResetError(str(exc) or type(exc).__name__)
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def next_frame(self, *, idle_timeout: float, read_timeout: float) -> memoryview | None:
        """The next whole frame, without its size prefix; None at the end of the stream or after
        `idle_timeout` seconds without one begun (the module's guarantees)."""
        loop = self._loop or asyncio.get_running_loop()
        idle_deadline = loop.time() + idle_timeout
        while True:
            if self._frames:
                frame = self._frames.popleft()
                if (
                    self._reading_paused
                    and len(self._frames) < self.max_queued
                    and self.transport is not None
                ):
                    self._reading_paused = False
                    self.transport.resume_reading()
                return frame
            if self._error is not None:
                raise self._error
            if self._closed:
                return None
            started = self._frame_started
            if started is not None:
                deadline = loop.time() + (started + read_timeout - time.monotonic())
            else:
                deadline = idle_deadline
            if loop.time() >= deadline:
                if started is not None:
                    raise FrameTimeoutError(f"a frame did not arrive whole within {read_timeout:.0f} s")
                return None
            waiter = self._waiter = loop.create_future()
            timer = loop.call_at(deadline, _settle, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None

    # -- writing --------------------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.transport is None or self._closed:
            raise ConnectionResetError("the connection was lost")
        self.transport.write(data)

    def writelines(self, pieces: Iterable[bytes | bytearray | memoryview]) -> None:
        if self.transport is None or self._closed:
            raise ConnectionResetError("the connection was lost")
        self.transport.writelines(pieces)

    async def drain(self) -> None:
        if self._closed:
            raise ConnectionResetError("the connection was lost")
        if not self._writing_paused:
            return
        waiter = self._drain_waiter = (self._loop or asyncio.get_running_loop()).create_future()
        try:
            await waiter
        finally:
            self._drain_waiter = None

    @property
    def closed(self) -> bool:
        """The connection was lost or ended (complete frames may still be waiting)."""
        return self._closed

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def get_extra_info(self, name: str) -> Any:
        return None if self.transport is None else self.transport.get_extra_info(name)


def _settle(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
