"""How this project's tools log in to brokers' Kafka listeners: the bootstrap servers, and the
security protocol, SASL mechanism and user a Kafka client presents, read from the admin token or
from a client properties file as Kafka's tools take it (`--command-config`).

Guarantees:
* `parse_properties` reads Java's properties syntax as `java.util.Properties.load` does: `#` and
  `!` comments, `=`, `:` or blanks between key and value, a backslash continuing a line, and the
  escapes `\\t \\n \\r \\f \\uXXXX` (any other escaped character stands for itself).
* `security_from_properties` takes `security.protocol` (Kafka's default PLAINTEXT),
  `sasl.mechanism` (Kafka's default GSSAPI, which is refused: the brokers serve SCRAM-SHA-512,
  SCRAM-SHA-256 and PLAIN) and the user and password of `sasl.jaas.config` (or librdkafka's
  `sasl.username` / `sasl.password`, as kcat's `-F` files have them); anything it cannot honour
  (an unknown mechanism, SASL without a user, a truststore or keystore that is not PEM) is a
  `KafkaConfigError` of one line naming the key, never a client that would fail later.
* TLS (issue 25): `SSL` and `SASL_SSL` take `ssl.truststore.location` (PEM, `ssl.truststore.type`
  PEM; librdkafka's `ssl.ca.location` too) and optionally `ssl.keystore.location` (one PEM file:
  key and chain; librdkafka's `ssl.key.location` + `ssl.certificate.location` naming one file
  too). `librdkafka_config`, `java_config` and `ssl_context` present the same files.
* `KafkaSecurity.java_config()` is the same as the Java client's settings (`security.protocol`,
  `sasl.mechanism`, and a `sasl.jaas.config` of Kafka's own login module for the mechanism, the
  user and password quoted for JAAS); `security_from_properties` reads it back to the same user
  and password. It is what Kafka's tools and Spark's Kafka source (`kafka.`-prefixed) take.
* `KafkaSecurity.admin(token)` is the `admin` principal: its password is the admin token,
  SCRAM-SHA-512 over SASL_PLAINTEXT. The password never appears in `repr`.
* `parse_bootstrap_servers` accepts `host:port[,host:port...]` (an IPv6 host in brackets) and
  refuses URLs with a line saying which option takes them.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from jbod_client.controller import ClientError
from jbod_runtime import tls

ADMIN: Final = "admin"
SASL_PLAINTEXT: Final = "SASL_PLAINTEXT"
PLAINTEXT: Final = "PLAINTEXT"
SASL_SSL: Final = "SASL_SSL"
SSL: Final = "SSL"
PROTOCOLS: Final = (PLAINTEXT, SASL_PLAINTEXT, SSL, SASL_SSL)
MECHANISMS: Final = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
ADMIN_MECHANISM: Final = "SCRAM-SHA-512"
#: The JAAS login module of Kafka's Java client for each mechanism.
LOGIN_MODULES: Final = {
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
}


class KafkaConfigError(ClientError):
    """Kafka connection settings this project's clients cannot use; `str()` is one line."""


@dataclass(frozen=True, slots=True)
class KafkaSecurity:
    """What a Kafka client presents to a listener: its security protocol and, over SASL, the
    mechanism, user and password."""

    protocol: str  # one of PROTOCOLS: also the name of the listener it connects to
    mechanism: str | None = None  # one of MECHANISMS over SASL_PLAINTEXT and SASL_SSL
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    truststore: Path | None = None  # TLS: PEM bundle of the CAs (None: the system's)
    keystore: Path | None = None  # TLS: PEM key and chain presented as client certificate

    @classmethod
    def admin(cls, token: str, *, truststore: Path | None = None) -> KafkaSecurity:
        """The admin principal: SASL_PLAINTEXT, or SASL_SSL verified with `truststore`."""
        if truststore is not None:
            return cls(SASL_SSL, ADMIN_MECHANISM, ADMIN, token, truststore=truststore)
        return cls(SASL_PLAINTEXT, ADMIN_MECHANISM, ADMIN, token)

    @property
    def sasl(self) -> bool:
        return self.protocol in (SASL_PLAINTEXT, SASL_SSL)

    @property
    def tls(self) -> bool:
        return self.protocol in (SSL, SASL_SSL)

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client TLS context of this security (None without TLS); hostname verified."""
        if not self.tls:
            return None
        try:
            return tls.client_context(self.truststore, keystore=self.keystore)
        except tls.TlsConfigError as exc:
            raise KafkaConfigError(str(exc)) from None

    def librdkafka_config(self) -> dict[str, Any]:
        """The same as librdkafka (confluent-kafka) configuration keys."""
        config: dict[str, Any] = {"security.protocol": self.protocol}
        if self.truststore is not None:
            config["ssl.ca.location"] = str(self.truststore)
        if self.keystore is not None:
            config["ssl.key.location"] = config["ssl.certificate.location"] = str(self.keystore)
        if self.sasl:
            config |= {
                "sasl.mechanism": self.mechanism,
                "sasl.username": self.username,
                "sasl.password": self.password,
            }
        return config

    def java_config(self) -> dict[str, str]:
        """The same as Kafka's Java client settings (the module's guarantee)."""
        config = {"security.protocol": self.protocol}
        if self.truststore is not None:
            config |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.truststore)}
        if self.keystore is not None:
            config |= {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.keystore)}
        if self.sasl:
            assert self.mechanism is not None and self.username is not None
            config["sasl.mechanism"] = self.mechanism
            config["sasl.jaas.config"] = (
                f"{LOGIN_MODULES[self.mechanism]} required "
                f"username={_jaas_quoted(self.username)} password={_jaas_quoted(self.password or '')};"
            )
        return config

    def describe(self) -> str:
        """`admin over SASL_PLAINTEXT/SCRAM-SHA-512`, for messages (never the password)."""
        if not self.sasl:
            return self.protocol
        return f"{self.username} over {self.protocol}/{self.mechanism}"


@dataclass(frozen=True, slots=True)
class KafkaTarget:
    """Where a Kafka client connects (bootstrap servers, `host:port`) and as whom."""

    bootstrap: tuple[str, ...]
    security: KafkaSecurity


# -- Java properties ---------------------------------------------------------------------------

_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> list[str]:
    """Natural lines joined where a line ends in an odd number of backslashes (the next line's
    leading blanks dropped); comment and blank lines left out."""
    lines: list[str] = []
    pending: str | None = None
    for raw in text.splitlines():
        line = raw.lstrip(" \t\f") if pending is not None else raw
        if pending is None and (not line.strip() or line.lstrip(" \t\f")[:1] in ("#", "!")):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        continued = trailing % 2 == 1
        body = line[:-1] if continued else line
        pending = body if pending is None else pending + body
        if not continued:
            lines.append(pending)
            pending = None
    if pending is not None:
        lines.append(pending)
    return lines


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "\\" or i + 1 == len(text):
            out.append(char)
            i += 1
            continue
        escaped = text[i + 1]
        if escaped == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2 : i + 6]):
            out.append(chr(int(text[i + 2 : i + 6], 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(escaped, escaped))
        i += 2
    return "".join(out)


def _split_key(line: str) -> tuple[str, str]:
    """(key, value) of one logical line, both still escaped."""
    line = line.lstrip(" \t\f")
    i = 0
    while i < len(line):
        char = line[i]
        if char == "\\":
            i += 2
            continue
        if char in "=: \t\f":
            break
        i += 1
    key, rest = line[:i], line[i:]
    rest = rest.lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


def parse_properties(text: str) -> dict[str, str]:
    """Java properties (the module's guarantee); a later key replaces an earlier one."""
    properties: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split_key(line)
        properties[_unescape(key)] = _unescape(value)
    return properties


# -- JAAS --------------------------------------------------------------------------------------


def _jaas_quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


_JAAS_TOKEN: Final = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|([^\s=;"]+)|(=)|(;))', re.S)


def parse_jaas_options(text: str) -> dict[str, str]:
    """The options of a one-module JAAS entry (`Module required user="x" password="y";`); a
    `KafkaConfigError` when it is not one."""
    tokens: list[tuple[str, bool]] = []  # (text, was quoted) ; "=" and ";" as themselves
    position = 0
    text = text.strip()
    while position < len(text):
        match = _JAAS_TOKEN.match(text, position)
        if match is None:
            raise KafkaConfigError(f"sasl.jaas.config: cannot read it at {text[position:][:20]!r}")
        quoted, word, equals, semicolon = match.groups()
        if quoted is not None:
            tokens.append((re.sub(r"\\(.)", r"\1", quoted), True))
        else:
            tokens.append((word or equals or semicolon, False))
        position = match.end()
    if len(tokens) < 3 or tokens[-1] != (";", False):
        raise KafkaConfigError("sasl.jaas.config: expected 'LoginModule required key=\"value\" ...;'")
    body = tokens[2:-1]
    options: dict[str, str] = {}
    for i in range(0, len(body), 3):
        triple = body[i : i + 3]
        if len(triple) != 3 or triple[1] != ("=", False) or triple[0][1]:
            raise KafkaConfigError('sasl.jaas.config: expected key="value" options after the login module')
        options[triple[0][0]] = triple[2][0]
    return options


# -- from a client properties file -------------------------------------------------------------


def security_from_properties(properties: Mapping[str, str], *, source: str) -> KafkaSecurity:
    """What a Kafka client of `properties` presents (the module's guarantee); `source` names the
    file in errors."""
    protocol = properties.get("security.protocol", PLAINTEXT).strip().upper()
    if protocol not in PROTOCOLS:
        raise KafkaConfigError(f"{source}: security.protocol {protocol!r} is not a Kafka security protocol")
    truststore, keystore = (
        _tls_files(properties, source=source) if protocol in (SSL, SASL_SSL) else (None, None)
    )
    if protocol in (PLAINTEXT, SSL):
        return KafkaSecurity(protocol, truststore=truststore, keystore=keystore)
    mechanism = properties.get("sasl.mechanism", "GSSAPI").strip().upper()
    if mechanism not in MECHANISMS:
        raise KafkaConfigError(
            f"{source}: sasl.mechanism {mechanism} is not served; use {', '.join(MECHANISMS)}"
        )
    username, password = properties.get("sasl.username"), properties.get("sasl.password")
    jaas = properties.get("sasl.jaas.config")
    if jaas is not None:
        try:
            options = parse_jaas_options(jaas)
        except KafkaConfigError as exc:
            raise KafkaConfigError(f"{source}: {exc}") from None
        username, password = options.get("username"), options.get("password")
    if not username or password is None:
        raise KafkaConfigError(
            f"{source}: {protocol} needs a user: sasl.jaas.config with username and password"
        )
    return KafkaSecurity(protocol, mechanism, username, password, truststore=truststore, keystore=keystore)


def _tls_files(properties: Mapping[str, str], *, source: str) -> tuple[Path | None, Path | None]:
    """The PEM truststore and keystore of a TLS client's properties (the module's guarantee)."""
    for type_key in ("ssl.truststore.type", "ssl.keystore.type"):
        kind = properties.get(type_key, "PEM").strip().upper()
        if kind != "PEM":
            raise KafkaConfigError(f"{source}: {type_key} {kind} is not supported: only PEM is")
    truststore = properties.get("ssl.truststore.location") or properties.get("ssl.ca.location")
    keystore = properties.get("ssl.keystore.location")
    key, cert = properties.get("ssl.key.location"), properties.get("ssl.certificate.location")
    if keystore is None and (key or cert):
        if key != cert:
            raise KafkaConfigError(
                f"{source}: ssl.key.location and ssl.certificate.location must name one PEM file "
                "(key and chain); or use ssl.keystore.location"
            )
        keystore = key
    for key_name, value in (("ssl.truststore.location", truststore), ("ssl.keystore.location", keystore)):
        if value is not None and not Path(value.strip()).is_file():
            raise KafkaConfigError(f"{source}: {key_name} {value.strip()}: no such file")
    return (
        Path(truststore.strip()) if truststore else None,
        Path(keystore.strip()) if keystore else None,
    )


# -- bootstrap servers -------------------------------------------------------------------------

_ADDRESS: Final = re.compile(r"(?:\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})")


def parse_bootstrap_servers(text: str) -> tuple[str, ...]:
    """`host:port` addresses separated by commas (blanks ignored); `KafkaConfigError` otherwise."""
    servers = tuple(s.strip() for s in text.split(",") if s.strip())
    for server in servers:
        if "://" in server:
            raise KafkaConfigError(
                f"{server!r} is a URL: Kafka listeners are host:port "
                "(broker URLs go to --bootstrap / JBOD_BOOTSTRAP)"
            )
        match = _ADDRESS.fullmatch(server)
        if match is None or not 0 < int(match.group(1)) < 65536:
            raise KafkaConfigError(f"{server!r} is not host:port")
    return servers
