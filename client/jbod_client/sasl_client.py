"""The client's side of SASL PLAIN and SCRAM-SHA-256/512, as Kafka's clients speak them: pure
message builders, bytes in, bytes out (the counterpart of the brokers' `jbod_kafka.sasl`), and
`converse`, the SaslAuthenticate rounds of one login over a caller's transport.

SCRAM (RFC 5802, RFC 7677) in three steps:

    client-first   n,,n=user,r=cnonce
    client-final   c=biws,r=cnonce+snonce,p=base64(ClientKey XOR HMAC(StoredKey, AuthMessage))
    verify         v=base64(HMAC(ServerKey, AuthMessage)) from the server-final

Guarantees:
* Kafka's wire choices, as librdkafka and the Java client make them: no channel binding (GS2
  header `n,,`), the user escaped with `=2C` / `=3D`, the password used as its UTF-8 bytes
  without SASLprep (so a password the brokers' `jbod_kafka.sasl` accepts is accepted here).
* A server-first whose nonce does not extend the client's, with fewer than 4096 iterations (the
  minimum Kafka's clients accept) or that does not parse, and a server-final that does not prove
  the server knows the password (or carries `e=`), raise `SaslClientError`: the client never
  sends a proof to, or trusts, a server that failed the exchange.
* No randomness inside: the client nonce is a parameter (`new_nonce()` makes one).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

from jbod_client.controller import ClientError

#: SCRAM mechanism → `hashlib` name.
SCRAM_HASHES: Final = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS: Final = 4096
_GS2_HEADER: Final = "n,,"


class SaslClientError(ClientError):
    """The server's side of the exchange was not what SCRAM allows; `str()` is one line."""


def new_nonce() -> str:
    """A client nonce: 24 random bytes, URL-safe base64 (printable, no comma)."""
    return base64.urlsafe_b64encode(secrets.token_bytes(24)).decode("ascii")


def plain_token(username: str, password: str) -> bytes:
    """RFC 4616's one message: empty authzid, user, password."""
    return b"\0" + username.encode() + b"\0" + password.encode()


def _escaped(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


def _attributes(message: bytes, *, what: str) -> dict[str, str]:
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslClientError(f"the {what} is not UTF-8") from None
    attributes: dict[str, str] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep or len(name) != 1:
            raise SaslClientError(f"the {what} is malformed: {text[:60]!r}")
        attributes.setdefault(name, value)
    return attributes


@dataclass(kw_only=True)
class ScramClient:
    """One SCRAM exchange: `first()`, then `final(server_first)`, then `verify(server_final)`."""

    mechanism: str
    username: str
    password: str = field(repr=False)
    nonce: str
    _auth_message: bytes | None = field(default=None, init=False, repr=False)
    _server_key: bytes | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.mechanism not in SCRAM_HASHES:
            raise ValueError(f"not a SCRAM mechanism: {self.mechanism}")

    @property
    def _client_first_bare(self) -> str:
        return f"n={_escaped(self.username)},r={self.nonce}"

    def first(self) -> bytes:
        return (_GS2_HEADER + self._client_first_bare).encode()

    def final(self, server_first: bytes) -> bytes:
        """The client-final message answering `server_first` (the module's guarantee)."""
        attributes = _attributes(server_first, what="server-first message")
        if "e" in attributes:
            raise SaslClientError(f"the server refused the exchange: {attributes['e']}")
        combined, salt_text, iterations_text = (attributes.get(k) for k in ("r", "s", "i"))
        if combined is None or salt_text is None or iterations_text is None:
            raise SaslClientError("the server-first message lacks its nonce, salt or iterations")
        if not combined.startswith(self.nonce) or len(combined) == len(self.nonce):
            raise SaslClientError("the server's nonce does not extend the client's")
        try:
            salt = base64.b64decode(salt_text, validate=True)
            iterations = int(iterations_text)
        except (binascii.Error, ValueError):
            raise SaslClientError("the server-first message's salt or iterations do not parse") from None
        if iterations < MIN_ITERATIONS:
            raise SaslClientError(f"the server asks for {iterations} iterations (at least {MIN_ITERATIONS})")
        digest = SCRAM_HASHES[self.mechanism]
        salted = hashlib.pbkdf2_hmac(digest, self.password.encode(), salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", digest)
        stored_key = hashlib.new(digest, client_key).digest()
        channel = base64.b64encode(_GS2_HEADER.encode()).decode("ascii")
        without_proof = f"c={channel},r={combined}"
        auth_message = f"{self._client_first_bare},{server_first.decode()},{without_proof}".encode()
        signature = hmac.digest(stored_key, auth_message, digest)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._auth_message = auth_message
        self._server_key = hmac.digest(salted, b"Server Key", digest)
        return f"{without_proof},p={base64.b64encode(proof).decode('ascii')}".encode()

    def verify(self, server_final: bytes) -> None:
        """Check the server's signature; `SaslClientError` unless it proves the server knows the
        password."""
        if self._auth_message is None or self._server_key is None:
            raise SaslClientError("the server-final message came before the client-final one")
        attributes = _attributes(server_final, what="server-final message")
        if "e" in attributes:
            raise SaslClientError(f"the server refused the exchange: {attributes['e']}")
        expected = hmac.digest(self._server_key, self._auth_message, SCRAM_HASHES[self.mechanism])
        try:
            given = base64.b64decode(attributes.get("v", ""), validate=True)
        except binascii.Error:
            given = b""
        if not hmac.compare_digest(given, expected):
            raise SaslClientError("the server's signature is wrong: it does not know the password")


async def converse(
    mechanism: str,
    username: str,
    password: str,
    *,
    nonce: str,
    round_trip: Callable[[bytes], Awaitable[bytes]],
) -> None:
    """The SaslAuthenticate rounds of one login after a successful SaslHandshake: PLAIN's one
    token, or SCRAM's client-first and client-final, the server-final verified. `round_trip` sends
    a token and returns the server's answer (raising the caller's error when the server refuses);
    a server that fails SCRAM raises `SaslClientError`, a mechanism that is neither PLAIN nor SCRAM
    `ValueError`."""
    if mechanism == "PLAIN":
        await round_trip(plain_token(username, password))
        return
    scram = ScramClient(mechanism=mechanism, username=username, password=password, nonce=nonce)
    server_first = await round_trip(scram.first())
    server_final = await round_trip(scram.final(server_first))
    scram.verify(server_final)
