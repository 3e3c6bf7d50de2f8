"""TLS for the servers and their outbound links (issue 25): `ssl.SSLContext`s built from the agreed
PEM files, re-read when the files change, and Kafka's `ssl.principal.mapping.rules`.

Guarantees:
* PEM only: a keystore is one file holding the unencrypted private key and the certificate chain
  (leaf first); a truststore is a bundle of CA certificates (several during a CA rotation). A
  file that is missing or does not load raises `TlsConfigError` naming the file.
* TLS 1.2 is the floor: `ssl.enabled.protocols` may list TLSv1.2 and TLSv1.3 only (anything
  older is a `TlsConfigError`); the contexts allow exactly the span listed.
* Client contexts verify the server's certificate against the truststore (or the system's CAs
  when there is none) and check its host name (DNS or IP SAN).
* Server contexts ask for a client certificate per `ssl.client.auth`: `none` never, `requested`
  verifies one if offered, `required` refuses a handshake without a valid one.
* Reload on change: `ServerTls.context` is the context a listener is started with; on every
  handshake its SNI callback (run for every ClientHello, SNI or not) re-stats the files, at most
  once a second, and a changed set is loaded into a fresh context that this and later handshakes
  use. `ClientTls.refresh` does the same for a client context, in place: a changed keystore
  replaces the client certificate, a changed truststore's CAs are added (a CA dropped from the
  file stays trusted by a running client until it restarts). Established connections are never
  touched. A file that fails to load during a reload is logged and the previous context kept.
* `map_principal` applies Kafka's `ssl.principal.mapping.rules` to a subject DN (RFC 2253/4514
  string); the default rule maps to the CN (`User:<CN>` once the authorizer adds the type).
"""

from __future__ import annotations

import logging
import os
import re
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509

log = logging.getLogger("jbod_runtime.tls")

CLIENT_AUTH_MODES: Final = ("none", "requested", "required")
PROTOCOLS: Final = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
DEFAULT_PROTOCOLS: Final = ("TLSv1.2", "TLSv1.3")
#: Our default `ssl.principal.mapping.rules`: the subject's CN, else the whole DN (as Strimzi).
DEFAULT_PRINCIPAL_RULES: Final = "RULE:^CN=(.*?)(,.*)?$/$1/,DEFAULT"
#: How often, at most, the files of a context are stat'ed for changes.
RELOAD_CHECK_INTERVAL_S: Final = 1.0


class TlsConfigError(ValueError):
    """A TLS setting or file that cannot be used; the message names it."""


def parse_protocols(text: str) -> tuple[str, ...]:
    """`ssl.enabled.protocols` (comma-separated) into the names listed; below TLS 1.2 is refused."""
    names = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    if not names:
        raise TlsConfigError(f"expected a list of TLSv1.2 and TLSv1.3, got '{text}'")
    for name in names:
        if name not in PROTOCOLS:
            raise TlsConfigError(
                f"'{name}' is not supported: TLS 1.2 is the minimum (TLSv1.2, TLSv1.3), got '{text}'"
            )
    return names


def parse_client_auth(text: str) -> str:
    mode = text.strip().lower()
    if mode not in CLIENT_AUTH_MODES:
        raise TlsConfigError(f"'{text}' is not one of {', '.join(CLIENT_AUTH_MODES)}")
    return mode


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """The TLS settings of one process: where its PEM files are and how it uses them."""

    keystore: Path | None = None
    truststore: Path | None = None
    client_auth: str = "none"
    protocols: tuple[str, ...] = DEFAULT_PROTOCOLS

    def paths(self) -> tuple[Path, ...]:
        return tuple(p for p in (self.keystore, self.truststore) if p is not None)


def _versions(context: ssl.SSLContext, protocols: Sequence[str]) -> None:
    versions = sorted(PROTOCOLS[p] for p in protocols)
    context.minimum_version = versions[0]
    context.maximum_version = versions[-1]


def _load_chain(context: ssl.SSLContext, keystore: Path) -> None:
    try:
        context.load_cert_chain(keystore)
    except FileNotFoundError:
        raise TlsConfigError(f"keystore {keystore}: no such file") from None
    except (ssl.SSLError, OSError) as exc:
        raise TlsConfigError(
            f"keystore {keystore}: not a PEM private key and certificate chain ({exc.strerror or exc})"
        ) from None


def _load_trust(context: ssl.SSLContext, truststore: Path) -> None:
    try:
        context.load_verify_locations(cafile=truststore)
    except FileNotFoundError:
        raise TlsConfigError(f"truststore {truststore}: no such file") from None
    except (ssl.SSLError, OSError) as exc:
        raise TlsConfigError(
            f"truststore {truststore}: not a PEM bundle of CA certificates ({exc.strerror or exc})"
        ) from None


def server_context(files: TlsFiles) -> ssl.SSLContext:
    """A server context from `files` (a keystore is required; a truststore when client
    certificates are asked for)."""
    if files.keystore is None:
        raise TlsConfigError("a TLS listener needs ssl.keystore.location")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions(context, files.protocols)
    _load_chain(context, files.keystore)
    if files.client_auth != "none":
        if files.truststore is None:
            raise TlsConfigError(f"ssl.client.auth={files.client_auth} needs ssl.truststore.location")
        _load_trust(context, files.truststore)
        context.verify_mode = ssl.CERT_REQUIRED if files.client_auth == "required" else ssl.CERT_OPTIONAL
    return context


def client_context(
    truststore: Path | None = None,
    *,
    keystore: Path | None = None,
    protocols: Sequence[str] = DEFAULT_PROTOCOLS,
) -> ssl.SSLContext:
    """A client context: verifies the server (against `truststore`, else the system's CAs) and
    its host name; presents `keystore`'s certificate if one is given."""
    context = ssl.create_default_context() if truststore is None else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = True
    context.verify_mode = ssl.CERT_REQUIRED
    _versions(context, protocols)
    if truststore is not None:
        _load_trust(context, truststore)
    if keystore is not None:
        _load_chain(context, keystore)
    return context


class _Signature:
    """What the files of a context look like on disk (re-stat'ed at most once a second)."""

    def __init__(self, paths: Sequence[Path], clock: Callable[[], float]) -> None:
        self._paths = tuple(paths)
        self._clock = clock
        self._checked = clock()
        self._seen = self._stat()

    def _stat(self) -> tuple[tuple[int, int, int, int] | None, ...]:
        stats: list[tuple[int, int, int, int] | None] = []
        for path in self._paths:
            try:
                st = os.stat(path)
            except OSError:
                stats.append(None)
            else:
                stats.append((st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        return tuple(stats)

    def changed(self) -> bool:
        """True once per change of the files (checked at most every `RELOAD_CHECK_INTERVAL_S`)."""
        now = self._clock()
        if now - self._checked < RELOAD_CHECK_INTERVAL_S:
            return False
        self._checked = now
        seen = self._stat()
        if seen == self._seen:
            return False
        self._seen = seen
        return True


class ServerTls:
    """A listener's TLS: `context` to listen with; every handshake uses the files as they are on
    disk (checked at most once a second)."""

    def __init__(self, files: TlsFiles, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.files = files
        self._signature = _Signature(files.paths(), clock)
        self.context = self._build()
        self.current = self.context
        self.reloads = 0

    def _build(self) -> ssl.SSLContext:
        context = server_context(self.files)
        context.sni_callback = self._on_hello
        return context

    def refresh(self) -> ssl.SSLContext:
        """The context for a new connection: rebuilt if the files changed since the last look."""
        if self._signature.changed():
            try:
                self.current = self._build()
            except TlsConfigError as exc:
                log.error("Kept the previous TLS certificates: %s", exc)
            else:
                self.reloads += 1
                log.info(
                    "Reloaded the TLS keystore and truststore (%s)", ", ".join(map(str, self.files.paths()))
                )
        return self.current

    def _on_hello(
        self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: ssl.SSLContext
    ) -> None:
        current = self.refresh()
        if connection.context is not current:
            connection.context = current


class ClientTls:
    """An outbound link's TLS: one context, brought up to date in place by `refresh` (call it
    before a request; it stats the files at most once a second)."""

    def __init__(
        self,
        truststore: Path | None,
        *,
        keystore: Path | None = None,
        protocols: Sequence[str] = DEFAULT_PROTOCOLS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.truststore = truststore
        self.keystore = keystore
        self.context = client_context(truststore, keystore=keystore, protocols=protocols)
        self._signature = _Signature([p for p in (truststore, keystore) if p is not None], clock)

    def refresh(self) -> None:
        if not self._signature.changed():
            return
        try:
            if self.truststore is not None:
                _load_trust(self.context, self.truststore)
            if self.keystore is not None:
                _load_chain(self.context, self.keystore)
        except TlsConfigError as exc:
            log.error("Kept the previous TLS certificates: %s", exc)


# -- ssl.principal.mapping.rules (Kafka's syntax) ---------------------------------------------------

_RULE: Final = re.compile(r"RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU]?)")


@dataclass(frozen=True, slots=True)
class PrincipalRule:
    """One rule: `DEFAULT` (the DN as it is) or `RULE:pattern/replacement/[L|U]`."""

    pattern: re.Pattern[str] | None
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        match = self.pattern.fullmatch(dn)
        if match is None:
            return None
        # Kafka's replacement uses $1; Python's expand uses \1.
        result = match.expand(re.sub(r"\$(\d+)", r"\\\1", self.replacement))
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result


def parse_principal_rules(text: str) -> tuple[PrincipalRule, ...]:
    """`ssl.principal.mapping.rules` into rules; `TlsConfigError` for one that does not parse."""
    rules: list[PrincipalRule] = []
    rest = text.strip()
    while rest:
        if rest.startswith("DEFAULT"):
            rules.append(PrincipalRule(None))
            rest = rest[len("DEFAULT") :]
        else:
            match = _RULE.match(rest)
            if match is None:
                raise TlsConfigError(f"'{rest}' is not DEFAULT or RULE:pattern/replacement/[LU]")
            try:
                pattern = re.compile(match.group(1).replace("\\/", "/"))
            except re.error as exc:
                raise TlsConfigError(f"'{match.group(0)}': {exc}") from None
            rules.append(PrincipalRule(pattern, match.group(2).replace("\\/", "/"), match.group(3)))
            rest = rest[match.end() :]
        rest = rest.strip()
        if rest and not rest.startswith(","):
            raise TlsConfigError(f"expected ',' between rules, got '{rest}'")
        rest = rest[1:].strip()
    if not rules:
        raise TlsConfigError("no rule: expected DEFAULT or RULE:pattern/replacement/[LU]")
    return tuple(rules)


def map_principal(rules: Sequence[PrincipalRule], dn: str) -> str:
    """The principal name of a certificate subject `dn`: the first rule that matches; the DN
    itself if none does."""
    for rule in rules:
        name = rule.apply(dn)
        if name is not None:
            return name
    return dn


def peer_subject(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> str | None:
    """The verified peer certificate's subject as an RFC 4514 DN (`CN=alice,O=acme`), or None."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    return x509.load_der_x509_certificate(der).subject.rfc4514_string()
