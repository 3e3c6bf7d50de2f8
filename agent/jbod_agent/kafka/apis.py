"""The Kafka APIs of a broker: one table from API key to handler, ApiVersions, and the SASL
exchange (SaslHandshake, SaslAuthenticate, and bare tokens after SaslHandshake v0).

Guarantees:
* ApiVersions lists exactly the APIs of `jbod_kafka.protocol.APIS` that have a handler here; with
  the transaction APIs, the feature `transaction.version` supported 0-1 and finalized at 1
  (transaction version 1 only), else no features (finalized epoch -1).
* ApiVersions of a version not served is answered v0 with UNSUPPORTED_VERSION and ApiVersions'
  own versions only (KIP-511, as Kafka 4.3.1; `listener` answers it before any handler).
* SASL: the mechanisms are those `Authenticator.mechanisms` names; a handshake for another is
  UNSUPPORTED_SASL_MECHANISM with the list; a failed exchange is SASL_AUTHENTICATION_FAILED with
  a message that does not say whether the user exists, and the connection is closed after the
  answer (as Kafka). As Kafka's: a SaslAuthenticate before any handshake closes the connection
  unanswered; a handshake during an exchange is ILLEGAL_SASL_STATE (no mechanisms), then the
  connection closes; after success, a handshake is ILLEGAL_SASL_STATE with no mechanisms and a
  SaslAuthenticate ILLEGAL_SASL_STATE, the connection kept.
* With client quotas in the metadata image, every request goes through `client_quotas.throttled`
  (throttle time in the response, the connection muted); without any, nothing is measured.
* Every request is authorized by its handler as Kafka's KafkaApis does, against the ACLs of the
  metadata log (`BrokerContext.allows`; docs/decisions.md, "ACLs (issue 25)"). A SASL
  connection's principal is `User:<name>` once the exchange completes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

from kio.schema.errors import ErrorCode as KafkaError

from jbod_agent.kafka import (
    client_quotas,
    delete_records_api,
    fetch_api,
    log_dirs_api,
    metadata_api,
    produce_api,
)
from jbod_agent.kafka.context import BrokerContext
from jbod_agent.kafka.listener import CloseConnectionError, Connection
from jbod_agent.replication import replica_wire
from jbod_kafka import protocol

#: The features ApiVersions lists once the broker serves transactions: supported ranges and
#: finalized levels (KIP-584), fixed (no UpdateFeatures).
SUPPORTED_FEATURES: Final[dict[str, tuple[int, int]]] = {"transaction.version": (0, 1)}
FINALIZED_FEATURES: Final[dict[str, int]] = {"transaction.version": 1}
FINALIZED_FEATURES_EPOCH: Final = 1
END_TXN_KEY: Final = 26

ApiHandler = Callable[[BrokerContext, Connection, protocol.Request], Awaitable[Any]]


class SaslExchange(Protocol):
    """One SASL exchange in progress: each client token gives the token to send back."""

    def step(self, token: bytes) -> bytes:
        """The server's next token; raises `AuthenticationFailedError` to end the exchange."""

    @property
    def principal(self) -> str | None:
        """The authenticated user once the exchange completed, else None."""


class AuthenticationFailedError(Exception):
    """A SASL exchange that failed; `str()` is the message the client gets."""


class Authenticator(Protocol):
    @property
    def mechanisms(self) -> tuple[str, ...]: ...

    def start(self, mechanism: str) -> SaslExchange: ...


class KafkaApis:
    """Dispatch of one broker's Kafka requests (the module's guarantees)."""

    def __init__(
        self, ctx: BrokerContext, authenticator: Authenticator, handlers: dict[int, ApiHandler]
    ) -> None:
        self.ctx = ctx
        self.authenticator = authenticator
        self.quotas: client_quotas.ClientQuotas | None = None  # set by `server.build_apis`
        self.handlers: dict[int, ApiHandler] = {
            protocol.API_VERSIONS_KEY: self.api_versions,
            protocol.SASL_HANDSHAKE_KEY: self.sasl_handshake,
            protocol.SASL_AUTHENTICATE_KEY: self.sasl_authenticate,
            0: produce_api.produce,
            1: fetch_api.fetch,
            2: fetch_api.list_offsets,
            21: delete_records_api.delete_records,
            23: fetch_api.offset_for_leader_epoch,
            34: log_dirs_api.alter_replica_log_dirs,
            35: log_dirs_api.describe_log_dirs,
            60: metadata_api.describe_cluster,
            **handlers,
        }

    def missing(self) -> list[str]:
        """APIs of `protocol.APIS` without a handler here: not advertised, their requests close
        the connection (the list shrinks as the broker learns them)."""
        return [api.name for key, api in protocol.APIS.items() if key not in self.handlers]

    def answered(self) -> list[protocol.Api]:
        """The APIs of `protocol.APIS` with a handler: what ApiVersions lists."""
        return [api for key, api in protocol.APIS.items() if key in self.handlers]

    def answers_transactions(self) -> bool:
        """Does this broker serve the transaction coordinator (EndTxn)?"""
        return END_TXN_KEY in self.handlers

    def api_versions_fallback(self, correlation_id: int) -> bytes:
        """ApiVersions v0 with UNSUPPORTED_VERSION listing ApiVersions' own versions only, as
        Kafka 4.3.1 answers (the client then asks again at a version listed)."""
        return protocol.api_versions_fallback(correlation_id, [protocol.APIS[protocol.API_VERSIONS_KEY]])

    async def handle(self, conn: Connection, request: protocol.Request) -> Any:
        handler = self.handlers.get(request.header.api_key)
        if handler is None:
            raise CloseConnectionError(f"no handler for API key {request.header.api_key}")
        if self.quotas is None or not self.ctx.state.image.client_quotas:
            return await handler(self.ctx, conn, request)
        consumer_fetch = request.header.api_key == client_quotas.FETCH_KEY and (
            replica_wire.replica_id_of(request.body, request.header.api_version) < 0
        )
        return await client_quotas.throttled(
            self.quotas,
            lambda capped: handler(self.ctx, conn, capped),
            conn,
            request,
            consumer_fetch=consumer_fetch,
        )

    async def api_versions(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        """The APIs this broker answers: `protocol.APIS` that have a handler (no other)."""
        response = protocol.response_type(request.header.api_key, request.header.api_version)
        return protocol.build(
            response,
            error_code=KafkaError.none,
            api_keys=[
                {"api_key": a.key, "min_version": a.advertised_min, "max_version": a.max_version}
                for a in self.answered()
            ],
            throttle_time=0,
            # Transaction version 1 only (docs/decisions.md, "Transactions: version 1 first");
            # v3 leaves out a supported range from 0, as Kafka (KIP-1022).
            supported_features=[
                {"name": name, "min_version": low, "max_version": high}
                for name, (low, high) in SUPPORTED_FEATURES.items()
                if request.header.api_version >= 4 or low > 0
            ]
            if self.answers_transactions()
            else [],
            finalized_features_epoch=FINALIZED_FEATURES_EPOCH if self.answers_transactions() else -1,
            finalized_features=[
                {"name": name, "min_version_level": level, "max_version_level": level}
                for name, level in FINALIZED_FEATURES.items()
            ]
            if self.answers_transactions()
            else [],
            zk_migration_ready=False,
        )

    # -- SASL ----------------------------------------------------------------------------------

    async def sasl_handshake(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        response = protocol.response_type(request.header.api_key, request.header.api_version)
        mechanisms = list(self.authenticator.mechanisms)
        if conn.authenticated or conn.sasl is not None:
            conn.closing = not conn.authenticated  # during an exchange: answered, then closed
            return protocol.build(response, error_code=KafkaError.illegal_sasl_state, mechanisms=[])
        mechanism = request.body.mechanism
        if mechanism not in mechanisms:
            return protocol.build(
                response, error_code=KafkaError.unsupported_sasl_mechanism, mechanisms=mechanisms
            )
        conn.sasl = self.authenticator.start(mechanism)
        conn.raw_sasl_tokens = request.header.api_version == 0
        return protocol.build(response, error_code=KafkaError.none, mechanisms=mechanisms)

    async def sasl_authenticate(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        response = protocol.response_type(request.header.api_key, request.header.api_version)
        exchange: SaslExchange | None = conn.sasl
        if conn.authenticated:
            return protocol.build(
                response,
                error_code=KafkaError.illegal_sasl_state,
                error_message="SaslAuthenticate after the connection authenticated",
                auth_bytes=b"",
                session_lifetime=0,
            )
        if exchange is None:
            raise CloseConnectionError("a SaslAuthenticate before any SaslHandshake")
        try:
            token = exchange.step(bytes(request.body.auth_bytes))
        except AuthenticationFailedError as exc:
            conn.closing = True
            return protocol.build(
                response,
                error_code=KafkaError.sasl_authentication_failed,
                error_message=str(exc),
                auth_bytes=b"",
                session_lifetime=0,
            )
        if exchange.principal is not None:
            conn.principal = exchange.principal
            conn.sasl = None
        return protocol.build(
            response, error_code=KafkaError.none, error_message=None, auth_bytes=token, session_lifetime=0
        )

    async def raw_token(self, conn: Connection, token: bytes) -> bytes | None:
        """A bare SASL token after SaslHandshake v0: the reply token, size-prefixed."""
        exchange: SaslExchange | None = conn.sasl
        if exchange is None:
            raise CloseConnectionError("a SASL token without an exchange in progress")
        try:
            reply = exchange.step(token)
        except AuthenticationFailedError as exc:
            raise CloseConnectionError(f"authentication failed: {exc}") from None
        if exchange.principal is not None:
            conn.principal = exchange.principal
            conn.sasl = None
            conn.raw_sasl_tokens = False
        return len(reply).to_bytes(4, "big") + reply
