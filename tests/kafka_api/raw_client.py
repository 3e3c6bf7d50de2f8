"""A bare Kafka-protocol connection for tests that must send what no client library would: raw
frames, garbage, unknown versions, or compare answers byte for byte with Kafka's. Requests are
encoded with kio (Kafka's own schemas); it logs in with SASL PLAIN or SCRAM."""

from __future__ import annotations

import socket
import struct
from typing import Any

from kio.serial import entity_reader

from jbod_client import sasl_client
from jbod_kafka import protocol


def encode_request(api_key: int, version: int, body: Any, *, correlation_id: int = 1) -> bytes:
    """A request frame without its size prefix (`send_frame` adds one)."""
    frame = protocol.encode_request(
        api_key, version, body, correlation_id=correlation_id, client_id="raw-test"
    )
    return frame[4:]


class RawConnection:
    def __init__(self, address: str, *, timeout: float = 10.0) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_frame(self, frame: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)

    def read_frame(self) -> bytes | None:
        """The next response frame, or None when the broker closed the connection."""
        head = self._read(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._read(size)

    def _read(self, size: int) -> bytes | None:
        data = b""
        while len(data) < size:
            try:
                chunk = self.sock.recv(size - len(data))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            data += chunk
        return data

    def closed_by_peer(self) -> bool:
        return self.read_frame() is None

    def request(self, api_key: int, version: int, body: Any) -> Any:
        """Send `body`, return the decoded response body (AssertionError if the broker closed)."""
        response = self.answer(api_key, version, body)
        assert response is not None, f"the broker closed the connection on API {api_key} v{version}"
        return response

    def answer(self, api_key: int, version: int, body: Any) -> Any | None:
        """Send `body`, return the decoded response body, or None when the broker closed the
        connection instead of answering."""
        return self.receive(self.send(api_key, version, body), api_key, version, body)

    def send(self, api_key: int, version: int, body: Any) -> int:
        """Send `body` without waiting for its answer (requests may be pipelined); its correlation id."""
        self.correlation_id += 1
        self.send_frame(encode_request(api_key, version, body, correlation_id=self.correlation_id))
        return self.correlation_id

    def receive(self, correlation_id: int, api_key: int, version: int, body: Any) -> Any | None:
        """The decoded answer to the request `send` sent as `correlation_id` (answers come in the
        order of the requests), or None when the broker closed the connection instead."""
        frame = self.read_frame()
        if frame is None:
            return None
        (answered,) = struct.unpack_from(">i", frame)
        assert answered == correlation_id
        flexible = bool(type(body).__flexible__) and api_key != protocol.API_VERSIONS_KEY
        offset = 4 + (1 if flexible else 0)  # response header v1: tagged fields (empty)
        response, _size = entity_reader(protocol.response_type(api_key, version))(frame, offset)
        return response

    def authenticate(self, user: str, password: str) -> Any:
        """SaslHandshake v1 (PLAIN) then SaslAuthenticate v2; the SaslAuthenticate response."""
        handshake = self.request(17, 1, protocol.build(protocol.request_type(17, 1), mechanism="PLAIN"))
        assert int(handshake.error_code) == 0, handshake
        token = b"\0" + user.encode() + b"\0" + password.encode()
        return self.request(36, 2, protocol.build(protocol.request_type(36, 2), auth_bytes=token))

    def authenticate_scram(self, user: str, password: str, *, mechanism: str = "SCRAM-SHA-512") -> Any:
        """SaslHandshake v1 (`mechanism`) then SaslAuthenticate v2 rounds of SCRAM; the last
        SaslAuthenticate response (an error code other than 0 when the login was refused)."""
        handshake = self.request(17, 1, protocol.build(protocol.request_type(17, 1), mechanism=mechanism))
        assert int(handshake.error_code) == 0, handshake
        scram = sasl_client.ScramClient(
            mechanism=mechanism, username=user, password=password, nonce=sasl_client.new_nonce()
        )
        authenticate = protocol.request_type(36, 2)
        first = self.request(36, 2, protocol.build(authenticate, auth_bytes=scram.first()))
        if int(first.error_code) != 0:
            return first
        final = self.request(
            36, 2, protocol.build(authenticate, auth_bytes=scram.final(bytes(first.auth_bytes)))
        )
        if int(final.error_code) == 0:
            scram.verify(bytes(final.auth_bytes))
        return final
