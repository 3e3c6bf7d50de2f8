"""A broker's own Kafka connection to another broker's inter-broker listener: how a follower
reaches its leader (issue 31).

Guarantees:
* `PeerConnection.open` connects (TLS with the broker's truststore and, as client certificate,
  its keystore when the listener is SSL or SASL_SSL: mTLS where the leader asks for it), then on
  a SASL listener logs in as the inter-broker user with `sasl.mechanism.inter.broker.protocol`
  (SaslHandshake v1, SaslAuthenticate v2; SCRAM checks the leader's signature too). Any failure
  raises `PeerError` with one line saying what failed, and leaves nothing open.
* `request` sends one request and returns its decoded response (`exchange`: the raw frames, for a
  caller with its own codec); one request is in flight at a time (the fetch loop waits for each
  answer). A response that does not arrive within the
  timeout, a closed connection, a response to another correlation id or bytes that do not
  decode raise `PeerError`; the connection is then closed and must not be used again.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from kio.schema.errors import ErrorCode as KafkaError

from jbod_client import sasl_client
from jbod_kafka import protocol
from jbod_runtime import kafka_frames

_SIZE: Final = struct.Struct(">i")
MAX_RESPONSE_BYTES: Final = 256 << 20  # far above replica.fetch.response.max.bytes: garbage, not data
INTER_BROKER_USER: Final = "jbod-broker"  # the SASL user whose password is the cluster token
_SASL_HANDSHAKE: Final = (protocol.SASL_HANDSHAKE_KEY, 1)
_SASL_AUTHENTICATE: Final = (protocol.SASL_AUTHENTICATE_KEY, 2)


class PeerError(Exception):
    """The link to another broker failed; `str()` is one line."""


@dataclass(frozen=True, slots=True)
class PeerLogin:
    """How a broker logs in to its peers' inter-broker listener (None mechanism: no SASL)."""

    mechanism: str | None
    username: str
    password: str


class PeerConnection:
    """One connection to one broker (the module's guarantees)."""

    def __init__(self, stream: kafka_frames.FrameConnection, client_id: str) -> None:
        self._stream = stream
        self.client_id = client_id
        self._correlation_id = 0
        self.closed = False

    @classmethod
    async def open(  # noqa: PLR0913  where, how (TLS, login), and how long
        cls,
        host: str,
        port: int,
        *,
        tls: ssl.SSLContext | None,
        login: PeerLogin,
        client_id: str,
        timeout: float,
    ) -> PeerConnection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                _transport, stream = await loop.create_connection(
                    lambda: kafka_frames.FrameConnection(max_frame_bytes=MAX_RESPONSE_BYTES, max_queued=2),
                    host,
                    port,
                    ssl=tls,
                    server_hostname=host if tls is not None else None,
                )
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            raise PeerError(f"cannot connect to {host}:{port}: {exc or type(exc).__name__}") from None
        connection = cls(stream, client_id)
        try:
            if login.mechanism is not None:
                await connection._login(login, timeout)
        except BaseException:
            connection.close()
            raise
        return connection

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(Exception):
                self._stream.close()

    async def request(self, api_key: int, version: int, body: Any, *, timeout: float) -> Any:
        """The decoded response to `body` (the module's guarantees)."""
        payload = await self.exchange(
            lambda correlation_id: protocol.encode_request(
                api_key, version, body, correlation_id=correlation_id, client_id=self.client_id
            ),
            what=f"API {api_key} v{version}",
            timeout=timeout,
        )
        try:
            _answered, response = protocol.parse_response(api_key, version, payload)
        except protocol.MalformedResponseError as exc:
            self.close()
            raise PeerError(str(exc)) from None
        return response

    async def exchange(self, frame_of: Callable[[int], bytes], *, what: str, timeout: float) -> memoryview:
        """The response frame (without its size prefix, from its correlation id on; read-only) to
        the request frame `frame_of(correlation_id)` writes: the raw path of a caller that encodes
        and decodes its own API (a follower's Fetch). The module's guarantees, but for decoding."""
        if self.closed:
            raise PeerError("the connection is closed")
        self._correlation_id += 1
        correlation_id = self._correlation_id
        stream = self._stream
        try:
            stream.write(frame_of(correlation_id))
            await stream.drain()
            payload = await stream.next_frame(idle_timeout=timeout, read_timeout=timeout)
        except (OSError, ssl.SSLError, kafka_frames.FrameSizeError) as exc:
            self.close()
            raise PeerError(f"the connection failed: {exc or type(exc).__name__}") from None
        except kafka_frames.FrameTimeoutError:
            self.close()
            raise PeerError(f"no answer to {what} within {timeout:.0f} s") from None
        if payload is None:
            self.close()
            if stream.closed:
                raise PeerError("the connection failed: closed by the other broker")
            raise PeerError(f"no answer to {what} within {timeout:.0f} s")
        if len(payload) < 4:
            self.close()
            raise PeerError(f"a response of {len(payload)} bytes")
        (answered,) = _SIZE.unpack_from(payload)
        if answered != correlation_id:
            self.close()
            raise PeerError(f"an answer to request {answered} where {correlation_id} was expected")
        return payload

    async def _login(self, login: PeerLogin, timeout: float) -> None:
        mechanism = login.mechanism
        assert mechanism is not None
        handshake = await self.request(
            *_SASL_HANDSHAKE,
            protocol.build(protocol.request_type(*_SASL_HANDSHAKE), mechanism=mechanism),
            timeout=timeout,
        )
        if handshake.error_code != KafkaError.none:
            raise PeerError(f"the peer does not take SASL {mechanism} (error {int(handshake.error_code)})")
        try:
            await sasl_client.converse(
                mechanism,
                login.username,
                login.password,
                nonce=sasl_client.new_nonce(),
                round_trip=lambda token: self._authenticate(token, timeout),
            )
        except sasl_client.SaslClientError as exc:
            raise PeerError(f"SASL {mechanism} login failed: {exc}") from None

    async def _authenticate(self, token: bytes, timeout: float) -> bytes:
        response = await self.request(
            *_SASL_AUTHENTICATE,
            protocol.build(protocol.request_type(*_SASL_AUTHENTICATE), auth_bytes=token),
            timeout=timeout,
        )
        if response.error_code != KafkaError.none:
            raise PeerError(f"SASL login refused: {response.error_message or int(response.error_code)}")
        return bytes(response.auth_bytes)
