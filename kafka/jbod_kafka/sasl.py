"""The broker's side of SASL PLAIN and SCRAM-SHA-256/512: pure state machines, bytes in, bytes out.

A broker feeds each SaslAuthenticate request's `auth_bytes` (KIP-152) to `respond` and answers with
the returned `Reply.token`; once `Reply.principal` is set the connection is authenticated as that
user. A failure is raised as `SaslError`, whose `code` and `message` are the SaslAuthenticate
response's error code and message, and whose `reason` is for the broker's log only. No I/O, no
clock, no randomness inside: the server nonce and the secret for unknown users are parameters.

PLAIN (RFC 4616, Kafka's `PlainSaslServer`): one token `authzid NUL authcid NUL passwd`; the
authzid must be empty or equal the user. SCRAM (RFC 5802, RFC 7677, Kafka's `ScramSaslServer`):

    client-first   n,[a=authzid],n=user,r=cnonce[,ext=value...]
    server-first   r=cnonce+snonce,s=base64(salt),i=iterations
    client-final   c=base64(gs2 header),r=cnonce+snonce[,ext=value...],p=base64(proof)
    server-final   v=base64(server signature)

Guarantees:
* Any token raises nothing but `SaslError`: SASL_AUTHENTICATION_FAILED (58) while the exchange
  runs, ILLEGAL_SASL_STATE (34) for a token after it completed or failed. A failed exchange stays
  failed. Exceptions raised by the caller's `check` or `lookup` are the caller's and pass through.
* The client sees Kafka's messages: "Authentication failed: Invalid username or password" (PLAIN,
  wrong credentials), "Authentication failed: Client requested an authorization id that is
  different from username" (both), and otherwise Kafka's generic "Authentication failed during
  authentication due to invalid credentials with SASL mechanism <name>" — a malformed token, an
  unknown user and a wrong proof are told apart only by `reason`.
* No user enumeration (SCRAM): an unknown user, or a user whose stored credential is unusable, gets
  a server-first of the same shape as a known one — a salt of `DECOY_SALT_SIZE` bytes and
  `decoy_iterations` derived from the name and `decoy_secret` (the same for the same name while the
  secret lasts) — and fails only at the client-final, exactly as a wrong proof does. The authzid
  check happens before the lookup, so it cannot tell users apart either. (Real salts should be
  `DECOY_SALT_SIZE` random bytes and real iterations `decoy_iterations` for the shapes to match.)
* Secrets are compared in constant time (`hmac.compare_digest`), the proof through its stored key.
* Kafka's wire choices: only the GS2 flag `n` (no channel binding: `y` and `p=` fail), saslnames
  escaped with `=2C`/`=3D`, passwords used as their UTF-8 bytes without SASLprep (Kafka's
  `ScramFormatter.normalize`; librdkafka does the same), iterations of a credential at least 4096,
  extensions accepted and ignored except `tokenauth=true`, which fails (no delegation tokens here).
  Unlike Kafka, the reserved `m=` attribute fails (RFC 5802 §5.1), the channel binding `c=` must
  repeat the GS2 header, an `a=` authzid is unescaped before it is compared with the user, and
  names need not be ASCII (RFC 5802's saslname; Kafka's pattern takes ASCII only).
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from jbod_core import scram
from jbod_core.image import ScramCredential

DECOY_SALT_SIZE: Final = 32
_MIN_NONCE_SIZE: Final = 16


class SaslErrorCode(enum.IntEnum):
    ILLEGAL_SASL_STATE = 34
    SASL_AUTHENTICATION_FAILED = 58


class SaslError(Exception):
    """The exchange failed: answer SaslAuthenticate with `code` and `message`, log `reason`."""

    def __init__(self, code: SaslErrorCode, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Reply:
    """The bytes to answer a token with; `principal` is set once the client is authenticated."""

    token: bytes
    principal: str | None = None


class _State(enum.Enum):
    RUNNING = "running"
    COMPLETE = "complete"
    FAILED = "failed"


def _generic_message(mechanism: str) -> str:
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


_AUTHZID_MISMATCH: Final = (
    "Authentication failed: Client requested an authorization id that is different from username"
)


class _Exchange:
    """The state shared by both mechanisms: running, then complete or failed for good."""

    mechanism: str

    def __init__(self) -> None:
        self._state = _State.RUNNING
        self._principal: str | None = None

    @property
    def principal(self) -> str | None:
        """The authenticated user, once the exchange completed."""
        return self._principal

    def _guard(self) -> None:
        if self._state is not _State.RUNNING:
            outcome = "successful" if self._state is _State.COMPLETE else "failed"
            raise SaslError(
                SaslErrorCode.ILLEGAL_SASL_STATE,
                f"SaslAuthenticate request received after {outcome} authentication",
                reason=f"{self.mechanism} token after the exchange was {self._state.value}",
            )

    def _fail(self, reason: str, message: str | None = None) -> SaslError:
        self._state = _State.FAILED
        return SaslError(
            SaslErrorCode.SASL_AUTHENTICATION_FAILED,
            message or _generic_message(self.mechanism),
            reason=reason,
        )

    def _complete(self, principal: str, token: bytes) -> Reply:
        self._state = _State.COMPLETE
        self._principal = principal
        return Reply(token, principal)


def _text(token: bytes) -> str | None:
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        return None


# --- PLAIN -------------------------------------------------------------------------------------


class PlainServer(_Exchange):
    """SASL/PLAIN: `check(user, password)` says whether the password is the user's (compare with
    `hmac.compare_digest`)."""

    mechanism = "PLAIN"

    def __init__(self, check: Callable[[str, str], bool]) -> None:
        super().__init__()
        self._check = check

    def respond(self, token: bytes) -> Reply:
        self._guard()
        text = _text(token)
        if text is None:
            raise self._fail("Invalid SASL/PLAIN response: not UTF-8")
        parts = text.split("\0")
        if len(parts) != 3:
            raise self._fail(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, user, password = parts
        if not user:
            raise self._fail("Authentication failed: username not specified")
        if not password:
            raise self._fail("Authentication failed: password not specified")
        if not self._check(user, password):
            message = "Authentication failed: Invalid username or password"
            raise self._fail(f"Wrong password or unknown user {user!r}", message)
        if authzid and authzid != user:
            raise self._fail(f"User {user!r} asked for authorization id {authzid!r}", _AUTHZID_MISMATCH)
        return self._complete(user, b"")


# --- SCRAM -------------------------------------------------------------------------------------


class ScramMechanism(enum.Enum):
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"

    @property
    def type(self) -> int:
        """Kafka's mechanism type, as in credential records and `ClusterImage.scram_credential`."""
        return scram.SCRAM_SHA_256 if self is ScramMechanism.SCRAM_SHA_256 else scram.SCRAM_SHA_512

    @property
    def hash_name(self) -> str:
        return scram.HASHES[self.type]

    @property
    def digest_size(self) -> int:
        return hashlib.new(self.hash_name).digest_size


ScramLookup = Callable[[str], ScramCredential | None]


def scram_credential(
    password: str, *, salt: bytes, iterations: int, mechanism: ScramMechanism
) -> tuple[bytes, bytes]:
    """(stored key, server key) of `password` (Kafka's `ScramFormatter.generateCredential` with the
    salt given), its UTF-8 bytes salted by `jbod_core.scram.salted_password`; ValueError for an
    empty salt or iterations outside Kafka's 4096-16384."""
    if not salt:
        raise ValueError("A SCRAM salt must not be empty")
    if not scram.MIN_ITERATIONS <= iterations <= scram.MAX_ITERATIONS:
        raise ValueError(
            f"SCRAM iterations {iterations} are outside {scram.MIN_ITERATIONS}-{scram.MAX_ITERATIONS}"
        )
    salted = scram.salted_password(password.encode("utf-8"), salt, iterations, mechanism=mechanism.type)
    return scram.scram_keys(salted, mechanism=mechanism.type)


def _hmac(mechanism: ScramMechanism, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, mechanism.hash_name).digest()


_SASLNAME: Final = r"(?:[^\x00=,]|=2C|=3D)+"
_NONCE: Final = r"[\x21-\x2b\x2d-\x7e]+"
_EXTENSIONS: Final = r"(?:,[A-Za-z]+=[^\x00,]+)*"
_BASE64: Final = r"[A-Za-z0-9+/]*={0,2}"
_CLIENT_FIRST: Final = re.compile(
    rf"(?P<gs2>n,(?:a=(?P<authzid>{_SASLNAME}))?,)"
    rf"(?P<bare>n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_NONCE})(?P<extensions>{_EXTENSIONS}))"
)
_CLIENT_FINAL: Final = re.compile(
    rf"(?P<without_proof>c=(?P<binding>{_BASE64}),r=(?P<nonce>{_NONCE}){_EXTENSIONS}),p=(?P<proof>{_BASE64})"
)


def _username(saslname: str) -> str:
    """A saslname unescaped (the pattern admits `=` only in `=2C` and `=3D`)."""
    return saslname.replace("=2C", ",").replace("=3D", "=")


def _base64(text: str) -> bytes | None:
    """The bytes of canonical base64 (padded, no stray bits), else None."""
    try:
        decoded = base64.b64decode(text, validate=True)
    except binascii.Error:
        return None
    return decoded if base64.b64encode(decoded) == text.encode("ascii") else None


@dataclass(frozen=True, slots=True)
class _FirstRound:
    """What the client-final is checked against."""

    user: str
    known: bool
    credential: ScramCredential
    gs2_header: str
    client_first_bare: str
    server_first: str
    nonce: str


class ScramServer(_Exchange):
    """SASL/SCRAM for one connection: `lookup(user)` gives the user's credential of this mechanism
    (e.g. `ClusterImage.scram_credential(user, mechanism.type)`), or None for an unknown user; `server_nonce` is fresh randomness for this exchange
    (printable ASCII without `,`, at least 16 characters, e.g. `secrets.token_urlsafe(24)`);
    `decoy_secret` is a per-process secret (at least 16 bytes) behind unknown users' salts."""

    def __init__(
        self,
        mechanism: ScramMechanism,
        lookup: ScramLookup,
        *,
        server_nonce: str,
        decoy_secret: bytes,
        decoy_iterations: int = scram.MIN_ITERATIONS,
    ) -> None:
        super().__init__()
        if len(server_nonce) < _MIN_NONCE_SIZE or not re.fullmatch(_NONCE, server_nonce):
            raise ValueError("A server nonce is at least 16 printable ASCII characters other than ','")
        if len(decoy_secret) < 16:
            raise ValueError("A decoy secret is at least 16 bytes")
        if not scram.MIN_ITERATIONS <= decoy_iterations <= scram.MAX_ITERATIONS:
            raise ValueError(
                f"Decoy iterations {decoy_iterations} are outside {scram.MIN_ITERATIONS}-{scram.MAX_ITERATIONS}"
            )
        self.mechanism = mechanism.value
        self._scram = mechanism
        self._lookup = lookup
        self._server_nonce = server_nonce
        self._decoy_secret = decoy_secret
        self._decoy_iterations = decoy_iterations
        self._first: _FirstRound | None = None

    def respond(self, token: bytes) -> Reply:
        self._guard()
        if self._first is None:
            return self._client_first(token)
        return self._client_final(self._first, token)

    def _client_first(self, token: bytes) -> Reply:
        text = _text(token)
        if text is None:
            raise self._fail("Invalid SCRAM client first message: not UTF-8")
        match = _CLIENT_FIRST.fullmatch(text)
        if match is None:
            raise self._fail(f"Invalid SCRAM client first message format: {text[:200]!r}")
        user = _username(match["saslname"])
        extensions = dict(kv.partition("=")[::2] for kv in match["extensions"].split(",")[1:])
        if extensions.get("tokenauth", "").lower() == "true":
            raise self._fail(f"Delegation token authentication of {user!r} is not supported")
        authzid = match["authzid"]
        if authzid is not None and _username(authzid) != user:
            raise self._fail(f"User {user!r} asked for authorization id {authzid!r}", _AUTHZID_MISMATCH)
        found = self._lookup(user)
        credential = self._usable(found)
        known = credential is not None
        if credential is None:
            credential = self._decoy(user)
        nonce = match["nonce"] + self._server_nonce
        salt = base64.b64encode(credential.salt).decode("ascii")
        server_first = f"r={nonce},s={salt},i={credential.iterations}"
        self._first = _FirstRound(user, known, credential, match["gs2"], match["bare"], server_first, nonce)
        return Reply(server_first.encode("ascii"))

    def _usable(self, credential: ScramCredential | None) -> ScramCredential | None:
        if credential is None:
            return None
        size = self._scram.digest_size
        if (
            not credential.salt
            or len(credential.stored_key) != size
            or len(credential.server_key) != size
            or credential.iterations < scram.MIN_ITERATIONS
        ):
            return None
        return credential

    def _decoy(self, user: str) -> ScramCredential:
        """A credential no password matches, the same for the same user while the secret lasts."""
        name = f"{self.mechanism}\0{user}".encode()
        salt = hmac.new(self._decoy_secret, b"salt\0" + name, "sha256").digest()
        stored_key = _hmac(self._scram, self._decoy_secret, b"stored key\0" + name)
        server_key = _hmac(self._scram, self._decoy_secret, b"server key\0" + name)
        return ScramCredential(salt[:DECOY_SALT_SIZE], stored_key, server_key, self._decoy_iterations)

    def _client_final(self, first: _FirstRound, token: bytes) -> Reply:
        text = _text(token)
        if text is None:
            raise self._fail("Invalid SCRAM client final message: not UTF-8")
        match = _CLIENT_FINAL.fullmatch(text)
        if match is None:
            raise self._fail(f"Invalid SCRAM client final message format: {text[:200]!r}")
        binding, proof = _base64(match["binding"]), _base64(match["proof"])
        if binding != first.gs2_header.encode():
            raise self._fail("The channel binding of the client final message does not repeat its GS2 header")
        if not hmac.compare_digest(match["nonce"].encode(), first.nonce.encode()):
            raise self._fail("Invalid client nonce in the final client message")
        if proof is None or len(proof) != self._scram.digest_size:
            raise self._fail("Invalid client proof in the final client message")
        auth_message = f"{first.client_first_bare},{first.server_first},{match['without_proof']}".encode()
        credential = first.credential
        client_signature = _hmac(self._scram, credential.stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        stored_key = hashlib.new(self._scram.hash_name, client_key).digest()
        if not hmac.compare_digest(stored_key, credential.stored_key) or not first.known:
            raise self._fail(
                f"Invalid client credentials of {'' if first.known else 'unknown '}user {first.user!r}"
            )
        server_signature = _hmac(self._scram, credential.server_key, auth_message)
        return self._complete(first.user, b"v=" + base64.b64encode(server_signature))
