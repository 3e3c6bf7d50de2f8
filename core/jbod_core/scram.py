"""SCRAM credentials: Kafka's AlterUserScramCredentials and DescribeUserScramCredentials, decided
as KRaft's ScramControlManager decides them (an extension of the contract, docs/api.md).

Guarantees:
* Alter answers one result per user named, in the order users first appear (deletions first):
  a user named twice in one request (by name, whatever the mechanisms) is 92 DUPLICATE_RESOURCE
  and nothing of that user is written; otherwise, deletions: empty name 93, unknown mechanism 33,
  no such credential 91; upsertions: empty name 93, unknown mechanism 33, a reserved user
  (`admin`, `jbod-broker`) 93, iterations outside 4096..16384 93, an empty salt or a salted password that is not
  one digest long 93. Users refused do not stop the others (Kafka's per-user results).
* An upsertion is stored as RFC 5802 keys: storedKey = H(HMAC(saltedPassword, "Client Key")),
  serverKey = HMAC(saltedPassword, "Server Key"), H being the mechanism's hash (SHA-256 for
  mechanism 1, SHA-512 for 2). Neither the password nor the salted password reaches a record.
* Describe never returns keys: per user its mechanisms and iterations; a user without a
  credential is 91, a user named twice 92; no users named means every user with a credential
  (sorted by name).
* Pure: `hashlib` and `hmac` only; no I/O, no clock.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from typing import Final

from jbod_core import records
from jbod_core.errors import ErrorCode
from jbod_core.image import SCRAM_MECHANISMS, ClusterImage
from jbod_core.messages import (
    AlterScramCredentialResult,
    AlterScramCredentialsReply,
    AlterScramCredentialsRequest,
    DescribeScramCredentialsResult,
    ScramCredentialDeletion,
    ScramCredentialInfo,
    ScramCredentialUpsertion,
)

SCRAM_SHA_256: Final = 1
SCRAM_SHA_512: Final = 2
# The hash of each mechanism (Kafka's ScramMechanism types), by `hashlib` name.
HASHES: Final[Mapping[int, str]] = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
MIN_ITERATIONS: Final = 4096
MAX_ITERATIONS: Final = 16384
# The users whose passwords are tokens: they have no SCRAM credential, and get none.
RESERVED_USERS: Final[Mapping[str, str]] = {
    "admin": "the admin token",
    "jbod-broker": "the cluster token (the brokers replicate as this user)",
}

Problem = tuple[ErrorCode, str]
_DUPLICATE: Final[Problem] = (
    ErrorCode.DUPLICATE_RESOURCE,
    "A user credential cannot be altered twice in the same request",
)


def salted_password(password: bytes, salt: bytes, iterations: int, *, mechanism: int) -> bytes:
    """RFC 5802 Hi(password, salt, iterations): what a client sends in an upsertion."""
    return hashlib.pbkdf2_hmac(HASHES[mechanism], password, salt, iterations)


def scram_keys(salted: bytes, *, mechanism: int) -> tuple[bytes, bytes]:
    """RFC 5802 (storedKey, serverKey) of a salted password."""
    digest = HASHES[mechanism]
    client_key = hmac.digest(salted, b"Client Key", digest)
    return hashlib.new(digest, client_key).digest(), hmac.digest(salted, b"Server Key", digest)


def _name_and_mechanism_error(name: str, mechanism: int) -> Problem | None:
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in HASHES:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism {mechanism}"
    return None


def _deletion_error(image: ClusterImage, deletion: ScramCredentialDeletion) -> Problem | None:
    problem = _name_and_mechanism_error(deletion.name, deletion.mechanism)
    if problem is None and image.scram_credential(deletion.name, deletion.mechanism) is None:
        problem = ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
    return problem


def _upsertion_error(upsertion: ScramCredentialUpsertion) -> Problem | None:
    problem = _name_and_mechanism_error(upsertion.name, upsertion.mechanism)
    if problem is not None:
        return problem
    if upsertion.name in RESERVED_USERS:
        why = f"The user {upsertion.name!r} is reserved: its password is {RESERVED_USERS[upsertion.name]}"
    elif upsertion.iterations < MIN_ITERATIONS:
        why = f"Too few iterations: {upsertion.iterations} (at least {MIN_ITERATIONS})"
    elif upsertion.iterations > MAX_ITERATIONS:
        why = f"Too many iterations: {upsertion.iterations} (at most {MAX_ITERATIONS})"
    elif not upsertion.salt:
        why = "The salt must not be empty"
    elif len(upsertion.salted_password) != hashlib.new(HASHES[upsertion.mechanism]).digest_size:
        why = f"The salted password is not one {SCRAM_MECHANISMS[upsertion.mechanism]} digest long"
    else:
        return None
    return ErrorCode.UNACCEPTABLE_CREDENTIAL, why


def _credential_record(upsertion: ScramCredentialUpsertion) -> records.UserScramCredentialRecord:
    stored_key, server_key = scram_keys(upsertion.salted_password, mechanism=upsertion.mechanism)
    return records.UserScramCredentialRecord(
        name=upsertion.name,
        mechanism=upsertion.mechanism,
        salt=upsertion.salt,
        stored_key=stored_key,
        server_key=server_key,
        iterations=upsertion.iterations,
    )


def alter_credentials(
    image: ClusterImage, request: AlterScramCredentialsRequest
) -> tuple[list[records.Record], AlterScramCredentialsReply]:
    """AlterUserScramCredentials: the deletions and upsertions of the users not refused."""
    users: dict[str, None] = {}  # every user named, in order of first appearance
    refused: dict[str, Problem] = {}
    deletions: dict[str, ScramCredentialDeletion] = {}
    upsertions: dict[str, ScramCredentialUpsertion] = {}
    for deletion in request.deletions:
        users.setdefault(deletion.name)
        if deletion.name in refused:
            continue
        if deletions.pop(deletion.name, None) is not None:
            refused[deletion.name] = _DUPLICATE
        elif (problem := _deletion_error(image, deletion)) is not None:
            refused[deletion.name] = problem
        else:
            deletions[deletion.name] = deletion
    for upsertion in request.upsertions:
        users.setdefault(upsertion.name)
        if upsertion.name in refused:
            continue
        seen = deletions.pop(upsertion.name, None) or upsertions.pop(upsertion.name, None)
        if seen is not None:
            refused[upsertion.name] = _DUPLICATE
        elif (problem := _upsertion_error(upsertion)) is not None:
            refused[upsertion.name] = problem
        else:
            upsertions[upsertion.name] = upsertion
    produced: list[records.Record] = [
        records.RemoveUserScramCredentialRecord(name=d.name, mechanism=d.mechanism)
        for d in deletions.values()
    ]
    produced.extend(_credential_record(u) for u in upsertions.values())
    results = []
    for user in users:
        code, message = refused.get(user, (ErrorCode.NONE, None))
        results.append(AlterScramCredentialResult(user=user, error_code=code, error_message=message))
    return produced, AlterScramCredentialsReply(results=results)


def describe_credentials(
    image: ClusterImage, users: Sequence[str] | None = None
) -> list[DescribeScramCredentialsResult]:
    """DescribeUserScramCredentials of `users` (None or empty: every user with a credential)."""
    if not users:
        users = sorted({name for name, _mechanism in image.scram_credentials})
    counts: dict[str, int] = {}
    for user in users:
        counts[user] = counts.get(user, 0) + 1
    results = []
    for user, count in counts.items():
        infos = [
            ScramCredentialInfo(mechanism=mechanism, iterations=credential.iterations)
            for mechanism in sorted(HASHES)
            if (credential := image.scram_credential(user, mechanism)) is not None
        ]
        if count > 1:
            result = DescribeScramCredentialsResult(
                user=user,
                error_code=ErrorCode.DUPLICATE_RESOURCE,
                error_message="Cannot describe SCRAM credentials for the same user twice in a single request",
            )
        elif not infos:
            result = DescribeScramCredentialsResult(
                user=user,
                error_code=ErrorCode.RESOURCE_NOT_FOUND,
                error_message="Attempt to describe a user credential that does not exist",
            )
        else:
            result = DescribeScramCredentialsResult(user=user, credential_infos=infos)
        results.append(result)
    return results
