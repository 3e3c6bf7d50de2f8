"""SCRAM credentials (`jbod_core.scram`): AlterUserScramCredentials as KRaft decides it (exact
records, then replay), the keys a broker checks a login with (RFC 5802 / RFC 7677), and
DescribeUserScramCredentials."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Sequence
from typing import Any

import pytest

from jbod_core import records, scram
from jbod_core.errors import ErrorCode
from jbod_core.image import SCRAM_MECHANISMS, ClusterImage, ReplayError, ScramCredential
from jbod_core.messages import AlterScramCredentialsReply, AlterScramCredentialsRequest
from tests.core.support import Cluster

SALT = b"pepper-salt"


def _salted(password: str, mechanism: int = scram.SCRAM_SHA_512, iterations: int = 4096) -> bytes:
    return scram.salted_password(password.encode(), SALT, iterations, mechanism=mechanism)


def _upsert(
    name: str, password: str = "secret", *, mechanism: int = scram.SCRAM_SHA_512, iterations: int = 4096
) -> dict[str, Any]:
    salted = _salted(password, mechanism, iterations) if mechanism in scram.HASHES else b"x" * 64
    return {
        "name": name,
        "mechanism": mechanism,
        "iterations": iterations,
        "salt": base64.b64encode(SALT).decode(),
        "saltedPassword": base64.b64encode(salted).decode(),
    }


def _delete(name: str, mechanism: int = scram.SCRAM_SHA_512) -> dict[str, Any]:
    return {"name": name, "mechanism": mechanism}


def _alter(
    cluster: Cluster, *, deletions: Sequence[dict[str, Any]] = (), upsertions: Sequence[dict[str, Any]] = ()
) -> tuple[list[records.Record], AlterScramCredentialsReply]:
    request = AlterScramCredentialsRequest.model_validate(
        {"deletions": list(deletions), "upsertions": list(upsertions)}
    )
    return scram.alter_credentials(cluster.image, request)


def _results(reply: AlterScramCredentialsReply) -> list[tuple[str, int]]:
    return [(r.user, r.error_code) for r in reply.results]


def _credential(name: str, password: str = "secret", mechanism: int = scram.SCRAM_SHA_512) -> records.Record:
    digest = scram.HASHES[mechanism]
    salted = _salted(password, mechanism)
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    return records.UserScramCredentialRecord(
        name=name,
        mechanism=mechanism,
        salt=SALT,
        stored_key=hashlib.new(digest, client_key).digest(),
        server_key=hmac.new(salted, b"Server Key", digest).digest(),
        iterations=4096,
    )


def test_the_mechanism_tables_agree() -> None:
    assert set(scram.HASHES) == set(SCRAM_MECHANISMS) == {1, 2}


def test_upsertions_store_rfc5802_keys_never_the_password() -> None:
    cluster = Cluster()
    produced, reply = _alter(
        cluster, upsertions=[_upsert("alice"), _upsert("bob", "hunter2", mechanism=scram.SCRAM_SHA_256)]
    )
    assert produced == [_credential("alice"), _credential("bob", "hunter2", scram.SCRAM_SHA_256)]
    assert _results(reply) == [("alice", 0), ("bob", 0)]
    data = repr([r.to_data() for r in produced])
    for secret in (_salted("secret"), _salted("hunter2", scram.SCRAM_SHA_256)):
        assert base64.b64encode(secret).decode() not in data
    cluster.apply(produced)
    alice = cluster.image.scram_credential("alice", scram.SCRAM_SHA_512)
    assert alice == ScramCredential(
        salt=SALT,
        stored_key=_credential("alice").stored_key,  # type: ignore[union-attr]
        server_key=_credential("alice").server_key,  # type: ignore[union-attr]
        iterations=4096,
    )
    assert cluster.image.scram_credential("alice", scram.SCRAM_SHA_256) is None
    assert cluster.replayed_from_scratch().canonical() == cluster.image.canonical()


def test_rfc7677_exchange_verifies_against_the_stored_keys() -> None:
    """RFC 7677's SCRAM-SHA-256 example: the server-side proof check and signature a broker does
    with the stored credential accept the RFC's client proof and give the RFC's verifier."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    salted = scram.salted_password(b"pencil", salt, 4096, mechanism=scram.SCRAM_SHA_256)
    stored_key, server_key = scram.scram_keys(salted, mechanism=scram.SCRAM_SHA_256)
    auth_message = (
        b"n=user,r=rOprNGfwEbeRWgbNEkqO,"
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,"
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    )
    proof = base64.b64decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    signature = hmac.new(stored_key, auth_message, "sha256").digest()
    client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
    assert hashlib.sha256(client_key).digest() == stored_key
    verifier = hmac.new(server_key, auth_message, "sha256").digest()
    assert base64.b64encode(verifier) == b"6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_an_upsertion_replaces_and_a_deletion_removes() -> None:
    cluster = Cluster()
    cluster.apply(_alter(cluster, upsertions=[_upsert("alice"), _upsert("bob")])[0])
    produced, reply = _alter(cluster, deletions=[_delete("bob")], upsertions=[_upsert("alice", "new")])
    assert produced == [
        records.RemoveUserScramCredentialRecord(name="bob", mechanism=scram.SCRAM_SHA_512),
        _credential("alice", "new"),
    ]
    assert _results(reply) == [("bob", 0), ("alice", 0)]
    cluster.apply(produced)
    assert set(cluster.image.scram_credentials) == {("alice", scram.SCRAM_SHA_512)}
    assert cluster.image.scram_credential("alice", 2).stored_key == _credential("alice", "new").stored_key  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("upsertion", "code"),
    [
        (_upsert(""), ErrorCode.UNACCEPTABLE_CREDENTIAL),
        (_upsert("carol", mechanism=0), ErrorCode.UNSUPPORTED_SASL_MECHANISM),
        (_upsert("carol", mechanism=3), ErrorCode.UNSUPPORTED_SASL_MECHANISM),
        (_upsert("admin"), ErrorCode.UNACCEPTABLE_CREDENTIAL),
        (_upsert("jbod-broker"), ErrorCode.UNACCEPTABLE_CREDENTIAL),
        (_upsert("carol", iterations=4095), ErrorCode.UNACCEPTABLE_CREDENTIAL),
        (_upsert("carol", iterations=16385), ErrorCode.UNACCEPTABLE_CREDENTIAL),
        ({**_upsert("carol"), "salt": ""}, ErrorCode.UNACCEPTABLE_CREDENTIAL),
        ({**_upsert("carol"), "saltedPassword": "c2hvcnQ="}, ErrorCode.UNACCEPTABLE_CREDENTIAL),
    ],
)
def test_a_refused_upsertion_writes_nothing_for_that_user_only(upsertion: dict[str, Any], code: int) -> None:
    cluster = Cluster()
    produced, reply = _alter(cluster, upsertions=[upsertion, _upsert("dave")])
    assert produced == [_credential("dave")]
    assert _results(reply) == [(upsertion["name"], code), ("dave", 0)]
    assert reply.results[0].error_message


@pytest.mark.parametrize("iterations", [4096, 16384])
def test_the_iteration_bounds_are_inclusive(iterations: int) -> None:
    produced, reply = _alter(Cluster(), upsertions=[_upsert("carol", iterations=iterations)])
    assert _results(reply) == [("carol", 0)]
    assert [r.iterations for r in produced] == [iterations]  # type: ignore[union-attr]


def test_deleting_a_missing_credential_is_91_and_an_unknown_mechanism_33() -> None:
    cluster = Cluster()
    cluster.apply(_alter(cluster, upsertions=[_upsert("alice")])[0])
    produced, reply = _alter(
        cluster,
        deletions=[
            _delete("alice", scram.SCRAM_SHA_256),  # alice has only SCRAM-SHA-512
            _delete("nobody"),
            _delete("x", 9),
            _delete(""),
            _delete("admin"),
        ],
    )
    assert produced == []
    assert _results(reply) == [
        ("alice", ErrorCode.RESOURCE_NOT_FOUND),
        ("nobody", ErrorCode.RESOURCE_NOT_FOUND),
        ("x", ErrorCode.UNSUPPORTED_SASL_MECHANISM),
        ("", ErrorCode.UNACCEPTABLE_CREDENTIAL),
        ("admin", ErrorCode.RESOURCE_NOT_FOUND),
    ]


def test_a_user_twice_in_one_request_is_92_and_nothing_of_it_is_written() -> None:
    cluster = Cluster()
    cluster.apply(_alter(cluster, upsertions=[_upsert("alice"), _upsert("bob")])[0])
    produced, reply = _alter(
        cluster,
        deletions=[_delete("alice"), _delete("alice"), _delete("bob")],
        upsertions=[
            _upsert("bob", mechanism=scram.SCRAM_SHA_256),  # another mechanism: still the same user
            _upsert("carol"),
            _upsert("carol"),
            _upsert("dave"),
        ],
    )
    assert produced == [_credential("dave")]
    assert _results(reply) == [
        ("alice", ErrorCode.DUPLICATE_RESOURCE),
        ("bob", ErrorCode.DUPLICATE_RESOURCE),
        ("carol", ErrorCode.DUPLICATE_RESOURCE),
        ("dave", 0),
    ]


def test_a_user_refused_first_is_not_reported_twice() -> None:
    produced, reply = _alter(Cluster(), deletions=[_delete("eve")], upsertions=[_upsert("eve")])
    assert produced == []
    assert _results(reply) == [("eve", ErrorCode.RESOURCE_NOT_FOUND)]


def test_describe_gives_mechanisms_and_iterations_never_keys() -> None:
    cluster = Cluster()
    cluster.apply(
        _alter(
            cluster,
            upsertions=[_upsert("bob", iterations=8192), _upsert("alice")],
        )[0]
    )
    cluster.apply(_alter(cluster, upsertions=[_upsert("alice", mechanism=scram.SCRAM_SHA_256)])[0])
    described = [r.to_wire() for r in scram.describe_credentials(cluster.image)]
    assert described == [
        {
            "user": "alice",
            "errorCode": 0,
            "errorMessage": None,
            "credentialInfos": [{"mechanism": 1, "iterations": 4096}, {"mechanism": 2, "iterations": 4096}],
        },
        {
            "user": "bob",
            "errorCode": 0,
            "errorMessage": None,
            "credentialInfos": [{"mechanism": 2, "iterations": 8192}],
        },
    ]
    named = scram.describe_credentials(cluster.image, ["bob", "zed", "alice", "zed"])
    assert [(r.user, r.error_code, len(r.credential_infos)) for r in named] == [
        ("bob", 0, 1),
        ("zed", ErrorCode.DUPLICATE_RESOURCE, 0),
        ("alice", 0, 2),
    ]
    assert scram.describe_credentials(cluster.image, ["nobody"])[0].error_code == ErrorCode.RESOURCE_NOT_FOUND
    assert scram.describe_credentials(ClusterImage()) == []


def test_replay_refuses_removing_a_missing_credential_and_unknown_mechanisms() -> None:
    image = ClusterImage()
    with pytest.raises(ReplayError, match="no such credential"):
        image.replay(records.RemoveUserScramCredentialRecord(name="a", mechanism=2), 0)
    bad = records.UserScramCredentialRecord(
        name="a", mechanism=3, salt=b"s", stored_key=b"k", server_key=b"k", iterations=4096
    )
    with pytest.raises(ReplayError, match="mechanism 3"):
        image.replay(bad, 0)
    assert image.scram_credentials == {}


def test_a_snapshot_carries_every_credential() -> None:
    cluster = Cluster()
    cluster.apply(_alter(cluster, upsertions=[_upsert("bob"), _upsert("alice")])[0])
    cluster.apply(_alter(cluster, upsertions=[_upsert("alice", mechanism=scram.SCRAM_SHA_256)])[0])
    snapshot = cluster.image.to_records()
    assert snapshot == [
        _credential("alice", mechanism=scram.SCRAM_SHA_256),
        _credential("alice"),
        _credential("bob"),
    ]
    assert cluster.image.record_count() == 3
    restored = ClusterImage()
    for record in snapshot:
        restored.replay(record, 5)
    assert restored.canonical() == cluster.image.canonical()
