"""The listeners of `spec.listeners` (issue 34): pure decisions, no I/O.

From a cluster's spec, its broker ids and what Kubernetes assigned (`Assigned`: the Services'
node ports, the LoadBalancers' ingress addresses, the addresses of the nodes the brokers run on),
this module computes:

* `objects`: the Services (one bootstrap Service per listener, plus one per broker for every
  listener but `internal`) and, for `ingress`, the Ingresses (TLS passthrough, one host per broker
  by SNI), each owned by the cluster;
* `broker_listeners`: per broker, the `listeners`, `advertised.listeners`,
  `listener.security.protocol.map` and `listener.name.<name>.ssl.client.auth` entries it adds to
  the built-in listeners (`BrokerListeners.amend` writes them into `server.properties`), and what
  the node-info init container writes for it (the node's address, the rack);
* `certificate_names`: the extra DNS names and IP addresses of a broker's certificate;
* `status`: `status.listeners`, each listener's bootstrap address, per-broker addresses and
  whether it is `ready` (what the brokers serve: `BrokerServes`, `broker_serves`);
* `needs_node_reader` and `orphan_node_readers`: which clusters' brokers need the node-reader
  ClusterRoleBinding (`builders.broker_rbac`), and which of those bindings nothing needs any more.

Guarantees:
* Without `spec.listeners` and `spec.rack` every result is empty: `server.properties` and the
  objects are exactly what they were before listeners existed.
* An address Kubernetes has not assigned yet (a LoadBalancer without an ingress address, a
  NodePort Service not created yet) is never advertised: the broker leaves that listener out of
  `listeners` and `advertised.listeners` until it is known (`BrokerListeners.pending` names it;
  the listener's status says `ready: false`), and its configuration changes then, rolling it once.
* A `nodeport` listener's host is the broker's node's address, which only exists once the pod
  is scheduled: the config refers to it as `${file:<node info file>:advertised.host.<NAME>}`
  (Kafka's FileConfigProvider), written by `jbod_operator.node_info` in an init container; the
  rack likewise (`broker.rack=${file:...:rack}`). An `advertisedHost` override replaces it.
* A listener is `ready` only once clients can use it: its bootstrap address and every broker's
  address are known, every broker's registration (the controller's view) advertises the
  listener at that address, and, for a `tls` listener, every broker's certificate names its
  advertised host and the listener's bootstrap hosts and was issued `propagation` ago (the
  kubelets have updated the pod's files by then, and a broker loads changed files on its next
  handshake), or it was ready at the same addresses before and the new certificate names them
  too (whichever file the pod has, it names them: a renewal does not flap `ready`). Without the
  controller's view, a listener is ready only if it was ready before at the same addresses.
* The node-reader binding is cluster-scoped, so no owner reference deletes it: a binding is an
  orphan once its JbodCluster is gone or no longer has a rack or a `nodeport` listener, and only
  for a namespace the operator watches (another operator's bindings are never touched); a
  cluster whose spec does not parse keeps its binding.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from jbod_operator import names, rotation
from jbod_operator.model import ClusterSpec, ListenerSpec

Manifest = dict[str, Any]

NODE_INFO_DIR: Final = "/etc/jbod/node"
NODE_INFO_FILE: Final = f"{NODE_INFO_DIR}/node.properties"
RACK_KEY: Final = "rack"
#: The node address types in the order a `nodeport` listener takes them (its
#: `preferredNodePortAddressType` first).
NODE_ADDRESS_ORDER: Final = ("ExternalIP", "ExternalDNS", "InternalIP", "InternalDNS", "Hostname")
INGRESS_PORT: Final = 443
PASSTHROUGH: Final = {
    "nginx.ingress.kubernetes.io/ssl-passthrough": "true",
    "nginx.ingress.kubernetes.io/backend-protocol": "HTTPS",
}
MAX_SERVICE_NAME: Final = 63
LABEL_LISTENER: Final = "jbod.dev/listener"  # on every object of a listener: its name


def advertised_host_key(listener: ListenerSpec) -> str:
    """The node-info file's key holding a `nodeport` listener's advertised host."""
    return f"advertised.host.{listener.kafka_name}"


def file_reference(key: str) -> str:
    return "${file:" + NODE_INFO_FILE + ":" + key + "}"


def bootstrap_service(cluster: str, listener: ListenerSpec) -> str:
    return f"{cluster}-{listener.name}-bootstrap"


def broker_service(cluster: str, broker_id: int, listener: ListenerSpec) -> str:
    return f"{names.broker(cluster, broker_id)}-{listener.name}"


@dataclass(frozen=True)
class Assigned:
    """What Kubernetes assigned: the Kafka port's node port of each Service (by name), each
    LoadBalancer Service's first ingress address (IP or hostname), and the addresses of the node
    each broker runs on (broker id → address type → address)."""

    node_ports: Mapping[str, int] = field(default_factory=dict)
    ingress: Mapping[str, str] = field(default_factory=dict)
    nodes: Mapping[int, Mapping[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class BrokerAddress:
    broker: int
    host: str
    port: int


@dataclass(frozen=True)
class BrokerServes:
    """What one broker shows clients, as the operator last saw it: its registration's
    advertised Kafka listeners (name → (host, port)), the names of its certificate Secret, and
    whether that certificate is surely in the pod's files (issued `propagation` ago)."""

    advertised: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    certificate_names: frozenset[str] = frozenset()
    certificate_settled: bool = False


def broker_serves(
    registration: Mapping[str, Any] | None,
    certificate: rotation.Certificate | None,
    *,
    now: dt.datetime,
    propagation: dt.timedelta,
) -> BrokerServes:
    """`BrokerServes` from the broker's registration (the controller's `/v1/brokers` entry;
    None: not registered) and its certificate Secret's leaf (None: none)."""
    advertised = {
        str(entry["name"]): (str(entry["host"]), int(entry["port"]))
        for entry in (registration or {}).get("listeners") or []
        if entry.get("name") and entry.get("host") and entry.get("port")
    }
    if certificate is None:
        return BrokerServes(advertised=advertised)
    return BrokerServes(
        advertised=advertised,
        certificate_names=certificate.dns_names,
        certificate_settled=now >= certificate.made_at + propagation,
    )


@dataclass(frozen=True)
class ListenerStatus:
    """One entry of `status.listeners`; `ready` once clients can use it (the module's guarantees)."""

    name: str
    type: str
    bootstrap_servers: str | None
    addresses: tuple[BrokerAddress, ...]
    ready: bool

    def as_status(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "name": self.name,
            "type": self.type,
            "ready": self.ready,
            "addresses": [{"broker": a.broker, "host": a.host, "port": a.port} for a in self.addresses],
        }
        if self.bootstrap_servers is not None:
            entry["bootstrapServers"] = self.bootstrap_servers
        return entry


@dataclass(frozen=True)
class BrokerListeners:
    """What one broker adds to its built-in listeners; empty without listeners and racks."""

    listeners: tuple[str, ...] = ()  # NAME://0.0.0.0:PORT
    advertised: tuple[str, ...] = ()  # NAME://HOST:PORT
    protocols: tuple[str, ...] = ()  # NAME:PROTOCOL
    client_auth: tuple[tuple[str, str], ...] = ()  # (NAME, mode)
    node_addresses: tuple[tuple[str, str | None], ...] = ()  # (NAME, preferred address type)
    rack_label: str | None = None
    pending: tuple[str, ...] = ()  # listeners left out until their address is known

    @property
    def node_info(self) -> bool:
        """Whether the broker needs the node-info init container."""
        return bool(self.node_addresses) or self.rack_label is not None

    def amend(self, properties: str) -> str:
        """`server.properties` with these listeners appended to `listeners` and
        `advertised.listeners`, the protocol map (the built-in listeners named after their
        protocol, as Kafka's default map), the client-auth settings and the file references."""
        if not self.listeners and not self.node_info:
            return properties
        lines = properties.splitlines()
        builtin: list[str] = []
        for index, line in enumerate(lines):
            key, _, value = line.partition("=")
            if key == "listeners" and self.listeners:
                builtin = [e.split("://")[0] for e in value.split(",") if not e.startswith("http")]
                lines[index] = line + "," + ",".join(self.listeners)
            elif key == "advertised.listeners" and self.advertised:
                lines[index] = line + "," + ",".join(self.advertised)
        if self.protocols:
            lines.append(
                "listener.security.protocol.map="
                + ",".join([f"{b}:{b}" for b in builtin] + list(self.protocols))
            )
        lines += [f"listener.name.{name.lower()}.ssl.client.auth={mode}" for name, mode in self.client_auth]
        if self.node_info:
            lines += [
                "config.providers=file",
                "config.providers.file.class=org.apache.kafka.common.config.provider.FileConfigProvider",
            ]
        if self.rack_label is not None:
            lines.append(f"broker.rack={file_reference(RACK_KEY)}")
        return "\n".join(lines) + "\n"


def _node_address(addresses: Mapping[str, str] | None, preferred: str | None) -> str | None:
    if not addresses:
        return None
    order = [preferred] if preferred else []
    order += [kind for kind in NODE_ADDRESS_ORDER if kind != preferred]
    return next((addresses[kind] for kind in order if addresses.get(kind)), None)


def _advertised(  # noqa: PLR0913  the listener, the broker (cluster, namespace, id), the assignments
    spec_listener: ListenerSpec,
    cluster: str,
    namespace: str,
    broker_id: int,
    assigned: Assigned,
    *,
    in_config: bool,
) -> tuple[str, int] | None:
    """Where clients reach `broker_id` on the listener (None: not known yet). `in_config`: a
    node's address as the node-info file's reference, else as the operator knows it."""
    listener = spec_listener
    override = listener.configuration.broker(broker_id)
    kind = listener.type
    if kind == "internal":
        return override.advertised_host or names.broker_host(cluster, namespace, broker_id), (
            override.advertised_port or listener.port
        )
    service = broker_service(cluster, broker_id, listener)
    if kind == "cluster-ip":
        return (
            override.advertised_host or f"{service}.{namespace}.svc",
            override.advertised_port or listener.port,
        )
    if kind == "ingress":
        named = override.advertised_host or override.host
        return (named, override.advertised_port or INGRESS_PORT) if named else None
    if kind == "loadbalancer":
        balancer = override.advertised_host or assigned.ingress.get(service)
        return (balancer, override.advertised_port or listener.port) if balancer else None
    # nodeport
    port = override.advertised_port or override.node_port or assigned.node_ports.get(service)
    host: str | None
    if override.advertised_host:
        host = override.advertised_host
    elif in_config:
        host = file_reference(advertised_host_key(listener))
    else:
        host = _node_address(
            assigned.nodes.get(broker_id), listener.configuration.preferred_node_port_address_type
        )
    return (host, port) if host and port else None


def broker_listeners(
    spec: ClusterSpec, cluster: str, namespace: str, broker_id: int, assigned: Assigned
) -> BrokerListeners:
    """The listener entries of `broker_id`'s `server.properties` (see the module's guarantees)."""
    bound: list[str] = []
    advertised: list[str] = []
    protocols: list[str] = []
    client_auth: list[tuple[str, str]] = []
    node_addresses: list[tuple[str, str | None]] = []
    pending: list[str] = []
    for listener in spec.listeners:
        address = _advertised(listener, cluster, namespace, broker_id, assigned, in_config=True)
        if address is None:
            pending.append(listener.name)
            continue
        name = listener.kafka_name
        bound.append(f"{name}://0.0.0.0:{listener.port}")
        advertised.append(f"{name}://{address[0]}:{address[1]}")
        protocols.append(f"{name}:{listener.security_protocol}")
        if listener.security_protocol == "SSL":
            auth = listener.authentication
            client_auth.append((name, "required" if auth is not None and auth.type == "tls" else "none"))
        if listener.type == "nodeport" and not listener.configuration.broker(broker_id).advertised_host:
            node_addresses.append((name, listener.configuration.preferred_node_port_address_type))
    return BrokerListeners(
        listeners=tuple(bound),
        advertised=tuple(advertised),
        protocols=tuple(protocols),
        client_auth=tuple(client_auth),
        node_addresses=tuple(node_addresses),
        rack_label=spec.rack.topology_key if spec.rack is not None else None,
        pending=tuple(pending),
    )


def node_properties(
    node: Mapping[str, Any], listeners: Sequence[tuple[str, str | None]], rack_label: str | None
) -> dict[str, str]:
    """What the node-info init container writes for a broker on `node` (a Node object): per
    `nodeport` listener (NAME, preferred address type) its advertised host, and the rack (the
    node's `rack_label`). `ValueError` naming what is missing (the pod then does not start)."""
    addresses = {
        a.get("type", ""): a.get("address", "") for a in (node.get("status") or {}).get("addresses") or []
    }
    out: dict[str, str] = {}
    node_name = (node.get("metadata") or {}).get("name", "?")
    for name, preferred in listeners:
        host = _node_address(addresses, preferred)
        if host is None:
            raise ValueError(f"node {node_name} has no address for listener {name}")
        out[f"advertised.host.{name}"] = host
    if rack_label is not None:
        labels = (node.get("metadata") or {}).get("labels") or {}
        if not labels.get(rack_label):
            raise ValueError(f"node {node_name} has no label {rack_label} (spec.rack.topologyKey)")
        out[RACK_KEY] = labels[rack_label]
    return out


def certificate_names(
    spec: ClusterSpec, cluster: str, namespace: str, broker_id: int, assigned: Assigned
) -> tuple[str, ...]:
    """Names and addresses a broker's certificate needs for its TLS listeners of
    `spec.listeners`: its advertised hosts, its per-broker Service's names and each
    listener's bootstrap address (a client verifies the bootstrap's name on first contact; a
    nodeport bootstrap is every broker's node address, and any of them may reach this broker)."""
    wanted: list[str] = []
    for listener in spec.listeners:
        if not listener.tls:
            continue
        address = _advertised(listener, cluster, namespace, broker_id, assigned, in_config=False)
        if address is not None:
            wanted.append(address[0])
        bootstrap = bootstrap_service(cluster, listener)
        wanted += [f"{bootstrap}.{namespace}.svc", bootstrap]
        if listener.type != "internal":
            service = broker_service(cluster, broker_id, listener)
            wanted += [f"{service}.{namespace}.svc", service]
        host = listener.configuration.bootstrap.host or assigned.ingress.get(bootstrap)
        if host:
            wanted.append(host)
        elif listener.type == "nodeport":
            # The bootstrap node port of any node reaches any broker: each broker's certificate
            # names every node address of the bootstrap list.
            wanted += _node_port_hosts(listener, assigned.nodes.values())
    return tuple(dict.fromkeys(wanted))


def _node_port_hosts(listener: ListenerSpec, nodes: Iterable[Mapping[str, str] | None]) -> list[str]:
    """The addresses a nodeport listener's bootstrap list gives: each known node's, once."""
    preferred = listener.configuration.preferred_node_port_address_type
    return list(dict.fromkeys(a for n in nodes if (a := _node_address(n, preferred))))


def _bootstrap_servers(
    listener: ListenerSpec, cluster: str, namespace: str, broker_ids: Sequence[int], assigned: Assigned
) -> str | None:
    bootstrap = bootstrap_service(cluster, listener)
    given = listener.configuration.bootstrap.host
    if listener.type in ("internal", "cluster-ip"):
        return f"{given or f'{bootstrap}.{namespace}.svc'}:{listener.port}"
    if listener.type == "ingress":
        return f"{given}:{INGRESS_PORT}"
    if listener.type == "loadbalancer":
        host = given or assigned.ingress.get(bootstrap)
        return f"{host}:{listener.port}" if host else None
    port = listener.configuration.bootstrap.node_port or assigned.node_ports.get(bootstrap)
    known = [given] if given else _node_port_hosts(listener, (assigned.nodes.get(b) for b in broker_ids))
    return ",".join(f"{h}:{port}" for h in known) if known and port else None


def status(  # noqa: PLR0913  the cluster (spec, name, namespace, brokers), what is assigned and served, before
    spec: ClusterSpec,
    cluster: str,
    namespace: str,
    broker_ids: Iterable[int],
    assigned: Assigned,
    *,
    serving: Mapping[int, BrokerServes] | None,
    previous: Iterable[Mapping[str, Any]] = (),
) -> list[ListenerStatus]:
    """`status.listeners`: every listener of `spec.listeners` in order. `serving`: what each
    broker serves (None: the controller could not be asked); `previous`: the last
    `status.listeners` (the module's guarantees say how both decide `ready`)."""
    ids = sorted(set(broker_ids))
    before = {entry.get("name"): entry for entry in previous}
    out = []
    for listener in spec.listeners:
        addresses = []
        for broker_id in ids:
            address = _advertised(listener, cluster, namespace, broker_id, assigned, in_config=False)
            if address is not None:
                addresses.append(BrokerAddress(broker_id, *address))
        bootstrap = _bootstrap_servers(listener, cluster, namespace, ids, assigned)
        entry = ListenerStatus(
            name=listener.name,
            type=listener.type,
            bootstrap_servers=bootstrap,
            addresses=tuple(addresses),
            ready=False,
        )
        unchanged = _ready_before(before.get(listener.name), entry)
        if bootstrap is None or len(addresses) != len(ids):
            ready = False
        elif serving is None:
            ready = unchanged
        else:
            ready = all(
                _serves(listener, address, bootstrap, serving.get(address.broker), unchanged=unchanged)
                for address in addresses
            )
        out.append(dataclasses.replace(entry, ready=ready))
    return out


def _ready_before(previous: Mapping[str, Any] | None, entry: ListenerStatus) -> bool:
    """Whether the listener was ready before at exactly `entry`'s addresses."""
    if previous is None or previous.get("ready") is not True:
        return False
    same = {**entry.as_status(), "ready": True}
    return {key: previous.get(key) for key in same} == same


def _serves(
    listener: ListenerSpec,
    address: BrokerAddress,
    bootstrap: str,
    serves: BrokerServes | None,
    *,
    unchanged: bool,
) -> bool:
    """Whether one broker serves `listener` at `address` (with a certificate naming what a
    client checks: its advertised host and the listener's bootstrap hosts)."""
    if serves is None or serves.advertised.get(listener.kafka_name) != (address.host, address.port):
        return False
    if not listener.tls:
        return True
    wanted = {address.host, *(server.rsplit(":", 1)[0] for server in bootstrap.split(","))}
    return wanted <= serves.certificate_names and (serves.certificate_settled or unchanged)


def needs_node_reader(spec: ClusterSpec) -> bool:
    """Whether the cluster's brokers need the node-reader binding: the node-info init container
    reads their node for the rack and for `nodeport` listeners."""
    return spec.rack is not None or any(listener.type == "nodeport" for listener in spec.listeners)


def orphan_node_readers(
    bindings: Iterable[Mapping[str, Any]],
    clusters: Mapping[tuple[str, str], ClusterSpec | None],
    *,
    namespaces: Collection[str] | None,
) -> list[str]:
    """The names of the brokers' node-reader ClusterRoleBindings among `bindings` that nothing
    needs any more: of a namespace in `namespaces` (None: every namespace) whose cluster is not
    in `clusters` ((namespace, name) → its spec, None if it does not parse) or needs none
    (`needs_node_reader`). Bindings without the operator's labels are never orphans."""
    out = []
    for binding in bindings:
        meta = binding.get("metadata") or {}
        labels = meta.get("labels") or {}
        namespace, cluster = labels.get(names.LABEL_NAMESPACE), labels.get(names.LABEL_CLUSTER)
        ours = (
            labels.get("app.kubernetes.io/managed-by") == names.MANAGED_BY
            and labels.get(names.LABEL_COMPONENT) == "broker"
        )
        if not (ours and namespace and cluster and meta.get("name")):
            continue
        if namespaces is not None and namespace not in namespaces:
            continue
        key = (namespace, cluster)
        if key not in clusters:
            out.append(meta["name"])
            continue
        spec = clusters[key]
        if spec is not None and not needs_node_reader(spec):
            out.append(meta["name"])
    return out


def bootstrap_servers(
    spec: ClusterSpec, cluster: str, namespace: str, broker_ids: Iterable[int], assigned: Assigned
) -> dict[str, str]:
    """Listener name → its bootstrap servers, for the listeners whose address is known."""
    return {
        s.name: s.bootstrap_servers
        for s in status(spec, cluster, namespace, broker_ids, assigned, serving=None)
        if s.bootstrap_servers
    }


# ---------------------------------------------------------------------------------------------
# The objects


def _meta(
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    owner: Mapping[str, Any],
    annotations: Mapping[str, str],
) -> dict[str, Any]:
    if len(name) > MAX_SERVICE_NAME:
        raise ValueError(f"the name {name} is longer than {MAX_SERVICE_NAME} characters")
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": dict(labels),
        "ownerReferences": [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


_SERVICE_TYPES: Final = {
    "internal": "ClusterIP",
    "cluster-ip": "ClusterIP",
    "ingress": "ClusterIP",
    "nodeport": "NodePort",
    "loadbalancer": "LoadBalancer",
}


def _service(  # noqa: PLR0913  the Service's name, labels, selector, listener, owner and override
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    selector: Mapping[str, str],
    listener: ListenerSpec,
    owner: Mapping[str, Any],
    *,
    node_port: int | None,
    annotations: Mapping[str, str],
    load_balancer_ip: str | None,
) -> Manifest:
    port: dict[str, Any] = {
        "name": "kafka",
        "port": listener.port,
        "targetPort": listener.port,
        "protocol": "TCP",
    }
    if node_port is not None:
        port["nodePort"] = node_port
    spec: dict[str, Any] = {
        "type": _SERVICE_TYPES[listener.type],
        "selector": dict(selector),
        "ports": [port],
    }
    if listener.type == "loadbalancer" and load_balancer_ip:
        spec["loadBalancerIP"] = load_balancer_ip
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, namespace, labels, owner, annotations),
        "spec": spec,
    }


def _ingress(  # noqa: PLR0913  the Ingress's name, labels, host, backend, listener and owner
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    host: str,
    service: str,
    listener: ListenerSpec,
    owner: Mapping[str, Any],
    annotations: Mapping[str, str],
) -> Manifest:
    backend = {"service": {"name": service, "port": {"number": listener.port}}}
    spec: dict[str, Any] = {
        "rules": [
            {"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]}}
        ],
        "tls": [{"hosts": [host]}],
    }
    if listener.configuration.ingress_class:
        spec["ingressClassName"] = listener.configuration.ingress_class
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": _meta(name, namespace, labels, owner, {**PASSTHROUGH, **annotations}),
        "spec": spec,
    }


def objects(
    spec: ClusterSpec, cluster: str, namespace: str, broker_ids: Iterable[int], owner: Mapping[str, Any]
) -> list[Manifest]:
    """The Services and Ingresses of `spec.listeners` for `broker_ids` (empty without listeners)."""
    out: list[Manifest] = []
    ids = sorted(set(broker_ids))
    for listener in spec.listeners:
        config = listener.configuration
        labels = {**names.cluster_labels(cluster, "broker"), LABEL_LISTENER: listener.name}
        bootstrap = bootstrap_service(cluster, listener)
        out.append(
            _service(
                bootstrap,
                namespace,
                labels,
                names.broker_selector(cluster),
                listener,
                owner,
                node_port=config.bootstrap.node_port,
                annotations={} if listener.type == "ingress" else config.bootstrap.annotations,
                load_balancer_ip=config.bootstrap.load_balancer_ip,
            )
        )
        if listener.type == "ingress" and config.bootstrap.host:
            out.append(
                _ingress(
                    bootstrap,
                    namespace,
                    labels,
                    config.bootstrap.host,
                    bootstrap,
                    listener,
                    owner,
                    config.bootstrap.annotations,
                )
            )
        if listener.type == "internal":
            continue
        for broker_id in ids:
            override = config.broker(broker_id)
            name = broker_service(cluster, broker_id, listener)
            broker_labels = {**names.broker_labels(cluster, broker_id), LABEL_LISTENER: listener.name}
            out.append(
                _service(
                    name,
                    namespace,
                    broker_labels,
                    {
                        names.LABEL_CLUSTER: cluster,
                        names.LABEL_BROKER: str(broker_id),
                        names.LABEL_COMPONENT: "broker",
                    },
                    listener,
                    owner,
                    node_port=override.node_port,
                    annotations={} if listener.type == "ingress" else override.annotations,
                    load_balancer_ip=override.load_balancer_ip,
                )
            )
            if listener.type == "ingress" and override.host:
                out.append(
                    _ingress(
                        name,
                        namespace,
                        broker_labels,
                        override.host,
                        name,
                        listener,
                        owner,
                        override.annotations,
                    )
                )
    return out


def stale(found: Iterable[Mapping[str, Any]], wanted: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(kind, name) of the listener objects `found` (a cluster's Services and Ingresses) that
    `wanted` no longer holds: those of a removed listener or broker. Objects without the
    listener label (the built-in Services) are never stale."""
    keep = {(m["kind"], m["metadata"]["name"]) for m in wanted}
    out = []
    for obj in found:
        meta = obj.get("metadata") or {}
        key = (obj.get("kind", ""), meta.get("name", ""))
        if LABEL_LISTENER in (meta.get("labels") or {}) and key not in keep:
            out.append(key)
    return out


def assigned_from(services: Iterable[Mapping[str, Any]], nodes: Mapping[int, Mapping[str, Any]]) -> Assigned:
    """`Assigned` from the listeners' Services as the API server returns them and the Node
    objects the brokers run on (broker id → Node)."""
    node_ports: dict[str, int] = {}
    ingress: dict[str, str] = {}
    for service in services:
        name = service["metadata"]["name"]
        for port in (service.get("spec") or {}).get("ports") or []:
            if port.get("nodePort"):
                node_ports[name] = int(port["nodePort"])
        for entry in ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []:
            address = entry.get("ip") or entry.get("hostname")
            if address:
                ingress[name] = address
                break
    node_addresses = {
        broker_id: {
            a.get("type", ""): a.get("address", "") for a in (node.get("status") or {}).get("addresses") or []
        }
        for broker_id, node in nodes.items()
    }
    return Assigned(node_ports=node_ports, ingress=ingress, nodes=node_addresses)
