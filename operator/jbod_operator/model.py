"""Typed, validated specs of `JbodCluster` and `JbodBroker` (the CRDs in `crds/` are the source of truth).

The API server already enforces the CRD schema; these models parse the same shapes into frozen
values and add the checks a schema cannot express (a cluster name short enough for the names it
derives, a replication factor the broker count can hold). `SpecError` carries one line naming
the field, used for the `PermanentError` and the `Ready=False, reason InvalidSpec` condition.
"""

from __future__ import annotations

import re
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from jbod_core.messages import MAX_PARTITIONS_PER_REQUEST

MAX_CLUSTER_NAME: Final = 40  # keeps `<cluster>-broker-<id>` a DNS label (63) for up to 10 digits of id
_QUANTITY: Final = re.compile(r"^([0-9]+(\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?$")
_BINARY: Final = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: Final = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "m": 1e-3}
RESERVED_DISK_NAMES: Final = frozenset({"metadata"})


class SpecError(ValueError):
    """An invalid spec; `str()` is one line naming the field."""


def quantity_bytes(text: str) -> int:
    """A Kubernetes quantity (`100Gi`, `1.5G`, `500M`) in bytes, rounded up; `SpecError` if it is not one."""
    match = _QUANTITY.fullmatch(text.strip())
    if not match:
        raise SpecError(f"'{text}' is not a quantity such as 100Gi")
    number = float(match.group(1))
    suffix = match.group(3) or ""
    scale = _BINARY.get(suffix) or _DECIMAL.get(suffix) or 1
    value = number * scale
    return int(value) if value == int(value) else int(value) + 1


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")


class Volume(_Frozen):
    size: str = "1Gi"
    storage_class: str | None = Field(default=None, alias="storageClass")

    @field_validator("size")
    @classmethod
    def _size(cls, value: str) -> str:
        if quantity_bytes(value) <= 0:
            raise SpecError(f"'{value}' must be positive")
        return value

    @property
    def size_bytes(self) -> int:
        return quantity_bytes(self.size)


#: The longest name of a disk in a cluster's spec; a broker's volume moved for it is named
#: `<name>-m<n>` (`plan.successor_name`), within `MAX_VOLUME_NAME`.
MAX_DISK_NAME = 20
MAX_VOLUME_NAME = 24


class Disk(Volume):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=MAX_VOLUME_NAME)
    removed: bool = False
    # In a JbodBroker: the cluster's disk this volume serves when it is not named after it (a
    # disk moved to another size or StorageClass gets a new volume, `<name>-m<n>`).
    spec_name: str | None = Field(default=None, alias="specName")
    # How far the operator may grow the disk's claim when its broker cordons it for its space
    # (`disk_growth`); None: never beyond `size`.
    max_size: str | None = Field(default=None, alias="maxSize")
    # The Kubernetes VolumeAttributesClass of the disk's claims (IOPS, throughput: whatever the
    # CSI driver lets change in place); a change is applied to the claims in place, never a move
    # (`volume_attributes`). None: the claims get none, and keep the one they have.
    volume_attributes_class: str | None = Field(
        default=None, alias="volumeAttributesClassName", min_length=1, max_length=253
    )

    @field_validator("max_size")
    @classmethod
    def _max_size(cls, value: str | None) -> str | None:
        if value is not None and quantity_bytes(value) <= 0:
            raise SpecError(f"maxSize '{value}' must be positive")
        return value

    @model_validator(mode="after")
    def _max_size_not_below_size(self) -> Disk:
        if self.max_size is not None and quantity_bytes(self.max_size) < self.size_bytes:
            raise SpecError(f"disk {self.name}: maxSize {self.max_size} is below its size {self.size}")
        return self

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value in RESERVED_DISK_NAMES:
            raise SpecError(f"'{value}' is reserved for the metadata disk")
        return value

    @property
    def serves(self) -> str:
        """The name of the cluster's disk this volume is for."""
        return self.spec_name or self.name


class Resources(_Frozen):
    limits: dict[str, int | str] = {}
    requests: dict[str, int | str] = {}


class EtcdSpec(_Frozen):
    """Where the controller quorum keeps its log: an existing etcd, or one the operator runs."""

    endpoints: tuple[str, ...] = Field(default=(), max_length=9)
    # A Secret with `ca.crt` (and `tls.crt`, `tls.key` for client certificates) for https endpoints.
    tls_secret: str | None = Field(default=None, alias="tlsSecret", max_length=253)
    # The image of the etcd the operator runs (no endpoints); None: names.ETCD_IMAGE.
    image: str | None = Field(default=None, min_length=1, max_length=512)
    storage: Volume = Volume()
    resources: Resources = Resources()

    @field_validator("endpoints")
    @classmethod
    def _urls(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for url in value:
            if not url.startswith(("http://", "https://")) or len(url) > 253:
                raise ValueError(f"etcd endpoint {url!r} must be an http(s):// URL")
        return value

    @model_validator(mode="after")
    def _tls_needs_endpoints(self) -> EtcdSpec:
        if self.tls_secret and not self.endpoints:
            raise ValueError("tlsSecret is for an existing etcd: give endpoints (https://) too")
        if self.tls_secret and any(not url.startswith("https://") for url in self.endpoints):
            raise ValueError("tlsSecret needs https:// endpoints")
        if self.image and self.endpoints:
            raise ValueError("image is for the etcd the operator runs: it is not used with endpoints")
        return self


class ControllerSpec(_Frozen):
    # 1: one controller and its file log (the default); 3 or 5: a quorum on etcd (§3.8).
    replicas: Literal[1, 3, 5] = 1
    etcd: EtcdSpec = EtcdSpec()
    storage: Volume = Volume()
    resources: Resources = Resources()

    @property
    def quorum(self) -> bool:
        return self.replicas > 1

    @property
    def runs_etcd(self) -> bool:
        """The operator runs a 3-member etcd for the quorum (no `etcd.endpoints` given)."""
        return self.quorum and not self.etcd.endpoints


class BrokerSettings(_Frozen):
    heartbeat_interval_ms: int = Field(default=2000, ge=10, alias="heartbeatIntervalMs")
    session_timeout_ms: int = Field(default=9000, ge=100, alias="sessionTimeoutMs")
    log_dir_failure_timeout_ms: int = Field(default=30000, ge=1, alias="logDirFailureTimeoutMs")
    log_dir_probe_interval_ms: int = Field(default=1000, ge=10, alias="logDirProbeIntervalMs")
    min_insync_replicas: int = Field(default=1, ge=1, alias="minInsyncReplicas")
    default_replication_factor: int | None = Field(default=None, ge=1, alias="defaultReplicationFactor")
    replica_lag_time_max_ms: int = Field(default=30000, ge=1, alias="replicaLagTimeMaxMs")
    # Topic auto-creation (Kafka's keys; jbod_core.auto_create): on by default, as Kafka; a
    # created topic has `numPartitions` partitions and the default replication factor.
    auto_create_topics_enable: bool = Field(default=True, alias="autoCreateTopicsEnable")
    num_partitions: int = Field(default=1, ge=1, le=MAX_PARTITIONS_PER_REQUEST, alias="numPartitions")


DiskFailurePolicy = Literal["Manual", "Automatic"]
RebalancePolicy = Literal["Never", "OnScaleUp"]


class DrainSettings(_Frozen):
    """How the operator moves replicas off a disk or broker leaving the spec (and onto new brokers)."""

    # The replication throttle of a reassignment (Kafka's leader/follower rates on every broker
    # involved) and the rate of each intra-broker move, bytes per second.
    max_bytes_per_second: int = Field(default=50_000_000, ge=1, alias="maxBytesPerSecond")
    # Partitions reassigned at once in the cluster, and replicas moved at once per broker.
    max_partitions_in_flight: int = Field(default=5, ge=1, le=1000, alias="maxPartitionsInFlight")


# ---------------------------------------------------------------------------------------------
# spec.template (pod scheduling): Strimzi's `template`, one entry per kind of pod. The subtrees
# typed by Kubernetes itself (affinity, tolerations, ...) are kept as given: the API server
# checks them when the pod or StatefulSet is applied.

_KubeObject = dict[str, Any]
# Label keys the operator sets on its pods (names.cluster_labels, names.broker_labels): a
# template may not override them, the Services, budgets and selectors depend on them.
OPERATOR_LABELS: Final = frozenset(
    {
        "app.kubernetes.io/name",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/managed-by",
        "app.kubernetes.io/component",
        "jbod.dev/cluster",
        "jbod.dev/broker-id",
    }
)
OPERATOR_PREFIX: Final = "jbod.dev/"  # the operator's own annotations (spec hash, config hash, ...)


class TemplateMetadata(_Frozen):
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}

    @field_validator("labels")
    @classmethod
    def _not_the_operators_labels(cls, value: dict[str, str]) -> dict[str, str]:
        taken = sorted(key for key in value if key in OPERATOR_LABELS or key.startswith(OPERATOR_PREFIX))
        if taken:
            raise SpecError(f"label {taken[0]} is set by the operator")
        return value

    @field_validator("annotations")
    @classmethod
    def _not_the_operators_annotations(cls, value: dict[str, str]) -> dict[str, str]:
        taken = sorted(key for key in value if key.startswith(OPERATOR_PREFIX))
        if taken:
            raise SpecError(f"annotation {taken[0]} is set by the operator")
        return value


class PodTemplate(_Frozen):
    metadata: TemplateMetadata = TemplateMetadata()
    affinity: _KubeObject | None = None
    tolerations: tuple[_KubeObject, ...] = ()
    topology_spread_constraints: tuple[_KubeObject, ...] = Field(
        default=(), alias="topologySpreadConstraints"
    )
    priority_class_name: str | None = Field(default=None, alias="priorityClassName", max_length=253)
    node_selector: dict[str, str] = Field(default={}, alias="nodeSelector")
    # Merged over the operator's (runAsNonRoot, runAsUser 10001, fsGroup, seccomp): key by key.
    security_context: _KubeObject = Field(default={}, alias="securityContext")
    image_pull_secrets: tuple[_KubeObject, ...] = Field(default=(), alias="imagePullSecrets")


class ContainerTemplate(_Frozen):
    # Merged over the operator's (read-only root filesystem, no privilege escalation, no capabilities).
    security_context: _KubeObject = Field(default={}, alias="securityContext")


class ComponentTemplate(_Frozen):
    pod: PodTemplate = PodTemplate()
    container: ContainerTemplate = ContainerTemplate()


class Templates(_Frozen):
    """`spec.template`: the broker pods', the controllers' and the etcd members'."""

    broker: ComponentTemplate = ComponentTemplate()
    controller: ComponentTemplate = ComponentTemplate()
    etcd: ComponentTemplate = ComponentTemplate()


Issuer = Literal["operator", "secret", "cert-manager"]


class TlsSpec(_Frozen):
    """TLS on every listener of the cluster (brokers, controllers, the etcd the operator runs).

    `issuer`: `operator` makes and rotates its own CA; `secret` signs with the user's CA from
    `caSecret` (`tls.crt`, `tls.key`); `cert-manager` leaves the pods' Secrets to cert-manager
    Certificates (docs/install.md) and the operator only mounts them."""

    enabled: bool = False
    issuer: Issuer = "operator"
    ca_secret: str | None = Field(default=None, alias="caSecret", min_length=1, max_length=253)
    validity_days: int = Field(default=365, ge=2, le=3650, alias="validityDays")
    renew_before_days: int = Field(default=30, ge=1, alias="renewBeforeDays")
    ca_validity_days: int = Field(default=1825, ge=2, le=36500, alias="caValidityDays")
    ca_renew_before_days: int = Field(default=180, ge=1, alias="caRenewBeforeDays")
    ca_expiration_policy: Literal["renew-certificate", "replace-key"] = Field(
        default="renew-certificate", alias="caExpirationPolicy"
    )

    @model_validator(mode="after")
    def _consistent(self) -> TlsSpec:
        if self.issuer == "secret" and not self.ca_secret:
            raise ValueError("issuer secret needs caSecret: a Secret with the CA's tls.crt and tls.key")
        if self.issuer != "secret" and self.ca_secret:
            raise ValueError("caSecret is only read with issuer: secret")
        if self.renew_before_days >= self.validity_days:
            raise ValueError("renewBeforeDays must be below validityDays")
        if self.ca_renew_before_days >= self.ca_validity_days:
            raise ValueError("caRenewBeforeDays must be below caValidityDays")
        if self.validity_days > self.ca_validity_days - self.ca_renew_before_days:
            raise ValueError(
                "validityDays must fit in the CA's life before its renewal (caValidityDays - caRenewBeforeDays)"
            )
        return self


ListenerType = Literal["internal", "cluster-ip", "nodeport", "loadbalancer", "ingress"]
NodeAddressType = Literal["ExternalIP", "ExternalDNS", "InternalIP", "InternalDNS", "Hostname"]
#: Ports a listener of spec.listeners may not take: the built-in Kafka listeners (9092, 9094),
#: the controllers' (9093) and the brokers' HTTP API (9192).
RESERVED_LISTENER_PORTS: Final = frozenset({9092, 9093, 9094, 9192})
#: Listener names taken by the built-in listeners, Services or the HTTP API.
RESERVED_LISTENER_NAMES: Final = frozenset(
    {"plaintext", "ssl", "http", "https", "kafka", "brokers", "broker"}
)
NODE_PORTS: Final = (30000, 32767)


class ListenerAuthentication(_Frozen):
    type: Literal["scram-sha-512", "tls"]


class BootstrapOverride(_Frozen):
    """The bootstrap Service / Ingress of an external listener."""

    host: str | None = Field(default=None, min_length=1, max_length=253)
    node_port: int | None = Field(default=None, alias="nodePort", ge=NODE_PORTS[0], le=NODE_PORTS[1])
    annotations: dict[str, str] = {}
    load_balancer_ip: str | None = Field(default=None, alias="loadBalancerIP", min_length=1, max_length=64)


class BrokerOverride(_Frozen):
    """One broker's Service / Ingress / advertised address on an external listener."""

    broker: int = Field(ge=0)
    advertised_host: str | None = Field(default=None, alias="advertisedHost", min_length=1, max_length=253)
    advertised_port: int | None = Field(default=None, alias="advertisedPort", ge=1, le=65535)
    node_port: int | None = Field(default=None, alias="nodePort", ge=NODE_PORTS[0], le=NODE_PORTS[1])
    host: str | None = Field(default=None, min_length=1, max_length=253)
    annotations: dict[str, str] = {}
    load_balancer_ip: str | None = Field(default=None, alias="loadBalancerIP", min_length=1, max_length=64)


class ListenerConfiguration(_Frozen):
    bootstrap: BootstrapOverride = BootstrapOverride()
    brokers: tuple[BrokerOverride, ...] = ()
    ingress_class: str | None = Field(default=None, alias="class", min_length=1, max_length=253)
    preferred_node_port_address_type: NodeAddressType | None = Field(
        default=None, alias="preferredNodePortAddressType"
    )

    def broker(self, broker_id: int) -> BrokerOverride:
        return next((b for b in self.brokers if b.broker == broker_id), BrokerOverride(broker=broker_id))


class ListenerSpec(_Frozen):
    """A Kafka listener beside the built-in ones (Strimzi's `spec.kafka.listeners` shape)."""

    name: str = Field(pattern=r"^[a-z][a-z0-9]{0,9}$")
    port: int = Field(ge=1024, le=65535)
    type: ListenerType
    tls: bool = False
    authentication: ListenerAuthentication | None = None
    configuration: ListenerConfiguration = ListenerConfiguration()

    @property
    def kafka_name(self) -> str:
        """The Kafka listener name (`listeners`, `listener.security.protocol.map`)."""
        return self.name.upper()

    @property
    def security_protocol(self) -> str:
        sasl = self.authentication is not None and self.authentication.type == "scram-sha-512"
        if self.tls:
            return "SASL_SSL" if sasl else "SSL"
        return "SASL_PLAINTEXT" if sasl else "PLAINTEXT"

    @property
    def external(self) -> bool:
        return self.type != "internal"


class RackSpec(_Frozen):
    """`broker.rack` of each broker: its node's value of this label; with `follower_fetching` (the
    default) the brokers run Kafka's `RackAwareReplicaSelector`, so a consumer with `client.rack`
    reads from a replica of its own rack (KIP-392)."""

    topology_key: str = Field(alias="topologyKey", min_length=1, max_length=317)
    follower_fetching: bool = Field(default=True, alias="followerFetching")


def _check_listeners(listeners: tuple[ListenerSpec, ...], tls: bool) -> None:  # noqa: PLR0912  one check per rule
    seen_names: set[str] = set()
    seen_ports: set[int] = set()
    node_ports: set[int] = set()
    for index, listener in enumerate(listeners):
        where = f"spec.listeners.{index}"
        if listener.name in RESERVED_LISTENER_NAMES:
            raise SpecError(f"{where}.name: '{listener.name}' is reserved")
        if listener.name in seen_names:
            raise SpecError(f"{where}.name: '{listener.name}' is listed twice")
        if listener.port in RESERVED_LISTENER_PORTS:
            raise SpecError(f"{where}.port: {listener.port} is reserved (9092, 9093, 9094, 9192)")
        if listener.port in seen_ports:
            raise SpecError(f"{where}.port: {listener.port} is taken by another listener")
        seen_names.add(listener.name)
        seen_ports.add(listener.port)
        auth = listener.authentication
        if listener.tls and not tls:
            raise SpecError(
                f"{where}.tls: needs spec.tls.enabled (the cluster CA signs the brokers' certificates)"
            )
        if auth is not None and auth.type == "tls" and not listener.tls:
            raise SpecError(f"{where}.authentication: type tls needs tls: true")
        config = listener.configuration
        brokers = [b.broker for b in config.brokers]
        if len(set(brokers)) != len(brokers):
            raise SpecError(f"{where}.configuration.brokers: a broker is listed twice")
        if listener.type == "ingress":
            if not listener.tls:
                raise SpecError(f"{where}.tls: an ingress listener needs tls: true (TLS passthrough, SNI)")
            if config.bootstrap.host is None:
                raise SpecError(f"{where}.configuration.bootstrap.host: an ingress listener needs it")
        ports = [config.bootstrap.node_port] + [b.node_port for b in config.brokers]
        for port in (p for p in ports if p is not None):
            if listener.type != "nodeport":
                raise SpecError(f"{where}.configuration: nodePort is for type nodeport")
            if port in node_ports:
                raise SpecError(f"{where}.configuration: node port {port} is used twice")
            node_ports.add(port)


class ClusterSpec(_Frozen):
    brokers: int = Field(ge=1, le=1000)
    image: str | None = None
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        default="IfNotPresent", alias="imagePullPolicy"
    )
    disks: tuple[Disk, ...] = Field(min_length=1, max_length=32)
    metadata_disk: Volume = Field(default=Volume(), alias="metadataDisk")
    controller: ControllerSpec = ControllerSpec()
    resources: Resources = Resources()
    config: BrokerSettings = BrokerSettings()
    template: Templates = Templates()
    disk_failure_policy: DiskFailurePolicy = Field(default="Manual", alias="diskFailurePolicy")
    drain: DrainSettings = DrainSettings()
    rebalance: RebalancePolicy = "Never"
    tls: TlsSpec = TlsSpec()
    listeners: tuple[ListenerSpec, ...] = Field(default=(), max_length=16)
    rack: RackSpec | None = None

    def replication_factor(self) -> int:
        """The default replication factor of new topics: the spec's, else min(3, brokers)."""
        return self.config.default_replication_factor or min(3, self.brokers)


class BrokerSpec(_Frozen):
    cluster_name: str = Field(alias="clusterName")
    broker_id: int = Field(ge=0, alias="brokerId")
    disks: tuple[Disk, ...]

    def disk(self, name: str) -> Disk | None:
        return next((d for d in self.disks if d.name == name), None)


def _one_line(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "spec"
    message = str(error.get("ctx", {}).get("error") or error["msg"])
    return f"spec.{where}: {message}"


def parse_cluster(name: str, spec: dict[str, Any]) -> ClusterSpec:
    """The cluster's spec; `SpecError` naming the field for anything the operator cannot build."""
    if len(name) > MAX_CLUSTER_NAME:
        raise SpecError(f"metadata.name: '{name}' is longer than {MAX_CLUSTER_NAME} characters")
    try:
        parsed = ClusterSpec.model_validate(spec)
    except ValidationError as exc:
        raise SpecError(_one_line(exc)) from None
    names = [d.name for d in parsed.disks]
    long = next((n for n in names if len(n) > MAX_DISK_NAME), None)
    if long is not None:
        raise SpecError(f"spec.disks: disk name '{long}' is longer than {MAX_DISK_NAME} characters")
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise SpecError(f"spec.disks: disk '{duplicate}' is listed twice")
    if parsed.config.default_replication_factor and parsed.config.default_replication_factor > parsed.brokers:
        raise SpecError(
            f"spec.config.defaultReplicationFactor: {parsed.config.default_replication_factor} "
            f"exceeds brokers ({parsed.brokers})"
        )
    if parsed.config.heartbeat_interval_ms >= parsed.config.session_timeout_ms:
        raise SpecError("spec.config.heartbeatIntervalMs: must be below sessionTimeoutMs")
    _check_listeners(parsed.listeners, parsed.tls.enabled)
    for listener in parsed.listeners:
        if listener.type == "ingress" and any(
            listener.configuration.broker(b).host is None for b in range(parsed.brokers)
        ):
            raise SpecError(
                f"spec.listeners: ingress listener '{listener.name}' needs configuration.brokers[].host "
                "for every broker"
            )
    return parsed


def parse_broker(spec: dict[str, Any]) -> BrokerSpec:
    try:
        return BrokerSpec.model_validate(spec)
    except ValidationError as exc:
        raise SpecError(_one_line(exc)) from None
