"""The network side of a broker's Kafka listener: framing, limits, authentication gating and
ordered dispatch; what a request means is the handlers' (`apis.KafkaApis`).

Guarantees, per connection (as Kafka's `SocketServer` and `KafkaApis`):
* Requests are read as size-prefixed frames and answered in the order they arrived, one at a
  time (Kafka mutes a connection while its request is processed): a client may pipeline, and
  at most `max_in_flight` requests are read ahead of the one being answered. A handler answers
  with a kio body (encoded here) or a response it framed itself (`protocol.EncodedResponse`,
  written as its buffers, records uncopied).
* A frame larger than `socket.request.max.bytes`, a negative size, garbage that does not decode,
  an unknown API key or an unsupported version, or a request other than ApiVersions and the
  SASL exchange before a SASL listener's client authenticated: the connection is closed (an
  ApiVersions request of an unknown version is first answered with v0 and UNSUPPORTED_VERSION,
  KIP-511). Each refusal is one WARNING line, rate limited; nothing else is disturbed.
* A connection with no request in progress for `connections.max.idle.ms` is closed; once the
  first byte of a frame has arrived, the rest must arrive within `request.read.timeout.ms`.
* A client over its quota (`client_quotas`, KIP-219) is answered at once with the throttle time
  and nothing more is read from its connection until that time has passed (a client too old to
  throttle itself gets its answer after that time instead).
* A connection from an address over its `connection_creation_rate` (KIP-612, `admit`) is held
  open and unread for the throttle time `admit` gives, then closed, as Kafka's acceptor does:
  no request of it reaches a handler.
* A handler that raises closes that connection and logs the error with its traceback: a bug is
  loud but never takes the listener down.
* SSL and SASL_SSL listeners (issue 25) handshake with the listener's `ServerTls` before any
  byte is read (a failed or slow handshake closes the connection and reaches no handler). On SSL
  a verified client certificate's subject, mapped by `ssl.principal.mapping.rules`, is the
  connection's principal (ANONYMOUS without one); on SASL_SSL the SASL exchange decides, as on
  SASL_PLAINTEXT.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from jbod_agent.config import KafkaListener
from jbod_kafka import protocol
from jbod_runtime import kafka_frames
from jbod_runtime import tls as tls_files
from jbod_runtime.http_server import RateLimitedLog

log = logging.getLogger("jbod_agent.kafka")
ANONYMOUS: Final = "User:ANONYMOUS"  # Kafka's principal of an unauthenticated (PLAINTEXT) connection


def user_principal(user: str) -> str:
    """The Kafka principal of a user: authenticated over SASL, or mapped from a client certificate."""
    return f"User:{user}"


@dataclass(frozen=True, slots=True)
class ListenerLimits:
    max_request_bytes: int = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
    idle_timeout_s: float = 600.0  # connections.max.idle.ms
    read_timeout_s: float = 30.0
    max_in_flight: int = 5


@dataclass(slots=True)
class Connection:
    """What a handler knows of the connection its request came on."""

    listener: KafkaListener
    peer: str
    # Kafka's principal, what ACLs name: set once authenticated (`User:<name>` after SASL), or from
    # the start (PLAINTEXT: `User:ANONYMOUS`; an SSL listener: the certificate's mapped principal).
    principal: str | None = None
    sasl: Any = None  # the SASL exchange in progress (`apis` owns its meaning)
    raw_sasl_tokens: bool = False  # after SaslHandshake v0, tokens come as bare frames
    closing: bool = False
    attributes: dict[str, Any] = field(default_factory=dict)
    # Client quotas (KIP-219; `client_quotas`): the size of the request being handled, the
    # throttle time its response carries, and how long to stop reading once it is answered (or,
    # for a client too old to throttle itself, before it is answered).
    request_bytes: int = 0
    throttle_ms: int = 0
    mute_s: float = 0.0
    delay_response: bool = False

    @property
    def authenticated(self) -> bool:
        return self.principal is not None


class RequestHandlers(Protocol):
    """What a listener asks of the broker's APIs (`apis.KafkaApis`)."""

    async def handle(self, conn: Connection, request: protocol.Request) -> Any:
        """The response body (a kio message), or None for no response (acks=0)."""

    async def raw_token(self, conn: Connection, token: bytes) -> bytes | None:
        """The answer to a bare SASL token (after SaslHandshake v0), size prefix included."""

    def api_versions_fallback(self, correlation_id: int) -> bytes:
        """ApiVersions v0 with UNSUPPORTED_VERSION and the APIs answered (KIP-511)."""


class CloseConnectionError(Exception):
    """Raised by a handler: close this connection after logging `str()` (rate limited)."""


class _HandlerFailedError(Exception):
    """A handler raised: already logged with its traceback; the connection closes."""


class KafkaServer:
    """One asyncio server per Kafka listener (the module's guarantees)."""

    def __init__(  # noqa: PLR0913  the listener and its handlers, then four keyword settings
        self,
        listener: KafkaListener,
        handlers: RequestHandlers,
        *,
        limits: ListenerLimits,
        tls: tls_files.ServerTls | None = None,
        principal_rules: tuple[tls_files.PrincipalRule, ...] = (),
        admit: Callable[[str], int] | None = None,
    ) -> None:
        if listener.tls and tls is None:
            raise ValueError(f"{listener} needs a TLS context")
        self.listener = listener
        self._admit = admit
        self._tls = tls
        self._principal_rules = principal_rules
        self._handlers = handlers
        self._limits = limits
        self._refusals = RateLimitedLog(log, interval_s=1.0)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.port = listener.port

    async def start(self) -> int:
        """Listen; the bound port (the configured one, or the one chosen for port 0)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._connection_made,
            host=self.listener.host,
            port=self.listener.port,
            reuse_address=True,
            ssl=self._tls.context if self._tls is not None else None,
            ssl_handshake_timeout=self._limits.read_timeout_s if self._tls is not None else None,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    def _connection_made(self) -> kafka_frames.FrameConnection:
        return _ServedConnection(self)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _serve(self, stream: kafka_frames.FrameConnection) -> None:
        peername = stream.get_extra_info("peername")
        peer = f"{peername[0]}:{peername[1]}" if isinstance(peername, tuple) else str(peername)
        conn = Connection(self.listener, peer, principal=self._first_principal(stream))
        limits = self._limits
        try:
            while True:
                frame = await stream.next_frame(
                    idle_timeout=limits.idle_timeout_s, read_timeout=limits.read_timeout_s
                )
                if frame is None:
                    return  # the peer closed, or the connection was idle too long
                conn.request_bytes = len(frame)
                response = await self._answer(conn, frame)
                if conn.mute_s > 0 and conn.delay_response:
                    await self._mute(conn)
                await self._write(stream, response)
                if conn.closing:
                    return
                if conn.mute_s > 0:
                    await self._mute(conn)
        except (ConnectionError, asyncio.CancelledError):
            return  # the peer went away, or the listener is closing
        except kafka_frames.FrameSizeError as exc:
            self._refusals.warning(
                "Closed Kafka connection from %s: a request of %d bytes (socket.request.max.bytes %d)",
                peer,
                exc.size,
                limits.max_request_bytes,
            )
        except kafka_frames.FrameTimeoutError as exc:
            self._refusals.warning("Closed Kafka connection from %s: %s", peer, exc)
        except CloseConnectionError as exc:
            self._refusals.warning("Closed Kafka connection from %s: %s", peer, exc)
        except _HandlerFailedError:
            pass  # logged with its traceback where it failed
        except Exception:
            log.exception("Closed Kafka connection from %s: the request failed", peer)
        finally:
            stream.close()

    def _handling(self, stream: kafka_frames.FrameConnection) -> Coroutine[Any, Any, None]:
        """What a new connection gets: served, or held unread over its address's
        connection_creation_rate (KIP-612) and then closed."""
        peername = stream.get_extra_info("peername")
        if self._admit is None or not isinstance(peername, tuple):
            return self._serve(stream)
        throttle_ms = self._admit(str(peername[0]))
        if throttle_ms <= 0:
            return self._serve(stream)
        return self._hold(stream, throttle_ms / 1000)

    @staticmethod
    async def _hold(stream: kafka_frames.FrameConnection, seconds: float) -> None:
        try:
            await asyncio.sleep(seconds)
        finally:
            stream.close()

    @staticmethod
    async def _write(
        stream: kafka_frames.FrameConnection, response: bytes | protocol.EncodedResponse | None
    ) -> None:
        if isinstance(response, protocol.EncodedResponse):
            stream.writelines(response.pieces)
            await stream.drain()
        elif response:
            stream.write(response)
            await stream.drain()

    @staticmethod
    async def _mute(conn: Connection) -> None:
        """A throttled client (KIP-219): no request of this connection is read meanwhile."""
        delay, conn.mute_s, conn.delay_response = conn.mute_s, 0.0, False
        await asyncio.sleep(delay)

    def _first_principal(self, stream: kafka_frames.FrameConnection) -> str | None:
        """None until SASL authenticates; on SSL the client certificate's mapped subject."""
        if self.listener.authenticates:
            return None
        subject = tls_files.peer_subject(stream.get_extra_info("ssl_object"))
        if subject is None:
            return ANONYMOUS
        return user_principal(tls_files.map_principal(self._principal_rules, subject))

    async def _answer(self, conn: Connection, frame: memoryview) -> bytes | protocol.EncodedResponse | None:
        if conn.raw_sasl_tokens:
            return await self._handlers.raw_token(conn, bytes(frame))
        try:
            request = protocol.parse_request(frame)
        except protocol.UnsupportedVersionError as exc:
            if exc.api_key == protocol.API_VERSIONS_KEY and exc.correlation_id >= 0:
                return self._handlers.api_versions_fallback(exc.correlation_id)
            raise CloseConnectionError(str(exc)) from None
        except protocol.RequestError as exc:
            raise CloseConnectionError(str(exc)) from None
        if not conn.authenticated and request.header.api_key not in protocol.BEFORE_AUTHENTICATION:
            raise CloseConnectionError(
                f"{protocol.APIS[request.header.api_key].name} before authentication on {conn.listener.name}"
            )
        try:
            body = await self._handlers.handle(conn, request)
            if body is None or isinstance(body, protocol.EncodedResponse):
                return body
            return protocol.encode_response(request.header, body)
        except CloseConnectionError:
            raise
        except Exception:
            api = protocol.APIS[request.header.api_key]
            log.exception(
                "Closed Kafka connection from %s: %s v%d failed (the request failed)",
                conn.peer,
                api.name,
                request.header.api_version,
            )
            raise _HandlerFailedError from None


class _ServedConnection(kafka_frames.FrameConnection):
    """A connection of a `KafkaServer`: served by its own task from the moment it is made."""

    def __init__(self, server: KafkaServer) -> None:
        super().__init__(
            max_frame_bytes=server._limits.max_request_bytes, max_queued=server._limits.max_in_flight
        )
        self._server = server

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        connections = self._server._connections
        task = asyncio.get_running_loop().create_task(self._server._handling(self))
        connections.add(task)  # held until it ends; `KafkaServer.close` cancels what is left
        task.add_done_callback(connections.discard)
