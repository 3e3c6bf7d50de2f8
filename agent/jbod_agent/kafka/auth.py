"""Who may use a broker's SASL listener: SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN over the users of
the metadata log, plus two reserved users: `admin`, whose password is the admin token, and
`jbod-broker` (the brokers replicating from each other), whose password is the cluster token.

Guarantees:
* Users are the SCRAM credentials in the broker's replica of the metadata log
  (`ClusterImage.scram_credential`, created with AlterUserScramCredentials / `kafka-configs.sh`):
  a user added or removed there can log in, or not, as soon as this broker has replayed it.
* A reserved user authenticates with its token: over SCRAM through a credential derived from the
  token at start (a random 32-byte salt, 4096 iterations: the shape of the decoys of unknown
  users), over PLAIN by a constant-time comparison. No other user may take a reserved name (the
  controller refuses to store a credential for one). Without its token nobody is that user.
* PLAIN checks a user's password against the same SCRAM credential (SHA-512 first), so every user
  has one password whatever the mechanism.
* A failure never says whether the user exists; its reason goes to the broker's log at DEBUG.
* The connection's principal is Kafka's `User:<name>` (`User:admin` for the admin token,
  `User:jbod-broker` for the cluster token), what the ACLs name.
"""

from __future__ import annotations

import hmac
import logging
import secrets
from typing import Final

from jbod_agent.kafka.apis import AuthenticationFailedError
from jbod_agent.kafka.context import ADMIN_USER
from jbod_agent.kafka.listener import user_principal
from jbod_agent.replication.peer_link import INTER_BROKER_USER
from jbod_agent.state import AgentState
from jbod_core import scram
from jbod_core.image import ScramCredential
from jbod_kafka import sasl

log = logging.getLogger("jbod_agent.kafka.auth")

MECHANISMS: Final = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
_RESERVED_ITERATIONS: Final = scram.MIN_ITERATIONS
_RESERVED_USERS: Final = frozenset({ADMIN_USER, INTER_BROKER_USER})  # = jbod_core.scram.RESERVED_USERS


class _Exchange:
    """One connection's SASL exchange, in the listener's terms (`apis.SaslExchange`)."""

    def __init__(self, server: sasl.PlainServer | sasl.ScramServer) -> None:
        self._server = server
        self.principal: str | None = None

    def step(self, token: bytes) -> bytes:
        try:
            reply = self._server.respond(token)
        except sasl.SaslError as exc:
            log.debug("SASL %s failed: %s", self._server.mechanism, exc.reason)
            raise AuthenticationFailedError(exc.message) from None
        self.principal = None if reply.principal is None else user_principal(reply.principal)
        return reply.token


class BrokerAuthenticator:
    """The mechanisms of a broker's SASL listeners (the module's guarantees)."""

    def __init__(
        self, state: AgentState, admin_password: str | None, *, inter_broker_password: str | None = None
    ) -> None:
        self._state = state
        self._decoy_secret = secrets.token_bytes(32)
        self._reserved = {
            user: password
            for user, password in ((ADMIN_USER, admin_password), (INTER_BROKER_USER, inter_broker_password))
            if password is not None
        }
        self._reserved_scram: dict[tuple[str, int], ScramCredential] = {}
        for user, password in self._reserved.items():
            for mechanism in sasl.ScramMechanism:
                salt = secrets.token_bytes(sasl.DECOY_SALT_SIZE)
                stored, server = sasl.scram_credential(
                    password, salt=salt, iterations=_RESERVED_ITERATIONS, mechanism=mechanism
                )
                self._reserved_scram[user, mechanism.type] = ScramCredential(
                    salt, stored, server, _RESERVED_ITERATIONS
                )

    @property
    def mechanisms(self) -> tuple[str, ...]:
        return MECHANISMS

    def start(self, mechanism: str) -> _Exchange:
        if mechanism == "PLAIN":
            return _Exchange(sasl.PlainServer(self._check_password))
        scram_mechanism = sasl.ScramMechanism(mechanism)
        return _Exchange(
            sasl.ScramServer(
                scram_mechanism,
                lambda user: self._credential(user, scram_mechanism),
                server_nonce=secrets.token_urlsafe(24),
                decoy_secret=self._decoy_secret,
            )
        )

    def _credential(self, user: str, mechanism: sasl.ScramMechanism) -> ScramCredential | None:
        if user in _RESERVED_USERS:
            return self._reserved_scram.get((user, mechanism.type))
        return self._state.image.scram_credential(user, mechanism.type)

    def _check_password(self, user: str, password: str) -> bool:
        if user in _RESERVED_USERS:
            expected = self._reserved.get(user)
            return expected is not None and hmac.compare_digest(password.encode(), expected.encode())
        for mechanism in (sasl.ScramMechanism.SCRAM_SHA_512, sasl.ScramMechanism.SCRAM_SHA_256):
            credential = self._state.image.scram_credential(user, mechanism.type)
            if credential is None:
                continue
            try:
                stored, _server = sasl.scram_credential(
                    password, salt=credential.salt, iterations=credential.iterations, mechanism=mechanism
                )
            except ValueError:
                return False
            return hmac.compare_digest(stored, credential.stored_key)
        return False
