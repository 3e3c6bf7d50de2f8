"""The broker's SASL servers against independent clients: RFC 7677's test vector, transcripts of
Kafka 4.3.1's own ScramSaslClient/ScramSaslServer, scramp's client; failures with Kafka's codes
and messages; garbage never raises anything but SaslError."""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac

import pytest
import scramp
from hypothesis import given, settings
from hypothesis import strategies as st

from jbod_core import scram
from jbod_core.image import ScramCredential
from jbod_kafka import sasl
from jbod_kafka.sasl import SaslError, SaslErrorCode, ScramMechanism

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
SECRET = b"per-process-secret-0123456789"
NONCE = "serverNonce0123456789abcdef"
SALT = bytes(range(32))
GENERIC = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"
AUTHZID = "Authentication failed: Client requested an authorization id that is different from username"


@functools.cache
def credential(mechanism: ScramMechanism, password: str) -> ScramCredential:
    keys = sasl.scram_credential(password, salt=SALT, iterations=4096, mechanism=mechanism)
    return ScramCredential(SALT, *keys, 4096)


def server(
    mechanism: ScramMechanism = SHA512, passwords: dict[str, str] | None = None, **kwargs: object
) -> sasl.ScramServer:
    """A server for `passwords` (alice's by default) with the test's nonce and secret."""
    store = {
        u: credential(mechanism, p)
        for u, p in ({"alice": "wonderland"} if passwords is None else passwords).items()
    }
    lookup = store.get
    options: dict[str, object] = {"server_nonce": NONCE, "decoy_secret": SECRET} | kwargs
    return sasl.ScramServer(mechanism, lookup, **options)  # type: ignore[arg-type]


def fails(
    step: object, token: bytes, code: SaslErrorCode = SaslErrorCode.SASL_AUTHENTICATION_FAILED
) -> SaslError:
    assert isinstance(step, sasl.ScramServer | sasl.PlainServer)
    with pytest.raises(SaslError) as caught:
        step.respond(token)
    assert caught.value.code == code
    return caught.value


def scramp_exchange(
    srv: sasl.ScramServer, mechanism: ScramMechanism, user: str, password: str
) -> tuple[scramp.ScramClient, bytes]:
    """scramp's client up to its client-final (the server-first checked by scramp)."""
    client = scramp.ScramClient([mechanism.value], user, password)
    first = srv.respond(client.get_client_first().encode())
    assert first.principal is None
    client.set_server_first(first.token.decode())
    return client, client.get_client_final().encode()


# --- independent clients -------------------------------------------------------------------------


def test_rfc_7677_scram_sha_256_test_vector() -> None:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    keys = sasl.scram_credential("pencil", salt=salt, iterations=4096, mechanism=SHA256)
    srv = sasl.ScramServer(
        SHA256,
        {"user": ScramCredential(salt, *keys, 4096)}.get,
        server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
        decoy_secret=SECRET,
    )
    first = srv.respond(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert (
        first.token
        == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = srv.respond(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == sasl.Reply(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=", "user")
    assert srv.principal == "user"


# Transcripts of Kafka 4.3.1's ScramSaslClient against its ScramSaslServer (kafka-clients jar), with
# the credential from ScramFormatter.generateCredential. "ohm-\u2126" would be "ohm-\u03a9" after
# SASLprep: Kafka uses the UTF-8 bytes as they are, and so must the broker.
KAFKA_TRANSCRIPTS = [
    {
        "mechanism": SHA512,
        "user": "alice",
        "password": "wonderland-\u03a9",
        "salt": "bHR5cXd4ZHZnaGRvZjh5MHh5b2dubmF3Ng==",
        "iterations": 4096,
        "stored_key": "wweLLYQXmwDvr5k5Oo/pwpF6vTGzBwKFw0cFIZrrdJpp5y2JovWquG3RwsZfILBxNVMmP9n0WK4SscF+go6uyQ==",
        "server_key": "ExOUdofkab3lGEX5qrJQpwOH7ZliHczHyHdqkVim6DpVHfkR7iiEhZiyEgJIlR3VV6T/epRg1cNR4SBoaHediQ==",
        "client_first": "n,,n=alice,r=1k48wtjmrpqwyrt9g3sliueh7o",
        "server_first": "r=1k48wtjmrpqwyrt9g3sliueh7o3qrplxizqycocik7qxwl90lzm,s=bHR5cXd4ZHZnaGRvZjh5MHh5b2dubmF3Ng==,i=4096",
        "client_final": "c=biws,r=1k48wtjmrpqwyrt9g3sliueh7o3qrplxizqycocik7qxwl90lzm,p=dymTfxlgzfHUpSrsdro+TZ02i0mDRKNzOAWfUJf4Bhm0MdvV/9h3S3GBPaXMpcxmzJwAjB8H6p0rbjYXWoUQFQ==",
        "server_final": "v=uAjUAbDYe0px4OczWIkkWf0wUHrX6Y1SLonw4si+4ywYeoTHL3dE/N2gPB1kSC6j+ZpL6rQfRcQs2JwLW8CXtQ==",
    },
    {
        "mechanism": SHA512,
        "user": "carol",
        "password": "ohm-\u2126",
        "salt": "dW0xb3VyaTM4Z3Fld2hhenZlc2l3N3YwNg==",
        "iterations": 4096,
        "stored_key": "Hcv+ijHV7wNOwo89P9uJSe74LZYriILpf7jSqDkY1PNCxIxVgu/D9jyEE9oexrpGQLNtfFCBBQ7FTHlZVChWtQ==",
        "server_key": "NVsO53UYp8vayh5/0i6rESGiCzTvA/PP23nnOxq4SPdVKZ4i/DiGWexnsHibqr31Eap67vGvQ/aGQSUGwsXgqA==",
        "client_first": "n,,n=carol,r=9fsezrr06d89cxeo94psg1iyr",
        "server_first": "r=9fsezrr06d89cxeo94psg1iyrsxze856cwdlffx2hh21pszfb7,s=dW0xb3VyaTM4Z3Fld2hhenZlc2l3N3YwNg==,i=4096",
        "client_final": "c=biws,r=9fsezrr06d89cxeo94psg1iyrsxze856cwdlffx2hh21pszfb7,p=iBegaNnjkavtf8UBg9LrfWHsnUDWSP4F9td2DRJOzTPfK+eRQwUoPMb8SLauwprtZPL3PCDwLEMram/gm3jhPg==",
        "server_final": "v=mPKgS4q/v/Cua1RwCvBqCIzvM3AjQk7/TgvRUC+OkEvLEFQHpei96NXW82a+xiYQvyQK82H3BtRokzXiCDkP2Q==",
    },
    {
        "mechanism": SHA512,
        "user": "dave",
        "password": "x",
        "salt": "MWNhNGNqZ29jOGRpOGI3YXRvaGg5MmwzemE=",
        "iterations": 4096,
        "stored_key": "mYDePHts1kM8w6kagt+LXPZtbBePlPv2jQBwFsw1pg3wDhul4IHBP6WpPFMiZOoaqSaekgEjOhv/iPL8yc9gtQ==",
        "server_key": "UGYUlxs72dZukch5Jz6TZ8uiTi63p2ZIXfWlUzbsa8RMSSEtqvlBZmAIZoBY8lNmZMxNk+Z/uE6ZuMSoRMqkUg==",
        # A client extension (Kafka's ScramExtensionsCallback): part of the signed message, ignored.
        "client_first": "n,,n=dave,r=19hcqbnvx7280n1adrrni0ms8c,traceid=abc123",
        "server_first": "r=19hcqbnvx7280n1adrrni0ms8c2km8gay9c3t7ov7kcv1pwohon,s=MWNhNGNqZ29jOGRpOGI3YXRvaGg5MmwzemE=,i=4096",
        "client_final": "c=biws,r=19hcqbnvx7280n1adrrni0ms8c2km8gay9c3t7ov7kcv1pwohon,p=7QcATEkdczR0WujsIFBrk2fbDIthId6DTRue5AqrpkrQ/HHKsYPJdkd2EazrLOR3S5S1ENWyI3PUWLzi2gbOJw==",
        "server_final": "v=4Xer79o4n7FYaZuPAi9WjS8cWxj1+wmsVU7hCEIKePg3rOetlYbdsQqGPqYq5nKwgcF1T0W+eTfG604kwTUM4g==",
    },
    {
        "mechanism": SHA256,
        "user": "bob,=x",
        "password": "hunter2",
        "salt": "YmZtd3k5MG4yZmxmcmdqZ2FseWd6MTRjbQ==",
        "iterations": 8192,
        "stored_key": "U40Th3BGCr0kCplkOBWAqqtz4Lr/q+bNgjqNXlhT2ZA=",
        "server_key": "JDrQ3OjE92sxD2xWp3FRLYHk7ZQ8wbncp5yn0535ZDE=",
        "client_first": "n,,n=bob=2C=3Dx,r=ivriebt5vxmr9ig214xr28ouk",
        "server_first": "r=ivriebt5vxmr9ig214xr28ouk173c9g4si6twbzqmdg8xf1oc42,s=YmZtd3k5MG4yZmxmcmdqZ2FseWd6MTRjbQ==,i=8192",
        "client_final": "c=biws,r=ivriebt5vxmr9ig214xr28ouk173c9g4si6twbzqmdg8xf1oc42,p=TjVDY2n2AqGNi9P75t4+PtaPRUse2mEU6xk+BvkJWak=",
        "server_final": "v=kGIZZb5NFvSOMy5NoqcEfk3mLzEfo8jmBQAZFzr/Ggo=",
    },
]


@pytest.mark.parametrize("t", KAFKA_TRANSCRIPTS, ids=lambda t: f"{t['mechanism'].value}-{t['user']}")
def test_kafkas_own_scram_exchange_is_reproduced_byte_for_byte(t: dict[str, object]) -> None:
    mechanism, user, password = t["mechanism"], t["user"], t["password"]
    assert isinstance(mechanism, ScramMechanism)
    assert isinstance(user, str)
    assert isinstance(password, str)
    salt, iterations = base64.b64decode(str(t["salt"])), t["iterations"]
    assert isinstance(iterations, int)
    keys = sasl.scram_credential(password, salt=salt, iterations=iterations, mechanism=mechanism)
    assert keys == (base64.b64decode(str(t["stored_key"])), base64.b64decode(str(t["server_key"])))
    client_nonce = str(t["client_first"]).split(",r=")[1].split(",")[0]
    server_nonce = str(t["server_first"])[2:].split(",")[0].removeprefix(client_nonce)
    srv = sasl.ScramServer(
        mechanism,
        {user: ScramCredential(salt, *keys, iterations)}.get,
        server_nonce=server_nonce,
        decoy_secret=SECRET,
    )
    assert srv.respond(str(t["client_first"]).encode()) == sasl.Reply(str(t["server_first"]).encode())
    assert srv.respond(str(t["client_final"]).encode()) == sasl.Reply(str(t["server_final"]).encode(), user)


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
@pytest.mark.parametrize("user", ["alice", "o,dd=name", "\u00e9l\u00e8ve"])
def test_a_full_exchange_with_scramps_client(mechanism: ScramMechanism, user: str) -> None:
    srv = server(mechanism, {user: "correct horse"})
    client, final = scramp_exchange(srv, mechanism, user, "correct horse")
    reply = srv.respond(final)
    assert reply.principal == user == srv.principal
    client.set_server_final(reply.token.decode())  # scramp verifies the server signature


# --- SCRAM failures ------------------------------------------------------------------------------


def test_a_wrong_password_fails_at_the_client_final() -> None:
    srv = server()
    _, final = scramp_exchange(srv, SHA512, "alice", "looking-glass")
    failure = fails(srv, final)
    assert failure.message == GENERIC.format("SCRAM-SHA-512")
    assert "alice" in failure.reason
    assert srv.principal is None


def test_an_unknown_user_fails_like_a_wrong_password_and_only_at_the_end() -> None:
    known, unknown = server(), server()
    known_first = known.respond(b"n,,n=alice,r=abc").token.decode()
    unknown_first = unknown.respond(b"n,,n=mallory,r=abc").token.decode()
    shape = [(part[:2], len(part)) for part in known_first.split(",")]
    assert [(part[:2], len(part)) for part in unknown_first.split(",")] == shape
    assert unknown_first.endswith(",i=4096")
    # scramp's client completes its side: the answer looks like any other.
    client = scramp.ScramClient([SHA512.value], "mallory", "anything")
    srv = server()
    first = srv.respond(client.get_client_first().encode())
    client.set_server_first(first.token.decode())
    failure = fails(srv, client.get_client_final().encode())
    assert failure.message == GENERIC.format("SCRAM-SHA-512")
    assert "unknown user 'mallory'" in failure.reason


def test_an_unknown_users_salt_is_stable_per_name_and_secret() -> None:
    def salt(user: str, secret: bytes = SECRET) -> str:
        srv = server(decoy_secret=secret)
        return srv.respond(f"n,,n={user},r=abc".encode()).token.decode().split(",s=")[1].split(",")[0]

    assert salt("mallory") == salt("mallory")
    assert salt("mallory") != salt("trudy")
    assert salt("mallory") != salt("mallory", b"another-secret-0123456789")
    assert len(base64.b64decode(salt("mallory"))) == sasl.DECOY_SALT_SIZE == len(SALT)


def test_a_decoy_takes_the_configured_iterations() -> None:
    srv = server(decoy_iterations=8192)
    assert srv.respond(b"n,,n=nobody,r=abc").token.endswith(b",i=8192")


def test_an_unusable_stored_credential_counts_as_unknown() -> None:
    """A credential below Kafka's 4096 iterations (or of the wrong size) is never used."""
    weak = 1000
    salted = scram.salted_password(b"pw", SALT, weak, mechanism=SHA256.type)
    credential = ScramCredential(SALT, *scram.scram_keys(salted, mechanism=SHA256.type), weak)
    for found in [credential, credential._replace(stored_key=b"short", iterations=4096)]:
        srv = sasl.ScramServer(SHA256, {"eve": found}.get, server_nonce=NONCE, decoy_secret=SECRET)
        client = scramp.ScramClient([SHA256.value], "eve", "pw")
        first = srv.respond(client.get_client_first().encode())
        assert first.token.endswith(b",i=4096")
        client.set_server_first(first.token.decode())
        assert "unknown user" in fails(srv, client.get_client_final().encode()).reason


def test_an_authzid_must_be_the_user() -> None:
    srv = server()
    client = scramp.ScramClient([SHA512.value], "alice", "wonderland")
    bare = client.get_client_first().removeprefix("n,,")
    first = srv.respond(f"n,a=alice,{bare}".encode())
    client.set_server_first(first.token.decode())
    # The channel binding repeats the GS2 header, authzid included.
    final = client.get_client_final()
    assert final.startswith("c=biws,")
    assert "GS2 header" in fails(srv, final.encode()).reason
    for user in ["alice", "mallory"]:  # the same answer for known and unknown users
        failure = fails(server(), f"n,a=bob,n={user},r=abc".encode())
        assert failure.message == AUTHZID
    # Escapes are undone on both sides before comparing: no failure, a server-first.
    assert server(SHA512, {"a,b": "pw"}).respond(b"n,a=a=2Cb,n=a=2Cb,r=abc").token.startswith(b"r=abc")


def test_an_authzid_equal_to_the_user_completes() -> None:
    mechanism = SHA256
    srv = server(mechanism, {"alice": "wonderland"})
    header = "n,a=alice,"
    first = srv.respond(f"{header}n=alice,r=clientnonce".encode()).token.decode()
    nonce = first.split(",")[0][2:]
    salted = scram.salted_password(b"wonderland", SALT, 4096, mechanism=mechanism.type)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    without_proof = f"c={base64.b64encode(header.encode()).decode()},r={nonce}"
    auth = f"n=alice,r=clientnonce,{first},{without_proof}".encode()
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth, "sha256").digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True))).decode()
    reply = srv.respond(f"{without_proof},p={proof}".encode())
    assert reply.principal == "alice"


@pytest.mark.parametrize(
    "client_first",
    [
        b"y,,n=alice,r=abc",  # the client thinks we lack binding: we do, but only n is Kafka's
        b"p=tls-server-end-point,,n=alice,r=abc",
        b"n,,m=ext,n=alice,r=abc",  # the reserved mandatory extension
        b"n,,n=alice,r=abc,tokenauth=true",  # a delegation token
        b"n,,n=alice,r=abc,tokenauth=TRUE",
        b"n,,n=al=ice,r=abc",  # a bad escape
        b"n,,n=,r=abc",
        b"n,,n=alice,r=",
        b"n,,n=alice,r=a,bc",
        b"n,,n=alice",
        b"n,,r=abc,n=alice",
        b"n,,n=alice,r=ab\x7fc",
        b"n,,n=al\x00ice,r=abc",
        b"n,,n=\xff,r=abc",
        b"",
    ],
)
def test_a_malformed_client_first_fails_cleanly(client_first: bytes) -> None:
    srv = server()
    assert fails(srv, client_first).message == GENERIC.format("SCRAM-SHA-512")
    fails(srv, b"n,,n=alice,r=abc", SaslErrorCode.ILLEGAL_SASL_STATE)


def test_other_extensions_are_ignored() -> None:
    assert server().respond(b"n,,n=alice,r=abc,traceid=1,x=y").token.startswith(b"r=abc" + NONCE.encode())


@functools.cache
def alices_messages() -> tuple[bytes, str]:
    """scramp's client-first and (right) client-final for alice against `server()`, which is
    deterministic given the client-first."""
    client = scramp.ScramClient([SHA512.value], "alice", "wonderland")
    first = client.get_client_first().encode()
    client.set_server_first(server().respond(first).token.decode())
    return first, client.get_client_final()


def _valid_final() -> tuple[sasl.ScramServer, str]:
    """A server that answered alice's client-first, and her right client-final."""
    first, final = alices_messages()
    srv = server()
    srv.respond(first)
    return srv, final


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda f: f.replace("c=biws", "c=eSws"), "GS2 header"),  # y,,
        (lambda f: f.replace("c=biws", "c=biws="), "GS2 header"),  # not canonical base64
        (lambda f: f.replace(NONCE, NONCE[:-1] + "X"), "nonce"),
        (lambda f: f.replace(",r=", ",r=X"), "nonce"),
        (lambda f: f.rsplit(",p=", 1)[0] + ",p=" + base64.b64encode(b"\0" * 64).decode(), "credentials"),
        (lambda f: f.rsplit(",p=", 1)[0] + ",p=" + base64.b64encode(b"\0" * 32).decode(), "proof"),
        (lambda f: f.rsplit(",p=", 1)[0] + ",p=abc", "proof"),
        (lambda f: f.rsplit(",p=", 1)[0], "format"),
        (lambda f: f + ",x=y", "format"),
        (lambda f: f.replace("c=biws,", ""), "format"),
    ],
)
def test_a_malformed_or_wrong_client_final_fails_cleanly(change: object, reason: str) -> None:
    srv, final = _valid_final()
    assert callable(change)
    failure = fails(srv, change(final).encode())
    assert failure.message == GENERIC.format("SCRAM-SHA-512")
    assert reason in failure.reason
    fails(srv, final.encode(), SaslErrorCode.ILLEGAL_SASL_STATE)  # a failed exchange stays failed


def test_a_token_after_completion_is_an_illegal_state() -> None:
    srv, final = _valid_final()
    srv.respond(final.encode())
    failure = fails(srv, final.encode(), SaslErrorCode.ILLEGAL_SASL_STATE)
    assert failure.code == 34
    assert failure.message == "SaslAuthenticate request received after successful authentication"
    assert srv.principal == "alice"


@settings(max_examples=300, deadline=None)
@given(token=st.binary(max_size=120) | st.text(max_size=120).map(str.encode))
def test_garbage_client_first_raises_only_sasl_errors(token: bytes) -> None:
    srv = server()
    try:
        reply = srv.respond(token)
    except SaslError as error:
        assert error.code == SaslErrorCode.SASL_AUTHENTICATION_FAILED
        return
    assert reply.principal is None


@settings(max_examples=300, deadline=None)
@given(
    token=st.binary(max_size=200)
    | st.builds(lambda a, b: f"c={a},r={b},p={a}".encode(), st.text(max_size=20), st.text(max_size=60)),
    flip=st.integers(0, 10_000),
)
def test_garbage_or_damaged_client_final_raises_only_sasl_errors(token: bytes, flip: int) -> None:
    srv, final = _valid_final()
    damaged = bytearray(final.encode())
    damaged[flip % len(damaged)] ^= 1 + flip % 255
    for candidate in (token, bytes(damaged)):
        srv, _ = _valid_final()
        with pytest.raises(SaslError) as caught:
            srv.respond(candidate)
        assert caught.value.code == SaslErrorCode.SASL_AUTHENTICATION_FAILED


# --- credentials and construction -----------------------------------------------------------------


def test_scram_credential_takes_kafkas_iteration_range_and_a_salt() -> None:
    for iterations in (4095, 16385):
        with pytest.raises(ValueError, match="iterations"):
            sasl.scram_credential("pw", salt=SALT, iterations=iterations, mechanism=SHA512)
    with pytest.raises(ValueError, match="salt"):
        sasl.scram_credential("pw", salt=b"", iterations=4096, mechanism=SHA512)
    stored, server_key = sasl.scram_credential("pw", salt=SALT, iterations=16384, mechanism=SHA512)
    assert len(stored) == len(server_key) == 64
    assert scramp.ScramMechanism(SHA512.value).make_auth_info("pw", 16384, SALT)[1:3] == (stored, server_key)


def test_the_server_takes_a_real_nonce_and_secret() -> None:
    for nonce in ["short", "has,a,comma-0123456789", "spaces are not printable!"]:
        with pytest.raises(ValueError, match="nonce"):
            server(server_nonce=nonce)
    with pytest.raises(ValueError, match="secret"):
        server(decoy_secret=b"tiny")
    with pytest.raises(ValueError, match="iterations"):
        server(decoy_iterations=100)


# --- PLAIN -----------------------------------------------------------------------------------------


def plain(passwords: dict[str, str] | None = None) -> sasl.PlainServer:
    store = {"admin": "token-123"} if passwords is None else passwords
    return sasl.PlainServer(
        lambda user, pw: hmac.compare_digest(store.get(user, "").encode(), pw.encode()) and user in store
    )


@pytest.mark.parametrize("token", [b"\0admin\0token-123", b"admin\0admin\0token-123"])
def test_plain_with_and_without_authzid(token: bytes) -> None:
    srv = plain()
    assert srv.respond(token) == sasl.Reply(b"", "admin")
    assert srv.principal == "admin"
    failure = fails(srv, token, SaslErrorCode.ILLEGAL_SASL_STATE)
    assert failure.message == "SaslAuthenticate request received after successful authentication"


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (b"\0admin\0wrong", "Authentication failed: Invalid username or password"),
        (b"\0nobody\0token-123", "Authentication failed: Invalid username or password"),
        (b"other\0admin\0wrong", "Authentication failed: Invalid username or password"),  # password first
        (b"other\0admin\0token-123", AUTHZID),
        (b"\0\0token-123", GENERIC.format("PLAIN")),
        (b"\0admin\0", GENERIC.format("PLAIN")),
        (b"admin\0token-123", GENERIC.format("PLAIN")),
        (b"\0admin\0token-123\0", GENERIC.format("PLAIN")),
        (b"\0admin\0tok\xffen", GENERIC.format("PLAIN")),
        (b"", GENERIC.format("PLAIN")),
    ],
)
def test_plain_failures_carry_kafkas_messages(token: bytes, message: str) -> None:
    srv = plain()
    assert fails(srv, token).message == message
    assert srv.principal is None
    after = fails(srv, b"\0admin\0token-123", SaslErrorCode.ILLEGAL_SASL_STATE)
    assert after.message == "SaslAuthenticate request received after failed authentication"


@settings(max_examples=300, deadline=None)
@given(
    token=st.binary(max_size=80)
    | st.lists(st.text(max_size=12), max_size=5).map(lambda p: "\0".join(p).encode())
)
def test_plain_garbage_raises_only_sasl_errors(token: bytes) -> None:
    srv = plain({"u": "p"})
    try:
        reply = srv.respond(token)
    except SaslError as error:
        assert error.code == SaslErrorCode.SASL_AUTHENTICATION_FAILED
        return
    assert token in (b"\0u\0p", b"u\0u\0p")
    assert reply.principal == "u"


def test_mechanism_types_are_the_images() -> None:
    from jbod_core.image import SCRAM_MECHANISMS

    assert {m.type: m.value for m in ScramMechanism} == dict(SCRAM_MECHANISMS)
    assert {m.value: m.digest_size for m in ScramMechanism} == {"SCRAM-SHA-256": 32, "SCRAM-SHA-512": 64}
