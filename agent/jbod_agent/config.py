"""Broker configuration: `server.properties` with Kafka key names (protocol §4.2).

Guarantees:
* `parse_config` is pure: properties text plus `--set` overrides in, a frozen `BrokerConfig` out.
* An unknown key, a value that does not parse, or a value out of range raises `ConfigError`
  whose message names the key; nothing is half-applied. A rejected value holding `#` gets a note
  that inline comments are not allowed (Java properties: `#` starts a comment only at the
  beginning of a line).
* Every numeric setting has a documented range (`docs/decisions.md`), checked here. The broker
  configs `jbod_core.broker_configs` honours (the topic defaults, the log cleaner's settings
  and the offsets expiry under Kafka's names) are checked there, refused with Kafka's message
  (`Invalid value 2.0 for configuration log.cleaner.min.cleanable.ratio: Value must be no more
  than 1`);
  `log_retention_ms` follows Kafka's precedence (`log.retention.ms` over `.minutes` over
  `.hours`), `log_cleaner` holds the cleaner's settings. `given_values` keeps what was given,
  key by key, for DescribeConfigs (STATIC_BROKER_CONFIG) and the topic defaults.
* TLS (issue 25): `https://`, `SSL://` and `SASL_SSL://` listeners need `ssl.keystore.location`
  (PEM only: another `ssl.keystore.type` or `ssl.truststore.type` is an error naming the key);
  `ssl.client.auth` other than none needs `ssl.truststore.location`. As in Kafka (KIP-684),
  `ssl.client.auth` applies to `SSL` listeners (and, our extension, the https API), not to
  `SASL_SSL` ones; `listener.name.<name>.ssl.client.auth` sets one listener's own
  (`client_auth_of`). `ssl.enabled.protocols`
  below TLSv1.2 and `ssl.principal.mapping.rules` that do not parse are errors. Without an
  `http(s)://` entry in `listeners`, the HTTP API is https when a Kafka listener is TLS.
* Named listeners (issue 34): a Kafka listener's name is any `[A-Za-z][A-Za-z0-9_]*` (upper-cased,
  as Kafka normalises it); `listener.security.protocol.map` gives each its security protocol
  (default: Kafka's, each protocol named after itself); a listener missing from the map is an
  error naming the map. Every other setting (SASL mechanisms, keystore, principal rules) is the
  broker's, the same on every listener.
* `${file:PATH:KEY}` in a value is KEY of the properties file PATH (Kafka's FileConfigProvider,
  with `config.providers=file`): `load_config` reads the files, `parse_config` stays pure and
  takes them as `provided`; a missing file or key is an error naming the key that refers to it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from jbod_client.controller import parse_controller_urls
from jbod_core import acls, auto_create, broker_configs, replica_selector, topic_configs
from jbod_core.meta_properties import parse_properties
from jbod_runtime import tls


class ConfigError(ValueError):
    """A configuration problem; the message names the key."""


@dataclass(frozen=True, slots=True)
class HttpListener:
    scheme: str
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"


#: The security protocols a Kafka listener may name (`NAME://HOST:PORT`, Kafka's syntax).
KAFKA_PROTOCOLS: Final = ("SASL_PLAINTEXT", "PLAINTEXT", "SASL_SSL", "SSL")
#: The schemes of the HTTP API's listener.
HTTP_SCHEMES: Final = ("http", "https")
#: A Kafka listener's name (Kafka upper-cases it); its protocol comes from
#: `listener.security.protocol.map`, Kafka's default map naming each protocol after itself.
LISTENER_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_LISTENER_CLIENT_AUTH: Final = re.compile(r"listener\.name\.([a-z][a-z0-9_]*)\.ssl\.client\.auth")
#: Kafka's ConfigProvider reference to a key of a properties file (`config.providers=file`).
FILE_REFERENCE: Final = re.compile(r"\$\{file:([^:}]+):([^}]+)\}")
FILE_CONFIG_PROVIDER: Final = "org.apache.kafka.common.config.provider.FileConfigProvider"


@dataclass(frozen=True, slots=True)
class KafkaListener:
    """A Kafka-protocol listener: its name and, from `listener.security.protocol.map`, its
    security protocol (`protocol`; None: the name is the protocol, Kafka's default map)."""

    name: str
    host: str
    port: int
    protocol: str | None = None

    @property
    def security_protocol(self) -> str:
        return self.protocol or self.name

    @property
    def authenticates(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Listeners:
    """What `listeners` (or `advertised.listeners`) lists: at most one `http://` listener (the
    broker's HTTP API) and Kafka listeners, at most one per name."""

    http: HttpListener | None
    kafka: tuple[KafkaListener, ...]


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    node_id: int
    log_dirs: tuple[Path, ...]
    metadata_log_dir: Path
    controller_url: str  # one URL or a comma-separated list (`controller_urls`)
    listener: HttpListener
    cluster_token_file: Path
    admin_token_file: Path | None = None
    heartbeat_interval_ms: int = 2000
    session_timeout_ms: int = 9000
    log_dir_failure_timeout_ms: int = 30000
    log_dir_probe_interval_ms: int = 1000
    log_dir_probe_timeout_ms: int = 5000
    min_insync_replicas: int = 1
    replica_lag_time_max_ms: int = 30000
    rack: str | None = None
    # KIP-392: `replica.selector.class`, only Kafka's RackAwareReplicaSelector (None: the leader
    # serves every consumer, as Kafka).
    replica_selector_class: str | None = None
    format_on_start: bool = False
    cluster_id: str | None = None
    # The authorizer (Kafka's keys; jbod_core.acls): `User:admin` is a super user besides these.
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False
    log_segment_bytes: int = 64 * 1024 * 1024
    log_retention_bytes: int = -1
    log_retention_ms: int = 7 * 24 * 3600 * 1000
    log_retention_check_interval_ms: int = 30_000
    log_flush_interval_ms: int = 5_000
    replica_fetch_max_bytes: int = 1024 * 1024
    replica_fetch_response_max_bytes: int = 10 * 1024 * 1024
    replica_fetch_wait_max_ms: int = 500
    replica_move_max_bytes_per_second: int = -1
    # Replication throttles and cordoned dirs, also dynamic (jbod_core.broker_configs; -1: unset).
    leader_replication_throttled_rate: int = -1
    follower_replication_throttled_rate: int = -1
    cordoned_log_dirs: tuple[str, ...] = ()  # `*` or paths of log.dirs (KIP-1066)
    advertised_listener: HttpListener | None = None
    kafka_listeners: tuple[KafkaListener, ...] = ()
    advertised_kafka_listeners: tuple[KafkaListener, ...] = ()
    # Replication (issue 31): followers fetch over this Kafka listener of their leaders, logged in
    # with this SASL mechanism as the inter-broker user (`inter_broker_listener`).
    inter_broker_listener_name: str = "SASL_PLAINTEXT"
    sasl_mechanism_inter_broker_protocol: str = "SCRAM-SHA-512"
    telemetry_dir: Path | None = None  # disk samples for jbod-pipeline (jbod_agent/lifecycle/telemetry.py)
    telemetry_interval_ms: int = 60_000
    # Limits of the broker's HTTP server (docs/operations.md, "Limits").
    message_max_bytes: int = 1_048_588
    socket_request_max_bytes: int = 16 * 1024 * 1024
    connections_max_idle_ms: int = 600_000
    request_read_timeout_ms: int = 30_000
    producer_id_expiration_ms: int = 86_400_000  # Kafka's: idle idempotent producers are forgotten
    # The group coordinator (Kafka's keys and defaults; docs/decisions.md "Consumer groups").
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    offsets_commit_timeout_ms: int = 5000
    offsets_retention_minutes: int = 10_080  # 7 days; checked by `jbod_core.broker_configs`
    # The transaction coordinator (Kafka's keys and defaults; docs/operations.md, "Kafka clients").
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_min_isr: int = 2
    transaction_state_log_segment_bytes: int = 104_857_600
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    transaction_partition_verification_enable: bool = True  # KIP-890 part 1 on partition leaders
    offsets_retention_check_interval_ms: int = 600_000
    # Client quotas (issue 34): the samples of each client's rate (Kafka's keys and defaults).
    quota_window_num: int = 11
    quota_window_size_seconds: int = 1
    offset_metadata_max_bytes: int = 4096
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    # Topic auto-creation (Kafka's keys and defaults; jbod_core.auto_create). `num.partitions` and
    # `default.replication.factor` also fill a CreateTopics that leaves them at -1.
    auto_create_topics_enable: bool = True
    num_partitions: int = 1
    default_replication_factor: int = 1
    # TLS (issue 25; Kafka's keys, PEM only).
    ssl_keystore_location: Path | None = None
    ssl_truststore_location: Path | None = None
    ssl_client_auth: str = "none"
    ssl_listener_client_auth: str | None = None  # listener.name.ssl.ssl.client.auth
    sasl_ssl_listener_client_auth: str | None = None  # listener.name.sasl_ssl.ssl.client.auth
    # `listener.name.<name>.ssl.client.auth` of the other listener names, by upper-case name.
    listener_client_auth: Mapping[str, str] = field(default_factory=dict)
    # `listener.security.protocol.map` as given (name -> protocol); empty: Kafka's default map.
    listener_security_protocol_map: Mapping[str, str] = field(default_factory=dict)
    ssl_enabled_protocols: tuple[str, ...] = tls.DEFAULT_PROTOCOLS
    ssl_principal_mapping_rules: tuple[tls.PrincipalRule, ...] = tls.parse_principal_rules(
        tls.DEFAULT_PRINCIPAL_RULES
    )
    # The log cleaner's settings under Kafka's names (`log.cleaner.*`); the dynamic ones are read
    # over these through `jbod_agent.dynamic_configs.cleaner_settings`.
    log_cleaner: broker_configs.CleanerSettings = field(default_factory=broker_configs.CleanerSettings)
    # What server.properties (or --set) gave, key by key as written (blanks around trimmed):
    # DescribeConfigs shows them as STATIC_BROKER_CONFIG, and the topic defaults read them.
    given_values: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def given_keys(self) -> frozenset[str]:
        return frozenset(self.given_values)

    @property
    def static_levels(self) -> broker_configs.BrokerLevels:
        """The broker config levels of server.properties alone (no dynamic value)."""
        return broker_configs.BrokerLevels(own={}, cluster_default={}, static=self.given_values)

    @property
    def auto_create_settings(self) -> auto_create.AutoCreateSettings:
        return auto_create.AutoCreateSettings(
            enabled=self.auto_create_topics_enable,
            num_partitions=self.num_partitions,
            replication_factor=self.default_replication_factor,
        )

    @property
    def tls_files(self) -> tls.TlsFiles:
        """The TLS files and modes of the broker's https API (`ssl.client.auth`)."""
        return self.tls_files_of(self.ssl_client_auth)

    def tls_files_of(self, client_auth: str) -> tls.TlsFiles:
        """The TLS files, asking clients for certificates as `client_auth` says."""
        return tls.TlsFiles(
            keystore=self.ssl_keystore_location,
            truststore=self.ssl_truststore_location,
            client_auth=client_auth,
            protocols=self.ssl_enabled_protocols,
        )

    @property
    def inter_broker_listener(self) -> KafkaListener:
        """The Kafka listener followers fetch from (every broker of a cluster names the same)."""
        return next(k for k in self.kafka_listeners if k.name == self.inter_broker_listener_name)

    def client_auth_of(self, listener: KafkaListener) -> str:
        """Whether a TLS Kafka listener asks for client certificates, as Kafka decides: its own
        `listener.name.<name>.ssl.client.auth`, else `ssl.client.auth` for an SSL listener and
        none for SASL_SSL (KIP-684: a broker-wide setting never reaches SASL_SSL)."""
        own = {"SSL": self.ssl_listener_client_auth, "SASL_SSL": self.sasl_ssl_listener_client_auth}
        mode = self.listener_client_auth.get(listener.name) or own.get(listener.name)
        if mode:
            return mode
        return self.ssl_client_auth if listener.security_protocol == "SSL" else "none"

    def client_tls(self) -> tls.ClientTls:
        """A client TLS context for the broker's outbound https calls (controller, peers): the
        truststore (else the system's CAs), and the keystore as client certificate."""
        return tls.ClientTls(
            self.ssl_truststore_location,
            keystore=self.ssl_keystore_location,
            protocols=self.ssl_enabled_protocols,
        )

    @property
    def controller_urls(self) -> list[str]:
        """`controller.url` as the list of controllers a `ControllerLink` follows."""
        return parse_controller_urls(self.controller_url)


def _int(low: int, high: int) -> Callable[[str, str], int]:
    def parse(key: str, value: str) -> int:
        try:
            number = int(value.strip())
        except ValueError:
            raise ConfigError(f"{key}: '{value}' is not an integer") from None
        if not low <= number <= high:
            raise ConfigError(f"{key}: {number} is out of range [{low}, {high}]")
        return number

    return parse


def _path(key: str, value: str) -> Path:
    if not value.strip():
        raise ConfigError(f"{key}: must not be empty")
    return Path(value.strip())


def _paths(key: str, value: str) -> tuple[Path, ...]:
    parts = [p.strip() for p in value.split(",")]
    if not parts or any(not p for p in parts):
        raise ConfigError(f"{key}: expected a comma-separated list of directories, got '{value}'")
    paths = tuple(Path(p) for p in parts)
    if len({p.resolve() for p in paths}) != len(paths):
        raise ConfigError(f"{key}: lists the same directory more than once")
    return paths


def _cordoned(key: str, value: str) -> tuple[str, ...]:
    """`*` or log dir paths (each checked against `log.dirs` once every key is read)."""
    entries = tuple(e.strip() for e in value.split(",") if e.strip())
    if "*" in entries and len(entries) > 1:
        raise ConfigError(f"{key}: '*' cannot be listed with other log dirs")
    return entries


def _url(key: str, value: str) -> str:
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{key}: '{value}' is not an http(s) URL")
    try:
        _ = parts.port
    except ValueError:
        raise ConfigError(f"{key}: '{value}' has an invalid port") from None
    return value.strip().rstrip("/")


def _urls(key: str, value: str) -> str:
    """One controller URL or a comma-separated list of them (contract §3.8), each checked like
    `_url`; the list comes back normalized, as `ControllerLink` takes it."""
    try:
        urls = parse_controller_urls(value)
    except ValueError:
        raise ConfigError(
            f"{key}: '{value}' is not an http(s) URL (or a comma-separated list of them)"
        ) from None
    if len(urls) == 1:
        return _url(key, value)
    return ",".join(_url(key, url) for url in urls)


def _listeners(key: str, value: str) -> Listeners:
    """`http://HOST:PORT` (the HTTP API) and Kafka's `PROTOCOL://HOST:PORT` entries, comma-separated."""
    entries = [v.strip() for v in value.split(",") if v.strip()]
    if not entries:
        raise ConfigError(f"{key}: expected listeners like SASL_PLAINTEXT://127.0.0.1:9092, got '{value}'")
    http: HttpListener | None = None
    kafka: list[KafkaListener] = []
    for entry in entries:
        scheme, sep, rest = entry.partition("://")
        # urlsplit does not take Kafka's names as schemes (an underscore), so parse //HOST:PORT.
        parts = urlsplit("//" + rest)
        try:
            port = parts.port
        except ValueError:
            raise ConfigError(f"{key}: '{entry}' has an invalid port") from None
        if not sep or not parts.hostname or port is None or parts.path:
            raise ConfigError(f"{key}: expected NAME://HOST:PORT, got '{entry}'")
        if scheme in HTTP_SCHEMES:
            if http is not None:
                raise ConfigError(f"{key}: more than one http(s):// listener in '{value}'")
            http = HttpListener(scheme=scheme, host=parts.hostname, port=port)
        elif LISTENER_NAME.fullmatch(scheme):
            name = scheme.upper()  # Kafka's normalised listener name
            if any(k.name == name for k in kafka):
                raise ConfigError(f"{key}: more than one {name} listener in '{value}'")
            kafka.append(KafkaListener(name, parts.hostname, port))
        else:
            raise ConfigError(
                f"{key}: unknown listener name '{scheme}' in '{entry}' "
                f"(http, https or a Kafka listener name such as {', '.join(KAFKA_PROTOCOLS)})"
            )
    return Listeners(http, tuple(kafka))


def _pem(key: str, value: str) -> str:
    if value.strip().upper() != "PEM":
        raise ConfigError(f"{key}: '{value}' is not supported: only PEM is")
    return "PEM"


def _tls(parse: Callable[[str], Any]) -> Callable[[str, str], Any]:
    def parse_key(key: str, value: str) -> Any:
        try:
            return parse(value)
        except tls.TlsConfigError as exc:
            raise ConfigError(f"{key}: {exc}") from None

    return parse_key


def _bool(key: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "yes", "1"):
        return True
    if lowered in ("false", "no", "0"):
        return False
    raise ConfigError(f"{key}: '{value}' is not true or false")


def _text(key: str, value: str) -> str:
    if not value.strip():
        raise ConfigError(f"{key}: must not be empty")
    return value.strip()


def _replica_selector(key: str, value: str) -> str:
    problem = replica_selector.selector_error(value)
    if problem is not None:
        raise ConfigError(problem)
    return value.strip()


# The controller's rule (docs/decisions.md); anything else could never register, and a line break
# would corrupt the meta.properties it is written into.
CLUSTER_ID_PATTERN: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _cluster_id(key: str, value: str) -> str:
    if not CLUSTER_ID_PATTERN.fullmatch(value.strip()):
        raise ConfigError(f"{key}: '{value}' is not 1-64 characters of A-Z a-z 0-9 _ -")
    return value.strip()


def _super_users(key: str, value: str) -> frozenset[str]:
    """Kafka's `super.users`: `User:a;User:b`, each principal `Type:name`."""
    principals = acls.parse_super_users(value)
    for principal in principals:
        kind, _colon, name = principal.partition(":")
        if not kind or not name:
            raise ConfigError(f"{key}: '{principal}' is not a principal Type:name (e.g. User:alice)")
    return principals


def _listener_name(key: str, value: str) -> str:
    """A Kafka listener's name (checked against `listeners` once every key is read)."""
    name = value.strip()
    if not LISTENER_NAME.fullmatch(name):
        raise ConfigError(f"{key}: '{value}' is not a listener name")
    return name.upper()


def _protocol(key: str, value: str) -> str:
    """A security protocol (`security.inter.broker.protocol`)."""
    name = value.strip().upper()
    if name not in KAFKA_PROTOCOLS:
        raise ConfigError(f"{key}: '{value}' is not one of {', '.join(KAFKA_PROTOCOLS)}")
    return name


def _protocol_map(key: str, value: str) -> dict[str, str]:
    """Kafka's `listener.security.protocol.map`: `NAME:PROTOCOL` pairs, each name once."""
    mapping: dict[str, str] = {}
    for entry in (e.strip() for e in value.split(",") if e.strip()):
        name, sep, protocol = entry.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not LISTENER_NAME.fullmatch(name):
            raise ConfigError(f"{key}: expected NAME:PROTOCOL, got '{entry}'")
        if protocol not in KAFKA_PROTOCOLS:
            raise ConfigError(f"{key}: '{protocol}' of {name} is not one of {', '.join(KAFKA_PROTOCOLS)}")
        if name in mapping:
            raise ConfigError(f"{key}: {name} is listed more than once")
        mapping[name] = protocol
    if not mapping:
        raise ConfigError(f"{key}: expected NAME:PROTOCOL pairs, got '{value}'")
    return mapping


def _providers(key: str, value: str) -> str:
    """`config.providers`: only Kafka's `file` provider (`${file:PATH:KEY}` references)."""
    if value.strip() != "file":
        raise ConfigError(f"{key}: '{value}' is not supported: only file is")
    return "file"


def _provider_class(key: str, value: str) -> str:
    if value.strip() != FILE_CONFIG_PROVIDER:
        raise ConfigError(f"{key}: '{value}' is not supported: only {FILE_CONFIG_PROVIDER} is")
    return value.strip()


#: The SASL mechanisms a follower can log in to its leaders with.
INTER_BROKER_MECHANISMS: Final = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")


def _inter_broker_mechanism(key: str, value: str) -> str:
    if value.strip() not in INTER_BROKER_MECHANISMS:
        raise ConfigError(f"{key}: '{value}' is not one of {', '.join(INTER_BROKER_MECHANISMS)}")
    return value.strip()


def _auto_create(key: str, value: str) -> bool | int:
    try:
        return auto_create.parse_setting(key, value)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


_MAX_MS: Final = 2**31 - 1
_KEYS: Final[dict[str, tuple[str, Callable[[str, str], Any]]]] = {
    "node.id": ("node_id", _int(0, 2**31 - 1)),
    "log.dirs": ("log_dirs", _paths),
    "metadata.log.dir": ("metadata_log_dir", _path),
    "controller.url": ("controller_url", _urls),
    "listeners": ("listener", _listeners),
    "advertised.listeners": ("advertised_listener", _listeners),
    "cluster.token.file": ("cluster_token_file", _path),
    "admin.token.file": ("admin_token_file", _path),
    "broker.heartbeat.interval.ms": ("heartbeat_interval_ms", _int(10, _MAX_MS)),
    "broker.session.timeout.ms": ("session_timeout_ms", _int(100, _MAX_MS)),
    "log.dir.failure.timeout.ms": ("log_dir_failure_timeout_ms", _int(1, _MAX_MS)),
    "log.dir.probe.interval.ms": ("log_dir_probe_interval_ms", _int(10, _MAX_MS)),
    "log.dir.probe.timeout.ms": ("log_dir_probe_timeout_ms", _int(10, _MAX_MS)),
    "replica.lag.time.max.ms": ("replica_lag_time_max_ms", _int(1, _MAX_MS)),
    "broker.rack": ("rack", _text),
    "replica.selector.class": ("replica_selector_class", _replica_selector),
    "log.dirs.format.on.start": ("format_on_start", _bool),
    "cluster.id": ("cluster_id", _cluster_id),
    "super.users": ("super_users", _super_users),
    "allow.everyone.if.no.acl.found": ("allow_everyone_if_no_acl_found", _bool),
    "log.retention.check.interval.ms": ("log_retention_check_interval_ms", _int(10, _MAX_MS)),
    "log.flush.interval.ms": ("log_flush_interval_ms", _int(10, _MAX_MS)),
    "replica.fetch.max.bytes": ("replica_fetch_max_bytes", _int(1024, 2**31 - 1)),
    "replica.fetch.response.max.bytes": ("replica_fetch_response_max_bytes", _int(1024, 2**31 - 1)),
    "replica.fetch.wait.max.ms": ("replica_fetch_wait_max_ms", _int(0, 60_000)),
    "replica.alter.log.dirs.io.max.bytes.per.second": ("replica_move_max_bytes_per_second", _int(-1, 2**62)),
    "leader.replication.throttled.rate": ("leader_replication_throttled_rate", _int(-1, 2**62)),
    "follower.replication.throttled.rate": ("follower_replication_throttled_rate", _int(-1, 2**62)),
    "cordoned.log.dirs": ("cordoned_log_dirs", _cordoned),
    "telemetry.dir": ("telemetry_dir", _path),
    "telemetry.interval.ms": ("telemetry_interval_ms", _int(100, _MAX_MS)),
    "socket.request.max.bytes": ("socket_request_max_bytes", _int(1024, 2**31 - 1)),
    "connections.max.idle.ms": ("connections_max_idle_ms", _int(100, _MAX_MS)),
    "request.read.timeout.ms": ("request_read_timeout_ms", _int(100, _MAX_MS)),
    "producer.id.expiration.ms": ("producer_id_expiration_ms", _int(1, _MAX_MS)),
    "offsets.topic.num.partitions": ("offsets_topic_num_partitions", _int(1, 10_000)),
    "offsets.topic.replication.factor": ("offsets_topic_replication_factor", _int(1, 32_767)),
    "offsets.commit.timeout.ms": ("offsets_commit_timeout_ms", _int(1, _MAX_MS)),
    "offset.metadata.max.bytes": ("offset_metadata_max_bytes", _int(0, _MAX_MS)),
    "group.initial.rebalance.delay.ms": ("group_initial_rebalance_delay_ms", _int(0, _MAX_MS)),
    "group.min.session.timeout.ms": ("group_min_session_timeout_ms", _int(1, _MAX_MS)),
    "group.max.session.timeout.ms": ("group_max_session_timeout_ms", _int(1, _MAX_MS)),
    auto_create.AUTO_CREATE_TOPICS_ENABLE: ("auto_create_topics_enable", _auto_create),
    auto_create.NUM_PARTITIONS: ("num_partitions", _auto_create),
    auto_create.DEFAULT_REPLICATION_FACTOR: ("default_replication_factor", _auto_create),
    "ssl.keystore.type": ("", _pem),
    "ssl.truststore.type": ("", _pem),
    "ssl.keystore.location": ("ssl_keystore_location", _path),
    "ssl.truststore.location": ("ssl_truststore_location", _path),
    "ssl.client.auth": ("ssl_client_auth", _tls(tls.parse_client_auth)),
    "listener.name.ssl.ssl.client.auth": ("ssl_listener_client_auth", _tls(tls.parse_client_auth)),
    "listener.name.sasl_ssl.ssl.client.auth": ("sasl_ssl_listener_client_auth", _tls(tls.parse_client_auth)),
    "ssl.enabled.protocols": ("ssl_enabled_protocols", _tls(tls.parse_protocols)),
    "ssl.principal.mapping.rules": ("ssl_principal_mapping_rules", _tls(tls.parse_principal_rules)),
    "inter.broker.listener.name": ("inter_broker_listener_name", _listener_name),
    "security.inter.broker.protocol": ("security_inter_broker_protocol", _protocol),
    "listener.security.protocol.map": ("listener_security_protocol_map", _protocol_map),
    "config.providers": ("", _providers),
    "config.providers.file.class": ("", _provider_class),
    "sasl.mechanism.inter.broker.protocol": ("sasl_mechanism_inter_broker_protocol", _inter_broker_mechanism),
}


def _broker_key(key: str, value: str) -> Any:
    """A broker config `jbod_core.broker_configs` checks (the topic defaults and the log
    cleaner's settings under Kafka's names): its value as Kafka reads it, or Kafka's message."""
    parsed = broker_configs.parse(key, value.strip())
    if isinstance(parsed, topic_configs.ConfigProblem):
        raise ConfigError(parsed.message)
    return parsed


# The topic defaults, the log cleaner's settings, the offsets expiry and the transaction
# coordinator's keys: checked by
# `jbod_core.broker_configs`; the ones the broker reads as numbers also land in a field.
_FIELDS_OF_BROKER_KEYS: Final = {
    "message.max.bytes": "message_max_bytes",
    "min.insync.replicas": "min_insync_replicas",
    "log.retention.bytes": "log_retention_bytes",
    "log.segment.bytes": "log_segment_bytes",
    "offsets.retention.minutes": "offsets_retention_minutes",
    "offsets.retention.check.interval.ms": "offsets_retention_check_interval_ms",
    "quota.window.num": "quota_window_num",
    "quota.window.size.seconds": "quota_window_size_seconds",
    **{
        key: key.replace(".", "_")
        for key in (
            "transaction.state.log.num.partitions",
            "transaction.state.log.replication.factor",
            "transaction.state.log.min.isr",
            "transaction.state.log.segment.bytes",
            "transaction.max.timeout.ms",
            "transactional.id.expiration.ms",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            "transaction.remove.expired.transaction.cleanup.interval.ms",
            "transaction.partition.verification.enable",
        )
    },
}
_KEYS.update(
    {
        key: (_FIELDS_OF_BROKER_KEYS.get(key, ""), _broker_key)
        for key in sorted(broker_configs.HONOURED_KEYS)
        if key not in _KEYS
    }
)
# Java properties semantics: the rest of a line after `key=` is the value, `#` included.
INLINE_COMMENT_NOTE: Final = (
    "inline comments are not allowed: '#' starts a comment only at the beginning of a line"
)
REQUIRED: Final = ("node.id", "log.dirs", "metadata.log.dir", "controller.url", "cluster.token.file")
DEFAULT_LISTENER: Final = "http://127.0.0.1:9092"


def parse_overrides(items: Sequence[str]) -> dict[str, str]:
    """`--set key=value` arguments into a dict; `ConfigError` for an item without '='."""
    overrides: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got '{item}'")
        overrides[key.strip()] = value
    return overrides


def _resolve_files(values: dict[str, str], provided: Mapping[str, Mapping[str, str]]) -> None:
    """Replaces each `${file:PATH:KEY}` by KEY of the properties file PATH (Kafka's
    FileConfigProvider), `provided` holding the files read; needs `config.providers=file`."""
    for key, value in values.items():
        if "${file:" not in value:
            continue
        if values.get("config.providers", "").strip() != "file":
            raise ConfigError(f"{key}: '{value}' refers to a file but config.providers is not file")

        def lookup(match: re.Match[str], key: str = key) -> str:
            path, name = match.group(1), match.group(2)
            if path not in provided:
                raise ConfigError(f"{key}: cannot read {path}")
            if name not in provided[path]:
                raise ConfigError(f"{key}: {path} has no key {name}")
            return provided[path][name]

        values[key] = FILE_REFERENCE.sub(lookup, value)


def _listener_client_auth(values: Mapping[str, str]) -> dict[str, str]:
    """`listener.name.<name>.ssl.client.auth` of the names without a key of their own, by name."""
    modes: dict[str, str] = {}
    for key, value in values.items():
        own = None if key in _KEYS else _LISTENER_CLIENT_AUTH.fullmatch(key)
        if own is not None:
            modes[own.group(1).upper()] = _tls(tls.parse_client_auth)(key, value)
    return modes


def file_references(text: str, overrides: Mapping[str, str] | None = None) -> list[str]:
    """The files the `${file:PATH:KEY}` references of the properties and overrides name."""
    values = [*parse_properties(text).values(), *(overrides or {}).values()]
    return sorted({m.group(1) for value in values for m in FILE_REFERENCE.finditer(value)})


def parse_config(
    text: str,
    overrides: Mapping[str, str] | None = None,
    provided: Mapping[str, Mapping[str, str]] | None = None,
) -> BrokerConfig:
    """The broker's configuration; `provided` holds the properties files (by path) that
    `${file:PATH:KEY}` references name (`load_config` reads them)."""
    values = parse_properties(text)
    values.update(overrides or {})
    _resolve_files(values, provided or {})
    client_auth = _listener_client_auth(values)
    unknown = sorted(k for k in values if k not in _KEYS and not _LISTENER_CLIENT_AUTH.fullmatch(k))
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown configuration key")
    for key in REQUIRED:
        if key not in values:
            raise ConfigError(f"{key}: required key is missing")
    given = {key: value.strip() for key, value in values.items()}
    values.setdefault("listeners", DEFAULT_LISTENER)
    fields: dict[str, Any] = {"listener_client_auth": client_auth}
    for key, value in ((k, v) for k, v in values.items() if k in _KEYS):  # not client_auth's
        try:
            parsed = _KEYS[key][1](key, value)
            if _KEYS[key][0]:  # a key with no field is only checked (ssl.keystore.type=PEM)
                fields[_KEYS[key][0]] = parsed
        except ConfigError as exc:
            if "#" in value:
                raise ConfigError(f"{exc} ({INLINE_COMMENT_NOTE})") from None
            raise
    _split_listeners(fields)
    _inter_broker_listener(fields)
    levels = broker_configs.BrokerLevels(own={}, cluster_default={}, static=given)
    retention_ms = broker_configs.fallback_value("log.retention.ms", levels)
    fields["log_retention_ms"] = -1 if retention_ms is None or retention_ms < 0 else retention_ms
    fields["log_cleaner"] = broker_configs.cleaner_settings(levels)
    config = BrokerConfig(**fields, given_values=given)
    if config.heartbeat_interval_ms >= config.session_timeout_ms:
        raise ConfigError(
            f"broker.heartbeat.interval.ms: {config.heartbeat_interval_ms} must be below "
            f"broker.session.timeout.ms ({config.session_timeout_ms})"
        )
    if config.metadata_log_dir.resolve() in {p.resolve() for p in config.log_dirs}:
        raise ConfigError("metadata.log.dir: must not also be one of log.dirs")
    if config.group_min_session_timeout_ms > config.group_max_session_timeout_ms:
        raise ConfigError(
            f"group.min.session.timeout.ms: {config.group_min_session_timeout_ms} is above "
            f"group.max.session.timeout.ms ({config.group_max_session_timeout_ms})"
        )
    known = {str(p) for p in config.log_dirs}
    strays = [p for p in config.cordoned_log_dirs if p != "*" and str(Path(p)) not in known]
    if strays:
        raise ConfigError(f"cordoned.log.dirs: {strays[0]} is not one of log.dirs")
    if config.format_on_start and config.cluster_id is None:
        raise ConfigError("cluster.id: required when log.dirs.format.on.start is true")
    _check_tls(config)
    return config


def _check_tls(config: BrokerConfig) -> None:
    tls_listeners = [str(k) for k in config.kafka_listeners if k.tls]
    if config.listener.scheme == "https":
        tls_listeners.insert(0, config.listener.url)
    if tls_listeners and config.ssl_keystore_location is None:
        raise ConfigError(f"ssl.keystore.location: required by the TLS listener {tls_listeners[0]}")
    asking = [("ssl.client.auth", config.ssl_client_auth)]
    asking += [
        (f"listener.name.{k.name.lower()}.ssl.client.auth", config.client_auth_of(k))
        for k in config.kafka_listeners
        if k.tls
    ]
    for key, mode in asking:
        if mode != "none" and config.ssl_truststore_location is None:
            raise ConfigError(f"ssl.truststore.location: required by {key}={mode}")


def _split_listeners(fields: dict[str, Any]) -> None:
    """`listeners` and `advertised.listeners` into the HTTP API's listener and the Kafka ones.
    Without an http:// entry the HTTP API listens on the first Kafka listener's host, on a port
    of its own choosing (advertised with the first advertised Kafka listener's host): https when
    one of the Kafka listeners is TLS, http otherwise."""
    listeners: Listeners = fields.pop("listener")
    mapping: Mapping[str, str] = fields.get("listener_security_protocol_map") or {
        p: p for p in KAFKA_PROTOCOLS
    }
    kafka = []
    for listener in listeners.kafka:
        if listener.name not in mapping:
            raise ConfigError(
                f"listener.security.protocol.map: no security protocol for the listener {listener.name}"
            )
        protocol = mapping[listener.name]
        kafka.append(replace(listener, protocol=None if protocol == listener.name else protocol))
    listeners = Listeners(listeners.http, tuple(kafka))
    protocols = {k.name: k.protocol for k in kafka}
    scheme = "https" if any(k.tls for k in listeners.kafka) else "http"
    if listeners.http is None:
        first = listeners.kafka[0]
        fields["listener"] = HttpListener(scheme=scheme, host=first.host, port=0)
    else:
        fields["listener"] = listeners.http
    fields["kafka_listeners"] = listeners.kafka
    advertised: Listeners | None = fields.pop("advertised_listener", None)
    if advertised is None:
        return
    unknown = sorted({k.name for k in advertised.kafka} - {k.name for k in listeners.kafka})
    if unknown:
        raise ConfigError(f"advertised.listeners: {unknown[0]} is not one of listeners")
    if advertised.http is None and listeners.http is not None and advertised.kafka:
        raise ConfigError("advertised.listeners: the http:// listener of listeners is not advertised")
    if advertised.http is not None:
        if advertised.http.scheme != fields["listener"].scheme:
            raise ConfigError(
                f"advertised.listeners: {advertised.http.url} is not the {fields['listener'].scheme}:// "
                "listener of listeners"
            )
        fields["advertised_listener"] = advertised.http
    elif advertised.kafka:
        fields["advertised_listener"] = HttpListener(
            scheme=fields["listener"].scheme, host=advertised.kafka[0].host, port=0
        )
    fields["advertised_kafka_listeners"] = tuple(
        replace(k, protocol=protocols[k.name]) for k in advertised.kafka
    )


def _inter_broker_listener(fields: dict[str, Any]) -> None:
    """Which Kafka listener replication uses, as Kafka decides it: `inter.broker.listener.name`,
    else `security.inter.broker.protocol` (not both), else (our default, where Kafka's is
    PLAINTEXT) the first Kafka listener. A broker whose `listeners` has no Kafka listener (the
    contract's `http://` only) gets one for replication: SASL_PLAINTEXT (SASL_SSL when the HTTP API
    is https) on the HTTP API's host, on a port of its own choosing, advertised with the HTTP
    API's advertised host (docs/decisions.md, "One data path")."""
    named = fields.pop("inter_broker_listener_name", None)
    protocol = fields.pop("security_inter_broker_protocol", None)
    if named is not None and protocol is not None:
        raise ConfigError(
            "security.inter.broker.protocol: only one of it and inter.broker.listener.name may be set"
        )
    kafka: tuple[KafkaListener, ...] = fields["kafka_listeners"]
    if not kafka:
        http: HttpListener = fields["listener"]
        implicit = KafkaListener("SASL_SSL" if http.scheme == "https" else "SASL_PLAINTEXT", http.host, 0)
        fields["kafka_listeners"] = kafka = (implicit,)
        advertised: HttpListener | None = fields.get("advertised_listener")
        if advertised is not None:
            fields["advertised_kafka_listeners"] = (KafkaListener(implicit.name, advertised.host, 0),)
    wanted = named or protocol
    if wanted is None:
        fields["inter_broker_listener_name"] = kafka[0].name
        return
    if wanted not in {k.name for k in kafka}:
        key = "inter.broker.listener.name" if named else "security.inter.broker.protocol"
        raise ConfigError(f"{key}: {wanted} is not one of listeners")
    fields["inter_broker_listener_name"] = wanted


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"cannot read {path}: {reason}") from exc


def load_config(path: Path, overrides: Mapping[str, str] | None = None) -> BrokerConfig:
    """`parse_config` of the file `path`, with the files its `${file:PATH:KEY}` references name."""
    text = _read(path)
    provided = {name: parse_properties(_read(Path(name))) for name in file_references(text, overrides)}
    return parse_config(text, overrides, provided)
