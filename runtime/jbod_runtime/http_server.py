"""What the HTTP servers of the controller and the agent share: connection limits, bounded request
bodies and a refusal of malformed requests that never echoes them (aiohttp; nothing of the client).

Guarantees:
* `LimitedAppRunner` serves an aiohttp application under `ConnectionLimits`:
  - a connection with no request in progress is closed after `idle_timeout_s` (Kafka's
    `connections.max.idle.ms`);
  - once the first byte of a request has arrived, its request line and headers must be complete
    within `read_timeout_s`, else the connection is closed (slowloris); `read_body` applies the
    same deadline to the body;
  - a request line or header over `max_header_bytes` is refused by the parser.
* A request the HTTP parser refuses (NUL or over-long header, bad request line, ...) is answered
  HTTP 400 with `{"errorCode": 42}` and a fixed message that never echoes the request (so never a
  token), and is logged as one WARNING line without the request's bytes, at most one such line per
  `reject_log_interval_s` with the number of lines suppressed since.
* `read_body` never buffers more than `limit` bytes: a Content-Length over the limit is refused
  before anything is read, a body without one is refused as soon as it passes the limit.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web, web_protocol
from aiohttp.http_exceptions import HttpProcessingError

from jbod_core.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """Per-connection limits of one HTTP server (documented in docs/operations.md, "Limits")."""

    idle_timeout_s: float = 600.0
    read_timeout_s: float = 30.0
    max_header_bytes: int = 8190
    reject_log_interval_s: float = 1.0


class BodyTooLargeError(Exception):
    """The request body is (or announces itself as) larger than the endpoint accepts."""

    def __init__(self, limit: int, announced: int | None) -> None:
        size = f"{announced} bytes" if announced is not None else "more"
        super().__init__(f"Request body of {size} is over the limit of {limit} bytes for this endpoint")
        self.limit = limit


class BodyTimeoutError(Exception):
    """The request body did not arrive within the read timeout."""


async def read_body(request: web.Request, *, limit: int, timeout_s: float) -> bytes:
    """The request body, at most `limit` bytes, within `timeout_s` seconds.

    `BodyTooLargeError` before reading anything when Content-Length is over the limit, or as soon
    as the bytes read pass it; `BodyTimeoutError` when the body is slower than `timeout_s`.
    """
    announced = request.content_length
    if announced is not None and announced > limit:
        raise BodyTooLargeError(limit, announced)
    body = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            while chunk := await request.content.readany():
                body += chunk
                if len(body) > limit:
                    raise BodyTooLargeError(limit, announced)
    except TimeoutError:
        raise BodyTimeoutError(f"Request body did not arrive within {timeout_s:g} s") from None
    return bytes(body)


class RateLimitedLog:
    """At most one line per `interval_s`; the next line says how many were suppressed."""

    def __init__(
        self, logger: logging.Logger, *, interval_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self.clock = clock
        self.suppressed = 0
        self._last: float | None = None

    def warning(self, message: str, *args: object) -> None:
        now = self.clock()
        if self._last is not None and now - self._last < self.interval_s:
            self.suppressed += 1
            return
        self._last = now
        if self.suppressed:
            message += " (%d similar lines suppressed)"
            args = (*args, self.suppressed)
            self.suppressed = 0
        self.logger.warning(message, *args)


def _refusal(exc: BaseException | None) -> str:
    """What to tell the client about a request the parser refused: never the request's bytes."""
    reason = type(exc).__name__ if exc is not None else "unknown"
    if reason == "LineTooLong":
        return "Malformed HTTP request: request line or header too long"
    return f"Malformed HTTP request ({reason})"


class _LimitedRequestHandler(web_protocol.RequestHandler):
    """aiohttp's connection protocol with a request read deadline and a quiet parser-error path."""

    def __init__(
        self, manager: _LimitedServer, *, limits: ConnectionLimits, rejects: RateLimitedLog, **kwargs: Any
    ) -> None:
        super().__init__(manager, **kwargs)
        self._limits = limits
        self._rejects = rejects
        self._handling = False
        self._read_deadline: asyncio.TimerHandle | None = None

    # A request's first bytes arm the deadline; its handler starting (request factory) disarms
    # it; its response being written (log_access, called for every response) ends it.
    def data_received(self, data: bytes) -> None:
        if data and not self._handling and self._read_deadline is None:
            self._read_deadline = self._loop.call_later(self._limits.read_timeout_s, self._read_timed_out)
        super().data_received(data)

    def request_started(self) -> None:
        self._handling = True
        self._disarm()

    def log_access(self, request: Any, response: Any, time: float | None) -> None:
        self._handling = False
        super().log_access(request, response, time)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _disarm(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _read_timed_out(self) -> None:
        self._read_deadline = None
        if self._handling or self.transport is None:
            return
        peer = self.transport.get_extra_info("peername")
        self._rejects.warning(
            "Closed a connection from %s: request not received within %g s",
            peer[0] if isinstance(peer, tuple) else peer,
            self._limits.read_timeout_s,
        )
        self.force_close()

    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500 and not isinstance(exc, HttpProcessingError):
            return super().handle_error(request, status, exc, message)
        # The parser's message quotes the offending line: a header, possibly the bearer token.
        self._rejects.warning(
            "Rejected a malformed HTTP request from %s: %s", request.remote, type(exc).__name__
        )
        if request.writer.output_size > 0:
            raise ConnectionError("Response already started; cannot answer the malformed request")
        body = {"errorCode": int(ErrorCode.INVALID_REQUEST), "errorMessage": _refusal(exc)}
        response = web.Response(status=400, body=orjson.dumps(body), content_type="application/json")
        response.force_close()
        return response


class _LimitedServer(web.Server):
    """aiohttp's low-level server, building `_LimitedRequestHandler`s."""

    def __init__(self, base: web.Server, *, limits: ConnectionLimits, rejects: RateLimitedLog) -> None:
        super().__init__(
            base.request_handler,
            request_factory=self._started_request(base.request_factory),
            handler_cancellation=base.handler_cancellation,
            loop=asyncio.get_running_loop(),
            **base._kwargs,
        )
        self._limits = limits
        self._rejects = rejects

    @staticmethod
    def _started_request(factory: Any) -> Any:
        def make(message: Any, payload: Any, protocol: Any, writer: Any, task: Any) -> Any:
            if isinstance(protocol, _LimitedRequestHandler):
                protocol.request_started()
            return factory(message, payload, protocol, writer, task)

        return make

    def __call__(self) -> web_protocol.RequestHandler:
        return _LimitedRequestHandler(
            self, limits=self._limits, rejects=self._rejects, loop=self._loop, **self._kwargs
        )


class LimitedAppRunner(web.AppRunner):
    """An `AppRunner` whose connections obey `limits` (see the module docstring); no access log."""

    def __init__(
        self, app: web.Application, *, limits: ConnectionLimits, logger: logging.Logger, **kwargs: Any
    ) -> None:
        super().__init__(
            app,
            access_log=None,
            handle_signals=False,
            keepalive_timeout=limits.idle_timeout_s,
            max_line_size=limits.max_header_bytes,
            max_field_size=limits.max_header_bytes,
            **kwargs,
        )
        self._limits = limits
        self._rejects = RateLimitedLog(logger, interval_s=limits.reject_log_interval_s)

    async def _make_server(self) -> web.Server:
        return _LimitedServer(await super()._make_server(), limits=self._limits, rejects=self._rejects)
