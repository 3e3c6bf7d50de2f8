"""Pure builders of the Kubernetes objects of a cluster: same inputs, same manifests (as dicts).

Guarantees:
* Every object carries the cluster's labels and, except data volume claims, an owner reference, so
  deleting a `JbodCluster` garbage-collects its controller, Services, Secret, brokers and pods.
  Data and metadata claims have no owner: deleting a cluster never deletes volumes holding
  replicas (remove them by label when you mean it).
* A broker pod carries the readiness gate `jbod.dev/unfenced` and an annotation hashing its spec
  and configuration; a different hash means the pod must be recreated (bare pods cannot be
  patched in place).
* Processes run as non-root with a read-only root filesystem; everything they write is a volume.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from jbod_operator import model, names

Manifest = dict[str, Any]
RUN_AS: int = 10001


def owner_reference(owner: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _meta(
    name: str, namespace: str, labels: dict[str, str], owner: Mapping[str, Any] | None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if owner is not None:
        meta["ownerReferences"] = [owner_reference(owner)]
    return meta


def _resources(resources: model.Resources) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if resources.limits:
        out["limits"] = dict(resources.limits)
    if resources.requests:
        out["requests"] = dict(resources.requests)
    return out


def spec_hash(*parts: Any) -> str:
    return hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


_POD_SECURITY: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": RUN_AS,
    "runAsGroup": RUN_AS,
    "fsGroup": RUN_AS,
    "seccompProfile": {"type": "RuntimeDefault"},
}
_CONTAINER_SECURITY: dict[str, Any] = {
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}


# The root filesystem is read-only: /tmp is a small emptyDir for anything a library writes there.
_TMP_VOLUME: dict[str, Any] = {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}
_TMP_MOUNT: dict[str, Any] = {"name": "tmp", "mountPath": "/tmp"}


def _probe(path: str, port: int, *, period: int, failures: int = 3) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": port},
        "periodSeconds": period,
        "timeoutSeconds": 2,
        "failureThreshold": failures,
    }


def _claim_template(name: str, volume: model.Volume) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": volume.size}},
    }
    if volume.storage_class:
        spec["storageClassName"] = volume.storage_class
    return {"metadata": {"name": name}, "spec": spec}


# ---------------------------------------------------------------------------------------------
# Cluster-wide objects


def tokens_secret(  # noqa: PLR0913  the Secret's name parts, its three values and its owner
    cluster: str,
    namespace: str,
    *,
    cluster_id: str,
    cluster_token: str,
    admin_token: str,
    owner: Mapping[str, Any],
) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(names.secret(cluster), namespace, names.cluster_labels(cluster, "tokens"), owner),
        "type": "Opaque",
        "stringData": {
            names.SECRET_CLUSTER_ID: cluster_id,
            names.SECRET_CLUSTER_TOKEN: cluster_token,
            names.SECRET_ADMIN_TOKEN: admin_token,
        },
    }


_POD_NAME_ENV: dict[str, Any] = {
    "name": "POD_NAME",
    "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
}


def etcd_service(cluster: str, namespace: str, owner: Mapping[str, Any]) -> Manifest:
    """Headless, and publishing members before they are ready: peers must find each other to start."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(names.etcd(cluster), namespace, names.cluster_labels(cluster, "etcd"), owner),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": names.etcd_selector(cluster),
            "ports": [
                {"name": "client", "port": names.ETCD_CLIENT_PORT, "targetPort": names.ETCD_CLIENT_PORT},
                {"name": "peer", "port": names.ETCD_PEER_PORT, "targetPort": names.ETCD_PEER_PORT},
            ],
        },
    }


def etcd_statefulset(
    spec: model.ClusterSpec, cluster: str, namespace: str, *, owner: Mapping[str, Any]
) -> Manifest:
    """Three etcd members for the controller quorum, from `spec.controller.etcd.image` (by default
    kubeadm's etcd image, `names.ETCD_IMAGE`). Only `etcd` and its flags: no shell is needed."""
    labels = names.cluster_labels(cluster, "etcd")
    host = f"$(POD_NAME).{names.etcd(cluster)}.{namespace}.svc"
    initial = ",".join(
        f"{names.etcd(cluster)}-{n}=http://{names.etcd_member_host(cluster, namespace, n)}:{names.ETCD_PEER_PORT}"
        for n in range(names.ETCD_MEMBERS)
    )
    container = {
        "name": "etcd",
        "image": spec.controller.etcd.image or names.ETCD_IMAGE,
        # A pinned tag: pulled once (and never with the project image's policy "Always").
        "imagePullPolicy": "IfNotPresent",
        "command": ["etcd"],
        "args": [
            "--name=$(POD_NAME)",
            f"--data-dir={names.ETCD_MOUNT}/data",
            f"--listen-client-urls=http://0.0.0.0:{names.ETCD_CLIENT_PORT}",
            f"--advertise-client-urls=http://{host}:{names.ETCD_CLIENT_PORT}",
            f"--listen-peer-urls=http://0.0.0.0:{names.ETCD_PEER_PORT}",
            f"--initial-advertise-peer-urls=http://{host}:{names.ETCD_PEER_PORT}",
            f"--initial-cluster={initial}",
            f"--initial-cluster-token={cluster}-{namespace}",
            "--initial-cluster-state=new",
            "--quota-backend-bytes=2147483648",
            "--log-level=warn",
        ],
        "env": [_POD_NAME_ENV],
        "ports": [
            {"name": "client", "containerPort": names.ETCD_CLIENT_PORT},
            {"name": "peer", "containerPort": names.ETCD_PEER_PORT},
        ],
        "readinessProbe": _probe("/health", names.ETCD_CLIENT_PORT, period=5),
        "volumeMounts": [{"name": "data", "mountPath": names.ETCD_MOUNT}, _TMP_MOUNT],
        "securityContext": _CONTAINER_SECURITY,
        "resources": _resources(spec.controller.etcd.resources),
    }
    # Parallel: the members must start together to form the cluster.
    return _statefulset(
        names.etcd(cluster),
        namespace,
        labels,
        names.etcd_selector(cluster),
        owner,
        replicas=names.ETCD_MEMBERS,
        container=container,
        volumes=[_TMP_VOLUME],
        data=spec.controller.etcd.storage,
    )


def controller_service(cluster: str, namespace: str, owner: Mapping[str, Any]) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(
            names.controller(cluster), namespace, names.cluster_labels(cluster, "controller"), owner
        ),
        "spec": {
            "clusterIP": "None",  # also the StatefulSet's governing Service, which must be headless
            "selector": names.controller_selector(cluster),
            "ports": [{"name": "http", "port": names.CONTROLLER_PORT, "targetPort": names.CONTROLLER_PORT}],
        },
    }


def _tokens_volume(cluster: str) -> dict[str, Any]:
    return {"name": "tokens", "secret": {"secretName": names.secret(cluster), "defaultMode": 0o440}}


def _cluster_id_env(cluster: str) -> dict[str, Any]:
    return {
        "name": "JBOD_CLUSTER_ID",
        "valueFrom": {"secretKeyRef": {"name": names.secret(cluster), "key": names.SECRET_CLUSTER_ID}},
    }


def controller_statefulset(
    spec: model.ClusterSpec, cluster: str, namespace: str, *, image: str, owner: Mapping[str, Any]
) -> Manifest:
    labels = names.cluster_labels(cluster, "controller")
    args = [
        f"--data-dir={names.CONTROLLER_MOUNT}/data",
        "--cluster-id=$(JBOD_CLUSTER_ID)",
        f"--listen=0.0.0.0:{names.CONTROLLER_PORT}",
        f"--cluster-token-file={names.TOKENS_DIR}/{names.SECRET_CLUSTER_TOKEN}",
        f"--admin-token-file={names.TOKENS_DIR}/{names.SECRET_ADMIN_TOKEN}",
        f"--broker-session-timeout-ms={spec.config.session_timeout_ms}",
        f"--default-replication-factor={spec.replication_factor()}",
        f"--default-min-insync-replicas={spec.config.min_insync_replicas}",
    ]
    env = [_cluster_id_env(cluster)]
    replicas = spec.controller.replicas
    if spec.controller.quorum:
        etcd_endpoints = (
            ",".join(spec.controller.etcd.endpoints)
            if spec.controller.etcd.endpoints
            else names.etcd_endpoints(cluster, namespace)
        )
        env.append(_POD_NAME_ENV)
        if spec.controller.etcd.tls_secret:
            args += [
                f"--etcd-cacert={names.ETCD_TLS_DIR}/ca.crt",
                f"--etcd-cert={names.ETCD_TLS_DIR}/tls.crt",
                f"--etcd-key={names.ETCD_TLS_DIR}/tls.key",
            ]
        args += [
            f"--etcd-endpoints={etcd_endpoints}",
            "--node-id=$(POD_NAME)",  # controller-K is node K+1
            f"--advertised-url=http://$(POD_NAME).{names.controller(cluster)}.{namespace}.svc:"
            f"{names.CONTROLLER_PORT}",
        ]
    mounts: list[dict[str, Any]] = [
        {"name": "data", "mountPath": names.CONTROLLER_MOUNT},
        {"name": "tokens", "mountPath": names.TOKENS_DIR, "readOnly": True},
        _TMP_MOUNT,
    ]
    container = {
        "name": "controller",
        "image": image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": ["jbod-controller"],
        "args": args,
        "env": env,
        "ports": [{"name": "http", "containerPort": names.CONTROLLER_PORT}],
        "readinessProbe": _probe("/readyz", names.CONTROLLER_PORT, period=2),
        "livenessProbe": _probe("/healthz", names.CONTROLLER_PORT, period=10, failures=6),
        "volumeMounts": mounts,
        "securityContext": _CONTAINER_SECURITY,
        "resources": _resources(spec.controller.resources),
    }
    volumes = [_tokens_volume(cluster), _TMP_VOLUME]
    if spec.controller.quorum and spec.controller.etcd.tls_secret:
        secret = spec.controller.etcd.tls_secret
        volumes.append({"name": "etcd-tls", "secret": {"secretName": secret, "defaultMode": 0o440}})
        mounts.append({"name": "etcd-tls", "mountPath": names.ETCD_TLS_DIR, "readOnly": True})
    return _statefulset(
        names.controller(cluster),
        namespace,
        labels,
        names.controller_selector(cluster),
        owner,
        replicas=replicas,
        container=container,
        volumes=volumes,
        data=spec.controller.storage,
    )


def _statefulset(  # noqa: PLR0913  a parameter per field the controller and etcd StatefulSets differ in
    name: str,
    namespace: str,
    labels: dict[str, str],
    selector: dict[str, str],
    owner: Mapping[str, Any],
    *,
    replicas: int,
    container: dict[str, Any],
    volumes: list[dict[str, Any]],
    data: model.Volume,
) -> Manifest:
    """A StatefulSet of one container, a `data` claim per pod, pods started in parallel."""
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta(name, namespace, labels, owner),
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": selector},
            "podManagementPolicy": "Parallel",
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "securityContext": _POD_SECURITY,
                    "automountServiceAccountToken": False,
                    "terminationGracePeriodSeconds": 30,
                    "containers": [container],
                    "volumes": volumes,
                },
            },
            "volumeClaimTemplates": [_claim_template("data", data)],
        },
    }


def _broker_service_ports() -> list[dict[str, Any]]:
    return [
        {"name": "kafka", "port": names.KAFKA_PORT, "targetPort": "kafka"},
        {"name": "http", "port": names.BROKER_HTTP_PORT, "targetPort": "http"},
    ]


def _broker_service(
    name: str, cluster: str, namespace: str, owner: Mapping[str, Any], *, headless: bool
) -> Manifest:
    spec: dict[str, Any] = {"selector": names.broker_selector(cluster), "ports": _broker_service_ports()}
    if headless:
        spec |= {"clusterIP": "None", "publishNotReadyAddresses": True}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, namespace, names.cluster_labels(cluster, "broker"), owner),
        "spec": spec,
    }


def brokers_service(cluster: str, namespace: str, owner: Mapping[str, Any]) -> Manifest:
    """Headless: per-pod DNS names for every broker, published before they are ready."""
    return _broker_service(names.brokers_service(cluster), cluster, namespace, owner, headless=True)


def ready_brokers_service(cluster: str, namespace: str, owner: Mapping[str, Any]) -> Manifest:
    """Only Ready brokers: a pod is Ready once its process is up and the controller has unfenced it."""
    return _broker_service(names.ready_brokers_service(cluster), cluster, namespace, owner, headless=False)


def kafka_bootstrap_service(cluster: str, namespace: str, owner: Mapping[str, Any]) -> Manifest:
    """The Kafka clients' bootstrap: the Ready brokers' Kafka port only."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(
            names.kafka_bootstrap_service(cluster), namespace, names.cluster_labels(cluster, "broker"), owner
        ),
        "spec": {
            "selector": names.broker_selector(cluster),
            "ports": [{"name": "kafka", "port": names.KAFKA_PORT, "targetPort": "kafka"}],
        },
    }


def kafka_client_secret(cluster: str, namespace: str, *, password: str, owner: Mapping[str, Any]) -> Manifest:
    """What an application mounts to reach the cluster with a Kafka client, as the user
    `names.KAFKA_CLIENT_USER`: the settings one by one, a Java client's properties file and a
    librdkafka properties file (kcat's `-F`, confluent-kafka's config)."""
    bootstrap = names.kafka_bootstrap_servers(cluster, namespace)
    user = names.KAFKA_CLIENT_USER
    jaas = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{password}";'
    common = (
        f"bootstrap.servers={bootstrap}\n"
        f"security.protocol={names.KAFKA_SECURITY_PROTOCOL}\n"
        f"sasl.mechanism={names.KAFKA_SASL_MECHANISM}\n"
    )
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(
            names.kafka_client_secret(cluster),
            namespace,
            names.cluster_labels(cluster, "kafka-client"),
            owner,
        ),
        "type": "Opaque",
        "stringData": {
            "bootstrap.servers": bootstrap,
            "security.protocol": names.KAFKA_SECURITY_PROTOCOL,
            "sasl.mechanism": names.KAFKA_SASL_MECHANISM,
            "username": user,
            "password": password,
            "sasl.jaas.config": jaas,
            "client.properties": common + f"sasl.jaas.config={jaas}\n",
            "librdkafka.properties": common + f"sasl.username={user}\nsasl.password={password}\n",
        },
    }


def broker_disruption_budget(
    brokers: int, cluster: str, namespace: str, owner: Mapping[str, Any]
) -> Manifest:
    """At most one broker down by eviction. An integer `minAvailable`, because the pods' owner
    (`JbodBroker`) has no scale subresource for the disruption controller to count from."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(
            names.brokers_service(cluster), namespace, names.cluster_labels(cluster, "broker"), owner
        ),
        "spec": {
            "minAvailable": max(0, brokers - 1),
            "selector": {"matchLabels": names.broker_selector(cluster)},
        },
    }


def disk_entry(disk: model.Disk) -> dict[str, Any]:
    """A disk as written into a JbodBroker's spec."""
    entry: dict[str, Any] = {"name": disk.name, "size": disk.size}
    if disk.storage_class:
        entry["storageClass"] = disk.storage_class
    if disk.removed:
        entry["removed"] = True
    return entry


def jbod_broker(
    cluster: str, namespace: str, broker_id: int, disks: Sequence[model.Disk], owner: Mapping[str, Any]
) -> Manifest:
    return {
        "apiVersion": names.API_VERSION,
        "kind": "JbodBroker",
        "metadata": _meta(
            names.broker(cluster, broker_id), namespace, names.broker_labels(cluster, broker_id), owner
        ),
        "spec": {
            "clusterName": cluster,
            "brokerId": broker_id,
            "disks": [disk_entry(disk) for disk in disks],
        },
    }


# ---------------------------------------------------------------------------------------------
# Per-broker objects


def server_properties(
    spec: model.ClusterSpec, cluster: str, namespace: str, broker_id: int, disks: Sequence[model.Disk]
) -> str:
    """The broker's `server.properties` (protocol §4.2 keys)."""
    settings = spec.config
    host = names.broker_host(cluster, namespace, broker_id)
    lines = [
        f"node.id={broker_id}",
        "log.dirs=" + ",".join(names.log_dir(d.name) for d in disks),
        f"metadata.log.dir={names.metadata_log_dir()}",
        f"controller.url={names.controller_urls(cluster, namespace, spec.controller.replicas)}",
        f"listeners={names.KAFKA_SECURITY_PROTOCOL}://0.0.0.0:{names.KAFKA_PORT},http://0.0.0.0:{names.BROKER_HTTP_PORT}",
        f"advertised.listeners={names.KAFKA_SECURITY_PROTOCOL}://{host}:{names.KAFKA_PORT},http://{host}:{names.BROKER_HTTP_PORT}",
        f"cluster.token.file={names.TOKENS_DIR}/{names.SECRET_CLUSTER_TOKEN}",
        f"admin.token.file={names.TOKENS_DIR}/{names.SECRET_ADMIN_TOKEN}",
        f"broker.heartbeat.interval.ms={settings.heartbeat_interval_ms}",
        f"broker.session.timeout.ms={settings.session_timeout_ms}",
        f"log.dir.failure.timeout.ms={settings.log_dir_failure_timeout_ms}",
        f"log.dir.probe.interval.ms={settings.log_dir_probe_interval_ms}",
        f"min.insync.replicas={settings.min_insync_replicas}",
        f"replica.lag.time.max.ms={settings.replica_lag_time_max_ms}",
    ]
    return "\n".join(lines) + "\n"


def broker_config_map(  # noqa: PLR0913  the broker (spec, cluster, namespace, id, disks) and its owner
    spec: model.ClusterSpec,
    cluster: str,
    namespace: str,
    broker_id: int,
    disks: Sequence[model.Disk],
    owner: Mapping[str, Any],
) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(
            names.broker(cluster, broker_id), namespace, names.broker_labels(cluster, broker_id), owner
        ),
        "data": {"server.properties": server_properties(spec, cluster, namespace, broker_id, disks)},
    }


def volume_claim(  # noqa: PLR0913  the broker (cluster, namespace, id), then the claim's disk, volume and generation
    cluster: str,
    namespace: str,
    broker_id: int,
    *,
    disk: str,
    volume: model.Volume,
    generation: int | None,
) -> Manifest:
    """A broker's data claim (`generation` set) or metadata claim (`generation` None); never owned."""
    labels = {**names.broker_labels(cluster, broker_id), names.LABEL_DISK: disk}
    if generation is None:
        name = names.metadata_claim(cluster, broker_id)
    else:
        name = names.claim(cluster, broker_id, disk, generation)
        labels[names.LABEL_GENERATION] = str(generation)
    template = _claim_template(name, volume)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta(name, namespace, labels, None),
        "spec": template["spec"],
    }


def broker_pod(  # noqa: PLR0913  the broker (spec, cluster, namespace, id), then its disks, claims, image and owner
    spec: model.ClusterSpec,
    cluster: str,
    namespace: str,
    broker_id: int,
    *,
    disks: Sequence[model.Disk],
    claims: Mapping[str, str],
    image: str,
    owner: Mapping[str, Any],
) -> Manifest:
    """The broker pod: a `format` init container, then the agent; `claims` maps disk name → claim name."""
    config = server_properties(spec, cluster, namespace, broker_id, disks)
    data_mounts = [{"name": f"disk-{d.name}", "mountPath": names.disk_mount(d.name)} for d in disks]
    mounts = [
        {"name": "config", "mountPath": names.CONFIG_DIR, "readOnly": True},
        {"name": "tokens", "mountPath": names.TOKENS_DIR, "readOnly": True},
        {"name": "metadata", "mountPath": names.METADATA_MOUNT},
        _TMP_MOUNT,
        *data_mounts,
    ]
    volumes = [
        {"name": "config", "configMap": {"name": names.broker(cluster, broker_id)}},
        _tokens_volume(cluster),
        _TMP_VOLUME,
        {
            "name": "metadata",
            "persistentVolumeClaim": {"claimName": names.metadata_claim(cluster, broker_id)},
        },
        *({"name": f"disk-{d.name}", "persistentVolumeClaim": {"claimName": claims[d.name]}} for d in disks),
    ]
    properties = f"{names.CONFIG_DIR}/server.properties"
    common = {
        "image": image,
        "imagePullPolicy": spec.image_pull_policy,
        "securityContext": _CONTAINER_SECURITY,
    }
    init = {
        "name": "format",
        **common,
        "command": ["jbod-storage"],
        "args": ["format", f"--config={properties}", "--cluster-id=$(JBOD_CLUSTER_ID)", "--ignore-formatted"],
        "env": [_cluster_id_env(cluster)],
        "volumeMounts": mounts,
    }
    agent = {
        "name": "agent",
        **common,
        "command": ["jbod-agent"],
        "args": [f"--config={properties}"],
        "ports": [
            {"name": "kafka", "containerPort": names.KAFKA_PORT},
            {"name": "http", "containerPort": names.BROKER_HTTP_PORT},
        ],
        "readinessProbe": _probe("/readyz", names.BROKER_HTTP_PORT, period=2),
        "livenessProbe": _probe("/healthz", names.BROKER_HTTP_PORT, period=10, failures=6),
        "volumeMounts": mounts,
        "resources": _resources(spec.resources),
    }
    pod_spec = {
        "hostname": names.broker(cluster, broker_id),
        "subdomain": names.brokers_service(cluster),
        "readinessGates": [{"conditionType": names.READINESS_GATE}],
        "securityContext": _POD_SECURITY,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": max(30, spec.config.session_timeout_ms // 1000 * 2),
        "restartPolicy": "Always",
        "initContainers": [init],
        "containers": [agent],
        "volumes": volumes,
    }
    labels = names.broker_labels(cluster, broker_id)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **_meta(names.broker(cluster, broker_id), namespace, labels, owner),
            "annotations": {
                names.ANNOTATION_SPEC_HASH: spec_hash(pod_spec, config),
                names.ANNOTATION_CONFIG_HASH: spec_hash(config),
            },
        },
        "spec": pod_spec,
    }
