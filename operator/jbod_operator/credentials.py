"""Kafka users at the controller: SCRAM credentials registered, ACLs set, users removed.

Kafka clients log in to the brokers' SASL listeners as `names.KAFKA_CLIENT_USER` (or a
JbodUser) with SCRAM-SHA-512; the password lives only in the Secret `<cluster>-kafka-client`
(created once by the operator, `builders.kafka_client_secret`) or the JbodUser's. The controller
keeps salted keys, never the password, so the operator registers the credential itself
(`POST /v1/scram-credentials`, the admin token).

Guarantees:
* `CredentialState.due` decides, without I/O, when to ask the controller: at once for a password
  this process has not registered (a new cluster, an operator restart, a Secret deleted and
  recreated with a new password), then every `recheck_s` (a controller whose metadata was lost).
* `ensure` registers the credential when the controller lacks it or holds another password's,
  and reports whether the controller has it; it never raises (an unreachable controller is
  "not yet", retried on the next poll) and never logs the password.
* `replace_acls` makes a user's ACLs exactly the wanted set (creating the missing first, then
  deleting the rest) and `remove_user` deletes every ACL and the credential of a user; both
  answer None when done or one line saying why not, and never raise.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jbod_client.controller import ClientError, ControllerClient
from jbod_core import quotas
from jbod_core.errors import ErrorCode
from jbod_core.messages import AlterScramCredentialsRequest, ScramCredentialDeletion, ScramCredentialUpsertion
from jbod_core.quota_messages import (
    AlterClientQuotasRequest,
    ClientQuotaAlteration,
    ClientQuotaOp,
    QuotaEntityComponent,
)
from jbod_core.scram import SCRAM_SHA_512, salted_password
from jbod_operator import names, users

log = logging.getLogger("jbod_operator")

ITERATIONS = 8192  # Kafka's clients take what the server says; 4096 is Kafka's minimum


def digest(password: str) -> str:
    """What the operator remembers of a password: enough to notice it changed."""
    return hashlib.sha256(password.encode()).hexdigest()


@dataclass
class CredentialState:
    """What this operator process knows of one cluster's client credential."""

    registered: str | None = None  # digest of the password last seen registered
    checked_at: float | None = None
    recheck_s: float = 60.0
    acls_at: float | None = None  # when the user's ACLs were last confirmed

    def acls_due(self, now: float) -> bool:
        return self.acls_at is None or now - self.acls_at >= self.recheck_s

    def due(self, password_digest: str, now: float) -> bool:
        if self.registered != password_digest or self.checked_at is None:
            return True
        return now - self.checked_at >= self.recheck_s

    def confirmed(self, password_digest: str, now: float) -> None:
        self.registered, self.checked_at = password_digest, now

    @property
    def ready(self) -> bool:
        return self.registered is not None


def ensure(  # noqa: PLR0913  where the controller is (URL, token, address map), then the password and what is known of it
    controller_url: str,
    token: str,
    map_url: Callable[[str], str],
    password: str,
    state: CredentialState,
    *,
    now: float,
    ca_file: Path | None = None,
    user: str = names.KAFKA_CLIENT_USER,
) -> bool:
    """Register the client user's credential when it is missing or this process has not
    registered this password yet; True once the controller has it."""
    password_digest = digest(password)
    if not state.due(password_digest, now):
        return True
    try:
        with ControllerClient(
            controller_url, token=token, timeout=5.0, map_url=map_url, ca_file=ca_file
        ) as client:
            known = state.registered == password_digest and _has_credential(client, user)
            if not known:
                salt = os.urandom(32)
                upsertion = ScramCredentialUpsertion(
                    name=user,
                    mechanism=SCRAM_SHA_512,
                    iterations=ITERATIONS,
                    salt=salt,
                    salted_password=salted_password(
                        password.encode(), salt, ITERATIONS, mechanism=SCRAM_SHA_512
                    ),
                )
                reply = client.alter_scram_credentials(AlterScramCredentialsRequest(upsertions=[upsertion]))
                refused = [r for r in reply.results if r.error_code != ErrorCode.NONE]
                if reply.error_code != ErrorCode.NONE or refused:
                    why = refused[0].error_message if refused else reply.error_message
                    log.warning("Registering Kafka user %s refused: %s", user, why)
                    return False
                log.info("Registered the SCRAM-SHA-512 credential of Kafka user %s", user)
    except ClientError as exc:
        log.debug("Kafka user %s not registered yet: %s", user, exc)
        return state.ready
    state.confirmed(password_digest, now)
    return True


def _has_credential(client: ControllerClient, user: str) -> bool:
    results = client.describe_scram_credentials([user])
    return any(
        r.error_code == ErrorCode.NONE and any(i.mechanism == SCRAM_SHA_512 for i in r.credential_infos)
        for r in results
    )


def _client(
    controller_url: str, token: str, map_url: Callable[[str], str], ca_file: Path | None
) -> ControllerClient:
    return ControllerClient(controller_url, token=token, timeout=5.0, map_url=map_url, ca_file=ca_file)


def replace_acls(  # noqa: PLR0913  where the controller is (URL, token, address map, CA), then whose ACLs and which
    controller_url: str,
    token: str,
    map_url: Callable[[str], str],
    ca_file: Path | None,
    user: str,
    wanted: list[users.Binding],
) -> str | None:
    """Make `wanted` the user's ACLs at the controller (docs/api.md, `/v1/acls`): creates the
    missing ones, then deletes the others. None when done, else why not (one line)."""
    try:
        with _client(controller_url, token, map_url, ca_file) as client:
            existing = [users.from_wire(acl) for acl in client.describe_acls(principal=users.principal(user))]
            create, delete = users.acl_changes(wanted, existing)
            if create:
                results = client.create_acls([users.to_wire(b) for b in create])
                refused = [r for r in results if r.get("errorCode")]
                if refused:
                    return f"creating ACLs of {user} refused: {refused[0].get('errorMessage')}"
            if delete:
                results = client.delete_acls([users.to_wire(b) for b in delete])
                refused = [r for r in results if r.get("errorCode")]
                if refused:
                    return f"deleting ACLs of {user} refused: {refused[0].get('errorMessage')}"
    except ClientError as exc:
        return f"ACLs of {user} not set yet: {exc}"
    return None


def replace_quotas(  # noqa: PLR0913  where the controller is (URL, token, address map, CA), then whose quotas and which
    controller_url: str,
    token: str,
    map_url: Callable[[str], str],
    ca_file: Path | None,
    user: str,
    wanted: dict[str, float],
) -> str | None:
    """Make `wanted` the client quotas of the user entity (docs/api.md, `/v1/client-quotas`),
    removing the keys no longer wanted. None when done, else why not (one line)."""
    try:
        with _client(controller_url, token, map_url, ca_file) as client:
            entity = [QuotaEntityComponent(entity_type=quotas.USER, entity_name=user)]
            existing: dict[str, float] = {}
            for entry in client.describe_client_quotas().entries:
                if [(c.entity_type, c.entity_name) for c in entry.entity] == [(quotas.USER, user)]:
                    existing = dict(entry.values)
            changes = users.quota_changes(wanted, existing)
            if not changes:
                return None
            ops = [ClientQuotaOp(key=key, value=value or 0.0, remove=value is None) for key, value in changes]
            reply = client.alter_client_quotas(
                AlterClientQuotasRequest(entries=[ClientQuotaAlteration(entity=entity, ops=ops)])
            )
            refused = [e for e in reply.entries if e.error_code]
            if refused:
                return f"setting the quotas of {user} refused: {refused[0].error_message}"
    except ClientError as exc:
        return f"quotas of {user} not set yet: {exc}"
    return None


def remove_user(
    controller_url: str, token: str, map_url: Callable[[str], str], ca_file: Path | None, user: str
) -> str | None:
    """Delete the user's ACLs and SCRAM credential; None when done (or nothing was there)."""
    try:
        with _client(controller_url, token, map_url, ca_file) as client:
            client.delete_acls([users.every_acl_of(user)])
            client.alter_client_quotas(
                AlterClientQuotasRequest(
                    entries=[
                        ClientQuotaAlteration(
                            entity=[QuotaEntityComponent(entity_type=quotas.USER, entity_name=user)],
                            ops=[ClientQuotaOp(key=key, remove=True) for key in users.QUOTA_KEYS.values()],
                        )
                    ]
                )
            )
            reply = client.alter_scram_credentials(
                AlterScramCredentialsRequest(
                    deletions=[ScramCredentialDeletion(name=user, mechanism=SCRAM_SHA_512)]
                )
            )
            refused = [
                r for r in reply.results if r.error_code not in (ErrorCode.NONE, ErrorCode.RESOURCE_NOT_FOUND)
            ]
            if refused:
                return f"deleting the credential of {user} refused: {refused[0].error_message}"
    except ClientError as exc:
        return f"user {user} not removed yet: {exc}"
    return None
