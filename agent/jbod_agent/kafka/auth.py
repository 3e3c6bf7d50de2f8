"""Who may connect to a broker's SASL listener: SASL/PLAIN for the `admin` principal, whose
password is the admin token.

Guarantees: a wrong password, an unknown user and a malformed token fail alike
(`AuthenticationFailedError`, one message); the comparison is constant-time.
"""

from __future__ import annotations

import hmac

from jbod_agent.kafka.apis import AuthenticationFailedError
from jbod_agent.kafka.context import ADMIN

_FAILED = "Authentication failed: invalid username or password"


class PlainExchange:
    def __init__(self, admin_password: str | None) -> None:
        self._admin_password = admin_password
        self.principal: str | None = None

    def step(self, token: bytes) -> bytes:
        if self.principal is not None:
            raise AuthenticationFailedError("the exchange is complete")
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailedError(_FAILED)
        authzid, user, password = parts
        if authzid and authzid != user:
            raise AuthenticationFailedError(_FAILED)
        expected = self._admin_password
        if expected is None or user != ADMIN.encode() or not hmac.compare_digest(password, expected.encode()):
            raise AuthenticationFailedError(_FAILED)
        self.principal = ADMIN
        return b""


class BrokerAuthenticator:
    def __init__(self, admin_password: str | None) -> None:
        self._admin_password = admin_password

    @property
    def mechanisms(self) -> tuple[str, ...]:
        return ("PLAIN",)

    def start(self, mechanism: str) -> PlainExchange:
        return PlainExchange(self._admin_password)
